"""The page history's side of the shell.

The pages the spider visits, and the sitemaps and feeds it (or the frontier) reads, go to
the backend's :class:`~scrapy_frontier.backends.ports.HistoryPort`; the pages that fall due
come back as requests. Without a recrawl mode it holds no hooks and does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy_frontier.core.signals import TOO_LARGE
from scrapy_frontier.errors import HistoryStoreError, StoreError
from scrapy_frontier.scheduler.change_signals import (
    TIMED_OUT,
    SignalReader,
    download_cut,
    looks_like_signals,
    names_sitemaps,
    robots_sitemaps,
    sitemap_meta,
    sitemap_request,
)
from scrapy_frontier.scheduler.sitemap_scope import SitemapScope, hostname

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.backends.ports import HistoryPort
    from scrapy_frontier.core.recrawl import Recrawler, Visit
    from scrapy_frontier.scheduler.recrawl import RecrawlHooks
    from scrapy_frontier.scheduler.run_state import RunState
    from scrapy_frontier.scheduler.traps import TrapWatch
    from scrapy_frontier.settings import FrontierConfig

logger = logging.getLogger("scrapy_frontier.scheduler")


class HistoryFeed:
    """Visits and hints in, due pages out (see the module doc)."""

    def __init__(self, config: FrontierConfig, port: HistoryPort, run: RunState, *,
                 fp64: Callable[[Request], int], enqueue: Callable[[Request], object],
                 wake: Callable[[], None], settings: BaseSettings,
                 stats: StatsCollector, traps: TrapWatch | None = None) -> None:
        self.config = config
        self.port = port
        self.run = run
        self.fp64 = fp64
        self.enqueue = enqueue
        self.wake = wake
        self.settings = settings
        self.stats = stats
        self.hooks: RecrawlHooks | None = None
        #: Judges each fetched page's host for a crawler trap (None: FRONTIER_TRAPS off).
        self.traps = traps
        #: Reads the sitemaps and feeds the spider fetches (with hooks only).
        self.reader: SignalReader | None = None
        #: Where the frontier's own sitemap requests may go (with the reader).
        self.scope: SitemapScope | None = None
        self.spider: Spider | None = None
        #: The meta of the frontier's own sitemap requests (timeout, retries, size).
        self.sitemap_meta = sitemap_meta(
            timeout=config.sitemaps.timeout, retry_times=settings.getint("RETRY_TIMES", 2),
            max_size=settings.getint("DOWNLOAD_MAXSIZE", 0))
        #: Hosts whose sitemap timeout was logged (once each).
        self._timeouts_logged: set[str] = set()

    def start(self, hooks: RecrawlHooks, spider: Spider) -> None:
        """A recrawl mode is on: hand the recrawler to the port, and read sitemaps."""
        self.hooks, self.spider = hooks, spider
        self.port.attach(hooks.recrawler)
        self.scope = SitemapScope(spider, self.stats, self._count)
        self.reader = SignalReader(
            self.fp64, partial(self._write, self.port.record_hints),
            partial(self._write, self.port.record_signal_source), self._count, self._follow)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    @property
    def recrawler(self) -> Recrawler | None:
        return None if self.hooks is None else self.hooks.recrawler

    def page_visited(self, request: Request, visit: Visit) -> None:
        """A response for ``request`` arrived (from the recrawl spider middleware)."""
        hooks = self.hooks
        if hooks is None or self.run.closed or not hooks.keeps(request):
            return
        visit.request = hooks.snapshot(request, self.spider)
        self._write(self.port.record_visit, self.fp64(request), request.url, visit)

    def page_failed(self, request: Request) -> None:
        """The download of ``request`` failed (not robots.txt or a middleware saying no)."""
        hooks = self.hooks
        if hooks is not None and hooks.keeps(request):
            self._write(self.port.record_visit, self.fp64(request), request.url, None)

    def sitemap_failed(self, request: Request, exception: BaseException) -> None:
        """The download of a sitemap the frontier requested failed: cut at its size limit
        (a refusal, too_large) or at FRONTIER_SITEMAP_TIMEOUT (counted, logged once per
        host); other failures are Scrapy's to log."""
        if self.reader is None or self.run.closed:
            return
        cut = download_cut(exception)
        if cut == TOO_LARGE:
            self.reader.refused(request.url, TOO_LARGE)
        elif cut == TIMED_OUT:
            self._count("sitemaps/timeouts", 1)
            host = hostname(request.url)
            if host not in self._timeouts_logged and len(self._timeouts_logged) < 1_000:
                self._timeouts_logged.add(host)
                logger.warning(
                    "The sitemap %s of host %r did not arrive within FRONTIER_SITEMAP_TIMEOUT "
                    "(%g s): cut, and retried at most once, so that the host's pages are not "
                    "held (frontier/sitemaps/timeouts counts them; logged once per host)",
                    request.url, host, request.meta.get("download_timeout",
                                                        self.config.sitemaps.timeout))

    def signals_received(self, url: str, body: bytes, *, owned: bool = False) -> None:
        """A response that may be a sitemap or a feed (from the recrawl spider middleware);
        ``owned``: the frontier requested it itself."""
        if self.reader is None or self.run.closed:
            return
        if looks_like_signals(url, body):
            self.reader.received(url, body, owned=owned)
        elif names_sitemaps(url, body):
            self.reader.robots_txt_read(url)

    def robots_parsed(self, robotparser: Any, request: Request) -> None:
        """The robots.txt of ``request``'s site was parsed: remember the sitemaps it names
        (an index may name them), and queue them if FRONTIER_SITEMAPS has "robots"."""
        scope = self.scope
        if scope is None or not self.config.sitemaps.urls:
            return
        named = robots_sitemaps(robotparser)
        scope.robots_read(request.url, named)
        if "robots" in self.config.sitemaps.urls:
            for url in named:
                if scope.allows(url):
                    self.enqueue(sitemap_request(url, self.sitemap_meta))

    def _follow(self, url: str, index: str) -> None:
        """The index ``index`` the frontier read names the sitemap ``url``."""
        if self.scope is not None and self.scope.allows(url, index=index):
            self.enqueue(sitemap_request(url, self.sitemap_meta))

    def request_sitemaps(self) -> None:
        """FRONTIER_SITEMAPS: queue the sitemaps and feeds it lists (robots.txt's come as
        each robots.txt is parsed)."""
        wanted = self.config.sitemaps.urls
        if not wanted:
            return
        scope = self.scope
        if scope is None:
            logger.warning("FRONTIER_SITEMAPS is set but FRONTIER_RECRAWL=%r keeps no page "
                           "history for the hints: no sitemap is read. Set JOBDIR (or use "
                           "Redis) with FRONTIER_RECRAWL='due', or 'continuous'.",
                           self.config.recrawl.mode)
            return
        if "robots" in wanted and not self.settings.getbool("ROBOTSTXT_OBEY"):
            logger.warning("FRONTIER_SITEMAPS='robots' reads the Sitemap: lines of the "
                           "robots.txt files Scrapy fetches, and ROBOTSTXT_OBEY is False: it "
                           "fetches none. Set ROBOTSTXT_OBEY = True, or list the sitemaps.")
        for url in wanted:
            if url != "robots" and scope.allows(url, listed=True):
                self.enqueue(sitemap_request(url, self.sitemap_meta))

    def feed_due(self, now: float) -> None:
        """Queue pages of the history that are due (bypassing the seen test)."""
        hooks = self.hooks
        assert hooks is not None
        if now < hooks.feed_at:
            return
        batch = self.config.recrawl.feed_batch
        try:
            records = self.port.take_due(batch)
        except HistoryStoreError as exc:
            self.run.state_failed(exc)
            return
        for record in records:
            request = hooks.request_for(record, self.spider)
            if request is not None:
                self.enqueue(request)
            if self.run.failed:
                return
        if len(records) < batch:
            # Nothing more is due for now: look again in a second (continuous mode).
            hooks.feed_at = now + 1.0

    def due_arrived(self) -> None:
        """The page history has due pages it did not have when last asked: feed them at the
        engine's next request, not after the feed's one-second pause."""
        if self.hooks is not None:
            self.hooks.feed_at = 0.0
        self.wake()

    def _write(self, write: Callable[..., None], *args: Any) -> None:
        """A page-history write: none once closed, and a failed one stops the crawl."""
        if self.run.closed:
            return
        try:
            write(*args)
        except StoreError as exc:
            self.run.state_failed(exc)

    def _count(self, key: str, n: int) -> None:
        if self.hooks is not None:
            counters = self.hooks.recrawler.counters
            counters[key] = counters.get(key, 0) + n
