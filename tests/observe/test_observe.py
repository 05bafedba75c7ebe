"""Seeing inside a running crawl: the census, the progress line, the Prometheus endpoint.

The census is checked against the core frontier and the Redis scripts side by side,
and through the scheduler on every driver; the progress line and the metrics endpoint
in real crawls of the test web, against the server's own request log.
"""

from __future__ import annotations

import random
import re
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from scrapy import Request

from frontier_testweb import ServerProcess, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, CrawlResult, run_crawl
from scrapy_frontier.backends.redis.frontier import RedisFrontier
from scrapy_frontier.backends.redis.history import RedisHistoryStore
from scrapy_frontier.backends.sqlite.history import SQLiteHistoryStore
from scrapy_frontier.core.clock import FakeClock
from scrapy_frontier.core.frontier import Frontier
from scrapy_frontier.core.history import MemoryHistoryStore, PageRecord, SortedKeys
from scrapy_frontier.core.politeness import DelayPolicy
from scrapy_frontier.errors import FrontierConfigError
from scrapy_frontier.observe.census import Census, HostCounts
from scrapy_frontier.observe.progress import progress_line
from scrapy_frontier.settings import FrontierConfig
from tests.contract_helpers import DRIVERS, Driver, Run, driver_settings, spider_named
from tests.redis_server import free_port

inline_callbacks = pytest_twisted.inlineCallbacks
Gen = Generator[Any, Any, None]

WEB = ["--shape", "skewed", "--hosts", "6", "--largest", "20", "--latency", "0.01", "0.03"]
PROGRESS = re.compile(r"\[scrapy_frontier\.progress\] INFO: (.*)$", re.M)


# -- the census's parts ----------------------------------------------------------------------


def test_sorted_keys_count_below_matches_a_sorted_list() -> None:
    rng = random.Random(5)
    keys = SortedKeys(load=4)  # small chunks: many chunk boundaries
    present: list[tuple[float, int]] = []
    for _ in range(400):
        key = (float(rng.randrange(50)), rng.randrange(1000))
        if key in present:
            keys.remove(key)
            present.remove(key)
        else:
            keys.add(key)
            present.append(key)
        probe = (float(rng.randrange(52)), rng.randrange(1000))
        assert keys.count_below(probe) == sum(1 for k in present if k < probe)


def _record(fp: int, due: float, retired: str | None = None) -> PageRecord:
    record = PageRecord(fp=fp, url=f"http://h.example/{fp}", retired=retired)
    record.history.next_due = due
    record.history.interval = 0.0
    return record


def test_history_stores_count_due_pages_alike(tmp_path: Path, redis_client: Any,
                                              redis_prefix: str) -> None:
    stores = [MemoryHistoryStore(), SQLiteHistoryStore(tmp_path / "history.sqlite"),
              RedisHistoryStore(redis_client, redis_prefix + "history:")]
    records = [_record(fp, float(fp % 10), "gone" if fp % 7 == 0 else None)
               for fp in range(1, 60)]
    for store in stores:
        for record in records:
            store.put(record)
    for until in (-1.0, 0.0, 4.5, 9.0, 100.0):
        expected = sum(1 for r in records if r.retired is None and r.eligible <= until)
        assert [s.count_due(until) for s in stores] == [expected] * 3, until  # type: ignore[attr-defined]
        # A limit caps the count that reads (SQLite); the others may count exactly.
        capped = [min(5, s.count_due(until, 5)) for s in stores]  # type: ignore[attr-defined]
        assert capped == [min(5, expected)] * 3
    assert stores[1].count_due(100.0, 5) == 5  # type: ignore[attr-defined]
    for store in stores:
        store.close()


def _frontiers(redis_client: Any, prefix: str) -> tuple[Frontier[bytes], RedisFrontier]:
    """A core frontier and a Redis one with the same shape, rests of 0.2 s or more."""
    policy = DelayPolicy(10.0, 0.2, 60.0)
    core: Frontier[bytes] = Frontier(back_queues=2, back_queues_max=4, policy=policy,
                                     clock=FakeClock(1000.0))
    remote = RedisFrontier(redis_client, prefix, back_queues=2, back_queues_max=4,
                           policy=policy)
    return core, remote


