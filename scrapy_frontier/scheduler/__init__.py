"""The one Scrapy scheduler, whatever the backend: a thin shell over the backend's ports.

A request's route goes one way: fingerprint (once), dupe filter, start gate,
host key, priority, then the backend's queue (:mod:`scrapy_frontier.backends.ports`),
which queues it and hands it out when its host may be contacted. Handed-out
requests are tracked by the in-flight ledger until the engine is done with them.
Everything here is the same on every backend: the dupe filter, priority rules
and boosts, site rules (Retry-After, back-off, retirement, Crawl-delay, the
robots.txt hold), the recrawl hooks, leases and their expiry, the stats names.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_frontier.backends.ports import BackendContext, build_backend, load_backend
from scrapy_frontier.errors import FrontierError, StoreError
from scrapy_frontier.fingerprint import Fingerprinter64
from scrapy_frontier.hostkey import HostlessURL
from scrapy_frontier.meta import LAPSED_META, LEASE_META
from scrapy_frontier.observe.observer import Observer
from scrapy_frontier.observe.opening import frontier_line, history_line, quarantine_line
from scrapy_frontier.reactor.timer import EngineWaker, call_later
from scrapy_frontier.scheduler import startup
from scrapy_frontier.scheduler.admission import Admission
from scrapy_frontier.scheduler.engine import EngineAdapter, abandon_open
from scrapy_frontier.scheduler.feeds import FeedGuard
from scrapy_frontier.scheduler.fetch_timing import FetchTiming
from scrapy_frontier.scheduler.history_feed import HistoryFeed
from scrapy_frontier.scheduler.inflight import InFlight, LeaseKeeper
from scrapy_frontier.scheduler.recrawl import RecrawlHooks
from scrapy_frontier.scheduler.robots import RobotsPacing
from scrapy_frontier.scheduler.run_state import RunState
from scrapy_frontier.scheduler.site_rules import SiteRules
from scrapy_frontier.scheduler.slots import SlotKeys
from scrapy_frontier.settings import (
    FrontierConfig,
    refuse_scrapy_redis_switches,
    unknown_settings,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.http import Response
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from scrapy_frontier.backends.ports import Backend
    from scrapy_frontier.core.recrawl import Recrawler

__all__ = ["FrontierScheduler"]

logger = logging.getLogger("scrapy_frontier.scheduler")
politeness_log = logging.getLogger("scrapy_frontier.politeness")

ADDON_PATH = "scrapy_frontier.Addon"
TIMING_MIDDLEWARE = "scrapy_frontier.downloadermiddlewares.FetchTimingMiddleware"


class FrontierScheduler:
    """A polite Mercator frontier as a Scrapy scheduler.

    Enable it with the add-on (``ADDONS = {"scrapy_frontier.Addon": 0}``) or
    with ``SCHEDULER = "scrapy_frontier.FrontierScheduler"``;
    ``FRONTIER_BACKEND`` picks where the queues live.
    """

    def __init__(
        self,
        crawler: Crawler,
        config: FrontierConfig,
        dupefilter: BaseDupeFilter,
        *,
        clock: Any = time.monotonic,
        backend_cls: type[Backend] | None = None,
    ) -> None:
        self.crawler = crawler
        self.config = config
        self.df = dupefilter
        self.clock = clock
        self.stats: StatsCollector = cast("StatsCollector", crawler.stats)
        self.engine = EngineAdapter(crawler)
        self.run = RunState(self.engine, self.stats)
        self.waker = EngineWaker(self.engine, clock,
                                 counted=partial(self.stats.inc_value, "frontier/engine_wakeups"))
        self.inflight = InFlight(config.lease_timeout)
        self.rules = SiteRules(config, self.stats, clock)
        self.slots = SlotKeys()
        self.timing = FetchTiming(clock=clock, tcp_timing=config.tcp_timing,
                                  watch_stalls=config.stall_discount)
        self.recrawl: RecrawlHooks | None = None
        context = BackendContext(
            crawler=crawler, config=config, stats=self.stats, clock=clock,
            dupefilter=dupefilter, wake=self.waker.nudge, fail=self.run.fail,
            due_arrived=lambda: self.history_feed.due_arrived(),
        )
        cls = backend_cls if backend_cls is not None else load_backend(config.backend_path)
        self.backend = build_backend(cls, context)
        self.queue = self.backend.queue
        self.admission = Admission(config, dupefilter, self.backend, self.stats,
                                   Fingerprinter64(crawler.request_fingerprinter),
                                   history_failed=self.run.state_failed)
        self.feeds = FeedGuard(crawler)
        self.history_feed = HistoryFeed(config, self.backend.history, self.run,
                                        fp64=self.admission.fp64, enqueue=self.enqueue_request,
                                        wake=self.waker.nudge, settings=crawler.settings)
        self.robots = RobotsPacing(slots=self.slots, rules=self.rules, inflight=self.inflight,
                                   controls=self.backend.controls, stats=self.stats,
                                   clock=clock, settings=crawler.settings)
        self.leases = LeaseKeeper(self.inflight, self.engine, self.queue, self.stats,
                                  config.lease_timeout, ended=self.fetch_completed,
                                  items_safe=self.feeds.flush)
        self.observer: Observer | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        try:
            config = FrontierConfig.from_settings(crawler.settings)
            refuse_scrapy_redis_switches(crawler.settings)
            backend_cls = load_backend(config.backend_path)
            df = build_from_crawler(load_object(crawler.settings["DUPEFILTER_CLASS"]), crawler)
        except FrontierError as exc:
            abandon_open(crawler)
            startup.report(logger, exc)
            raise
        _warn_about_stacked_delays(crawler)
        for name, near in unknown_settings(crawler.settings):
            logger.warning("%s is not a scrapy-frontier setting and is ignored%s", name,
                           f": did you mean {near}?" if near else " (see docs/settings.rst)")
        if config.lease_timeout < crawler.settings.getfloat("DOWNLOAD_TIMEOUT", 180.0):
            logger.warning(
                "FRONTIER_LEASE_TIMEOUT (%s s) is below DOWNLOAD_TIMEOUT (%s s): a fetch that "
                "runs longer keeps its lease (extended) in this process, but on Redis another "
                "worker may fetch from the host meanwhile. Leave FRONTIER_LEASE_TIMEOUT unset "
                "(DOWNLOAD_TIMEOUT + 60 s) or raise it.",
                config.lease_timeout, crawler.settings.get("DOWNLOAD_TIMEOUT"),
            )
        return cls(crawler, config, df, backend_cls=backend_cls)

    # -- opening and closing -----------------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        self.run.closed = self.waker.closed = False
        if self.engine.has_downloader_middleware(TIMING_MIDDLEWARE) is False:
            self._use_signals()
        sig = self.crawler.signals
        sig.connect(self._on_headers_received, signal=signals.headers_received)
        # After the feed exporter's own receiver: it makes its slots at spider_opened.
        sig.connect(self._on_spider_opened, signal=signals.spider_opened)
        self.timing.open(self.crawler.settings.getwithbase("DOWNLOAD_HANDLERS"),
                         self.stats.set_value)
        self.engine.on_robots_parsed(self._on_robots_parsed)
        self.stats.set_value("frontier/backend", self.backend.name)
        self.stats.set_value("frontier/back_queues/floor", self.config.back_queues)
        self.stats.set_value("frontier/back_queues/max", self.config.back_queues_max)
        mode = self.config.recrawl.mode
        observer = Observer.idle()
        try:
            observer = Observer(
                self.config.observe, census=self.backend.inspection.census,
                slots=self.engine.download_slots, clock=self.clock, call_later=call_later,
                spider=spider.name)
            observer.start_metrics()  # first: a port it cannot serve stops before any state
            self.backend.open(spider)
            if mode == "due" and not self.backend.persistent:
                # Nothing would read this history: it dies with the process.
                logger.info(
                    "No page history is kept: FRONTIER_RECRAWL='due' recrawls across runs, "
                    "and this frontier's state ends with the run (backend %r without JOBDIR "
                    "or FRONTIER_PATH). Set JOBDIR or FRONTIER_PATH (SQLite) or use Redis to "
                    "recrawl incrementally.", self.backend.name,
                )
            elif mode != "off":
                if not self.backend.persistent and not self.config.recrawl.max_pages:
                    # The history lives in memory and grows with every page fetched.
                    logger.warning(
                        "The page history of this continuous recrawl is kept in memory, about "
                        "2 KB per page, with no cap: FRONTIER_HISTORY_MAX_PAGES sets one (the "
                        "lowest-quality pages go first), and JOBDIR or FRONTIER_PATH keeps it "
                        "on disk instead.")
                self.recrawl = RecrawlHooks.with_store(self.config.recrawl,
                                                       self.backend.history.open_history())
        except FrontierError as exc:
            observer.stop()
            self._abandon()
            startup.report(logger, exc)
            raise
        self.admission.spider, self.admission.recrawl = spider, self.recrawl
        if self.recrawl is not None:
            self.history_feed.start(self.recrawl, spider)
            if mode == "continuous":
                self.crawler.signals.connect(self._on_spider_idle, signal=signals.spider_idle)
        self._log_opening()
        self.history_feed.request_sitemaps()
        self.observer = observer
        observer.start_progress()
        self.df.open()
        return None

    def _on_spider_opened(self, spider: Spider) -> None:
        self.feeds.open(resumable=self.backend.persistent)

    def _abandon(self) -> None:
        """Opening failed: close what was opened, and let the engine skip the spider."""
        try:
            self.close("shutdown")
        except Exception:  # noqa: BLE001 -- the opening error is the one to report
            logger.debug("Closing the frontier that did not open failed", exc_info=True)
        abandon_open(self.crawler)

    def _log_opening(self) -> None:
        """What this run is: the frontier in force, then what the history will recrawl."""
        logger.info("%s", frontier_line(self.config, self.backend.location))
        try:
            requests = self.backend.inspection.quarantine_size()
            records = (self.recrawl.recrawler.store.quarantine_size()
                       if self.recrawl is not None else 0)
        except StoreError as exc:  # the crawl itself says so when it next writes
            logger.debug("No quarantine count at open: %s", exc)
        else:
            held = quarantine_line(requests, records)
            if held is not None:
                logger.warning("%s", held)
        if self.recrawl is None:
            return
        recrawler = self.recrawl.recrawler
        try:
            pages, due = recrawler.census()
            next_due = recrawler.next_due()
        except StoreError as exc:  # the crawl itself says so when it next reads
            logger.debug("No page history census at open: %s", exc)
            return
        logger.info("%s", history_line(pages, due, next_due, time.time(),
                                       refetch_all=self.config.recrawl.refetch_all,
                                       shared=self.backend.name == "redis"))

    def close(self, reason: str) -> Deferred[None] | None:
        self.run.closed = True
        self.waker.close()
        self.history_feed.close()
        self.timing.close()
        out, ended = self.inflight.take_all()
        # The engine has processed every response by now; the feeds close after this.
        try:
            if ended:
                self.feeds.flush()
        except StoreError as exc:
            self.run.close_failed(exc)
        else:
            for fetch in ended:
                self.queue.ack(fetch.token)
        self._report_dropped()
        if self.observer is not None:
            self.observer.stop()  # the last progress line: the crawl's final numbers
            for key, value in self.observer.stats().items():
                self.stats.set_value(key, value)
        self.publish_stats()
        try:
            d = self.backend.close(reason)
        except StoreError as exc:
            self.run.close_failed(exc)
            d = None
        left = len(self.queue)
        if left and d is None:
            logger.info("Frontier closed (%s) with %d requests still queued", reason, left)

        def finish(result: object = None) -> object:
            self.publish_stats()
            self.df.close(reason)
            return result

        if d is None:
            finish()
            return None
        return d.addBoth(finish)

    # -- the Scrapy scheduler interface ---------------------------------------------

    def has_pending_requests(self) -> bool:
        # True while anything waits, including URLs held only for politeness:
        # otherwise the engine would think the crawl is over.
        if self.queue.has_pending():
            return True
        rc = self.recrawl
        return rc is not None and rc.pending_due() and not self.run.failed

    def __len__(self) -> int:
        return len(self.queue)

    def enqueue_request(self, request: Request) -> bool:
        # One frame for the common case: this runs once per request.
        try:
            meta = request.meta
            # A redirect, a retry, or a middleware that swaps the request copies meta:
            # the fetch that held this lease is over whatever happened to it.
            ticket = meta.pop(LEASE_META, None)
            if ticket is not None and meta.pop(LAPSED_META, False):
                return True  # given back unfetched (lease_lapsed): the queue keeps it
            try:
                host = self.slots.key(request)
            except HostlessURL as exc:
                self.stats.inc_value(f"frontier/rejected/{exc.reason}")
                logger.warning("Dropped %s: %s", request, exc)
                if ticket is not None:
                    self._complete_fetch(ticket)
                return False
            queued = self.admission.route(request, meta, host, ticket)
            if ticket is not None:
                # After the push, so that the request this one became is stored first.
                self._complete_fetch(ticket)
            return queued
        except StoreError as exc:
            # The request is in the store's pending writes: not lost, but the
            # state cannot be kept consistent any more, so the crawl stops.
            self.run.state_failed(exc)
            return True

    def next_request(self) -> Request | None:
        run = self.run
        if run.failed or run.closed:
            return None
        try:
            return self._next_request()
        except StoreError as exc:
            self.run.state_failed(exc)
            return None

    def _next_request(self) -> Request | None:
        now = self.clock()
        # Cheap tests first: this runs for every request handed out.
        if self.inflight.awaiting_ack:
            self.leases.acknowledge()
        signals_only = self.timing.signals_only
        if signals_only or now >= self.leases.check_at:
            self.leases.check(now, every_lease=signals_only)
        recrawl = self.recrawl
        if (recrawl is not None and now >= recrawl.feed_at
                and len(self.queue) < 2 * self.config.recrawl.feed_batch):
            self.history_feed.feed_due(now)
            if self.run.failed:
                return None
        handout = self.queue.claim()
        if handout is None:
            self._report_dropped()
            self._arm_wakeup()
            # Counters live in plain attributes on the hot path; the stats
            # collector is refreshed whenever the engine finds nothing to do.
            self.publish_stats()
            return None
        request = handout.item
        self.inflight.hand_out(handout.ticket, handout.host, request, now)
        return request

    # -- fetch ends ----------------------------------------------------------------------

    def lease_lapsed(self, request: Request) -> Request | None:
        """The fence, just before ``request`` reaches the downloader: if its lease may have
        lapsed (a shared frontier whose worker did not run for a while), the lease is given
        back unfetched and the request is returned marked, for the timing middleware to
        return; Scrapy then passes it to ``enqueue_request``, which drops it. No errback
        runs, the URL stays queued in the frontier, and no rest is set: nothing was sent.
        None (send it) otherwise, and at once where leases cannot lapse."""
        meta = request.meta
        ticket = meta.get(LEASE_META)
        queue = self.queue
        if ticket is None or queue.holds(ticket) or self.inflight.complete(ticket) is None:
            return None
        queue.give_back(ticket)
        meta[LAPSED_META] = True
        return request

    def fetch_sent(self, request: Request) -> None:
        """Called as a request this frontier handed out reaches the downloader (the timing
        middleware's process_request, or the request_reached_downloader signal)."""
        fetch = self.inflight.get(request.meta.get(LEASE_META))
        if fetch is not None:
            self.timing.sent(fetch)

    def fetch_completed(
        self,
        request: Request,
        response: Response | None = None,
        exception: BaseException | None = None,
    ) -> None:
        """Called once a fetch of a request this frontier handed out ended.

        The host is released now; the URL itself is kept until the engine is done
        with the request (see the in-flight ledger). ``response`` or ``exception``,
        when given, drive Retry-After, the back-off after failures and retirement.
        """
        try:
            if exception is not None and not isinstance(exception, IgnoreRequest):
                # robots.txt or a middleware saying no is not the page's fault.
                self.history_feed.page_failed(request)
            ticket = request.meta.get(LEASE_META)
            if ticket is not None:
                self._complete_fetch(ticket, response, exception)
        except StoreError as exc:
            self.run.state_failed(exc)

    def _complete_fetch(
        self,
        ticket: int,
        response: Response | None = None,
        exception: BaseException | None = None,
    ) -> None:
        if self.run.closed:
            return
        fetch = self.inflight.complete(ticket)
        if fetch is None:
            return  # a late report, or one already made: never release a host twice
        host, started = fetch.host, fetch.sent_at
        now = self.clock()
        timed = self.timing.measure(fetch, now, exception is not None)
        rest, failures = 0.0, 0
        if response is not None or exception is not None:
            rest, failures = self.rules.outcome_rest(host, response, exception)
        if self.rules.robots_done:
            robots_end = self.rules.robots_rest_end(host, take=True)
            if robots_end is not None:
                rest = max(rest, robots_end - now)
        token = self.queue.complete(ticket, timed.duration, rest, timed.ended_at)
        if token is not None:  # (tested here too: a call saved per fetch without one)
            self.inflight.await_ack(fetch, token)
        if failures and self.rules.should_retire(failures):
            self._retire(host, failures, response, exception)
        if self.timing.log_each:
            politeness_log.debug(
                "host %r: fetch took %.4f s, rest at least %.3f s (sent %.4f, answer ended %s, "
                "stalls %s)", host, timed.duration, rest, started or 0.0, timed.ended_at,
                self.timing.recent_stalls(started or 0.0, now),
            )

    def _on_headers_received(self, headers: Any, body_length: Any, request: Request,
                             spider: Spider) -> None:
        fetch = self.inflight.get(request.meta.get(LEASE_META))
        if fetch is not None:
            self.timing.headers(fetch, body_length)

    def _retire(self, host: str, failures: int, response: Response | None,
                exception: BaseException | None) -> None:
        dropped = self.backend.controls.retire(host)
        self.rules.forget(host)
        self.stats.inc_value("frontier/retired_hosts")
        if dropped:
            self.stats.inc_value("frontier/retired_requests", len(dropped))
        last = f"HTTP {response.status}" if response is not None else repr(exception)
        logger.warning(
            "Retired host %r after %d consecutive failed fetches (last: %s, "
            "FRONTIER_RETIRE_AFTER=%d): dropped %d queued requests%s",
            host, failures, last, self.config.site_limits.retire_after, len(dropped),
            _sample_urls(dropped),
        )

    def _report_dropped(self) -> None:
        """Log the URLs of retired hosts that surfaced from the front queues."""
        dropped = self.backend.controls.take_dropped()
        if not dropped:
            return
        self.stats.inc_value("frontier/retired_requests", len(dropped))
        by_host: dict[str, list[Request]] = {}
        for host, request in dropped:
            by_host.setdefault(host, []).append(request)
        for host, requests in by_host.items():
            logger.warning("Dropped %d more queued requests of retired host %r%s",
                           len(requests), host, _sample_urls(requests))

    # -- robots.txt ------------------------------------------------------------------------

    def _on_robots_parsed(self, robotparser: Any, request: Request) -> None:
        self.robots.parsed(robotparser, request)
        self.history_feed.robots_parsed(robotparser)

    # -- incremental recrawl ---------------------------------------------------------------

    @property
    def recrawler(self) -> Recrawler | None:
        return None if self.recrawl is None else self.recrawl.recrawler

    def _on_spider_idle(self, spider: Spider) -> None:
        """Continuous recrawl: stay open, pages fall due later. Stop with a signal."""
        from scrapy.exceptions import DontCloseSpider

        if self.run.closed or self.run.failed or self.recrawl is None:
            return
        self._arm_wakeup()
        raise DontCloseSpider

    # -- fetch ends without the middleware -----------------------------------------------

    def _use_signals(self) -> None:
        self.timing.signals_only = True
        self.stats.set_value("frontier/end_reports/signals", 1)
        logger.warning(
            "%s is not enabled, so the frontier learns when fetches end from Scrapy "
            "signals, which time them less precisely. Enable the add-on to fix this: "
            "ADDONS = {%r: 0}", TIMING_MIDDLEWARE, ADDON_PATH,
        )
        # Scrapy passes each receiver only the arguments it takes: the request here.
        sig = self.crawler.signals
        sig.connect(self.fetch_sent, signal=signals.request_reached_downloader)
        sig.connect(self.fetch_completed, signal=signals.request_left_downloader)
        sig.connect(self.fetch_completed, signal=signals.response_received)

    # -- waking the engine -------------------------------------------------------------

    def _arm_wakeup(self) -> None:
        """Make sure the engine asks again when the earliest resting host is ready.

        Without this the engine only asks on its 5 s heartbeat.
        """
        if self.run.closed:
            return
        at = self.queue.next_wakeup()
        rc = self.recrawler
        if rc is not None and rc.settings.mode == "continuous" and not len(self.queue):
            # Wake when the next page falls due (looked at again at least every minute).
            due = self.backend.history.next_due()
            wait = 60.0 if due is None else min(60.0, max(1.0, due - time.time()))
            at = self.clock() + wait if at is None else min(at, self.clock() + wait)
        self.waker.wake_at(at)

    # -- stats -------------------------------------------------------------------------

    def publish_stats(self) -> None:
        set_value = self.stats.set_value
        enqueued = self.admission.enqueued - self.queue.dropped_later
        if enqueued:
            set_value("frontier/enqueued", enqueued)
            set_value("scheduler/enqueued", enqueued)  # Scrapy's name, for dashboards
        inflight = self.inflight
        if inflight.handed:
            set_value("frontier/dequeued", inflight.handed)
            set_value("scheduler/dequeued", inflight.handed)
        if inflight.ended:
            set_value("frontier/completed", inflight.ended)
        set_value("frontier/queued", len(self.queue))
        if self.feeds.flushes:
            set_value("frontier/feeds/flushes", self.feeds.flushes)
        self.timing.publish_stats(set_value)
        self.backend.inspection.publish_stats(self.stats)
        if self.recrawl is not None:
            self.recrawl.publish_stats(self.stats)


def _sample_urls(requests: list[Request], limit: int = 10) -> str:
    if not requests:
        return ""
    urls = ", ".join(r.url for r in requests[:limit])
    more = len(requests) - limit
    return f": {urls}" + (f" and {more} more" if more > 0 else "")


#: Scrapy's own scheduler's queue settings: the frontier has its own queues.
_SCRAPY_QUEUE_SETTINGS = (
    "SCHEDULER_PRIORITY_QUEUE", "SCHEDULER_MEMORY_QUEUE", "SCHEDULER_DISK_QUEUE",
    "SCHEDULER_START_MEMORY_QUEUE", "SCHEDULER_START_DISK_QUEUE",
)


def _warn_about_stacked_delays(crawler: Crawler) -> None:
    settings = crawler.settings
    ignored = [name for name in _SCRAPY_QUEUE_SETTINGS
               if (settings.getpriority(name) or 0) > 0]  # set by the project or a spider
    if ignored:
        logger.warning(
            "%s: ignored by scrapy-frontier, whose front queues are FIFO within each priority "
            "level for start and other requests alike (Request.priority still applies).",
            ", ".join(ignored),
        )
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
