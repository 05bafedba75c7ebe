"""``scrapy frontier`` on real crawls of the test web: inspected while they run, steered,
budgeted, and fed bad input. The command runs as users run it (a ``scrapy`` subprocess);
the server's request log is the judge."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, CrawlResult, run_crawl
from tests.redis_cluster import RedisClusterServers
from tests.redis_server import RedisServer, free_port

pytestmark = pytest.mark.crawl

_names = itertools.count()
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]
STATES = {"active", "resting", "blocked", "retired", "waiting"}


def frontier(args: list[str], settings: dict[str, Any], *, check: bool = True,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``scrapy frontier ARGS`` with the crawl's settings as -s options."""
    opts: list[str] = []
    for key, value in settings.items():
        if key in ("ADDONS",):
            continue
        opts += ["-s", f"{key}={json.dumps(value) if isinstance(value, dict) else value}"]
    proc = subprocess.run([*SCRAPY, "frontier", *args, *opts], capture_output=True, text=True,
                          timeout=120, cwd=cwd or Path("/tmp"))
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(proc.stdout)


class Backend:
    """The settings of a crawl on one backend, and what the command needs to find it."""

    def __init__(self, name: str, tmp: Path, redis_server: RedisServer | None,
                 cluster: RedisClusterServers | None = None) -> None:
        self.name = name
        #: What ``scrapy frontier status`` calls it.
        self.backend = name.removesuffix("-cluster")
        self.crawl: dict[str, Any] = {"ADDONS": FRONTIER_ADDON}
        self.command: dict[str, Any] = {}
        self.args: list[str] = []
        if name == "sqlite":
            self.crawl["JOBDIR"] = self.command["JOBDIR"] = str(tmp / "job")
        elif name == "redis":
            assert redis_server is not None
            n = next(_names)
            shared = {"FRONTIER_BACKEND": "redis", "REDIS_URL": redis_server.url,
                      "FRONTIER_REDIS_KEY": f"op{n}:frontier:",
                      "FRONTIER_REDIS_SEEN_KEY": f"op{n}:seen:",
                      "FRONTIER_REDIS_HISTORY_KEY": f"op{n}:history:"}
            self.crawl.update(shared, FRONTIER_REDIS_IDLE_GRACE=1.0)
            self.command.update(shared)
            self.args = ["--spider", "testweb"]
        elif name == "redis-cluster":
            # Three partitions on a three-master cluster: the commands read all of them.
            assert cluster is not None
            n = next(_names)
            shared = {"FRONTIER_BACKEND": "redis", "REDIS_URL": cluster.url,
                      "FRONTIER_REDIS_CLUSTER": True, "FRONTIER_REDIS_PARTITIONS": 3,
                      "FRONTIER_REDIS_KEY": f"opc{n}:frontier:",
                      "FRONTIER_REDIS_HISTORY_KEY": f"opc{n}:history:"}
            self.crawl.update(shared, FRONTIER_REDIS_IDLE_GRACE=1.0)
            self.command.update(shared)
            self.args = ["--spider", "testweb"]

    def run(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return frontier([*args, *self.args], self.command, **kwargs)


def crawl_in_thread(web: ServerProcess, settings: dict[str, Any], tmp: Path,
                    timeout: float = 180, stay_open_until: Path | None = None,
                    ) -> tuple[threading.Thread, dict[str, CrawlResult]]:
    out: dict[str, CrawlResult] = {}

    def run() -> None:
        out["result"] = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                                  workdir=tmp / "crawl", timeout=timeout,
                                  stay_open_until=stay_open_until)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def wait_until(check: Callable[[], bool], thread: threading.Thread, tries: int = 200) -> bool:
    """Poll ``check`` (every 0.1 s, bounded) while the crawl runs."""
    for _ in range(tries):
        if check():
            return True
        if not thread.is_alive():
            return False
        time.sleep(0.1)
    return False


def pages(log: Path, host: str | None = None) -> list[Any]:
    return [e for e in read_log(log) if e.path != "/robots.txt"
            and (host is None or e.host == host)]


