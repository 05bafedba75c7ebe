"""Unchanged pages on a recrawl are not failures, on real crawls of the test web.

Two runs of a spider that puts an errback on every request, on one JOBDIR. The second run
fetches every page again with validators; the server answers 304 exactly for the pages whose
version did not change (its log is the ground truth). Those pages reach no errback and no
callback, and ``scrapy_frontier.signals.page_unchanged`` names exactly them; with
``FRONTIER_RECRAWL_PASS_304`` the callback gets them as well.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, read_log
from frontier_testweb.crawl import BASE_SETTINGS, FRONTIER_ADDON
from frontier_testweb.log import LogEntry
from tests.crawls.test_recrawl import WEB

ROOT = Path(__file__).resolve().parents[2]


def _crawl(web: ServerProcess, state: dict[str, Any], log: Path, workdir: Path, **extra: Any
           ) -> tuple[dict[str, Any], dict[str, LogEntry]]:
    """One run of the errback spider on ``state`` (the backend's settings); its records and
    the server's log of its page fetches, by URL."""
    before = len(read_log(log)) if log.exists() else 0
    settings = {**BASE_SETTINGS, "ADDONS": FRONTIER_ADDON, "RETRY_ENABLED": True,
                "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_DELAY_FACTOR": 1.0,
                "FRONTIER_RECRAWL_MIN": 0.2, "FRONTIER_RECRAWL_MAX": 600.0,
                "FRONTIER_RECRAWL_PREDICTOR": "timely_return", **state, **extra}
    workdir.mkdir(parents=True)
    out = workdir / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.crawls.unchanged_spider", json.dumps(settings), str(out),
         *web.start_urls], cwd=ROOT, capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    (workdir / "output.txt").write_text(output)
    assert proc.returncode == 0, output[-3000:]
    time.sleep(0.2)  # the server's log is flushed line by line; let the last lines land
    port = web.start_urls[0].split("/")[2].split(":")[1]
    pages: dict[str, LogEntry] = {}
    for e in read_log(log)[before:]:
        if e.path.startswith("/p/"):
            url = f"http://{e.host}:{port}{e.path}"
            assert url not in pages, f"{url} fetched twice in one run"
            pages[url] = e
    records = json.loads(out.read_text())
    records["output"] = output
    assert records["stats"].get("finish_reason") == "finished", output[-3000:]
    assert "Ignoring response" not in output
    return records, pages


def _no_failure_counted(records: dict[str, Any]) -> None:
    """No Scrapy component counted or logged an error."""
    stats = records["stats"]
    failures = [k for k in stats if k.startswith(("httperror/", "spider_exceptions/",
                                                   "downloader/exception", "retry/",
                                                   "log_count/ERROR"))]
    assert failures == [], {k: stats[k] for k in failures}
    # Not even a warning: answers without a body (304s) do not count as answers that gave
    # FRONTIER_TCP_TIMING no socket.
    warned = [line for line in records["output"].splitlines() if "] WARNING: " in line]
    assert warned == []


@pytest.mark.crawl
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.slow)])
def test_unchanged_pages_reach_no_errback_and_the_signal_names_them(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    log = tmp_path / "server.jsonl"
    if backend == "sqlite":
        state: dict[str, Any] = {"JOBDIR": str(tmp_path / "job")}
    else:
        server = request.getfixturevalue("redis_server")
        state = {"FRONTIER_BACKEND": "redis", "REDIS_URL": server.url,
                 "FRONTIER_REDIS_KEY": "unchanged:frontier:",
                 "FRONTIER_REDIS_SEEN_KEY": "unchanged:seen:",
                 "FRONTIER_REDIS_HISTORY_KEY": "unchanged:history:",
                 "FRONTIER_REDIS_IDLE_GRACE": 0.5}
    with ServerProcess(WEB, log_path=str(log)) as web:
        first, run1 = _crawl(web, state, log, tmp_path / "run1", FRONTIER_RECRAWL_INITIAL=1.0)
        assert len(run1) == len(web.expected)
        assert first["failures"] == [] and first["unchanged"] == []
        if backend == "sqlite":  # the same history for a second run with 304s passed
            shutil.copytree(tmp_path / "job", tmp_path / "job304")
        time.sleep(1.2)  # every page is due after 1 s
        second, run2 = _crawl(web, state, log, tmp_path / "run2", FRONTIER_RECRAWL_INITIAL=30.0)
        if backend == "sqlite":
            passing, run2b = _crawl(web, {"JOBDIR": str(tmp_path / "job304")}, log,
                                    tmp_path / "run2b", FRONTIER_RECRAWL_INITIAL=30.0,
                                    FRONTIER_RECRAWL_PASS_304=True)

    runs = [run2] if backend == "redis" else [run2, run2b]
    for run in runs:
        assert set(run) == set(run1) and all(e.conditional for e in run.values())
        # The server answers 304 exactly for the pages whose version did not change.
        assert {u for u, e in run.items() if e.status == 304} == {
            u for u, e in run.items() if e.version == run1[u].version}
    unchanged = {u for u, e in run2.items() if e.status == 304}
    print(f"run 2: {len(unchanged)} of {len(run2)} pages unchanged; errback calls: "
          f"{len(second['failures'])}")
    assert 0 < len(unchanged) < len(run2)

    # By default: no errback, no callback for them; the signal names each once.
    assert second["failures"] == []
    assert sorted(second["unchanged"]) == sorted(unchanged)
    assert {u for u, _ in second["parsed"]} == set(run2) - unchanged
    assert all(status == 200 for _, status in second["parsed"])
    stats = second["stats"]
    assert stats["frontier/recrawl/not_modified"] == len(unchanged)
    assert stats["downloader/response_status_count/304"] == len(unchanged)
    _no_failure_counted(second)
    if backend == "redis":
        return

    # FRONTIER_RECRAWL_PASS_304: the callback gets them too (and the signal still names them).
    unchanged_b = {u for u, e in run2b.items() if e.status == 304}
    assert passing["failures"] == []
    assert sorted(passing["unchanged"]) == sorted(unchanged_b)
    assert sorted(u for u, s in passing["parsed"] if s == 304) == sorted(unchanged_b)
    assert {u for u, s in passing["parsed"] if s == 200} == set(run2b) - unchanged_b
    assert passing["stats"]["frontier/recrawl/not_modified"] == len(unchanged_b)
    _no_failure_counted(passing)
