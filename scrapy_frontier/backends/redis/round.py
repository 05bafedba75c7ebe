"""One I/O round of the Redis driver, as a function of what it sends and what it reads.

The driver's I/O thread calls :meth:`RoundRunner.run` with the :class:`Round` the reactor
gathered and hands the :class:`RoundAnswer` back; nothing here touches the reactor or a
thread, so a test runs a round against a real Redis directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from scrapy_frontier.backends.redis.fence import LeaseFence
from scrapy_frontier.backends.redis.frontier import (
    HAND_BACK,
    Finished,
    Quarantined,
    RedisLease,
    SharedCensus,
)
from scrapy_frontier.backends.redis.partitions import PartitionedFrontier, PartitionedSeen

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_frontier.core.history import PageRecord
    from scrapy_frontier.core.recrawl import PageHint, Recrawler, Visit

logger = logging.getLogger("scrapy_frontier.scheduler")

#: Seconds between two reads of ``scrapy frontier recrawl``'s counter by a worker.
MARKS_INTERVAL = 2.0
#: Seconds between two reads of the crawl's shared budget counters.
BUDGET_INTERVAL = 5.0
#: Claims whose page records are read in one round trip.
HINTS_READ_TOGETHER = 500


@dataclass(slots=True)
class Pushed:
    fp: int
    """The request's fingerprint (its page history), and the first 8 bytes of ``item``."""
    key: int
    """The seen-set member: ``fp``, or an occurrence key (see Driver.push)."""
    dedupe: bool
    mark: bool
    start: bool
    host: str
    level: int
    item: bytes
    """8 bytes of fingerprint, then the encoded request."""
    request: Request | None = None
    """Kept until the round lands: a duplicate found there is dropped as Scrapy drops it
    (the request_dropped signal, the dupe filter's log)."""


class Completion(NamedTuple):
    """A fetch that ended, to complete in Redis once the engine is done with its request."""

    lease: RedisLease
    seconds: float
    rest: float
    """The host rests at least this long from now."""
    ended_at: float | None
    """When the answer was complete (the driver's clock); None: at the completion."""
    back: bool = False
    """Given back unfetched, its request queued again if the lease is still held (the
    worker could not prove it still held it: see redis_fence.py)."""


@dataclass
class Round:
    """What one I/O round sends; kept until Redis acknowledged it (retried otherwise)."""

    pushes: list[Pushed] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    #: Claimed items that cannot be rebuilt: kept before their leases complete.
    quarantine: list[Quarantined] = field(default_factory=list)
    min_rests: list[tuple[str, float]] = field(default_factory=list)
    retire: list[str] = field(default_factory=list)
    #: Page history updates: (fingerprint, URL, the visit, or None for a download error).
    visits: list[tuple[int, str, Visit | None]] = field(default_factory=list)
    #: Change claims of sitemaps and feeds: (fingerprint, URL, claimed change time,
    #: changefreq in seconds).
    claims: list[PageHint] = field(default_factory=list)
    #: Fingerprints of the sitemaps and feeds those claims came from.
    sources: list[int] = field(default_factory=list)
    want: int = 0
    poll: bool = False
    """A poll round: its claims look at every partition."""
    feed: int = 0
    """How many due pages of the history to claim for recrawling."""
    census: float | None = None
    """Read the whole frontier's census (see RedisDriver.census); when it was asked for."""

    def has_writes(self) -> bool:
        return bool(self.pushes or self.completions or self.quarantine or self.min_rests
                    or self.retire or self.visits or self.claims or self.sources)

    def merged(self, later: Round) -> Round:
        return Round(
            pushes=self.pushes + later.pushes,
            completions=self.completions + later.completions,
            quarantine=self.quarantine + later.quarantine,
            min_rests=self.min_rests + later.min_rests,
            retire=self.retire + later.retire,
            visits=self.visits + later.visits,
            claims=self.claims + later.claims,
            sources=self.sources + later.sources,
        )


