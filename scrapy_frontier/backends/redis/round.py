"""One I/O round of the Redis driver, as a function of what it sends and what it reads.

The driver's I/O thread calls :func:`run_round` (through :meth:`RoundRunner.run`) with the
:class:`Round` the reactor gathered, and hands the :class:`RoundAnswer` back. A round is a
sequence of small steps, each a function of its inputs: the start gate and the seen test
(:func:`gate_pushes`), the host rules and the page history's writes, the completions'
arguments (:func:`ended_fetches`), the one script call, then what its reply says
(:func:`tally_pushes`, :func:`settle_ends`, :func:`answer_of`) and the reads that ride
beside it (the census, the validators, the due pages). What rounds remember between them
(the leases held, when the budget and the recrawl marks were read) is a :class:`RoundMemory`.
Nothing here touches the reactor or a thread, so a test runs a round against a real Redis
directly.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from scrapy_frontier.backends.redis.fence import LeaseFence
from scrapy_frontier.backends.redis.frontier import (
    HAND_BACK,
    UNSENT,
    Finished,
    Quarantined,
    RedisLease,
    RoundReply,
    SharedCensus,
)
from scrapy_frontier.backends.redis.frontier import Completion as FrontierCompletion
from scrapy_frontier.backends.redis.partitions import PartitionedFrontier, PartitionedSeen

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_frontier.backends.redis.history import RedisHistoryStore
    from scrapy_frontier.backends.redis.partitions import PartitionedHistory

    #: The page history of a Redis crawl, one partition or several.
    RedisHistory = RedisHistoryStore | PartitionedHistory

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
    """The seen-set member: ``fp``, or an occurrence key (see RedisQueue.push)."""
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


class LeaseEnd(NamedTuple):
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
    sent: bool = True
    """False: the request ended before it reached its host; done, and no rest."""


@dataclass
class Round:
    """What one I/O round sends; kept until Redis acknowledged it (retried otherwise)."""

    pushes: list[Pushed] = field(default_factory=list)
    completions: list[LeaseEnd] = field(default_factory=list)
    #: Claimed items that cannot be rebuilt: kept before their leases complete.
    quarantine: list[Quarantined] = field(default_factory=list)
    min_rests: list[tuple[str, float]] = field(default_factory=list)
    retire: list[str] = field(default_factory=list)
    #: Crawler traps to contain: (host, pages fetched, allowance).
    contain: list[tuple[str, int, int]] = field(default_factory=list)
    #: Page history updates: (fingerprint, URL, the visit, or None for a download error).
    visits: list[tuple[int, str, Visit | None]] = field(default_factory=list)
    #: Change hints of sitemaps and feeds: (fingerprint, URL, hinted change time,
    #: changefreq in seconds).
    hints: list[PageHint] = field(default_factory=list)
    #: Fingerprints of the sitemaps and feeds those hints came from.
    sources: list[int] = field(default_factory=list)
    want: int = 0
    poll: bool = False
    """A poll round: its claims look at every partition."""
    feed: int = 0
    """How many due pages of the history to take for recrawling."""
    census: float | None = None
    """Read the whole frontier's census (see RedisInspection.census); when it was asked for."""

    def has_writes(self) -> bool:
        return bool(self.pushes or self.completions or self.quarantine or self.min_rests
                    or self.retire or self.contain or self.visits or self.hints
                    or self.sources)

    def merged(self, later: Round) -> Round:
        return Round(
            pushes=self.pushes + later.pushes,
            completions=self.completions + later.completions,
            quarantine=self.quarantine + later.quarantine,
            min_rests=self.min_rests + later.min_rests,
            retire=self.retire + later.retire,
            contain=self.contain + later.contain,
            visits=self.visits + later.visits,
            hints=self.hints + later.hints,
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


@dataclass
class RoundMemory:
    """What one worker's rounds remember between them."""

    leased: dict[int, str] = field(default_factory=dict)
    """Lease id -> host of every lease this worker holds in Redis, from its claim to its
    completion (the heartbeat renews them; see :meth:`RoundRunner.held`)."""
    shared_budget: dict[str, int] = field(default_factory=dict)
    """The crawl's shared budget counters (budget_hosts, budget_items) and host counts,
    read every BUDGET_INTERVAL seconds."""
    budget_read_at: float = 0.0
    policies: dict[str, Any] | None = None
    """The steered policy entries (``P policies``), read with the budget counters."""
    marks: int | None = None
    """``scrapy frontier recrawl``'s counter as last read (None: not read yet)."""
    marks_read_at: float = 0.0
    trap_states: deque[tuple[str, str]] = field(default_factory=deque)
    """(host, "contained" or "released") for the shell (appended here, taken on the
    reactor)."""


@dataclass
class RoundInputs:
    """What a round works on: the shared frontier, its seen set and page history, and the
    worker's rules."""

    remote: PartitionedFrontier
    seen: PartitionedSeen
    budget_for: Callable[[str], int]
    clock: Callable[[], float]
    unfetched: set[int]
    """Tickets of leases this worker gives back unfetched (read, never written, here)."""
    recrawler: Recrawler | None = None
    claim_ahead: float = 0.0
    """Seconds ahead of a host's ready time that a claim may take it, when no host is
    ready now (RedisFrontier.round's ``ahead``)."""
    fence: LeaseFence | None = None
    """Until when each lease is proven held: a claim moves it from the round's send."""


class Gated(NamedTuple):
    """The pushes that go to the script, after the start gate."""

    fresh: list[tuple[str, int, bytes, tuple[str, int, bool] | None]]
    """(host, level, item, seen test) per push sent, as RedisFrontier.round takes them."""
    starts: list[bool]
    indexes: list[int]
    """Each sent push's index in the round's pushes."""
    dropped: list[int]
    """Indexes of the start requests the gate skipped."""


class Tally(NamedTuple):
    duplicates: int
    skipped: int
    dropped: list[int]


def gate_pushes(pushes: list[Pushed], seen: PartitionedSeen,
                recrawler: Recrawler | None) -> Gated:
    """The start gate: start URLs with a page history look first (a seen one may be due for
    a recrawl); every other push is tested in the round script itself, atomically with the
    push."""
    gated = Gated([], [], [], [])
    if not pushes:
        return gated
    gate = recrawler is not None
    tested = [(p.host, p.key) for p in pushes if p.dedupe and p.start and p.key == p.fp]
    known = (dict(zip(tested, seen.contains_many(tested), strict=True))
             if tested and gate else {})
    for index, p in enumerate(pushes):
        test = p.dedupe
        if p.start and p.key == p.fp and recrawler is not None:
            seen_before = p.dedupe and known.get((p.host, p.key), False)
            if not recrawler.admit_start(p.fp, seen_before, shared=True)[0]:
                gated.dropped.append(index)
                continue
            if seen_before:
                test = False  # a start URL due for a recrawl: queued although seen
        mark = p.mark or p.dedupe
        gated.fresh.append((p.host, p.level, p.item,
                            (*seen.bucket(p.host, p.key), test) if mark else None))
        gated.starts.append(p.start)
        gated.indexes.append(index)
    return gated


def write_host_rules(remote: PartitionedFrontier, rnd: Round, memory: RoundMemory) -> None:
    for host, rest in rnd.min_rests:
        remote.set_min_rest(host, rest)
    for host in rnd.retire:
        remote.retire(host)
    for host, fetched, allowance in rnd.contain:
        if remote.contain(host, fetched, allowance) < 0:
            memory.trap_states.append((host, "released"))


def write_history(recrawler: Recrawler, rnd: Round) -> None:
    """The page history's events, written before the completions: a worker killed between
    the two then fetches the page again instead of losing its visit."""
    store = cast("RedisHistory", recrawler.store)
    if rnd.visits:
        store.prefetch([fp for fp, _, _ in rnd.visits])  # one round trip for their records
    for fp, url, visit in rnd.visits:
        recrawler.record(fp, url, visit)
    for fp in rnd.sources:
        recrawler.signal_source(fp)
    for first in range(0, len(rnd.hints), HINTS_READ_TOGETHER):
        recrawler.hint_many(rnd.hints[first:first + HINTS_READ_TOGETHER])
    store.flush()


def ended_fetches(ends: list[LeaseEnd], unfetched: set[int], budget_for: Callable[[str], int],
                  clock: Callable[[], float]) -> list[Finished]:
    """The script's arguments for each lease that ends: its budget charge, and how long ago
    its answer was complete (taken now: the script runs later still, so the rest it counts
    from its own clock starts no earlier)."""
    out = []
    for end in ends:
        if end.back:
            budget = HAND_BACK
        elif not end.sent:
            budget = UNSENT
        else:
            budget = -1 if end.lease.ticket in unfetched else budget_for(end.lease.host)
        ago = 0.0 if end.ended_at is None else max(0.0, clock() - end.ended_at)
        out.append(Finished(end.lease, end.seconds, end.rest, budget, ago))
    return out


def tally_pushes(gated: Gated, outcomes: list[int]) -> Tally:
    """Duplicates and skipped start requests, from each push's outcome in the script."""
    duplicates = 0
    skipped = len(gated.dropped)
    dropped = list(gated.dropped)
    for start, index, outcome in zip(gated.starts, gated.indexes, outcomes, strict=True):
        if outcome == 2:  # in the seen set already (queued by any worker, any time)
            dropped.append(index)
            if start:
                skipped += 1
            else:
                duplicates += 1
    return Tally(duplicates, skipped, dropped)


def settle_ends(ends: list[LeaseEnd], completed: list[FrontierCompletion | None],
                leased: dict[int, str]) -> tuple[int, int]:
    """Forget the leases that ended; (lost, taken): completions whose lease another worker
    had taken back, and give-backs it had taken already."""
    lost = taken = 0
    for end, done in zip(ends, completed, strict=True):
        leased.pop(end.lease.ticket, None)
        if done is None:
            if end.back or not end.sent:
                taken += 1  # never fetched here: nothing is fetched twice
            else:
                lost += 1
        elif done.capped >= 0:
            # Logged by the worker whose fetch spent it: once for the crawl.
            logger.info("Host %r reached its budget: %d queued requests dropped, and its "
                        "later ones are refused by every worker (counted in "
                        "frontier/budget/requests)", end.lease.host, done.capped)
    return lost, taken


def answer_of(reply: RoundReply, tally: Tally, ends: tuple[int, int],
              received: float) -> RoundAnswer:
    """The answer the reactor gets, from the script's reply; ``received``: when it came (a
    lease claimed ahead waits from then, so never less than the server said)."""
    queued = reply.front + reply.back
    leases = reply.leases
    answer = RoundAnswer(leases, tally.duplicates,
                         queued + reply.in_flight == 0 and reply.settled, queued,
                         reply.in_flight, reply.wakeup)
    answer.not_before = {lease.ticket: received + lease.wait for lease in leases
                         if lease.wait > 0}
    answer.reclaimed = reply.reclaimed
    answer.lost, answer.taken = ends
    answer.starts_skipped = tally.skipped
    answer.dropped = tally.dropped
    return answer


def read_census(remote: PartitionedFrontier, recrawler: Recrawler | None,
                answer: RoundAnswer) -> None:
    answer.census = remote.census()
    if remote.count > 1:
        answer.partitions = remote.censuses
    if recrawler is not None:
        answer.history = recrawler.census()


def read_validators(recrawler: Recrawler, leases: list[RedisLease]) -> dict[int, tuple[
        str | None, str | None]]:
    """Lease ticket -> (ETag, Last-Modified) of each claimed page's last full response, in
    one round trip."""
    if not leases:
        return {}
    fps = [int.from_bytes(lease.item[:8], "big", signed=True) for lease in leases]
    records = recrawler.store.get_many(fps)
    out = {}
    for lease, fp in zip(leases, fps, strict=True):
        record = records.get(fp)
        if record is not None and (record.etag or record.last_modified):
            out[lease.ticket] = (record.etag, record.last_modified)
    return out


def read_history(recrawler: Recrawler, rnd: Round, answer: RoundAnswer,
                 memory: RoundMemory, now: float) -> None:
    """After the script: the claimed pages' validators, the recrawl marks (every
    MARKS_INTERVAL s), the due pages a poll round feeds, and the next due time."""
    answer.validators = read_validators(recrawler, answer.leases)
    if now >= memory.marks_read_at:
        memory.marks_read_at = now + MARKS_INTERVAL
        marks = int(cast("RedisHistory", recrawler.store).marks())
        if marks != memory.marks:
            if memory.marks is not None:  # pages were marked due by hand
                recrawler.reset_feed()
            memory.marks = marks
    if rnd.feed and answer.queued < 2 * rnd.feed:
        answer.due = recrawler.take_due(rnd.feed)
    if recrawler.settings.mode == "continuous":
        answer.next_due = recrawler.next_due()
    recrawler.store.flush()


def run_round(rnd: Round, inputs: RoundInputs, memory: RoundMemory) -> RoundAnswer:
    """One round against Redis (see backends/redis/driver.py's docstring)."""
    remote, recrawler, fence = inputs.remote, inputs.recrawler, inputs.fence
    gated = gate_pushes(rnd.pushes, inputs.seen, recrawler)
    write_host_rules(remote, rnd, memory)
    if recrawler is not None:
        write_history(recrawler, rnd)
    # Before the completions: a worker killed between the two leaves the item both set
    # aside and queued (its lease expires), never neither.
    remote.quarantine(rnd.quarantine)
    finished = ended_fetches(rnd.completions, inputs.unfetched, inputs.budget_for,
                             inputs.clock)
    # Before the call: the claims' leases hold at least the window from this moment.
    sent_at = fence.clock() if fence is not None else 0.0
    reply = remote.round(gated.fresh, finished, rnd.want, everywhere=rnd.poll,
                         ahead=inputs.claim_ahead)
    # Read after the reply: the wait of a lease claimed ahead then ends no earlier than the
    # host's ready time on the server's clock.
    received = inputs.clock()
    ends = settle_ends(rnd.completions, reply.completed, memory.leased)
    if fence is not None:
        fence.forget(sent.lease.ticket for sent in rnd.completions)
        fence.claimed((lease.ticket for lease in reply.leases), sent_at)  # before the beat
    memory.leased.update((lease.ticket, lease.host) for lease in reply.leases)
    if received >= memory.budget_read_at:
        memory.budget_read_at = received + BUDGET_INTERVAL
        memory.shared_budget = remote.budget_stats()
        memory.policies = remote.policies()
    answer = answer_of(reply, tally_pushes(gated, reply.pushed), ends, received)
    if rnd.census is not None:
        read_census(remote, recrawler, answer)
    if recrawler is not None:
        read_history(recrawler, rnd, answer, memory, received)
    return answer


class RoundRunner:
    """Runs rounds for one worker: :func:`run_round` over its inputs and memory."""

    def __init__(self, remote: PartitionedFrontier, seen: PartitionedSeen, *,
                 budget_for: Callable[[str], int], clock: Callable[[], float],
                 unfetched: set[int], recrawler: Recrawler | None = None,
                 claim_ahead: float = 0.0, fence: LeaseFence | None = None) -> None:
        self.inputs = RoundInputs(remote, seen, budget_for, clock, unfetched, recrawler,
                                  claim_ahead, fence)
        self.memory = RoundMemory()

    @property
    def recrawler(self) -> Recrawler | None:
        return self.inputs.recrawler

    @recrawler.setter
    def recrawler(self, recrawler: Recrawler | None) -> None:
        self.inputs.recrawler = recrawler

    @property
    def shared_budget(self) -> dict[str, int]:
        return self.memory.shared_budget

    def held(self) -> list[tuple[str, int]]:
        """(host, lease id) of the leases this worker holds; safe from any thread (the
        copy is one step under the GIL)."""
        return [(host, ticket) for ticket, host in self.memory.leased.copy().items()]

    def run(self, rnd: Round) -> RoundAnswer:
        return run_round(rnd, self.inputs, self.memory)
