"""The Scrapy scheduler: a thin shell around :class:`scrapy_frontier.core.Frontier`."""

from __future__ import annotations

import logging
import math
import random
import time
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_frontier.config import FrontierConfig
from scrapy_frontier.core.frontier import Frontier, Lease
from scrapy_frontier.core.prioritizer import PriorityMapper
from scrapy_frontier.core.recrawl_priority import HostRules
from scrapy_frontier.history_sqlite import HistoryStoreError
from scrapy_frontier.hostkey import HostlessURL, host_key, url_host_key
from scrapy_frontier.recrawl import Recrawler, Visit
from scrapy_frontier.recrawl_scrapy import BOOST_META, RecrawlHooks
from scrapy_frontier.resolve import HostResolver
from scrapy_frontier.seen_sqlite import SeenStoreError, SQLiteFingerprintStore
from scrapy_frontier.sqlite_store import SQLiteStore, StoreError, request_codec
from scrapy_frontier.timer import Timer, call_later

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.http import Response
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

logger = logging.getLogger("scrapy_frontier.scheduler")
politeness_log = logging.getLogger("scrapy_frontier.politeness")

#: ``Request.meta`` key: the lease ticket of a request the frontier handed out.
LEASE_META = "frontier_lease"
#: ``Request.meta`` key: ``time.monotonic()`` when the fetch was sent.
FETCH_START_META = "frontier_fetch_start"
#: The SQLite file inside JOBDIR or FRONTIER_PATH.
STATE_FILE = "frontier.sqlite"

ADDON_PATH = "scrapy_frontier.Addon"