# -- inspected while it runs -------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "redis", "redis-cluster"])
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_a_running_crawl_is_inspected_and_the_numbers_agree_with_the_server(
        backend: str, tmp_path: Path, redis_server: RedisServer,
        request: pytest.FixtureRequest) -> None:
    b = Backend(backend, tmp_path, redis_server,
                request.getfixturevalue("redis_cluster") if backend == "redis-cluster" else None)
    backend = b.backend
    # 12 pages a host at 0.6 s rests: the crawl lasts about 8 s, long enough for a status
    # read while it runs even when a busy machine takes seconds to start the command.
    b.crawl["FRONTIER_MIN_DELAY"] = b.command["FRONTIER_MIN_DELAY"] = 0.6
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "12", "--latency", "0.005",
                "0.01", "--seed", "3"]
    hosts_of_web: set[str] = set()
    live: list[dict[str, Any]] = []
    with ServerProcess(web_args, log_path=str(log)) as web:
        hosts_of_web = {e[0] for e in web.expected}
        thread, out = crawl_in_thread(web, b.crawl, tmp_path)
        for _ in range(40):  # bounded: the crawl takes about 8 s
            if not thread.is_alive():
                break
            proc = b.run(["status", "--json"], check=False)
            after = time.monotonic()
            if proc.returncode != 0:
                # Only before the crawl made its state: then the error says there is none.
                assert "no frontier" in proc.stderr, proc.stderr
                time.sleep(0.2)
                continue
            status = as_json(proc)
            status["_fetched_by_then"] = sum(1 for e in pages(log) if e.start <= after)
            live.append(status)
            rows = as_json(b.run(["hosts", "--json", "--sort", "next"]))
            for row in rows:
                assert row["host"] in hosts_of_web and row["state"] in STATES, row
                assert set(row) == {"host", "queued", "state", "next_contact_in",
                                    "last_fetch_s", "rest_s", "failures", "crawl_delay",
                                    "hints"}
        thread.join(timeout=200)
    result = out["result"]
    assert result.returncode == 0, result.output[-3000:]
    running = [s for s in live if s["queued"] + s["in_flight"] > 0]
    assert running, f"never saw the crawl running: {live}"
    for s in live:
        assert s["backend"] == backend
        assert set(s) == {"backend", "queued", "in_flight", "hosts", "seen", "history",
                          "_fetched_by_then"}
        assert set(s["hosts"]) == {"known", "active", "resting", "blocked", "retired"}
        # Every URL seen is queued, in flight, or done -- and done ones reached the server.
        # SQLite reads one snapshot. Redis reads the seen-set first, then the queues (several
        # partitions, one after another): a URL found between the two reads is queued but not
        # yet counted as seen, so there the count of done URLs may fall below 0, never above.
        done = s["seen"] - s["queued"] - s["in_flight"]
        assert done <= s["_fetched_by_then"], s
        if backend == "sqlite":
            assert done >= 0, s
        assert s["hosts"]["known"] <= 4
    fetched = len(pages(log))
    assert fetched == 48
    final = as_json(b.run(["status", "--json"]))
    assert final["queued"] == 0 and final["in_flight"] == 0, final
    assert final["seen"] == fetched and final["history"]["pages"] == fetched, final
    # SQLite remembers every host it rested; Redis forgets one with nothing left to do
    # once its rest is over (the workers close as soon as the last fetch is done, so some
    # may still be resting when this is read).
    if backend == "sqlite":
        assert final["hosts"]["known"] == 4
    else:
        assert final["hosts"]["known"] <= 4, final
        # Once their rests are over (each is 10 x a fetch of at most a few tens of ms).
        deadline = time.monotonic() + 30
        while final["hosts"]["known"] and time.monotonic() < deadline:
            time.sleep(0.2)
            final = as_json(b.run(["status", "--json"]))
        assert final["hosts"]["known"] == 0, final
    assert max(s["hosts"]["known"] for s in live) == 4
    # url: a fetched page, with its history; and one the crawl never saw.
    url = web.start_urls[0]
    host = urlsplit(url).hostname
    info = as_json(b.run(["url", url, "--json"]))
    assert info["seen"] is True and info["queued"] is False and info["host"] == host
    assert info["history"]["visits"] == 1 and info["history"]["next_due"]
    unknown = as_json(b.run(["url", url.rstrip("/") + "/never-linked", "--json"]))
    assert unknown["seen"] is False and unknown["history"] is None
    due = as_json(b.run(["due", "--limit", "5", "--json"]))
    assert len(due) == 5 and all(row["visits"] == 1 for row in due)
    assert "queued" in b.run(["status"]).stdout  # the table


