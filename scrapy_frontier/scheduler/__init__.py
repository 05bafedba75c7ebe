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
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_frontier.backends.ports import BackendContext, build_backend, load_backend
from scrapy_frontier.codec import RowKeys
from scrapy_frontier.errors import FrontierError, StoreError
from scrapy_frontier.fingerprint import Fingerprinter64
from scrapy_frontier.hostkey import HostlessURL
from scrapy_frontier.meta import LAPSED_META, LEASE_META
from scrapy_frontier.observe.observer import Observer
from scrapy_frontier.observe.opening import log_opening
from scrapy_frontier.reactor.timer import EngineWaker, call_later
from scrapy_frontier.scheduler import startup
from scrapy_frontier.scheduler.admission import Admission
from scrapy_frontier.scheduler.engine import EngineAdapter, abandon_open
from scrapy_frontier.scheduler.fetches import Fetches
from scrapy_frontier.scheduler.history_feed import HistoryFeed
from scrapy_frontier.scheduler.recrawl import RecrawlHooks
from scrapy_frontier.scheduler.robots import RobotsPacing
from scrapy_frontier.scheduler.robots_cache import RobotsCache
from scrapy_frontier.scheduler.run_state import RunState
from scrapy_frontier.scheduler.slots import SlotKeys
from scrapy_frontier.scheduler.traps import TrapWatch
from scrapy_frontier.settings import (
    FrontierConfig,
    refuse_scrapy_redis_switches,
    unknown_settings,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from scrapy_frontier.backends.ports import Backend
    from scrapy_frontier.core.recrawl import Recrawler

__all__ = ["FrontierScheduler"]

logger = logging.getLogger("scrapy_frontier.scheduler")


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
        self.clock = clock
        self.stats: StatsCollector = cast("StatsCollector", crawler.stats)
        self.engine = EngineAdapter(crawler)
        self.run = RunState(self.engine, self.stats)
        self.waker = EngineWaker(self.engine, clock,
                                 counted=partial(self.stats.inc_value, "frontier/engine_wakeups"))
        context = BackendContext(
            crawler=crawler, config=config, stats=self.stats, clock=clock,
            dupefilter=dupefilter, wake=self.waker.nudge, fail=self.run.fail,
            due_arrived=lambda: self.history_feed.due_arrived(),
        )
        cls = backend_cls if backend_cls is not None else load_backend(config.backend_path)
        self.backend = build_backend(cls, context)
        slots = SlotKeys()
        self.admission = Admission(config, dupefilter, self.backend, self.stats,
                                   Fingerprinter64(crawler.request_fingerprinter), slots,
                                   history_failed=self.run.state_failed)
        self.history_feed = HistoryFeed(config, self.backend.history, self.run,
                                        fp64=self.admission.fp64, enqueue=self.enqueue_request,
                                        wake=self.waker.nudge, settings=crawler.settings,
                                        stats=self.stats,
                                        traps=TrapWatch.build(
                                            config.budgets.traps, self.backend.controls,
                                            partial(slots.key, remember=False), self.stats))
        self.fetches = Fetches(crawler, config, self.backend, engine=self.engine, run=self.run,
                               history_feed=self.history_feed, clock=clock)
        self.robots = RobotsPacing(slots=slots, rules=self.fetches.rules,
                                   inflight=self.fetches.inflight,
                                   controls=self.backend.controls, stats=self.stats,
                                   clock=clock, settings=crawler.settings,
                                   cache=_robots_cache(config, self.backend, self.stats))
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
        self.fetches.open()
        self.engine.on_robots_parsed(self._on_robots_parsed)
        self.stats.set_value("frontier/backend", self.backend.name)
        self.stats.set_value("frontier/back_queues/floor", self.config.back_queues)
        self.stats.set_value("frontier/back_queues/max", self.config.back_queues_max)
        mode = self.config.recrawl.mode
        recrawl: RecrawlHooks | None = None
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
                recrawl = RecrawlHooks.with_store(self.config.recrawl,
                                                  self.backend.history.open_history(),
                                                  self.backend.row_trust)
        except FrontierError as exc:
            observer.stop()
            self._abandon()
            startup.report(logger, exc)
            raise
        self.admission.spider, self.admission.recrawl = spider, recrawl
        if recrawl is not None:
            self.history_feed.start(recrawl, spider)
            if mode == "continuous":
                self.crawler.signals.connect(self._on_spider_idle, signal=signals.spider_idle)
        log_opening(self.config, self.backend, self.recrawler)
        self.history_feed.request_sitemaps()
        self.observer = observer
        observer.start_progress()
        self.admission.df.open()
        return None

    def _abandon(self) -> None:
        """Opening failed: close what was opened, and let the engine skip the spider."""
        try:
            self.close("shutdown")
        except Exception:  # noqa: BLE001 -- the opening error is the one to report
            logger.debug("Closing the frontier that did not open failed", exc_info=True)
        abandon_open(self.crawler)

    def close(self, reason: str) -> Deferred[None] | None:
        self.run.closed = True
        self.waker.close()
        self.history_feed.close()
        self.fetches.close()
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
        left = len(self.backend.queue)
        if left and d is None:
            logger.info("Frontier closed (%s) with %d requests still queued", reason, left)

        def finish(result: object = None) -> object:
            self.publish_stats()
            self.admission.df.close(reason)
            return result

        if d is None:
            finish()
            return None
        return d.addBoth(finish)

    # -- the Scrapy scheduler interface ---------------------------------------------

    def has_pending_requests(self) -> bool:
        # True while anything waits, including URLs held only for politeness:
        # otherwise the engine would think the crawl is over.
        if self.backend.queue.has_pending():
            return True
        rc = self.history_feed.hooks
        return rc is not None and rc.pending_due() and not self.run.failed

    def __len__(self) -> int:
        return len(self.backend.queue)

    def enqueue_request(self, request: Request) -> bool:
        # One frame for the common case: this runs once per request.
        try:
            meta = request.meta
            # A redirect, a retry, or a middleware that swaps the request copies meta:
            # the fetch that held this lease is over whatever happened to it.
            ticket = meta.pop(LEASE_META, None)
            if ticket is not None and meta.pop(LAPSED_META, False):
                return True  # given back unfetched (Fetches.lapsed): the queue keeps it
            try:
                queued = self.admission.route(request, meta, ticket)
            except HostlessURL as exc:
                self.stats.inc_value(f"frontier/rejected/{exc.reason}")
                logger.warning("Dropped %s: %s", request, exc)
                queued = False
            if ticket is not None:
                # After the push, so that the request this one became is stored first.
                self.fetches.complete(ticket)
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
            now = self.clock()
            feed = self.history_feed
            recrawl = feed.hooks
            if (recrawl is not None and now >= recrawl.feed_at
                    and len(self.backend.queue) < 2 * self.config.recrawl.feed_batch):
                feed.feed_due(now)
                if run.failed:
                    return None
            # The claim, inline (this runs for every request handed out): first ack what
            # the engine is done with, and end the leases no report will end.
            fetches = self.fetches
            inflight, leases = fetches.inflight, fetches.leases
            if inflight.awaiting_ack:
                leases.acknowledge()
            signals_only = fetches.timing.signals_only
            if signals_only or now >= leases.check_at:
                leases.check(now, every_lease=signals_only)
            handout = fetches.queue.claim()
            if handout is not None:
                request = handout.item
                inflight.hand_out(handout.ticket, handout.host, request, now)
                return request
            fetches.report_dropped()
            self._arm_wakeup()
            # Counters live in plain attributes on the hot path; the stats
            # collector is refreshed whenever the engine finds nothing to do.
            self.publish_stats()
            return None
        except StoreError as exc:
            run.state_failed(exc)
            return None

    # -- robots.txt ------------------------------------------------------------------------

    def _on_robots_parsed(self, robotparser: Any, request: Request) -> None:
        self.robots.parsed(robotparser, request)
        self.history_feed.robots_parsed(robotparser, request)

    @property
    def df(self) -> BaseDupeFilter:
        """The dupe filter, under the name Scrapy's own scheduler gives it."""
        return self.admission.df

    # -- incremental recrawl ---------------------------------------------------------------

    @property
    def recrawler(self) -> Recrawler | None:
        return self.history_feed.recrawler

    def _on_spider_idle(self, spider: Spider) -> None:
        """Continuous recrawl: stay open, pages fall due later. Stop with a signal."""
        from scrapy.exceptions import DontCloseSpider

        if self.run.closed or self.run.failed or self.history_feed.hooks is None:
            return
        self._arm_wakeup()
        raise DontCloseSpider

    # -- waking the engine -------------------------------------------------------------

    def _arm_wakeup(self) -> None:
        """Make sure the engine asks again when the earliest resting host is ready.

        Without this the engine only asks on its 5 s heartbeat.
        """
        if self.run.closed:
            return
        queue = self.backend.queue
        at = queue.next_wakeup()
        rc = self.recrawler
        if rc is not None and rc.settings.mode == "continuous" and not len(queue):
            # Wake when the next page falls due (looked at again at least every minute).
            due = self.backend.history.next_due()
            wait = 60.0 if due is None else min(60.0, max(1.0, due - time.time()))
            at = self.clock() + wait if at is None else min(at, self.clock() + wait)
        self.waker.wake_at(at)

    # -- stats -------------------------------------------------------------------------

    def publish_stats(self) -> None:
        set_value = self.stats.set_value
        enqueued = self.admission.enqueued - self.backend.queue.dropped_later
        if enqueued:
            set_value("frontier/enqueued", enqueued)
            set_value("scheduler/enqueued", enqueued)  # Scrapy's name, for dashboards
        set_value("frontier/queued", len(self.backend.queue))
        self.fetches.publish_stats(set_value)
        self.backend.inspection.publish_stats(self.stats)
        if self.history_feed.hooks is not None:
            self.history_feed.hooks.publish_stats(self.stats)


#: Scrapy's own scheduler's queue settings: the frontier has its own queues.
_SCRAPY_QUEUE_SETTINGS = (
    "SCHEDULER_PRIORITY_QUEUE", "SCHEDULER_MEMORY_QUEUE", "SCHEDULER_DISK_QUEUE",
    "SCHEDULER_START_MEMORY_QUEUE", "SCHEDULER_START_DISK_QUEUE",
)


def _robots_cache(config: FrontierConfig, backend: Backend,
                  stats: StatsCollector) -> RobotsCache | None:
    """FRONTIER_ROBOTS_CACHE: robots.txt answers kept with the backend, sealed with
    FRONTIER_SIGNING_KEYS; 0: none."""
    seconds = config.site_limits.robots_cache
    if seconds <= 0:
        return None
    keys = RowKeys(config.signing_keys) if config.signing_keys else None
    return RobotsCache(backend.robots, stats, seconds, keys=keys)


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
            "DOWNLOAD_DELAY=%s is every host's minimum rest, and Scrapy's downloader waits it "
            "again between requests: set FRONTIER_MIN_DELAY instead and DOWNLOAD_DELAY=0, or "
            "use the add-on, which does that.",
            settings.get("DOWNLOAD_DELAY"),
        )
    per_domain = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
    project_set = ((settings.getpriority("CONCURRENT_REQUESTS_PER_DOMAIN") or 0)
                   > SETTINGS_PRIORITIES["addon"])
    if per_domain > 1 and project_set:
        logger.info(
            "CONCURRENT_REQUESTS_PER_DOMAIN=%d caps a host's connections; each host has one "
            "unless FRONTIER_HOST_POLICY or DOWNLOAD_SLOTS gives it more.", per_domain)
    if settings.getbool("AUTOTHROTTLE_ENABLED"):
        logger.warning(
            "AUTOTHROTTLE_ENABLED adds AutoThrottle's delays on top of the frontier's "
            "politeness; disable it (the frontier already adapts to each host's speed)."
        )
