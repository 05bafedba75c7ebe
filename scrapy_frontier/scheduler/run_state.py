"""Whether this run is open, closed, or stopping after a failure, and how it stops: once,
cleanly, when the frontier's state cannot be kept -- and, under ``scrapy crawl``, with exit
code 1, so that cron and CI see the failure (Scrapy exits 0 after any crawl that closed)."""

from __future__ import annotations

import logging
from typing import Any

from scrapy_frontier.errors import FeedWriteError, HistoryStoreError, RedisFrontierError

logger = logging.getLogger("scrapy_frontier.scheduler")


class RunState:
    def __init__(self, engine: Any, stats: Any) -> None:
        self.engine = engine  # scheduler.engine.EngineAdapter
        self.stats = stats
        #: The scheduler is closed (or not opened yet).
        self.closed = False
        #: The crawl is stopping after a failure: nothing more is handed out.
        self.failed = False

    def count(self, exc: BaseException) -> str:
        """Count a state error in its stat; the finish reason it stops the crawl with."""
        if isinstance(exc, HistoryStoreError):
            self.stats.inc_value("frontier/history/errors")
            return "frontier_history_error"
        if isinstance(exc, FeedWriteError):
            self.stats.inc_value("frontier/feeds/errors")
            return "frontier_feed_error"
        if isinstance(exc, RedisFrontierError):
            self.stats.inc_value("frontier/redis/errors")
            return "frontier_redis_error"
        self.stats.inc_value("frontier/store/errors")
        return "frontier_store_error"

    def state_failed(self, exc: BaseException) -> None:
        """The state cannot be read or written: stop the crawl cleanly.

        Everything since the last good write is still in memory and retried at
        close; what cannot be written is re-fetched on the next run from the last
        durable state (acknowledgements are never written before the URLs found
        with them), so nothing is lost.
        """
        reason = self.count(exc)
        if not self.failed:
            self._stop(reason, exc)

    def fail(self, reason: str, exc: BaseException) -> None:
        """A driver's failure: stop the crawl with finish ``reason`` (not once closed)."""
        if not (self.failed or self.closed):
            self._stop(reason, exc)

    def close_failed(self, exc: BaseException) -> None:
        """What was pending could not be written at close: the crawl ends (whatever its
        finish reason) with that error; the next run fetches it again."""
        self.count(exc)
        logger.error("%s", exc)
        self.engine.fail_command()

    def _stop(self, reason: str, exc: BaseException) -> None:
        self.failed = True
        logger.error("%s The crawl is stopping.", exc)
        self.engine.fail_command()
        self.engine.close_spider(reason)
