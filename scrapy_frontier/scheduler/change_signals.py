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
from scrapy_frontier.core.signals import Hint, Signals, read_signals
from scrapy_frontier.meta import SITEMAP_META
from scrapy_frontier.reactor.timer import call_later

logger = logging.getLogger("scrapy_frontier.scheduler")

#: Hints fingerprinted and recorded per turn of the reactor, their page records read
#: together: on SQLite a slice holds the reactor some 15 ms (bench_signal_claims.py).
SLICE = 500
_XML_START = (b"<?xml", b"<urlset", b"<sitemapindex", b"<rss", b"<feed")


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


def sitemap_request(url: str) -> Request:
    """The request for a sitemap or feed the frontier reads itself (FRONTIER_SITEMAPS)."""
    return Request(url, meta={SITEMAP_META: True})


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

    def _read(self, signals: Signals, url: str, owned: bool) -> None:
        if self.closed or signals.kind == "other":
            return
        if owned:
            for child in signals.sitemaps:
                self.follow(child.url, url)
        self.count(f"signals/documents/{signals.kind}", 1)
        self.source(self.fp64(Request(url)))  # a response's URL: always a valid request
        if signals.truncated:
            logger.info("%s: read up to the sitemap limits (50,000 URLs, 50 MB) or to where it "
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


__all__ = ["SignalReader", "looks_like_signals", "names_sitemaps", "robots_sitemaps",
           "sitemap_request"]


