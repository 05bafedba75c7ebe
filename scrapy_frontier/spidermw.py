"""Spider middleware that tells the frontier when a response's links are queued."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class FrontierSpiderMiddleware:
    """Reports when the spider has consumed a response's callback output.

    With a durable frontier (JOBDIR or FRONTIER_PATH) a fetched URL is only
    forgotten once the requests its page yielded are queued, so a crash at any
    moment re-fetches the page rather than losing its links. Install it with a
    low order (the add-on uses 10) so that it sees the output last, right
    before Scrapy queues it, and sees the exceptions of non-2xx responses.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierSpiderMiddleware:
        return cls(crawler)

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Any = None
    ) -> Iterator[Any]:
        try:
            yield from result
        finally:
            self._done(response)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        try:
            async for item in result:
                yield item
        finally:
            self._done(response)

    def process_spider_exception(
        self, response: Response, exception: BaseException, spider: Any = None
    ) -> None:
        self._done(response)

    def _done(self, response: Response) -> None:
        request = response.request
        if request is None:
            return
        slot = getattr(self.crawler.engine, "_slot", None)
        processed = getattr(getattr(slot, "scheduler", None), "response_processed", None)
        if processed is not None:
            processed(request)
