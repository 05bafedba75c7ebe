"""Crawls with download handlers other than Scrapy's HTTP/1.1 one, audited from the server's
log: Scrapy's httpx handler, and scrapy-playwright driving Debian's Chromium.

The kernel's TCP times cannot be read from these handlers' sockets: the fetch times come from
the timing middleware, and ``frontier/fetch/timed_by`` says so.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
import scrapy

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from frontier_testweb.log import CLIENT_CLOSED

pytestmark = pytest.mark.crawl

WEB = ["--shape", "wide", "--hosts", "4", "--pages", "6", "--latency", "0.01", "0.03",
       "--seed", "21"]
HTTPX = "scrapy.core.downloader.handlers._httpx.HttpxDownloadHandler"


ROOT = Path(__file__).resolve().parents[2]


def _crawl(tmp_path: Path, settings: dict[str, Any], cwd: Path | None = None,
           browser: bool = False) -> tuple[Any, Any, ServerProcess]:
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0,
                                            **settings},
                           allowed_domains=web.allowed_domains, workdir=tmp_path / "crawl",
                           timeout=300, cwd=cwd)
    assert result.returncode == 0, result.output[-3000:]
    entries = read_log(str(log))
    if browser:
        # Chromium may ask for /favicon.ico on its own after a page load, which Playwright
        # neither routes nor reports (microsoft/playwright#7493): no request the frontier
        # scheduled. The audit is of the requests it scheduled. Such a request is answered
        # 404, or cut short when the page closes first (logged as the client closing).
        favicons = [e for e in entries if e.path == "/favicon.ico"]
        assert all(e.status in (404, CLIENT_CLOSED) for e in favicons), favicons
        assert len(favicons) <= len(web.expected), favicons
        entries = [e for e in entries if e.path != "/favicon.ico"]
    report = audit(entries, expected=web.expected)
    return result, report, web


def test_scrapys_httpx_handler_crawls_politely_and_completely(tmp_path: Path) -> None:
    import httpx2  # noqa: F401 - the test extra: its absence is a failure, not a skip

    if importlib.util.find_spec("scrapy.core.downloader.handlers._httpx") is None:
        pytest.skip(f"Scrapy {scrapy.__version__} has no httpx download handler")
    result, report, _ = _crawl(tmp_path, {"DOWNLOAD_HANDLERS": {"http": HTTPX, "https": HTTPX}})
    assert report.overlaps == 0 and report.short_gaps == 0, report
    assert report.coverage == 1.0 and report.duplicates == 0, report
    assert result.stats["frontier/fetch/timed_by"] == (
        "the timing middleware (the download handler gives no TCP socket)")
    assert "frontier/fetch/tcp_read" not in result.stats


CHROMIUM = shutil.which("chromium")


@pytest.mark.slow  # a browser start and a page load per request: the newest leg runs it
def test_scrapy_playwright_with_debian_chromium_crawls_politely_and_completely(
        tmp_path: Path) -> None:
    """Each request is one page load in a real browser, its subresources blocked."""
    assert CHROMIUM is not None, "apt-get install chromium (.ci/run does)"
    from tests.crawls.plugin_helpers import CHROMIUM_ARGS

    handler = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"
    result, report, web = _crawl(tmp_path, {
        "DOWNLOAD_HANDLERS": {"http": handler, "https": handler},
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "PLAYWRIGHT_LAUNCH_OPTIONS": {"executable_path": CHROMIUM, "args": CHROMIUM_ARGS},
        "PLAYWRIGHT_ABORT_REQUEST": "tests.crawls.plugin_helpers.abort_subresources",
        "DOWNLOADER_MIDDLEWARES": {"tests.crawls.plugin_helpers.EveryRequestInTheBrowser": 100},
    }, cwd=ROOT, browser=True)
    assert result.stats.get("playwright/page_count", 0) >= len(web.expected), result.stats
    assert report.overlaps == 0 and report.short_gaps == 0, report
    assert report.coverage == 1.0 and report.duplicates == 0, report
    assert result.stats["frontier/fetch/timed_by"] == (
        "the timing middleware (the download handler gives no TCP socket)")
