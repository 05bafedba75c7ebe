"""The request a recrawl replays: the one the spider made, kept with the page's history.

A page's record keeps its request encoded like the queue's requests
(:func:`scrapy_frontier.codec.request_codec`): URL, method, headers, body, meta,
``cb_kwargs``, callback and errback by name, flags, priority, cookies and encoding.
A recrawl rebuilds it, so that a ``CrawlSpider`` rule, a callback's keyword arguments or a
meta chain come back as in the first run. Only the validators (If-None-Match,
If-Modified-Since) and the priority change.

What is not kept:

* the frontier's own meta keys and the keys Scrapy's components write while a request
  is fetched (redirects, retries, latency, the start-request mark);
* the headers downloader middlewares add to every request (User-Agent, Accept*,
  Cookie, Authorization, Proxy-Authorization): they add them again on the replay, with
  the project's settings of the day, and credentials never reach the history;
* requests that are not safe to repeat (any method but GET and HEAD), unless the
  request sets ``meta["frontier_recrawl_unsafe"] = True``: their pages get no history,
  as Scrapy's dupe filter would drop the same request in a later run;
* an encoded request larger than :data:`MAX_REQUEST_BYTES` (a big body): the page is
  then recrawled as a plain GET of its URL with its callback, and a warning says so.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_frontier.codec import Codec, RowTrust, request_codec
from scrapy_frontier.errors import StoreError
from scrapy_frontier.hostkey import url_host_key_or_none
from scrapy_frontier.meta import SITEMAP_META, START_META, UNSAFE_META

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger("scrapy_frontier.recrawl")

#: Methods a recrawl repeats without being asked: RFC 9110's safe methods Scrapy sends.
SAFE_METHODS = frozenset({"GET", "HEAD"})
#: An encoded request above this size is not kept (bodies are the usual cause).
MAX_REQUEST_BYTES = 16 * 1024

#: Meta keys Scrapy's own components write during a fetch; a replay starts without them.
TRANSIENT_META = frozenset({
    START_META, "download_latency", "redirect_times", "redirect_ttl", "redirect_urls",
    "redirect_reasons", "retry_times", "_auth_proxy", "_scheme_proxy", "_dont_cache",
    "cached_response",
})
#: Headers the downloader middlewares (and the frontier's validators) add to every request.
ADDED_HEADERS = frozenset({
    b"User-Agent", b"Accept", b"Accept-Language", b"Accept-Encoding", b"Cookie",
    b"Authorization", b"Proxy-Authorization", b"If-None-Match", b"If-Modified-Since",
})


def replayable(request: Request) -> bool:
    """True for a request a recrawl may repeat: a safe method, or an explicit opt-in."""
    return request.method in SAFE_METHODS or bool(request.meta.get(UNSAFE_META))


class RequestReplay:
    """Encodes a fetched request for the history, and rebuilds it for a recrawl."""

    def __init__(self, spider: Any, trust: RowTrust | None = None) -> None:
        self._codec: Codec[Any] = request_codec(spider, trust=trust)
        self._warned: set[str] = set()
        self.counters: dict[str, int] = {}

    def snapshot(self, request: Request) -> bytes | None:
        """The request as the spider made it, encoded; None if it cannot be kept."""
        # A request the frontier made for a sitemap stays the frontier's when replayed.
        meta = {k: v for k, v in request.meta.items()
                if not k.startswith("frontier_") or k in (UNSAFE_META, SITEMAP_META)}
        for key in TRANSIENT_META.intersection(meta):
            del meta[key]
        # Scrapy's downloader writes the slot it used; only one the spider chose is kept.
        if "download_slot" in meta and meta["download_slot"] == url_host_key_or_none(request.url):
            del meta["download_slot"]
        headers = {k: v for k, v in request.headers.items() if k not in ADDED_HEADERS}
        try:
            data = self._codec.encode(request.replace(meta=meta, headers=headers or None))
        except Exception as exc:  # noqa: BLE001 - kept out of the history, said once
            self._warn_once("unserializable", "A request could not be kept for recrawl "
                            "(%s); its page is recrawled as a plain GET of its URL", exc)
            self._count("recrawl/request_not_kept")
            return None
        if len(data) > MAX_REQUEST_BYTES:
            self._warn_once("too_large", "%s is %d bytes encoded (over %d): its page is "
                            "recrawled as a plain GET of its URL", request, len(data),
                            MAX_REQUEST_BYTES)
            self._count("recrawl/request_not_kept")
            return None
        return data

    def rebuild(self, data: bytes) -> Request | None:
        """The kept request, or None (said once) if it cannot be rebuilt any more."""
        try:
            request: Request = self._codec.decode(data)
        except StoreError as exc:
            self._warn_once(type(exc).__name__, "A page's kept request cannot be rebuilt "
                            "(%s); such pages are not recrawled this run", exc)
            self._count("recrawl/request_unreadable")
            return None
        return request

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)

    def _count(self, key: str) -> None:
        self.counters[key] = self.counters.get(key, 0) + 1