def test_core_and_redis_census_agree(redis_client: Any, redis_prefix: str) -> None:
    core, remote = _frontiers(redis_client, redis_prefix)
    for host in ("a", "b", "c", "d", "e"):
        for i in range(3):
            core.push(host, 1, f"{host}{i}".encode())
            remote.push(host, 1, f"{host}{i}".encode())
    core_leases = [core.pop(), core.pop()]
    remote_leases = [remote.pop(), remote.pop()]
    assert None not in core_leases and None not in remote_leases
    states, shared = core.host_states(), remote.census()
    assert states.active == shared.active == 2
    assert states.queued == shared.queued_hosts == 2  # back queues: the floor of 2 hosts
    assert states.waiting == shared.waiting == 0  # both active hosts are fetching
    assert len(core) == shared.queued == 13 and core.front_len == shared.front == 9
    # The fetches end: each host rests (>= 0.2 s) before its next URL.
    core.complete(core_leases[0].ticket, 0.05)  # type: ignore[union-attr]
    remote.complete(remote_leases[0], 0.05)  # type: ignore[arg-type]
    states, shared = core.host_states(), remote.census()
    assert (states.active, states.resting) == (shared.active, shared.resting) == (1, 1)
    assert states.known == shared.known == 2
    assert states.retired == shared.retired == 0
    assert shared.fetched == core.stats.completed == 1
    assert shared.politeness_wait_seconds == pytest.approx(0.5, abs=1e-3)
    assert core.stats.politeness_hold_seconds == pytest.approx(0.5, abs=1e-3)
    core.retire("e")
    remote.retire("e")
    assert core.host_states().retired == remote.census().retired == 1


def test_host_states_see_the_rest_end() -> None:
    clock = FakeClock(0.0)
    core: Frontier[str] = Frontier(back_queues=4, policy=DelayPolicy(10.0, 1.0, 60.0),
                                   clock=clock)
    for i in range(2):
        core.push("a", 1, f"a{i}")
    lease = core.pop()
    assert lease is not None
    core.complete(lease.ticket, 0.01)
    assert core.host_states()[1:4] == (0, 0, 1)  # active, waiting, resting
    clock.advance(1.5)
    assert core.host_states()[1:4] == (0, 1, 0)


# -- the progress line ----------------------------------------------------------------------


def test_progress_line_is_short_even_for_a_big_crawl() -> None:
    big = Census(backend="redis", fetched=12_345_678, queued=98_765_432, in_flight=512,
                 waiting_for_queue=87_654_321,
                 hosts=HostCounts(known=1_234_567, active=512, waiting=1024, resting=123_456,
                                  blocked=1234, queued=234_567),
                 history_due=7_654_321)
    shared = Census(backend="redis", scope="worker", fetched=1_234_567, shared=big)
    line = progress_line(shared, 123_456.0, (512, 512))
    assert line == ("fetched 1.2M (123k/min), all 12.3M | queued 98.8M on 235k hosts | "
                    "hosts 512 active, 123k resting, 1234 blocked | "
                    "slots 512/512 (100%) | due 7.7M")
    assert len(line) < 150
    small = progress_line(Census(backend="memory", fetched=3, queued=1,
                                 hosts=HostCounts(queued=1)), None, None)
    assert small == "fetched 3 | queued 1 on 1 host | hosts 0 active, 0 resting, 0 blocked"


def test_observe_settings_are_validated() -> None:
    from scrapy.settings import Settings

    config = FrontierConfig.from_settings(Settings({}))
    assert config.observe.progress_interval == 30.0
    assert config.observe.metrics_port is None
    assert config.observe.metrics_host == "127.0.0.1"
    for name, value, says in (("FRONTIER_PROGRESS_INTERVAL", -1, ">= 0"),
                              ("FRONTIER_METRICS_PORT", 70000, "<= 65535"),
                              ("FRONTIER_METRICS_PORT", "x", "integer"),
                              ("FRONTIER_METRICS_HOST", "  ", "address")):
        with pytest.raises(FrontierConfigError, match=says) as info:
            FrontierConfig.from_settings(Settings({name: value}))
        assert name in str(info.value)


def _progress(result: CrawlResult) -> list[str]:
    return PROGRESS.findall(result.output)


def _number(line: str, pattern: str) -> int:
    found = re.search(pattern, line)
    assert found, (pattern, line)
    return int(found.group(1))


