"""One crawl's frontier split into partitions, each in one Redis Cluster slot.

A host lives in exactly one partition, chosen by a hash of its host key, so each host's
politeness stays in one partition's scripts, on one Redis node's clock. The partition's
seen set goes with it (the push script tests it atomically with the push); the page
history is split the same number of ways by fingerprint (a record is only ever read or
written on its own).

Every key of partition ``i`` carries one hash tag, so each partition's scripts run on
one node of a Redis Cluster. With ``FRONTIER_REDIS_KEY = "quotes:frontier:"``::

    {quotes:frontier:p0}:meta ...    the frontier of partition 0 (see frontier.py)
    {quotes:frontier:p0}seen:...     its seen set
    {quotes:history:p0}:...          history partition 0 (FRONTIER_REDIS_HISTORY_KEY)

One partition on one Redis (the default) is the unpartitioned layout, unchanged:
``quotes:frontier:meta``, ``quotes:seen:...``, ``quotes:history:...``. A crawl keeps the
partition count it started with: each partition's meta hash records it, and opening the
crawl with another count is refused (a host would move to another partition).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from scrapy_frontier.backends.redis.connection import guard
from scrapy_frontier.backends.redis.frontier import (
    Completion,
    Finished,
    Quarantined,
    RedisFrontier,
    RedisLease,
    RoundReply,
    SharedCensus,
)
from scrapy_frontier.backends.redis.history import RedisHistoryStore
from scrapy_frontier.backends.redis.seen import RedisSeenSet
from scrapy_frontier.core.history import PageRecord
from scrapy_frontier.errors import RedisFrontierDataError

T = TypeVar("T")
Push = tuple[str, int, bytes, "tuple[str, int, bool] | None"]


def partition_of(host: str, count: int) -> int:
    """The partition of ``host`` among ``count`` (stable across processes and runs)."""
    if count == 1:
        return 0
    digest = hashlib.blake2b(host.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


@dataclass(frozen=True, slots=True)
class Layout:
    """The key prefixes of one crawl's partitions (``%(spider)s`` already filled in)."""

    frontier: str
    seen: str
    history: str
    count: int = 1
    tagged: bool = False
    """Each partition's keys carry a hash tag: partitioned, or on a Redis Cluster."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"partitions must be >= 1, got {self.count}")
        if self.tagged:
            for prefix in (self.frontier, self.history):
                if "{" in prefix or "}" in prefix:
                    raise ValueError(
                        f"the key prefix {prefix!r} holds a hash tag ({{...}}); partitioned "
                        "(or on a Redis Cluster), each partition adds its own: take the braces "
                        "out of FRONTIER_REDIS_KEY / FRONTIER_REDIS_HISTORY_KEY")

    def frontier_prefix(self, i: int) -> str:
        return f"{{{self.frontier}p{i}}}:" if self.tagged else self.frontier

    def seen_prefix(self, i: int) -> str:
        return f"{{{self.frontier}p{i}}}seen:" if self.tagged else self.seen

    def history_prefix(self, i: int) -> str:
        return f"{{{self.history}p{i}}}:" if self.tagged else self.history

    def describe(self) -> str:
        """The frontier's keys, for messages."""
        if not self.tagged:
            return f"{self.frontier}*"
        if self.count == 1:
            return f"{self.frontier_prefix(0)}*"
        return f"{{{self.frontier}p0..{self.count - 1}}}:*"

    def other_layout(self) -> str:
        """The meta key the other layout of this crawl would have (checked at open)."""
        return (self.frontier + "meta") if self.tagged else f"{{{self.frontier}p0}}:meta"


def check_layout(client: Any, layout: Layout) -> None:
    """Refuse to open a crawl whose keys exist in the other layout (partitioned or not):
    its hosts would be looked for in the wrong keys."""
    other = layout.other_layout()
    found = guard(client, layout.frontier, "checking the partition layout",
                  lambda: client.exists(other))
    if found:
        if layout.tagged:
            was = "unpartitioned (FRONTIER_REDIS_PARTITIONS = 1 on a single Redis)"
        else:
            was = "partitioned (FRONTIER_REDIS_PARTITIONS > 1, or FRONTIER_REDIS_CLUSTER)"
        raise RedisFrontierDataError(
            f"this crawl's keys exist as {was}: {other!r} is there. A crawl keeps the layout "
            "it started with: set FRONTIER_REDIS_PARTITIONS (and FRONTIER_REDIS_CLUSTER) as "
            "when it started to continue it, or use another FRONTIER_REDIS_KEY for a new crawl. "
            "Nothing was changed."
        )


