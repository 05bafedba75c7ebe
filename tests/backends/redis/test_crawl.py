"""The Redis backend on real crawls: one worker, then three workers with one killed.

Each worker is a real ``scrapy crawl`` process (the test web's crawl harness) with
``FRONTIER_BACKEND = "redis"`` against a private redis-server on 127.0.0.1. The
server's own log judges politeness across all workers together.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import BASE_SETTINGS, FRONTIER_ADDON, run_crawl
from scrapy_frontier.hostkey import url_host_key
from tests.redis_server import RedisServer

_names = itertools.count()


def _settings(redis_server: RedisServer, name: str, **extra: Any) -> dict[str, Any]:
    return {"ADDONS": FRONTIER_ADDON, "FRONTIER_BACKEND": "redis",
            "REDIS_URL": redis_server.url, "FRONTIER_REDIS_KEY": f"{name}:frontier:",
            "FRONTIER_REDIS_SEEN_KEY": f"{name}:seen:",
            "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history:", "FRONTIER_MIN_DELAY": 0.0,
            "FRONTIER_REDIS_IDLE_GRACE": 1.0, **extra}


@pytest.mark.crawl
def test_one_worker_crawls_the_web_politely_and_stops(redis_server: RedisServer,
                                                      tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "6", "--pages", "6", "--latency", "0.005", "0.01",
                "--seed", "4"]
    with ServerProcess(web_args, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, _settings(redis_server, f"one{next(_names)}"),
                           allowed_domains=web.allowed_domains, workdir=tmp_path / "crawl",
                           timeout=120)
    assert result.returncode == 0, result.output[-3000:]
    report = audit(read_log(log), expected=web.expected, min_delay=0.0)
    print(report.summary())
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert report.polite, report.summary()
    stats = result.stats
    assert stats["finish_reason"] == "finished"
    assert stats["frontier/backend"] == "redis"
    assert stats["frontier/queued"] == 0
    # The I/O thread keeps Redis off the reactor: no timer was held up for long.
    print("reactor stall max ms:", stats["frontier/reactor/stall_max_ms"])


def _worker(spec: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "frontier_testweb.crawl", str(spec), str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _spec(tmp_path: Path, web: Any, settings: dict[str, Any], **extra: Any) -> Path:
    """The crawl harness's spec file for a worker crawling ``web`` with ``settings``."""
    spec = tmp_path / "crawl.json"
    spec.write_text(json.dumps({"start_urls": web.start_urls,
                                "allowed_domains": web.allowed_domains,
                                "settings": settings, **extra}))
    return spec


def _reap(procs: list[subprocess.Popen[str]]) -> None:
    """Kill the workers still running and close their pipes."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        if p.stdout is not None:
            p.stdout.close()


def _wait_for(path: Path, procs: list[subprocess.Popen[str]], timeout: float) -> str:
    """Wait for a worker's freeze marker; fail at once if a worker has exited instead."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        exited = [p.returncode for p in procs if p.poll() is not None]
        assert not exited, f"a worker exited before the freeze: {exited}"
        assert time.monotonic() < deadline, f"no freeze marker after {timeout:.0f} s"
        time.sleep(0.05)
    return path.read_text()