# -- steering ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "redis", "redis-cluster"])
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_block_and_delay_reach_the_running_crawl_and_lose_nothing(
        backend: str, tmp_path: Path, redis_server: RedisServer,
        request: pytest.FixtureRequest) -> None:
    b = Backend(backend, tmp_path, redis_server,
                request.getfixturevalue("redis_cluster") if backend == "redis-cluster" else None)
    backend = b.backend
    b.crawl["FRONTIER_MIN_DELAY"] = 0.2
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "3", "--pages", "30", "--latency", "0.005",
                "0.01", "--seed", "5"]
    with ServerProcess(web_args, log_path=str(log)) as web:
        blocked, delayed, _ = sorted({e[0] for e in web.expected})
        thread, out = crawl_in_thread(web, b.crawl, tmp_path)
        assert wait_until(lambda: len(pages(log, blocked)) >= 2
                          and len(pages(log, delayed)) >= 2, thread)
        said = b.run(["block", blocked]).stdout
        assert "running crawl" in said or backend == "redis", said  # the lock file is seen
        b.run(["delay", delayed, "1.0"])
        steered = time.monotonic()
        listed = {r["host"]: r for r in as_json(b.run(["hosts", "--json"]))}
        assert listed[blocked]["state"] == "blocked"
        assert listed[delayed]["crawl_delay"] == 1.0
        time.sleep(4.0)
        unblocked = time.monotonic()  # before: on Redis the command acts at once
        b.run(["unblock", blocked])
        thread.join(timeout=300)
    result = out["result"]
    assert result.returncode == 0, result.output[-3000:]
    during = [e for e in pages(log, blocked) if steered + 2.0 < e.start < unblocked]
    assert not during, f"{len(during)} requests to the blocked host after 2 s"
    late = [e for e in pages(log, delayed) if e.start > steered + 2.0]
    assert len(late) >= 2
    gaps = [b2.start - a.end for a, b2 in zip(late, late[1:], strict=False)]
    assert min(gaps) >= 1.0, gaps
    report = audit(read_log(log), expected=web.expected, min_delay=0.2)
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()  # nothing lost


def test_steering_is_kept_in_the_state_and_applied_at_the_next_start(tmp_path: Path) -> None:
    """SQLite: a block set while no crawl runs holds from the first request of the next."""
    b = Backend("sqlite", tmp_path, None)
    b.crawl["FRONTIER_MIN_DELAY"] = 0.0
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--shape", "wide", "--hosts", "2", "--pages", "4", "--seed", "2"],
                       log_path=str(log)) as web:
        host = sorted({e[0] for e in web.expected})[0]
        missing = b.run(["block", host], check=False)
        assert missing.returncode == 1 and "no frontier state" in missing.stderr
        assert not (tmp_path / "job").exists()  # nothing created
        os.makedirs(tmp_path / "job")
        # A state must exist for the command: a first crawl of nothing makes one.
        result = run_crawl([], b.crawl, workdir=tmp_path / "first", timeout=60)
        assert result.returncode == 0, result.output[-2000:]
        b.run(["block", host, "--new-host", "--for", "3600"])
        result = run_crawl(web.start_urls, {**b.crawl, "CLOSESPIDER_TIMEOUT": 4},
                           allowed_domains=web.allowed_domains, workdir=tmp_path / "crawl",
                           timeout=60)
    assert result.returncode == 0, result.output[-2000:]
    assert not pages(log, host), "the blocked host was contacted"
    assert len(pages(log)) == 4  # the other host was crawled
    listed = {r["host"]: r for r in as_json(b.run(["hosts", "--json"]))}
    assert listed[host]["state"] == "blocked" and listed[host]["queued"] == 1
    assert listed[host]["next_contact_in"] > 3000


