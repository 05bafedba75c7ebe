"""Downloader middlewares: one times each fetch and reports its end to the frontier, one
holds the first request after a host's robots.txt until the host has rested, and one
answers robots.txt requests from the answers the frontier keeps."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_frontier.meta import (
    LEASE_META,
    ROBOTS_ORIGIN_META,
    ROBOTS_STALE_META,
    ROBOTS_START_META,
)
from scrapy_frontier.reactor.timer import call_later
from scrapy_frontier.scheduler.engine import running_scheduler
from scrapy_frontier.scheduler.robots_cache import robots_origin

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from scrapy.crawler import Crawler

    from scrapy_frontier.core.robots_cache import RobotsRecord
    from scrapy_frontier.scheduler.robots_cache import RobotsCache

logger = logging.getLogger("scrapy_frontier.downloadermiddlewares")


class FetchTimingMiddleware:
    """Stamps a request when it is sent and reports to the frontier when it ends.

    Install it near the downloader (order 950, the add-on does this) so that
    the time measured is the fetch itself, and every outcome -- response,
    exception, IgnoreRequest from robots.txt, timeout -- passes through it.
    Only requests that carry a frontier lease release a host; media-pipeline
    downloads bypass the scheduler and are ignored. robots.txt fetches (which
    Scrapy's RobotsTxtMiddleware makes for the first request to a site, while
    that request holds the host's lease) are timed too. The request that waited
    for them goes on only after the host's rest from the robots.txt fetch, so a
    site sees its robots.txt and its first page as polite as any two pages: it is
    queued again at the robots.txt step (:class:`RobotsHoldMiddleware`), or, if
    that step did not hold it, it waits here, having passed every other middleware
    once. A robots.txt fetch sent again (RetryMiddleware, after a 500 or a
    timeout) waits for the rest owed after the attempt before it: RetryMiddleware
    would send it at once, since these fetches never pass through the scheduler.

    It is also a shared frontier's last fence: a request whose lease may have lapsed (its
    Redis worker did not run for about FRONTIER_REDIS_LIVENESS) is not sent but given back
    (see Fetches.lapsed).
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FetchTimingMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider: Any = None
                        ) -> Request | Deferred[Request | None] | None:
        meta = request.meta
        if LEASE_META in meta:
            scheduler = running_scheduler(self.crawler)
            if scheduler is not None:
                lapsed: Request | None = scheduler.fetches.lapsed(request)
                if lapsed is not None:
                    return lapsed  # given back unfetched: dropped by enqueue_request
                wait = scheduler.robots.wait_in_place(request)
                if wait > 0:  # not held at the robots.txt step: it waits here, seen once
                    return _after(wait, partial(_send_if_held, scheduler, request))
                scheduler.fetches.sent(request)
        elif meta.get("dont_obey_robotstxt") and _is_robots_txt(request.url):
            scheduler = running_scheduler(self.crawler)
            if scheduler is not None:  # timed on the scheduler's clock, as every fetch
                wait = scheduler.robots.wait(request)
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
            # Taken: an attempt ends once, though a response that stands in for an error
            # (RobotsCacheMiddleware) passes here after the error did.
            started = request.meta.pop(ROBOTS_START_META, None)
            if started is not None:
                scheduler = running_scheduler(self.crawler)
                if scheduler is not None:
                    scheduler.robots.fetched(request, max(0.0, scheduler.clock() - started))
            return
        scheduler = running_scheduler(self.crawler)
        if scheduler is not None:
            scheduler.fetches.completed(request, response=response, exception=exception)


class RobotsHoldMiddleware:
    """Sends the first request of a host back to the frontier's queue when it comes
    right after its host's robots.txt fetch, until the host has rested.

    The add-on installs it just after Scrapy's RobotsTxtMiddleware (the robots.txt
    step), so that the request has not reached any project middleware yet: queued
    again, it reaches each of them once, and Scrapy's download stats count it once. No
    download slot waits while the host rests. If a middleware that is not Scrapy's own
    comes before this one, the request is not held here (that middleware would see it
    twice): it waits in the timing middleware instead.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        #: Whether requests may be held here; decided at the first one (None: not yet).
        self.holds: bool | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsHoldMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider: Any = None) -> Request | None:
        if LEASE_META not in request.meta or self.holds is False:
            return None
        scheduler = running_scheduler(self.crawler)
        if scheduler is None:
            return None
        if self.holds is None:
            self.holds = self._first_seen(scheduler.engine.middlewares_before(self))
            if not self.holds:
                return None
        # The fence first: a lease that lapsed during the robots.txt fetch goes back as is.
        again: Request | None = scheduler.fetches.lapsed(request) or scheduler.robots.hold(request)
        return again  # a copy back to the frontier until the host has rested, or None

    def _first_seen(self, before: list[Any] | None) -> bool:
        """Whether requests reach this middleware before any middleware of the project's."""
        if before is None:
            logger.info("The downloader middlewares cannot be listed: the first request "
                        "after each robots.txt waits for its host's rest in the downloader.")
            return False
        theirs = [type(m) for m in before if not type(m).__module__.startswith("scrapy.")]
        if theirs:
            logger.info(
                "%s sees requests before RobotsHoldMiddleware (the robots.txt step): the "
                "first request after each robots.txt waits for its host's rest in the "
                "downloader, holding one of CONCURRENT_REQUESTS, instead of in the queue. "
                "Order that middleware after RobotsTxtMiddleware to avoid this.",
                ", ".join(f"{c.__module__}.{c.__qualname__}" for c in theirs))
        return not theirs


