"""The first page of a host waits for its robots.txt, yet reaches a project's downloader
middlewares once per fetch, and Scrapy's download stats count what went on the wire.

Real crawls of the test web with ROBOTSTXT_OBEY: the server's log is the ground truth.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from tests.crawls.counting_middleware import OUT_SETTING

pytestmark = pytest.mark.crawl

HOSTS = 4
MIN_DELAY = 0.3
WEB = ["--shape", "wide", "--hosts", str(HOSTS), "--pages", "6", "--latency", "0.005", "0.01"]


def _key(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return str(parts.hostname), parts.path + (f"?{parts.query}" if parts.query else "")


@pytest.mark.parametrize(("backend", "order"), [
    ("memory", 543), ("sqlite", 543), ("redis", 543),
    # Before RobotsTxtMiddleware (100): the first page waits in the downloader instead.
    ("memory", 50), ("redis", 50)])
def test_first_page_after_robots_txt_reaches_middlewares_once(
        tmp_path: Path, backend: str, order: int, request: pytest.FixtureRequest) -> None:
    counts = tmp_path / "counts.json"
    settings: dict[str, Any] = {
        "ADDONS": FRONTIER_ADDON, "ROBOTSTXT_OBEY": True, "FRONTIER_MIN_DELAY": MIN_DELAY,
        "DOWNLOADER_MIDDLEWARES": {"tests.crawls.counting_middleware.CountingMiddleware": order},
        OUT_SETTING: str(counts),
    }
    if backend == "sqlite":
        settings["JOBDIR"] = str(tmp_path / "job")
    if backend == "redis":
        server = request.getfixturevalue("redis_server")
        settings.update(FRONTIER_BACKEND="redis", REDIS_URL=server.url,
                        FRONTIER_REDIS_KEY="once:frontier:", FRONTIER_REDIS_SEEN_KEY="once:seen:",
                        FRONTIER_REDIS_HISTORY_KEY="once:history:",
                        FRONTIER_REDIS_IDLE_GRACE=0.5)
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl")
    assert result.returncode == 0, result.output[-3000:]
    entries = read_log(log)
    on_wire = Counter((e.host, e.path) for e in entries)
    seen = json.loads(counts.read_text())
    passed = Counter({_key(url): n for url, n in seen["requests"].items()})
    answered = Counter({_key(url): n for url, n in seen["responses"].items()})
    stats = result.stats
    print("on the wire", sum(on_wire.values()), "process_request", sum(passed.values()),
          "process_response", sum(answered.values()),
          "downloader/request_count", stats.get("downloader/request_count"),
          "exceptions", seen["exceptions"],
          "held", stats.get("frontier/robots/held"),
          "in place", stats.get("frontier/robots/held_in_place"))
    # Each fetch the server saw went through the project's middleware once, and nothing else.
    assert passed == on_wire, sorted((passed - on_wire).items())
    assert answered == on_wire
    assert not seen["exceptions"]
    assert stats["downloader/request_count"] == sum(on_wire.values())
    assert stats["downloader/response_count"] == sum(on_wire.values())
    assert not [k for k in stats if k.startswith("downloader/exception")], stats
    # Every host's robots.txt was fetched, and its first page waited the host's rest after it.
    robots = [e for e in entries if e.path == "/robots.txt"]
    assert len(robots) == HOSTS and stats["frontier/robots/fetches"] == HOSTS
    report = audit(entries, expected=web.expected, min_delay=MIN_DELAY, include_robots=True)
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    for e in robots:
        first = min((p for p in entries if p.host == e.host and p.path != "/robots.txt"),
                    key=lambda p: p.start)
        assert first.start >= e.end + MIN_DELAY
    # Each first page waited: queued again at the robots.txt step, or in the downloader
    # when a middleware of the project's sees requests before that step.
    assert stats["frontier/robots/held"] == HOSTS
    assert stats.get("frontier/robots/held_in_place", 0) == (HOSTS if order < 100 else 0)
    assert (result.output.count("sees requests before RobotsHoldMiddleware")
            == (1 if order < 100 else 0))
