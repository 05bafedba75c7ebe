"""``FRONTIER_BACKEND = "redis"``: the transport of one worker of a cluster sharing a
frontier in Redis, and its timing.

The frontier itself lives in Redis
(:class:`~scrapy_frontier.backends.redis.frontier.RedisFrontier`): every worker
running the same spider against the same Redis claims requests from it under
leases, so one host is fetched by at most one worker at a time, with the rests
measured on the Redis server's clock.

Scrapy's scheduler interface is synchronous and runs on the reactor thread, so no
Redis call is made there. The ports (:mod:`.queue`, :mod:`.events`, :mod:`.controls`,
:mod:`.inspection`) only move things in and out of local lists and of the next
:class:`~scrapy_frontier.backends.redis.round.Round`; :class:`RedisDriver` sends that round
from one I/O thread (:func:`~scrapy_frontier.backends.redis.round.run_round`): push the
requests queued since the last round (seen test, start gate, push, then mark seen), complete
the leases whose requests the engine is done with, claim a few requests ahead (the prefetch
buffer), and read whether the whole frontier is idle. It decides when a round goes (at once
when the engine waits for it, after ``ROUND_LINGER`` when it only writes, at a host's
wake-up, on the poll), lands its answer, and paces the retries while Redis is away.

Delivery is at least once. A lease is completed only after the engine is done
with its request (acknowledged by the scheduler's in-flight ledger), and the
round pushes the requests found meanwhile before it completes the lease; a URL
is marked seen only after it was pushed. A worker killed at any moment therefore
loses nothing: its heartbeat stops, its leases lapse (``FRONTIER_REDIS_LIVENESS``,
see heartbeat.py) and their requests are claimed again, by any worker. Repeats
are bounded by the leases it held.

A worker closes as soon as a round finds the shared frontier with nothing queued and
nothing leased while it holds nothing itself: every fetch holds its lease until the
requests it found are pushed, so no worker can still add work then. Only a worker that
has seen no work at all waits ``FRONTIER_REDIS_IDLE_GRACE`` first (its peers' start
requests may not have landed yet).

When Redis goes away the rounds fail: the worker logs it once, keeps everything in
its local lists, and retries with a doubling pause (up to 30 s).

Fencing (fence.py, queue.py): a lease that this worker cannot prove it still holds is never
fetched under; it is given back unfetched.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.defer import succeed
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from scrapy_frontier.backends.redis.round import Round, RoundAnswer
from scrapy_frontier.backends.redis.session import RedisSession
from scrapy_frontier.backends.redis.view import Outage, SharedView
from scrapy_frontier.errors import RedisFrontierError, RedisFrontierUnavailable
from scrapy_frontier.reactor.stalls import StallMeter
from scrapy_frontier.reactor.timer import call_later

if TYPE_CHECKING:
    from scrapy.spiders import Spider
    from twisted.internet.defer import Deferred

    from scrapy_frontier.backends.ports import BackendContext
    from scrapy_frontier.core.history import PageRecord
    from scrapy_frontier.core.politeness import DelayPolicy
    from scrapy_frontier.core.recrawl import Recrawler

redis_log = logging.getLogger("scrapy_frontier.redis")

#: Seconds a round waits for more to carry when the engine is not waiting for it (it only
#: writes, or it claims while the engine still has claimed requests at hand): one script
#: call then carries several fetches. A completion's rest counts from the fetch's end, not
#: from when the round lands.
ROUND_LINGER = 0.1
#: Seconds between two polls: a round that refreshes the cluster's state, claims and feeds
#: due pages. On one partition a poll is skipped when a round landed since the last tick
#: (it read the same state) and the claims need no poll (the next claim goes when the engine
#: asks, or at a wake-up already set).
POLL_INTERVAL = 0.5
#: Seconds before the next host's ready time that the round claiming it is sent.
CLAIM_LEAD = 0.02


class LeaseSide(Protocol):
    """What the driver asks of the queue port (RedisQueue)."""

    unfetched: set[int]
    buffer: Any

    def wanted(self) -> int: ...
    def starving(self) -> bool: ...
    def busy(self) -> bool: ...
    def landed(self, answer: RoundAnswer, sent: Round) -> None: ...
    def hand_back(self, final: Round) -> None: ...
    def lost_from_thread(self, tickets: list[int]) -> None: ...


class DueSide(Protocol):
    """What the driver asks of the history port (RedisHistory)."""

    recrawler: Recrawler | None
    due: list[PageRecord]

    def feed(self) -> int: ...
    def wants_due(self) -> bool: ...
    def landed(self, answer: RoundAnswer) -> None: ...


class IOThread:
    """The one thread that talks to Redis: a daemon, stopped with the reactor (a crawl that
    dies before close() must not keep the interpreter alive). Every round is one atomic
    script or pipeline per step, so a round cut short is sent again."""

    def __init__(self) -> None:
        self.pool: ThreadPool | None = None
        self._trigger: Any = None

    def start(self) -> None:
        self.pool = ThreadPool(minthreads=1, maxthreads=1, name="scrapy-frontier-redis")
        self.pool.threadFactory = _daemon_thread  # type: ignore[assignment]
        self.pool.start()
        self._trigger = _reactor().addSystemEventTrigger("during", "shutdown", self.stop)

    @property
    def running(self) -> bool:
        return self.pool is not None

    def run(self, fn: Callable[..., Any], *args: Any) -> Deferred[Any]:
        assert self.pool is not None
        return deferToThreadPool(_reactor(), self.pool, fn, *args)

    def stop(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None and pool.started:
            pool.stop()
        trigger, self._trigger = self._trigger, None
        if trigger is not None:
            with contextlib.suppress(ValueError, KeyError):  # already fired
                _reactor().removeSystemEventTrigger(trigger)


class IdleGrace:
    """A worker that has seen no work yet (nothing queued or leased in any of its rounds,
    nothing pushed) waits ``FRONTIER_REDIS_IDLE_GRACE`` from its start before it says the
    crawl is over: its peers' start requests may not have landed yet. The engine is woken
    when the grace ends, so that it sees the crawl is over then, not at its next 5 s
    heartbeat."""

    def __init__(self, clock: Callable[[], float], grace: float,
                 wake: Callable[[], None]) -> None:
        self.clock = clock
        self.grace = grace
        self.wake = wake
        self.opened_at = clock()
        self.seen_work = False
        self._call: Any = None

    def waiting(self) -> bool:
        if self.seen_work:
            return False
        left = self.grace - (self.clock() - self.opened_at)
        if left > 0:
            self.wake_after(left)
            return True
        return False

    def wake_after(self, seconds: float) -> None:
        if self._call is not None:
            return

        def wake() -> None:
            self._call = None
            self.wake()

        self._call = call_later(seconds + 0.01, wake)

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None


class Pacing:
    """When the next round may go: the poll every POLL_INTERVAL, the linger of a round that
    only writes, the wake-up at a host's ready time, and whether claims go at once."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        #: Claim again at once only after a round got all it asked for; otherwise at the
        #: next wake-up (a host's rest ends) or poll.
        self.claim_more = True
        #: When the last round landed.
        self.landed_at = -POLL_INTERVAL
        self._poll: Any = None
        self._wake: Any = None
        self._wake_time = 0.0
        self._linger: Any = None

    def start(self, tick: Callable[[], None]) -> None:
        self._poll = LoopingCall(tick)
        self._poll.start(POLL_INTERVAL, now=True)

    def stop(self) -> None:
        if self._poll is not None and self._poll.running:
            self._poll.stop()
        for call in (self._wake, self._linger):
            if call is not None:  # each is set to None when it fires
                call.cancel()
        self._wake = self._linger = None

    def poll_skippable(self) -> bool:
        """A round landed since the last tick (it read the same state), and the next claim
        goes anyway: when the engine asks, or at a wake-up already set."""
        recent = self.clock() - self.landed_at < POLL_INTERVAL * 0.9
        return recent and (self.claim_more or self._wake is not None)

    def linger(self, then: Callable[[], None]) -> None:
        """Call ``then`` after ROUND_LINGER (unless a linger is running already)."""
        if self._linger is not None:
            return

        def over() -> None:
            self._linger = None
            then()

        self._linger = call_later(ROUND_LINGER, over)

    def stop_linger(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def wake_at(self, seconds: float, then: Callable[[], None]) -> None:
        """A resting host becomes ready before the next poll: claim more and call ``then``
        in ``seconds`` (or at the earlier wake-up already set)."""
        seconds = max(0.005, seconds)
        at = self.clock() + seconds
        if self._wake is not None:
            if self._wake_time <= at:
                return
            self._wake.cancel()

        def wake() -> None:
            self._wake = None
            self.claim_more = True
            then()

        self._wake_time = at
        self._wake = call_later(seconds, wake)


class RedisDriver:
    """The I/O rounds of one worker: what the next round carries, when it goes, and what
    its answer changes."""

    def __init__(self, context: BackendContext, *, client: Any = None) -> None:
        self.ctx = context
        self._client = client
        self.session: RedisSession | None = None
        self.io = IOThread()
        #: The round the ports fill, and the one in the I/O thread.
        self.next = Round()
        self.sending: Round | None = None
        self.in_flight: Deferred[Any] | None = None
        self.outage = Outage(context.clock)
        self.view = SharedView(context.clock)
        self.grace = IdleGrace(context.clock, context.config.redis.idle_grace,
                               lambda: self.ctx.wake())
        # How late the loop runs a 50 ms beat: how long answers of the I/O thread wait.
        self.stall = StallMeter(context.clock, schedstat=None, beat=0.05)
        self.pacing = Pacing(context.clock)
        self.closed = False
        self.queue: LeaseSide
        self.history: DueSide
        #: Puts the steered policy entries in force (``HostControlPort.steer_policies``),
        #: and what it was last given.
        self.steer_to: Callable[[dict[str, Any]], list[str]] | None = None
        self._steered: dict[str, Any] | None = None

    def serve(self, queue: LeaseSide, history: DueSide) -> None:
        """The ports whose round this driver sends, and whose answers it lands."""
        self.queue, self.history = queue, history

    # -- opening and closing -----------------------------------------------------------

    def open(self, spider: Spider) -> None:
        session = self.session = RedisSession.open(
            self.ctx.config, spider, self._client, self.ctx.crawler.settings,
            clock=self.ctx.clock, unfetched=self.queue.unfetched,
            lost=self.queue.lost_from_thread)
        session.rounds.recrawler = self.history.recrawler
        self._steer(session.remote.policies())  # before the first claim
        self.grace.opened_at = self.ctx.clock()
        self.io.start()
        self.stall.start()
        self.pacing.start(self._tick)

    @property
    def location(self) -> str:
        return self.session.location if self.session is not None else "Redis"

    def _steer(self, raw: dict[str, Any] | None) -> None:
        """Put the steered policy entries read from Redis in force when they changed."""
        if raw is None or raw == self._steered or self.steer_to is None:
            return
        if raw or self._steered is not None:
            self.steer_to(raw)
        self._steered = raw

    def use_delays(self, delays: Callable[[str], DelayPolicy] | None) -> None:
        """Each host's delay rule from now (read by the I/O thread at each completion)."""
        if self.session is not None:
            for part in self.session.remote.parts:
                part.policy_of = delays

    def close(self) -> Deferred[None] | None:
        """Hand everything back to Redis, then stop the I/O thread.

        The engine is done with every request now: complete the leases still
        waiting, and give back the prefetched ones (pushed again, their leases
        completed) so other workers need not wait for them to expire.
        """
        self.closed = True
        self.pacing.stop()
        self.grace.cancel()
        self.stall.stop()
        session = self.session
        if not self.io.running or session is None:
            return None
        # Let a round in flight land first, so nothing is sent twice.
        waiting = self.in_flight if self.in_flight is not None else succeed(None)

        def send_final(_: object) -> Deferred[Any]:
            final, self.next = self.next, Round()
            self.queue.hand_back(final)
            return self.io.run(session.run_final, final, self.view)

        def report(result: object) -> None:
            if isinstance(result, Failure):
                redis_log.error("Could not hand the worker's state back to Redis at close "
                                "(%s): its leases will expire and their requests be fetched "
                                "again", result.getErrorMessage())
            self.io.stop()

        d = waiting.addBoth(send_final)
        d.addBoth(report)
        return d

    # -- what the ports ask --------------------------------------------------------------

    def backlog(self) -> int:
        """Requests pushed here that no round carried to Redis yet."""
        return len(self.next.pushes) + (len(self.sending.pushes) if self.sending else 0)

    def carrying(self) -> bool:
        """A round still has pushes, completions or requests to set aside to send."""
        return any(rnd is not None and bool(rnd.pushes or rnd.completions or rnd.quarantine)
                   for rnd in (self.next, self.sending))

    def shared_pending(self) -> bool:
        """Whether the shared frontier may still produce work, as the rounds read it (the
        worker itself holds nothing)."""
        if self.outage.since is not None:
            return True  # cannot tell: keep waiting for Redis
        view = self.view
        since = view.idle_since
        if since is None or self.grace.waiting():
            return True
        if view.census_wanted and (view.read_at is None or view.read_at < since):
            # Someone reads the census (metrics, the progress line): let the next round read
            # the idle frontier before the crawl is said to be over.
            view.read_census_soon()
            self.kick(poll=True)
            self.grace.wake_after(0.05)
            return True
        return False

    @property
    def shared_budget(self) -> dict[str, int]:
        """The crawl's shared budget counters, as the I/O thread last read them."""
        return self.session.rounds.shared_budget if self.session is not None else {}

    # -- sending rounds ------------------------------------------------------------------

    def _tick(self) -> None:
        """Every POLL_INTERVAL: refresh the cluster's state (and claim, feed)."""
        session = self.session
        if (session is not None and session.remote.count == 1
                and not self.history.wants_due() and self.pacing.poll_skippable()):
            return
        self.kick(poll=True)

    def kick(self, *, poll: bool = False, lingered: bool = False) -> None:
        """Send the next round now if the engine waits for it (or this is a poll); a round
        that only writes waits ROUND_LINGER to carry more. Any round that goes claims what
        the queue wants: claims ahead then take the hosts ready soon on the way."""
        if self.closed or self.sending is not None or not self.io.running:
            return
        if not self.outage.may_try():
            return
        nxt = self.next
        want = self.queue.wanted()
        claiming = bool(want) and (self.pacing.claim_more or poll)
        if not (poll or claiming or nxt.has_writes()):
            return
        if not (poll or lingered or (claiming and self.queue.starving())):
            # Nothing the engine waits for (writes only, or claims while it still has
            # requests at hand): gather more for ROUND_LINGER, in one script call.
            self.pacing.linger(lambda: self.kick(lingered=True))
            return
        self.pacing.stop_linger()
        nxt.want = want
        self._send(nxt, poll)

    def _send(self, nxt: Round, poll: bool) -> None:
        nxt.poll = poll
        if poll:
            nxt.feed = self.history.feed()
        # Any round may carry it: under load the poll ticks rarely find the thread free.
        census = self.view.census_due()
        if census is not None:
            nxt.census = census
        self.sending, self.next = nxt, Round()
        d = self.io.run(self._run_round, nxt)
        d.addCallbacks(self._round_done, self._round_failed)
        self.in_flight = d

        def landed(result: object) -> object:
            self.in_flight = None
            return result

        d.addBoth(landed)

    def _run_round(self, rnd: Round) -> RoundAnswer:
        """In the I/O thread: one round against Redis."""
        assert self.session is not None
        return self.session.run(rnd)

    # -- landing rounds ------------------------------------------------------------------

    def _round_done(self, answer: RoundAnswer) -> None:
        sent = self.sending or Round()
        self.sending = None
        report_leases(self.ctx.stats, answer)  # even in a round that ends after the close
        if self.closed:
            self.queue.buffer.extend(answer.leases)  # given back by close()
            return
        self.pacing.landed_at = self.ctx.clock()
        outage = self.outage.reached()
        if outage is not None:
            redis_log.warning("Redis is back after %.1f s; continuing", outage)
        self.queue.landed(answer, sent)
        self.history.landed(answer)
        if self.session is not None:
            self._steer(self.session.rounds.memory.policies)
        if answer.queued or answer.in_flight or sent.pushes:
            self.grace.seen_work = True
        busy = self.queue.busy() or bool(self.history.due)
        if self.view.landed(answer, sent.census, busy):
            self.ctx.wake()  # the engine sees at once whether the crawl is over
        # Fewer leases than asked for: no other host is ready now, so the next claim waits
        # for the wake-up the round read (or the next poll).
        if sent.want:
            self.pacing.claim_more = len(answer.leases) >= sent.want
        if answer.leases:  # (due pages woke it already: due_arrived)
            self.ctx.wake()
        if answer.wakeup is not None and answer.wakeup < POLL_INTERVAL:
            # A little early: the host is claimed ahead, so its fetch waits for no round.
            self.pacing.wake_at(answer.wakeup - CLAIM_LEAD, self.kick)
        self.kick()

    def _round_failed(self, failure: Any) -> None:
        rnd = self.sending
        self.sending = None
        # Nothing of the round is known to have landed: send all of it again.
        if rnd is not None:
            self.next = rnd.merged(self.next)
        if self.closed:
            return
        exc = failure.value
        self.ctx.stats.inc_value("frontier/redis/errors")
        if isinstance(exc, RedisFrontierUnavailable):
            if self.outage.failed():
                redis_log.warning("Redis is unreachable (%s); keeping %d requests locally "
                                  "and retrying", exc, len(self.next.pushes))
            return
        if not isinstance(exc, RedisFrontierError):
            redis_log.error("Unexpected error talking to Redis: %s", failure.getTraceback())
        self.ctx.fail("frontier_redis_error", exc)


def report_leases(stats: Any, answer: RoundAnswer) -> None:
    """Log and count the leases a round took back, found taken, or found lost."""
    if answer.reclaimed:
        stats.inc_value("frontier/leases/reclaimed", answer.reclaimed)
        redis_log.info(
            "Took back %d lease(s) of a worker that stopped renewing them (it died, or "
            "lost Redis for FRONTIER_REDIS_LIVENESS) or held them past "
            "FRONTIER_LEASE_TIMEOUT: their requests are queued again, and their hosts "
            "rest as after the fetches those leases could have made", answer.reclaimed)
    if answer.taken:
        redis_log.debug("%d lease(s) given back unfetched had been taken back already",
                        answer.taken)
    if answer.lost:
        stats.inc_value("frontier/leases/lost", answer.lost)
        redis_log.warning(
            "%d fetch(es) of this worker ended after their lease lapsed and another "
            "worker took it back (this worker's heartbeat did not reach Redis within "
            "FRONTIER_REDIS_LIVENESS, or the fetch outlasted FRONTIER_LEASE_TIMEOUT): "
            "their requests are fetched again", answer.lost)


def _daemon_thread(*args: Any, **kwargs: Any) -> threading.Thread:
    thread = threading.Thread(*args, **kwargs)
    thread.daemon = True
    return thread


def _reactor() -> Any:
    """The installed reactor (imported late: importing it early would install one)."""
    from twisted.internet import reactor

    return reactor
