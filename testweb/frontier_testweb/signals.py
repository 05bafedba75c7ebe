"""Sitemaps and feeds the test web publishes: change signals that tell the truth, or do not.

With signals on (``serve --signals``), host ``i`` is of kind ``KINDS[i % 4]``:

``truthful``
    Each page's ``<lastmod>`` (and feed ``<updated>``) is the time of its last change.
``liar``
    Every ``<lastmod>`` stays at the server's start, although the pages change.
``noisy``
    Every ``<lastmod>`` is the time of the request, although nothing changed then.
``silent``
    No sitemap and no feed (404), no ``Sitemap:`` line: what most sites publish.
``stamped``
    Truthful, but its pages are noisy: each carries a line that differs on every response (a
    timestamp, a counter), and sends no ``ETag`` and no ``Last-Modified``, as dynamic pages
    often do. Only with ``--kinds``.

``--kinds K1,K2,...`` gives host ``i`` the kind ``K[i % len(K)]`` instead.

A publishing host's robots.txt names ``/sitemap.xml``: a sitemap index whose two children are
``/sitemap-1.xml.gz`` (gzip, the first half of the pages) and ``/sitemap-2.xml`` (the rest),
each with the newest ``<lastmod>`` of its pages. ``/feed.atom`` lists the ``FEED_ENTRIES``
pages whose claimed times are the newest. ``<changefreq>`` says ``hourly`` for a page that
changes and ``never`` for one that does not (a liar says ``never`` for every page).

Everything is a pure function of the page's last change, the server's start and the time of
the request (wall clock), so a benchmark rebuilds what was claimed without asking the server.
"""

from __future__ import annotations

import datetime
import gzip
from collections.abc import Sequence
from xml.sax.saxutils import escape

__all__ = ["ALL_KINDS", "FEED_ENTRIES", "KINDS", "SITEMAP_PATHS", "atom_feed", "check_kinds",
           "claimed", "host_kind", "parse_kinds", "sitemap_index", "urlset", "w3c_date"]

KINDS = ("truthful", "liar", "noisy", "silent")
#: Every kind a host may have (``--kinds``).
ALL_KINDS = (*KINDS, "stamped")
#: The paths a publishing host serves (beside robots.txt's Sitemap: line).
SITEMAP_PATHS = ("/sitemap.xml", "/sitemap-1.xml.gz", "/sitemap-2.xml", "/feed.atom")
FEED_ENTRIES = 20
_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def host_kind(index: int, kinds: Sequence[str] = KINDS) -> str:
    return kinds[index % len(kinds)]


def check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """``kinds`` as a tuple; ValueError unless there is one at least, each of ``ALL_KINDS``."""
    out = tuple(kinds)
    known = ", ".join(ALL_KINDS)
    if not out:
        raise ValueError(f"no host kind given; the kinds are {known}")
    unknown = [k for k in dict.fromkeys(out) if k not in ALL_KINDS]
    if unknown:
        raise ValueError(f"unknown host kind {', '.join(map(repr, unknown))}; "
                         f"the kinds are {known}")
    return out


def parse_kinds(text: str) -> tuple[str, ...]:
    """``--kinds``: a comma-separated list of kinds (see :func:`check_kinds`)."""
    return check_kinds([k.strip() for k in text.split(",") if k.strip()])


def claimed(kind: str, last_change: float, started: float, now: float) -> float:
    """The change time a host of ``kind`` claims for a page (wall clock, seconds)."""
    if kind in ("truthful", "stamped"):
        return last_change
    if kind == "liar":
        return started
    if kind == "noisy":
        return now
    raise ValueError(f"a {kind!r} host claims nothing")


def w3c_date(wall: float) -> str:
    """The W3C datetime sitemaps and Atom use, to the second, in UTC."""
    moment = datetime.datetime.fromtimestamp(int(wall), datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S+00:00")


def urlset(entries: Sequence[tuple[str, float, str]], *, compress: bool = False) -> bytes:
    """A sitemap of ``(loc, lastmod, changefreq)``; gzip-compressed if ``compress``."""
    rows = "".join(
        f"<url><loc>{escape(loc)}</loc><lastmod>{w3c_date(lastmod)}</lastmod>"
        f"<changefreq>{changefreq}</changefreq></url>"
        for loc, lastmod, changefreq in entries)
    body = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{_NS}">{rows}</urlset>'
    data = body.encode("utf-8")
    # mtime=0: the same bytes for the same sitemap.
    return gzip.compress(data, mtime=0) if compress else data


def sitemap_index(children: Sequence[tuple[str, float]]) -> bytes:
    """A sitemap index of ``(loc, lastmod)``."""
    rows = "".join(f"<sitemap><loc>{escape(loc)}</loc><lastmod>{w3c_date(lastmod)}</lastmod>"
                   "</sitemap>" for loc, lastmod in children)
    return (f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex xmlns="{_NS}">{rows}'
            "</sitemapindex>").encode()


def atom_feed(base: str, entries: Sequence[tuple[str, float]]) -> bytes:
    """An Atom feed of ``(link, updated)``, newest first, at most FEED_ENTRIES."""
    chosen = sorted(entries, key=lambda e: (-e[1], e[0]))[:FEED_ENTRIES]
    newest = chosen[0][1] if chosen else 0.0
    items = "".join(
        f"<entry><id>{escape(link)}</id><title>{escape(link)}</title>"
        f'<link href="{escape(link)}"/><updated>{w3c_date(updated)}</updated></entry>'
        for link, updated in chosen)
    return (f'<?xml version="1.0" encoding="UTF-8"?><feed xmlns="http://www.w3.org/2005/Atom">'
            f"<id>{escape(base)}/</id><title>{escape(base)}</title>"
            f"<updated>{w3c_date(newest)}</updated>{items}</feed>").encode()
