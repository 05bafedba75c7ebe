"""Sitemaps as change signals in a recrawl, on every backend that keeps a page history.

A SitemapSpider crawls the test web three times. Its hosts publish sitemaps (robots.txt names an
index; one child is gzip): host 0 tells the truth, host 1 lies (its lastmod never moves),
host 2 is noisy (its lastmod is always now), host 3 publishes nothing. Between the runs some
pages change; the second run decides each publishing host from a few probes. Pages are due
again only after a day (FRONTIER_RECRAWL_INITIAL), sitemaps after half a second, so the second
run fetches a page only because a hint said it changed.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import GroundTruth, ServerProcess, read_log
from frontier_testweb.crawl import FRONTIER_ADDON
from scrapy_frontier.core.recrawl import PROBES_PER_RUN
from tests.redis_server import RedisServer

pytestmark = pytest.mark.crawl

ROOT = Path(__file__).resolve().parents[2]
PAGES = 40
WEB = ["--shape", "wide", "--hosts", "4", "--pages", str(PAGES), "--latency", "0.002", "0.005",
       "--cross-links", "0", "--signals", "--change-rate", "0.5", "--changing-fraction", "0.25",
       "--seed", "14"]
_names = itertools.count()
#: Seconds after a page's fetch from which its change certainly moves its hint: the test
#: web writes lastmod to the second, and a hint moves when over a second (HINT_SLACK)
#: past the visit.
CERTAINLY_MOVED = 2.2


def _settings(backend: str, tmp: Path, redis_server: RedisServer) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "ADDONS": FRONTIER_ADDON, "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False, "FRONTIER_MIN_DELAY": 0.0,
        "FRONTIER_RECRAWL_INITIAL": 86400.0, "FRONTIER_RECRAWL_MIN": 0.5}
    if backend == "sqlite":
        settings["JOBDIR"] = str(tmp / "job")
    else:
        n = next(_names)
        settings.update(FRONTIER_BACKEND="redis", REDIS_URL=redis_server.url,
                        FRONTIER_REDIS_KEY=f"sig{n}:frontier:",
                        FRONTIER_REDIS_SEEN_KEY=f"sig{n}:seen:",
                        FRONTIER_REDIS_HISTORY_KEY=f"sig{n}:history:",
                        FRONTIER_REDIS_IDLE_GRACE=0.5)
    return settings


def _crawl(settings: dict[str, Any], robots: list[str], workdir: Path) -> tuple[dict[str, Any],
                                                                                 str]:
    workdir.mkdir(parents=True, exist_ok=True)
    stats = workdir / "stats.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.crawls.signals_spider", json.dumps(settings), str(stats),
         *robots], cwd=ROOT, capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    return json.loads(stats.read_text()), output


# About 25 s a backend: the newest leg runs it. The oldest leg reads sitemaps through Scrapy in
# test_the_frontier_reads_the_sitemaps_robots_txt_names_for_a_plain_spider.
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_recrawl_fetches_what_the_sitemaps_say_changed(backend: str, tmp_path: Path,
                                                         redis_server: RedisServer) -> None:
    settings = _settings(backend, tmp_path, redis_server)
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        truth = GroundTruth.from_announcement(web.info)
        hosts = [h["address"] for h in web.info["hosts"]]
        port = web.info["port"]
        robots = [f"http://{h}:{port}/robots.txt" for h in hosts]
        first, out1 = _crawl(settings, robots, tmp_path / "run1")
        assert first.get("finish_reason") == "finished", out1[-3000:]
        run1 = read_log(log)
        fetched1 = {(e.host, e.path): e.start for e in run1 if e.path.startswith("/p/")}
        # Host 3 publishes no sitemap: SitemapSpider finds none of its pages.
        assert {h for h, _ in fetched1} == set(hosts[:3]), sorted(fetched1)
        time.sleep(3.0)  # pages change meanwhile (0.5 changes per second, a quarter of the pages)
        second, out2 = _crawl(settings, robots, tmp_path / "run2")
        assert second.get("finish_reason") == "finished", out2[-3000:]
        run2 = read_log(log)[len(run1):]
        third, out3 = _crawl(settings, robots, tmp_path / "run3")
        assert third.get("finish_reason") == "finished", out3[-3000:]
        run3 = read_log(log)[len(run1) + len(run2):]
    fetched3 = {(e.host, e.path) for e in run3 if e.path.startswith("/p/")}
    pages2 = [e for e in run2 if e.path.startswith("/p/")]
    fetched2 = {(e.host, e.path) for e in pages2}
    sitemaps2 = [e for e in run2 if e.path.startswith("/sitemap")]
    assert sitemaps2, "the second run read no sitemap"
    read_at: dict[str, float] = {}  # when its first child sitemap was served
    for e in sitemaps2:
        if e.path != "/sitemap.xml":
            read_at[e.host] = min(read_at.get(e.host, e.start), e.start)

    def changed_before_read(host: str, path: str) -> bool:
        return bool(truth.change_times(host, path, fetched1[(host, path)] + CERTAINLY_MOVED,
                                       read_at[host] - 0.5))

    truthful, liar, noisy = hosts[:3]
    # The seed keeps the first three pages of each of the noisy host's sitemap parts from
    # ever changing. Its first three probes (the first moved hints of whichever part is
    # read first) then disagree, so it is distrusted whatever its other probes find.
    half = PAGES // 2
    assert not any(truth.is_changing(noisy, f"/p/{i}") for i in (0, 1, 2, half, half + 1,
                                                                  half + 2)), "change the seed"
    changed = {(truthful, p) for h, p in fetched1 if h == truthful
               and changed_before_read(truthful, p)}
    got = {(h, p) for h, p in fetched2 if h == truthful}
    assert changed, "no page of the truthful host changed between the runs: slow the test web"
    assert changed <= got, (sorted(changed - got), sorted(got))
    for host, path in got:  # nothing fetched that its hint did not say changed
        assert truth.change_times(host, path, fetched1[(host, path)], time.monotonic()), path
    # The liar's hints never move: none of its pages is fetched (they are not due).
    assert not {p for h, p in fetched2 if h == liar}
    # The noisy host hints every page changed. It is not decided yet, so only the probes'
    # pages are fetched (and found unchanged); the others' hints wait, then are dropped.
    noisy2 = {p for h, p in fetched2 if h == noisy}
    assert 1 <= len(noisy2) <= PROBES_PER_RUN, {k: v for k, v in second.items() if "sign" in k}
    assert noisy2 <= {p for h, p in fetched1 if h == noisy}
    assert second["frontier/signals/held"] >= PAGES - PROBES_PER_RUN
    # The truthful host's probes proved it right: its other changed pages came in the same
    # run.
    if len(changed) > PROBES_PER_RUN:
        assert second.get("frontier/signals/released", 0) >= len(changed) - PROBES_PER_RUN
    assert second.get("frontier/signals/documents/urlset", 0) >= 6
    # The noisy host's hints were checked by its refetches and all found wrong...
    assert second["frontier/signals/hosts_distrusted"] >= 1
    assert third["frontier/signals/ignored"] >= PAGES, third
    # ...and the next run, which knows it from the page history, ignores them.
    assert not {p for h, p in fetched3 if h == noisy}, sorted(fetched3)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_the_frontier_reads_the_sitemaps_robots_txt_names_for_a_plain_spider(
        backend: str, tmp_path: Path, redis_server: RedisServer) -> None:
    from frontier_testweb.crawl import run_crawl

    settings = _settings(backend, tmp_path, redis_server)
    settings.update(FRONTIER_SITEMAPS="robots", ROBOTSTXT_OBEY=True)
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        truth = GroundTruth.from_announcement(web.info)
        truthful = web.info["hosts"][0]["address"]

        def crawl(n: int) -> Any:
            result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                               workdir=tmp_path / f"crawl{n}", timeout=180)
            assert result.returncode == 0, result.output[-3000:]
            assert result.stats["finish_reason"] == "finished", result.output[-3000:]
            return result

        first = crawl(1)
        run1 = read_log(log)
        # The link-follower never asks for a sitemap: the frontier reads them itself, and
        # its spider never sees them (no callback error, no "Ignoring response" line).
        assert {e.path for e in run1 if e.path.startswith("/sitemap")} == {
            "/sitemap.xml", "/sitemap-1.xml.gz", "/sitemap-2.xml"}
        assert first.stats.get("frontier/signals/documents/urlset", 0) >= 6
        assert "Ignoring response" not in first.output and "Traceback" not in first.output
        fetched1 = {(e.host, e.path): e.start for e in run1 if e.path.startswith("/p/")}
        time.sleep(3.0)
        second = crawl(2)
        run2 = read_log(log)[len(run1):]
    assert second.stats.get("frontier/signals/documents/urlset", 0) >= 6, second.stats
    read_at = min(e.start for e in run2 if e.host == truthful and e.path.startswith("/sitemap-"))
    changed = {p for (h, p), at in fetched1.items() if h == truthful
               and truth.change_times(h, p, at + CERTAINLY_MOVED, read_at - 0.5)}
    got = {e.path for e in run2 if e.host == truthful and e.path.startswith("/p/")}
    assert changed and changed <= got, (sorted(changed - got), sorted(got))


def test_the_frontier_follows_an_index_only_where_the_spider_may_go(
        tmp_path: Path, redis_server: RedisServer) -> None:
    """Host 0's index also names host 1's sitemap (outside allowed_domains) and host 3's (an
    allowed host whose robots.txt names no sitemap): the frontier requests neither."""
    from frontier_testweb.crawl import run_crawl

    settings = _settings("sqlite", tmp_path, redis_server)
    settings.update(FRONTIER_SITEMAPS="robots", ROBOTSTXT_OBEY=True)
    log = tmp_path / "server.jsonl"
    args = [*WEB, "--foreign-sitemap", "0", "1", "--foreign-sitemap", "0", "3"]
    with ServerProcess(args, log_path=str(log)) as web:
        hosts = [h["address"] for h in web.info["hosts"]]
        port = web.info["port"]
        outside = hosts[1]
        allowed = [h for h in web.allowed_domains if h != outside]
        starts = [u for u in web.start_urls if f"//{outside}:" not in u]
        result = run_crawl(starts, settings, allowed_domains=allowed,
                           workdir=tmp_path / "crawl", timeout=180)
        assert result.returncode == 0, result.output[-3000:]
        assert result.stats["finish_reason"] == "finished", result.output[-3000:]
    served = read_log(log)
    # Host 0's own index and children were read, so its foreign children were seen.
    assert {e.path for e in served if e.host == hosts[0] and e.path.startswith("/sitemap")} \
        == {"/sitemap.xml", "/sitemap-1.xml.gz", "/sitemap-2.xml"}
    assert not [e for e in served if e.host == outside], "the frontier contacted host 1"
    assert not [e for e in served if e.host == hosts[3] and e.path.startswith("/sitemap")]
    assert result.stats.get("frontier/sitemaps/offsite") == 1, result.stats
    assert result.stats.get("frontier/sitemaps/cross_host") == 1, result.stats
    # Refused before Scrapy's offsite middleware would have dropped it.
    assert result.stats.get("offsite/filtered", 0) == 0
    assert f"http://{outside}:{port}/sitemap-2.xml" in result.output
    assert f"http://{hosts[3]}:{port}/sitemap-2.xml" in result.output