class RobotsCacheMiddleware:
    """Answers Scrapy's robots.txt requests from the robots.txt the frontier keeps
    (``FRONTIER_ROBOTS_CACHE``), and keeps the answers the sites give.

    The add-on installs it just after Scrapy's RobotsTxtMiddleware (with
    ``ROBOTSTXT_OBEY``), before RetryMiddleware and RedirectMiddleware: a request is
    answered before anything else sees it (no fetch, so no rest owed, and the timing
    middleware times nothing), and what it keeps is the final answer, after redirects and
    retries. Scrapy's middleware parses a kept answer as a fetched one. A kept answer is a
    Response flagged ``cached``, with the stored status and body.

    A record no longer fresh goes with the request to the site: if the final answer says
    the robots.txt is unreachable (5xx, 429, or an error once retries are spent), the
    record, if younger than 30 days, answers instead (flagged ``cached`` and ``stale``), as
    RFC 9309 allows. Without one, the site's answer goes to Scrapy's middleware as it is.
    """

    FLAG = "cached"
    STALE_FLAG = "stale"

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsCacheMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider: Any = None
                        ) -> Coroutine[Any, Any, Response | None] | None:
        meta = request.meta
        # Only Scrapy's own robots.txt requests, each once: not a redirect's or a retry's.
        if (not meta.get("dont_obey_robotstxt") or LEASE_META in meta
                or "redirect_urls" in meta or "retry_times" in meta):
            return None
        cache = self._cache()
        origin = robots_origin(request.url) if cache is not None else None
        if cache is None or origin is None:
            return None
        meta[ROBOTS_ORIGIN_META] = origin
        return self._answer(cache, origin, request)

    async def _answer(self, cache: RobotsCache, origin: str, request: Request
                      ) -> Response | None:
        try:
            kept = await maybe_deferred_to_future(cache.lookup(origin))
        except Exception:  # noqa: BLE001 -- a store that fails: the site answers
            logger.debug("robots.txt of %s: the kept answer could not be read", origin,
                         exc_info=True)
            return None
        if kept is None:
            return None  # fetched from the site
        if not kept.fresh:
            request.meta[ROBOTS_STALE_META] = kept.record  # fetched; it may stand in
            return None
        return self._kept(request, kept.record)

    def process_response(self, request: Request, response: Response, spider: Any = None
                         ) -> Response:
        origin = request.meta.get(ROBOTS_ORIGIN_META)
        if origin is None or self.FLAG in response.flags:
            return response
        cache = self._cache()
        if cache is None:
            return response
        stale = cache.stand_in(origin, request.meta.get(ROBOTS_STALE_META), response.status)
        if stale is not None:
            return self._kept(request, stale, self.STALE_FLAG)
        cache.keep(origin, response.status, response.body)
        return response

    def process_exception(self, request: Request, exception: Exception, spider: Any = None
                          ) -> Response | None:
        """No answer once retries are spent: the record kept, if it may stand in."""
        meta = request.meta
        origin, kept = meta.get(ROBOTS_ORIGIN_META), meta.get(ROBOTS_STALE_META)
        if origin is None or kept is None or isinstance(exception, IgnoreRequest):
            return None  # an ignored request is the project's choice, not the site's answer
        cache = self._cache()
        stale = None if cache is None else cache.stand_in(origin, kept, None)
        return None if stale is None else self._kept(request, stale, self.STALE_FLAG)

    def _kept(self, request: Request, record: RobotsRecord, *flags: str) -> Response:
        return Response(request.url, status=record.status, body=record.body,
                        request=request, flags=[self.FLAG, *flags])

    def _cache(self) -> RobotsCache | None:
        scheduler = running_scheduler(self.crawler)
        return None if scheduler is None else scheduler.robots.cache


def _stamp(meta: dict[str, Any], now: float) -> None:
    meta[ROBOTS_START_META] = now


def _after(seconds: float, then: Callable[[], Request | None]) -> Deferred[Request | None]:
    """A Deferred that fires ``seconds`` from now with what ``then`` returns: None, and the
    download goes on then (the reactor is never blocked), or a request given back."""
    d: Deferred[Request | None] = Deferred()

    def fire() -> None:
        try:
            result = then()
        except Exception:  # noqa: BLE001 -- the download fails, its slot is not held
            d.errback()
        else:
            d.callback(result)

    call_later(seconds, fire)
    return d


def _send_if_held(scheduler: Any, request: Request) -> Request | None:
    """After a wait in place: the fence again (the lease may have lapsed meanwhile), then
    the fetch starts."""
    lapsed: Request | None = scheduler.fetches.lapsed(request)
    if lapsed is None:
        scheduler.fetches.sent(request)
    return lapsed


def _is_robots_txt(url: str) -> bool:
    return url.partition("?")[0].endswith("/robots.txt")
