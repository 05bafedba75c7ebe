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

from scrapy_frontier.codec import callback_name
from scrapy_frontier.core.recrawl import Recrawler, RecrawlSettings
from scrapy_frontier.errors import UntrustedRow
from scrapy_frontier.meta import RECRAWL_META
from scrapy_frontier.scheduler.replay import RequestReplay, replayable
from scrapy_frontier.validators import add_validators

if TYPE_CHECKING:
    from scrapy.spiders import Spider

    from scrapy_frontier.codec import RowTrust
    from scrapy_frontier.core.history import HistoryStore, PageRecord

logger = logging.getLogger("scrapy_frontier.recrawl")


class RecrawlHooks:
    def __init__(self, recrawler: Recrawler, trust: RowTrust | None = None) -> None:
        self.recrawler = recrawler
        #: How the backend's stored requests are sealed and read (codec.RowTrust).
        self.trust = trust
        #: When the scheduler next asks the history for due pages (its clock).
        self.feed_at = 0.0
        self._missing_callbacks: set[str] = set()
        self._published: dict[str, float] = {}
        self._replay: RequestReplay | None = None

    @classmethod
    def with_store(cls, settings: RecrawlSettings, store: HistoryStore,
                   trust: RowTrust | None = None) -> RecrawlHooks:
        return cls(Recrawler(settings, store, quality=settings.quality_callable), trust)

    @property
    def settings(self) -> RecrawlSettings:
        return self.recrawler.settings

    def pending_due(self) -> bool:
        """``due`` mode: pages due at the start are still to be handed out."""
        rc = self.recrawler
        return rc.settings.mode == "due" and not rc.exhausted

    def keeps(self, request: Request) -> bool:
        """Whether ``request``'s page gets a history (unsafe methods only if opted in)."""
        if replayable(request):
            return True
        self._count("recrawl/unsafe_not_kept")
        return False

    def snapshot(self, request: Request, spider: Spider | None) -> bytes | None:
        """``request`` encoded for its page's record, to replay on a recrawl."""
        return None if spider is None else self._replay_for(spider).snapshot(request)

    def _replay_for(self, spider: Spider) -> RequestReplay:
        if self._replay is None:
            self._replay = RequestReplay(spider, self.trust)
        return self._replay

    def request_for(self, record: PageRecord, spider: Spider | None) -> Request | None:
        """The recrawl request of a due page: the kept request with this visit's validators
        and priority; None if it cannot be rebuilt (said once). No I/O."""
        if record.request is not None and spider is not None:
            kept = self._replay_for(spider).rebuild(record.request)
            if kept is None:
                return None
            request = kept.replace(priority=self.recrawler.priority(record), dont_filter=True,
                                   meta={**kept.meta, RECRAWL_META: True})
            self.add_validators(request, record)
            return request
        return self._plain_request(record, spider)

    def _plain_request(self, record: PageRecord, spider: Spider | None) -> Request:
        """A record without a kept request (too large, or not encodable: see
        scheduler/replay.py): a GET of its URL with its callback and depth."""
        callback = None
        if record.callback and spider is not None:
            try:
                callback_name(spider, record.callback)
            except UntrustedRow:
                callback = None  # a dunder or a scrapy.Spider member: never a callback
            else:
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
            self._count("recrawl/conditional")

    def _count(self, key: str) -> None:
        counters = self.recrawler.counters
        counters[key] = counters.get(key, 0) + 1

    def inlink(self, fp: int | None) -> None:
        if fp is not None and self.recrawler.settings.quality == "inlinks":
            self.recrawler.note_inlink(fp)

    def publish_stats(self, stats: Any) -> None:
        # A copy: the Redis driver's I/O thread may be counting meanwhile.
        counters = list(self.recrawler.counters.items())
        if self._replay is not None:
            counters += list(self._replay.counters.items())
        for key, value in counters:
            delta = value - self._published.get(key, 0)
            if delta:
                stats.inc_value(f"frontier/{key}", delta)
                self._published[key] = value
        quarantined = self.recrawler.store.quarantined
        if quarantined:
            stats.set_value("frontier/history/quarantined", quarantined)
        trust = self.recrawler.trust
        if trust.hosts:
            stats.set_value("frontier/signals/hosts_trusted", trust.counts["trusted"])
            stats.set_value("frontier/signals/hosts_distrusted", trust.counts["distrusted"])