@pytest.mark.crawl
def test_progress_line_follows_a_real_crawl(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.05,
                "FRONTIER_PROGRESS_INTERVAL": 0.5}
    with ServerProcess(WEB, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=120)
    assert result.returncode == 0, result.output[-3000:]
    lines = _progress(result)
    fetched_by_server = len(read_log(log))
    assert fetched_by_server == len(web.expected)
    # One line per half second of crawling, and one at the close.
    assert len(lines) >= 3, result.output[-3000:]
    assert result.stats["frontier/progress/lines"] == len(lines)
    counts = [_number(line, r"^fetched (\d+)") for line in lines]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    assert all(len(line) < 120 for line in lines), lines
    last = lines[-1]
    assert counts[-1] == fetched_by_server == result.stats["frontier/completed"]
    assert _number(last, r"queued (\d+)") == 0
    assert "hosts 0 active, 0 resting, 0 blocked" in last
    # Somewhere in the middle the frontier held URLs and hosts rested.
    assert any(_number(line, r"queued (\d+)") > 0 for line in lines[:-1])
    assert any(_number(line, r"(\d+) resting") > 0 for line in lines[:-1])
    assert re.search(r"slots \d+/16 \(\d+%\)", lines[0]), lines[0]
    assert all(re.search(r"\d+/min", line) for line in lines[1:]), lines


@pytest.mark.crawl
def test_progress_interval_zero_logs_no_line(tmp_path: Path) -> None:
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0,
                "FRONTIER_PROGRESS_INTERVAL": 0}
    # Enabled, even a short crawl logs its closing line.
    small = ["--shape", "wide", "--hosts", "2", "--pages", "6", "--latency", "0.01", "0.02"]
    with ServerProcess(small, log_path=str(tmp_path / "server.jsonl")) as web:
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=120)
    assert result.returncode == 0, result.output[-3000:]
    assert result.stats["frontier/completed"] == len(web.expected)
    assert _progress(result) == []
    assert "frontier/progress/lines" not in result.stats


# -- metrics --------------------------------------------------------------------------------


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _value(scrape: dict[Any, float], name: str, scope: str, **labels: str) -> float:
    found = [v for (n, lbl), v in scrape.items() if n == name
             and dict(lbl).get("scope") == scope
             and all(dict(lbl).get(k) == want for k, want in labels.items())]
    assert len(found) == 1, (name, scope, labels, found)
    return found[0]