@pytest.mark.crawl
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_three_workers_one_killed_share_one_polite_crawl(redis_server: RedisServer,
                                                         tmp_path: Path) -> None:
    """The victim crawls alone until its sixth request reaches the downloader, where it
    stops itself (SIGSTOP) holding that request's lease; the two others start then, and
    the victim is killed. Its heartbeat stopped with it, so its leases lapse (within
    FRONTIER_REDIS_LIVENESS, the lease timeout being the default 240 s) and the survivors
    finish the crawl politely."""
    from scrapy_frontier.backends.redis.frontier import RedisFrontier

    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "8", "--pages", "8", "--latency", "0.3", "0.5",
                "--seed", "9"]
    name = f"three{next(_names)}"
    client = redis_server.client()
    marker = tmp_path / "frozen.txt"
    with ServerProcess(web_args, log_path=str(log)) as web:
        settings = {**BASE_SETTINGS, **_settings(
            redis_server, name, FRONTIER_REDIS_LIVENESS=2.0, FRONTIER_DELAY_FACTOR=1.0)}
        (tmp_path / "victim").mkdir()
        victim_spec = _spec(tmp_path / "victim", web, settings, mark_at=6,
                            marker=str(marker), freeze=True)
        spec = _spec(tmp_path, web, settings, wait_for=str(marker))
        outs = [tmp_path / f"worker{i}.json" for i in range(3)]
        procs = [_worker(spec, outs[0]), _worker(victim_spec, outs[1]), _worker(spec, outs[2])]
        try:
            frozen_url = _wait_for(marker, procs, timeout=120)
            # The victim is stopped mid-fetch: the frozen request's host is leased.
            leased = {lease.host for lease in RedisFrontier(client, f"{name}:frontier:").leases()}
            procs[1].send_signal(signal.SIGKILL)
            codes = [p.wait(timeout=180) for p in procs]
        finally:
            _reap(procs)
        entries = read_log(log)
        expired = int(client.hget(f"{name}:frontier:stats", "expired") or 0)
    check_one_killed(codes, entries, web.expected, frozen_url, leased, expired, outs)


@pytest.mark.crawl
@pytest.mark.slow  # each fetch lasts 2.5 s
def test_a_live_workers_long_download_keeps_its_lease(redis_server: RedisServer,
                                                      tmp_path: Path) -> None:
    """Every fetch lasts 2.5 times the liveness window: the heartbeat, in its own thread,
    keeps renewing the leases, so none lapses, none is taken back, nothing is fetched
    twice."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "2", "--pages", "2", "--latency", "2.5", "2.5",
                "--seed", "5"]
    name = f"long{next(_names)}"
    client = redis_server.client()
    with ServerProcess(web_args, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, _settings(
            redis_server, name, FRONTIER_REDIS_LIVENESS=1.0, FRONTIER_DELAY_FACTOR=0.1),
            allowed_domains=web.allowed_domains, workdir=tmp_path / "crawl", timeout=120)
    assert result.returncode == 0, result.output[-3000:]
    report = audit(read_log(log), expected=web.expected, min_delay=0.0, factor=0.1)
    print(report.summary())
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    stats = result.stats
    assert stats["finish_reason"] == "finished"
    assert int(client.hget(f"{name}:frontier:stats", "expired") or 0) == 0
    assert "frontier/leases/reclaimed" not in stats and "frontier/leases/lost" not in stats
    assert "frontier/leases/lapsed" not in stats  # the fence never doubted a renewed lease
    # The worker left the live workers at its close.
    assert client.zcard(f"{name}:frontier:workers") == 0


@pytest.mark.crawl
def test_three_workers_of_an_ordinary_spider_fetch_each_start_url_once(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """Scrapy's default start(): start_urls as dont_filter requests, from every worker.
    Every worker has seen work, so each closes as soon as the shared frontier is empty,
    without the idle grace (set to 60 s here: a worker that waited it would show)."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "12", "--pages", "3", "--latency", "0.01", "0.03",
                "--seed", "3"]
    name = f"starts{next(_names)}"
    with ServerProcess(web_args, log_path=str(log)) as web:
        settings = {**BASE_SETTINGS, **_settings(redis_server, name,
                                                 FRONTIER_REDIS_IDLE_GRACE=60.0)}
        spec = _spec(tmp_path, web, settings, default_start=True)
        outs = [tmp_path / f"worker{i}.json" for i in range(3)]
        procs = [_worker(spec, out) for out in outs]
        try:
            codes = [p.wait(timeout=180) for p in procs]
        finally:
            _reap(procs)
        entries = read_log(log)
    assert codes == [0, 0, 0], codes
    report = audit(entries, expected=web.expected, min_delay=0.0)
    print(report.summary())
    assert report.coverage == 1.0, report.summary()
    assert report.duplicates == 0, report.summary()
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    stats = [json.loads(out.read_text()) for out in outs]
    # Every worker started all of them; all but one copy of each were skipped.
    skipped = sum(s.get("frontier/start/skipped", 0) for s in stats)
    assert skipped == 2 * len(web.start_urls), skipped
    last_fetch = max(entry.end for entry in entries)
    after = [s["harness/ended_at"] - last_fetch for s in stats]
    print("worker exits after the last fetch (s):", [round(a, 2) for a in after])
    assert all(s["finish_reason"] == "finished" for s in stats)
    assert max(after) < 60.0, after  # none waited the idle grace


