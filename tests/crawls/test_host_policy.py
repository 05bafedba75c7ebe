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


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "redis-cluster"])
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