# A Cluster's steering (its partitioned control keys) is the block-and-delay test's; about 35 s
# each, so the policy is crawled on one Redis.
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_a_policy_steered_on_a_running_crawl_holds_until_cleared(
        backend: str, tmp_path: Path, redis_server: RedisServer,
        request: pytest.FixtureRequest) -> None:
    """``scrapy frontier policy``: one host is slowed to a rest of at least 1 s, then
    cleared; on SQLite another gets 3 connections (on Redis that is refused: a host's
    connections are fixed there). The server's log judges; nothing is lost."""
    b = Backend(backend, tmp_path, redis_server,
                request.getfixturevalue("redis_cluster") if backend == "redis-cluster" else None)
    for settings in (b.crawl, b.command):
        settings["FRONTIER_MIN_DELAY"] = 0.2
        settings["CONCURRENT_REQUESTS_PER_DOMAIN"] = 4  # the cap of a host's connections
    grace = 2.0 if backend == "sqlite" else 6.0  # a poll each second; a read each 5 s
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "3", "--pages", "120", "--latency", "0.005",
                "0.01", "--seed", "5"]
    with ServerProcess(web_args, log_path=str(log)) as web:
        slowed, wide, _ = sorted({e[0] for e in web.expected})
        thread, out = crawl_in_thread(web, b.crawl, tmp_path)
        assert wait_until(lambda: len(pages(log, slowed)) >= 2, thread)
        said = b.run(["policy", f"={slowed}", "min_delay=1.0"]).stdout
        assert "rest 1-60 s" in said, said
        steered = time.monotonic()
        if backend == "sqlite":
            b.run(["policy", wide, "concurrency=3"])
        else:
            refused = b.run(["policy", wide, "concurrency=3"], check=False)
            assert refused.returncode == 1 and "cannot change on a running crawl on Redis" \
                in refused.stderr, refused.stderr
        listed = b.run(["hosts", "--limit", "10"]).stdout
        assert "policy (steered): factor 10, rest 1-60 s" in listed, listed
        assert wait_until(lambda: len([e for e in pages(log, slowed)
                                       if e.start > steered + grace]) >= 3, thread, tries=600)
        assert b.run(["policy", f"={slowed}", "--clear"]).stdout.count("cleared") == 1
        cleared = time.monotonic()
        thread.join(timeout=300)
    result = out["result"]
    assert result.returncode == 0, result.output[-3000:]
    assert "Per-host policy steered (scrapy frontier policy): " in result.output, \
        result.output[-3000:]

    def gaps(entries: list[Any]) -> list[float]:
        return [later.start - e.end for e, later in zip(entries, entries[1:], strict=False)]

    slow = [e for e in pages(log, slowed) if steered + grace < e.start < cleared]
    assert len(slow) >= 3 and min(gaps(slow)) >= 1.0, gaps(slow)
    after = [e for e in pages(log, slowed) if e.start > cleared + grace]
    # Cleared: the crawl's rule again (0.2 s after these fetches), not 1 s.
    assert len(after) >= 3 and statistics.median(gaps(after)) < 0.9, gaps(after)
    if backend == "sqlite":
        several = [e for e in pages(log, wide) if e.start > steered + grace]
        # Host-wide gaps shorter than one connection's least rest: several connections.
        assert len(several) >= 3 and min(gaps(several)) < 0.15, gaps(several)
        report = audit(read_log(log), expected=web.expected, min_delay=0.2,
                       connections={wide: 3})
        assert report.polite, report.summary()
    report = audit(read_log(log), expected=web.expected, min_delay=0.2,
                   connections={wide: 3})
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()  # nothing lost