@dataclass
class RoundAnswer:
    leases: list[RedisLease]
    duplicates: int
    idle: bool
    queued: int
    in_flight: int
    wakeup: float | None
    """Seconds until a host becomes ready, when the round could not claim all it wanted."""
    validators: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    """Lease ticket -> (ETag, Last-Modified) of the page's last full response."""
    not_before: dict[int, float] = field(default_factory=dict)
    """Lease ticket -> clock time before which its host must not be contacted (a lease
    claimed ahead of its host's ready time)."""
    due: list[PageRecord] = field(default_factory=list)
    starts_skipped: int = 0
    dropped: list[int] = field(default_factory=list)
    """Indexes (in the round's pushes) of duplicates and skipped start requests."""
    census: SharedCensus | None = None
    partitions: list[SharedCensus] = field(default_factory=list)
    """Each partition's census, read with ``census`` (a partitioned crawl only)."""
    history: tuple[int, int | None] | None = None
    """(pages, due) of the shared page history, read with the census."""
    next_due: float | None = None
    """Continuous recrawl: when the history's next page falls due (wall clock)."""
    reclaimed: int = 0
    """Lapsed leases (of any worker) this round's claims gave back to their hosts."""
    lost: int = 0
    """This worker's completions whose lease had lapsed and been taken back meanwhile."""
    taken: int = 0
    """Leases given back unfetched that another worker's claim had taken back already."""


