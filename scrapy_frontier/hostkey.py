"""The politeness key of a request: the same key Scrapy's downloader slots use."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from scrapy import Request

#: Schemes that never contact a host; each gets one pseudo-host key ("data:").
HOSTLESS_SCHEMES = frozenset({"data", "file", "about"})


class HostlessURL(ValueError):
    """A network URL without a host: it cannot be fetched politely (or at all)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url!r} has no host to be polite to ({reason})")
        self.reason = reason


def existing_meta(request: Request) -> dict[str, Any] | None:
    """``request.meta`` without creating it: reading ``meta`` allocates an empty
    dict on every request that has none, which costs memory per queued URL."""
    meta = getattr(request, "_meta", _UNKNOWN)
    return request.meta if meta is _UNKNOWN else meta  # type: ignore[no-any-return]


_UNKNOWN: Any = object()


def host_key(request: Request) -> str:
    """``meta["download_slot"]`` if set, else the lower-cased hostname.

    Like Scrapy's downloader slots, the port is ignored, IDN hosts are
    compared in their punycode form (Scrapy encodes them when building the
    Request) and IPv6 literals lose their brackets. ``data:``, ``file:`` and
    ``about:`` URLs share one key per scheme. Unlike Scrapy with
    ``CONCURRENT_REQUESTS_PER_IP``, the key is never an IP address, so it is
    stable before and after DNS resolution.
    """
    meta = existing_meta(request)
    slot = meta.get("download_slot") if meta else None
    if slot is not None:
        return str(slot)
    # Not urlparse_cached: its cache entry would live as long as the queued
    # request (~340 bytes each); the downloader parses again when it fetches.
    parsed = urlsplit(request.url)
    host = parsed.hostname
    if host:
        return host
    scheme = parsed.scheme.lower()
    if scheme in HOSTLESS_SCHEMES:
        return f"{scheme}:"
    raise HostlessURL(request.url, "no_host")
