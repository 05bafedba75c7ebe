"""Downloader middleware that times each fetch and reports its end to the frontier."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrapy import Request

from scrapy_frontier.scheduler import FETCH_START_META, LEASE_META

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class FetchTimingMiddleware:
    """Stamps a request when it is sent and reports to the frontier when it ends.

    Install it near the downloader (order 950, the add-on does this) so that
    the time measured is the fetch itself, and every outcome -- response,
    exception, IgnoreRequest from robots.txt, timeout -- passes through it.
    Only requests that carry a frontier lease release a host: robots.txt and
    media-pipeline downloads bypass the scheduler and are ignored.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FetchTimingMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider: Any = None) -> None:
        if LEASE_META in request.meta:
            request.meta[FETCH_START_META] = time.monotonic()

    def process_response(
        self, request: Request, response: Response, spider: Any = None
    ) -> Response:
        self._report(request, response=response)
        return response

    def process_exception(
        self, request: Request, exception: Exception, spider: Any = None
    ) -> None:
        self._report(request, exception=exception)

    def _report(
        self,
        request: Request,
        response: Response | None = None,
        exception: Exception | None = None,
    ) -> None:
        if LEASE_META not in request.meta:
            return
        scheduler = _scheduler(self.crawler)
        finished = getattr(scheduler, "fetch_finished", None)
        if finished is not None:
            finished(request, response=response, exception=exception)


def _scheduler(crawler: Crawler) -> Any:
    engine = crawler.engine
    slot = getattr(engine, "_slot", None)
    return getattr(slot, "scheduler", None)