class Scraper(threading.Thread):
    """Scrapes the crawl's endpoint every 0.2 s; once the crawl is idle (tests/observe/linger.py),
    takes the final scrapes and lets the crawl close."""

    def __init__(self, port: int, linger: Path) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.linger = linger
        self.during: list[dict[Any, float]] = []
        self.after: list[dict[Any, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 180
        while not self.stop.is_set() and time.monotonic() < deadline:
            idle = (self.linger / "idle").exists()
            try:
                scrape = _scrape(self.port)
            except OSError:
                scrape = None  # not listening yet, or closed
            if scrape is not None:
                (self.after if idle else self.during).append(scrape)
            if idle and len(self.after) >= 2:
                (self.linger / "done").write_text("done")
                return
            self.stop.wait(0.2)


def _metrics_settings(backend: str, tmp_path: Path, redis_server: Any,
                      port: int, linger: Path) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.1, "FRONTIER_METRICS_PORT": port,
        "FRONTIER_PROGRESS_INTERVAL": 0, "EXTENSIONS": {"tests.observe.linger.LingerWhenIdle": 0},
        "LINGER_DIR": str(linger), "FRONTIER_BACKEND": backend,
    }
    if backend == "sqlite":
        settings["FRONTIER_PATH"] = str(tmp_path / "state")
    if backend == "redis":
        assert redis_server is not None
        name = f"metrics{port}"
        settings.update({"REDIS_URL": redis_server.url, "FRONTIER_REDIS_IDLE_GRACE": 1.0,
                         "FRONTIER_REDIS_KEY": f"{name}:frontier:",
                         "FRONTIER_REDIS_SEEN_KEY": f"{name}:seen:",
                         "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history:"})
    if backend == "redis-cluster":  # three partitions on a three-master cluster
        name = f"metrics{port}"
        settings.update({"FRONTIER_BACKEND": "redis", "REDIS_URL": redis_server.url,
                         "FRONTIER_REDIS_CLUSTER": True, "FRONTIER_REDIS_PARTITIONS": 3,
                         "FRONTIER_REDIS_IDLE_GRACE": 1.0,
                         "FRONTIER_REDIS_KEY": f"{name}:frontier:",
                         "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history:"})
    return settings


@pytest.mark.crawl
@pytest.mark.parametrize("backend", [*DRIVERS, "redis-cluster"])
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_metrics_endpoint_during_and_after_a_real_crawl(backend: str, tmp_path: Path,
                                                        request: pytest.FixtureRequest) -> None:
    redis_server = (request.getfixturevalue("redis_server") if backend == "redis" else
                    request.getfixturevalue("redis_cluster") if backend == "redis-cluster"
                    else None)
    log = tmp_path / "server.jsonl"
    linger = tmp_path / "linger"
    linger.mkdir()
    port = free_port()
    settings = _metrics_settings(backend, tmp_path, redis_server, port, linger)
    with ServerProcess(WEB, log_path=str(log)) as web:
        scraper = Scraper(port, linger)
        scraper.start()
        try:
            result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                               workdir=tmp_path / "crawl", timeout=180)
        finally:
            scraper.stop.set()
            scraper.join(10)
    assert result.returncode == 0, result.output[-3000:]
    fetched = len(read_log(log))
    assert fetched == len(web.expected) == result.stats["frontier/completed"]
    during, after = scraper.during, scraper.after
    assert len(during) >= 2, result.output[-3000:]
    assert len(after) >= 2, result.output[-3000:]
    assert result.stats["frontier/metrics/scrapes"] == len(during) + len(after)
    # On Redis the shared totals appear once the worker's I/O thread read them (the first
    # scrape asks for them): no series rather than a wrong one.
    during = [s for s in during if any(dict(lbl)["scope"] == "shared" for _, lbl in s)]
    assert len(scraper.during) - len(during) <= (3 if backend.startswith("redis") else 0)
    assert len(during) >= 2
    fetches = [_value(s, "scrapy_frontier_fetches_total", "shared") for s in during + after]
    assert fetches == sorted(fetches) and fetches[0] < fetches[-1]  # the counter grows
    waits = [_value(s, "scrapy_frontier_politeness_wait_seconds_total", "shared")
             for s in during + after]
    assert waits == sorted(waits) and waits[-1] > 0
    for scrape in during:
        for scope in ("worker", "shared"):
            queued = _value(scrape, "scrapy_frontier_queued_requests", scope)
            in_flight = _value(scrape, "scrapy_frontier_in_flight", scope)
            assert 0 <= queued <= len(web.expected) and 0 <= in_flight <= 16
            assert _value(scrape, "scrapy_frontier_fetches_total", scope) <= fetched
        states = {state: _value(scrape, "scrapy_frontier_hosts", "shared", state=state)
                  for state in ("active", "waiting", "resting", "blocked", "retired")}
        assert all(0 <= n <= 6 for n in states.values()), states
        assert states["active"] == _value(scrape, "scrapy_frontier_in_flight", "shared")
    assert any(_value(s, "scrapy_frontier_queued_requests", "shared") > 0 for s in during)
    final = after[-1]
    for scope in ("worker", "shared"):
        assert _value(final, "scrapy_frontier_queued_requests", scope) == 0
        assert _value(final, "scrapy_frontier_in_flight", scope) == 0
        assert _value(final, "scrapy_frontier_fetches_total", scope) == fetched
    if backend == "memory":
        # No page history outlives a memory crawl, so none is kept: no history series.
        assert not [k for k in final if k[0] in ("scrapy_frontier_recrawl_due_pages",
                                                 "scrapy_frontier_history_pages")]
    else:
        assert _value(final, "scrapy_frontier_recrawl_due_pages", "shared") == 0
        assert _value(final, "scrapy_frontier_history_pages", "shared") == fetched
    labels = next(dict(lbl) for (n, lbl) in final if n == "scrapy_frontier_in_flight")
    assert labels["backend"] == backend.removesuffix("-cluster")
    assert labels["spider"] == "testweb"
    # A partitioned crawl shows each partition too, adding up to the shared totals.
    parts = [(dict(lbl)["partition"], v) for (n, lbl), v in final.items()
             if n == "scrapy_frontier_fetches_total" and dict(lbl)["scope"] == "partition"]
    if backend == "redis-cluster":
        assert sorted(p for p, _ in parts) == ["0", "1", "2"]
        assert sum(v for _, v in parts) == fetched
    else:
        assert parts == []
    # Closed with the crawl.
    with pytest.raises(OSError):
        _scrape(port)


@pytest.mark.crawl
def test_metrics_without_prometheus_client_is_a_clear_startup_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The crawl process finds a prometheus_client that fails to import, as if missing.
    fake = tmp_path / "fake"
    (fake / "prometheus_client").mkdir(parents=True)
    (fake / "prometheus_client" / "__init__.py").write_text(
        "raise ImportError('No module named prometheus_client (injected)')\n")
    monkeypatch.setenv("PYTHONPATH", f"{fake}:{Path.cwd()}")
    log = tmp_path / "server.jsonl"
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_METRICS_PORT": free_port()}
    with ServerProcess(WEB, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=120)
    assert "scrapy-frontier cannot start: FRONTIER_METRICS_PORT needs the 'prometheus_client' " \
           "package, which cannot be imported" in result.output, result.output[-3000:]
    assert "pip install 'scrapy-frontier[metrics]'" in result.output
    assert read_log(log) == []  # nothing fetched


