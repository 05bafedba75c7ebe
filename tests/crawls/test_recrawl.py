"""Incremental recrawl on real crawls of the test web, judged from the server's log.

Three runs of ``scrapy crawl`` on one JOBDIR over pages that change as Poisson
processes (some also noisy). Run 1 fetches everything. Run 2, once every page is
due, fetches every page again, conditionally: the server answers 304 exactly for
the pages whose version did not change, and those never reach the spider. Run 3
starts while only some pages are due (by the next due times in history.sqlite)
and fetches exactly those.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from frontier_testweb.log import LogEntry

WEB = ["--shape", "wide", "--hosts", "3", "--pages", "6", "--latency", "0.005", "0.01",
       "--cross-links", "0", "--seed", "11", "--change-rate", "0.1",
       "--changing-fraction", "0.5", "--noisy-fraction", "0.4"]


def _pages(entries: list[LogEntry]) -> dict[tuple[str, str], LogEntry]:
    out: dict[tuple[str, str], LogEntry] = {}
    for e in entries:
        if e.path.startswith("/p/"):
            assert (e.host, e.path) not in out, f"{e.host}{e.path} fetched twice in one run"
            out[(e.host, e.path)] = e
    return out


def _crawl(web: ServerProcess, job: Path, log: Path, **extra: Any) -> tuple[Any, list[LogEntry]]:
    before = len(read_log(log)) if log.exists() else 0
    settings = {"ADDONS": FRONTIER_ADDON, "JOBDIR": str(job), "FRONTIER_MIN_DELAY": 0.0,
                "FRONTIER_DELAY_FACTOR": 1.0, "FRONTIER_RECRAWL_MIN": 0.2,
                "FRONTIER_RECRAWL_MAX": 600.0, "FRONTIER_RECRAWL_PREDICTOR": "timely_return",
                **extra}
    result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                       workdir=job.parent / f"crawl{before}")
    assert result.returncode == 0, result.output[-3000:]
    time.sleep(0.2)  # the server's log is flushed line by line; let the last lines land
    return result, read_log(log)[before:]


def _eligible(job: Path) -> dict[str, float]:
    import json

    db = sqlite3.connect(job / "history.sqlite")
    try:
        rows = db.execute("SELECT eligible, data FROM pages").fetchall()
    finally:
        db.close()
    return {json.loads(data)["u"]: due for due, data in rows}


@pytest.mark.crawl
def test_three_runs_recrawl_due_pages_with_conditional_get(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    job = tmp_path / "job"
    with ServerProcess(WEB, log_path=str(log)) as web:
        expected = {(h, p) for h, p in web.expected}
        # Run 1: every page, once, unconditionally.
        first, entries = _crawl(web, job, log, FRONTIER_RECRAWL_INITIAL=1.0)
        run1 = _pages(entries)
        assert set(run1) == expected
        assert not any(e.conditional for e in run1.values())
        assert first.stats["frontier/recrawl/pages_new"] == len(expected)

        # Run 2: everything is due after 1 s; all fetched again, with validators.
        time.sleep(1.2)
        second, entries = _crawl(web, job, log, FRONTIER_RECRAWL_INITIAL=30.0)
        run2 = _pages(entries)
        assert set(run2) == expected
        assert all(e.conditional for e in run2.values())
        unchanged = {k for k in expected if run2[k].version == run1[k].version}
        not_modified = {k for k, e in run2.items() if e.status == 304}
        print(f"run 2: {len(unchanged)} of {len(expected)} pages unchanged, "
              f"{len(not_modified)} answered 304")
        assert not_modified == unchanged
        assert 0 < len(unchanged) < len(expected)
        stats = second.stats
        assert stats["frontier/recrawl/fed"] == len(expected)
        assert stats["frontier/recrawl/not_modified"] == len(unchanged)
        saved = sum(run1[k].bytes for k in unchanged)
        assert stats["frontier/recrawl/bytes_saved"] == saved
        assert stats.get("frontier/recrawl/pages_changed", 0) == len(expected) - len(unchanged)
        # The 304s are no errors: HttpErrorMiddleware neither ignored nor counted them
        # (tests/crawls/test_recrawl_unchanged.py checks that no callback or errback saw them).
        assert stats["response_received_count"] == len(expected)
        assert not [k for k in stats if k.startswith("httperror/")]

        # Run 3: only the pages whose next due time has come are fetched.
        due = _eligible(job)
        time.sleep(2.5)  # unchanged pages (2 s intervals) fall due; changed ones wait 30 s
        launched = time.time()
        _, entries = _crawl(web, job, log)
        finished = time.time()
        run3 = _pages(entries)
        # Each host's own port, from its root URL (http://ADDRESS:PORT/p/0).
        port = {u.split("/")[2].split(":")[0]: u.split("/")[2].split(":")[1]
                for u in web.start_urls}
        fetched = {f"http://{h}:{port[h]}{p}" for h, p in run3}
        must = {url for url, t in due.items() if t <= launched}
        may = {url for url, t in due.items() if t <= finished}
        print(f"run 3: {len(must)} due at launch, {len(fetched)} fetched")
        assert must <= fetched <= may
        assert 0 < len(fetched) < len(expected)


@pytest.mark.crawl
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_continuous_mode_recrawls_as_pages_fall_due_and_stops_on_sigint(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    import json
    import signal
    import subprocess
    import sys

    from frontier_testweb.crawl import BASE_SETTINGS

    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        spec = tmp_path / "crawl.json"
        out = tmp_path / "result.json"
        settings = {**BASE_SETTINGS, "ADDONS": FRONTIER_ADDON,
                    "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_DELAY_FACTOR": 1.0,
                    "FRONTIER_RECRAWL": "continuous", "FRONTIER_RECRAWL_MIN": 0.5,
                    "FRONTIER_RECRAWL_INITIAL": 1.0, "FRONTIER_RECRAWL_MAX": 4.0}
        if backend == "sqlite":
            settings["JOBDIR"] = str(tmp_path / "job")
        else:
            server = request.getfixturevalue("redis_server")
            settings.update({"FRONTIER_BACKEND": "redis", "REDIS_URL": server.url,
                             "FRONTIER_REDIS_KEY": "continuous:frontier:",
                             "FRONTIER_REDIS_SEEN_KEY": "continuous:seen:",
                             "FRONTIER_REDIS_HISTORY_KEY": "continuous:history:"})
        spec.write_text(json.dumps({"start_urls": web.start_urls,
                                    "allowed_domains": web.allowed_domains,
                                    "settings": settings}))
        proc = subprocess.Popen(
            [sys.executable, "-m", "frontier_testweb.crawl", str(spec), str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(9.0)
            assert proc.poll() is None, "a continuous crawl must not end when idle"
            proc.send_signal(signal.SIGINT)
            output, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
        assert proc.returncode == 0, output[-3000:]
        stats = json.loads(out.read_text())
        entries = [e for e in read_log(log) if e.path.startswith("/p/")]
    assert stats["finish_reason"] == "shutdown"
    per_page: dict[tuple[str, str], int] = {}
    for e in entries:
        per_page[(e.host, e.path)] = per_page.get((e.host, e.path), 0) + 1
    print("fetches per page in 9 s:", sorted(per_page.values()))
    assert set(per_page) == {(h, p) for h, p in web.expected}
    # Every page came back at least once (first interval 1 s, at most 4 s).
    assert min(per_page.values()) >= 2
    assert stats["frontier/recrawl/fed"] >= len(per_page)
    # Politeness holds across recrawls too: one fetch at a time per host.
    from frontier_testweb import audit

    assert audit(entries, min_delay=0.0, factor=1.0).overlaps == 0


@pytest.mark.crawl
def test_no_history_without_state_and_lazy_simhash_with_it(tmp_path: Path) -> None:
    """Without JOBDIR the history could not outlive the run: none is kept, said once.
    With JOBDIR, each new page is hashed once, and a byte-identical refetch not at all."""
    web_args = ["--shape", "wide", "--hosts", "2", "--pages", "5", "--latency", "0.002",
                "0.005", "--cross-links", "0", "--seed", "5"]
    notice = "No page history is kept"
    log = tmp_path / "server.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        pages = len(web.expected)
        settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0,
                    "FRONTIER_DELAY_FACTOR": 1.0, "LOG_LEVEL": "INFO"}
        bare = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                         workdir=tmp_path / "bare")
        assert bare.returncode == 0, bare.output[-3000:]
        assert bare.output.count(notice) == 1
        assert bare.stats["response_received_count"] == pages
        assert not [k for k in bare.stats if k.startswith("frontier/recrawl/")]

        job = tmp_path / "job"
        kept = {**settings, "JOBDIR": str(job), "FRONTIER_RECRAWL_INITIAL": 0.3,
                "FRONTIER_RECRAWL_MIN": 0.2}
        first = run_crawl(web.start_urls, kept, allowed_domains=web.allowed_domains,
                          workdir=tmp_path / "first")
        assert first.returncode == 0, first.output[-3000:]
        assert notice not in first.output
        assert first.stats["frontier/recrawl/pages_new"] == pages
        assert first.stats["frontier/recrawl/simhash_computed"] == pages
        time.sleep(0.5)  # every page falls due; the server sends no validators
        second = run_crawl(web.start_urls, kept, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "second")
        assert second.returncode == 0, second.output[-3000:]
        assert second.stats["frontier/recrawl/fed"] == pages
        assert second.stats["frontier/recrawl/pages_unchanged"] == pages
        assert second.stats["frontier/recrawl/simhash_reused"] == pages
        assert "frontier/recrawl/simhash_computed" not in second.stats
