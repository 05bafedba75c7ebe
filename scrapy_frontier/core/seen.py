"""The URL-seen test: a small cache of fingerprints in front of the full set.

After Broder, Najork and Wiener, "Efficient URL caching for World Wide Web
crawling" (WWW 2003). Every link a crawler
extracts must be checked against the set of URLs already seen; that set
outgrows RAM, so a cache of recently seen 64-bit fingerprints answers most
tests and only misses go to the (disk) store. Links are local -- most point
into the host being crawled, and a few pages are linked from everywhere -- so
a cache of about 2^16 entries already answers most tests.

Cache semantics, shared by every policy here: a cache only ever holds
fingerprints that were *inserted* (seen), so a hit always means "seen". The
first test of a URL is therefore always a miss (a *compulsory* miss), even for
:class:`StaticCache`, whose fixed set only reserves room for popular
fingerprints. That is what makes a cache safe to put in front of a store.

Policies:

* :class:`ClockCache` -- one reference bit per entry and a hand sweeping a
  fixed array (the paper's recommendation, about LRU's hit rate);
* :class:`LRUCache` -- least recently used, exact;
* :class:`RandomCache` -- evicts a uniformly random entry (seeded);
* :class:`StaticCache` -- a fixed set of the most frequent fingerprints,
  chosen up front, never changes;
* :class:`MinCache` -- Belady's clairvoyant policy, simulation only: it needs
  the whole future trace;
* :class:`InfiniteCache` -- never evicts: only compulsory misses, simulation
  only (it is the full set itself).

No Scrapy or Twisted imports: :class:`SeenSet` takes plain integers, a store
and a cache, and the random policy takes an injected :class:`random.Random`.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, runtime_checkable

#: Broder et al.'s recommended cache size: 2^16 entries.
DEFAULT_CACHE_SIZE = 1 << 16

#: Policies for a live crawl; the others need knowledge of the future.
ONLINE_POLICIES = ("clock", "lru", "random")
#: Every policy :func:`make_cache` knows.
POLICIES = ("clock", "lru", "random", "static", "min", "infinite")

#: Stands for "never used again" in next-use arrays.
NEVER = 1 << 62


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


@runtime_checkable
class FingerprintCache(Protocol):
    """What :class:`SeenSet` needs from a cache policy."""

    hits: int
    misses: int

    @property
    def capacity(self) -> int | None:
        """Maximum number of entries; None for an unbounded cache."""
        ...

    def lookup(self, fp: int) -> bool:
        """True if ``fp`` is cached; counts a hit or a miss and updates recency."""
        ...

    def insert(self, fp: int) -> None:
        """Cache ``fp`` (not cached), evicting another entry if full."""
        ...

    def __len__(self) -> int: ...


def _check_capacity(capacity: int) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"cache capacity must be an integer >= 1, got {capacity!r}")
    return capacity


class _Counted:
    __slots__ = ("hits", "misses")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class ClockCache(_Counted):
    """CLOCK: a fixed ring of entries, one reference bit each, and a hand.

    A hit sets the entry's bit. To make room, the hand sweeps the ring: an
    entry whose bit is set loses it and is passed over (its second chance),
    the first entry whose bit is clear is replaced. A new entry starts with
    its bit set, so it survives at least one full sweep. A dict maps each
    cached fingerprint to its bit (the ``True``/``False`` singletons: no
    per-entry objects beyond the fingerprint itself).
    """

    __slots__ = ("_bits", "_cap", "_hand", "_ring")

    def __init__(self, capacity: int = DEFAULT_CACHE_SIZE) -> None:
        super().__init__()
        self._cap = _check_capacity(capacity)
        self._ring: list[int] = []
        self._bits: dict[int, bool] = {}
        self._hand = 0

    @property
    def capacity(self) -> int:
        return self._cap

    def __len__(self) -> int:
        return len(self._ring)

    def __contains__(self, fp: int) -> bool:
        return fp in self._bits

    def __iter__(self) -> Iterator[int]:
        return iter(self._bits)

    def lookup(self, fp: int) -> bool:
        bit = self._bits.get(fp)
        if bit is None:
            self.misses += 1
            return False
        if not bit:
            self._bits[fp] = True
        self.hits += 1
        return True

    def insert(self, fp: int) -> None:
        bits = self._bits
        if fp in bits:
            bits[fp] = True
            return
        ring = self._ring
        if len(ring) < self._cap:
            ring.append(fp)
            bits[fp] = True
            return
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
        bits[fp] = True
        hand += 1
        self._hand = 0 if hand == cap else hand

    def referenced(self, fp: int) -> bool:
        """The reference bit of a cached fingerprint (for tests and inspection)."""
        return self._bits[fp]


class LRUCache(_Counted):
    """Least recently used, exact: an ordered dict, oldest first."""

    __slots__ = ("_cap", "_od")

    def __init__(self, capacity: int = DEFAULT_CACHE_SIZE) -> None:
        super().__init__()
        self._cap = _check_capacity(capacity)
        self._od: OrderedDict[int, None] = OrderedDict()

    @property
    def capacity(self) -> int:
        return self._cap

    def __len__(self) -> int:
        return len(self._od)

    def __contains__(self, fp: int) -> bool:
        return fp in self._od

    def lookup(self, fp: int) -> bool:
        try:
            self._od.move_to_end(fp)
        except KeyError:
            self.misses += 1
            return False
        self.hits += 1
        return True

    def insert(self, fp: int) -> None:
        od = self._od
        od[fp] = None
        od.move_to_end(fp)
        if len(od) > self._cap:
            od.popitem(last=False)

    def __iter__(self) -> Iterator[int]:
        return iter(self._od)

    def order(self) -> list[int]:
        """Entries from least to most recently used."""
        return list(self._od)


class RandomCache(_Counted):
    """Random replacement: a full cache evicts a uniformly chosen entry.

    Deterministic for a given seeded ``rng``.
    """

    __slots__ = ("_cap", "_index", "_keys", "_rng")

    def __init__(
        self, capacity: int = DEFAULT_CACHE_SIZE, rng: random.Random | None = None
    ) -> None:
        super().__init__()
        self._cap = _check_capacity(capacity)
        self._rng = rng if rng is not None else random.Random(0)
        self._keys: list[int] = []
        self._index: dict[int, int] = {}

    @property
    def capacity(self) -> int:
        return self._cap

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, fp: int) -> bool:
        return fp in self._index

    def __iter__(self) -> Iterator[int]:
        """Entries in slot order."""
        return iter(self._keys)

    def lookup(self, fp: int) -> bool:
        if fp in self._index:
            self.hits += 1
            return True
        self.misses += 1
        return False

    def insert(self, fp: int) -> None:
        index = self._index
        if fp in index:
            return
        keys = self._keys
        if len(keys) < self._cap:
            index[fp] = len(keys)
            keys.append(fp)
            return
        slot = self._rng.randrange(self._cap)
        del index[keys[slot]]
        keys[slot] = fp
        index[fp] = slot


class StaticCache(_Counted):
    """A fixed set of popular fingerprints, given up front; it never changes.

    Only those fingerprints are ever cached, and each only once it has been
    inserted (seen): a reserved slot fills on the first miss and stays. Any
    other fingerprint is never cached. ``popular`` is cut to ``capacity``.
    """

    __slots__ = ("_allowed", "_cap", "_present")

    def __init__(self, capacity: int, popular: Iterable[int]) -> None:
        super().__init__()
        self._cap = _check_capacity(capacity)
        allowed: set[int] = set()
        for fp in popular:
            if len(allowed) >= self._cap:
                break
            allowed.add(fp)
        self._allowed = frozenset(allowed)
        self._present: set[int] = set()

    @classmethod
    def from_trace(cls, capacity: int, trace: Iterable[int]) -> StaticCache:
        """The ``capacity`` most frequent fingerprints of ``trace`` (ties: first seen first)."""
        return cls(capacity, most_frequent(trace, capacity))

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def reserved(self) -> frozenset[int]:
        return self._allowed

    def __len__(self) -> int:
        return len(self._present)

    def __contains__(self, fp: int) -> bool:
        return fp in self._present

    def __iter__(self) -> Iterator[int]:
        return iter(self._present)

    def lookup(self, fp: int) -> bool:
        if fp in self._present:
            self.hits += 1
            return True
        self.misses += 1
        return False

    def insert(self, fp: int) -> None:
        if fp in self._allowed:
            self._present.add(fp)


def most_frequent(trace: Iterable[int], k: int) -> list[int]:
    """The ``k`` most frequent items of ``trace``; ties go to the item seen first."""
    counts = Counter(trace)  # insertion-ordered, and most_common's sort is stable
    return [fp for fp, _ in counts.most_common(k)]


def next_uses(trace: Sequence[int]) -> list[int]:
    """``out[t]``: the next index after ``t`` where ``trace[t]`` occurs again, else NEVER.

    One reverse pass with a dict of last-seen positions: O(n).
    """
    out = [NEVER] * len(trace)
    last: dict[int, int] = {}
    for t in range(len(trace) - 1, -1, -1):
        fp = trace[t]
        out[t] = last.get(fp, NEVER)
        last[fp] = t
    return out


class MinCache(_Counted):
    """Belady's clairvoyant policy (MIN / OPT): simulation only.

    Knows the whole future ``trace`` and must be driven along it: the t-th
    :meth:`lookup` must be for ``trace[t]`` (a ValueError says otherwise).
    When full, it keeps the fingerprints needed soonest: the entry (or the
    incoming fingerprint itself) whose next use is farthest away is the one
    left out. No policy can score more hits on the same trace with the same
    capacity, so it bounds what any real cache can do.

    Entries live in a max-heap by next use with lazy deletion; the heap is
    rebuilt when stale entries outnumber live ones, so memory stays O(capacity).
    """

    __slots__ = ("_cap", "_heap", "_next", "_pending", "_t", "_trace", "_when")

    def __init__(
        self, capacity: int, trace: Sequence[int], next_use: Sequence[int] | None = None
    ) -> None:
        super().__init__()
        self._cap = _check_capacity(capacity)
        self._trace = trace
        self._next = next_use if next_use is not None else next_uses(trace)
        if len(self._next) != len(trace):
            raise ValueError("next_use must have one entry per trace position")
        self._when: dict[int, int] = {}  # cached fp -> its next use
        self._heap: list[tuple[int, int]] = []  # (-next use, fp), possibly stale
        self._t = -1
        self._pending = False  # the last lookup missed and awaits insert()

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def position(self) -> int:
        """How many lookups have been made (the index of the next one)."""
        return self._t + 1

    def __len__(self) -> int:
        return len(self._when)

    def __contains__(self, fp: int) -> bool:
        return fp in self._when

    def __iter__(self) -> Iterator[int]:
        return iter(self._when)

    def lookup(self, fp: int) -> bool:
        t = self._t + 1
        if t >= len(self._trace) or self._trace[t] != fp:
            raise ValueError(
                f"MinCache lookup #{t} is for {fp}, but the trace it was built from "
                + ("has ended" if t >= len(self._trace) else f"has {self._trace[t]} there")
                + ": MIN needs the exact future and can only replay its trace"
            )
        self._t = t
        when = self._when
        if fp in when:
            nxt = self._next[t]
            when[fp] = nxt
            heapq.heappush(self._heap, (-nxt, fp))
            if len(self._heap) > 2 * self._cap + 64:
                self._compact()
            self.hits += 1
            self._pending = False
            return True
        self.misses += 1
        self._pending = True
        return False

    def insert(self, fp: int) -> None:
        if fp in self._when:
            return
        if not self._pending or self._trace[self._t] != fp:
            raise ValueError("MinCache.insert() must follow a missed lookup of that fingerprint")
        self._pending = False
        nxt = self._next[self._t]
        if nxt == NEVER:
            return  # never needed again: caching it can only cost
        when = self._when
        heap = self._heap
        if len(when) >= self._cap:
            while True:
                neg, victim = heap[0]
                if when.get(victim) == -neg:
                    break
                heapq.heappop(heap)  # stale
            if -neg <= nxt:
                return  # every cached entry is needed before this one
            heapq.heappop(heap)
            del when[victim]
        when[fp] = nxt
        heapq.heappush(heap, (-nxt, fp))

    def _compact(self) -> None:
        self._heap = [(-nxt, fp) for fp, nxt in self._when.items()]
        heapq.heapify(self._heap)


class InfiniteCache(_Counted):
    """Never evicts: every miss is compulsory (the first test of a URL).

    Simulation only: it is the full seen-set, in RAM.
    """

    __slots__ = ("_set",)

    def __init__(self) -> None:
        super().__init__()
        self._set: set[int] = set()

    @property
    def capacity(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._set)

    def __contains__(self, fp: int) -> bool:
        return fp in self._set

    def __iter__(self) -> Iterator[int]:
        return iter(self._set)

    def lookup(self, fp: int) -> bool:
        if fp in self._set:
            self.hits += 1
            return True
        self.misses += 1
        return False

    def insert(self, fp: int) -> None:
        self._set.add(fp)


def make_cache(
    policy: str,
    capacity: int = DEFAULT_CACHE_SIZE,
    *,
    rng: random.Random | None = None,
    trace: Sequence[int] | None = None,
    popular: Iterable[int] | None = None,
    simulation: bool = False,
) -> FingerprintCache:
    """Build a cache by policy name (one of :data:`POLICIES`).

    * ``"clock"``, ``"lru"``, ``"random"`` (``rng``: a seeded random.Random);
    * ``"static"``: needs ``popular`` (fingerprints, most popular first) or a
      ``trace`` to count them in;
    * ``"min"``: needs the whole future ``trace``; simulation only;
    * ``"infinite"``: unbounded, ``capacity`` ignored; simulation only
      (pass ``simulation=True`` or a ``trace``).
    """
    name = policy.strip().lower() if isinstance(policy, str) else policy
    if name == "clock":
        return ClockCache(capacity)
    if name == "lru":
        return LRUCache(capacity)
    if name == "random":
        return RandomCache(capacity, rng)
    if name == "static":
        if popular is not None:
            return StaticCache(capacity, popular)
        if trace is not None:
            return StaticCache.from_trace(capacity, trace)
        raise ValueError(
            "the 'static' cache policy needs its fixed set up front: pass popular= "
            "(fingerprints, most popular first) or trace= to count them in"
        )
    if name == "min":
        if trace is None:
            raise ValueError(
                "the 'min' cache policy (Belady's clairvoyant MIN) needs the whole future "
                "trace and exists for simulations only: pass trace=, or use 'clock' "
                "(recommended), 'lru' or 'random' in a crawl"
            )
        return MinCache(capacity, trace)
    if name == "infinite":
        if not simulation and trace is None:
            raise ValueError(
                "the 'infinite' cache policy keeps every fingerprint in RAM and exists for "
                "simulations only (pass simulation=True); use 'clock', 'lru' or 'random' "
                "in a crawl"
            )
        return InfiniteCache()
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
    consulted), ``store_hits`` (misses the store knew: seen, but evicted from
    or never in the cache).
    """

    __slots__ = ("cache", "hits", "misses", "store", "store_hits")

    def __init__(self, cache: FingerprintCache | None = None,
                 store: FingerprintStore | None = None) -> None:
        self.cache: FingerprintCache = cache if cache is not None else ClockCache()
        self.store: FingerprintStore = store if store is not None else MemoryFingerprintStore()
        self.hits = 0
        self.misses = 0
        self.store_hits = 0

    def seen(self, fp: int) -> bool:
        """True if ``fp`` was seen before; otherwise records it and returns False."""
        cache = self.cache
        if cache.lookup(fp):
            self.hits += 1
            return True
        self.misses += 1
        if self.store.contains(fp):
            self.store_hits += 1
            cache.insert(fp)
            return True
        self.store.add(fp)
        cache.insert(fp)
        return False

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float:
        """Share of lookups answered by the cache alone (0.0 before any)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __len__(self) -> int:
        """Number of distinct fingerprints seen (the store's size)."""
        return len(self.store)

    def close(self) -> None:
        self.store.close()
