"""``FRONTIER_BACKEND = "redis"``: one worker of a cluster sharing a frontier in Redis.

The frontier itself lives in Redis
(:class:`~scrapy_frontier.backends.redis.frontier.RedisFrontier`): every worker
running the same spider against the same Redis claims requests from it under
leases, so one host is fetched by at most one worker at a time, with the rests
measured on the Redis server's clock.

Scrapy's scheduler interface is synchronous and runs on the reactor thread, so no
Redis call is made there. One I/O thread does *rounds*: push the requests queued
since the last round (seen test, start gate, push, then mark seen), complete the
leases whose requests the engine is done with, claim a few requests ahead (the
prefetch buffer), and read whether the whole frontier is idle. The reactor only
moves things in and out of local lists.

Delivery is at least once. A lease is completed only after the engine is done
with its request (acknowledged by the scheduler's in-flight ledger), and the
round pushes the requests found meanwhile before it completes the lease; a URL
is marked seen only after it was pushed. A worker killed at any moment therefore
loses nothing: its heartbeat stops, its leases lapse (``FRONTIER_REDIS_LIVENESS``,
see redis_heartbeat.py) and their requests are claimed again, by any worker. Repeats
are bounded by the leases it held.

A worker closes as soon as a round finds the shared frontier with nothing queued and
nothing leased while it holds nothing itself: every fetch holds its lease until the
requests it found are pushed, so no worker can still add work then. Only a worker that
has seen no work at all waits ``FRONTIER_REDIS_IDLE_GRACE`` first (its peers' start
requests may not have landed yet).

A request that cannot be serialized stays in this worker's memory, in a small
local frontier (polite within this process), with a warning and the stat
``frontier/redis/unserializable``; a kill loses it, as with Scrapy's JOBDIR.

When Redis goes away the rounds fail: the worker logs it once, keeps everything in
its local lists, and retries with a doubling pause (up to 30 s).

Fencing (redis_fence.py): a lease that this worker cannot prove it still holds -- it did
not run, or its heartbeat did not reach Redis, for about ``FRONTIER_REDIS_LIVENESS`` -- is
never fetched under. Where a request leaves the frontier (``pop``, which also releases the
requests claimed ahead) and where it reaches the downloader (the timing middleware asks
:meth:`RedisDriver.holds`), such a lease is given back unfetched: its request is queued
again if the lease is still held in Redis, and left to the worker that took it back
otherwise. A renewal that finds leases gone gives back those still at hand at once. Each is
counted in ``frontier/leases/lapsed`` and logged (one warning per event, naming the hosts).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar

from twisted.internet.defer import succeed
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from scrapy_frontier.backends.ports import (
    BackendContext,
    Handout,
    HistoryPort,
    HostControlPort,
    InspectPort,
    QueuePort,
    SeenTest,
)
from scrapy_frontier.backends.redis.connection import describe, redis_from_settings
from scrapy_frontier.backends.redis.fence import LeaseFence
from scrapy_frontier.backends.redis.frontier import Quarantined, RedisLease
from scrapy_frontier.backends.redis.heartbeat import Heartbeat
from scrapy_frontier.backends.redis.partitions import (
    Layout,
    PartitionedFrontier,
    PartitionedSeen,
    open_frontier,
    open_history,
    open_seen,
)
from scrapy_frontier.backends.redis.round import (
    Completion,
    Pushed,
    Round,
    RoundAnswer,
    RoundRunner,
)
from scrapy_frontier.backends.redis.view import Outage, SharedView
from scrapy_frontier.codec import request_codec, saved_url
from scrapy_frontier.core.frontier import Frontier
from scrapy_frontier.core.history import QUARANTINE_LOGGED
from scrapy_frontier.errors import (
    RedisFrontierError,
    RedisFrontierUnavailable,
    StoreError,
    Unserializable,
)
from scrapy_frontier.observe.census import Census, HostCounts
from scrapy_frontier.reactor.stalls import StallMeter
from scrapy_frontier.reactor.timer import call_later
from scrapy_frontier.validators import add_validators

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from scrapy_frontier.core.history import HistoryStore, PageRecord
    from scrapy_frontier.core.recrawl import PageHint, Recrawler, Visit

logger = logging.getLogger("scrapy_frontier.scheduler")
redis_log = logging.getLogger("scrapy_frontier.redis")

#: Requests waiting locally for a round beyond which no new request is handed out:
#: each fetch adds links, so while Redis cannot keep up (or is away) the backlog
#: stops growing instead of filling the worker's memory.
MAX_BACKLOG = 50_000
#: Seconds a round waits for more to carry when the engine is not waiting for it (it only
#: writes, or it claims while the engine still has claimed requests at hand): one script
#: call then carries several fetches. A completion's rest counts from the fetch's end, not
#: from when the round lands.
ROUND_LINGER = 0.05
#: Seconds ahead of a host's ready time that a round claims it when no host is ready now.
#: The worker holds the request until then (Redis reports the wait; the worker counts it
#: from the reply, so never from before the server's ready time). One round then claims
#: every host that comes ready within it, instead of one round per host as each rest ends.
CLAIM_AHEAD = 0.2
#: Seconds before the next host's ready time that the round claiming it is sent.
CLAIM_LEAD = 0.02
#: A push without a seen test: queued whatever the seen set holds, and not marked.
_NO_SEEN_TEST = SeenTest(None, False, False, False, None)


class RedisDriver(QueuePort, HistoryPort, HostControlPort, InspectPort):
    """One worker's view of a frontier shared through Redis."""

    name = "redis"
    #: Where the shared state lives, for the opening line (set by open).
    location = "Redis"
    shared_seen: ClassVar[bool] = True
    persistent = True
    dropped_later = 0

    def __init__(self, context: BackendContext, *, client: Any = None) -> None:
        self.ctx = context
        self.config = context.config
        self.stats = context.stats
        self._client = client
        self.remote: PartitionedFrontier | None = None
        self.seen: PartitionedSeen | None = None
        self._layout: Layout | None = None
        self.recrawler: Recrawler | None = None
        self._codec: Any = None
        self._pool: ThreadPool | None = None
        self._buffer: deque[RedisLease] = deque()
        # Ticket -> clock time before which a lease claimed ahead of its host's ready time
        # must not be handed out (see CLAIM_AHEAD).
        self._not_before: dict[int, float] = {}
        self._held: dict[int, RedisLease] = {}
        # Fetches released, whose completion waits for the engine (see ack).
        self._unacked = 0
        self._next = Round()
        self._sending: Round | None = None
        self._in_flight: Deferred[Any] | None = None
        self._outage = Outage(context.clock)
        self.view = SharedView(context.clock)
        self._poll: Any = None
        # Claim again at once only after a round got all it asked for; otherwise at
        # the next wake-up (a host's rest ends) or poll.
        self._claim_more = True
        self._wake_call: Any = None
        # A writes-only round waiting ROUND_LINGER to gather more (see _kick).
        self._linger_call: Any = None
        # Wakes the engine when the idle grace ends, so that it sees the crawl is over
        # then, not at its next 5 s heartbeat.
        self._grace_call: Any = None
        # How late the loop runs a 50 ms beat: how long answers of the I/O thread wait.
        self._stall = StallMeter(context.clock, schedstat=None, beat=0.05)
        self.counters: dict[str, int] = {}
        self._validators: dict[int, tuple[str | None, str | None]] = {}
        self._due: list[PageRecord] = []
        self._pushed = 0
        self._want_due = 0
        self._closed = False
        self._spider: Spider | None = None
        self._shutdown_trigger: Any = None
        # Requests that cannot be serialized: polite within this process only.
        self.local: Frontier[Request] = Frontier(
            front_queues=self.config.front_queues, priority_bias=self.config.priority_bias,
            back_queues=max(1, self.config.concurrent_requests),
            policy=self.config.policy, lease_timeout=self.config.lease_timeout,
            clock=context.clock, rng=random.Random(self.config.seed),
        )
        # This worker's fetches, for its census.
        self._fetched = 0
        self._unfetched: set[int] = set()
        self._rounds: RoundRunner | None = None
        self._heartbeat: Heartbeat | None = None
        #: Until when each lease is proven held (set at open).
        self.fence: LeaseFence | None = None
        # Hosts of the leases given back unfetched since the last warning (see _lapsed).
        self._lapsed_hosts: list[str] = []
        self._lapsed_call: Any = None
        # When this worker opened, and whether it has seen any work in the shared
        # frontier (queued or leased) or pushed any: until then it closes only after
        # FRONTIER_REDIS_IDLE_GRACE.
        self._opened_at = context.clock()
        self._seen_work = False

    # -- opening and closing -----------------------------------------------------------

    def open(self, spider: Spider) -> None:
        self._spider = spider
        config = self.config
        client = (self._client if self._client is not None
                  else redis_from_settings(self.ctx.crawler.settings))
        self._client = client
        layout = self._layout = Layout(*config.redis.keys_for(spider.name),
                                       count=config.redis.partitions, tagged=config.redis.tagged)
        self.remote = open_frontier(
            client, layout,
            front_queues=config.front_queues, priority_bias=config.priority_bias,
            back_queues=config.back_queues, back_queues_max=config.back_queues_max,
            policy=config.policy, lease_timeout=config.lease_timeout, spider=spider.name,
            rng=random.Random(config.seed), liveness=config.redis.liveness,
        )
        self.remote.save_delay_rule()
        self.seen = open_seen(client, layout, expected=config.redis.seen_expected)
        self.fence = LeaseFence(config.redis.liveness, config.lease_timeout)
        self._rounds = RoundRunner(self.remote, self.seen, budget_for=config.budget_for,
                                   clock=self.ctx.clock, unfetched=self._unfetched,
                                   recrawler=self.recrawler, claim_ahead=CLAIM_AHEAD,
                                   fence=self.fence)
        if config.redis.liveness:
            self._heartbeat = Heartbeat(self.remote, self._rounds.held, fence=self.fence,
                                        lost=self._lost_from_thread)
            self._heartbeat.start()
        self._opened_at = self.ctx.clock()
        self._codec = request_codec(spider)
        self._pool = ThreadPool(minthreads=1, maxthreads=1, name="scrapy-frontier-redis")
        # Daemon, and stopped with the reactor: a crawl that dies before close() (an
        # exception in open, say) must not keep the interpreter alive. Every round is one
        # atomic script or pipeline per step, so a round cut short is sent again.
        self._pool.threadFactory = _daemon_thread  # type: ignore[assignment]
        self._pool.start()
        self._shutdown_trigger = _reactor().addSystemEventTrigger(
            "during", "shutdown", self._stop_pool)
        self._stall.start()
        self._poll = LoopingCall(self._tick)
        self._poll.start(0.5, now=True)
        self.location = f"{describe(client)}, keys {layout.describe()}"
        redis_log.debug("Frontier on Redis: keys %s, %d partition(s), prefetch %d",
                        layout.describe(), layout.count, self.config.redis.prefetch)

    def open_history(self) -> HistoryStore:
        assert self._client is not None and self._layout is not None
        return open_history(self._client, self._layout)

    def attach(self, recrawler: Recrawler) -> None:
        self.recrawler = recrawler
        if self._rounds is not None:
            self._rounds.recrawler = recrawler

    def close(self, reason: str) -> Deferred[None] | None:
        """Hand everything back to Redis, then stop the I/O thread.

        The engine is done with every request now: complete the leases still
        waiting, and give back the prefetched ones (pushed again, their leases
        completed) so other workers need not wait for them to expire.
        """
        self._closed = True
        if self._poll is not None and self._poll.running:
            self._poll.stop()
        for call in (self._wake_call, self._grace_call, self._linger_call, self._lapsed_call):
            if call is not None:  # each is set to None when it fires
                call.cancel()
        self._wake_call = self._grace_call = self._linger_call = None
        self._report_lapsed()
        self._stall.stop()
        pool = self._pool
        if pool is None:
            return None
        if len(self.local):
            logger.warning("%d requests that cannot be serialized were still queued in this "
                           "worker's memory and are lost with it", len(self.local))
        # Let a round in flight land first, so nothing is sent twice.
        waiting = self._in_flight if self._in_flight is not None else succeed(None)

        def send_final(_: object) -> Deferred[Any]:
            final = self._next
            self._next = Round()
            # (The shell acknowledged every released fetch before this close.)
            final.completions.extend(Completion(lease, 0.0, 0.0, None)
                                     for lease in self._held.values())
            # Handed back unfetched: not counted against the host's budget.
            self._unfetched.update(lease.ticket for lease in self._held.values())
            self._unfetched.update(lease.ticket for lease in self._buffer)
            self._held.clear()
            for lease in self._buffer:
                final.pushes.append(Pushed(0, 0, False, False, False, lease.host, lease.level,
                                            lease.item))
                final.completions.append(Completion(lease, 0.0, 0.0, None))
            self._buffer.clear()
            self._not_before.clear()
            return deferToThreadPool(_reactor(), pool, self._io_final, final)

        def report(result: object) -> None:
            if isinstance(result, Failure):
                redis_log.error("Could not hand the worker's state back to Redis at close "
                                "(%s): its leases will expire and their requests be fetched "
                                "again", result.getErrorMessage())
            self._stop_pool()

        d = waiting.addBoth(send_final)
        d.addBoth(report)
        return d

    # -- the driver contract -----------------------------------------------------------

    def push(self, request: Request, host: str, level: int,
             seen: SeenTest | None = None) -> bool:
        fp, dedupe, mark, start, key = seen if seen is not None else _NO_SEEN_TEST
        try:
            data = self._codec.encode(request)
        except Unserializable as exc:
            self._count("redis/unserializable")
            if self.counters["redis/unserializable"] == 1:
                logger.warning(
                    "Unable to serialize request %s for the shared frontier (%s): it stays in this "
                    "worker's memory (polite within this worker only, lost if it dies; "
                    "counted in frontier/redis/unserializable). Use spider methods as "
                    "callbacks and picklable meta.", request, exc,
                )
            return self.local.push(host, level, request)
        fp = fp if fp is not None else 0
        self._pushed += 1
        self._next.pushes.append(Pushed(
            fp, fp if key is None else key, dedupe, mark, start, host, level,
            fp.to_bytes(8, "big", signed=True) + data,
            request if dedupe else None,
        ))
        self._kick()
        return True

    def claim(self) -> Handout | None:
        if self._closed:
            return None
        backlog = len(self._next.pushes) + (len(self._sending.pushes) if self._sending else 0)
        if backlog > MAX_BACKLOG:
            self._count("redis/backpressure")
            self._kick()
            return None
        fence = self.fence
        while self._buffer:
            lease = self._ready_lease()
            if lease is None:
                break  # every lease at hand was claimed ahead: next_wakeup says when
            if fence is not None and not fence.holds(lease.ticket):
                self._lapsed([lease, *self._unproven()])
                continue
            try:
                request: Request = self._codec.decode(lease.item[8:])
            except StoreError as exc:
                self._set_aside(lease, exc)
                continue
            self._held[lease.ticket] = lease
            validators = self._validators.pop(lease.ticket, None)
            if validators is not None:
                add_validators(request, *validators)
            self._kick()
            return Handout(lease.ticket, lease.host, request)
        self._kick()
        local = self.local.pop()
        if local is not None:
            # Negative tickets: never a Redis lease id.
            return Handout(-local.ticket, local.host, local.item)
        return None

    def _ready_lease(self) -> RedisLease | None:
        """The first lease at hand whose host may be contacted now, taken out."""
        buffer, not_before = self._buffer, self._not_before
        if not not_before:
            return buffer.popleft()
        now = self.ctx.clock()
        for lease in buffer:
            at = not_before.get(lease.ticket)
            if at is None or at <= now:
                buffer.remove(lease)
                not_before.pop(lease.ticket, None)
                return lease
        return None

    # -- fencing (redis_fence.py) ------------------------------------------------------

    def holds(self, ticket: int) -> bool:
        """Whether this worker can prove it still holds the lease of a request it handed out
        (the timing middleware asks, just before the request reaches the downloader). A
        request kept in this worker's memory has no lease to lose."""
        fence = self.fence
        return ticket < 0 or fence is None or fence.holds(ticket)

    def give_back(self, ticket: int) -> None:
        """The request of ``ticket`` is not sent (its lease failed :meth:`holds`): give its
        lease back unfetched. No fetch, so no rest and no completion of a fetch."""
        lease = self._held.pop(ticket, None)
        if lease is not None:
            self._lapsed([lease])

    def _unproven(self) -> list[RedisLease]:
        """The leases at hand that the fence no longer proves held, taken out."""
        fence = self.fence
        if fence is None:
            return []
        out = [lease for lease in self._buffer if not fence.holds(lease.ticket)]
        for lease in out:
            self._buffer.remove(lease)
        return out

    def _lost_from_thread(self, tickets: list[int]) -> None:
        """From the heartbeat thread: a renewal found leases gone (the fence has them as
        lost already); those still at hand are given back on the reactor's next turn."""
        _reactor().callFromThread(self._renewal_lost)

    def _renewal_lost(self) -> None:
        if not self._closed:
            lapsed = self._unproven()
            if lapsed:
                self._lapsed(lapsed)

    def _lapsed(self, leases: list[RedisLease]) -> None:
        """Give ``leases`` back unfetched: the next round queues their requests again where
        the leases are still held, and leaves them to the worker that took them back where
        not (one atomic step per lease, so each request stays queued exactly once)."""
        completions = self._next.completions
        for lease in leases:
            self._not_before.pop(lease.ticket, None)
            self._validators.pop(lease.ticket, None)
            completions.append(Completion(lease, 0.0, 0.0, None, True))
            self._lapsed_hosts.append(lease.host)
        if self._lapsed_call is None and not self._closed:
            self._lapsed_call = call_later(0.0, self._report_lapsed)
        self._kick()

    def _report_lapsed(self) -> None:
        """One warning for the leases given back in one turn of the reactor, and their count."""
        self._lapsed_call = None
        hosts, self._lapsed_hosts = self._lapsed_hosts, []
        if not hosts:
            return
        self.stats.inc_value("frontier/leases/lapsed", len(hosts))
        redis_log.warning(
            "%d lease(s) of this worker lapsed before their requests were sent (host(s) %s): "
            "this process did not run, or its heartbeat did not reach Redis, for about %.1f s "
            "(FRONTIER_REDIS_LIVENESS), so other workers may have taken those hosts back. "
            "They are given back unfetched, each to be fetched once by whoever holds it "
            "(counted in frontier/leases/lapsed)", len(hosts), ", ".join(sorted(set(hosts))),
            self.fence.window if self.fence is not None else self.config.redis.liveness)

    def _set_aside(self, lease: RedisLease, exc: StoreError) -> None:
        """A claimed request that cannot be rebuilt goes to the quarantine key, and its
        lease completes unfetched (its host is free for the next URL)."""
        self._count("redis/undecodable")
        error = str(exc.__cause__ or exc)
        self._next.quarantine.append(Quarantined(
            lease.host, lease.level, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            error, lease.item))
        self._next.completions.append(Completion(lease, 0.0, 0.0, None))
        count = self.counters["redis/undecodable"]
        assert self.remote is not None  # claimed from it
        if count <= QUARANTINE_LOGGED:
            url = saved_url(lease.item[8:])
            logger.error(
                "The request %s claimed from Redis cannot be rebuilt (%s). It is not crawled: "
                "it is kept in %s, and the crawl goes on without it. scrapy frontier "
                "quarantine lists what is there; once the spider can rebuild it, scrapy "
                "frontier quarantine --requeue puts it back.%s",
                url if url is not None else f"of host {lease.host!r}", error,
                self.remote.key("quarantine"),
                " Further requests set aside are only counted (frontier/redis/undecodable)."
                if count == QUARANTINE_LOGGED else "")

    def quarantine_size(self) -> int:
        """Requests in the crawl's quarantine key (set aside by any worker, any run)."""
        return self.remote.quarantine_size() if self.remote is not None else 0

    def complete(self, ticket: int, seconds: float, rest: float, ended_at: float | None = None,
                ) -> object:
        """The host is released in Redis only at :meth:`ack`: the completion it returns
        is sent once the engine is done with the request."""
        self._fetched += 1
        if ticket < 0:
            # This worker's memory: nothing to acknowledge (its tokens are None).
            ago = 0.0 if ended_at is None else self.ctx.clock() - ended_at
            self.local.complete(-ticket, seconds, rest_at_least=rest, ended_ago=ago)
            return None
        remote = self._held.pop(ticket, None)
        if remote is None or self._closed:
            return None
        self._unacked += 1
        return Completion(remote, seconds, rest, ended_at)

    def ack(self, token: object) -> None:
        if isinstance(token, Completion):
            self._unacked -= 1
            self._next.completions.append(token)
            self._kick()

    def host_counts(self) -> dict[str, int]:
        """Hosts blocked, retired and over budget in the shared frontier, as read by the
        I/O thread at most 5 s ago (no Redis call here)."""
        shared = self.shared_budget
        return {name: shared.get(name, 0) for name in ("blocked", "retired", "over_budget")}

    def set_min_rest(self, host: str, seconds: float) -> None:
        self.local.set_min_rest(host, seconds)
        self._next.min_rests.append((host, seconds))
        self._kick()

    def retire(self, host: str) -> list[Request]:
        self._next.retire.append(host)
        return self.local.retire(host)

    def over_budget(self, host: str) -> bool:
        return False  # budgets are counted in Redis (complete.lua), not at the push

    def take_dropped(self) -> list[tuple[str, Request]]:
        return self.local.take_dropped()

    def record_visit(self, fp: int, url: str, visit: Visit | None) -> None:
        if self.recrawler is not None and not self._closed:
            self._next.visits.append((fp, url, visit))

    def record_hints(self, claims: list[PageHint]) -> None:
        if self.recrawler is not None and not self._closed:
            self._next.claims.extend(claims)
            self._kick()

    def record_signal_source(self, fp: int) -> None:
        if self.recrawler is not None and not self._closed:
            self._next.sources.append(fp)

    def take_due(self, limit: int) -> list[PageRecord]:
        """Due pages claimed by the last rounds; the next poll round claims more."""
        self._want_due = limit
        due, self._due = self._due, []
        return due

    def __len__(self) -> int:
        pending = len(self._next.pushes) + (len(self._sending.pushes) if self._sending else 0)
        return self.view.queued + len(self._buffer) + pending + len(self.local)

    def has_pending(self) -> bool:
        if self._buffer or self._held or self._unacked or len(self.local) or self._due:
            return True
        for rnd in (self._next, self._sending):
            if rnd is not None and (rnd.pushes or rnd.completions or rnd.quarantine):
                return True
        if self._outage.since is not None:
            return True  # cannot tell: keep waiting for Redis
        view = self.view
        since = view.idle_since
        if since is None:
            return True
        if not self._seen_work:
            # Nothing seen yet: the peers' start requests may still be on their way.
            left = self.config.redis.idle_grace - (self.ctx.clock() - self._opened_at)
            if left > 0:
                self._wake_after_grace(left)
                return True
        if view.census_wanted and (view.read_at is None or view.read_at < since):
            # Someone reads the census (metrics, the progress line): let the next round read
            # the idle frontier before the crawl is said to be over.
            view.read_census_soon()
            self._kick(poll=True)
            self._wake_after_grace(0.05)
            return True
        return False

    def _wake_after_grace(self, seconds: float) -> None:
        if self._grace_call is not None or self._closed:
            return

        def wake() -> None:
            self._grace_call = None
            self.ctx.wake()

        self._grace_call = call_later(seconds + 0.01, wake)

    def next_wakeup(self) -> float | None:
        at = self.local.next_wakeup()
        if self._not_before:
            ahead = min(self._not_before.values())
            at = ahead if at is None else min(at, ahead)
        return at

    def next_due(self) -> float | None:
        """The shared history's next due time, as the last I/O round read it."""
        return self.view.next_due

    # -- I/O rounds -----------------------------------------------------------------------

    def _tick(self) -> None:
        """Twice a second: refresh the cluster's state (and claim, feed)."""
        self._kick(poll=True)

    def _kick(self, *, poll: bool = False, lingered: bool = False) -> None:
        if self._closed or self._sending is not None or self._pool is None:
            return
        if not self._outage.may_try():
            return
        nxt = self._next
        # Enough for every free download slot (one round fills them all), and at least
        # FRONTIER_REDIS_PREFETCH ahead of the engine.
        free = self.config.concurrent_requests - len(self._held)
        nxt.want = max(0, max(self.config.redis.prefetch, free) - len(self._buffer))
        if not (nxt.want and (self._claim_more or poll)):
            nxt.want = 0
        if not (poll or nxt.want or nxt.has_writes()):
            return
        if not (poll or lingered or (nxt.want and not self._buffer)):
            # Nothing the engine waits for (writes only, or claims while it still has
            # requests at hand): gather more for ROUND_LINGER, in one script call.
            if self._linger_call is None:
                self._linger_call = call_later(ROUND_LINGER, self._linger_over)
            return
        if self._linger_call is not None:
            self._linger_call.cancel()
            self._linger_call = None
        nxt.poll = poll
        if poll and self._want_due:
            nxt.feed, self._want_due = self._want_due, 0
        # Any round may carry it: under load the poll ticks rarely find the thread free.
        census = self.view.census_due()
        if census is not None:
            nxt.census = census
        self._sending, self._next = nxt, Round()
        d = deferToThreadPool(_reactor(), self._pool, self._run_round, nxt)
        d.addCallbacks(self._round_done, self._round_failed)
        self._in_flight = d

        def landed(result: object) -> object:
            self._in_flight = None
            return result

        d.addBoth(landed)

    def _linger_over(self) -> None:
        self._linger_call = None
        self._kick(lingered=True)

    def _run_round(self, rnd: Round) -> RoundAnswer:
        """In the I/O thread: one round against Redis."""
        assert self._rounds is not None
        return self._rounds.run(rnd)

    @property
    def shared_budget(self) -> dict[str, int]:
        """The crawl's shared budget counters, as the I/O thread last read them."""
        return self._rounds.shared_budget if self._rounds is not None else {}

    def _io_final(self, rnd: Round) -> RoundAnswer | None:
        """In the I/O thread, at close: the last round, then the history's last writes."""
        answer = self._run_round(rnd) if rnd.has_writes() else None
        if self.remote is not None and self._rounds is not None:
            with contextlib.suppress(RedisFrontierError):  # the stats only: never fail close
                self._rounds.shared_budget = self.remote.budget_stats()
                # The whole frontier after this worker's last writes, for the final progress
                # line and the metrics that outlive the crawl (the last poll's may be older).
                census = self.remote.census()
                history = self.recrawler.census() if self.recrawler is not None else None
                self.view.read_final(census, history,
                                     self.remote.censuses if self.remote.count > 1 else None)
        if self.recrawler is not None:
            self.recrawler.close()
        if self._heartbeat is not None:
            self._heartbeat.stop()  # after the last completions: nothing left to renew
        return answer

    def _round_done(self, answer: RoundAnswer) -> None:
        sent = self._sending or Round()
        self._sending = None
        if answer.reclaimed:  # counted even in a round that ends after the close
            self.stats.inc_value("frontier/leases/reclaimed", answer.reclaimed)
            redis_log.info(
                "Took back %d lease(s) of a worker that stopped renewing them (it died, or "
                "lost Redis for FRONTIER_REDIS_LIVENESS) or held them past "
                "FRONTIER_LEASE_TIMEOUT: their requests are queued again, and their hosts "
                "rest as after the fetches those leases could have made", answer.reclaimed)
        if answer.taken:
            redis_log.debug("%d lease(s) given back unfetched had been taken back already",
                            answer.taken)
        if answer.lost:
            self.stats.inc_value("frontier/leases/lost", answer.lost)
            redis_log.warning(
                "%d fetch(es) of this worker ended after their lease lapsed and another "
                "worker took it back (this worker's heartbeat did not reach Redis within "
                "FRONTIER_REDIS_LIVENESS, or the fetch outlasted FRONTIER_LEASE_TIMEOUT): "
                "their requests are fetched again", answer.lost)
        if self._closed:
            self._buffer.extend(answer.leases)  # given back by close()
            return
        outage = self._outage.reached()
        if outage is not None:
            redis_log.warning("Redis is back after %.1f s; continuing", outage)
        if answer.duplicates:
            self._count("duplicates", answer.duplicates)
        self._dropped(sent, answer.dropped)
        if answer.starts_skipped:
            self.stats.inc_value("frontier/start/skipped", answer.starts_skipped)
        self._validators.update(answer.validators)
        if answer.not_before:
            self._not_before.update(answer.not_before)
            self._count("redis/claimed_ahead", len(answer.not_before))
        self._buffer.extend(answer.leases)
        if answer.due:
            self._due.extend(answer.due)
            self.ctx.due_arrived()
        busy = bool(self._buffer or self._held or self._unacked or self._due)
        if answer.queued or answer.in_flight or sent.pushes:
            self._seen_work = True
        if self.view.landed(answer, sent.census, busy):
            self.ctx.wake()  # the engine sees at once whether the crawl is over
        # Fewer leases than asked for: no other host is ready now, so the next claim waits
        # for the wake-up the round read (or the next poll).
        self._claim_more = len(answer.leases) >= sent.want
        if answer.leases:  # (due pages woke it already: due_arrived above)
            self.ctx.wake()
        if answer.wakeup is not None and answer.wakeup < 0.5:
            # A little early: the host is claimed ahead, so its fetch waits for no round.
            self._wake_at(max(0.0, answer.wakeup - CLAIM_LEAD))
        self._kick()

    def _stop_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and pool.started:
            pool.stop()
        trigger, self._shutdown_trigger = self._shutdown_trigger, None
        if trigger is not None:
            with contextlib.suppress(ValueError, KeyError):  # already fired
                _reactor().removeSystemEventTrigger(trigger)

    def _dropped(self, sent: Round, indexes: list[int]) -> None:
        """Requests the round refused: dropped as Scrapy's engine drops a request its
        scheduler refuses (request_dropped), duplicates logged by the dupe filter."""
        from scrapy import signals

        crawler = self.ctx.crawler
        self.dropped_later += len(indexes)
        for index in indexes:
            pushed = sent.pushes[index]
            request = pushed.request
            if request is None:
                continue
            if not pushed.start:
                self.ctx.dupefilter.log(request, self._spider)  # type: ignore[arg-type]
            crawler.signals.send_catch_log(signal=signals.request_dropped, request=request,
                                           spider=self._spider)

    def _wake_at(self, seconds: float) -> None:
        """A resting host becomes ready before the next poll: claim then."""
        if self._wake_call is not None:
            return

        def wake() -> None:
            self._wake_call = None
            self._claim_more = True
            self._kick()

        self._wake_call = call_later(max(0.005, seconds), wake)

    def _round_failed(self, failure: Any) -> None:
        rnd = self._sending
        self._sending = None
        # Nothing of the round is known to have landed: send all of it again.
        if rnd is not None:
            self._next = rnd.merged(self._next)
        if self._closed:
            return
        exc = failure.value
        self.stats.inc_value("frontier/redis/errors")
        if isinstance(exc, RedisFrontierUnavailable):
            if self._outage.failed():
                redis_log.warning("Redis is unreachable (%s); keeping %d requests locally "
                                  "and retrying", exc, len(self._next.pushes))
            return
        if not isinstance(exc, RedisFrontierError):
            redis_log.error("Unexpected error talking to Redis: %s", failure.getTraceback())
        self.ctx.fail("frontier_redis_error", exc)

    # -- stats ----------------------------------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def census(self) -> Census:
        """This worker's share, and the whole frontier as the last poll round read it
        (never a Redis call here: the rounds read it at most every CENSUS_REFRESH s)."""
        self.view.census_wanted = True
        local = self.local
        pending = len(self._next.pushes) + (len(self._sending.pushes) if self._sending else 0)
        mine = Census(
            backend=self.name,
            # Waiting to be pushed, or kept in this worker's memory.
            queued=pending + len(local),
            # The leases this worker holds in Redis (claimed ahead, being fetched, or
            # fetched and not completed there yet), as the shared count has them.
            in_flight=len(self._buffer) + len(self._held) + self._unacked
            + local.in_flight,
            hosts=HostCounts(active=len(self._held) + local.in_flight,
                             waiting=len(self._buffer)),
            fetched=self._fetched,
            partial=True,
        )
        return self.view.whole(mine)

    def publish_stats(self, stats: StatsCollector) -> None:
        set_value = stats.set_value
        for key, value in self.counters.items():
            set_value(f"frontier/{key}", value)
        set_value("frontier/redis/queued", self.view.queued)
        # Scrapy's own scheduler stats, for dashboards that read them.
        unserializable = self.counters.get("redis/unserializable", 0)
        if self._pushed:
            set_value("scheduler/enqueued/redis", self._pushed - self.dropped_later)
        if unserializable:
            set_value("scheduler/enqueued/memory", unserializable)
            set_value("scheduler/unserializable", unserializable)
        set_value("frontier/redis/in_flight", self.view.in_flight)
        budget = self.shared_budget
        if budget.get("budget_hosts"):
            # Shared by every worker of the crawl (the budget is per crawl, not per worker).
            set_value("frontier/budget/hosts", budget["budget_hosts"])
            set_value("frontier/budget/requests", budget.get("budget_items", 0))
        set_value("frontier/reactor/stall_max_ms", round(1000 * self._stall.worst, 1))
        set_value("frontier/reactor/stalls_over_100ms", self._stall.over)


def _daemon_thread(*args: Any, **kwargs: Any) -> threading.Thread:
    thread = threading.Thread(*args, **kwargs)
    thread.daemon = True
    return thread


def _reactor() -> Any:
    """The installed reactor (imported late: importing it early would install one)."""
    from twisted.internet import reactor

    return reactor