def test_a_policy_steered_while_no_crawl_runs_holds_from_the_next_start(
        tmp_path: Path) -> None:
    """SQLite: a steered policy is kept in the crawl's directory; the next run applies it
    from its first request, and a bad one is refused before anything is written."""
    b = Backend("sqlite", tmp_path, None)
    b.crawl["FRONTIER_MIN_DELAY"] = 0.0
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--shape", "wide", "--hosts", "2", "--pages", "5", "--latency",
                        "0.002", "0.004", "--seed", "2"], log_path=str(log)) as web:
        host = sorted({e[0] for e in web.expected})[0]
        os.makedirs(tmp_path / "job")
        result = run_crawl([], b.crawl, workdir=tmp_path / "first", timeout=60)
        assert result.returncode == 0, result.output[-2000:]
        for bad, why in ((["max_delay=0.1", "min_delay=1"], "must be >= min_delay"),
                         (["speed=2"], "is not FIELD=VALUE"),
                         (["budget=1.5"], "a whole number of pages")):
            refused = b.run(["policy", host, *bad], check=False)
            assert refused.returncode == 1 and why in refused.stderr, refused.stderr
        assert steering(tmp_path / "job") == ((0,), [])  # nothing written
        missing = b.run(["policy", host, "--clear"]).stdout
        assert "no steered entry has that key. Nothing was changed." in missing
        assert steering(tmp_path / "job") == ((0,), [])
        b.run(["policy", f"={host}", "min_delay=0.5"])
        said = b.run(["policy", f"={host}", "budget=3"]).stdout  # keeps the min_delay
        assert "factor 10, rest 0.5-60 s, 1 connection, budget 3" in said, said
        assert "applied when the crawl starts again" in said, said
        # The add-on opens Scrapy's downloader to 1 per host here: the command says so.
        other = sorted({e[0] for e in web.expected})[1]
        capped = b.run(["policy", f"={other}", "concurrency=2"]).stdout
        assert "1 connection (" in capped and "warning: policy['=" in capped, capped
        result = run_crawl(web.start_urls, b.crawl, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=60)
    assert result.returncode == 0, result.output[-2000:]
    steered = pages(log, host)
    assert len(steered) == 3  # its budget
    assert all(later.start - e.end >= 0.5 for e, later in zip(steered, steered[1:],
                                                              strict=False))
    other = [e for e in pages(log) if e.host != host]
    assert len(other) == 5
    assert "budget 3/3" in b.run(["hosts"]).stdout


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_steered_policy_budget_takes_a_capped_host_back(
        backend: str, tmp_path: Path, redis_server: RedisServer) -> None:
    """A host capped by its policy's budget is taken back when a steered entry raises it,
    by the command at once on Redis (atomically with the workers), by the crawl on SQLite."""
    b = Backend(backend, tmp_path, redis_server)
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--shape", "wide", "--hosts", "2", "--pages", "12", "--latency",
                        "0.002", "0.004", "--seed", "4"], log_path=str(log)) as web:
        trap = sorted({e[0] for e in web.expected})[0]
        for settings in (b.crawl, b.command):
            settings["FRONTIER_MIN_DELAY"] = 0.0
            settings["FRONTIER_HOST_POLICY"] = {trap: {"budget": 2}}
        if backend == "sqlite":
            os.makedirs(tmp_path / "job")
        result = run_crawl(web.start_urls, b.crawl, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=120)
        assert result.returncode == 0, result.output[-3000:]
        assert len(pages(log, trap)) == 2
        listed = {r["host"]: r for r in as_json(b.run(["hosts", "--json"]))}
        assert listed[trap]["state"] == "retired"
        said = b.run(["policy", trap, "budget=50"]).stdout
        assert "budget 50" in said, said
        if backend == "redis":
            assert "1 host(s) over budget taken back" in said, said
        else:  # the next run applies it before its first request
            result = run_crawl([], b.crawl, workdir=tmp_path / "again", timeout=60)
            assert result.returncode == 0, result.output[-3000:]
    listed = {r["host"]: r for r in as_json(b.run(["hosts", "--json"]))}
    assert listed.get(trap, {}).get("state") != "retired", listed.get(trap)


