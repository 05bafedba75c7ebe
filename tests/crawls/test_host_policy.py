"""Every host at its own pace: a real crawl whose project gives one host four connections
(Scrapy's own ``DOWNLOAD_SLOTS``), judged from the server's log on every backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl

pytestmark = pytest.mark.crawl

WEB = ["--shape", "wide", "--hosts", "3", "--pages", "16", "--latency", "0.04", "0.08"]


def backend_settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest,
                     name: str) -> dict[str, Any]:
    if backend == "sqlite":
        return {"JOBDIR": str(tmp_path / "job")}
    if backend == "memory":
        return {}
    server = request.getfixturevalue(
        "redis_cluster" if backend == "redis-cluster" else "redis_server")
    # On a cluster each partition keeps its seen set under its own frontier keys.
    keys = {"FRONTIER_REDIS_CLUSTER": True, "FRONTIER_REDIS_PARTITIONS": 3} \
        if backend == "redis-cluster" else {"FRONTIER_REDIS_SEEN_KEY": f"{name}:seen:"}
    return {"FRONTIER_BACKEND": "redis", "REDIS_URL": server.url,
            "FRONTIER_REDIS_KEY": f"{name}:frontier:",
            "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history:", "FRONTIER_REDIS_IDLE_GRACE": 0.5,
            **keys}


# The memory backend keeps slots as SQLite does (one scheduler, one process), so SQLite speaks
# for both; the oldest leg runs SQLite only.
@pytest.mark.parametrize("backend", [
    "sqlite", pytest.param("redis", marks=pytest.mark.slow),
    pytest.param("redis-cluster", marks=pytest.mark.slow)])
def test_download_slots_give_one_host_four_connections_and_the_others_one(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        fast = web.allowed_domains[1]
        settings: dict[str, Any] = {
            "ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.1, "FRONTIER_MAX_DELAY": 1.0,
            "DOWNLOAD_SLOTS": {fast: {"concurrency": 4, "delay": 0}},
            **backend_settings(backend, tmp_path, request, f"slots-{backend}")}
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=180)
    assert result.returncode == 0, result.output[-3000:]
    assert f"DOWNLOAD_SLOTS['{fast}'] gives host '{fast}' 4 connection(s)" in result.output
    report = audit(read_log(log), expected=web.expected, factor=10.0, min_delay=0.1,
                   max_delay=1.0, connections={fast: 4})
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    # Up to 4 at once on the host of four, and every connection's gaps within the rule.
    assert report.polite, report.summary()
    assert report.max_in_flight[fast] == 4, report.max_in_flight
    others = {h: n for h, n in report.max_in_flight.items() if h != fast}
    assert others and max(others.values()) == 1, report.max_in_flight
    # The same log judged as one connection per host: the host of four breaks that rule.
    single = audit(read_log(log), expected=web.expected, factor=10.0, min_delay=0.1,
                   max_delay=1.0)
    assert single.overlaps > 0


def capacity_crawl(tmp_path: Path, workers: int, pages: int) -> tuple[Any, Any, Any]:
    """One host of ``workers`` server workers, crawled with FRONTIER_CAPACITY 4 on SQLite.
    The capacity rule is the core's; the memory backend keeps it as SQLite does."""
    log = tmp_path / "server.jsonl"
    web = ["--shape", "wide", "--hosts", "1", "--pages", str(pages), "--latency", "0.05",
           "0.05", "--workers", str(workers)]
    settings: dict[str, Any] = {"ADDONS": FRONTIER_ADDON, "FRONTIER_CAPACITY": 4,
                                "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_MAX_DELAY": 5.0,
                                "JOBDIR": str(tmp_path / "job")}
    with ServerProcess(web, log_path=str(log)) as served:
        result = run_crawl(served.start_urls, settings, allowed_domains=served.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=300)
        expected = served.expected
    assert result.returncode == 0, result.output[-3000:]
    entries = read_log(log)
    report = audit(entries, expected=expected, factor=10.0, min_delay=0.0, max_delay=5.0,
                   connections=4)
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert report.polite, report.summary()  # every connection kept the rule
    return result, report, entries


def test_capacity_gives_a_host_of_four_workers_more_connections(tmp_path: Path) -> None:
    result, report, entries = capacity_crawl(tmp_path, 4, pages=90)
    assert result.stats.get("frontier/capacity/rises", 0) >= 1, result.stats
    assert report.most_in_flight >= 2, report.summary()
    # More connections never made a request wait for a server worker beyond the probes'.
    waited = [e for e in entries if e.queued > 0.025]
    assert len(waited) <= result.stats.get("frontier/capacity/falls", 0), waited


@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_capacity_keeps_a_host_of_one_worker_at_one_but_for_its_probes(tmp_path: Path) -> None:
    result, report, entries = capacity_crawl(tmp_path, 1, pages=45)
    rises = result.stats.get("frontier/capacity/rises", 0)
    assert rises >= 1, result.stats  # it probed, and the probes fell back
    assert report.most_in_flight <= 2, report.summary()
    # Each probe at two connections costs at most one request that waits for the worker.
    waited = [e for e in entries if e.queued > 0.025]
    assert len(waited) <= rises, (rises, waited)
