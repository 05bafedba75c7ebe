"""The queue port on Redis: leases claimed ahead, handed out, completed and acknowledged.

Pushes and lease ends go into the driver's next round; the leases its rounds claim wait
here (the prefetch buffer) until the engine asks. A request that cannot be serialized stays
in this worker's memory, in a small local frontier (polite within this process), with a
warning and the stat ``frontier/redis/unserializable``; a kill loses it, as with Scrapy's
JOBDIR.

Fencing (fence.py): a lease that this worker cannot prove it still holds -- it did not run,
or its heartbeat did not reach Redis, for about ``FRONTIER_REDIS_LIVENESS`` -- is never
fetched under. Where a request leaves the frontier (:meth:`RedisQueue.claim`, which also
gives back the requests claimed ahead) and where it reaches the downloader (the timing
middleware asks :meth:`RedisQueue.holds`), such a lease is given back unfetched: its request
is queued again if the lease is still held in Redis, and left to the worker that took it
back otherwise. A renewal that finds leases gone gives back those still at hand at once.
Each is counted in ``frontier/leases/lapsed`` and logged (one warning per event, naming the
hosts).
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy_frontier.backends.ports import Handout, QueuePort, SeenTest
from scrapy_frontier.backends.redis.frontier import Quarantined, RedisLease
from scrapy_frontier.backends.redis.round import LeaseEnd, Pushed, Round, RoundAnswer
from scrapy_frontier.codec import request_codec, saved_url
from scrapy_frontier.core.frontier import Frontier
from scrapy_frontier.core.history import QUARANTINE_LOGGED
from scrapy_frontier.errors import StoreError, Unserializable, UntrustedRow, requeue_advice
from scrapy_frontier.reactor.timer import call_later
from scrapy_frontier.validators import add_validators

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.spiders import Spider

    from scrapy_frontier.backends.ports import BackendContext
    from scrapy_frontier.backends.redis.driver import RedisDriver

logger = logging.getLogger("scrapy_frontier.scheduler")
redis_log = logging.getLogger("scrapy_frontier.redis")

#: Requests waiting locally for a round beyond which no new request is handed out:
#: each fetch adds links, so while Redis cannot keep up (or is away) the backlog
#: stops growing instead of filling the worker's memory.
MAX_BACKLOG = 50_000
#: A push without a seen test: queued whatever the seen set holds, and not marked.
_NO_SEEN_TEST = SeenTest(None, False, False, False, None)


class Lapses:
    """Leases given back unfetched: one warning per turn of the reactor, naming the hosts,
    and their count in ``frontier/leases/lapsed``."""

    def __init__(self, stats: Any, window: Callable[[], float]) -> None:
        self.stats = stats
        self.window = window
        self.hosts: list[str] = []
        self._call: Any = None

    def add(self, host: str, *, closed: bool) -> None:
        self.hosts.append(host)
        if self._call is None and not closed:
            self._call = call_later(0.0, self._fire)

    def _fire(self) -> None:
        self._call = None
        self.report()

    def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
        self.report()

    def report(self) -> None:
        hosts, self.hosts = self.hosts, []
        if not hosts:
            return
        self.stats.inc_value("frontier/leases/lapsed", len(hosts))
        redis_log.warning(
            "%d lease(s) of this worker lapsed before their requests were sent (host(s) %s): "
            "this process did not run, or its heartbeat did not reach Redis, for about %.1f s "
            "(FRONTIER_REDIS_LIVENESS), so other workers may have taken those hosts back. "
            "They are given back unfetched, each to be fetched once by whoever holds it "
            "(counted in frontier/leases/lapsed)", len(hosts), ", ".join(sorted(set(hosts))),
            self.window())


class RedisQueue(QueuePort):
    """One worker's share of the queue shared through Redis."""

    shared_seen: ClassVar[bool] = True
    dropped_later = 0

    def __init__(self, context: BackendContext, driver: RedisDriver) -> None:
        self.ctx = context
        self.driver = driver
        self._codec: Any = None
        self._spider: Spider | None = None
        #: Leases claimed ahead, not handed out yet.
        self.buffer: deque[RedisLease] = deque()
        # Ticket -> clock time before which a lease claimed ahead of its host's ready time
        # must not be handed out (see session.CLAIM_AHEAD).
        self.not_before: dict[int, float] = {}
        #: Leases handed out, not completed yet.
        self.held: dict[int, RedisLease] = {}
        self._validators: dict[int, tuple[str | None, str | None]] = {}
        #: Fetches completed, whose lease end waits for the engine (see ack).
        self.unacked = 0
        config = context.config
        # Requests that cannot be serialized: polite within this process only.
        self.local: Frontier[Request] = Frontier(
            front_queues=config.front_queues, priority_bias=config.priority_bias,
            back_queues=max(1, config.concurrent_requests),
            policy=config.policy, policy_of=config.host_policies.delays,
            lease_timeout=config.lease_timeout, clock=context.clock,
            rng=random.Random(config.seed), connections=config.host_policies.connections,
        )
        #: This worker's fetches, for its census, and the tickets it gives back unfetched.
        self.fetched = 0
        self.unfetched: set[int] = set()
        self.pushed = 0
        self.counters: dict[str, int] = {}
        self._lapses = Lapses(context.stats, self._window)

    def open(self, spider: Spider) -> None:
        self._spider = spider
        session = self.driver.session
        assert session is not None  # the driver opens first
        self._codec = request_codec(spider, trust=session.trust)

    def closing(self) -> None:
        self._lapses.close()
        if len(self.local) and self.driver.io.running:
            logger.warning("%d requests that cannot be serialized were still queued in this "
                           "worker's memory and are lost with it", len(self.local))

    def count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    # -- pushes and claims ---------------------------------------------------------------

    def push(self, request: Request, host: str, level: int,
             seen: SeenTest | None = None) -> bool:
        fp, dedupe, mark, start, key = seen if seen is not None else _NO_SEEN_TEST
        try:
            data = self._codec.encode(request)
        except Unserializable as exc:
            self._keep_local(request, exc)
            return self.local.push(host, level, request)
        fp = fp if fp is not None else 0
        self.pushed += 1
        self.driver.next.pushes.append(Pushed(
            fp, fp if key is None else key, dedupe, mark, start, host, level,
            fp.to_bytes(8, "big", signed=True) + data,
            request if dedupe else None,
        ))
        self.driver.kick()
        return True

    def _keep_local(self, request: Request, exc: Unserializable) -> None:
        self.count("redis/unserializable")
        if self.counters["redis/unserializable"] == 1:
            logger.warning(
                "Unable to serialize request %s for the shared frontier (%s): it stays in this "
                "worker's memory (polite within this worker only, lost if it dies; "
                "counted in frontier/redis/unserializable). Use spider methods as "
                "callbacks and picklable meta.", request, exc,
            )

    def claim(self) -> Handout | None:
        driver = self.driver
        if driver.closed:
            return None
        if driver.backlog() > MAX_BACKLOG:
            self.count("redis/backpressure")
            driver.kick()
            return None
        while self.buffer:
            lease = self._ready_lease()
            if lease is None:
                break  # every lease at hand was claimed ahead: next_wakeup says when
            if not self.holds(lease.ticket):
                self._lapsed([lease, *self._unproven()])
                continue
            try:
                request: Request = self._codec.decode(lease.item[8:])
            except StoreError as exc:
                self._set_aside(lease, exc)
                continue
            self.held[lease.ticket] = lease
            validators = self._validators.pop(lease.ticket, None)
            if validators is not None:
                add_validators(request, *validators)
            driver.kick()
            return Handout(lease.ticket, lease.host, request)
        driver.kick()
        local = self.local.pop()
        if local is not None:
            # Negative tickets: never a Redis lease id.
            return Handout(-local.ticket, local.host, local.item)
        return None

    def _ready_lease(self) -> RedisLease | None:
        """The first lease at hand whose host may be contacted now, taken out."""
        buffer, not_before = self.buffer, self.not_before
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

    def wanted(self) -> int:
        """Leases the next round should claim: enough for every free download slot (one
        round fills them all), and at least FRONTIER_REDIS_PREFETCH ahead of the engine."""
        config = self.ctx.config
        free = config.concurrent_requests - len(self.held)
        return max(0, max(config.redis.prefetch, free) - len(self.buffer))

    def starving(self) -> bool:
        """Nothing claimed is at hand: the engine waits for the next round."""
        return not self.buffer

    # -- completions -------------------------------------------------------------------

    def complete(self, ticket: int, seconds: float, rest: float, ended_at: float | None = None,
                 *, sent: bool = True) -> object:
        """The host is released in Redis only at :meth:`ack`: the lease end it returns
        is sent once the engine is done with the request."""
        self.fetched += 1
        if ticket < 0:
            # This worker's memory: nothing to acknowledge (its tokens are None).
            ago = 0.0 if ended_at is None else self.ctx.clock() - ended_at
            self.local.complete(-ticket, seconds, rest_at_least=rest, ended_ago=ago, sent=sent)
            return None
        lease = self.held.pop(ticket, None)
        if lease is None or self.driver.closed:
            return None
        self.unacked += 1
        return LeaseEnd(lease, seconds, rest, ended_at, sent=sent)

    def ack(self, token: object) -> None:
        if isinstance(token, LeaseEnd):
            self.unacked -= 1
            self.driver.next.completions.append(token)
            self.driver.kick()

    # -- fencing (fence.py) ----------------------------------------------------------------

    def holds(self, ticket: int) -> bool:
        """Whether this worker can prove it still holds the lease of a request it handed out
        (the timing middleware asks, just before the request reaches the downloader). A
        request kept in this worker's memory has no lease to lose."""
        session = self.driver.session
        return ticket < 0 or session is None or session.fence.holds(ticket)

    def give_back(self, ticket: int) -> None:
        """The request of ``ticket`` is not sent (its lease failed :meth:`holds`): give its
        lease back unfetched. No fetch, so no rest and no completion of a fetch."""
        lease = self.held.pop(ticket, None)
        if lease is not None:
            self._lapsed([lease])

    def _unproven(self) -> list[RedisLease]:
        """The leases at hand that the fence no longer proves held, taken out."""
        out = [lease for lease in self.buffer if not self.holds(lease.ticket)]
        for lease in out:
            self.buffer.remove(lease)
        return out

    def lost_from_thread(self, tickets: list[int]) -> None:
        """From the heartbeat thread: a renewal found leases gone (the fence has them as
        lost already); those still at hand are given back on the reactor's next turn."""
        from twisted.internet import reactor

        reactor.callFromThread(self._renewal_lost)  # type: ignore[attr-defined]

    def _renewal_lost(self) -> None:
        if not self.driver.closed:
            lapsed = self._unproven()
            if lapsed:
                self._lapsed(lapsed)

    def _lapsed(self, leases: list[RedisLease]) -> None:
        """Give ``leases`` back unfetched: the next round queues their requests again where
        the leases are still held, and leaves them to the worker that took them back where
        not (one atomic step per lease, so each request stays queued exactly once)."""
        completions = self.driver.next.completions
        for lease in leases:
            self.not_before.pop(lease.ticket, None)
            self._validators.pop(lease.ticket, None)
            completions.append(LeaseEnd(lease, 0.0, 0.0, None, True))
            self._lapses.add(lease.host, closed=self.driver.closed)
        self.driver.kick()

    def _window(self) -> float:
        session = self.driver.session
        return (session.fence.window if session is not None
                else self.ctx.config.redis.liveness)

    def _set_aside(self, lease: RedisLease, exc: StoreError) -> None:
        """A claimed request that cannot be rebuilt goes to the quarantine key, and its
        lease completes unfetched (its host is free for the next URL)."""
        self.count("redis/undecodable")
        if isinstance(exc, UntrustedRow):
            self.count("redis/untrusted")
        error = str(exc.__cause__ or exc)
        nxt = self.driver.next
        nxt.quarantine.append(Quarantined(
            lease.host, lease.level, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            error, lease.item))
        nxt.completions.append(LeaseEnd(lease, 0.0, 0.0, None))
        count = self.counters["redis/undecodable"]
        session = self.driver.session
        assert session is not None  # claimed from it
        if count <= QUARANTINE_LOGGED:
            url = saved_url(lease.item[8:])
            logger.error(
                "The request %s claimed from Redis (host %r, level %d) cannot be rebuilt (%s). "
                "It is not crawled: it is kept in %s, and the crawl goes on without it. "
                "scrapy frontier quarantine lists what is there. %s.%s",
                url if url is not None else "", lease.host, lease.level, error,
                session.remote.key("quarantine"),
                requeue_advice(exc),
                " Further requests set aside are only counted (frontier/redis/undecodable)."
                if count == QUARANTINE_LOGGED else "")

    # -- rounds --------------------------------------------------------------------------

    def landed(self, answer: RoundAnswer, sent: Round) -> None:
        """Take in what a round claimed and refused."""
        if answer.duplicates:
            self.count("duplicates", answer.duplicates)
        self._dropped(sent, answer.dropped)
        if answer.starts_skipped:
            self.ctx.stats.inc_value("frontier/start/skipped", answer.starts_skipped)
        self._validators.update(answer.validators)
        if answer.not_before:
            self.not_before.update(answer.not_before)
            self.count("redis/claimed_ahead", len(answer.not_before))
        self.buffer.extend(answer.leases)

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

    def hand_back(self, final: Round) -> None:
        """At close (the shell acknowledged every completed fetch): complete the leases
        still held, and give back those at hand, pushed again; neither counts against its
        host's budget."""
        final.completions.extend(LeaseEnd(lease, 0.0, 0.0, None)
                                 for lease in self.held.values())
        self.unfetched.update(self.held)
        self.unfetched.update(lease.ticket for lease in self.buffer)
        self.held.clear()
        for lease in self.buffer:
            final.pushes.append(Pushed(0, 0, False, False, False, lease.host, lease.level,
                                        lease.item))
            final.completions.append(LeaseEnd(lease, 0.0, 0.0, None))
        self.buffer.clear()
        self.not_before.clear()

    def busy(self) -> bool:
        """This worker holds work: leases at hand, handed out or waiting for their ack."""
        return bool(self.buffer or self.held or self.unacked)

    # -- counts --------------------------------------------------------------------------

    def __len__(self) -> int:
        return (self.driver.view.queued + len(self.buffer) + self.driver.backlog()
                + len(self.local))

    def has_pending(self) -> bool:
        driver = self.driver
        if self.busy() or len(self.local) or driver.history.due or driver.carrying():
            return True
        return driver.shared_pending()

    def next_wakeup(self) -> float | None:
        at = self.local.next_wakeup()
        if self.not_before:
            ahead = min(self.not_before.values())
            at = ahead if at is None else min(at, ahead)
        return at