class RoundRunner:
    """Runs rounds for one worker: the shared frontier, its seen set and page history, and
    what the rounds remember between them (when the budget and the recrawl marks were read)."""

    def __init__(self, remote: PartitionedFrontier, seen: PartitionedSeen, *,
                 budget_for: Callable[[str], int], clock: Callable[[], float],
                 unfetched: set[int], recrawler: Recrawler | None = None,
                 claim_ahead: float = 0.0, fence: LeaseFence | None = None) -> None:
        self.remote = remote
        #: Until when each lease is proven held: a claim moves it from the round's send.
        self.fence = fence
        #: Seconds ahead of a host's ready time that a claim may take it, when no host is
        #: ready now (RedisFrontier.round's ``ahead``).
        self.claim_ahead = claim_ahead
        self.seen = seen
        self.recrawler = recrawler
        self.budget_for = budget_for
        self.clock = clock
        #: Tickets of leases this worker gives back unfetched (read, never written, here).
        self.unfetched = unfetched
        #: Lease id -> host of every lease this worker holds in Redis, from its claim to
        #: its completion (the heartbeat renews them; see :meth:`held`).
        self.leased: dict[int, str] = {}
        #: The crawl's shared budget counters (budget_hosts, budget_items), read every
        #: BUDGET_INTERVAL seconds.
        self.shared_budget: dict[str, int] = {}
        self._budget_read_at = 0.0
        # scrapy frontier recrawl's counter as last read (None: not read yet), and when
        # to read it next.
        self._marks: int | None = None
        self._marks_read_at = 0.0

    def held(self) -> list[tuple[str, int]]:
        """(host, lease id) of the leases this worker holds; safe from any thread (the
        copy is one step under the GIL)."""
        return [(host, ticket) for ticket, host in self.leased.copy().items()]

    def run(self, rnd: Round) -> RoundAnswer:
        """One round against Redis (see backends/redis/driver.py's docstring)."""
        remote, seen = self.remote, self.seen
        recrawler = self.recrawler
        duplicates = skipped = 0
        dropped: list[int] = []
        fresh: list[tuple[str, int, bytes, tuple[str, int, bool] | None]] = []
        starts: list[bool] = []
        indexes: list[int] = []
        if rnd.pushes:
            # Start URLs with a page history look first, to pass the start gate (a seen
            # one may be due for a recrawl). Every other push is tested in the round
            # script itself, atomically with the push.
            tested = [(p.host, p.key) for p in rnd.pushes
                      if p.dedupe and p.start and p.key == p.fp]
            known = (dict(zip(tested, seen.contains_many(tested), strict=True))
                     if tested and recrawler is not None else {})
            for index, p in enumerate(rnd.pushes):
                test = p.dedupe
                if p.start and p.key == p.fp and recrawler is not None:
                    seen_before = p.dedupe and known.get((p.host, p.key), False)
                    if not recrawler.admit_start(p.fp, seen_before, shared=True)[0]:
                        skipped += 1
                        dropped.append(index)
                        continue
                    if seen_before:
                        test = False  # a start URL due for a recrawl: queued although seen
                mark = p.mark or p.dedupe
                fresh.append((p.host, p.level, p.item,
                              (*seen.bucket(p.host, p.key), test) if mark else None))
                starts.append(p.start)
                indexes.append(index)
        for host, rest in rnd.min_rests:
            remote.set_min_rest(host, rest)
        for host in rnd.retire:
            remote.retire(host)
        if recrawler is not None:
            for fp, url, visit in rnd.visits:
                recrawler.record(fp, url, visit)
            for fp in rnd.sources:
                recrawler.signal_source(fp)
            for first in range(0, len(rnd.claims), HINTS_READ_TOGETHER):
                recrawler.hint_many(rnd.claims[first:first + HINTS_READ_TOGETHER])
            # Before the completions: a worker killed between the two then fetches the
            # page again instead of losing its visit.
            recrawler.store.flush()
        # Before the completions: a worker killed between the two leaves the item both
        # set aside and queued (its lease expires), never neither.
        remote.quarantine(rnd.quarantine)
        budget_for = self.budget_for
        clock = self.clock
        finished = []
        for done, seconds, rest, ended_at, back in rnd.completions:
            if back:
                budget = HAND_BACK
            else:
                budget = -1 if done.ticket in self.unfetched else budget_for(done.host)
            # How long ago the answer was complete, taken now: the script runs later
            # still, so the rest it counts from its own clock starts no earlier.
            ago = 0.0 if ended_at is None else max(0.0, clock() - ended_at)
            finished.append(Finished(done, seconds, rest, budget, ago))
        fence = self.fence
        # Before the call: the claims' leases hold at least the window from this moment.
        sent_at = fence.clock() if fence is not None else 0.0
        reply = remote.round(fresh, finished, rnd.want, everywhere=rnd.poll,
                             ahead=self.claim_ahead)
        # Read after the reply: the wait of a lease claimed ahead then ends no earlier
        # than the host's ready time on the server's clock.
        received = self.clock()
        for start, index, outcome in zip(starts, indexes, reply.pushed, strict=True):
            if outcome == 2:  # in the seen set already (queued by any worker, any time)
                dropped.append(index)
                if start:
                    skipped += 1
                else:
                    duplicates += 1
        leased = self.leased
        lost = taken = 0
        for sent, completed in zip(rnd.completions, reply.completed, strict=True):
            leased.pop(sent.lease.ticket, None)
            if completed is None:
                if sent.back:
                    taken += 1  # never fetched here: nothing is fetched twice
                else:
                    lost += 1
            elif completed.capped >= 0:
                # Logged by the worker whose fetch spent it: once for the crawl.
                logger.info("Host %r reached its budget: %d queued requests dropped, and its "
                            "later ones are refused by every worker (counted in "
                            "frontier/budget/requests)", sent.lease.host, completed.capped)
        leases = reply.leases
        if fence is not None:
            fence.forget(sent.lease.ticket for sent in rnd.completions)
            fence.claimed((lease.ticket for lease in leases), sent_at)  # before the heartbeat
        for lease in leases:
            leased[lease.ticket] = lease.host
        if self.clock() >= self._budget_read_at:
            self._budget_read_at = self.clock() + BUDGET_INTERVAL
            self.shared_budget = remote.budget_stats()
        queued = reply.front + reply.back
        answer = RoundAnswer(leases, duplicates,
                             queued + reply.in_flight == 0 and reply.settled, queued,
                             reply.in_flight, reply.wakeup)
        answer.not_before = {lease.ticket: received + lease.wait for lease in leases
                             if lease.wait > 0}
        answer.reclaimed = reply.reclaimed
        answer.lost = lost
        answer.taken = taken
        answer.starts_skipped = skipped
        answer.dropped = dropped
        if rnd.census is not None:
            answer.census = remote.census()
            if remote.count > 1:
                answer.partitions = remote.censuses
            if recrawler is not None:
                answer.history = recrawler.census()
        if recrawler is not None:
            if leases:
                fps = [int.from_bytes(lease.item[:8], "big", signed=True) for lease in leases]
                records = recrawler.store.get_many(fps)  # one round trip
                for lease, fp in zip(leases, fps, strict=True):
                    record = records.get(fp)
                    if record is not None and (record.etag or record.last_modified):
                        answer.validators[lease.ticket] = (record.etag, record.last_modified)
            if self.clock() >= self._marks_read_at:
                self._marks_read_at = self.clock() + MARKS_INTERVAL
                read_marks = getattr(recrawler.store, "marks", None)
                marks = int(read_marks()) if read_marks is not None else 0
                if marks != self._marks:
                    if self._marks is not None:  # pages were marked due by hand
                        recrawler.reset_feed()
                    self._marks = marks
            if rnd.feed and answer.queued < 2 * rnd.feed:
                answer.due = recrawler.take_due(rnd.feed)
            if recrawler.settings.mode == "continuous":
                answer.next_due = recrawler.next_due()
            recrawler.store.flush()
        return answer
