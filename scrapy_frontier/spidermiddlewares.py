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

A 304 is not passed to the callback unless ``FRONTIER_RECRAWL_PASS_304`` is set:
it raises :class:`NotModified` (an ``HttpError``), which Scrapy's
HttpErrorMiddleware ignores like any unhandled status (the request's errback,
if any, sees it). HttpErrorMiddleware's INFO line for each ignored response is
filtered out for these 304s (:class:`QuietNotModified`): they are counted in
``frontier/recrawl/not_modified`` instead, and a recrawl answers many of them.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy.http import HtmlResponse, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError

from scrapy_frontier.core.recrawl import Visit
from scrapy_frontier.meta import SITEMAP_META
from scrapy_frontier.scheduler.engine import running_scheduler

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

class NotModified(HttpError):
    """A 304 answer to a conditional recrawl: the page did not change."""


class SitemapRead(HttpError):
    """A sitemap or feed the frontier requested itself (FRONTIER_SITEMAPS): read for its
    change claims, and not passed to the spider, which did not ask for it."""


#: The logger of Scrapy's HttpErrorMiddleware ("Ignoring response <304 ...>").
HTTPERROR_LOGGER = "scrapy.spidermiddlewares.httperror"


class QuietNotModified(logging.Filter):
    """Drops HttpErrorMiddleware's line for a 304 this middleware turned into NotModified
    (unless 304s go to the callbacks), and for a sitemap the frontier read itself."""

    def __init__(self) -> None:
        super().__init__()
        self.not_modified = True

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        response = args.get("response") if isinstance(args, dict) else None
        if self.not_modified and getattr(response, "status", None) == 304:
            return False
        request = getattr(response, "request", None)
        return not (request is not None and request.meta.get(SITEMAP_META))


class RecrawlMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._quiet = QuietNotModified()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlMiddleware:
        from scrapy import signals

        middleware = cls(crawler)
        crawler.signals.connect(middleware._opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware._closed, signal=signals.spider_closed)
        return middleware

    def _opened(self, spider: Any) -> None:
        scheduler = running_scheduler(self.crawler)
        recrawler = getattr(scheduler, "recrawler", None)
        if recrawler is not None:
            self._quiet.not_modified = not recrawler.settings.pass_304
            logging.getLogger(HTTPERROR_LOGGER).addFilter(self._quiet)

    def _closed(self, spider: Any) -> None:
        logging.getLogger(HTTPERROR_LOGGER).removeFilter(self._quiet)

    def process_spider_input(self, response: Response, spider: Any = None) -> None:
        scheduler = running_scheduler(self.crawler)
        record = getattr(scheduler, "page_visited", None)
        if record is None or getattr(scheduler, "recrawler", None) is None:
            return
        request = response.request
        if request is None:
            return
        record(request, visit_of(response, request))
        owned = bool(request.meta.get(SITEMAP_META))
        if 200 <= response.status < 300:
            scheduler.signals_received(request.url, response.body, owned=owned)
        if owned:
            raise SitemapRead(response, "Read by the frontier for its change claims")
        if response.status == 304 and not scheduler.recrawler.settings.pass_304:
            raise NotModified(response, "Not modified since the last visit")


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
