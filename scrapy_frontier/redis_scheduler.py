"""``FRONTIER_BACKEND = "redis"``: the scheduler of one worker in a cluster sharing a frontier.

The frontier itself lives in Redis (:class:`~scrapy_frontier.redis_frontier.RedisFrontier`):
every worker running the same spider against the same Redis claims requests from
it under leases, so one host is fetched by at most one worker at a time, with the
rests measured on the Redis server's clock.

Scrapy's scheduler interface is synchronous and runs on the reactor thread, so no
Redis call is made there. One I/O thread does *rounds*: push the requests queued
since the last round (seen test, then push, then mark seen), complete the leases
whose requests the engine is done with, claim a few requests ahead (the prefetch
buffer), and read whether the whole frontier is idle. The reactor only moves
things in and out of local lists.

Delivery is at least once. A request's lease is completed only after the engine
is done with it (its callback's requests queued here, or its retry or redirect),
and the round pushes those requests before it completes the lease; a URL is
marked seen only after it was pushed. A worker killed at any moment therefore
loses nothing: its leases expire (``FRONTIER_LEASE_TIMEOUT``) and their requests
are claimed again, by any worker. Repeats are bounded by the leases it held.

When Redis goes away the rounds fail: the worker logs it once, keeps everything in
its local lists, and retries with a doubling pause (up to 30 s). Nothing is lost
while the worker lives; with Redis persistence on, nothing is lost either when
Redis restarts.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from twisted.internet.defer import succeed
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from scrapy_frontier.config import FrontierConfig
from scrapy_frontier.dupefilter import request_fp64
from scrapy_frontier.history import PageRecord
from scrapy_frontier.history_redis import RedisHistoryStore
from scrapy_frontier.hostkey import HostlessURL, host_key
from scrapy_frontier.recrawl import Visit
from scrapy_frontier.recrawl_scrapy import (
    FORCE_META,
    RECRAWL_META,
    RecrawlHooks,
    add_validators,
)
from scrapy_frontier.redis_frontier import (
    RedisFrontier,
    RedisFrontierError,
    RedisFrontierUnavailable,
    RedisLease,
    RedisSeenSet,
    redis_from_settings,
)
from scrapy_frontier.scheduler import FETCH_START_META, LEASE_META, FrontierScheduler, logger
from scrapy_frontier.sqlite_store import StoreError, Unserializable, request_codec
from scrapy_frontier.timer import call_later

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.http import Response
    from scrapy.spiders import Spider
    from twisted.internet.defer import Deferred

redis_log = logging.getLogger("scrapy_frontier.redis")

#: Longest pause between two attempts while Redis is unreachable.
MAX_BACKOFF = 30.0
#: Requests waiting locally for a round beyond which no new request is handed out:
#: each fetch adds links, so while Redis cannot keep up (or is away) the backlog
#: stops growing instead of filling the worker's memory.
MAX_BACKLOG = 50_000


@dataclass
class _Round:
    """What one I/O round sends; kept until Redis acknowledged it (retried otherwise)."""

    #: (fingerprint or None, filter duplicates?, due gate?, host, level, item)
    pushes: list[tuple[int | None, bool, bool, str, int, bytes]] = field(default_factory=list)
    completions: list[tuple[RedisLease, float, float]] = field(default_factory=list)
    min_rests: list[tuple[str, float]] = field(default_factory=list)
    retire: list[str] = field(default_factory=list)
    #: Page history updates: (fingerprint, URL, the visit, or None for a download error).
    visits: list[tuple[int, str, Visit | None]] = field(default_factory=list)
    want: int = 0
    feed: int = 0
    """How many due pages of the history to claim for recrawling."""


@dataclass
class _Answer:
    leases: list[RedisLease]
    duplicates: int
    idle: bool
    queued: int
    in_flight: int
    wakeup: float | None
    """Seconds until a host becomes ready, when the round could not claim all it wanted."""
    validators: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    """Lease ticket -> (ETag, Last-Modified) of the page's last full response."""
    due: list[PageRecord] = field(default_factory=list)
    not_due: int = 0