@pytest.mark.crawl
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_a_redis_restart_mid_crawl_loses_nothing(tmp_path: Path) -> None:
    """Redis (with AOF persistence) is killed and restarted while a worker crawls: the
    worker logs the outage, keeps its requests, reconnects and finishes the crawl."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "8", "--latency", "0.02", "0.05",
                "--seed", "5"]
    server = RedisServer(persistence=True).start()
    try:
        with ServerProcess(web_args, log_path=str(log)) as web:
            settings = {**BASE_SETTINGS, **_settings(server, "restart",
                                                      FRONTIER_REDIS_IDLE_GRACE=2.0)}
            marker = tmp_path / "under-way.txt"
            spec = _spec(tmp_path, web, settings, mark_at=6, marker=str(marker))
            out = tmp_path / "worker.json"
            proc = _worker(spec, out)
            try:
                _wait_for(marker, [proc], timeout=120)  # the 6th of 32 requests
                port = server.port
                server.kill()
                time.sleep(2.0)  # the worker keeps running without Redis
                server.start(port=port)
                output, _ = proc.communicate(timeout=180)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate(timeout=30)
            entries = read_log(log)
    finally:
        server.stop()
    assert proc.returncode == 0, output[-3000:]
    assert "Redis is unreachable" in output and "Redis is back" in output
    report = audit(entries, expected=web.expected, min_delay=0.0)
    print(report.summary())
    assert report.coverage == 1.0, report.summary()
    stats = json.loads(out.read_text())
    assert stats["finish_reason"] == "finished"
    assert stats["frontier/redis/errors"] >= 1


@pytest.mark.crawl
def test_a_redis_restarted_without_persistence_stops_the_crawl(tmp_path: Path) -> None:
    """The shared state vanished mid-crawl: the worker stops and says so; it never
    reports "finished" with pages never fetched."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "12", "--latency", "0.05", "0.1",
                "--seed", "6"]
    server = RedisServer().start()
    try:
        with ServerProcess(web_args, log_path=str(log)) as web:
            settings = {**BASE_SETTINGS, **_settings(server, "vanish",
                                                      FRONTIER_REDIS_IDLE_GRACE=2.0)}
            marker = tmp_path / "under-way.txt"
            spec = _spec(tmp_path, web, settings, mark_at=6, marker=str(marker))
            out = tmp_path / "worker.json"
            proc = _worker(spec, out)
            try:
                _wait_for(marker, [proc], timeout=120)  # the 6th of 48 requests
                port = server.port
                server.kill()
                server.start(port=port)  # empty: no persistence
                output, _ = proc.communicate(timeout=120)
            finally:
                _reap([proc])
            entries = read_log(log)
    finally:
        server.stop()
    report = audit(entries, expected=web.expected, min_delay=0.0)
    print(report.summary())
    assert report.coverage < 1.0, "the crawl was meant to be cut short"
    stats = json.loads(out.read_text())
    assert stats["finish_reason"] == "frontier_redis_error", output[-3000:]
    assert "restarted without persistence" in output