class FrontierScheduler:
    """A polite Mercator frontier as a Scrapy scheduler.

    Enable it with the add-on (``ADDONS = {"scrapy_frontier.Addon": 0}``) or
    with ``SCHEDULER = "scrapy_frontier.FrontierScheduler"``.
    """

    def __init__(
        self,
        crawler: Crawler,
        config: FrontierConfig,
        dupefilter: BaseDupeFilter,
        *,
        clock: Any = time.monotonic,
    ) -> None:
        self.crawler = crawler
        self.config = config
        self.df = dupefilter
        self.clock = clock
        self.stats: StatsCollector = cast("StatsCollector", crawler.stats)
        self.mapper = PriorityMapper(config.front_queues)
        self.frontier: Frontier[Request] = self._new_frontier(None)
        self._store: SQLiteStore[Request] | None = None
        # Durable store only: fetched URLs kept until the engine is done with
        # their request (callback output queued, or retry/redirect queued).
        self._pending_acks: dict[object, Request] = {}
        self._last_flush = 0.0
        self._failed = False
        self._seen_store: SQLiteFingerprintStore | None = None
        self.spider: Spider | None = None
        self._timer: Timer | None = None
        self._timer_at: float | None = None
        self._closed = False
        self.uses_signals = False
        self._enqueued = 0
        # Consecutive failed fetches per host (only hosts currently failing).
        self._failures: dict[str, int] = {}
        self._crawl_delay_capped: set[str] = set()
        self._answered_now = False
        # Host -> (end, duration) of a robots.txt fetch made during its lease.
        self._robots_done: dict[str, tuple[float, float]] = {}
        self.host_rules = HostRules(config.priority_rules)
        #: Incremental recrawl (page history), unless FRONTIER_RECRAWL is "off".
        self.recrawl: RecrawlHooks | None = None
        self._feed_at = 0.0
        # Per-IP politeness: the hostname to look up for keys that are not one
        # (download_slot overrides), and the resolver.
        self._slot_hostnames: dict[str, str] = {}
        self._resolver: HostResolver | None = None
        if config.ip_politeness:
            self._resolver = HostResolver(self._on_group, timeout=config.dns_timeout)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        config = FrontierConfig.from_settings(crawler.settings)
        df_cls = load_object(crawler.settings["DUPEFILTER_CLASS"])
        if config.backend == "redis" and cls is FrontierScheduler:
            from scrapy_frontier.redis_scheduler import RedisFrontierScheduler

            redis_scheduler = RedisFrontierScheduler(
                crawler, config, build_from_crawler(df_cls, crawler)
            )
            _warn_about_stacked_delays(crawler)
            return redis_scheduler
        scheduler = cls(crawler, config, build_from_crawler(df_cls, crawler))
        _warn_about_stacked_delays(crawler)
        return scheduler

    def _new_frontier(self, store: SQLiteStore[Request] | None) -> Frontier[Request]:
        config = self.config
        return Frontier(
            front_queues=config.front_queues,
            priority_bias=config.priority_bias,
            back_queues=config.back_queues,
            back_queues_max=config.back_queues_max,
            policy=config.policy,
            lease_timeout=config.lease_timeout,
            clock=self.clock,
            rng=random.Random(config.seed),
            store=store,
            group_hosts=config.ip_politeness,
        )

    # -- Scrapy scheduler interface ----------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        self._listen(spider)
        self.stats.set_value("frontier/back_queues/floor", self.config.back_queues)
        self.stats.set_value("frontier/back_queues/max", self.config.back_queues_max)
        if self.config.state_dir:
            self._open_store(spider)
        if self.config.recrawl.mode != "off":
            self.recrawl = RecrawlHooks.open(
                self.crawler, self.config.recrawl, self.config.state_dir
            )
            if self.config.recrawl.mode == "continuous":
                self.crawler.signals.connect(self._on_spider_idle, signal=signals.spider_idle)
        return self.df.open()

    def _listen(self, spider: Spider) -> None:
        """What every backend does at open: learn of fetch ends and robots.txt delays."""
        self.spider = spider
        self._closed = False
        if not self._timing_middleware_installed():
            self._use_signals()
        robots_parsed = getattr(signals, "robots_parsed", None)
        if robots_parsed is not None:
            self.crawler.signals.connect(self._on_robots_parsed, signal=robots_parsed)

    def close(self, reason: str) -> Deferred[None] | None:
        self._closed = True
        self._cancel_timer()
        self._report_dropped()
        self.publish_stats()
        if self.recrawl is not None:
            try:
                self.recrawl.close(self.stats)
            except HistoryStoreError as exc:
                self.stats.inc_value("frontier/history/errors")
                logger.error("%s", exc)
        store = self._store
        if store is not None:
            # The engine has processed every response by now.
            self._ack_finished(everything=True)
            self.stats.set_value("frontier/store/flushes", store.flushes)
            if store.volatile:
                self.stats.set_value("frontier/volatile", store.volatile)
            try:
                store.close()
            except StoreError as exc:
                self.stats.inc_value("frontier/store/errors")
                logger.error("%s", exc)
            else:
                self.stats.set_value("frontier/store/disk_bytes", store.disk_bytes())
        left = len(self.frontier)
        if left:
            logger.info(
                "Frontier closed (%s) with %d requests still queued over %d hosts",
                reason,
                left,
                self.frontier.tracked_hosts,
            )
        return self.df.close(reason)

    def has_pending_requests(self) -> bool:
        # True while anything waits, including URLs held only for politeness:
        # otherwise the engine would think the crawl is over.
        if len(self.frontier) > 0:
            return True
        rc = self.recrawl
        return rc is not None and rc.recrawler.settings.mode == "due" and not (
            rc.recrawler.exhausted or self._failed
        )

    def __len__(self) -> int:
        return len(self.frontier)

    def enqueue_request(self, request: Request) -> bool:
        try:
            return self._enqueue(request)
        except StoreError as exc:
            # The request is in the store's pending writes: not lost, but the
            # state cannot be kept consistent any more, so the crawl stops.
            self._store_failed(exc)
            return True

    def _enqueue(self, request: Request) -> bool:
        if request.dont_filter:
            # Skips the seen test, but is marked seen: a later ordinary link to the
            # same URL is not fetched again (Scrapy's filter leaves it unmarked).
            if LEASE_META not in request.meta:
                self.df.request_seen(request)
        elif self.df.request_seen(request):
            self.df.log(request, self.spider)  # type: ignore[arg-type]
            if self.recrawl is not None:
                self.recrawl.inlink(getattr(self.df, "last_fp", None))
            return False
        if (
            request.dont_filter
            and self.recrawl is not None
            and LEASE_META not in request.meta
            and not self._recrawl_gate(request)
        ):
            return False
        try:
            host = host_key(request)
        except HostlessURL as exc:
            self.stats.inc_value(f"frontier/rejected/{exc.reason}")
            logger.warning("Dropped %s: %s", request, exc)
            return False
        # A redirect, a retry, or a middleware that swaps the request copies
        # meta: the fetch that held this lease is over whatever happened to it
        # (a no-op when the timing middleware already reported it).
        meta = request.meta
        if self._resolver is not None and "download_slot" in meta:
            self._remember_slot_hostname(host, request)
        ticket = meta.pop(LEASE_META, None)
        started = meta.pop(FETCH_START_META, None)
        priority = request.priority
        if self.host_rules.rules or BOOST_META in meta:
            priority += self.host_rules.boost(host) + int(meta.get(BOOST_META, 0))
        queued = self.frontier.push(host, self.mapper.level(priority), request)
        if queued:
            self._enqueued += 1
        else:
            self.stats.inc_value("frontier/retired_requests")
            self.stats.inc_value("frontier/retired_requests/refused")
            logger.info("Dropped %s: its host %r was retired", request, host)
        # After the push, so that the request this one became is written first.
        if ticket is not None:
            self._finish(ticket, started)
        if self._store is not None:
            self._maybe_flush(self.clock())
        return queued

    def next_request(self) -> Request | None:
        if self._failed:
            return None
        try:
            return self._next_request()
        except StoreError as exc:
            self._store_failed(exc)
            return None

    def _next_request(self) -> Request | None:
        frontier = self.frontier
        acked = False
        if self._store is not None:
            now = self.clock()
            if self._pending_acks:
                # Written with this call's lease, in one commit (see _write_through).
                acked = self._ack_finished(write=False)
            self._maybe_flush(now)
        if self.uses_signals:
            self._reap_finished_leases()
        if self.recrawl is not None and len(frontier) < 2 * self.config.recrawl.feed_batch:
            self._feed_due()
        if frontier.in_flight:
            for expired in frontier.expire_leases():
                self.stats.inc_value("frontier/lease_expired")
                logger.warning(
                    "No end was reported for %s within %.0f s (FRONTIER_LEASE_TIMEOUT); "
                    "releasing host %r",
                    expired.item,
                    self.config.lease_timeout,
                    expired.host,
                )
        lease = frontier.pop()
        if self._resolver is not None:
            lease = self._resolve_waiting(lease)
        if frontier.stats.retired_items:
            self._report_dropped()
        if lease is None:
            if acked:
                self._write_through()
            self._arm_wakeup()
            # Counters live in plain attributes on the hot path; the stats
            # collector is refreshed whenever the engine finds nothing to do.
            self.publish_stats()
            return None
        request = lease.item
        request.meta[LEASE_META] = lease.ticket
        self._write_through()
        return request

    # -- incremental recrawl ---------------------------------------------------

    @property
    def recrawler(self) -> Recrawler | None:
        return None if self.recrawl is None else self.recrawl.recrawler

    def page_visited(self, request: Request, visit: Visit) -> None:
        """A response for ``request`` arrived (from the recrawl spider middleware)."""
        if self.recrawl is None or self._closed:
            return
        try:
            self.recrawl.page_visited(request, visit)
        except HistoryStoreError as exc:
            self._history_failed(exc)

    def _recrawl_gate(self, request: Request) -> bool:
        assert self.recrawl is not None
        try:
            return self.recrawl.gate(request)
        except HistoryStoreError as exc:
            self._history_failed(exc)
            return True  # fetching a page again is the safe side

    def _feed_due(self) -> None:
        """Queue pages of the history that are due (bypassing the seen test)."""
        assert self.recrawl is not None
        now = self.clock()
        if now < self._feed_at:
            return
        batch = self.config.recrawl.feed_batch
        try:
            requests = self.recrawl.due_requests(batch, self.spider)
        except HistoryStoreError as exc:
            self._history_failed(exc)
            return
        for request in requests:
            self._enqueue(request)
        if len(requests) < batch:
            # Nothing more is due for now: look again in a second (continuous mode).
            self._feed_at = now + 1.0

    def _on_spider_idle(self, spider: Spider) -> None:
        """Continuous recrawl: stay open, pages fall due later. Stop with a signal."""
        from scrapy.exceptions import DontCloseSpider

        if self._closed or self._failed or self.recrawl is None:
            return
        self._arm_wakeup()
        raise DontCloseSpider

    def _history_failed(self, exc: HistoryStoreError) -> None:
        self.stats.inc_value("frontier/history/errors")
        if self._failed:
            return
        self._failed = True
        logger.error("%s The crawl is stopping.", exc)
        self._close_spider("frontier_history_error")

    def _close_spider(self, reason: str) -> None:
        close = getattr(self.crawler.engine, "close_spider_async", None)
        if close is not None:
            from scrapy.utils.defer import deferred_from_coro

            deferred_from_coro(close(reason=reason))

    # -- per-IP politeness ----------------------------------------------------

    def _resolve_waiting(self, lease: Lease[Request] | None) -> Lease[Request] | None:
        """Start lookups for hosts waiting for their IP; pop again if one was
        answered at once and nothing was handed out yet."""
        assert self._resolver is not None
        frontier = self.frontier
        # Bounded: each round resolves hosts that pop() found unresolved.
        for _ in range(1000):
            waiting = frontier.take_unresolved()
            if not waiting:
                break
            self._answered_now = False
            for key in waiting:
                self._resolver.resolve(key, self._slot_hostnames.get(key, key))
            if lease is not None or not self._answered_now:
                break
            lease = frontier.pop()
        return lease

    def _on_group(self, key: str, group: str, synchronous: bool) -> None:
        if self._closed:
            return
        self.frontier.set_group(key, group)
        if synchronous:
            self._answered_now = True
        else:
            self._nudge_engine()

    def _remember_slot_hostname(self, key: str, request: Request) -> None:
        """A download_slot key is not a hostname: look up the first URL's host."""
        if key not in self._slot_hostnames:
            try:
                self._slot_hostnames[key] = url_host_key(request.url)
            except HostlessURL:
                self._slot_hostnames[key] = key

    # -- fetch end reports ---------------------------------------------------

    def fetch_finished(
        self,
        request: Request,
        response: Response | None = None,
        exception: BaseException | None = None,
    ) -> None:
        """Called once a fetch of a request this frontier handed out ended.

        The host is released now. With a durable store the URL itself is kept
        until the engine is done with the request (see ``_ack_finished``).
        ``response`` or ``exception``, when given, drive Retry-After, the
        back-off after failures and host retirement.
        """
        if exception is not None and self.recrawl is not None:
            try:
                self.recrawl.fetch_failed(request, exception)
            except HistoryStoreError as exc:
                self._history_failed(exc)
        ticket = request.meta.get(LEASE_META)
        if ticket is None:
            return
        try:
            self._finish(
                ticket,
                request.meta.get(FETCH_START_META),
                defer_ack=True,
                response=response,
                exception=exception,
            )
        except StoreError as exc:
            self._store_failed(exc)

    def _finish(
        self,
        ticket: int,
        started: float | None,
        *,
        defer_ack: bool = False,
        response: Response | None = None,
        exception: BaseException | None = None,
    ) -> None:
        if self._closed:
            return
        now = self.clock()
        # No start stamp: the response never touched the network (a cache hit,
        # or an IgnoreRequest before the downloader).
        duration = 0.0 if started is None else max(0.0, now - started)
        defer = defer_ack and self._store is not None and self._tracks_requests()
        lease_host = self.frontier.lease_host(ticket)
        rest = 0.0
        if lease_host is not None and (response is not None or exception is not None):
            rest = self._outcome_rest(lease_host, response, exception)
        if self._robots_done and lease_host is not None:
            robots = self._robots_done.pop(lease_host, None)
            if robots is not None:
                rest = max(rest, self._robots_rest_end(lease_host, robots) - now)
        lease = self.frontier.complete(ticket, duration, ack=not defer, rest_at_least=rest)
        if lease is None:
            return
        failures = self._failures.get(lease.host, 0)
        if self.config.retire_after and failures >= self.config.retire_after:
            self._retire(lease.host, failures, response, exception)
        if defer:
            self._pending_acks[lease.token] = lease.item
        else:
            self._write_through()
        if politeness_log.isEnabledFor(logging.DEBUG):
            next_contact = self.frontier.next_contact(lease.host)
            politeness_log.debug(
                "host %r: fetch took %.4f s, next contact in %.3f s",
                lease.host,
                duration,
                (next_contact or now) - now,
            )

    # -- site owners' signals: Retry-After, errors, Crawl-delay ---------------

    def _outcome_rest(
        self, host: str, response: Response | None, exception: BaseException | None
    ) -> float:
        """The rest a fetch's outcome asks for; updates the host's failure count.

        Failures: a 5xx or 429 response, or any download exception except
        IgnoreRequest. A 429 or 503 with a usable Retry-After rests as asked
        (up to FRONTIER_MAX_RETRY_AFTER); other failures back off exponentially.
        Any other response resets the count.
        """
        retry_after: float | None = None
        if exception is not None:
            if isinstance(exception, IgnoreRequest):
                return 0.0
        elif response is not None:
            status = response.status
            if status < 500 and status != 429:
                self._failures.pop(host, None)
                return 0.0
            if status in (429, 503):
                retry_after = parse_retry_after(response.headers.get(b"Retry-After"), time.time())
        failures = self._failures[host] = self._failures.get(host, 0) + 1
        if retry_after is not None:
            self.stats.inc_value("frontier/retry_after/honoured")
            cap = self.config.max_retry_after
            if retry_after > cap:
                self.stats.inc_value("frontier/retry_after/clamped")
                politeness_log.warning(
                    "host %r asked to retry after %.0f s; waiting FRONTIER_MAX_RETRY_AFTER "
                    "(%.0f s) instead",
                    host,
                    retry_after,
                    cap,
                )
                retry_after = cap
            return retry_after
        self.stats.inc_value("frontier/backoff/count")
        base = self.config.backoff_base
        # 2 ** 60 x any sensible base is far beyond any cap: no overflow.
        return min(self.config.backoff_max, base * 2.0 ** min(failures - 1, 60))

    def _retire(
        self,
        host: str,
        failures: int,
        response: Response | None,
        exception: BaseException | None,
    ) -> None:
        dropped = self.frontier.retire(host)
        self._failures.pop(host, None)
        self.stats.inc_value("frontier/retired_hosts")
        if dropped:
            self.stats.inc_value("frontier/retired_requests", len(dropped))
        last = f"HTTP {response.status}" if response is not None else repr(exception)
        logger.warning(
            "Retired host %r after %d consecutive failed fetches (last: %s, "
            "FRONTIER_RETIRE_AFTER=%d): dropped %d queued requests%s",
            host,
            failures,
            last,
            self.config.retire_after,
            len(dropped),
            _sample_urls(dropped),
        )

    def _report_dropped(self) -> None:
        """Log the URLs of retired hosts that surfaced from the front queues."""
        dropped = self.frontier.take_dropped()
        if not dropped:
            return
        self.stats.inc_value("frontier/retired_requests", len(dropped))
        by_host: dict[str, list[Request]] = {}
        for host, request in dropped:
            by_host.setdefault(host, []).append(request)
        for host, requests in by_host.items():
            logger.warning(
                "Dropped %d more queued requests of retired host %r%s",
                len(requests),
                host,
                _sample_urls(requests),
            )

    def _on_robots_parsed(self, robotparser: Any, request: Request, **kwargs: Any) -> None:
        try:
            host = host_key(request)
        except HostlessURL:
            return
        settings = self.crawler.settings
        agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        wanted = robots_delay(robotparser, str(agent))
        if wanted is None or wanted <= 0:
            return
        self.stats.inc_value("frontier/crawl_delay/hosts")
        cap = self.config.max_crawl_delay
        if wanted > cap:
            self.stats.inc_value("frontier/crawl_delay/capped")
            if host not in self._crawl_delay_capped:
                self._crawl_delay_capped.add(host)
                politeness_log.warning(
                    "host %r asks for a crawl delay of %.0f s in robots.txt; using "
                    "FRONTIER_MAX_CRAWL_DELAY (%.0f s) instead",
                    host,
                    wanted,
                    cap,
                )
            wanted = cap
        self.frontier.set_min_rest(host, wanted)
        politeness_log.debug("host %r: robots.txt crawl delay %.3f s", host, wanted)

    # -- robots.txt fetches count as contacts ----------------------------------

    def robots_fetched(self, request: Request, seconds: float) -> None:
        """A robots.txt fetch of ``request``'s host ended now after ``seconds``."""
        try:
            host = host_key(request)
        except HostlessURL:
            return
        self._robots_done[host] = (self.clock(), seconds)
        self.stats.inc_value("frontier/robots/fetches")

    def robots_hold(self, request: Request) -> Request | None:
        """If the leased ``request`` follows its host's robots.txt fetch too soon,
        a copy to queue again (the host rests until the gap is kept); else None.

        The copy goes back through ``enqueue_request``, which ends the lease
        with the rest still owed (see ``_finish``): no download slot waits.
        """
        if not self._robots_done:
            return None
        host = self.frontier.lease_host(request.meta.get(LEASE_META, -1))
        robots = None if host is None else self._robots_done.get(host)
        if host is None or robots is None:
            return None
        until = self._robots_rest_end(host, robots)
        if until <= self.clock():
            return None
        self.stats.inc_value("frontier/robots/held")
        politeness_log.debug(
            "host %r: %s waits %.3f s after robots.txt", host, request, until - self.clock()
        )
        return request.replace(dont_filter=True)

    def _robots_rest_end(self, host: str, robots: tuple[float, float]) -> float:
        end, seconds = robots
        return end + max(self.frontier.policy.delay(seconds), self.frontier.min_rest(host))

    def _timing_middleware_installed(self) -> bool:
        from scrapy_frontier.middleware import FetchTimingMiddleware

        engine = self.crawler.engine
        downloader = getattr(engine, "downloader", None)
        manager = getattr(downloader, "middleware", None)
        mws = getattr(manager, "middlewares", ())
        return any(isinstance(mw, FetchTimingMiddleware) for mw in mws)

    def _use_signals(self) -> None:
        self.uses_signals = True
        self.stats.set_value("frontier/end_reports/signals", 1)
        logger.warning(
            "scrapy_frontier.middleware.FetchTimingMiddleware is not enabled, so the "
            "frontier learns when fetches end from Scrapy signals, which time them less "
            "precisely. Enable the add-on to fix this: ADDONS = {%r: 0}",
            ADDON_PATH,
        )
        sig = self.crawler.signals
        sig.connect(self._on_reached_downloader, signal=signals.request_reached_downloader)
        sig.connect(self._on_left_downloader, signal=signals.request_left_downloader)
        sig.connect(self._on_response_received, signal=signals.response_received)

    def _on_reached_downloader(self, request: Request, spider: Spider) -> None:
        if LEASE_META in request.meta:
            request.meta[FETCH_START_META] = self.clock()

    def _on_left_downloader(self, request: Request, spider: Spider) -> None:
        self.fetch_finished(request)

    def _on_response_received(
        self, response: Response, request: Request, spider: Spider
    ) -> None:
        self.fetch_finished(request)

    def _reap_finished_leases(self) -> None:
        """Signals miss requests that never reached the downloader (e.g. robots.txt
        IgnoreRequest): a lease whose request the engine no longer tracks is over."""
        slot = getattr(self.crawler.engine, "_slot", None)
        inprogress = getattr(slot, "inprogress", None)
        if inprogress is None:
            return
        for lease in self.frontier.leases():
            if lease.item not in inprogress:
                self.fetch_finished(lease.item)

    # -- durable state (JOBDIR / FRONTIER_PATH) -------------------------------

    def _open_store(self, spider: Spider) -> None:
        assert self.config.state_dir is not None
        path = Path(self.config.state_dir) / STATE_FILE
        store: SQLiteStore[Request] = SQLiteStore(
            path, levels=self.config.front_queues, spider=spider.name, codec=request_codec(spider)
        )
        hosts, rests = store.recover()
        frontier = self._new_frontier(store)
        now = self.clock()
        for host, (left, _) in rests.items():
            frontier.rest_until(host, now + left)
        # A fetch was in flight when the crawl stopped: its end (and the rest it
        # set) may not have been saved, so rest from the restart as if it had
        # just ended, taking as long as the host's last known fetch.
        for host, last_fetch in store.interrupted.items():
            frontier.rest_until(host, now + self.config.policy.delay(last_fetch or 0.0))
        for host, queued in hosts.items():
            store.adopt(host, queued)
        frontier.resume(store.front_count(), hosts)
        self.frontier = frontier
        self._store = store
        self._seen_store = _durable_seen_store(self.df)
        if self._seen_store is not None:
            # A fingerprint must never be durable before the URL it stands for is
            # queued durably, or a crash would lose that URL: the seen-set is
            # written only right after the frontier's own writes.
            self._seen_store.batch_size = 1 << 62
            self._seen_store.flush_interval = math.inf
        restored = len(frontier)
        self.stats.set_value("frontier/restored", restored)
        self.stats.set_value("frontier/recovered_leases", store.recovered_leases)
        if store.volatile_lost:
            self.stats.set_value("frontier/volatile_lost", store.volatile_lost)
        if restored:
            logger.info(
                "Resumed %d queued requests (%d were in flight when the crawl stopped) and "
                "%d resting hosts from %s",
                restored,
                store.recovered_leases,
                len(rests),
                path,
            )

    def _tracks_requests(self) -> bool:
        return getattr(self._engine_slot(), "inprogress", None) is not None

    def _engine_slot(self) -> Any:
        return getattr(self.crawler.engine, "_slot", None)

    def _ack_finished(self, *, everything: bool = False, write: bool = True) -> bool:
        """Forget the fetched URLs whose request the engine is done with.

        The engine keeps a request in ``_slot.inprogress`` until its response's
        callback output has been queued (Scrapy queues that output through a
        buffer, after the callback's generator has ended), or until the retry or
        redirect it turned into has been queued; only then is it safe to forget.
        """
        inprogress = getattr(self._engine_slot(), "inprogress", ())
        done = [
            token
            for token, request in self._pending_acks.items()
            if everything or request not in inprogress
        ]
        for token in done:
            del self._pending_acks[token]
            self.frontier.ack(token)
        if done and write:
            self._write_through()
        return bool(done)

    def _write_through(self) -> None:
        """With FRONTIER_WRITE_THROUGH (the default), leases and acks are written
        at once: after a kill the repeats are at most the fetches that were in
        flight. Queued URLs need no such hurry: the page that found them is only
        forgotten by a later write.

        One commit per ``next_request`` call: the acks it makes (fetches the
        engine is done with) go with the lease it hands out. That is safe
        because the two rules that matter are kept. A lease is durable before
        its request leaves ``next_request``, so no URL can be fetched without
        being marked in flight on disk. An ack is only ever late, never early:
        until it is committed its URL stays marked in flight, so a kill re-queues
        it and the restart counts it among the "requests in flight when the crawl
        stopped" -- the bound tests/test_crash.py checks (repeats <= that count).
        The ack still lands in the same synchronous call, microseconds after it
        was made, as before; only the second commit per URL is gone.
        """
        if self._store is not None and self.config.write_through and not self._failed:
            self._last_flush = self.clock()
            self._flush(self._store)

    def _maybe_flush(self, now: float) -> None:
        store = self._store
        if store is None or now - self._last_flush < self.config.flush_interval:
            return
        self._last_flush = now
        self._flush(store)

    def _flush(self, store: SQLiteStore[Request]) -> bool:
        try:
            store.flush()
            if self._seen_store is not None:
                self._seen_store.flush()
        except (StoreError, SeenStoreError) as exc:
            self.stats.inc_value("frontier/store/errors")
            logger.error("%s", exc)
            return False
        return True

    def _store_failed(self, exc: StoreError) -> None:
        """The state file cannot be read or written: stop the crawl cleanly.

        Everything since the last good write is still in memory and retried at
        close; what cannot be written is re-fetched on the next run from the last
        durable state (acknowledgements are never written before the URLs found
        with them), so nothing is lost.
        """
        self.stats.inc_value("frontier/store/errors")
        if self._failed:
            return
        self._failed = True
        logger.error("%s The crawl is stopping.", exc)
        self._close_spider("frontier_store_error")

    # -- waking the engine -------------------------------------------------

    def _arm_wakeup(self) -> None:
        """Make sure the engine asks again when the earliest resting host is ready.

        Without this the engine only asks on its 5 s heartbeat.
        """
        if self._closed:
            return
        at = self.frontier.next_wakeup()
        rc = self.recrawler
        if rc is not None and rc.settings.mode == "continuous" and not len(self.frontier):
            # Wake when the next page falls due (looked at again at least every minute).
            due = rc.next_due()
            wait = 60.0 if due is None else min(60.0, max(1.0, due - time.time()))
            at = self.clock() + wait if at is None else min(at, self.clock() + wait)
        if at is None:
            return
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return
        self._cancel_timer()
        self._timer_at = at
        self._timer = call_later(max(0.0, at - self.clock()), self._wake_engine)

    def _wake_engine(self) -> None:
        self._timer = None
        self._timer_at = None
        self._nudge_engine()

    def _nudge_engine(self) -> None:
        """Make the engine ask for requests again soon (without waiting for its heartbeat)."""
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is None or self._closed:
            return
        self.stats.inc_value("frontier/engine_wakeups")
        # Delay 0 only: a positive delay would swallow the engine's own wake-ups.
        nextcall.schedule()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None

    def publish_stats(self) -> None:
        st = self.frontier.stats
        set_value = self.stats.set_value
        if self._enqueued:
            set_value("frontier/enqueued", self._enqueued)
        if st.popped:
            set_value("frontier/dequeued", st.popped)
        if st.completed:
            set_value("frontier/completed", st.completed)
        set_value("frontier/back_queues/peak", st.peak_active)
        set_value("frontier/back_queues/activations", st.activations)
        set_value("frontier/hosts/tracked", self.frontier.tracked_hosts)
        set_value("frontier/back_queues/active", self.frontier.active_back_queues)
        set_value("frontier/politeness_hold_seconds", round(st.politeness_hold_seconds, 3))
        if st.held_dispatches:
            set_value(
                "frontier/dispatch_lateness_ms/mean",
                round(1000 * st.dispatch_lateness_seconds / st.held_dispatches, 3),
            )
            late_max = round(1000 * st.dispatch_lateness_max, 3)
            set_value("frontier/dispatch_lateness_ms/max", late_max)
        set_value("frontier/queued", len(self.frontier))
        if self.recrawl is not None:
            self.recrawl.publish_stats(self.stats)
        if self._resolver is not None:
            set_value("frontier/ip/lookups", self._resolver.lookups)
            set_value("frontier/ip/lookup_failures", self._resolver.failures)
            set_value("frontier/ip/group_waits", st.group_parks)


