"""Hostile sitemaps in a real crawl: refused, counted and logged once per host, and a sitemap
that never finishes does not hold its host's pages.

The test web (``serve --hostile``) serves, on every host, a gzip bomb (1 GiB of zeros), a
billion laughs, a document naming an external DTD and an external entity on its own host, a
sitemap larger than the crawl's DOWNLOAD_MAXSIZE, a malformed one, and one that trickles a
byte every 50 ms for ever. The frontier reads them itself (FRONTIER_SITEMAPS) while a plain
link-following spider crawls the hosts' pages.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, CrawlResult, run_crawl
from frontier_testweb.hostile import TRICKLE_HEAD
from frontier_testweb.log import CLIENT_CLOSED

pytestmark = pytest.mark.crawl

PAGES = 6
WEB = ["--shape", "wide", "--pages", str(PAGES), "--latency", "0.002", "0.005",
       "--cross-links", "0", "--hostile"]


def _settings(tmp: Path, sitemaps: list[str], **more: Any) -> dict[str, Any]:
    return {"ADDONS": FRONTIER_ADDON, "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False,
            "ROBOTSTXT_OBEY": False, "FRONTIER_MIN_DELAY": 0.0, "JOBDIR": str(tmp / "job"),
            "FRONTIER_SITEMAPS": sitemaps, **more}


def _crawl(web: ServerProcess, settings: dict[str, Any], tmp: Path) -> CrawlResult:
    result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                       workdir=tmp / "crawl", timeout=150)
    assert result.returncode == 0, result.output[-3000:]
    assert result.stats["finish_reason"] == "finished", result.output[-3000:]
    # The frontier's own logs say what it cut: no "Error downloading" traceback of Scrapy's.
    assert "Traceback" not in result.output, result.output[-3000:]
    return result


def _refusal_lines(output: str, reason: str) -> list[str]:
    return [line for line in output.splitlines()
            if "refused the sitemap" in line and f"frontier/sitemaps/refused/{reason} " in line]


def test_hostile_sitemaps_are_refused_counted_and_logged_once_per_host(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ServerProcess([*WEB, "--hosts", "2"], log_path=str(log)) as web:
        port = web.info["port"]
        a, b = (h["address"] for h in web.info["hosts"])
        sitemaps = [f"http://{a}:{port}/hostile/bomb-1.xml.gz",
                    f"http://{a}:{port}/hostile/bomb-2.xml.gz",
                    f"http://{b}:{port}/hostile/bomb-1.xml.gz",
                    f"http://{a}:{port}/hostile/laughs.xml",
                    f"http://{a}:{port}/hostile/external.xml",
                    f"http://{b}:{port}/hostile/large.xml",
                    f"http://{b}:{port}/hostile/malformed.xml"]
        # The bomb (about 1 MB on the wire) fits; the large sitemap (about 2 MB) does not.
        result = _crawl(web, _settings(tmp_path, sitemaps, DOWNLOAD_MAXSIZE=1_500_000),
                        tmp_path)
    served = read_log(log)
    stats = result.stats
    # Every hostile document was fetched once and refused for its own reason.
    assert sorted(e.path for e in served if e.path.startswith("/hostile/")) == sorted(
        re.sub(r"^http://[^/]+", "", url) for url in sitemaps)
    assert stats.get("frontier/sitemaps/refused/gzip_too_large") == 3, stats
    assert stats.get("frontier/sitemaps/refused/dtd") == 2, stats
    assert stats.get("frontier/sitemaps/refused/too_large") == 1, stats
    assert stats.get("frontier/sitemaps/refused/malformed") == 1, stats
    # No entity was fetched (nor expanded: no hint was recorded from any document).
    assert not [e for e in served if e.path in ("/hostile/evil.dtd", "/hostile/secret")]
    assert not [k for k in stats if k.startswith("frontier/signals/documents/")], stats
    # One WARNING per host and reason, naming the host and the URL.
    bombs = _refusal_lines(result.output, "gzip_too_large")
    assert len(bombs) == 2, bombs
    assert any(f"http://{a}:{port}/hostile/bomb-" in line and f"'{a}'" in line
               for line in bombs), bombs
    assert any(f"http://{b}:{port}/hostile/bomb-1.xml.gz" in line and f"'{b}'" in line
               for line in bombs), bombs
    assert all("WARNING" in line for line in bombs), bombs
    for reason in ("dtd", "too_large", "malformed"):
        assert len(_refusal_lines(result.output, reason)) == 1, (reason, result.output[-3000:])
    # The hosts' pages were crawled all the same.
    pages = {(e.host, e.path) for e in served if e.path.startswith("/p/") and e.status == 200}
    assert pages == {(h, f"/p/{i}") for h in (a, b) for i in range(PAGES)}


@pytest.mark.slow  # about 24 s: the newest leg runs it (.ci/run)
def test_a_sitemap_that_never_finishes_is_cut_and_its_hosts_pages_are_fetched(
        tmp_path: Path) -> None:
    """The trickling sitemap sends a byte every 50 ms for ever: only the whole-download
    timeout ends it. DOWNLOAD_TIMEOUT is a minute, so three attempts at it would outlast the
    crawl's time limit; FRONTIER_SITEMAP_TIMEOUT cuts each of the two attempts at a second."""
    log = tmp_path / "server.jsonl"
    with ServerProcess([*WEB, "--hosts", "1"], log_path=str(log)) as web:
        port = web.info["port"]
        [host] = (h["address"] for h in web.info["hosts"])
        sitemap = f"http://{host}:{port}/hostile/trickle.xml"
        result = _crawl(web, _settings(
            tmp_path, [sitemap], FRONTIER_SITEMAP_TIMEOUT=1.0, DOWNLOAD_TIMEOUT=60,
            RETRY_ENABLED=True, RETRY_TIMES=2, FRONTIER_BACKOFF_BASE=0.1), tmp_path)
    served = read_log(log)
    stats = result.stats
    trickles = [e for e in served if e.path == "/hostile/trickle.xml"]
    # Two attempts (one retry, not RETRY_TIMES' two), each cut by the crawler while bytes
    # were still arriving.
    assert len(trickles) == 2, trickles
    assert all(e.status == CLIENT_CLOSED and e.bytes > len(TRICKLE_HEAD) for e in trickles)
    assert stats.get("frontier/sitemaps/timeouts") == 2, stats
    assert stats.get("retry/count") == 1 and stats.get("retry/max_reached") == 1, stats
    warned = [line for line in result.output.splitlines()
              if "did not arrive within FRONTIER_SITEMAP_TIMEOUT (1 s)" in line]
    assert len(warned) == 1 and sitemap in warned[0], result.output[-3000:]
    # Every page of the host was fetched.
    pages = {e.path for e in served if e.path.startswith("/p/") and e.status == 200}
    assert pages == {f"/p/{i}" for i in range(PAGES)}
