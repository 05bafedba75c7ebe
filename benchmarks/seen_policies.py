"""The URL-seen cache policies that exist for the simulation only.

``bench_seen_cache.py`` compares the policies a crawl can use
(:mod:`scrapy_frontier.core.seen`: clock, lru, random) with three that a crawl
cannot: they need the future or unbounded RAM. Each is a
:class:`~scrapy_frontier.core.seen.FingerprintCache`, so it keeps the same
storage and counts, and a replay through it is a replay through a real cache:

* :class:`StaticCache` -- a fixed set of the most frequent fingerprints,
  chosen up front, never changes;
* :class:`MinCache` -- Belady's clairvoyant policy: it needs the whole future
  trace;
* :class:`InfiniteCache` -- never evicts: only compulsory misses (it is the
  full set itself).
"""

from __future__ import annotations

import heapq
import random
import sys
from collections import Counter
from collections.abc import Iterable, Sequence

from scrapy_frontier.core import seen
from scrapy_frontier.core.seen import DEFAULT_CACHE_SIZE, FingerprintCache, make_cache

#: The policies that need the future or the whole set in RAM.
SIMULATION_POLICIES = ("static", "min", "infinite")
#: Every policy :func:`make_simulation_cache` knows: the crawl's, then the simulation's.
POLICIES = (*seen.POLICIES, *SIMULATION_POLICIES)

#: Stands for "never used again" in next-use arrays.
NEVER = 1 << 62


class StaticCache(FingerprintCache):
    """A fixed set of popular fingerprints, given up front; it never changes.

    Only those fingerprints are ever cached, and each only once it has been
    inserted (seen): a reserved slot fills on the first miss and stays. Any
    other fingerprint is never cached. ``popular`` is cut to ``capacity``, so
    the cache is never full and never evicts.
    """

    __slots__ = ("_allowed",)

    def __init__(self, capacity: int, popular: Iterable[int]) -> None:
        super().__init__(capacity)
        allowed: set[int] = set()
        for fp in popular:
            if len(allowed) >= self._cap:
                break
            allowed.add(fp)
        self._allowed = frozenset(allowed)

    @classmethod
    def from_trace(cls, capacity: int, trace: Iterable[int]) -> StaticCache:
        """The ``capacity`` most frequent fingerprints of ``trace`` (ties: first seen first)."""
        return cls(capacity, most_frequent(trace, capacity))

    @property
    def reserved(self) -> frozenset[int]:
        return self._allowed

    def insert(self, fp: int) -> None:
        if fp in self._allowed:
            super().insert(fp)


class InfiniteCache(FingerprintCache):
    """Never evicts: every miss is compulsory (the first test of a URL).

    It is the full seen-set, in RAM.
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(sys.maxsize)

    @property
    def capacity(self) -> None:
        return None


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


class MinCache(FingerprintCache):
    """Belady's clairvoyant policy (MIN / OPT).

    Knows the whole future ``trace`` and must be driven along it: the t-th
    :meth:`lookup` must be for ``trace[t]`` (a ValueError says otherwise).
    When full, it keeps the fingerprints needed soonest: the entry (or the
    incoming fingerprint itself) whose next use is farthest away is the one
    left out. No policy can score more hits on the same trace with the same
    capacity, so it bounds what any real cache can do.

    Next uses live in a max-heap with lazy deletion; the heap is rebuilt when
    stale entries outnumber live ones, so memory stays O(capacity).
    """

    __slots__ = ("_heap", "_next", "_pending", "_t", "_trace", "_when")

    def __init__(
        self, capacity: int, trace: Sequence[int], next_use: Sequence[int] | None = None
    ) -> None:
        super().__init__(capacity)
        self._trace = trace
        self._next = next_use if next_use is not None else next_uses(trace)
        if len(self._next) != len(trace):
            raise ValueError("next_use must have one entry per trace position")
        self._when: dict[int, int] = {}  # cached fp -> its next use
        self._heap: list[tuple[int, int]] = []  # (-next use, fp), possibly stale
        self._t = -1
        self._pending = False  # the last lookup missed and awaits insert()

    @property
    def position(self) -> int:
        """How many lookups have been made (the index of the next one)."""
        return self._t + 1

    def lookup(self, fp: int) -> bool:
        t = self._t + 1
        if t >= len(self._trace) or self._trace[t] != fp:
            raise ValueError(
                f"MinCache lookup #{t} is for {fp}, but the trace it was built from "
                + ("has ended" if t >= len(self._trace) else f"has {self._trace[t]} there")
                + ": MIN needs the exact future and can only replay its trace"
            )
        self._t = t
        if FingerprintCache.lookup(self, fp):
            self._pending = False
            self._schedule(fp, self._next[t])
            if len(self._heap) > 2 * self._cap + 64:
                self._compact()
            return True
        self._pending = True
        return False

    def insert(self, fp: int) -> None:
        if fp in self._entries:
            return
        if not self._pending or self._trace[self._t] != fp:
            raise ValueError("MinCache.insert() must follow a missed lookup of that fingerprint")
        self._pending = False
        nxt = self._next[self._t]
        if nxt == NEVER:
            return  # never needed again: caching it can only cost
        if len(self._entries) >= self._cap and self._farthest() <= nxt:
            return  # every cached entry is needed before this one
        super().insert(fp)
        self._schedule(fp, nxt)

    def _make_room(self, fp: int) -> None:
        _, victim = heapq.heappop(self._heap)  # live: _farthest() dropped the stale tops
        del self._when[victim]
        del self._entries[victim]

    def _schedule(self, fp: int, nxt: int) -> None:
        self._when[fp] = nxt
        heapq.heappush(self._heap, (-nxt, fp))

    def _farthest(self) -> int:
        """The farthest next use of a cached entry, after dropping stale heap tops."""
        heap = self._heap
        when = self._when
        while True:
            neg, fp = heap[0]
            if when.get(fp) == -neg:
                return -neg
            heapq.heappop(heap)

    def _compact(self) -> None:
        self._heap = [(-nxt, fp) for fp, nxt in self._when.items()]
        heapq.heapify(self._heap)


def make_simulation_cache(
    policy: str,
    capacity: int = DEFAULT_CACHE_SIZE,
    *,
    rng: random.Random | None = None,
    trace: Sequence[int] | None = None,
    popular: Iterable[int] | None = None,
) -> FingerprintCache:
    """Build a cache by policy name (one of :data:`POLICIES`).

    * ``"clock"``, ``"lru"``, ``"random"``: :func:`~scrapy_frontier.core.seen.make_cache`
      (``rng``: a seeded random.Random);
    * ``"static"``: needs ``popular`` (fingerprints, most popular first) or a
      ``trace`` to count them in;
    * ``"min"``: needs the whole future ``trace``;
    * ``"infinite"``: unbounded, ``capacity`` ignored.
    """
    name = policy.strip().lower() if isinstance(policy, str) else policy
    if name in seen.POLICIES:
        return make_cache(name, capacity, rng=rng)
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
                "trace: pass trace="
            )
        return MinCache(capacity, trace)
    if name == "infinite":
        return InfiniteCache()
    raise ValueError(f"unknown cache policy {policy!r}; expected one of {', '.join(POLICIES)}")
