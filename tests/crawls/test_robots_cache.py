"""robots.txt once per site (FRONTIER_ROBOTS_CACHE): real crawls of the test web with
ROBOTSTXT_OBEY, judged by the server's request log.

Three Redis workers fetch each host's robots.txt once between them, and their next crawl
fetches none; a JOBDIR crawl run twice fetches robots.txt in its first run only; a stale
answer stands in for a robots.txt that answers 500 or not at all.
"""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import BASE_SETTINGS, FRONTIER_ADDON, run_crawl
from scrapy_frontier.backends.sqlite.control import ControlFile
from scrapy_frontier.core.robots_cache import STALE_LIMIT, RobotsRecord, encode
from scrapy_frontier.scheduler.robots_cache import robots_origin
from tests.redis_server import RedisServer

pytestmark = pytest.mark.crawl

HOSTS = 5
WEB = ["--shape", "wide", "--hosts", str(HOSTS), "--pages", "5", "--latency", "0.005", "0.02",
       "--seed", "7"]
MIN_DELAY = 0.1
_names = itertools.count()


def _robots_per_host(entries: list[Any]) -> Counter[str]:
    return Counter(e.host for e in entries if e.path == "/robots.txt")


def _workers(tmp_path: Path, web: Any, settings: dict[str, Any], run: str) -> list[dict[str, Any]]:
    """Three ``scrapy crawl`` workers of the same spider at once; their stats."""
    spec = tmp_path / f"{run}.json"
    spec.write_text(json.dumps({"start_urls": web.start_urls,
                                "allowed_domains": web.allowed_domains, "settings": settings}))
    outs = [tmp_path / f"{run}-worker{i}.json" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-m", "frontier_testweb.crawl", str(spec),
                               str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for out in outs]
    try:
        codes = [p.wait(timeout=180) for p in procs]
        output = [p.stdout.read() if p.stdout else "" for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            if p.stdout is not None:
                p.stdout.close()
    assert codes == [0, 0, 0], (codes, [o[-2000:] for o in output])
    return [json.loads(out.read_text()) for out in outs]


def _total(stats: list[dict[str, Any]], name: str) -> int:
    return sum(int(s.get(name, 0)) for s in stats)


# About 14 s (six worker processes): the newest leg runs it; the JOBDIR crawl below covers
# Scrapy's chain on every leg.
@pytest.mark.slow
def test_three_redis_workers_fetch_each_robots_txt_once_and_the_next_run_none(
        redis_server: RedisServer, tmp_path: Path) -> None:
    name = f"rcache{next(_names)}"
    log = tmp_path / "server.jsonl"

    def settings(run: int) -> dict[str, Any]:
        # The second run keeps the frontier's keys (where the robots.txt records are) and
        # starts a new seen set and history, so that it fetches every page again.
        return {**BASE_SETTINGS, "ADDONS": FRONTIER_ADDON, "ROBOTSTXT_OBEY": True,
                "FRONTIER_BACKEND": "redis", "REDIS_URL": redis_server.url,
                "FRONTIER_REDIS_KEY": f"{name}:frontier:",
                "FRONTIER_REDIS_SEEN_KEY": f"{name}:seen{run}:",
                "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history{run}:",
                "FRONTIER_MIN_DELAY": MIN_DELAY, "FRONTIER_REDIS_IDLE_GRACE": 1.0}

    with ServerProcess(WEB, log_path=str(log)) as web:
        first = _workers(tmp_path, web, settings(1), "first")
        first_entries = read_log(log)
        second = _workers(tmp_path, web, settings(2), "second")
        entries = read_log(log)
    hosts = {e.host for e in first_entries if e.path != "/robots.txt"}
    assert len(hosts) == HOSTS
    robots = _robots_per_host(first_entries)
    print("first run: robots.txt per host", dict(robots),
          "stored", _total(first, "frontier/robots/stored"),
          "cached", _total(first, "frontier/robots/cached"))
    # One fetch per host for the three workers together, each kept once.
    assert robots == Counter(dict.fromkeys(hosts, 1)), robots
    assert _total(first, "frontier/robots/stored") == HOSTS
    assert _total(first, "frontier/robots/fetches") == HOSTS
    report = audit(first_entries, expected=web.expected, min_delay=MIN_DELAY, include_robots=True)
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    # The second run fetches every page again and no robots.txt.
    later = entries[len(first_entries):]
    print("second run: requests", len(later), "cached", _total(second, "frontier/robots/cached"))
    assert not _robots_per_host(later), _robots_per_host(later)
    assert {(e.host, e.path) for e in later} == {(e.host, e.path) for e in first_entries
                                                  if e.path != "/robots.txt"}
    assert _total(second, "frontier/robots/cached") >= HOSTS
    assert _total(second, "frontier/robots/fetches") == 0
    assert _total(second, "frontier/robots/stored") == 0
    # Each worker that met a host asked Redis once and parsed what it got as a fetched one.
    assert _total(second, "robotstxt/response_count") == _total(second, "frontier/robots/cached")


def test_a_jobdir_crawl_run_twice_fetches_robots_txt_in_its_first_run_only(
        tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    settings: dict[str, Any] = {"ADDONS": FRONTIER_ADDON, "ROBOTSTXT_OBEY": True,
                                "FRONTIER_MIN_DELAY": MIN_DELAY, "JOBDIR": str(tmp_path / "job")}
    with ServerProcess(WEB, log_path=str(log)) as web:
        first = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                          workdir=tmp_path / "crawl1")
        assert first.returncode == 0, first.output[-3000:]
        first_entries = read_log(log)
        # Every page is due again: the second run fetches them all.
        second = run_crawl(web.start_urls, {**settings, "FRONTIER_RECRAWL_ALL": True},
                           allowed_domains=web.allowed_domains, workdir=tmp_path / "crawl2")
        assert second.returncode == 0, second.output[-3000:]
        entries = read_log(log)
    robots = _robots_per_host(first_entries)
    assert sorted(robots.values()) == [1] * HOSTS, robots
    assert first.stats["frontier/robots/stored"] == HOSTS
    later = entries[len(first_entries):]
    print("second run: requests", len(later), "cached", second.stats.get("frontier/robots/cached"))
    assert {e.path for e in later} - {"/robots.txt"}, "the second run fetched no page"
    assert not _robots_per_host(later), _robots_per_host(later)
    assert second.stats["frontier/robots/cached"] == HOSTS
    assert "frontier/robots/fetches" not in second.stats
    report = audit(later, expected=web.expected, min_delay=MIN_DELAY, include_robots=True)
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()


# About 8 s (two crawls): the newest leg runs it; tests/backends/test_robots_store.py checks
# that the cache off keeps and answers nothing, on every backend.
@pytest.mark.slow
def test_with_the_cache_off_every_run_fetches_robots_txt(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    settings: dict[str, Any] = {"ADDONS": FRONTIER_ADDON, "ROBOTSTXT_OBEY": True,
                                "FRONTIER_MIN_DELAY": MIN_DELAY, "FRONTIER_ROBOTS_CACHE": 0,
                                "JOBDIR": str(tmp_path / "job")}
    with ServerProcess(WEB, log_path=str(log)) as web:
        for run, extra in enumerate(({}, {"FRONTIER_RECRAWL_ALL": True})):
            result = run_crawl(web.start_urls, {**settings, **extra},
                               allowed_domains=web.allowed_domains,
                               workdir=tmp_path / f"crawl{run}")
            assert result.returncode == 0, result.output[-3000:]
            assert "frontier/robots/stored" not in result.stats
            assert "frontier/robots/cached" not in result.stats
    assert sorted(_robots_per_host(read_log(log)).values()) == [2] * HOSTS


def _dead_url() -> str:
    """A URL of a loopback port nothing listens on: its robots.txt gets no answer."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/p/0"


def test_a_stale_answer_stands_in_when_robots_txt_answers_500_or_nothing(
        tmp_path: Path) -> None:
    """Scrapy's own chain: RetryMiddleware spends its retries, then the answer kept two days
    ago (Disallow: /) answers for the 500s and the refused connection, so nothing is crawled
    (without it, Scrapy would parse the 500 page and crawl everything)."""
    job = tmp_path / "job"
    job.mkdir(mode=0o700)
    log = tmp_path / "server.jsonl"
    disallow_all = b"User-agent: *\nDisallow: /\n"
    with ServerProcess([*WEB, "--robots-failures", "99"], log_path=str(log)) as web:
        start_urls = [*web.start_urls, _dead_url()]
        origins = [robots_origin(urljoin(url, "/robots.txt")) for url in start_urls]
        stale = encode(RobotsRecord(200, disallow_all, time.time() - 2 * 86400))
        control = ControlFile(job)
        try:
            for origin in origins:
                assert origin is not None
                control.save_robots(origin, stale, time.time() + STALE_LIMIT, time.time())
        finally:
            control.close()
        result = run_crawl(start_urls, {
            "ADDONS": FRONTIER_ADDON, "ROBOTSTXT_OBEY": True, "JOBDIR": str(job),
            "FRONTIER_MIN_DELAY": MIN_DELAY, "RETRY_ENABLED": True, "RETRY_TIMES": 1},
            allowed_domains=[*web.allowed_domains, "127.0.0.1"], workdir=tmp_path / "crawl")
        entries = read_log(log)
    assert result.returncode == 0, result.output[-3000:]
    # Each served robots.txt was asked twice (one retry) and answered 500; no page was asked.
    assert sorted(_robots_per_host(entries).values()) == [2] * HOSTS
    assert {(e.path, e.status) for e in entries} == {("/robots.txt", 500)}
    stats = result.stats
    assert stats["frontier/robots/stale_used"] == HOSTS + 1
    assert stats["robotstxt/forbidden"] == HOSTS + 1
    assert "frontier/robots/stored" not in stats and "frontier/robots/cached" not in stats
    control = ControlFile(job)
    try:  # the unreachable answers were not kept: the stale copies are still there
        assert [control.robots(str(o), time.time()) for o in origins] == [stale] * len(origins)
    finally:
        control.close()