@pytest.mark.crawl
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_redis_out_of_memory_stops_safely_and_the_rerun_finishes(tmp_path: Path) -> None:
    """maxmemory with noeviction reached mid-crawl: the worker stops with a message that says
    so and advises nothing that destroys data; once memory is raised, the same command
    finishes the crawl and every page is fetched."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "6", "--pages", "40", "--latency", "0.02", "0.04",
                "--seed", "7"]
    server = RedisServer().start()
    try:
        client = server.client()
        client.config_set("maxmemory-policy", "noeviction")
        with ServerProcess(web_args, log_path=str(log)) as web:
            # The stopped worker cannot hand its leases back (Redis refuses every write):
            # they expire, so keep the lease timeout and the rest after it short here.
            settings = {**BASE_SETTINGS, **_settings(
                server, "oom", FRONTIER_REDIS_IDLE_GRACE=1.0, FRONTIER_LEASE_TIMEOUT=4.0,
                FRONTIER_MAX_DELAY=1.0, DOWNLOAD_TIMEOUT=3)}
            marker = tmp_path / "under-way.txt"
            spec = _spec(tmp_path, web, settings, mark_at=10, marker=str(marker))
            out = tmp_path / "worker.json"
            proc = _worker(spec, out)
            try:
                _wait_for(marker, [proc], timeout=120)  # the 10th of 240 requests
                marker.unlink()  # the rerun marks it again; nobody waits for that
                used = int(client.info("memory")["used_memory"])
                client.config_set("maxmemory", used + 2_000)  # full in a moment
                output, _ = proc.communicate(timeout=120)
            finally:
                _reap([proc])
            stats = json.loads(out.read_text())
            assert stats["finish_reason"] == "frontier_redis_error", output[-3000:]
            assert "Redis is out of memory (maxmemory" in output, output[-3000:]
            assert "delete" not in output.lower() and "flushall" not in output.lower()
            client.config_set("maxmemory", 0)
            again = _worker(spec, tmp_path / "again.json")
            try:
                output2, _ = again.communicate(timeout=120)
            finally:
                _reap([again])
            entries = read_log(log)
        client.close()
    finally:
        server.stop()
    assert again.returncode == 0, output2[-3000:]
    final = json.loads((tmp_path / "again.json").read_text())
    assert final["finish_reason"] == "finished", output2[-3000:]
    report = audit(entries, expected=web.expected, min_delay=0.0)
    print(report.summary())
    assert report.coverage == 1.0, report.summary()


@pytest.mark.crawl
def test_scrapy_redis_redis_spider_feeds_the_shared_frontier(redis_server: RedisServer,
                                                            tmp_path: Path) -> None:
    """scrapy-redis's RedisSpider reads its start URLs from a Redis list; with the
    frontier on Redis the crawl it starts is polite and complete."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "5", "--latency", "0.005", "0.01",
                "--seed", "6"]
    name = f"rs{next(_names)}"
    client = redis_server.client()
    with ServerProcess(web_args, log_path=str(log)) as web:
        key = f"{name}:start_urls"
        client.rpush(key, *web.start_urls)
        settings = {**BASE_SETTINGS, **_settings(redis_server, name),
                    # RedisSpider never closes by itself; scrapy-redis's idle limit ends it.
                    "MAX_IDLE_TIME_BEFORE_CLOSE": 3}
        spec = tmp_path / "crawl.json"
        spec.write_text(json.dumps({"start_urls": [], "allowed_domains": web.allowed_domains,
                                    "settings": settings, "redis_key": key}))
        out = tmp_path / "result.json"
        proc = _worker(spec, out)
        try:
            output, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    assert proc.returncode == 0, output[-3000:]
    assert client.llen(key) == 0  # the spider took its start URLs
    report = audit(read_log(log), expected=web.expected, min_delay=0.0)
    print(report.summary())
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert report.polite, report.summary()
    assert json.loads(out.read_text())["frontier/backend"] == "redis"


