"""The spider middleware that keeps each page's change history (incremental recrawl).

Installed by the add-on at order 40, below HttpErrorMiddleware (50), so it sees
every response -- 304s and error statuses included -- before anything filters
them. For each response it reports to the scheduler's
:class:`~scrapy_frontier.core.recrawl.Recrawler`:

* 2xx: an exact digest of the body (BLAKE2b-128) and a way to make the visible
  text (HTML without tags, scripts and styles; plain text as is; none for binary
  bodies, which then compare by digest only), which the recrawler calls only when
  it needs a simhash (a new or changed body, not in exact mode), plus ETag and
  Last-Modified for the next conditional GET;
* 304: a visit with no change;
* 404 / 410: the page is retired; other 4xx / 5xx: a failed visit.

A 304 is an unchanged page, not a failure. The middleware sends
:data:`scrapy_frontier.signals.page_unchanged` and lets the response past Scrapy's
HttpErrorMiddleware to a callback that puts the spider's request back on it and returns
nothing (:class:`Unchanged`): no errback runs, no callback of the spider either (it read the
page on an earlier visit), and no component counts an error. ``FRONTIER_RECRAWL_PASS_304``
passes the 304 on to the spider's callback instead. They are counted in
``frontier/recrawl/not_modified``.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy.http import HtmlResponse, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError

from scrapy_frontier.core.recrawl import Visit
from scrapy_frontier.meta import SITEMAP_META
from scrapy_frontier.scheduler.change_signals import download_cut
from scrapy_frontier.scheduler.engine import running_scheduler
from scrapy_frontier.signals import page_unchanged

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class SitemapRead(HttpError):
    """A sitemap or feed the frontier requested itself (FRONTIER_SITEMAPS): read for its
    change claims, and not passed to the spider, which did not ask for it."""


#: The logger of Scrapy's HttpErrorMiddleware ("Ignoring response <200 ...>").
HTTPERROR_LOGGER = "scrapy.spidermiddlewares.httperror"


class QuietSitemapRead(logging.Filter):
    """Drops HttpErrorMiddleware's line for a sitemap the frontier read itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        response = args.get("response") if isinstance(args, dict) else None
        request = getattr(response, "request", None)
        return not (request is not None and request.meta.get(SITEMAP_META))


#: The logger of Scrapy's scraper ("Error downloading <GET ...>", with a traceback).
SCRAPER_LOGGER = "scrapy.core.scraper"


class QuietSitemapCut(logging.Filter):
    """Drops the scraper's "Error downloading" of a sitemap the frontier requested itself and
    cut at its size limit or FRONTIER_SITEMAP_TIMEOUT: the frontier logs those once per host
    and counts them (frontier/sitemaps/refused/too_large, frontier/sitemaps/timeouts)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        request = args.get("request") if isinstance(args, dict) else None
        if request is None or not getattr(request, "meta", {}).get(SITEMAP_META):
            return True
        error = record.exc_info[1] if record.exc_info else None
        return error is None or download_cut(error) is None


class Unchanged:
    """The callback of a 304 let past HttpErrorMiddleware: puts the spider's request back on
    the response, then calls the spider's callback (``FRONTIER_RECRAWL_PASS_304``) or returns
    nothing."""

    def __init__(self, request: Request, callback: Callable[..., Any] | None) -> None:
        self.request = request
        self.callback = callback

    def __call__(self, response: Response, **kwargs: Any) -> Any:
        response.request = self.request
        return () if self.callback is None else self.callback(response, **kwargs)


class RecrawlMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._quiet = QuietSitemapRead()
        self._quiet_cut = QuietSitemapCut()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlMiddleware:
        from scrapy import signals

        middleware = cls(crawler)
        crawler.signals.connect(middleware._opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware._closed, signal=signals.spider_closed)
        return middleware

    def _opened(self, spider: Any) -> None:
        feed = getattr(running_scheduler(self.crawler), "history_feed", None)
        if feed is not None and feed.recrawler is not None:
            logging.getLogger(HTTPERROR_LOGGER).addFilter(self._quiet)
            logging.getLogger(SCRAPER_LOGGER).addFilter(self._quiet_cut)

    def _closed(self, spider: Any) -> None:
        logging.getLogger(HTTPERROR_LOGGER).removeFilter(self._quiet)
        logging.getLogger(SCRAPER_LOGGER).removeFilter(self._quiet_cut)

    def process_spider_input(self, response: Response, spider: Any = None) -> None:
        # The history side of a frontier scheduler (not there with another scheduler).
        feed = getattr(running_scheduler(self.crawler), "history_feed", None)
        if feed is None:
            return
        request = response.request
        if request is None:
            return
        text: str | None = None
        traps = feed.traps
        if (traps is not None and 200 <= response.status < 300 and not feed.run.closed
                and traps.wants(request)):
            text = visible_text(response)
            if text is not None:
                traps.page(request, text)
        if feed.recrawler is None:
            return
        visit = visit_of(response, request)
        if text is not None:
            visit.text = text  # made once for both
        feed.page_visited(request, visit)
        owned = bool(request.meta.get(SITEMAP_META))
        if 200 <= response.status < 300:
            feed.signals_received(request.url, response.body, owned=owned)
        if owned:
            raise SitemapRead(response, "Read by the frontier for its change claims")
        if response.status == 304:
            self._unchanged(response, request, feed.recrawler.settings.pass_304)

    def _unchanged(self, response: Response, request: Request, pass_304: bool) -> None:
        """An unchanged page: announced, then past HttpErrorMiddleware (which would take the
        304 for an error and call the errback) to :class:`Unchanged`."""
        spider: Any = self.crawler.spider  # set: a response is being processed
        self.crawler.signals.send_catch_log(page_unchanged, request=request,
                                            response=response, spider=spider)
        callback = (request.callback or spider._parse) if pass_304 else None
        response.request = request.replace(
            callback=Unchanged(request, callback),
            meta={**request.meta, "handle_httpstatus_all": True})


def visit_of(response: Response, request: Request) -> Visit:
    status = response.status
    visit = Visit(status=status, depth=int(request.meta.get("depth", 0) or 0))
    callback = request.callback
    name = getattr(callback, "__name__", None)
    if name is not None and getattr(callback, "__self__", None) is not None:
        visit.callback = name  # a spider method: it can be looked up again next run
    if 200 <= status < 300:
        body = response.body
        visit.digest = hashlib.blake2b(body, digest_size=16).hexdigest()
        visit.size = len(body)
        # Made only if the history needs a simhash (a new or changed body): the text of a
        # large page takes milliseconds, and most recrawled pages are byte-identical.
        visit.text_source = partial(visible_text, response)
        headers = response.headers
        etag = headers.get(b"ETag")
        modified = headers.get(b"Last-Modified")
        visit.etag = None if etag is None else etag.decode("latin-1")
        visit.last_modified = None if modified is None else modified.decode("latin-1")
    return visit


#: Elements whose content no reader sees.
_HIDDEN = re.compile(r"<(script|style|noscript)\b.*?</\1\s*>", re.S | re.I)
#: Any tag (and comment): replaced by a space, so words on either side stay apart.
_TAG = re.compile(r"<[^>]*>")


def visible_text(response: Response) -> str | None:
    """The text a reader sees: HTML without markup, scripts and styles; None for binary.

    Two compiled regular expressions with a constant replacement (no Python call per
    tag, unlike w3lib's remove_tags): a quarter of the time on a typical page."""
    if isinstance(response, HtmlResponse):
        return html.unescape(_TAG.sub(" ", _HIDDEN.sub(" ", response.text)))
    if isinstance(response, TextResponse):
        return response.text
    return None