# -- budgets -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis"])
def test_a_budget_caps_a_trap_host_while_the_others_finish(
        backend: str, tmp_path: Path, redis_server: RedisServer) -> None:
    b = Backend(backend, tmp_path, redis_server)
    b.crawl["FRONTIER_MIN_DELAY"] = 0.0
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "8", "--latency", "0.002",
                "0.005", "--seed", "9", "--trap-host", "3"]
    with ServerProcess(web_args, log_path=str(log)) as web:
        hosts = sorted({e[0] for e in web.expected})
        trap = [h for h in hosts if h.endswith(".4")][0]
        if backend == "sqlite":
            # The per-host budget from the command, set before the crawl starts...
            os.makedirs(tmp_path / "job")
            assert run_crawl([], b.crawl, workdir=tmp_path / "first").returncode == 0
            b.run(["budget", trap, "15", "--new-host"])
        else:
            # ... or from the settings (a dict), with a global budget the others stay under.
            for settings in (b.crawl, b.command):
                settings["FRONTIER_HOST_BUDGETS"] = {trap: 15}
                settings["FRONTIER_HOST_BUDGET"] = 100
        result = run_crawl(web.start_urls, b.crawl, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=240)
    assert result.returncode == 0, result.output[-3000:]
    assert result.stats["finish_reason"] == "finished"
    assert len(pages(log, trap)) == 15
    others = {e for e in web.expected if e[0] != trap}
    fetched = {(e.host, e.path) for e in pages(log) if e.host != trap}
    assert fetched == others
    assert result.stats["frontier/budget/hosts"] == 1
    assert result.stats["frontier/budget/requests"] >= 2  # each page links to two more
    assert result.stats.get("frontier/retired_hosts") is None
    # One line says so, naming the host, on every backend.
    assert result.output.count("reached its budget") == 1, result.output[-3000:]
    assert f"Host {trap!r} reached its budget" in result.output
    if backend != "memory":
        listed = {r["host"]: r for r in as_json(b.run(["hosts", "--json"]))}
        assert listed[trap]["state"] == "retired" and listed[trap]["queued"] == 0
        assert "budget 15/15" in b.run(["hosts"]).stdout


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.slow)])
def test_a_learned_trap_is_noted_and_a_budget_releases_it_for_good(
        backend: str, tmp_path: Path, redis_server: RedisServer) -> None:
    """FRONTIER_TRAPS contains a trap host; ``hosts`` notes it; ``budget HOST N`` releases it,
    and a later run (a restart, or another worker) learns of the release and crawls the host
    to that budget, past a window, unjudged."""
    b = Backend(backend, tmp_path, redis_server)
    b.crawl.update(FRONTIER_MIN_DELAY=0.0, FRONTIER_TRAPS=True, FRONTIER_TRAPS_WINDOW=10,
                   FRONTIER_TRAPS_ALLOWANCE=5)
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--shape", "wide", "--hosts", "2", "--pages", "6", "--latency", "0.002",
                        "0.004", "--seed", "3", "--trap", "1:counter"], log_path=str(log)) as web:
        trap = web.allowed_domains[1]
        result = run_crawl(web.start_urls, b.crawl, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=120)
        assert result.returncode == 0, result.output[-3000:]
        first = len(pages(log, trap))
        assert 10 <= first <= 40  # the window, the allowance and the requests in flight
        assert {(e.host, e.path) for e in pages(log) if e.host != trap} == web.expected
        assert result.stats["frontier/traps/contained"] == 1
        assert result.output.count("looks like a crawler trap") == 1
        (line,) = [ln for ln in b.run(["hosts"]).stdout.splitlines() if trap in ln]
        assert "trap contained" in line, line
        b.run(["budget", trap, str(first + 25)])
        again = run_crawl([web.start_urls[1].replace("/p/0", "/counter/1000")], b.crawl,
                          allowed_domains=web.allowed_domains, workdir=tmp_path / "again",
                          timeout=60)
    assert again.returncode == 0, again.output[-3000:]
    assert len(pages(log, trap)) - first >= 20  # more than a window and an allowance
    assert again.stats.get("frontier/traps/released") == 1, again.stats
    assert f"Host {trap!r} was released from its trap containment" in again.output
    assert "looks like a crawler trap" not in again.output


# -- bad input -----------------------------------------------------------------------------


def steering(job: Path) -> tuple[Any, ...]:
    db = sqlite3.connect(job / "control.sqlite")
    try:
        return (db.execute("SELECT value FROM control_meta WHERE key = 'seq'").fetchone(),
                db.execute("SELECT * FROM controls ORDER BY host").fetchall())
    finally:
        db.close()