@pytest.mark.crawl
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_page_history_in_redis_drives_conditional_recrawls(redis_server: RedisServer,
                                                           tmp_path: Path) -> None:
    """Two runs of a worker on one Redis: the second fetches the due pages with validators,
    and the server answers 304 exactly for the pages that did not change."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "3", "--pages", "5", "--latency", "0.005", "0.01",
                "--cross-links", "0", "--seed", "12", "--change-rate", "0.1",
                "--changing-fraction", "0.5"]
    name = f"hist{next(_names)}"
    settings = _settings(redis_server, name, FRONTIER_RECRAWL_MIN=0.2,
                         FRONTIER_RECRAWL_INITIAL=1.0, FRONTIER_RECRAWL_MAX=600.0)
    runs: list[list[Any]] = []
    with ServerProcess(web_args, log_path=str(log)) as web:
        for i in range(2):
            before = len(read_log(log)) if log.exists() else 0
            result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                               workdir=tmp_path / f"crawl{i}", timeout=120)
            assert result.returncode == 0, result.output[-3000:]
            time.sleep(1.3)  # every page falls due (1 s after its visit)
            runs.append([result.stats, read_log(log)[before:]])
    pages = {(h, p) for h, p in web.expected}
    first = {(e.host, e.path): e for e in runs[0][1] if e.path.startswith("/p/")}
    second = {(e.host, e.path): e for e in runs[1][1] if e.path.startswith("/p/")}
    assert set(first) == set(second) == pages
    assert all(e.conditional for e in second.values())
    unchanged = {k for k in pages if first[k].version == second[k].version}
    assert {k for k, e in second.items() if e.status == 304} == unchanged
    stats = runs[1][0]
    assert stats["frontier/recrawl/fed"] == len(pages)
    assert stats["frontier/recrawl/not_modified"] == len(unchanged)
    client = redis_server.client()
    assert client.hlen(f"{name}:history:pages") == len(pages)


def test_backpressure_stops_handing_out_while_the_backlog_is_full(monkeypatch: Any) -> None:
    from collections import deque
    from types import SimpleNamespace

    from scrapy.dupefilters import RFPDupeFilter
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.backends.redis import queue as redis_queue
    from scrapy_frontier.backends.redis.frontier import RedisLease
    from scrapy_frontier.backends.redis.round import Pushed
    from scrapy_frontier.scheduler import FrontierScheduler
    from scrapy_frontier.settings import FrontierConfig

    crawler = get_crawler(settings_dict={"FRONTIER_BACKEND": "redis"})
    config = FrontierConfig.from_settings(crawler.settings)
    sched = FrontierScheduler(crawler, config, RFPDupeFilter.from_crawler(crawler))
    crawler.engine = SimpleNamespace(_slot=SimpleNamespace(inprogress=set()))
    queue = sched.backend.queue
    assert isinstance(queue, redis_queue.RedisQueue)
    queue._codec = SimpleNamespace(decode=lambda data: __import__("scrapy").Request(
        "http://a.example/"))
    lease = RedisLease(ticket=1, host="a.example", item=b"\0" * 8 + b"x", level=4,
                       handed_at=0.0, deadline=9.0, ready_at=0.0)
    queue.buffer = deque([lease])
    monkeypatch.setattr(redis_queue, "MAX_BACKLOG", 3)
    pushed = Pushed(1, 1, True, True, False, "h", 4, b"")
    sched.backend.driver.next.pushes = [pushed] * 4
    assert sched.next_request() is None  # backlog over the limit: nothing handed out
    assert queue.counters["redis/backpressure"] == 1
    sched.backend.driver.next.pushes = []
    request = sched.next_request()
    assert request is not None and request.meta["frontier_lease"] == 1


def test_a_worker_closes_when_the_frontier_is_empty_and_waits_only_if_it_saw_no_work(
        monkeypatch: Any) -> None:
    """A worker that has seen work says "done" as soon as its rounds find nothing queued
    or leased. One that has seen none says "pending" until FRONTIER_REDIS_IDLE_GRACE after
    its start (its peers' start requests may still be on their way), then wakes the
    engine, which sees the crawl is over then, not at its 5 s heartbeat."""
    from scrapy.dupefilters import RFPDupeFilter
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.backends.redis import driver as redis_driver
    from scrapy_frontier.scheduler import FrontierScheduler
    from scrapy_frontier.settings import FrontierConfig

    crawler = get_crawler(settings_dict={"FRONTIER_BACKEND": "redis",
                                         "FRONTIER_REDIS_IDLE_GRACE": 2.0})
    config = FrontierConfig.from_settings(crawler.settings)
    sched = FrontierScheduler(crawler, config, RFPDupeFilter.from_crawler(crawler))
    driver = sched.backend.driver
    queue = sched.backend.queue
    assert isinstance(driver, redis_driver.RedisDriver)
    timers: list[tuple[float, Any]] = []

    class Timer:
        def cancel(self) -> None:
            pass

    def fake_call_later(delay: float, func: Any) -> Timer:
        timers.append((delay, func))
        return Timer()

    woken: list[bool] = []
    monkeypatch.setattr(redis_driver, "call_later", fake_call_later)
    monkeypatch.setattr(driver.ctx, "wake", lambda: woken.append(True))
    driver.view.idle_since = time.monotonic()
    driver.grace.opened_at = time.monotonic()
    assert queue.has_pending()  # no work seen yet, within the grace
    assert queue.has_pending()
    assert len(timers) == 1 and 1.9 < timers[0][0] <= 2.02  # one wake, at the grace's end
    timers[0][1]()
    assert woken == [True]
    driver.grace.opened_at = time.monotonic() - 2.5
    assert not queue.has_pending()  # the grace is over: the crawl is done
    driver.grace.opened_at = time.monotonic()
    driver.grace.seen_work = True
    assert not queue.has_pending()  # work was seen: done at once, no grace
    driver.view.idle_since = None
    assert queue.has_pending()  # the shared frontier holds work
    driver.view.idle_since = time.monotonic()
    # A census reader (metrics, progress line) sees the idle frontier before the end: a
    # census read before the cluster went idle holds the crawl open for one more round.
    kicked: list[bool] = []
    monkeypatch.setattr(driver, "kick", lambda poll=False: kicked.append(poll))
    driver.view.census_wanted = True
    driver.view.read_at = driver.view.idle_since - 0.5
    assert queue.has_pending() and kicked == [True]
    driver.view.read_at = driver.view.idle_since + 0.1  # a round read it since
    assert not queue.has_pending()


def check_one_killed(codes: list[int], entries: list[Any], expected: Any, frozen_url: str,
                     leased: set[str], expired: int, outs: list[Path]) -> None:
    """Three workers, the second killed while it held the lease of ``frozen_url``: the
    survivors finished a complete, polite crawl, repeating only what the dead one held."""
    frozen_host = url_host_key(frozen_url)
    assert codes[0] == 0 and codes[2] == 0 and codes[1] == -signal.SIGKILL, codes
    report = audit(entries, expected=expected, min_delay=0.0, factor=1.0)
    print(report.summary())
    print(f"frozen at {frozen_url}; leased then: {sorted(leased)}; expired: {expired}")
    # Either it was still leased when read, or a survivor had already expired its lease.
    assert frozen_host in leased or expired >= 1, leased
    assert report.coverage == 1.0, report.summary()
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    # The frozen lease is never completed: a survivor expires it.
    assert expired >= 1
    # Repeats only come from the killed worker's leases, each expired and handed out again.
    assert report.duplicates <= expired, report.summary()
    survivors = [json.loads(outs[i].read_text()) for i in (0, 2)]
    assert all(s["finish_reason"] == "finished" for s in survivors)
    assert all(s.get("frontier/dequeued", 0) > 0 for s in survivors)
    # The survivors took back every expired lease, and say so in their stats.
    assert sum(s.get("frontier/leases/reclaimed", 0) for s in survivors) == expired
