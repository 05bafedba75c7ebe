"""Sitemaps and feeds a spider fetches, read for the change hints they carry.

The recrawl middleware hands over the body of each response that looks like a sitemap, a
sitemap index or a feed. :class:`SignalReader` parses it in a thread (a 50,000-URL sitemap
takes a fraction of a second), then, back on the reactor, fingerprints its URLs a slice at a
time (so no turn of the reactor holds more than ``SLICE`` of them) and gives each slice's
hints to the driver, which reads their page records together and records each hint in the
page history (:meth:`Recrawler.hint_many`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from scrapy import Request
from twisted.internet.threads import deferToThread

from scrapy_frontier.core.recrawl import PageHint
from scrapy_frontier.core.signals import (
    DTD,
    GZIP_TOO_LARGE,
    MALFORMED,
    MAX_BYTES,
    TOO_LARGE,
    Hint,
    Signals,
    read_signals,
)
from scrapy_frontier.meta import SITEMAP_META
from scrapy_frontier.reactor.timer import call_later
from scrapy_frontier.scheduler.sitemap_scope import hostname

logger = logging.getLogger("scrapy_frontier.scheduler")

#: A frontier sitemap request cut at FRONTIER_SITEMAP_TIMEOUT (frontier/sitemaps/timeouts).
TIMED_OUT = "timeouts"
#: Retries of the frontier's own sitemap requests: a lost read costs only its hints until
#: the sitemap is read again, so it is not worth holding the host for three timeouts.
SITEMAP_RETRIES = 1
#: (reason, host) pairs whose refusal is logged; past it, refusals are only counted.
REFUSALS_LOGGED_MAX = 1_000
#: What each refusal reason says in the log.
REFUSAL_TEXT = {
    TOO_LARGE: "it is larger than the sitemap protocol's 50 MB (or DOWNLOAD_MAXSIZE)",
    GZIP_TOO_LARGE: "its gzip inflates past the sitemap protocol's 50 MB (a decompression "
                    "bomb, or a sitemap past the protocol's limit)",
    DTD: "it declares a document type (DTD), which no sitemap or feed needs: its entities "
         "could expand without bound or name other files, so none is read",
    MALFORMED: "it is not XML (or not whole gzip)",
}

#: Hints fingerprinted and recorded per turn of the reactor, their page records read
#: together: on SQLite a slice holds the reactor some 15 ms (bench_signal_claims.py).
SLICE = 500
_XML_START = (b"<?xml", b"<urlset", b"<sitemapindex", b"<rss", b"<feed",
              # a document type declaration of a signal's root (refused when read)
              b"<!DOCTYPE urlset", b"<!DOCTYPE sitemapindex", b"<!DOCTYPE rss",
              b"<!DOCTYPE feed")


def names_sitemaps(url: str, body: bytes) -> bool:
    """A robots.txt with ``Sitemap:`` lines (what SitemapSpider may start from)."""
    return url.partition("?")[0].endswith("/robots.txt") and b"sitemap:" in body.lower()


def looks_like_signals(url: str, body: bytes) -> bool:
    """A cheap look at a response: XML whose root may be a sitemap or a feed, or gzip at a
    ``.gz`` URL (a compressed sitemap, which Scrapy does not decompress)."""
    if body[:2] == b"\x1f\x8b":
        return url.partition("?")[0].endswith(".gz")
    head = body[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(_XML_START):
        return False
    return any(tag in body[:4096] for tag in (b"<urlset", b"<sitemapindex", b"<rss", b"<feed"))


def download_cut(exception: BaseException) -> str | None:
    """TOO_LARGE if Scrapy's download handler cut the download at its ``download_maxsize``
    (DownloadCancelledError; Twisted's CancelledError before Scrapy 2.14), TIMED_OUT if at
    its ``download_timeout``; None for any other failure."""
    name = type(exception).__name__
    if name in ("DownloadCancelledError", "CancelledError"):
        return TOO_LARGE
    if name in ("DownloadTimeoutError", "TimeoutError"):
        return TIMED_OUT
    return None


def sitemap_meta(*, timeout: float, retry_times: int, max_size: int) -> dict[str, Any]:
    """The meta of the frontier's own sitemap and feed requests: FRONTIER_SITEMAP_TIMEOUT
    for the whole download, at most one retry (Scrapy's RETRY_TIMES if lower), and no more
    than the protocol's MAX_BYTES downloaded (DOWNLOAD_MAXSIZE if lower; 0 is no limit)."""
    return {SITEMAP_META: True, "download_timeout": timeout,
            "max_retry_times": max(0, min(SITEMAP_RETRIES, retry_times)),
            "download_maxsize": MAX_BYTES if not 0 < max_size < MAX_BYTES else max_size}


def sitemap_request(url: str, meta: dict[str, Any] | None = None) -> Request:
    """The request for a sitemap or feed the frontier reads itself (FRONTIER_SITEMAPS);
    ``meta``: :func:`sitemap_meta`'s."""
    return Request(url, meta=dict(meta) if meta else {SITEMAP_META: True})


def robots_sitemaps(robotparser: Any) -> list[str]:
    """The ``Sitemap:`` URLs of a robots.txt, as Scrapy's robots.txt parsers expose them
    (Protego's ``sitemaps``, the standard library's ``site_maps()``)."""
    parsed = getattr(robotparser, "rp", robotparser)
    found = getattr(parsed, "sitemaps", None)
    if found is None and callable(getattr(parsed, "site_maps", None)):
        found = parsed.site_maps()
    return [str(u) for u in (found or ()) if str(u).startswith(("http://", "https://"))]


class SignalReader:
    """Reads the documents it is given and records their hints (one per page URL)."""

    def __init__(self, fp64: Callable[[Request], int],
                 record: Callable[[list[PageHint]], None],
                 source: Callable[[int], None],
                 count: Callable[[str, int], None],
                 follow: Callable[[str, str], object]) -> None:
        self.fp64 = fp64
        self.record = record
        self.source = source
        self.count = count
        #: ``follow(sitemap, index)``: an index the frontier requested names ``sitemap``.
        self.follow = follow
        self.closed = False
        self._logged: set[tuple[str, str]] = set()

    def robots_txt_read(self, url: str) -> None:
        """A robots.txt naming sitemaps: read again as often as they are."""
        self.source(self.fp64(Request(url)))

    def received(self, url: str, body: bytes, *, owned: bool = False) -> None:
        """``owned``: the frontier requested it (the spider does not see it, so the frontier
        follows the sitemaps an index names)."""
        d = deferToThread(read_signals, body)
        d.addCallback(self._read, url, owned)
        d.addErrback(lambda failure: logger.warning(
            "Could not read the change signals of %s: %s", url, failure.getErrorMessage()))

    def refused(self, url: str, reason: str, *, owned: bool = True) -> None:
        """The document at ``url`` is refused for ``reason`` (core.signals.REASONS): counted
        in frontier/sitemaps/refused/<reason>, logged once per reason and host."""
        self.count(f"sitemaps/refused/{reason}", 1)
        host = hostname(url)
        key = (reason, host)
        if key in self._logged or len(self._logged) >= REFUSALS_LOGGED_MAX:
            return
        self._logged.add(key)
        logger.warning(
            "The frontier refused the %s %s of host %r: %s. Nothing of it is read "
            "(frontier/sitemaps/refused/%s counts them; logged once per host and reason)",
            "sitemap" if owned else "sitemap or feed the spider fetched", url, host,
            REFUSAL_TEXT.get(reason, reason), reason)

    def _read(self, signals: Signals, url: str, owned: bool) -> None:
        if self.closed:
            return
        if signals.refused is not None:
            self.refused(url, signals.refused, owned=owned)
            return
        if signals.kind == "other":
            return
        if owned:
            for child in signals.sitemaps:
                self.follow(child.url, url)
        self.count(f"signals/documents/{signals.kind}", 1)
        self.source(self.fp64(Request(url)))  # a response's URL: always a valid request
        if signals.truncated:
            logger.info("%s: read up to the sitemap protocol's 50,000 URLs or to where it "
                        "stops being valid XML; the rest is not used", url)
        self._record_slice(signals.hints, 0)

    def _record_slice(self, hints: list[Hint], start: int) -> None:
        if self.closed:
            return
        batch: list[PageHint] = []
        for hint in hints[start:start + SLICE]:
            if hint.changed_at is None and hint.changefreq is None:
                continue
            try:
                fp = self.fp64(Request(hint.url))
            except (ValueError, TypeError):
                continue  # not a URL Scrapy can request
            batch.append((fp, hint.url, hint.changed_at, hint.changefreq))
        if batch:
            self.record(batch)
        if start + SLICE < len(hints):
            call_later(0, lambda: self._record_slice(hints, start + SLICE))

    def close(self) -> None:
        self.closed = True


__all__ = ["SITEMAP_RETRIES", "TIMED_OUT", "SignalReader", "download_cut",
           "looks_like_signals", "names_sitemaps", "robots_sitemaps", "sitemap_meta",
           "sitemap_request"]


