"""A fetch's life in this worker, from claim to ack: the send, the completion (the host's
rest, the outcome's floors, retirement), the lapse, the ack.

The scheduler claims from the queue and records the hand-out in the in-flight ledger
(:attr:`Fetches.inflight`), which holds each lease until the engine is done with its
request. The timing middleware reports ``sent`` and ``completed``, and asks ``lapsed`` (the
fence) before a request reaches the downloader; without that middleware, Scrapy's signals
report the same events.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest

from scrapy_frontier.backends.ports import QueuePort
from scrapy_frontier.errors import StoreError
from scrapy_frontier.meta import LAPSED_META, LEASE_META, SITEMAP_META
from scrapy_frontier.scheduler.capacity import CapacityFeed
from scrapy_frontier.scheduler.feeds import FeedGuard
from scrapy_frontier.scheduler.fetch_timing import FetchTiming
from scrapy_frontier.scheduler.inflight import InFlight, LeaseKeeper
from scrapy_frontier.scheduler.site_rules import SiteRules

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.backends.ports import Backend
    from scrapy_frontier.scheduler.engine import EngineAdapter
    from scrapy_frontier.scheduler.history_feed import HistoryFeed
    from scrapy_frontier.scheduler.inflight import Fetch
    from scrapy_frontier.scheduler.run_state import RunState
    from scrapy_frontier.settings import FrontierConfig

logger = logging.getLogger("scrapy_frontier.scheduler")
politeness_log = logging.getLogger("scrapy_frontier.politeness")

ADDON_PATH = "scrapy_frontier.Addon"
TIMING_MIDDLEWARE = "scrapy_frontier.downloadermiddlewares.FetchTimingMiddleware"


class Fetches:
    """The fetches this worker claimed, from claim to ack (see the module doc)."""

    def __init__(self, crawler: Crawler, config: FrontierConfig, backend: Backend, *,
                 engine: EngineAdapter, run: RunState, history_feed: HistoryFeed,
                 clock: Callable[[], float]) -> None:
        self.crawler = crawler
        self.stats: StatsCollector = crawler.stats  # type: ignore[assignment]
        self.retire_after = config.site_limits.retire_after
        self.queue = backend.queue
        # Whether leases can lapse here: only a queue that overrides holds() fences.
        self.fenced = type(backend.queue).holds is not QueuePort.holds
        self.controls = backend.controls
        self.run = run
        self.history_feed = history_feed
        self.clock = clock
        self.inflight = InFlight(config.lease_timeout)
        self.rules = SiteRules(config, self.stats, clock)
        self.timing = FetchTiming(clock=clock, tcp_timing=config.tcp_timing,
                                  watch_stalls=config.stall_discount)
        self.feeds = FeedGuard(crawler)
        self.persistent = backend.persistent
        self.engine = engine
        self.unsent = 0
        #: Each host's connections by measurement (FRONTIER_CAPACITY); None: off.
        self.capacity = (CapacityFeed(config.host_policies.connections_of, backend.controls,
                                      self.stats) if config.capacity else None)
        self.leases = LeaseKeeper(self.inflight, engine, self.queue, self.stats,
                                  config.lease_timeout, ended=self.completed,
                                  items_safe=self.feeds.flush)

    def open(self) -> None:
        if self.engine.has_downloader_middleware(TIMING_MIDDLEWARE) is False:
            self._use_signals()
        sig = self.crawler.signals
        sig.connect(self._headers_received, signal=signals.headers_received)
        # After the feed exporter's own receiver: it makes its slots at spider_opened.
        sig.connect(self._spider_opened, signal=signals.spider_opened)
        self.timing.open(self.crawler.settings.getwithbase("DOWNLOAD_HANDLERS"),
                         self.stats.set_value, self.engine.connection_pools())

    def _spider_opened(self, spider: Spider) -> None:
        self.feeds.open(resumable=self.persistent)

    def close(self) -> None:
        """The engine has processed every response: make their items safe, then ack."""
        self.timing.close()
        _, ended = self.inflight.take_all()
        try:
            if ended:
                self.feeds.flush()
        except StoreError as exc:
            self.run.close_failed(exc)
        else:
            for fetch in ended:
                self.queue.ack(fetch.token)
        self.report_dropped()

    # -- send, complete, lapse -----------------------------------------------------------

    def lapsed(self, request: Request) -> Request | None:
        """The fence, just before ``request`` reaches the downloader: if its lease may have
        lapsed (a shared frontier whose worker did not run for a while), the lease is given
        back unfetched and the request is returned marked, for the timing middleware to
        return; Scrapy then passes it to ``enqueue_request``, which drops it. No errback
        runs, the URL stays queued in the frontier, and no rest is set: nothing was sent.
        None (send it) otherwise, and at once where leases cannot lapse."""
        if not self.fenced:
            return None
        meta = request.meta
        ticket = meta.get(LEASE_META)
        queue = self.queue
        if ticket is None or queue.holds(ticket) or self.inflight.complete(ticket) is None:
            return None
        queue.give_back(ticket)
        if self.capacity is not None:
            self.capacity.dropped(ticket)
        meta[LAPSED_META] = True
        return request

    def sent(self, request: Request) -> None:
        """A request this worker claimed reaches the downloader (the timing middleware's
        process_request, or the request_reached_downloader signal)."""
        fetch = self.inflight.get(request.meta.get(LEASE_META))
        if fetch is not None:
            self.timing.sent(fetch)
            if self.capacity is not None:
                self.capacity.sent(fetch.ticket, fetch.host, fetch.sent_at or 0.0)

    def completed(
        self,
        request: Request,
        response: Response | None = None,
        exception: BaseException | None = None,
    ) -> None:
        """The fetch of a request this worker claimed ended.

        The host is released now; the URL itself is kept until the engine is done
        with the request (see the in-flight ledger). ``response`` or ``exception``,
        when given, drive Retry-After, the back-off after failures and retirement.
        """
        try:
            if exception is not None and not isinstance(exception, IgnoreRequest):
                # robots.txt or a middleware saying no is not the page's fault.
                self.history_feed.page_failed(request)
                if request.meta.get(SITEMAP_META):
                    self.history_feed.sitemap_failed(request, exception)
            ticket = request.meta.get(LEASE_META)
            if ticket is not None:
                self.complete(ticket, response, exception)
        except StoreError as exc:
            self.run.state_failed(exc)

    def complete(
        self,
        ticket: int,
        response: Response | None = None,
        exception: BaseException | None = None,
    ) -> None:
        """End lease ``ticket``'s fetch: the host rests, the queue awaits the ack."""
        if self.run.closed:
            return
        fetch = self.inflight.complete(ticket)
        if fetch is None:
            return  # a late report, or one already made: never release a host twice
        host, started = fetch.host, fetch.sent_at
        rules = self.rules
        # A robots.txt fetch under this lease contacted the host, sent or not.
        robots_end = rules.robots_rest_end(host, take=True) if rules.robots_done else None
        if started is None and robots_end is None:
            self._end_unsent(fetch)
            return
        now = self.clock()
        timed = self.timing.measure(fetch, now, exception is not None)
        rest, failures = 0.0, 0
        if response is not None or exception is not None:
            rest, failures = rules.outcome_rest(host, response, exception)
        if robots_end is not None:
            rest = max(rest, robots_end - now)
        token = self.queue.complete(ticket, timed.duration, rest, timed.ended_at)
        if token is not None:  # (tested here too: a call saved per fetch without one)
            self.inflight.await_ack(fetch, token)
        if self.capacity is not None:
            self.capacity.ended(ticket, timed.duration, timed.ended_at or now,
                                strained=CapacityFeed.strained(response, exception))
        if failures and rules.should_retire(failures):
            self._retire(host, failures, response, exception)
        if self.timing.log_each:
            politeness_log.debug(
                "host %r: fetch took %.4f s, rest at least %.3f s (sent %.4f, answer ended %s, "
                "stalls %s)", host, timed.duration, rest, started or 0.0, timed.ended_at,
                self.timing.recent_stalls(started or 0.0, now),
            )

    def _end_unsent(self, fetch: Fetch) -> None:
        """The request never reached the downloader (robots.txt forbade it, a cache or a
        middleware answered it): its host rests nothing, and no site rule counts it."""
        self.unsent += 1
        if self.capacity is not None:
            self.capacity.dropped(fetch.ticket)
        token = self.queue.complete(fetch.ticket, 0.0, 0.0, None, sent=False)
        if token is not None:
            self.inflight.await_ack(fetch, token)

    def _headers_received(self, headers: Any, body_length: Any, request: Request,
                          spider: Spider) -> None:
        fetch = self.inflight.get(request.meta.get(LEASE_META))
        if fetch is not None:
            self.timing.headers(fetch, body_length)

    # -- retired hosts -------------------------------------------------------------------

    def _retire(self, host: str, failures: int, response: Response | None,
                exception: BaseException | None) -> None:
        dropped = self.controls.retire(host)
        self.rules.forget(host)
        if self.capacity is not None:
            self.capacity.forget(host)
        self.stats.inc_value("frontier/retired_hosts")
        if dropped:
            self.stats.inc_value("frontier/retired_requests", len(dropped))
        last = f"HTTP {response.status}" if response is not None else repr(exception)
        logger.warning(
            "Retired host %r after %d consecutive failed fetches (last: %s, "
            "FRONTIER_RETIRE_AFTER=%d): dropped %d queued requests%s",
            host, failures, last, self.retire_after, len(dropped), _sample_urls(dropped),
        )

    def report_dropped(self) -> None:
        """Log the URLs of retired hosts that surfaced from the front queues."""
        dropped = self.controls.take_dropped()
        if not dropped:
            return
        self.stats.inc_value("frontier/retired_requests", len(dropped))
        by_host: dict[str, list[Request]] = {}
        for host, request in dropped:
            by_host.setdefault(host, []).append(request)
        for host, requests in by_host.items():
            logger.warning("Dropped %d more queued requests of retired host %r%s",
                           len(requests), host, _sample_urls(requests))

    # -- ends reported by signals --------------------------------------------------------

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
        sig.connect(self.sent, signal=signals.request_reached_downloader)
        sig.connect(self.completed, signal=signals.request_left_downloader)
        sig.connect(self.completed, signal=signals.response_received)

    # -- stats ---------------------------------------------------------------------------

    def publish_stats(self, set_value: Callable[[str, Any], None]) -> None:
        inflight = self.inflight
        if inflight.handed:
            set_value("frontier/dequeued", inflight.handed)
            set_value("scheduler/dequeued", inflight.handed)  # Scrapy's name, for dashboards
        if inflight.ended:
            set_value("frontier/completed", inflight.ended)
        if self.feeds.flushes:
            set_value("frontier/feeds/flushes", self.feeds.flushes)
        if self.unsent:
            set_value("frontier/unsent", self.unsent)
        self.timing.publish_stats(set_value)


def _sample_urls(requests: list[Request], limit: int = 10) -> str:
    if not requests:
        return ""
    urls = ", ".join(r.url for r in requests[:limit])
    more = len(requests) - limit
    return f": {urls}" + (f" and {more} more" if more > 0 else "")
