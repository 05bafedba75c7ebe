"""The politeness key of a request: the same key Scrapy's downloader slots use."""

from __future__ import annotations

import re
import sys
from urllib.parse import urlsplit

from scrapy import Request

from scrapy_frontier.errors import HostlessURL

#: Schemes that never contact a host; each gets one pseudo-host key ("data:").
HOSTLESS_SCHEMES = frozenset({"data", "file", "about"})

__all__ = ["HOSTLESS_SCHEMES", "PLAIN_URL", "HostlessURL", "download_slot", "host_key",
           "url_host_key", "url_host_key_or_none"]


# scheme://[userinfo@]host[:port] followed by /, ?, # or the end. Anything else
# (IPv6 literals, odd characters) goes through urllib, which this must agree with.
_SIMPLE_NETLOC = re.compile(
    r"[A-Za-z][A-Za-z0-9+.\-]*://(?:[^/?#@\[\]]*@)?([^/?#:@\[\]]+)(?::[0-9]*)?(?:[/?#]|\Z)"
)

#: URLs that both ``w3lib.url.safe_url_string`` and ``w3lib.url.canonicalize_url``
#: return unchanged, whatever their options: http(s), a lowercase host of
#: dot-separated LDH labels (no port, no user info, no IDNA "xn--" label), and a
#: non-empty path of unreserved characters whose segments do not start with "."
#: (so no dot segments) -- no percent escapes, no query, no fragment. The last
#: label is not a number (digits, or "0x" and hex digits): the WHATWG URL
#: standard, which w3lib 2.6 follows, reads such a host as IPv4 and rewrites
#: it ("http://0/" becomes "http://0.0.0.0/"). Most
#: crawled URLs are not like this; many generated ones are. tests/core/test_seen.py
#: and tests/test_codec.py check the claim on many URLs inside and outside it.
PLAIN_URL = re.compile(
    r"https?://(?:(?!xn--)[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)*"
    r"(?!xn--)(?!(?:[0-9]+|0x[0-9a-f]*)/)[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
    r"(?:(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+/?|/)"
)


def host_key(request: Request) -> str:
    """``meta["download_slot"]`` if set, else the lower-cased hostname.

    Like Scrapy's downloader slots, the port is ignored, IDN hosts are
    compared in their punycode form (Scrapy encodes them when building the
    Request) and IPv6 literals lose their brackets. ``data:``, ``file:`` and
    ``about:`` URLs share one key per scheme. Unlike Scrapy with
    ``CONCURRENT_REQUESTS_PER_IP``, the key is never an IP address, so it is
    stable before and after DNS resolution.

    This is the downloader's key; the scheduler's adds one binding per hostname
    (``scrapy_frontier.scheduler.slots.SlotKeys``), so that a slot never splits a host.
    """
    slot = download_slot(request)
    return slot if slot is not None else url_host_key(request.url)


def download_slot(request: Request) -> str | None:
    """``meta["download_slot"]`` as a string, or None if unset; HostlessURL for one with a
    NUL (the shared frontier separates host and request with NUL)."""
    slot = request.meta.get("download_slot")
    if slot is None:
        return None
    key = str(slot)
    if "\0" in key:
        raise HostlessURL(request.url, "bad_download_slot")
    return key


def url_host_key(url: str) -> str:
    """The host key of a URL (see :func:`host_key`), without caching anything.

    Not ``urlparse_cached``: its cache entry would live as long as the queued
    request (about 340 bytes each); the downloader parses again when it fetches.
    """
    match = _SIMPLE_NETLOC.match(url)
    if match is not None:
        # Interned: every queued URL of a host then shares one key string
        # (about 60 bytes saved per queued request).
        return sys.intern(match.group(1).lower())
    parsed = urlsplit(url)
    host = parsed.hostname
    if host:
        return sys.intern(host)
    scheme = parsed.scheme.lower()
    if scheme in HOSTLESS_SCHEMES:
        return f"{scheme}:"
    raise HostlessURL(url, "no_host")


def url_host_key_or_none(url: str) -> str | None:
    """:func:`url_host_key`, or None for a URL without a host (a stored URL, say)."""
    try:
        return url_host_key(url)
    except HostlessURL:
        return None