def test_bad_input_is_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    # The memory backend: nothing outside the crawl can read it.
    proc = frontier(["status"], {}, check=False)
    assert proc.returncode == 1 and "FRONTIER_BACKEND is 'memory'" in proc.stderr
    # A JOBDIR without state.
    proc = frontier(["status"], {"JOBDIR": str(tmp_path / "none")}, check=False)
    assert proc.returncode == 1 and "no frontier state" in proc.stderr
    assert not (tmp_path / "none").exists()
    # A state written by an incompatible version.
    job = tmp_path / "job"
    assert run_crawl([], {"ADDONS": FRONTIER_ADDON, "JOBDIR": str(job)},
                     workdir=tmp_path / "c").returncode == 0
    state = job / "frontier.sqlite"
    db = sqlite3.connect(state)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'version'")
    db.commit()
    db.close()
    before, controls = state.read_bytes(), steering(job)
    for args in (["status"], ["hosts"], ["block", "a.example", "--new-host"]):
        proc = frontier(args, {"JOBDIR": str(job)}, check=False)
        assert proc.returncode == 1 and "version '99'" in proc.stderr, proc.stderr
    assert state.read_bytes() == before and steering(job) == controls
    db = sqlite3.connect(state)
    db.execute("UPDATE meta SET value = '1' WHERE key = 'version'")
    db.commit()
    db.close()
    # An unknown host.
    proc = frontier(["block", "nowhere.example"], {"JOBDIR": str(job)}, check=False)
    assert proc.returncode == 1 and "not known to this crawl" in proc.stderr
    assert steering(job) == controls
    # A bad value.
    proc = frontier(["delay", "a.example", "-3", "--new-host"], {"JOBDIR": str(job)},
                    check=False)
    assert proc.returncode != 0 and steering(job) == controls
    frontier(["delay", "a.example", "3", "--new-host"], {"JOBDIR": str(job)})
    assert steering(job) != controls  # the check above can see a change
    # A Redis that is down.
    down = {"FRONTIER_BACKEND": "redis", "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "REDIS_PARAMS": json.dumps({"socket_connect_timeout": 1})}
    proc = frontier(["status", "--spider", "s"], down, check=False)
    assert proc.returncode == 1 and "Redis" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# -- the command line on a stopped crawl ---------------------------------------------------


def queued_urls(job: Path) -> list[tuple[str, str]]:
    from scrapy_frontier.codec import saved_url

    db = sqlite3.connect(job / "frontier.sqlite")
    try:
        rows = db.execute("SELECT host, data FROM front UNION ALL "
                          "SELECT host, data FROM back").fetchall()
    finally:
        db.close()
    return [(host, url) for host, data in rows if (url := saved_url(bytes(data)))]


def test_the_command_line_on_a_stopped_crawl_says_what_it_did(tmp_path: Path) -> None:
    b = Backend("sqlite", tmp_path, None)
    # A delay rule the command's own settings do not have (theirs: factor 10, floor 1 s).
    b.crawl.update(FRONTIER_DELAY_FACTOR=2, FRONTIER_MIN_DELAY=0.05, CLOSESPIDER_PAGECOUNT=5)
    job = tmp_path / "job"
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--shape", "wide", "--hosts", "3", "--pages", "8", "--latency",
                        "0.002", "0.004", "--seed", "4"], log_path=str(log)) as web:
        first = run_crawl(web.start_urls, b.crawl, allowed_domains=web.allowed_domains,
                          workdir=tmp_path / "first", timeout=120)
        assert first.returncode == 0, first.output[-3000:]
        queued = queued_urls(job)
        assert queued, "the first run was to stop with URLs left"

        # One line per subcommand in -h; an unknown one is named.
        helped = frontier(["-h"], {})
        for line in ("  status ", "  url URL ", "  retire HOST ", "  unretire HOST "):
            assert "\n" + line in helped.stdout, helped.stdout
        bogus = b.run(["bogus"], check=False)
        assert bogus.returncode != 0 and "unknown subcommand 'bogus'" in bogus.stderr

        # A stopped crawl has nothing in flight and no host active.
        status = as_json(b.run(["status", "--json"]))
        assert status["in_flight"] == 0 and status["hosts"]["active"] == 0
        assert status["queued"] == len(queued)

        # Rests by the crawl's own rule, saved with its state: 2 x the fetch, at least 0.05 s
        # (the command's settings would give 10 x, at least 1 s: never the same value).
        rows = as_json(b.run(["hosts", "--json"]))
        timed = [r for r in rows if r["last_fetch_s"] is not None]
        assert timed
        for row in timed:
            assert row["rest_s"] == pytest.approx(
                min(60.0, max(0.05, 2 * row["last_fetch_s"])), abs=2e-3), row

        # The same page as the seen-set's, with or without a fragment.
        host, url = queued[0]
        for asked in (url, url + "#part"):
            assert as_json(b.run(["url", asked, "--json"]))["queued"] is True, asked

        # retire, then unblock (which changes nothing and says why), then unretire.
        b.run(["retire", host])
        table = b.run(["hosts"]).stdout
        line = next(x for x in table.splitlines() if x.startswith(host + " "))
        assert "retired (by hand)" in line and "never" in line, table
        before = steering(job)
        said = b.run(["unblock", host]).stdout
        assert "not blocked, but retired (by hand)" in said and f"unretire {host}" in said
        assert steering(job) == before
        assert "taken back" in b.run(["unretire", host]).stdout
        assert "not retired" in b.run(["unretire", host]).stdout
        assert {r["host"]: r for r in as_json(b.run(["hosts", "--json"]))}[host]["state"] \
            != "retired"

        # A control file that refuses writes: one line, nothing changed.
        db = sqlite3.connect(job / "control.sqlite")
        db.execute("CREATE TRIGGER refuse BEFORE UPDATE ON control_meta BEGIN "
                   "SELECT RAISE(ABORT, 'attempt to write a readonly database'); END")
        db.commit()
        db.close()
        before = steering(job)
        refused = b.run(["block", host], check=False)
        assert refused.returncode == 1, refused.stderr
        assert "cannot write" in refused.stderr and "Nothing was changed" in refused.stderr
        assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
        assert steering(job) == before
        db = sqlite3.connect(job / "control.sqlite")
        db.execute("DROP TRIGGER refuse")
        db.commit()
        db.close()

        # The host retired and taken back before the next start keeps its queued URLs.
        settings = {k: v for k, v in b.crawl.items() if k != "CLOSESPIDER_PAGECOUNT"}
        second = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "second", timeout=120)
    assert second.returncode == 0, second.output[-3000:]
    assert {(e.host, e.path) for e in pages(log)} == set(web.expected)