class RedisFrontierScheduler(FrontierScheduler):
    """One worker's view of a frontier shared through Redis."""

    def __init__(
        self,
        crawler: Crawler,
        config: FrontierConfig,
        dupefilter: BaseDupeFilter,
        *,
        client: Any = None,
    ) -> None:
        super().__init__(crawler, config, dupefilter)
        settings = crawler.settings
        self._client = client
        self.remote: RedisFrontier | None = None
        self.seen: RedisSeenSet | None = None
        self.prefetch = max(1, settings.getint("FRONTIER_REDIS_PREFETCH", 4))
        self.idle_grace = max(0.0, settings.getfloat("FRONTIER_REDIS_IDLE_GRACE", 5.0))
        self._codec: Any = None
        self._pool: ThreadPool | None = None
        self._buffer: deque[RedisLease] = deque()
        self._held: dict[int, RedisLease] = {}
        # Fetches that ended, waiting for the engine to be done with their request.
        self._finished: list[tuple[RedisLease, float, float, Request]] = []
        self._next = _Round()
        self._sending: _Round | None = None
        self._in_flight: Deferred[Any] | None = None
        self._retry_at = 0.0
        self._backoff = 0.0
        self._outage_since: float | None = None
        self._remote_idle_since: float | None = None
        self._remote_queued = 0
        self._remote_in_flight = 0
        self._poll: Any = None
        # Claim again at once only after a round got all it asked for; otherwise at
        # the next wake-up (a host's rest ends) or poll.
        self._claim_more = True
        self._wake_call: Any = None
        self._stall = _StallMeter()
        self.counters: dict[str, int] = {}
        self._validators: dict[int, tuple[str | None, str | None]] = {}

    # -- opening and closing -----------------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        from scrapy import signals

        self._listen(spider)
        settings = self.crawler.settings
        client = self._client if self._client is not None else redis_from_settings(settings)
        self.remote = RedisFrontier.from_settings(settings, spider.name, client=client)
        seen_key = (settings.get("FRONTIER_REDIS_SEEN_KEY") or "%(spider)s:seen:") % {
            "spider": spider.name}
        self.seen = RedisSeenSet(
            client, seen_key, expected=settings.getint("FRONTIER_REDIS_SEEN_EXPECTED", 10_000_000)
        )
        self._codec = request_codec(spider)
        if self.config.recrawl.mode != "off":
            history_key = (settings.get("FRONTIER_REDIS_HISTORY_KEY") or "%(spider)s:history:") % {
                "spider": spider.name}
            history = RedisHistoryStore(client, history_key)
            self.recrawl = RecrawlHooks.with_store(self.crawler, self.config.recrawl, history)
            if self.config.recrawl.mode == "continuous":
                self.crawler.signals.connect(self._on_spider_idle, signal=signals.spider_idle)
        self._pool = ThreadPool(minthreads=1, maxthreads=1, name="scrapy-frontier-redis")
        self._pool.start()
        self._stall.start()
        self._poll = LoopingCall(self._tick)
        self._poll.start(0.5, now=True)
        redis_log.info("Frontier on Redis: prefix %r, seen set %r, prefetch %d",
                       self.remote.prefix, seen_key, self.prefetch)
        self.stats.set_value("frontier/backend", "redis")
        return None

    def close(self, reason: str) -> Deferred[None] | None:
        """Hand everything back to Redis, then stop the I/O thread.

        The engine is done with every request now: complete the leases still
        waiting, and give back the prefetched ones (pushed again, their leases
        completed) so other workers need not wait for them to expire.
        """
        self._closed = True
        self._cancel_timer()
        if self._poll is not None and self._poll.running:
            self._poll.stop()
        if self._wake_call is not None:
            self._wake_call.cancel()
            self._wake_call = None
        self._stall.stop()
        pool = self._pool
        if pool is None:
            return None
        # Let a round in flight land first, so nothing is sent twice.
        waiting = self._in_flight if self._in_flight is not None else succeed(None)

        def send_final(_: object) -> Deferred[Any]:
            final = self._next
            self._next = _Round()
            for lease, seconds, rest, _request in self._finished:
                final.completions.append((lease, seconds, rest))
            self._finished.clear()
            for lease in self._buffer:
                final.pushes.append((None, False, False, lease.host, lease.level, lease.item))
                final.completions.append((lease, 0.0, 0.0))
            self._buffer.clear()
            return deferToThreadPool(_reactor(), pool, self._io_final, final)

        def report(result: object) -> None:
            if isinstance(result, Failure):
                redis_log.error("Could not hand the worker's state back to Redis at close "
                                "(%s): its leases will expire and their requests be fetched "
                                "again", result.getErrorMessage())
            pool.stop()
            self.publish_stats()

        d = waiting.addBoth(send_final)
        d.addBoth(report)
        return d

    # -- the scheduler interface ---------------------------------------------------------

    def enqueue_request(self, request: Request) -> bool:
        try:
            host = host_key(request)
        except HostlessURL as exc:
            self.stats.inc_value(f"frontier/rejected/{exc.reason}")
            logger.warning("Dropped %s: %s", request, exc)
            return False
        meta = request.meta
        ticket = meta.pop(LEASE_META, None)
        started = meta.pop(FETCH_START_META, None)
        try:
            data = self._codec.encode(request)
        except Unserializable as exc:
            # A shared frontier cannot hold what it cannot serialize: say so loudly.
            self.stats.inc_value("frontier/redis/unserializable")
            logger.error("Dropped %s: it cannot be serialized for the shared frontier (%s). "
                         "Use spider methods as callbacks and picklable meta.", request, exc)
            return False
        # dont_filter requests skip the seen test but are marked seen, so that a later
        # ordinary link to the same URL is not fetched a second time.
        fp = request_fp64(self.crawler.request_fingerprinter, request)
        # ... and, with a page history, the due test (start URLs of pages not due).
        gate = (request.dont_filter and self.recrawl is not None and ticket is None
                and not meta.get(RECRAWL_META) and not meta.get(FORCE_META))
        priority = request.priority
        if self.host_rules.rules:
            priority += self.host_rules.boost(host)
        self._next.pushes.append(
            (fp, not request.dont_filter, gate, host, self.mapper.level(priority),
             fp.to_bytes(8, "big", signed=True) + data)
        )
        self._enqueued += 1
        if ticket is not None:
            # A redirect, retry or swap of a leased request: that fetch is over.
            self._release(ticket, started, None, None, request)
        self._kick()
        return True

    def next_request(self) -> Request | None:
        if self._closed:
            return None
        self._move_finished()
        backlog = len(self._next.pushes) + (len(self._sending.pushes) if self._sending else 0)
        if backlog > MAX_BACKLOG:
            self._count("redis/backpressure")
            self._kick()
            return None
        while self._buffer:
            lease = self._buffer.popleft()
            try:
                request: Request = self._codec.decode(lease.item[8:])
            except StoreError as exc:
                self.stats.inc_value("frontier/redis/undecodable")
                logger.error("A request claimed from Redis cannot be rebuilt (%s); it is "
                             "completed without being fetched", exc)
                self._next.completions.append((lease, 0.0, 0.0))
                continue
            request.meta[LEASE_META] = lease.ticket
            self._held[lease.ticket] = lease
            validators = self._validators.pop(lease.ticket, None)
            if validators is not None:
                add_validators(request, *validators)
            self._count("dequeued")
            self._kick()
            return request
        self._kick()
        return None

    def has_pending_requests(self) -> bool:
        if self._buffer or self._held or self._finished:
            return True
        for rnd in (self._next, self._sending):
            if rnd is not None and (rnd.pushes or rnd.completions):
                return True
        if self._outage_since is not None:
            return True  # cannot tell: keep waiting for Redis
        rc = self.recrawler
        if rc is not None and rc.settings.mode == "due" and not rc.exhausted:
            return True  # due pages still to feed
        since = self._remote_idle_since
        # The cluster's work is over only when it has looked over for a while: another
        # worker's fetch in flight may still add requests.
        return since is None or time.monotonic() - since < self.idle_grace

    def __len__(self) -> int:
        return self._remote_queued + len(self._buffer)

    # -- fetch ends -----------------------------------------------------------------------

    def fetch_finished(
        self,
        request: Request,
        response: Response | None = None,
        exception: BaseException | None = None,
    ) -> None:
        if exception is not None:
            self._history_download_error(request, exception)
        ticket = request.meta.get(LEASE_META)
        if ticket is None:
            return
        self._release(ticket, request.meta.get(FETCH_START_META), response, exception, request)

    def _release(self, ticket: int, started: float | None, response: Response | None,
                 exception: BaseException | None, request: Request) -> None:
        lease = self._held.pop(ticket, None)
        if lease is None or self._closed:
            return
        now = self.clock()
        seconds = 0.0 if started is None else max(0.0, now - started)
        rest = 0.0
        if response is not None or exception is not None:
            rest = self._outcome_rest(lease.host, response, exception)
        robots = self._robots_done.pop(lease.host, None)
        if robots is not None:
            rest = max(rest, self._robots_rest_end(lease.host, robots) - now)
        failures = self._failures.get(lease.host, 0)
        if self.config.retire_after and failures >= self.config.retire_after:
            self._failures.pop(lease.host, None)
            self._next.retire.append(lease.host)
            self.stats.inc_value("frontier/retired_hosts")
            logger.warning("Retiring host %r after %d consecutive failed fetches "
                           "(FRONTIER_RETIRE_AFTER); its queued requests are dropped and "
                           "counted in frontier/retired_requests", lease.host, failures)
        self._count("completed")
        self._finished.append((lease, seconds, rest, request))
        self._move_finished()

    def _move_finished(self) -> None:
        """Complete the leases whose request the engine is done with (see module doc)."""
        if not self._finished:
            return
        inprogress = getattr(self._engine_slot(), "inprogress", ())
        keep = []
        for entry in self._finished:
            if entry[3] in inprogress:
                keep.append(entry)
            else:
                self._next.completions.append(entry[:3])
        if len(keep) != len(self._finished):
            self._finished = keep
            self._kick()

    def robots_hold(self, request: Request) -> Request | None:
        if not self._robots_done:
            return None
        lease = self._held.get(request.meta.get(LEASE_META, -1))
        robots = None if lease is None else self._robots_done.get(lease.host)
        if lease is None or robots is None:
            return None
        if self._robots_rest_end(lease.host, robots) <= self.clock():
            return None
        self.stats.inc_value("frontier/robots/held")
        return request.replace(dont_filter=True)

    def _on_robots_parsed(self, robotparser: Any, request: Request, **kwargs: Any) -> None:
        # The core frontier records it locally; the shared one needs it in Redis too.
        super()._on_robots_parsed(robotparser, request, **kwargs)
        try:
            host = host_key(request)
        except HostlessURL:
            return
        rest = self.frontier.min_rest(host)
        if rest:
            self._next.min_rests.append((host, rest))
            self._kick()

    # -- page history (recrawl) ------------------------------------------------------------

    def page_visited(self, request: Request, visit: Visit) -> None:
        """From the recrawl spider middleware: recorded in Redis by the next round."""
        if self.recrawl is None or self._closed:
            return
        self._next.visits.append((self.recrawl.fp(request), request.url, visit))

    def _history_download_error(self, request: Request, exception: BaseException) -> None:
        if self.recrawl is None or isinstance(exception, IgnoreRequest):
            return
        self._next.visits.append((self.recrawl.fp(request), request.url, None))

    def _on_spider_idle(self, spider: Spider) -> None:
        """Continuous recrawl: never close when idle; pages fall due later."""
        from scrapy.exceptions import DontCloseSpider

        if not (self._closed or self._failed):
            raise DontCloseSpider

    # -- I/O rounds -----------------------------------------------------------------------

    def _tick(self) -> None:
        """Twice a second: move finished leases on and refresh the cluster's state."""
        self._move_finished()
        self._kick(poll=True)

    def _kick(self, *, poll: bool = False) -> None:
        if self._closed or self._sending is not None or self._pool is None:
            return
        if time.monotonic() < self._retry_at:
            return
        nxt = self._next
        nxt.want = max(0, self.prefetch - len(self._buffer))
        claim = bool(nxt.want) and (self._claim_more or poll)
        if not claim:
            nxt.want = 0
        rc = self.recrawler
        if poll and rc is not None and (rc.settings.mode == "continuous" or not rc.exhausted):
            nxt.feed = rc.settings.feed_batch
        if not (poll or claim or nxt.pushes or nxt.completions or nxt.min_rests or nxt.retire
                or nxt.visits):
            return
        self._sending, self._next = nxt, _Round()
        d = deferToThreadPool(_reactor(), self._pool, self._io, nxt)
        d.addCallbacks(self._round_done, self._round_failed)
        self._in_flight = d

        def landed(result: object) -> object:
            self._in_flight = None
            return result

        d.addBoth(landed)

    def _io(self, rnd: _Round) -> _Answer:
        """In the I/O thread: one round against Redis (see module doc)."""
        remote, seen = self.remote, self.seen
        assert remote is not None and seen is not None
        recrawler = self.recrawler
        duplicates = not_due = 0
        if rnd.pushes:
            fps = [fp for fp, dedupe, *_ in rnd.pushes if fp is not None and dedupe]
            known = dict(zip(fps, seen.contains_many(fps), strict=True)) if fps else {}
            fresh: list[tuple[str, int, bytes]] = []
            fresh_fps: list[int] = []
            batch_fps: set[int] = set()
            for fp, dedupe, gate, host, level, item in rnd.pushes:
                if fp is not None:
                    if dedupe and (known.get(fp) or fp in batch_fps):
                        duplicates += 1
                        continue
                    if gate and recrawler is not None and not recrawler.admit(fp)[0]:
                        not_due += 1
                        continue
                    batch_fps.add(fp)
                    fresh_fps.append(fp)
                fresh.append((host, level, item))
            if fresh:
                remote.push_many(fresh)
            if fresh_fps:
                # Seen only once queued: a crash in between gives a repeat, not a loss.
                seen.add_many(fresh_fps)
        for host, rest in rnd.min_rests:
            remote.set_min_rest(host, rest)
        for host in rnd.retire:
            remote.retire(host)
        if recrawler is not None:
            for fp, url, visit in rnd.visits:
                recrawler.record(fp, url, visit)
        for done, seconds, rest in rnd.completions:
            remote.complete(done, seconds, rest_at_least=rest)
        leases: list[RedisLease] = []
        for _ in range(rnd.want):
            claimed = remote.pop()
            if claimed is None:
                break
            leases.append(claimed)
        front, back, held = remote.sizes()  # one round trip for all three
        answer = _Answer(leases, duplicates, front + back + held == 0, front + back, held,
                         remote.next_wakeup() if len(leases) < rnd.want else None)
        answer.not_due = not_due
        if recrawler is not None:
            for lease in leases:
                record = recrawler.store.get(int.from_bytes(lease.item[:8], "big", signed=True))
                if record is not None and (record.etag or record.last_modified):
                    answer.validators[lease.ticket] = (record.etag, record.last_modified)
            if rnd.feed and answer.queued < 2 * rnd.feed:
                answer.due = recrawler.take_due(rnd.feed)
            recrawler.store.flush()
        return answer

    def _io_final(self, rnd: _Round) -> _Answer | None:
        """In the I/O thread, at close: the last round, then the history's last writes."""
        answer = None
        if rnd.pushes or rnd.completions or rnd.min_rests or rnd.retire or rnd.visits:
            answer = self._io(rnd)
        if self.recrawler is not None:
            self.recrawler.close()
        return answer

    def _round_done(self, answer: _Answer) -> None:
        sent = self._sending or _Round()
        self._sending = None
        if self._closed:
            self._buffer.extend(answer.leases)  # given back by close()
            return
        if self._outage_since is not None:
            redis_log.warning("Redis is back after %.1f s; continuing",
                              time.monotonic() - self._outage_since)
            self._outage_since = None
        self._backoff = 0.0
        if answer.duplicates:
            self._count("duplicates", answer.duplicates)
        if answer.not_due:
            self._count("recrawl/not_due_dropped", answer.not_due)
        self._validators.update(answer.validators)
        self._buffer.extend(answer.leases)
        if answer.due and self.recrawl is not None:
            for record in answer.due:
                self.enqueue_request(self.recrawl.request_for(record, self.spider))
        self._remote_queued = answer.queued
        self._remote_in_flight = answer.in_flight
        local_work = self._buffer or self._held or self._finished
        if answer.idle and not local_work:
            if self._remote_idle_since is None:
                self._remote_idle_since = time.monotonic()
        else:
            self._remote_idle_since = None
        self._claim_more = bool(answer.leases) or not sent.want
        if answer.leases:
            self._nudge_engine()
        if answer.wakeup is not None and answer.wakeup < 0.5:
            self._wake_at(answer.wakeup)
        self._kick()

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
            self._next = self._merge(rnd, self._next)
        if self._closed:
            return
        exc = failure.value
        if isinstance(exc, RedisFrontierUnavailable):
            self.stats.inc_value("frontier/redis/errors")
            if self._outage_since is None:
                self._outage_since = time.monotonic()
                redis_log.warning("Redis is unreachable (%s); keeping %d requests locally "
                                  "and retrying", exc, len(self._next.pushes))
            self._backoff = min(MAX_BACKOFF, max(0.25, 2 * self._backoff))
            self._retry_at = time.monotonic() + self._backoff
            return
        self.stats.inc_value("frontier/redis/errors")
        if isinstance(exc, RedisFrontierError):
            logger.error("%s The crawl is stopping.", exc)
        else:
            logger.error("Unexpected error talking to Redis: %s", failure.getTraceback())
        self._failed = True
        self._close_spider("frontier_redis_error")

    @staticmethod
    def _merge(first: _Round | None, second: _Round) -> _Round:
        if first is None:
            return second
        return _Round(
            pushes=first.pushes + second.pushes,
            completions=first.completions + second.completions,
            min_rests=first.min_rests + second.min_rests,
            retire=first.retire + second.retire,
            visits=first.visits + second.visits,
        )

    # -- stats ----------------------------------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def publish_stats(self) -> None:
        set_value = self.stats.set_value
        if self._enqueued:
            set_value("frontier/enqueued", self._enqueued)
        for key, value in self.counters.items():
            set_value(f"frontier/{key}", value)
        set_value("frontier/queued", self._remote_queued)
        set_value("frontier/redis/in_flight", self._remote_in_flight)
        set_value("frontier/reactor/stall_max_ms", round(1000 * self._stall.worst, 1))
        set_value("frontier/reactor/stalls_over_100ms", self._stall.over)
        if self.recrawl is not None:
            self.recrawl.publish_stats(self.stats)


def _reactor() -> Any:
    """The installed reactor (imported late: importing it early would install one)."""
    from twisted.internet import reactor

    return reactor


class _StallMeter:
    """How late the reactor runs a 50 ms timer: a direct measure of blocking."""

    PERIOD = 0.05

    def __init__(self) -> None:
        self.worst = 0.0
        self.over = 0
        self._loop: LoopingCall | None = None
        self._last = 0.0

    def start(self) -> None:
        self._last = time.monotonic()
        self._loop = LoopingCall(self._beat)
        self._loop.start(self.PERIOD, now=False)

    def _beat(self) -> None:
        now = time.monotonic()
        late = now - self._last - self.PERIOD
        self._last = now
        if late > self.worst:
            self.worst = late
        if late > 0.1:
            self.over += 1

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
