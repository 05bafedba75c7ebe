"""Conditional-request headers from a page's last full response."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy import Request

def add_validators(request: Request, etag: str | None, last_modified: str | None) -> bool:
    """If-None-Match / If-Modified-Since from a page's last full response; True if any."""
    headers = request.headers
    added = False
    if etag and b"If-None-Match" not in headers:
        headers[b"If-None-Match"] = etag
        added = True
    if last_modified and b"If-Modified-Since" not in headers:
        headers[b"If-Modified-Since"] = last_modified
        added = True
    return added

