"""Downloader middleware that times each fetch and reports its end to the frontier."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import Request
from twisted.internet.defer import Deferred

from scrapy_frontier.meta import LEASE_META, ROBOTS_START_META
from scrapy_frontier.scheduler.engine import running_scheduler
from scrapy_frontier.scheduler.timer import call_later

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class FetchTimingMiddleware:
    """Stamps a request when it is sent and reports to the frontier when it ends.

    Install it near the downloader (order 950, the add-on does this) so that
    the time measured is the fetch itself, and every outcome -- response,
    exception, IgnoreRequest from robots.txt, timeout -- passes through it.
    Only requests that carry a frontier lease release a host; media-pipeline
    downloads bypass the scheduler and are ignored. robots.txt fetches (which
    Scrapy's RobotsTxtMiddleware makes for the first request to a site, while
    that request holds the host's lease) are timed too: the request that
    waited for them is sent only after the host's rest from the robots.txt
    fetch, so a site sees its robots.txt and its first page as polite as any
    two pages. A robots.txt fetch sent again (RetryMiddleware, after a 500 or a
    timeout) waits for the rest owed after the attempt before it: RetryMiddleware
    would send it at once, since these fetches never pass through the scheduler.

    It is also a shared frontier's last fence: a request whose lease may have lapsed (its
    Redis worker did not run for about FRONTIER_REDIS_LIVENESS) is not sent but given back
    (see FrontierScheduler.lease_lapsed).
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FetchTimingMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider: Any = None
                        ) -> Request | Deferred[None] | None:
        meta = request.meta
        if LEASE_META in meta:
            scheduler = running_scheduler(self.crawler)
            if scheduler is not None:
                lapsed: Request | None = scheduler.lease_lapsed(request)
                if lapsed is not None:
                    return lapsed  # given back unfetched: dropped by enqueue_request
                again: Request | None = scheduler.robots_hold(request)
                if again is not None:
                    return again  # back to the frontier until the host has rested
                scheduler.fetch_sent(request)
        elif meta.get("dont_obey_robotstxt") and _is_robots_txt(request.url):
            scheduler = running_scheduler(self.crawler)
            if scheduler is not None:  # timed on the scheduler's clock, as every fetch
                wait = scheduler.robots_wait(request)
                if wait > 0:
                    return _after(wait, lambda: _stamp(meta, scheduler.clock()))
                meta[ROBOTS_START_META] = scheduler.clock()
        return None

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
            started = request.meta.get(ROBOTS_START_META)
            if started is not None:
                scheduler = running_scheduler(self.crawler)
                if scheduler is not None:
                    scheduler.robots_fetched(request, max(0.0, scheduler.clock() - started))
            return
        scheduler = running_scheduler(self.crawler)
        finished = getattr(scheduler, "fetch_finished", None)
        if finished is not None:
            finished(request, response=response, exception=exception)


def _stamp(meta: dict[str, Any], now: float) -> None:
    meta[ROBOTS_START_META] = now


def _after(seconds: float, then: Callable[[], None]) -> Deferred[None]:
    """A Deferred that fires with None ``seconds`` from now, once ``then`` ran; the download
    goes on then (the reactor is never blocked)."""
    d: Deferred[None] = Deferred()

    def fire() -> None:
        then()
        d.callback(None)

    call_later(seconds, fire)
    return d


def _is_robots_txt(url: str) -> bool:
    return url.partition("?")[0].endswith("/robots.txt")
