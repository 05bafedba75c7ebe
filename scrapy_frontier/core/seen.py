"""The URL-seen test: a small cache of fingerprints in front of the full set.

After Broder, Najork and Wiener, "Efficient URL caching for World Wide Web
crawling" (WWW 2003). Every link a crawler
extracts must be checked against the set of URLs already seen; that set
outgrows RAM, so a cache of recently seen 64-bit fingerprints answers most
tests and only misses go to the (disk) store. Links are local -- most point
into the host being crawled, and a few pages are linked from everywhere -- so
a cache of about 2^16 entries already answers most tests.

Cache semantics, shared by every policy: a cache only ever holds fingerprints
that were *inserted* (seen), so a hit always means "seen". The first test of a
URL is therefore always a miss (a *compulsory* miss). That is what makes a
cache safe to put in front of a store.

:class:`FingerprintCache` keeps the entries and counts the lookups; a policy
says what to evict when it is full (:meth:`FingerprintCache._make_room`).
The policies a crawl can use (``FRONTIER_SEEN_CACHE_POLICY``):

* :class:`ClockCache` -- one reference bit per entry and a hand sweeping a
  fixed ring (the paper's recommendation, about LRU's hit rate);
* :class:`LRUCache` -- least recently used, exact;
* :class:`RandomCache` -- evicts a uniformly random entry (seeded).

The policies that need the future or unbounded RAM (static, Belady's MIN,
infinite) exist for the simulation only, in ``benchmarks/seen_policies.py``.

No Scrapy or Twisted imports: :class:`SeenSet` takes plain integers, a store
and a cache, and the random policy takes an injected :class:`random.Random`.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

#: Broder et al.'s recommended cache size: 2^16 entries.
DEFAULT_CACHE_SIZE = 1 << 16

#: The policies :func:`make_cache` knows: those a live crawl can use.
POLICIES = ("clock", "lru", "random")


def fingerprint64(fp: bytes) -> int:
    """The first 8 bytes of a request fingerprint as a signed 64-bit integer.

    Signed so that it fits an SQLite ``INTEGER``. Scrapy's fingerprints are
    SHA1 digests, so the first 8 bytes are as good as any 8: two different
    URLs collide with probability about n^2 / 2^65 over n URLs (about
    3e-6 for ten million URLs).
    """
    if len(fp) < 8:
        raise ValueError(f"a fingerprint needs at least 8 bytes, got {len(fp)}")
    return int.from_bytes(fp[:8], "big", signed=True)


def _check_capacity(capacity: int) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"cache capacity must be an integer >= 1, got {capacity!r}")
    return capacity


class FingerprintCache:
    """A cache of fingerprints: the storage and the counted lookup every policy shares.

    Entries live in one dict, fingerprint to *reference bit*. :meth:`lookup`
    counts a hit or a miss, and a hit sets the entry's bit. :meth:`insert`
    adds a fingerprint with its bit set; when the cache is full it first calls
    :meth:`_make_room`, the one method a policy supplies: remove one entry.
    The bits are for the policy to read and clear (CLOCK's second chance).
    LRU needs an order rather than a bit: its dict is ordered, and its own
    lookup moves an entry to the back on each hit.
    """

    __slots__ = ("_cap", "_entries", "hits", "misses")

    def __init__(self, capacity: int = DEFAULT_CACHE_SIZE) -> None:
        self._cap = _check_capacity(capacity)
        self._entries: dict[int, bool] = {}
        self.hits = 0
        self.misses = 0

    @property
    def capacity(self) -> int | None:
        """Maximum number of entries; None for an unbounded cache."""
        return self._cap

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, fp: int) -> bool:
        return fp in self._entries

    def __iter__(self) -> Iterator[int]:
        return iter(self._entries)

    def referenced(self, fp: int) -> bool:
        """The reference bit of a cached fingerprint (for tests and inspection)."""
        return self._entries[fp]

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def lookup(self, fp: int) -> bool:
        """True if ``fp`` is cached; counts a hit or a miss, and a hit sets the bit."""
        bit = self._entries.get(fp)
        if bit is None:
            self.misses += 1
            return False
        if not bit:
            self._entries[fp] = True
        self.hits += 1
        return True

    def insert(self, fp: int) -> None:
        """Cache ``fp`` (after a missed lookup), making room first if the cache is full.

        Inserting a fingerprint that is already cached only sets its bit.
        """
        entries = self._entries
        if len(entries) >= self._cap and fp not in entries:
            self._make_room(fp)
        entries[fp] = True

    def _make_room(self, fp: int) -> None:
        """The cache is full and ``fp`` arrives: remove one entry from ``_entries``."""
        raise NotImplementedError(f"{type(self).__name__} never evicts")


class ClockCache(FingerprintCache):
    """CLOCK: a fixed ring of entries, one reference bit each, and a hand.

    A hit sets the entry's bit. To make room, the hand sweeps the ring: an
    entry whose bit is set loses it and is passed over (its second chance),
    the first entry whose bit is clear is replaced. A new entry starts with
    its bit set, so it survives at least one full sweep. The bits are the
    ``True``/``False`` singletons: no per-entry objects beyond the
    fingerprint itself.
    """

    __slots__ = ("_hand", "_ring")

    def __init__(self, capacity: int = DEFAULT_CACHE_SIZE) -> None:
        super().__init__(capacity)
        self._ring: list[int] = []
        self._hand = 0

    def _make_room(self, fp: int) -> None:
        bits = self._entries
        ring = self._ring
        if not ring:
            # Nothing was evicted yet, so the dict's order is the arrival order.
            ring = self._ring = list(bits)
        hand = self._hand
        cap = self._cap
        while True:
            victim = ring[hand]
            if not bits[victim]:
                break
            bits[victim] = False
            hand += 1
            if hand == cap:
                hand = 0
        del bits[victim]
        ring[hand] = fp
        hand += 1
        self._hand = 0 if hand == cap else hand


class LRUCache(FingerprintCache):
    """Least recently used, exact: the entries in an ordered dict, oldest first."""

    __slots__ = ()
    _entries: OrderedDict[int, bool]

    def __init__(self, capacity: int = DEFAULT_CACHE_SIZE) -> None:
        super().__init__(capacity)
        self._entries = OrderedDict()

    def lookup(self, fp: int) -> bool:
        # A hit moves the entry to the back, so LRU has its own lookup: calling the
        # base's from here would add a frame to every lookup, and cost about a third.
        entries = self._entries
        if fp in entries:
            entries.move_to_end(fp)
            self.hits += 1
            return True
        self.misses += 1
        return False

    def _make_room(self, fp: int) -> None:
        self._entries.popitem(last=False)

    def order(self) -> list[int]:
        """Entries from least to most recently used."""
        return list(self._entries)


class RandomCache(FingerprintCache):
    """Random replacement: a full cache evicts a uniformly chosen entry.

    Deterministic for a given seeded ``rng``.
    """

    __slots__ = ("_rng", "_slots")

    def __init__(
        self, capacity: int = DEFAULT_CACHE_SIZE, rng: random.Random | None = None
    ) -> None:
        super().__init__(capacity)
        self._rng = rng if rng is not None else random.Random(0)
        self._slots: list[int] = []

    def _make_room(self, fp: int) -> None:
        slots = self._slots
        if not slots:
            # Nothing was evicted yet, so the dict's order is the arrival order.
            slots = self._slots = list(self._entries)
        slot = self._rng.randrange(self._cap)
        del self._entries[slots[slot]]
        slots[slot] = fp


def make_cache(
    policy: str, capacity: int = DEFAULT_CACHE_SIZE, *, rng: random.Random | None = None
) -> FingerprintCache:
    """Build a cache by policy name (one of :data:`POLICIES`; ``rng`` seeds ``random``)."""
    name = policy.strip().lower() if isinstance(policy, str) else policy
    if name == "clock":
        return ClockCache(capacity)
    if name == "lru":
        return LRUCache(capacity)
    if name == "random":
        return RandomCache(capacity, rng)
    raise ValueError(f"unknown cache policy {policy!r}; expected one of {', '.join(POLICIES)}")


def simulate(cache: FingerprintCache, trace: Iterable[int]) -> int:
    """Replay ``trace`` through ``cache`` (insert on every miss); returns the hits.

    Exactly what :meth:`SeenSet.seen` does to its cache, without a store.
    """
    lookup = cache.lookup
    insert = cache.insert
    hits = 0
    for fp in trace:
        if lookup(fp):
            hits += 1
        else:
            insert(fp)
    return hits


@runtime_checkable
class FingerprintStore(Protocol):
    """The full, persistent set of seen fingerprints behind the cache."""

    def contains(self, fp: int) -> bool: ...

    def add(self, fp: int) -> None: ...

    def add_many(self, fps: Iterable[int]) -> None: ...

    def __len__(self) -> int: ...

    def close(self) -> None: ...


class MemoryFingerprintStore:
    """A plain in-memory set: for tests, simulations and crawls without a job directory."""

    __slots__ = ("_set",)

    def __init__(self, fps: Iterable[int] = ()) -> None:
        self._set: set[int] = set(fps)

    def contains(self, fp: int) -> bool:
        return fp in self._set

    def add(self, fp: int) -> None:
        self._set.add(fp)

    def add_many(self, fps: Iterable[int]) -> None:
        self._set.update(fps)

    def __len__(self) -> int:
        return len(self._set)

    def close(self) -> None:
        pass


class SeenSet:
    """The URL-seen test: ``cache`` in front of ``store``.

    :meth:`seen` asks the cache first; on a miss it asks the store, and the
    fingerprint goes into the cache either way (into the store too if new).
    Counters: ``hits`` (answered by the cache), ``misses`` (the store was
    consulted) -- the cache's own counts, as the set is its cache's only user
    -- and ``store_hits`` (misses the store knew: seen, but evicted from or
    never in the cache).
    """

    __slots__ = ("cache", "store", "store_hits")

    def __init__(self, cache: FingerprintCache | None = None,
                 store: FingerprintStore | None = None) -> None:
        self.cache: FingerprintCache = cache if cache is not None else ClockCache()
        self.store: FingerprintStore = store if store is not None else MemoryFingerprintStore()
        self.store_hits = 0

    def seen(self, fp: int) -> bool:
        """True if ``fp`` was seen before; otherwise records it and returns False."""
        cache = self.cache
        if cache.lookup(fp):
            return True
        if self.store.contains(fp):
            self.store_hits += 1
            cache.insert(fp)
            return True
        self.store.add(fp)
        cache.insert(fp)
        return False

    @property
    def hits(self) -> int:
        return self.cache.hits

    @property
    def misses(self) -> int:
        return self.cache.misses

    @property
    def lookups(self) -> int:
        return self.cache.lookups

    @property
    def hit_rate(self) -> float:
        """Share of lookups answered by the cache alone (0.0 before any)."""
        return self.cache.hit_rate

    def __len__(self) -> int:
        """Number of distinct fingerprints seen (the store's size)."""
        return len(self.store)

    def close(self) -> None:
        self.store.close()
