"""Traps, learned: a real crawl of a web with normal hosts and three trap hosts (an infinite
calendar, a session id in every link, pages that differ only in a counter), on every
backend. With FRONTIER_TRAPS on, each trap is contained within a few hundred pages, every
normal host is crawled in full, and no normal host is contained (judged from the server's
log). By default (FRONTIER_TRAPS off) nothing is contained: the traps run to the budgets
the test gives them."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from tests.crawls.test_host_policy import backend_settings

pytestmark = pytest.mark.crawl

TRAPS = {5: "calendar", 6: "session", 7: "counter"}
WEB = ["--shape", "skewed", "--hosts", "8", "--largest", "120", "--latency", "0.001", "0.003",
       *(arg for index, kind in TRAPS.items() for arg in ("--trap", f"{index}:{kind}"))]
#: "A few hundred pages": the window (50) and the allowance (20), with room for the requests
#: in flight when the budget is reached.
MOST_TRAP_PAGES = 200


# The memory backend contains through the same LocalControls as SQLite, so SQLite speaks for
# both in the oldest leg.
@pytest.mark.parametrize("backend", [
    pytest.param("memory", marks=pytest.mark.slow), "sqlite",
    pytest.param("redis", marks=pytest.mark.slow),
    pytest.param("redis-cluster", marks=pytest.mark.slow)])
def test_traps_are_contained_and_normal_hosts_crawled_in_full(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        settings: dict[str, Any] = {
            "ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0, "FRONTIER_DELAY_FACTOR": 1.0,
            "FRONTIER_MAX_DELAY": 1.0, "FRONTIER_TRAPS": True,
            **backend_settings(backend, tmp_path, request, f"traps-{backend}")}
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=180)
        traps = {web.allowed_domains[i]: kind for i, kind in TRAPS.items()}
        expected = web.expected
    assert result.returncode == 0, result.output[-3000:]
    entries = read_log(log)
    pages = Counter(e.host for e in entries if e.path != "/robots.txt")
    print({kind: pages[host] for host, kind in traps.items()}, result.elapsed)
    for host, kind in traps.items():
        assert 50 <= pages[host] <= MOST_TRAP_PAGES, (kind, pages[host])
    report = audit(entries, expected=expected, factor=1.0, min_delay=0.0, max_delay=1.0)
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert result.stats.get("frontier/traps/contained") == len(TRAPS), result.stats
    contained = set(re.findall(r"Host '([\d.]+)' looks like a crawler trap", result.output))
    assert contained == set(traps), (contained, traps)


#: The budget a default crawl gives each trap host: past the window (50), after which
#: FRONTIER_TRAPS would have contained it.
TRAP_BUDGET = 60
#: A smaller web of the same trap kinds, for the default crawl.
SMALL_WEB = ["--shape", "skewed", "--hosts", "4", "--largest", "30", "--latency", "0.001",
             "0.003", *(arg for index, kind in enumerate(TRAPS.values(), 1)
                        for arg in ("--trap", f"{index}:{kind}"))]


def test_a_default_crawl_contains_nothing(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ServerProcess(SMALL_WEB, log_path=str(log)) as web:
        traps = web.allowed_domains[1:]
        settings: dict[str, Any] = {
            "ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0, "FRONTIER_DELAY_FACTOR": 1.0,
            "FRONTIER_MAX_DELAY": 1.0,
            "FRONTIER_HOST_BUDGETS": dict.fromkeys(traps, TRAP_BUDGET)}
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=180)
        expected = web.expected
    assert result.returncode == 0, result.output[-3000:]
    entries = read_log(log)
    pages = Counter(e.host for e in entries if e.path != "/robots.txt")
    assert [pages[host] for host in traps] == [TRAP_BUDGET] * len(traps)
    report = audit(entries, expected=expected, factor=1.0, min_delay=0.0, max_delay=1.0)
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert result.stats.get("frontier/traps/contained") is None, result.stats
    assert "crawler trap" not in result.output
