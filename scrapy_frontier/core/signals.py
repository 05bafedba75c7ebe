"""Change signals sites publish for free: sitemaps (``<lastmod>``, ``<changefreq>``), sitemap
indexes, RSS (``<pubDate>``) and Atom (``<updated>``) feeds.

:func:`read_signals` turns one such document into :class:`Hint` objects, each a page's URL
with the change time and change frequency its site hints, and the sitemaps an index names.
It streams the XML (a pull parser), refuses a document type declaration (no entity is ever
declared, so none is expanded), reads gzip, and stops at the
sitemap protocol's limits: ``MAX_URLS`` entries, ``MAX_BYTES`` uncompressed. Whether a hint
is believed is the recrawl's business (per-host trust), not this module's.
"""

from __future__ import annotations

import datetime
import gzip
import io
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import cast
from xml.etree.ElementTree import Element, ParseError, XMLPullParser

#: The sitemap protocol's limits for one file: 50,000 URLs, 50 MB uncompressed.
MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024

#: ``<changefreq>`` as seconds between changes; ``never`` is infinite.
CHANGEFREQ_SECONDS = {
    "always": 60.0,
    "hourly": 3600.0,
    "daily": 86400.0,
    "weekly": 7 * 86400.0,
    "monthly": 30 * 86400.0,
    "yearly": 365 * 86400.0,
    "never": math.inf,
}

_W3C = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?"
    r"(Z|[+-]\d{2}:?\d{2})?)?)?)?\Z")


@dataclass(slots=True)
class Hint:
    """What a site says of one page."""

    url: str
    changed_at: float | None = None
    """The hinted time of the page's last change (seconds since the epoch), if given."""
    changefreq: float | None = None
    """Seconds between changes, from ``<changefreq>`` (inf for ``never``), if given."""


@dataclass(slots=True)
class Signals:
    """One document read: its kind, the pages it hints, and the sitemaps it names."""

    kind: str
    """``urlset``, ``sitemapindex``, ``rss``, ``atom``, or ``other`` (not a signal)."""
    hints: list[Hint] = field(default_factory=list)
    sitemaps: list[Hint] = field(default_factory=list)
    """A sitemap index's children, with their own ``<lastmod>``."""
    truncated: bool = False
    """Past MAX_URLS entries or MAX_BYTES: the rest was not read."""


def parse_time(text: str | None) -> float | None:
    """A W3C datetime (sitemaps, Atom) or an RFC 822 date (RSS), as seconds since the epoch;
    None if it is neither. A date without a zone is UTC."""
    if not text:
        return None
    text = text.strip()
    found = _W3C.match(text)
    if found is not None:
        year, month, day, hour, minute, second, zone = found.groups()
        try:
            moment = datetime.datetime(
                int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
                int(second or 0), tzinfo=_zone(zone))
        except ValueError:
            return None
        return moment.timestamp()
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _zone(text: str | None) -> datetime.timezone:
    if not text or text == "Z":
        return datetime.timezone.utc
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return datetime.timezone(sign * datetime.timedelta(hours=int(digits[:2]),
                                                       minutes=int(digits[2:])))


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1].lower()


def _uncompressed(body: bytes) -> io.BufferedIOBase | io.BytesIO:
    if body[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=io.BytesIO(body))
    return io.BytesIO(body)


def read_signals(body: bytes, *, max_urls: int = MAX_URLS, max_bytes: int = MAX_BYTES
                 ) -> Signals:
    """The hints of a sitemap, sitemap index or feed in ``body`` (gzip or not).

    A document that is none of these, or not XML, is ``kind == "other"`` with no hints.
    """
    stream = _uncompressed(body)
    parser: XMLPullParser[Element] = XMLPullParser(events=("start", "end"))
    out = Signals("other")
    read = 0
    depth = 0
    entry: dict[str, str] = {}
    try:
        while read < max_bytes:
            chunk = stream.read(min(64 * 1024, max_bytes - read))
            if not chunk:
                break
            if not read and b"<!DOCTYPE" in chunk.upper():
                return out  # sitemaps and feeds need no DTD; entities could blow up
            read += len(chunk)
            parser.feed(chunk)
            for event, element in cast("Iterator[tuple[str, Element]]", parser.read_events()):
                name = _local(str(element.tag))
                if event == "start":
                    depth += 1
                    if depth == 1:
                        out.kind = {"urlset": "urlset", "sitemapindex": "sitemapindex",
                                    "rss": "rss", "feed": "atom"}.get(name, "other")
                        if out.kind == "other":
                            return out
                    elif name in ("url", "sitemap", "item", "entry"):
                        entry = {}
                    continue
                depth -= 1
                if name in ("url", "sitemap", "item", "entry"):
                    _finish(out, name, entry)
                    element.clear()
                    if len(out.hints) + len(out.sitemaps) >= max_urls:
                        out.truncated = True
                        return out
                elif name == "link" and element.get("href"):
                    rel = element.get("rel", "alternate")
                    if rel == "alternate":
                        entry.setdefault("link", str(element.get("href")))
                elif name in ("loc", "lastmod", "changefreq", "link", "pubdate", "updated",
                              "published", "id", "date"):
                    entry.setdefault(name, (element.text or "").strip())
        else:
            out.truncated = True
            return out
        parser.close()  # a document cut short raises here
    except (ParseError, OSError, EOFError, zlib.error):
        out.truncated = out.kind != "other"
    return out


def _finish(out: Signals, name: str, entry: dict[str, str]) -> None:
    if name in ("url", "sitemap"):
        url = entry.get("loc")
        when = parse_time(entry.get("lastmod"))
    else:  # an RSS item or an Atom entry
        url = entry.get("link") or (entry.get("id") if name == "entry" else None)
        when = parse_time(entry.get("updated") or entry.get("pubdate") or entry.get("date")
                          or entry.get("published"))
    if not url or not url.startswith(("http://", "https://")):
        return
    if name == "sitemap":
        out.sitemaps.append(Hint(url, when))
        return
    freq = CHANGEFREQ_SECONDS.get(entry.get("changefreq", "").lower())
    out.hints.append(Hint(url, when, freq))