# -- recrawl on demand ---------------------------------------------------------------------


@pytest.mark.crawl
@pytest.mark.slow  # five crawls per backend, of our own command: the newest leg runs it
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_recrawl_marks_pages_due_stopped_and_while_the_crawl_runs(
        backend: str, tmp_path: Path, redis_server: RedisServer) -> None:
    """Nothing is due for an hour after run 1. ``recrawl URL`` then brings one page back;
    ``recrawl --host`` given while no crawl runs brings a host back in the next run, and
    given while that run goes on, a second host joins it; ``--all`` brings back the rest."""
    b = Backend(backend, tmp_path, redis_server)
    b.crawl.update(FRONTIER_RECRAWL_INITIAL=3600.0, FRONTIER_RECRAWL_MIN=3600.0,
                   FRONTIER_MIN_DELAY=0.0)
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "3", "--pages", "6", "--latency", "0.05", "0.06",
                "--seed", "8", "--cross-links", "0"]

    def run(i: int) -> set[tuple[str, str]]:
        before = len(pages(log)) if log.exists() else 0
        result = run_crawl(web.start_urls, b.crawl, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / f"crawl{i}", timeout=180)
        assert result.returncode == 0, result.output[-3000:]
        return {(e.host, e.path) for e in pages(log)[before:]}

    with ServerProcess(web_args, log_path=str(log)) as web:
        first, second, _ = sorted({h for h, _ in web.expected})
        assert run(1) == web.expected
        assert run(2) == set()  # nothing is due
        url = web.start_urls[0]
        said = b.run(["recrawl", url]).stdout
        assert "recrawl" in said, said
        assert run(3) == {(urlsplit(url).hostname, urlsplit(url).path)}
        b.run(["recrawl", "--host", first])
        # Run 4 fetches the first host's pages and is kept open; meanwhile the second host
        # is marked too and joins the same run; then the run may end.
        release = tmp_path / "release"
        before, second_before = len(pages(log)), len(pages(log, second))
        thread, out = crawl_in_thread(web, b.crawl, tmp_path / "run4", stay_open_until=release)
        assert wait_until(lambda: len(pages(log)) > before, thread)
        b.run(["recrawl", "--host", second])
        assert wait_until(lambda: len(pages(log, second)) > second_before, thread,
                          tries=600), "the second host never joined the running crawl"
        release.write_text("done")
        thread.join(timeout=300)
        assert out["result"].returncode == 0, out["result"].output[-3000:]
        fourth = {(e.host, e.path) for e in pages(log)[before:]}
        assert {h for h, _ in fourth} == {first, second}, fourth
        assert fourth == {(h, p) for h, p in web.expected if h in (first, second)}
        b.run(["recrawl", "--all"])
        assert run(5) == web.expected
    bad = b.run(["recrawl"], check=False)
    assert bad.returncode != 0 and "recrawl takes one of" in bad.stderr + bad.stdout