class PartitionedFrontier:
    """The crawl's frontier over its partitions, with :class:`RedisFrontier`'s interface
    where the driver and the commands use it. One partition: calls go straight through."""

    def __init__(self, parts: Sequence[RedisFrontier], layout: Layout) -> None:
        if len(parts) != layout.count:
            raise ValueError(f"{layout.count} partitions expected, got {len(parts)}")
        self.parts = list(parts)
        self.layout = layout
        self.count = len(parts)
        self.liveness = parts[0].liveness
        self.prefix = parts[0].prefix if self.count == 1 else layout.describe()
        # What each partition's last round read: hosts ready then, when its next host
        # becomes ready (monotonic; inf: none known), and its sizes.
        self._ready = [0] * self.count
        self._wake_at = [0.0] * self.count
        self._sizes = [(0, 0, 0)] * self.count
        self._turn = 0
        self.censuses: list[SharedCensus] = []

    # Lease ids count per partition: across the crawl a lease is known by
    # ``id * count + partition``, so that a worker's leases never share an id.

    def _crawl_lease(self, lease: RedisLease, i: int) -> RedisLease:
        if self.count == 1:
            return lease
        return replace(lease, ticket=lease.ticket * self.count + i)

    def _partition_lease(self, lease: RedisLease) -> RedisLease:
        if self.count == 1:
            return lease
        return replace(lease, ticket=lease.ticket // self.count)

    def part(self, host: str) -> RedisFrontier:
        return self.parts[partition_of(host, self.count)]

    def index(self, host: str) -> int:
        return partition_of(host, self.count)

    @property
    def reclaimed(self) -> int:
        return sum(p.reclaimed for p in self.parts)

    def key(self, name: str) -> str:
        """A key's name for messages (partitioned: each partition has one)."""
        if self.count == 1:
            return self.parts[0].key(name)
        return f"{{{self.layout.frontier}p*}}:{name}"

    def _grouped(self, items: Iterable[T], host: Callable[[T], str]) -> list[list[tuple[int, T]]]:
        groups: list[list[tuple[int, T]]] = [[] for _ in self.parts]
        for n, item in enumerate(items):
            groups[partition_of(host(item), self.count)].append((n, item))
        return groups

    # -- the rounds ---------------------------------------------------------------------

    def push_unseen(self, entries: Iterable[Push]) -> list[int]:
        entries = list(entries)
        out = [0] * len(entries)
        for part, group in zip(self.parts, self._grouped(entries, lambda e: e[0]), strict=True):
            if group:
                for (n, _), got in zip(group, part.push_unseen(e for _, e in group),
                                       strict=True):
                    out[n] = got
        return out

    def push_many(self, entries: Iterable[tuple[str, int, bytes]]) -> list[bool]:
        return [x == 1 for x in self.push_unseen((h, lv, i, None) for h, lv, i in entries)]

    def push(self, host: str, level: int, item: bytes) -> bool:
        return self.part(host).push(host, level, item)

    def shares(self, want: int, everywhere: bool, ahead: float = 0.0) -> list[int]:
        """How many of ``want`` claims each partition is asked for: first the partitions
        whose last round left hosts ready, in proportion to them; what is left probes, in
        turn, the partitions that may have some by now (never read, or within ``ahead``
        of the wake-up they read; every one, ``everywhere``: a poll looks at all of them)."""
        n = self.count
        if n == 1:
            return [want]
        out = [0] * n
        if want <= 0:
            return out
        order = [(self._turn + k) % n for k in range(n)]
        self._turn = (self._turn + 1) % n
        ready = self._ready
        known = sum(ready)
        left = want
        if known:
            for i in order:  # one each first, in turn, so that a small want still spreads
                if ready[i] and left:
                    out[i] += 1
                    left -= 1
            rest = min(left, known - sum(out))
            for i in order:  # then in proportion to the ready hosts, up to their number
                extra = min(left, ready[i] - out[i], rest * ready[i] // known)
                out[i] += max(0, extra)
                left -= max(0, extra)
        if left:
            now = time.monotonic()
            probes = [i for i in order if not ready[i]
                      and (everywhere or self._wake_at[i] <= now + ahead)]
            for k, i in enumerate(probes):
                share = left // len(probes) + (k < left % len(probes))
                out[i] += share
        return out

    def round(self, pushes: Iterable[Push], finished: Iterable[Finished], want: int, *,
              everywhere: bool = False, ahead: float = 0.0) -> RoundReply:
        """One round over the partitions, merged as one partition's reply.

        Every push lands before any completion: a fetch's lease is let go only once the
        links it found are queued, whichever partitions hold them, so the crawl never looks
        empty between the two. A partition with only pushes, or with the round's only
        completions, is one script call; claims ride on those calls. The sizes of a
        partition not called are those its last round read; when the sum says idle, every
        partition is read twice and the crawl is idle only if nothing moved in between
        (see :meth:`settled`)."""
        pushes, done = list(pushes), list(finished)
        if self.count == 1:
            reply = self.parts[0].round(pushes, done, want, ahead=ahead)
            self._sizes[0] = (reply.front, reply.back, reply.in_flight)
            return reply
        push_groups = self._grouped(pushes, lambda e: e[0])
        done_groups = self._grouped(done, lambda f: f.lease.host)
        # Hosts whose leases end in this round, for pushes sent before their completions.
        ending = {f.lease.host for f in done}
        shares = self.shares(want, everywhere, ahead)
        pushed = [0] * len(pushes)
        completed: list[Completion | None] = [None] * len(done)
        leases: list[RedisLease] = []
        wakes: list[float] = []
        reclaimed = 0
        called: set[int] = set()

        def call(i: int, share: int, with_pushes: bool, with_done: bool) -> None:
            part = self.parts[i]
            pg = push_groups[i] if with_pushes else []
            dg = done_groups[i] if with_done else []
            reply = part.round(
                [e for _, e in pg],
                [f._replace(lease=self._partition_lease(f.lease)) for _, f in dg], share,
                count_ready=True, ahead=ahead, ending=ending)
            called.add(i)
            for (n, _), got in zip(pg, reply.pushed, strict=True):
                pushed[n] = got
            for (n, _), comp in zip(dg, reply.completed, strict=True):
                completed[n] = comp
            leases.extend(self._crawl_lease(lease, i) for lease in reply.leases)
            nonlocal reclaimed
            reclaimed += reply.reclaimed
            if reply.wakeup is not None:
                wakes.append(reply.wakeup)
            if reply.wakeup is not None:  # read by a claim or a completion
                self._wake_at[i] = time.monotonic() + reply.wakeup
            elif share:
                self._wake_at[i] = math.inf
            if reply.pushed:
                self._wake_at[i] = 0.0  # its pushes may have made a host ready
            self._ready[i] = reply.ready_hosts
            self._sizes[i] = (reply.front, reply.back, reply.in_flight)

        completing = [i for i in range(self.count) if done_groups[i]]
        # The one partition with completions may push in the same call, last (its script
        # pushes before it completes); with several, each pushes first, then completes.
        last = completing[0] if len(completing) == 1 else None
        for i in range(self.count):
            if push_groups[i] and i != last:
                call(i, 0 if i in completing else shares[i], True, False)
        for i in completing:
            call(i, shares[i], i == last, True)
        for i in range(self.count):
            if shares[i] and i not in called:
                call(i, shares[i], False, False)
        # Claims that fell short where the guess was wrong: once more, from the partitions
        # that have hosts ready now (their pushes of this round may have made them so).
        missing = want - len(leases)
        if missing > 0:
            for i in sorted(called, key=lambda i: -self._ready[i]):
                if missing <= 0:
                    break
                if self._ready[i]:
                    before = len(leases)
                    call(i, min(missing, self._ready[i]), False, False)
                    missing -= len(leases) - before
            # Then the partitions not asked yet that may have some by now, one by one.
            for i in range(self.count):
                if missing <= 0:
                    break
                if i not in called and self._wake_at[i] <= time.monotonic() + ahead:
                    before = len(leases)
                    call(i, missing, False, False)
                    missing -= len(leases) - before
        now = time.monotonic()
        for i in set(range(self.count)) - called:  # their wake-ups, as last read
            if now < self._wake_at[i] < math.inf:
                wakes.append(self._wake_at[i] - now)
        settled = True
        if not any(map(sum, self._sizes)):
            settled = self.settled()
        front, back, in_flight = (sum(col) for col in zip(*self._sizes, strict=True))
        return RoundReply(pushed, completed, leases, min(wakes) if wakes else None, front, back,
                          in_flight, reclaimed, sum(self._ready), settled)

    def settled(self) -> bool:
        """Whether every partition is empty and unleased, read twice with nothing pushed,
        completed or taken back in between (the partitions are read one after another, not
        at one instant: a fetch completed in one after the first read of another that its
        links went to shows as a change of counts). Updates the sizes it read."""
        first = [part.activity() for part in self.parts]
        if any(sum(a[:3]) for a in first):
            self._sizes = [a[:3] for a in first]
            return True  # not idle: nothing to settle
        second = [part.activity() for part in self.parts]
        self._sizes = [a[:3] for a in second]
        return first == second

    # -- per host ----------------------------------------------------------------------

    def complete(self, lease: RedisLease, fetch_seconds: float, **kw: Any) -> Completion | None:
        return self.part(lease.host).complete(self._partition_lease(lease), fetch_seconds, **kw)

    def pop(self) -> RedisLease | None:
        for _ in range(self.count):
            i = self._turn
            self._turn = (self._turn + 1) % self.count
            lease = self.parts[i].pop()
            if lease is not None:
                return self._crawl_lease(lease, i)
        return None

    claim = pop

    def set_min_rest(self, host: str, seconds: float) -> None:
        self.part(host).set_min_rest(host, seconds)

    def min_rest(self, host: str) -> float:
        return self.part(host).min_rest(host)

    def retire(self, host: str) -> list[bytes]:
        return self.part(host).retire(host)

    def control(self, op: str, host: str, value: float | int = 0) -> list[Any]:
        return self.part(host).control(op, host, value)

    def contain(self, host: str, fetched: int, allowance: int) -> int:
        return self.part(host).contain(host, fetched, allowance)

    def traps(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for part in self.parts:
            out.update(part.traps())
        return out

    def is_retired(self, host: str) -> bool:
        return self.part(host).is_retired(host)

    def next_contact(self, host: str) -> float | None:
        return self.part(host).next_contact(host)

    def quarantine(self, entries: list[Quarantined]) -> None:
        for part, group in zip(self.parts, self._grouped(entries, lambda e: e.host),
                               strict=True):
            if group:
                part.quarantine([e for _, e in group])

    # -- the workers -------------------------------------------------------------------

    def renew(self, worker: str, leases: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """A heartbeat in every partition (each keeps its own live workers); the pairs that
        were not renewed, with the crawl's lease ids."""
        groups = self._grouped(leases, lambda lease: lease[0])
        lost: list[tuple[str, int]] = []
        for part, group in zip(self.parts, groups, strict=True):
            pairs = [pair for _, pair in group]
            gone = set(part.renew(worker, [(host, ticket // self.count)
                                           for host, ticket in pairs]))
            lost += [(host, ticket) for host, ticket in pairs
                     if (host, ticket // self.count) in gone]
        return lost

    def leave(self, worker: str) -> None:
        for part in self.parts:
            part.leave(worker)

    def live_workers(self) -> int:
        return max(part.live_workers() for part in self.parts)

    def save_delay_rule(self) -> None:
        for part in self.parts:
            part.save_delay_rule()

    def server_time(self) -> float:
        return self.parts[0].server_time()

    # -- the whole crawl ---------------------------------------------------------------

    def sizes(self) -> tuple[int, int, int]:
        self._sizes = [part.sizes() for part in self.parts]
        front, back, leases = (sum(col) for col in zip(*self._sizes, strict=True))
        return front, back, leases

    def idle(self) -> bool:
        return sum(self.sizes()) == 0

    def __len__(self) -> int:
        front, back, _ = self.sizes()
        return front + back

    @property
    def in_flight(self) -> int:
        return self.sizes()[2]

    def census(self) -> SharedCensus:
        """The partitions' censuses added up (each kept in :attr:`censuses`)."""
        cs = [part.census() for part in self.parts]
        #: Each partition's census, as the last :meth:`census` read them.
        self.censuses = cs
        return SharedCensus(*(sum(col) for col in zip(*cs, strict=True)))

    def policies(self) -> dict[str, Any]:
        """The steered policy entries (kept in the first partition: one for the crawl)."""
        return self.parts[0].policies()

    def set_policy(self, key: str, fields: dict[str, Any] | None) -> bool:
        return self.parts[0].set_policy(key, fields)

    def budget_stats(self) -> dict[str, int]:
        return _summed(part.budget_stats() for part in self.parts)

    def stats(self) -> dict[str, int]:
        return _summed(part.stats() for part in self.parts)

    def quarantine_size(self) -> int:
        return sum(part.quarantine_size() for part in self.parts)

    def take_dropped(self, limit: int = 10_000) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        for part in self.parts:
            out += part.take_dropped(limit - len(out))
            if len(out) >= limit:
                break
        return out

    def leases(self) -> list[RedisLease]:
        return [self._crawl_lease(lease, i) for i, part in enumerate(self.parts)
                for lease in part.leases()]

    def iter_queued(self) -> Iterator[tuple[str, int, bytes]]:
        for part in self.parts:
            yield from part.iter_queued()

    def next_wakeup(self) -> float | None:
        wakes = [w for w in (part.next_wakeup() for part in self.parts) if w is not None]
        return min(wakes) if wakes else None

    def clear(self) -> int:
        return sum(part.clear() for part in self.parts)


def _summed(dicts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


class PartitionedSeen:
    """Each partition's seen set: a request's fingerprint is kept in its host's partition."""

    def __init__(self, sets: Sequence[RedisSeenSet]) -> None:
        self.sets = list(sets)
        self.count = len(self.sets)

    def of(self, host: str) -> RedisSeenSet:
        return self.sets[partition_of(host, self.count)]

    def bucket(self, host: str, fp: int) -> tuple[str, int]:
        return self.of(host).bucket(fp)

    def contains_many(self, entries: Sequence[tuple[str, int]]) -> list[bool]:
        """Whether each (host, fingerprint) is in its partition's seen set."""
        out = [False] * len(entries)
        groups: list[list[int]] = [[] for _ in self.sets]
        for n, (host, _) in enumerate(entries):
            groups[partition_of(host, self.count)].append(n)
        for seen, group in zip(self.sets, groups, strict=True):
            if group:
                for n, got in zip(group, seen.contains_many([entries[n][1] for n in group]),
                                  strict=True):
                    out[n] = got
        return out


class PartitionedHistory:
    """The page history over its partitions (by fingerprint), as one HistoryStore."""

    def __init__(self, stores: Sequence[RedisHistoryStore]) -> None:
        self.stores = list(stores)
        self.count = len(self.stores)
        self.prefix = self.stores[0].prefix
        self.client = self.stores[0].client
        self._turn = 0

    def of(self, fp: int) -> RedisHistoryStore:
        return self.stores[fp % self.count]

    def key(self, name: str) -> str:
        return self.stores[0].key(name)

    @property
    def quarantined(self) -> int:
        return sum(s.quarantined for s in self.stores)

    @quarantined.setter
    def quarantined(self, value: int) -> None:
        raise AttributeError("each partition counts its own quarantined records")

    def quarantine_size(self) -> int:
        return sum(s.quarantine_size() for s in self.stores)

    def get(self, fp: int) -> PageRecord | None:
        return self.of(fp).get(fp)

    def get_many(self, fps: Sequence[int]) -> dict[int, PageRecord]:
        groups: list[list[int]] = [[] for _ in self.stores]
        for fp in fps:
            groups[fp % self.count].append(fp)
        out: dict[int, PageRecord] = {}
        for store, group in zip(self.stores, groups, strict=True):
            if group:
                out.update(store.get_many(group))
        return out

    def prefetch(self, fps: Sequence[int]) -> None:
        """Each partition reads its share of ``fps`` together (see RedisHistoryStore)."""
        groups: list[list[int]] = [[] for _ in self.stores]
        for fp in fps:
            groups[fp % self.count].append(fp)
        for store, group in zip(self.stores, groups, strict=True):
            if group:
                store.prefetch(group)

    def put(self, record: PageRecord) -> None:
        self.of(record.fp).put(record)

    def take_due(self, until: float, limit: int, hold_until: float) -> list[PageRecord]:
        """Up to ``limit`` due pages, claimed from the partitions in turn (none is claimed
        beyond ``limit``: a claimed page waits out its hold)."""
        out: list[PageRecord] = []
        start = self._turn
        self._turn = (self._turn + 1) % self.count
        for k in range(self.count):
            if len(out) >= limit:
                break
            out += self.stores[(start + k) % self.count].take_due(until, limit - len(out),
                                                                    hold_until)
        return out

    def due(self, after: tuple[float, int], until: float, limit: int) -> list[PageRecord]:
        rows = [r for s in self.stores for r in s.due(after, until, limit)]
        rows.sort(key=lambda r: (r.eligible, r.fp))
        return rows[:limit]

    def count_due(self, until: float, limit: int | None = None) -> int:
        return sum(s.count_due(until, limit) for s in self.stores)

    def next_due(self) -> float | None:
        dues = [d for d in (s.next_due() for s in self.stores) if d is not None]
        return min(dues) if dues else None

    def evict(self, keep: int) -> int:
        share = -(-keep // self.count)
        return sum(s.evict(share) for s in self.stores)

    def scan(self) -> Iterator[PageRecord]:
        for s in self.stores:
            yield from s.scan()

    def __len__(self) -> int:
        return sum(len(s) for s in self.stores)

    def unsaved(self) -> int:
        return sum(s.unsaved() for s in self.stores)

    def load_trust(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for s in self.stores:
            out.update(s.load_trust())  # a host's counts live in one partition
        return out

    def add_trust(self, host: str, agreed: int, disagreed: int) -> None:
        self.stores[partition_of(host, self.count)].add_trust(host, agreed, disagreed)

    def sync(self) -> None:
        for s in self.stores:
            s.sync()

    def flush(self) -> None:
        for s in self.stores:
            s.flush()

    def marks(self) -> int:
        return self.stores[0].marks()

    def marked(self) -> None:
        self.stores[0].marked()

    def close(self) -> None:
        for s in self.stores:
            s.close()


def open_frontier(client: Any, layout: Layout, **kwargs: Any) -> PartitionedFrontier:
    """The crawl's frontier in ``layout`` (``kwargs``: as :class:`RedisFrontier` takes)."""
    check_layout(client, layout)
    parts = [RedisFrontier(client, layout.frontier_prefix(i),
                           partition=(i, layout.count) if layout.tagged else None, **kwargs)
             for i in range(layout.count)]
    return PartitionedFrontier(parts, layout)


def open_seen(client: Any, layout: Layout, *, expected: int) -> PartitionedSeen:
    share = max(1, expected // layout.count)
    return PartitionedSeen([RedisSeenSet(client, layout.seen_prefix(i), expected=share)
                            for i in range(layout.count)])


def open_history(client: Any, layout: Layout,
                 check: Callable[[str, bytes | None], str | None] | None = None,
                 ) -> RedisHistoryStore | PartitionedHistory:
    if not layout.tagged:
        return RedisHistoryStore(client, layout.history, check)
    return PartitionedHistory([RedisHistoryStore(client, layout.history_prefix(i), check)
                               for i in range(layout.count)])
