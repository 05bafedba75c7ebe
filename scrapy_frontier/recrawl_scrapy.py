"""The scheduler's side of incremental recrawl: requests in, requests out.

:class:`RecrawlHooks` turns the :class:`~scrapy_frontier.recrawl.Recrawler`'s
records into Scrapy requests (with If-None-Match / If-Modified-Since and a
change-aware priority) and Scrapy events into visits. The scheduler owns one
when ``FRONTIER_RECRAWL`` is not ``off``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.misc import load_object

from scrapy_frontier.dupefilter import request_fp64
from scrapy_frontier.history import HistoryStore, MemoryHistoryStore, PageRecord
from scrapy_frontier.history_sqlite import STORE_NAME, SQLiteHistoryStore
from scrapy_frontier.recrawl import Recrawler, RecrawlSettings, Visit

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

logger = logging.getLogger("scrapy_frontier.recrawl")

#: ``Request.meta`` key: the request comes from the page history (skips the due gate).
RECRAWL_META = "frontier_recrawl"
#: ``Request.meta`` key: fetch even if the page is not due (or retired).
FORCE_META = "frontier_force"
#: ``Request.meta`` key: an integer added to the request's priority (see FRONTIER_PRIORITY_RULES).
BOOST_META = "frontier_priority_boost"


class RecrawlHooks:
    def __init__(self, crawler: Crawler, recrawler: Recrawler) -> None:
        self.crawler = crawler
        self.recrawler = recrawler
        self.fingerprinter = crawler.request_fingerprinter
        self._missing_callbacks: set[str] = set()
        self._published: dict[str, float] = {}

    @classmethod
    def open(
        cls, crawler: Crawler, settings: RecrawlSettings, state_dir: str | None
    ) -> RecrawlHooks:
        store: HistoryStore
        if state_dir:
            path = Path(state_dir) / STORE_NAME
            store = SQLiteHistoryStore(path)
            logger.info("Page history: %s (%d pages), recrawl mode %r", path, len(store),
                        settings.mode)
        else:
            store = MemoryHistoryStore()
            if settings.mode == "due":
                logger.info(
                    "FRONTIER_RECRAWL='due' keeps the page history in memory for this run only; "
                    "set JOBDIR or FRONTIER_PATH to recrawl incrementally across runs"
                )
        return cls.with_store(crawler, settings, store)

    @classmethod
    def with_store(
        cls, crawler: Crawler, settings: RecrawlSettings, store: HistoryStore
    ) -> RecrawlHooks:
        quality = settings.quality_callable
        if quality is None and settings.quality not in ("depth", "inlinks"):
            quality = load_object(settings.quality)
        return cls(crawler, Recrawler(settings, store, quality=quality))

    # -- requests going in ---------------------------------------------------------------

    def fp(self, request: Request) -> int:
        return request_fp64(self.fingerprinter, request)

    def gate(self, request: Request) -> bool:
        """For a request that skipped the seen test (``dont_filter``): may it go now?"""
        meta = request.meta
        if meta.get(RECRAWL_META) or meta.get(FORCE_META):
            return True
        admitted, record = self.recrawler.admit(self.fp(request))
        if admitted and record is not None:
            self._validators(request, record)
        return admitted

    def due_requests(self, limit: int, spider: Spider | None) -> list[Request]:
        return [self.request_for(record, spider) for record in self.recrawler.take_due(limit)]

    def request_for(self, record: PageRecord, spider: Spider | None) -> Request:
        """The recrawl request of a due page (no I/O: safe on the reactor thread)."""
        callback = None
        if record.callback and spider is not None:
            callback = getattr(spider, record.callback, None)
            if callback is None and record.callback not in self._missing_callbacks:
                self._missing_callbacks.add(record.callback)
                logger.warning(
                    "The page history names callback %r, which the spider no longer has; "
                    "its pages are recrawled with the default callback (parse)",
                    record.callback,
                )
        request = Request(
            record.url,
            callback=callback,
            priority=self.recrawler.priority(record),
            dont_filter=True,
            meta={RECRAWL_META: True, "depth": record.depth},
        )
        self._validators(request, record)
        return request

    def _validators(self, request: Request, record: PageRecord) -> None:
        if add_validators(request, record.etag, record.last_modified):
            self.recrawler.counters["recrawl/conditional"] = (
                self.recrawler.counters.get("recrawl/conditional", 0) + 1
            )

    # -- what happened -------------------------------------------------------------------

    def page_visited(self, request: Request, visit: Visit) -> None:
        self.recrawler.record(self.fp(request), request.url, visit)

    def fetch_failed(self, request: Request, exception: BaseException) -> None:
        if isinstance(exception, IgnoreRequest):
            return  # robots.txt or a middleware said no: not the page's fault
        self.recrawler.record(self.fp(request), request.url, None)

    def inlink(self, fp: int | None) -> None:
        if fp is not None and self.recrawler.settings.quality == "inlinks":
            self.recrawler.note_inlink(fp)

    # -- stats and closing ---------------------------------------------------------------

    def publish_stats(self, stats: Any) -> None:
        # A copy: the Redis scheduler's I/O thread may be counting meanwhile.
        for key, value in list(self.recrawler.counters.items()):
            delta = value - self._published.get(key, 0)
            if delta:
                stats.inc_value(f"frontier/{key}", delta)
                self._published[key] = value

    def close(self, stats: Any) -> None:
        self.recrawler.close()
        self.publish_stats(stats)


def add_validators(request: Request, etag: str | None, last_modified: str | None) -> bool:
    """If-None-Match / If-Modified-Since from a page's last full response; True if any."""
    headers = request.headers
    added = False
    if etag and b"If-None-Match" not in headers:
        headers[b"If-None-Match"] = etag
        added = True
    if last_modified and b"If-Modified-Since" not in headers:
        headers[b"If-Modified-Since"] = last_modified
        added = True
    return added