@pytest.mark.crawl
def test_metrics_port_in_use_is_a_clear_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log = tmp_path / "server.jsonl"
        settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_METRICS_PORT": port}
        with ServerProcess(WEB, log_path=str(log)) as web:
            result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                               workdir=tmp_path / "crawl", timeout=120)
    assert (f"scrapy-frontier cannot start: FRONTIER_METRICS_PORT={port}: cannot listen on "
            f"127.0.0.1:{port}") in result.output, result.output[-3000:]
    assert "choose a free one" in result.output
    assert read_log(log) == []


def test_missing_prometheus_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy_frontier.observe import metrics

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    with pytest.raises(FrontierConfigError, match=r"scrapy-frontier\[metrics\]"):
        metrics.MetricsServer(metrics.CensusCollector(lambda: Census("memory"), lambda: None,
                                                      spider="s", worker="w"),
                              "127.0.0.1", free_port()).start()


# -- through the scheduler, on every driver --------------------------------------------------


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    name: str = request.param
    state_dir = tmp_path / "state"
    if name == "redis":
        server = request.getfixturevalue("redis_server")
        prefix: str = request.getfixturevalue("redis_prefix")
        settings = driver_settings(name, state_dir=state_dir, redis_url=server.url,
                                   redis_prefix=prefix)
    else:
        settings = driver_settings(name, state_dir=state_dir)
    return Driver(name, settings, state_dir)


def _whole_census(run: Run) -> Generator[Any, Any, Census]:
    """The driver's census; on Redis, once a poll round read the shared one from now on."""
    from tests.contract_helpers import sleep

    asked = time.monotonic()
    census = run.scheduler.backend.inspection.census()
    for _ in range(100):
        if run.driver.name != "redis" or (census.shared_age is not None
                                          and time.monotonic() - census.shared_age >= asked):
            return census  # type: ignore[no-any-return]
        yield sleep(0.05)
        census = run.scheduler.backend.inspection.census()
    raise AssertionError("no fresh shared census within 5 s")


@inline_callbacks
def test_census_through_the_scheduler(driver: Driver) -> Gen:
    run = Run(driver)
    requests = [Request(f"http://{h}.example/{i}") for h in "ab" for i in range(3)]
    try:
        yield run.open()
        run.enqueue(*requests)
        census = yield from _whole_census(run)
        assert census.backend == driver.name
        whole = census.whole
        if driver.name == "redis":
            # Claimed ahead by this worker (FRONTIER_REDIS_PREFETCH): leased, in flight.
            assert whole.queued + whole.in_flight == len(requests)
            # The worker's own share is now; the shared totals as of their read.
            assert census.in_flight == len(run.scheduler.backend.queue.buffer) <= len(requests)
        else:
            assert (whole.queued, whole.in_flight) == (len(requests), 0)
        assert census.fetched == 0
        out = yield run.drain(expect=len(requests))
        assert len(out) == len(requests)
        # The engine asks again (its heartbeat): the scheduler acknowledges the last fetches.
        assert run.scheduler.next_request() is None
        census = yield from _whole_census(run)
        assert census.fetched == len(requests)
        whole = census.whole
        assert (whole.queued, whole.in_flight, whole.fetched) == (0, 0, len(requests))
        assert whole.hosts.active == whole.hosts.waiting == 0
    finally:
        yield run.close()


@inline_callbacks
def test_two_crawlers_in_one_process_serve_their_own_metrics(tmp_path: Path) -> Gen:
    from twisted.internet.threads import deferToThread

    ports = [free_port(), free_port()]
    runs = []
    for i, port in enumerate(ports):
        driver = Driver("memory", driver_settings("memory", state_dir=tmp_path / f"s{i}"),
                        tmp_path / f"s{i}")
        runs.append(Run(driver, spidercls=spider_named(f"crawler{i}"),
                        extra={"FRONTIER_METRICS_PORT": port}))
    try:
        for run in runs:
            yield run.open()
        for i, run in enumerate(runs):
            run.enqueue(*[Request(f"http://h{i}.example/{j}") for j in range(i + 2)])
        scrapes = []
        for port in ports:
            scrapes.append((yield deferToThread(_scrape, port)))
        for i, scrape in enumerate(scrapes):
            spiders = {dict(lbl)["spider"] for (_, lbl) in scrape}
            assert spiders == {f"crawler{i}"}
            assert _value(scrape, "scrapy_frontier_queued_requests", "shared") == i + 2
    finally:
        for run in runs:
            yield run.close()
    for port in ports:  # each stopped with its crawler
        with pytest.raises(OSError):
            yield deferToThread(_scrape, port)
