"""The scheduler's side of incremental recrawl: page records in, Scrapy requests out.

:class:`RecrawlHooks` turns the :class:`~scrapy_frontier.core.recrawl.Recrawler`'s
records into Scrapy requests (with If-None-Match / If-Modified-Since and a
change-aware priority). The scheduler owns one when ``FRONTIER_RECRAWL`` is not
``off``; the driver keeps the records (:meth:`Driver.open_history`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request

from scrapy_frontier.core.recrawl import Recrawler, RecrawlSettings
from scrapy_frontier.meta import RECRAWL_META

if TYPE_CHECKING:
    from scrapy.spiders import Spider

    from scrapy_frontier.core.history import HistoryStore, PageRecord

logger = logging.getLogger("scrapy_frontier.recrawl")


class RecrawlHooks:
    def __init__(self, recrawler: Recrawler) -> None:
        self.recrawler = recrawler
        self._missing_callbacks: set[str] = set()
        self._published: dict[str, float] = {}

    @classmethod
    def with_store(cls, settings: RecrawlSettings, store: HistoryStore) -> RecrawlHooks:
        return cls(Recrawler(settings, store, quality=settings.quality_callable))

    @property
    def settings(self) -> RecrawlSettings:
        return self.recrawler.settings

    def pending_due(self) -> bool:
        """``due`` mode: pages due at the start are still to be handed out."""
        rc = self.recrawler
        return rc.settings.mode == "due" and not rc.exhausted

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
        self.add_validators(request, record)
        return request

    def add_validators(self, request: Request, record: PageRecord) -> None:
        if add_validators(request, record.etag, record.last_modified):
            self.recrawler.counters["recrawl/conditional"] = (
                self.recrawler.counters.get("recrawl/conditional", 0) + 1
            )

    def inlink(self, fp: int | None) -> None:
        if fp is not None and self.recrawler.settings.quality == "inlinks":
            self.recrawler.note_inlink(fp)

    def publish_stats(self, stats: Any) -> None:
        # A copy: the Redis driver's I/O thread may be counting meanwhile.
        for key, value in list(self.recrawler.counters.items()):
            delta = value - self._published.get(key, 0)
            if delta:
                stats.inc_value(f"frontier/{key}", delta)
                self._published[key] = value


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
