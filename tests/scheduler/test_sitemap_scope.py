"""Where the frontier's own sitemap requests may go: the spider's allowed_domains, by Scrapy's
own offsite rule, and the sitemaps protocol's cross-site rule for an index's children."""

from __future__ import annotations

import logging
import re
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware
from scrapy.utils.test import get_crawler

from scrapy_frontier.scheduler.change_signals import SignalReader, sitemap_meta
from scrapy_frontier.scheduler.sitemap_scope import (
    CROSS_HOST,
    OFFSITE,
    SitemapScope,
    host_pattern,
    refusal,
    site,
)

ALL = re.compile("")
DOMAINS: list[Any] = [None, [], ["example.com"], ["www.example.org", "127.0.1.1"],
                      ["example.com", None], ["EXAMPLE.com"], ["example.com:8080"]]
URLS = ["http://example.com/s.xml", "https://sub.example.com/s.xml",
        "http://example.com:8080/s.xml", "http://notexample.com/s.xml",
        "http://www.example.org/s.xml", "http://example.org/s.xml",
        "http://bob.www.example.org/s.xml", "http://127.0.1.1:5000/s.xml",
        "http://127.0.1.2:5000/s.xml", "http://EXAMPLE.COM/s.xml", "http://[::1]/s.xml"]


def _spider(domains: Any) -> Spider:
    spider = Spider(name="scope")
    if domains is not None:
        spider.allowed_domains = domains
    return spider


@pytest.mark.parametrize("domains", DOMAINS)
def test_the_offsite_rule_is_scrapys(domains: Any) -> None:
    """Every URL is refused as offsite exactly when Scrapy's OffsiteMiddleware would drop a
    plain request for it (no allowed_domains, or an empty list, allows every host)."""
    crawler = get_crawler(Spider)
    spider = _spider(domains)
    middleware = OffsiteMiddleware.from_crawler(crawler)
    with warnings.catch_warnings():  # odd entries warn on some Scrapy versions
        warnings.simplefilter("ignore")
        middleware.spider_opened(spider)
    pattern = host_pattern(spider, crawler.stats)
    for url in URLS:
        follows = middleware.should_follow(Request(url), spider)
        assert (refusal(url, pattern) != OFFSITE) == follows, (domains, url)


def test_site_is_host_and_port_unless_the_default() -> None:
    assert site("http://Example.com/a") == "example.com"
    assert site("https://example.com:443/a") == site("http://example.com:80/b") == "example.com"
    assert site("http://example.com:8080/a") == "example.com:8080"
    assert site("https://example.com:80/a") == "example.com:80"
    assert site("http://example.com:99999/a") is None
    assert site("ftp://example.com/a") is None
    assert site("http:///a") is None


def test_an_index_names_sitemaps_of_its_own_site() -> None:
    index = "http://a.example/sitemap.xml"
    assert refusal("http://a.example/s1.xml", ALL, index=index) is None
    assert refusal("https://a.example/s1.xml", ALL, index=index) is None
    # Another port, another host, a subdomain: another site.
    for child in ("http://a.example:8080/s.xml", "http://b.example/s.xml",
                  "http://www.a.example/s.xml", "http://127.0.0.1:6379/s.xml"):
        assert refusal(child, ALL, index=index) == CROSS_HOST, child


def test_a_cross_site_child_needs_its_own_sites_robots_txt() -> None:
    index = "http://a.example/sitemap.xml"
    child = "http://b.example/s.xml"
    assert refusal(child, ALL, index=index, robots_named={child}) is None
    assert refusal(child, ALL, index=index, robots_named={"http://b.example/other.xml"}) \
        == CROSS_HOST
    # allowed_domains first: a robots.txt does not open a host the spider may not go to.
    assert refusal(child, re.compile(r"^(.*\.)?(a\.example)$"), index=index,
                   robots_named={child}) == OFFSITE


def test_urls_not_named_by_an_index_pass_on_allowed_domains_alone() -> None:
    only_a = re.compile(r"^(.*\.)?(a\.example)$")
    assert refusal("http://b.example/s.xml", ALL) is None
    assert refusal("http://b.example/s.xml", only_a) == OFFSITE
    assert refusal("http://x.a.example:81/s.xml", only_a) is None


class _Counts:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, key: str, n: int) -> None:
        self.counts[key] = self.counts.get(key, 0) + n


def _scope(domains: Any) -> tuple[SitemapScope, _Counts]:
    counts = _Counts()
    crawler = get_crawler(Spider)
    return SitemapScope(_spider(domains), crawler.stats, counts), counts


