"""The Scrapy scheduler: a thin shell around :class:`scrapy_frontier.core.Frontier`."""

from __future__ import annotations

import logging
import pickle
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from scrapy import Request, signals
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import request_from_dict

from scrapy_frontier import jobdir
from scrapy_frontier.config import FrontierConfig
from scrapy_frontier.core.frontier import Frontier
from scrapy_frontier.core.prioritizer import PriorityMapper
from scrapy_frontier.hostkey import HostlessURL, host_key
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
        self.frontier: Frontier[Request] = Frontier(
            front_queues=config.front_queues,
            priority_bias=config.priority_bias,
            back_queues=config.back_queues,
            back_queues_max=config.back_queues_max,
            policy=config.policy,
            lease_timeout=config.lease_timeout,
            clock=clock,
            rng=random.Random(config.seed),
        )
        self.spider: Spider | None = None
        self._timer: Timer | None = None
        self._timer_at: float | None = None
        self._closed = False
        self.uses_signals = False
        self._enqueued = 0
        self._state_path: Path | None = None
        self._wakeups = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        config = FrontierConfig.from_settings(crawler.settings)
        df_cls = load_object(crawler.settings["DUPEFILTER_CLASS"])
        scheduler = cls(crawler, config, build_from_crawler(df_cls, crawler))
        _warn_about_stacked_delays(crawler)
        return scheduler

    # -- Scrapy scheduler interface ----------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        self.spider = spider
        self._closed = False
        if not self._timing_middleware_installed():
            self._use_signals()
        self.stats.set_value("frontier/back_queues/floor", self.config.back_queues)
        self.stats.set_value("frontier/back_queues/max", self.config.back_queues_max)
        job = self.crawler.settings.get("JOBDIR")
        self._state_path = jobdir.state_path(job) if job else None
        if self._state_path is not None:
            self._restore(self._state_path, spider)
        return self.df.open()

    def close(self, reason: str) -> Deferred[None] | None:
        self._closed = True
        self._cancel_timer()
        if self._state_path is not None:
            self._save(self._state_path)
        self.publish_stats()
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
        return len(self.frontier) > 0

    def __len__(self) -> int:
        return len(self.frontier)

    def enqueue_request(self, request: Request) -> bool:
        if not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.spider)  # type: ignore[arg-type]
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
        if LEASE_META in meta:
            ticket = meta.pop(LEASE_META)
            self._finish(ticket, meta.pop(FETCH_START_META, None))
        self.frontier.push(host, self.mapper.level(request.priority), request)
        self._enqueued += 1
        return True

    def next_request(self) -> Request | None:
        frontier = self.frontier
        if self.uses_signals:
            self._reap_finished_leases()
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
        if lease is None:
            self._arm_wakeup()
            # Counters live in plain attributes on the hot path; the stats
            # collector is refreshed whenever the engine finds nothing to do.
            self.publish_stats()
            return None
        request = lease.item
        request.meta[LEASE_META] = lease.ticket
        return request

    # -- fetch end reports ---------------------------------------------------

    def fetch_finished(self, request: Request) -> None:
        """Called once a fetch of a request this frontier handed out ended."""
        ticket = request.meta.get(LEASE_META)
        if ticket is not None:
            self._finish(ticket, request.meta.get(FETCH_START_META))

    def _finish(self, ticket: int, started: float | None) -> None:
        if self._closed:
            return
        now = self.clock()
        # No start stamp: the response never touched the network (a cache hit,
        # or an IgnoreRequest before the downloader).
        duration = 0.0 if started is None else max(0.0, now - started)
        lease = self.frontier.complete(ticket, duration)
        if lease is None:
            return
        if politeness_log.isEnabledFor(logging.DEBUG):
            next_contact = self.frontier.next_contact(lease.host)
            politeness_log.debug(
                "host %r: fetch took %.4f s, next contact in %.3f s",
                lease.host,
                duration,
                (next_contact or now) - now,
            )

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

    # -- pause and resume (JOBDIR) ------------------------------------------

    def _restore(self, path: Path, spider: Spider) -> None:
        saved = jobdir.load(path, spider.name)
        if saved is None:
            return
        now = self.clock()
        for host, rest in saved.rests.items():
            self.frontier.rest_until(host, now + rest)
        for host, level, data in saved.requests:
            try:
                request = request_from_dict(data, spider=spider)
            except Exception as exc:
                raise jobdir.FrontierStateError(
                    f"{path}: cannot rebuild the saved request {data.get('url')!r} ({exc}). "
                    "Was the spider's code changed (a callback renamed)? Restore the "
                    "callback, or move the file away to drop the saved queue."
                ) from exc
            self.frontier.push(host, level, request)
        self.stats.set_value("frontier/restored", len(saved.requests))
        logger.info(
            "Resumed %d queued requests and %d resting hosts from %s",
            len(saved.requests),
            len(saved.rests),
            path,
        )

    def _save(self, path: Path) -> None:
        spider = self.spider
        now = self.clock()
        saved = jobdir.SavedQueue(spider.name if spider else "")
        pending = [(host, level, item) for host, level, item in self.frontier.iter_queued()]
        # Fetches still in flight at close were not completed: save them too.
        pending += [(lease.host, lease.level, lease.item) for lease in self.frontier.leases()]
        lost: list[Request] = []
        for host, level, request in pending:
            request.meta.pop(LEASE_META, None)
            request.meta.pop(FETCH_START_META, None)
            try:
                data = request.to_dict(spider=spider)
                pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                lost.append(request)
                logger.error("Cannot save %s for resuming (%s)", request, exc)
                continue
            saved.requests.append((host, level, data))
        saved.rests = {h: t - now for h, t in self.frontier.rests().items()}
        try:
            jobdir.save(path, saved)
        except jobdir.FrontierStateError as exc:
            logger.error("%s", exc)
            for _, _, request in pending:
                logger.error("Not saved: %s", request)
            self.stats.set_value("frontier/save_failed", len(pending))
            return
        self.stats.set_value("frontier/saved", len(saved.requests))
        if lost:
            self.stats.set_value("frontier/unserializable", len(lost))
            logger.error(
                "%d queued requests could not be saved to %s (callbacks must be spider "
                "methods and meta must be picklable) and will not be resumed; see above.",
                len(lost),
                path,
            )
        if saved.requests:
            logger.info("Saved %d queued requests to %s", len(saved.requests), path)

    # -- waking the engine -------------------------------------------------

    def _arm_wakeup(self) -> None:
        """Make sure the engine asks again when the earliest resting host is ready.

        Without this the engine only asks on its 5 s heartbeat.
        """
        if self._closed:
            return
        at = self.frontier.next_wakeup()
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
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is None or self._closed:
            return
        self._wakeups += 1
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

