"""Change signals sites publish for free: sitemaps (``<lastmod>``, ``<changefreq>``), sitemap
indexes, RSS (``<pubDate>``) and Atom (``<updated>``) feeds.

:func:`read_signals` turns one such document into :class:`Hint` objects, each a page's URL
with the change time and change frequency its site hints, and the sitemaps an index names.
It parses the XML with expat's handlers (no tree), reads gzip, stops after the sitemap
protocol's ``MAX_URLS`` entries, and refuses (reads nothing of) a document larger than its
``MAX_BYTES`` uncompressed, gzip that inflates past it, a document type declaration (no
entity is ever declared, so none is expanded, and none is fetched), and what is not XML.
Whether a hint is believed is the recrawl's business (per-host trust), not this module's.
"""

from __future__ import annotations

import datetime
import gzip
import io
import math
import re
import zlib
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from xml.parsers import expat

#: The sitemap protocol's limits for one file: 50,000 URLs, 50 MB uncompressed.
MAX_URLS = 50_000
#: Elements read per entry allowed (a sitemap's url has at most five: url, loc, lastmod,
#: changefreq, priority; a feed's item a few more); past that a document is cut.
ELEMENTS_PER_URL = 20
MAX_BYTES = 50 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"

#: Why a document is refused (read not at all): the ``frontier/sitemaps/refused/<reason>``
#: stats. Larger than MAX_BYTES; gzip that inflates past MAX_BYTES (a decompression bomb, or
#: a sitemap past the protocol's limit); a document type declaration (entities: "billion
#: laughs", external entities); not XML, or not gzip, before its root element.
TOO_LARGE = "too_large"
GZIP_TOO_LARGE = "gzip_too_large"
DTD = "dtd"
MALFORMED = "malformed"
REASONS = (TOO_LARGE, GZIP_TOO_LARGE, DTD, MALFORMED)

_ROOTS = {"urlset": "urlset", "sitemapindex": "sitemapindex", "rss": "rss", "feed": "atom"}
_ENTRIES = frozenset({"url", "sitemap", "item", "entry"})
_FIELDS = frozenset({"loc", "lastmod", "changefreq", "link", "pubdate", "updated", "published",
                     "id", "date"})

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
    """Past MAX_URLS entries, or cut short: the rest was not read."""
    refused: str | None = None
    """Why the document was not read at all (one of REASONS), or None."""


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


def inflate(body: bytes, max_bytes: int = MAX_BYTES) -> bytes | str:
    """``body`` without its gzip (every member), or why it is refused: GZIP_TOO_LARGE if it
    inflates past ``max_bytes``, MALFORMED if it is not whole gzip. At most ``max_bytes`` + 1
    bytes are ever inflated."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as stream:
            data = stream.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error):
        return MALFORMED
    return GZIP_TOO_LARGE if len(data) > max_bytes else data


def read_signals(body: bytes, *, max_urls: int = MAX_URLS, max_bytes: int = MAX_BYTES
                 ) -> Signals:
    """The hints of a sitemap, sitemap index or feed in ``body`` (gzip or not).

    A document that is none of these is ``kind == "other"`` with no hints; one the reader
    refuses (see REASONS) is that too, with ``refused`` set.
    """
    data: bytes | str = body
    if body[:2] == GZIP_MAGIC:
        data = inflate(body, max_bytes)
    elif len(body) > max_bytes:
        data = TOO_LARGE
    if isinstance(data, str):
        return Signals("other", refused=data)
    return _parse(data, max_urls)


def _parse(data: bytes, max_urls: int) -> Signals:
    """Parse with expat's own handlers: no tree is built, a document type declaration is
    refused as it starts (before its internal subset: no entity is declared, so none is
    expanded, and no external one is ever fetched: no handler for them is set)."""
    out = Signals("other")
    parser = expat.ParserCreate(namespace_separator="}")
    parser.buffer_text = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    depth = 0
    # Elements read at most: a page of empty elements costs handler time, not entries.
    elements = ELEMENTS_PER_URL * max_urls
    entry: dict[str, str] = {}
    text: list[str] = []
    href: str | None = None
    rel = "alternate"

    # Handlers end the parse with StopIteration, a builtin (the core defines no exception).
    def refuse_dtd(*args: object) -> None:
        out.refused = DTD
        raise StopIteration

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal depth, entry, href, rel, elements
        elements -= 1
        if elements < 0:
            out.truncated = True
            raise StopIteration
        depth += 1
        name = _local(tag)
        if depth == 1:
            out.kind = _ROOTS.get(name, "other")
            if out.kind == "other":
                raise StopIteration
        elif name in _ENTRIES:
            entry = {}
        elif name == "link":
            href, rel = attrs.get("href"), attrs.get("rel", "alternate")
        text.clear()

    def end(tag: str) -> None:
        nonlocal depth
        depth -= 1
        name = _local(tag)
        if name in _ENTRIES:
            _finish(out, name, entry)
            if len(out.hints) + len(out.sitemaps) >= max_urls:
                out.truncated = True
                raise StopIteration
        elif name == "link" and href:
            if rel == "alternate":
                entry.setdefault("link", href)
        elif name in _FIELDS:
            entry.setdefault(name, "".join(text).strip())
        text.clear()

    parser.StartDoctypeDeclHandler = refuse_dtd
    parser.EntityDeclHandler = refuse_dtd
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text.append
    try:
        parser.Parse(data, True)
    except StopIteration:
        if out.refused is not None:
            return Signals("other", refused=out.refused)
    except expat.ExpatError:
        if depth == 0 and out.kind == "other":
            return Signals("other", refused=MALFORMED)
        out.truncated = out.kind != "other"  # read up to where it stops being XML
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
