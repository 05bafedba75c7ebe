"""Where the frontier's own sitemap and feed requests may go.

The frontier requests sitemaps of its own: those FRONTIER_SITEMAPS lists, the ``Sitemap:``
lines of the robots.txt files Scrapy reads, and the sitemaps an index it read names. Each is
queued only where the spider may go:

* its host passes the spider's ``allowed_domains``, by the rule of Scrapy's own
  ``OffsiteMiddleware`` (its ``get_host_regex``: no list, or an empty one, allows every host);
* a sitemap an index names on another site (host name, and port if not the scheme's default)
  than the index's is followed only if that site's robots.txt named it (sitemaps.org,
  "Sitemaps & Cross Submits").

The frontier's requests are never ``dont_filter`` nor ``allow_offsite``: their URLs come from
settings or from documents on the web, so they are judged as a plain spider request is.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable, Container, Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware

if TYPE_CHECKING:
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger("scrapy_frontier.scheduler")

OFFSITE = "offsite"
CROSS_HOST = "cross_host"
#: Sitemap URLs named by their own site's robots.txt that are remembered (about 150 bytes
#: each); past it, a cross-site child of an index is refused.
ROBOTS_NAMED_MAX = 100_000
#: (reason, host) pairs logged; past it, refusals are only counted.
LOGGED_MAX = 1_000
_DEFAULT_PORTS = {"http": 80, "https": 443}


def site(url: str) -> str | None:
    """The host name of an http(s) URL, with ``:port`` if the port is not its scheme's
    default; None if it has no host or an invalid port."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host or parts.scheme not in _DEFAULT_PORTS:
        return None
    return host if port is None or port == _DEFAULT_PORTS[parts.scheme] else f"{host}:{port}"


def hostname(url: str) -> str:
    """The host name Scrapy's offsite rule tests ("" for none)."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def refusal(url: str, allowed: re.Pattern[str], *, index: str | None = None,
            robots_named: Container[str] = ()) -> str | None:
    """Why the frontier may not request ``url`` itself (OFFSITE, CROSS_HOST), or None.

    ``allowed``: the host pattern of Scrapy's offsite rule; ``index``: the URL of the
    sitemap index naming ``url``; ``robots_named``: sitemap URLs their own site's robots.txt
    named."""
    if not allowed.search(hostname(url)):
        return OFFSITE
    if index is not None and url not in robots_named:
        child = site(url)
        if child is None or child != site(index):
            return CROSS_HOST
    return None


def host_pattern(spider: Spider, stats: StatsCollector) -> re.Pattern[str]:
    """The host pattern of Scrapy's OffsiteMiddleware for ``spider``, without the warnings
    it gives once about odd ``allowed_domains`` entries (its own instance gives them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return OffsiteMiddleware(stats).get_host_regex(spider)


class SitemapScope:
    """Decides, counts and logs where the frontier's own sitemap requests may go."""

    def __init__(self, spider: Spider, stats: StatsCollector,
                 count: Callable[[str, int], None]) -> None:
        self.spider = spider
        self.stats = stats
        self.count = count
        self.robots_named: set[str] = set()
        self._domains: list[str] | None = None
        self._pattern: re.Pattern[str] = re.compile("")
        self._logged: set[tuple[str, str]] = set()

    def pattern(self) -> re.Pattern[str]:
        """Scrapy's host pattern, built again when ``allowed_domains`` changes."""
        domains = list(getattr(self.spider, "allowed_domains", None) or [])
        if domains != self._domains:
            self._domains = domains
            self._pattern = host_pattern(self.spider, self.stats)
        return self._pattern

    def robots_read(self, url: str, sitemaps: Iterable[str]) -> None:
        """A robots.txt of the site of ``url`` named ``sitemaps``: remember those on its
        own site (the others cannot vouch for an index's cross-site child)."""
        own = site(url)
        for sitemap in sitemaps:
            if len(self.robots_named) >= ROBOTS_NAMED_MAX:
                return
            if own is not None and site(sitemap) == own:
                self.robots_named.add(sitemap)

    def allows(self, url: str, *, index: str | None = None, listed: bool = False) -> bool:
        """May the frontier queue ``url``? ``index``: the index naming it; ``listed``:
        FRONTIER_SITEMAPS names it."""
        reason = refusal(url, self.pattern(), index=index, robots_named=self.robots_named)
        if reason is None:
            return True
        self.count(f"sitemaps/{reason}", 1)
        key = (reason, hostname(url))
        if key not in self._logged and len(self._logged) < LOGGED_MAX:
            self._logged.add(key)
            self._log(reason, url, index, listed)
        return False

    def _log(self, reason: str, url: str, index: str | None, listed: bool) -> None:
        if reason == OFFSITE:
            logger.log(logging.WARNING if listed else logging.INFO,
                       "The frontier does not request the sitemap %s%s: its host %r is not "
                       "in the spider's allowed_domains (frontier/sitemaps/offsite counts "
                       "them; logged once per host)", url,
                       " (FRONTIER_SITEMAPS)" if listed else
                       f" named by {index}" if index else " named by a robots.txt",
                       hostname(url))
        else:
            logger.info("The frontier does not follow the sitemap %s named by the index %s: "
                        "an index names a sitemap of another site only if that site's "
                        "robots.txt names it, as the frontier did not see (sitemaps.org; "
                        "frontier/sitemaps/cross_host counts them; logged once per host)",
                        url, index)


__all__ = ["CROSS_HOST", "OFFSITE", "SitemapScope", "host_pattern", "hostname", "refusal",
           "site"]