def parse_retry_after(value: bytes | str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP date).

    ``now`` is the wall-clock time (``time.time()``) for dates. None if the
    header is missing or unusable; a date in the past gives 0.
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322
        from datetime import timezone

        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - now)


def robots_delay(robotparser: Any, agent: str) -> float | None:
    """The longest of robots.txt Crawl-delay and Request-rate (as seconds per
    request) for ``agent``; None if neither is set.

    Request-rate is read only from Protego (Scrapy's default parser), which
    exposes it; its optional time-of-day window is ignored (always applied).
    """
    delays: list[float] = []
    crawl_delay = getattr(robotparser, "crawl_delay", None)
    if crawl_delay is not None:
        try:
            value = crawl_delay(agent)
        except Exception:  # noqa: BLE001 -- a third-party parser must not stop the crawl
            logger.debug("crawl_delay() failed in %r", robotparser, exc_info=True)
            value = None
        if value is not None and math.isfinite(float(value)):
            delays.append(float(value))
    request_rate = getattr(getattr(robotparser, "rp", None), "request_rate", None)
    if callable(request_rate):
        try:
            rate = request_rate(agent)
        except Exception:  # noqa: BLE001
            rate = None
        requests = getattr(rate, "requests", None)
        seconds = getattr(rate, "seconds", None)
        if isinstance(requests, int) and isinstance(seconds, int | float) and requests > 0:
            delays.append(float(seconds) / requests)
    return max(delays) if delays else None


def _sample_urls(requests: list[Request], limit: int = 10) -> str:
    if not requests:
        return ""
    urls = ", ".join(r.url for r in requests[:limit])
    more = len(requests) - limit
    return f": {urls}" + (f" and {more} more" if more > 0 else "")


def _durable_seen_store(df: object) -> SQLiteFingerprintStore | None:
    seen = getattr(df, "seen", None)
    store = getattr(seen, "store", None)
    return store if isinstance(store, SQLiteFingerprintStore) else None


def _warn_about_stacked_delays(crawler: Crawler) -> None:
    settings = crawler.settings
    if settings.getfloat("DOWNLOAD_DELAY") > 0:
        logger.warning(
            "DOWNLOAD_DELAY=%s adds Scrapy's own per-slot delay on top of the frontier's "
            "politeness; set FRONTIER_MIN_DELAY instead and DOWNLOAD_DELAY=0.",
            settings.get("DOWNLOAD_DELAY"),
        )
    if settings.getbool("AUTOTHROTTLE_ENABLED"):
        logger.warning(
            "AUTOTHROTTLE_ENABLED adds AutoThrottle's delays on top of the frontier's "
            "politeness; disable it (the frontier already adapts to each host's speed)."
        )

