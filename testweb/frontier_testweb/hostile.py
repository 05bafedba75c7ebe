"""Hostile sitemaps (``serve --hostile``): documents a reader of sitemaps must refuse, and one
that never finishes.

Every host answers, at any path starting with one of these prefixes (so that a crawl can ask
a host for several distinct URLs of one kind):

``/hostile/bomb``
    gzip of 1 GiB of zeros, as 1 MiB members: about 1 MB on the wire.
``/hostile/laughs``
    "billion laughs": ten nested entities, each ten of the one before (10^9 "ha").
``/hostile/external``
    an external DTD and an external entity, both on the same host (``/hostile/evil.dtd``,
    ``/hostile/secret``): a reader that fetched either shows in the server's log.
``/hostile/large``
    a valid sitemap of ``LARGE_ENTRIES`` URLs (about 2.4 MB).
``/hostile/malformed``
    an XML declaration followed by a broken tag.
``/hostile/trickle``
    a sitemap that never finishes: its start, then a space every ``TRICKLE_EVERY`` seconds
    until the client goes away (logged then, with status 499).
"""

from __future__ import annotations

import gzip
from functools import cache

__all__ = ["HOSTILE_PREFIX", "LARGE_ENTRIES", "TRICKLE_EVERY", "TRICKLE_HEAD",
           "TRICKLE_LENGTH", "TRICKLE_PREFIX", "hostile_document"]

HOSTILE_PREFIX = "/hostile/"
TRICKLE_PREFIX = "/hostile/trickle"
#: Seconds between the bytes of a trickling sitemap.
TRICKLE_EVERY = 0.05
#: Its first bytes; the Content-Length it announces is far more.
TRICKLE_HEAD = (b'<?xml version="1.0" encoding="UTF-8"?>'
                b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">')
TRICKLE_LENGTH = 10_000_000
LARGE_ENTRIES = 25_000
_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


@cache
def _bomb() -> bytes:
    return gzip.compress(bytes(1 << 20), mtime=0) * 1024


def _laughs() -> bytes:
    entities = ['<!ENTITY l0 "ha">'] + [
        f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10)]
    return (f'<?xml version="1.0"?><!DOCTYPE urlset [{"".join(entities)}]>'
            f'<urlset xmlns="{_NS}"><url><loc>http://laughs.invalid/&l9;</loc></url>'
            "</urlset>").encode()


def _external(base: str) -> bytes:
    return (f'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "{base}/hostile/evil.dtd" '
            f'[<!ENTITY secret SYSTEM "{base}/hostile/secret">]>'
            f'<urlset xmlns="{_NS}"><url><loc>{base}/p/&secret;</loc></url></urlset>').encode()


def _large(base: str) -> bytes:
    rows = "".join(f"<url><loc>{base}/p/{i}</loc><lastmod>2026-01-01</lastmod></url>"
                   for i in range(LARGE_ENTRIES))
    return f'<?xml version="1.0"?><urlset xmlns="{_NS}">{rows}</urlset>'.encode()


def hostile_document(path: str, base: str) -> tuple[int, str, bytes]:
    """(status, content type, body) at ``path`` of the host whose root URL is ``base``;
    ``/hostile/trickle`` is the server's to stream."""
    if path.startswith("/hostile/bomb"):
        return 200, "application/gzip", _bomb()
    if path.startswith("/hostile/laughs"):
        return 200, "application/xml", _laughs()
    if path.startswith("/hostile/external"):
        return 200, "application/xml", _external(base)
    if path.startswith("/hostile/large"):
        return 200, "application/xml", _large(base)
    if path.startswith("/hostile/malformed"):
        return 200, "application/xml", b'<?xml version="1.0"?><<urlset>'
    if path in ("/hostile/evil.dtd", "/hostile/secret"):
        return 200, "text/plain", b"fetched\n"
    return 404, "text/plain", b"not found\n"