def test_the_scope_counts_each_refusal_and_logs_once_per_reason_and_host(
        caplog: pytest.LogCaptureFixture) -> None:
    scope, counts = _scope(["a.example"])
    index = "http://a.example/sitemap.xml"
    with caplog.at_level(logging.INFO, logger="scrapy_frontier.scheduler"):
        assert scope.allows("http://a.example/s1.xml", index=index)
        assert not scope.allows("http://10.0.0.1/s1.xml", index=index)
        assert not scope.allows("http://10.0.0.1/s2.xml", index=index)
        assert not scope.allows("http://x.a.example/s.xml", index=index)
        assert not scope.allows("http://x.a.example/t.xml", index=index)
        assert not scope.allows("http://b.example/listed.xml", listed=True)
    assert counts.counts == {"sitemaps/offsite": 3, "sitemaps/cross_host": 2}
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(lines) == 3, lines
    assert "http://10.0.0.1/s1.xml" in lines[0][1] and "allowed_domains" in lines[0][1]
    assert lines[0][0] == "INFO"
    assert "http://x.a.example/s.xml" in lines[1][1] and "robots.txt" in lines[1][1]
    assert lines[2][0] == "WARNING" and "FRONTIER_SITEMAPS" in lines[2][1]


def test_the_scope_follows_what_the_childs_own_robots_txt_named() -> None:
    scope, counts = _scope(None)
    index = "http://a.example/sitemap.xml"
    # b's robots.txt names a sitemap of b and one of c: only b's own can vouch for it.
    scope.robots_read("http://b.example/page", ["http://b.example/s.xml",
                                                 "http://c.example/s.xml"])
    assert scope.allows("http://b.example/s.xml", index=index)
    assert not scope.allows("http://c.example/s.xml", index=index)
    assert not scope.allows("http://b.example/other.xml", index=index)
    assert counts.counts == {"sitemaps/cross_host": 2}


def test_the_scope_reads_allowed_domains_as_they_change() -> None:
    scope, counts = _scope(["a.example"])
    assert not scope.allows("http://b.example/s.xml")
    scope.spider.allowed_domains = ["a.example", "b.example"]
    assert scope.allows("http://b.example/s.xml")
    scope.spider.allowed_domains = []
    assert scope.allows("http://c.example/s.xml")
    assert counts.counts == {"sitemaps/offsite": 1}


class _ScopedSpider(Spider):
    name = "scoped"
    allowed_domains = ["a.example", "b.example"]


def _open_scheduler(sitemaps: Any) -> tuple[Any, Any]:
    from scrapy_frontier.scheduler import FrontierScheduler
    from tests.scheduler.test_scheduler import _NextCall

    crawler = get_crawler(_ScopedSpider, {
        "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_SEED": 1, "FRONTIER_RECRAWL": "continuous",
        "FRONTIER_HISTORY_MAX_PAGES": 1000, "FRONTIER_SITEMAPS": sitemaps,
        "ROBOTSTXT_OBEY": True})
    from scrapy.dupefilters import RFPDupeFilter

    from scrapy_frontier.core import FakeClock
    from scrapy_frontier.settings import FrontierConfig

    sched = FrontierScheduler(crawler, FrontierConfig.from_settings(crawler.settings),
                              RFPDupeFilter.from_crawler(crawler), clock=FakeClock(100.0))
    crawler.engine = SimpleNamespace(
        downloader=SimpleNamespace(middleware=SimpleNamespace(middlewares=[])),
        _slot=SimpleNamespace(nextcall=_NextCall(), inprogress=set(), scheduler=sched))
    crawler.spider = _ScopedSpider.from_crawler(crawler)
    sched.open(crawler.spider)
    return sched, crawler


def _queued(sched: Any) -> set[str]:
    """Every URL the scheduler hands out, each fetch finished at once (one per host)."""
    urls = set()
    while (request := sched.next_request()) is not None:
        urls.add(request.url)
        sched.fetches.sent(request)
        sched.fetches.completed(request)
    return urls


def test_the_scheduler_queues_only_listed_sitemaps_in_scope(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier.scheduler"):
        sched, crawler = _open_scheduler(["http://a.example/sitemap.xml",
                                          "http://169.254.169.254/latest/sitemap.xml"])
    assert _queued(sched) == {"http://a.example/sitemap.xml"}
    assert any("http://169.254.169.254/latest/sitemap.xml" in r.getMessage()
               and "FRONTIER_SITEMAPS" in r.getMessage() for r in caplog.records)
    sched.publish_stats()
    assert crawler.stats.get_value("frontier/sitemaps/offsite") == 1
    sched.close("finished")


def test_the_scheduler_follows_robots_txt_and_index_sitemaps_in_scope() -> None:
    from scrapy.robotstxt import ProtegoRobotParser

    sched, crawler = _open_scheduler("robots")
    robots = ProtegoRobotParser.from_crawler(crawler, (
        b"User-agent: *\nDisallow:\n"
        b"Sitemap: http://b.example/sitemap.xml\n"
        b"Sitemap: http://b.example/news.xml\n"
        b"Sitemap: http://10.0.0.1/sitemap.xml\n"))
    sched._on_robots_parsed(robots, Request("http://b.example/page"))
    assert _queued(sched) == {"http://b.example/sitemap.xml", "http://b.example/news.xml"}
    reader = sched.history_feed.reader
    index = "http://a.example/sitemap.xml"
    for child in ("http://a.example/s1.xml",  # its own site
                  "http://b.example/news.xml",  # b's robots.txt names it (queued already)
                  "http://b.example/other.xml",  # b's robots.txt does not
                  "http://10.0.0.1/s.xml"):  # outside allowed_domains
        reader.follow(child, index)
    assert _queued(sched) == {"http://a.example/s1.xml"}
    sched.publish_stats()
    assert crawler.stats.get_value("frontier/sitemaps/offsite") == 2
    assert crawler.stats.get_value("frontier/sitemaps/cross_host") == 1
    sched.close("finished")


def test_the_frontiers_sitemap_requests_are_bounded() -> None:
    from scrapy_frontier.core.signals import MAX_BYTES
    from scrapy_frontier.errors import FrontierConfigError
    from scrapy_frontier.settings import FrontierConfig

    sched, crawler = _open_scheduler(["http://a.example/sitemap.xml"])
    [request] = [sched.next_request()]
    assert request.meta["download_timeout"] == 30.0
    assert request.meta["max_retry_times"] == 1
    assert request.meta["download_maxsize"] == MAX_BYTES
    sched.close("finished")
    meta = sitemap_meta(timeout=2.5, retry_times=0, max_size=1000)
    assert (meta["download_timeout"], meta["max_retry_times"], meta["download_maxsize"]) == (
        2.5, 0, 1000)
    assert sitemap_meta(timeout=1, retry_times=5, max_size=0)["download_maxsize"] == MAX_BYTES
    assert sitemap_meta(timeout=1, retry_times=5, max_size=MAX_BYTES * 2)[
        "download_maxsize"] == MAX_BYTES
    for bad in (0, -1, "soon", float("inf")):
        with pytest.raises(FrontierConfigError, match="FRONTIER_SITEMAP_TIMEOUT"):
            FrontierConfig.from_settings(get_crawler(Spider, {
                "FRONTIER_SITEMAP_TIMEOUT": bad}).settings)


def test_refused_documents_are_counted_each_and_logged_once_per_host_and_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    counts = _Counts()
    reader = SignalReader(lambda r: 0, lambda hints: None, lambda fp: None, counts,
                          lambda url, index: None)
    with caplog.at_level(logging.INFO, logger="scrapy_frontier.scheduler"):
        reader.refused("http://a.example/bomb1.xml.gz", "gzip_too_large")
        reader.refused("http://a.example/bomb2.xml.gz", "gzip_too_large")
        reader.refused("http://b.example/bomb.xml.gz", "gzip_too_large")
        reader.refused("http://a.example/dtd.xml", "dtd", owned=False)
    assert counts.counts == {"sitemaps/refused/gzip_too_large": 3, "sitemaps/refused/dtd": 1}
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["WARNING"] * 3, lines
    assert "http://a.example/bomb1.xml.gz" in lines[0][1] and "'a.example'" in lines[0][1]
    assert "http://b.example/bomb.xml.gz" in lines[1][1] and "'b.example'" in lines[1][1]
    assert "spider fetched" in lines[2][1] and "DTD" in lines[2][1]


def test_a_cut_download_of_the_frontiers_own_sitemap_is_logged_by_the_frontier_only() -> None:
    try:
        from scrapy.exceptions import DownloadCancelledError, DownloadTimeoutError
    except ImportError:  # before Scrapy 2.14: Twisted's own
        from twisted.internet.defer import (  # type: ignore[assignment]
            CancelledError as DownloadCancelledError,
        )
        from twisted.internet.error import (  # type: ignore[assignment]
            TimeoutError as DownloadTimeoutError,
        )

    from scrapy_frontier.meta import SITEMAP_META
    from scrapy_frontier.spidermiddlewares import QuietSitemapCut

    quiet = QuietSitemapCut()

    def record(request: Request, error: Exception) -> logging.LogRecord:
        return logging.LogRecord("scrapy.core.scraper", logging.ERROR, __file__, 1,
                                 "Error downloading %(request)s", ({"request": request},),
                                 (type(error), error, None))

    own = Request("http://a.example/s.xml", meta={SITEMAP_META: True})
    theirs = Request("http://a.example/s.xml")
    assert not quiet.filter(record(own, DownloadTimeoutError("slow")))
    assert not quiet.filter(record(own, DownloadCancelledError("big")))
    assert quiet.filter(record(own, ConnectionRefusedError()))
    assert quiet.filter(record(theirs, DownloadTimeoutError("slow")))
