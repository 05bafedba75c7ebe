"""Fencing on Redis: a worker paused past its leases never fetches under them.

A worker stopped (SIGSTOP: a long GC pause, a VM migration, a laptop lid) for longer than
``FRONTIER_REDIS_LIVENESS`` loses its leases: the others take its hosts back and fetch
them. When it is continued, it must not send what it claimed before the pause: it cannot
prove it still holds those leases, so it gives them back unfetched, logs and counts them.
The test web's own log, on its own clock, judges the crawl of all three workers together.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
import redis
from scrapy import Request

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import BASE_SETTINGS
from scrapy_frontier.backends.ports import QueuePort
from scrapy_frontier.backends.redis.fence import LeaseFence, fence_clock
from scrapy_frontier.backends.redis.frontier import HAND_BACK, RedisFrontier
from scrapy_frontier.backends.redis.heartbeat import Heartbeat
from scrapy_frontier.backends.redis.partitions import Layout, open_frontier
from scrapy_frontier.core import DelayPolicy
from scrapy_frontier.meta import LAPSED_META
from tests.backends.redis.test_crawl import _reap, _settings, _spec, _wait_for, _worker
from tests.contract_helpers import (
    ContractSpider,
    Driver,
    Run,
    drain,
    driver_settings,
    sleep,
    urls,
)
from tests.invariants import check_redis_frontier
from tests.redis_server import RedisServer

_names = itertools.count()
Gen = Generator[Any, Any, None]


def _until(done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``done`` until it holds; fail after ``timeout`` s (a guard, not a measure)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f} s"
        time.sleep(0.05)


@pytest.mark.crawl
@pytest.mark.slow  # 10 s or more
def test_a_worker_paused_past_its_leases_gives_them_back_unfetched(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """Three workers; one crawls alone until it stops itself (SIGSTOP) as a round lands
    with requests claimed ahead of their hosts' ready times, holding no other lease; the
    two others start then. It stays stopped until the
    others have taken every one of its leases back (read in Redis) and fetched their URLs
    (read in the server's log), then it is continued. It sends none of them: at the server,
    no overlap, no short gap, no URL fetched twice, every page fetched; and it counts the
    leases it gave back (``frontier/leases/lapsed``) and names their hosts in a warning."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "6", "--pages", "30", "--latency", "0.03",
                "0.06", "--cross-links", "0", "--seed", "21"]
    name = f"zombie{next(_names)}"
    client = redis_server.client()
    marker = tmp_path / "frozen.json"
    with ServerProcess(web_args, log_path=str(log)) as web:
        settings = {**BASE_SETTINGS, **_settings(
            redis_server, name, FRONTIER_REDIS_LIVENESS=2.0, FRONTIER_DELAY_FACTOR=5.0)}
        (tmp_path / "victim").mkdir()
        victim_spec = _spec(tmp_path / "victim", web, settings, freeze_claimed_ahead=3,
                            marker=str(marker))
        # The others start once it is stopped (as in test_redis_crawl's kill test): none can
        # finish the crawl before the moment comes.
        spec = _spec(tmp_path, web, settings, wait_for=str(marker))
        outs = [tmp_path / f"worker{i}.json" for i in range(3)]
        procs = [_worker(spec, outs[0]), _worker(victim_spec, outs[1]), _worker(spec, outs[2])]
        try:
            held = json.loads(_wait_for(marker, procs, timeout=120))
            assert any(lease["ahead"] for lease in held), held
            frontier = RedisFrontier(client, f"{name}:frontier:")
            mine = {(lease["host"], lease["ticket"]) for lease in held}
            # Stopped, it renews nothing: its leases lapse and the others take them back...
            _until(lambda: not mine & {(lease.host, lease.ticket)
                                       for lease in frontier.leases()},
                   "the others taking the stopped worker's leases back")
            urls = {(urlsplit(lease["url"]).hostname, urlsplit(lease["url"]).path)
                    for lease in held}
            # ... and fetch their URLs, before it is continued.
            _until(lambda: urls <= {(e.host, e.path) for e in read_log(log)},
                   "the others fetching the stopped worker's URLs")
            procs[1].send_signal(signal.SIGCONT)
            victim_output, _ = procs[1].communicate(timeout=180)
            codes = [p.wait(timeout=180) for p in procs]
        finally:
            _reap(procs)
        entries = read_log(log)
    assert codes == [0, 0, 0], (codes, victim_output[-3000:])
    report = audit(entries, expected=web.expected, min_delay=0.0, factor=5.0)
    print(report.summary())
    print("held when stopped:", held)
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    assert report.duplicates == 0, report.summary()
    assert report.coverage == 1.0, report.summary()
    victim = json.loads(outs[1].read_text())
    assert victim["finish_reason"] == "finished"
    # Every lease it held when stopped was given back unfetched, counted once.
    assert victim.get("frontier/leases/lapsed") == len(held), victim_output[-3000:]
    warned = [line for line in victim_output.splitlines()
              if "WARNING" in line and "lapsed" in line]
    assert warned, victim_output[-3000:]
    assert all(any(lease["host"] in line for line in warned) for lease in held), warned


# -- the parts: the fence, the renewal, the hand-back -----------------------------------


def test_the_fence_proves_a_lease_from_the_sends_redis_confirmed() -> None:
    """A claim proves its lease for the window from the round's send, less the margin; a
    confirmed renewal moves that from its own send, never past the claim + the lease
    timeout; a lease found lost, forgotten or unknown is not proven."""
    now = [100.0]
    fence = LeaseFence(4.0, 10.0, clock=lambda: now[0])
    assert fence.margin == 1.0  # one heartbeat: a quarter of the window
    fence.claimed([1, 2, 3], sent_at=100.0)
    now[0] = 102.9
    assert fence.holds(1) and fence.holds(2)
    now[0] = 103.0
    assert not fence.holds(1)
    fence.renewed([1, 2], sent_at=102.5)  # an answer that came late counts from its send
    assert fence.holds(1) and fence.left(1) == pytest.approx(2.5)
    fence.renewed([1], sent_at=101.0)  # an older renewal answered later: moves nothing back
    assert fence.left(1) == pytest.approx(2.5)
    fence.renewed([1], sent_at=108.0)
    assert fence.left(1) == pytest.approx(110.0 - 1.0 - 103.0)  # capped: claim + timeout
    fence.lost([2])
    assert not fence.holds(2)
    fence.renewed([2], sent_at=103.0)  # (a renewal's own report of it comes first)
    fence.forget([1, 2, 3])
    assert not fence.holds(1) and not fence.holds(3) and not fence.holds(99)
    fence.renewed([3], sent_at=103.0)  # completed meanwhile: not brought back
    assert len(fence) == 0 and not fence.holds(3)
    # Without a heartbeat the window is the lease timeout; the margin stays a beat's worth.
    assert LeaseFence(0.0, 240.0).margin == 1.25
    assert fence_clock() <= fence_clock()


def test_a_renewal_says_which_leases_are_gone_and_the_fence_drops_them(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    """The heartbeat's renewal reports the leases it found gone (taken back by another
    worker): the fence stops proving them at once and the worker is told which; the ones
    renewed are proven from the renewal's send."""
    layout = Layout(redis_prefix, redis_prefix + "seen:", redis_prefix + "history:")
    mine = open_frontier(redis_client, layout, policy=DelayPolicy(0.0, 0.0, 1.0),
                         lease_timeout=60.0, liveness=0.3)
    other = open_frontier(redis_client, layout, policy=DelayPolicy(0.0, 0.0, 1.0),
                          lease_timeout=60.0, liveness=0.3)
    mine.parts[0].push("a.example", 1, b"a")
    mine.parts[0].push("b.example", 1, b"b")
    kept, taken = mine.pop(), mine.pop()
    assert kept is not None and taken is not None
    fence = LeaseFence(0.3, 60.0)
    fence.claimed([kept.ticket, taken.ticket], fence.clock())
    told: list[list[int]] = []
    leases = [(kept.host, kept.ticket)]
    heartbeat = Heartbeat(mine, lambda: list(leases), fence=fence, lost=told.append)
    time.sleep(0.35)  # the lease of b lapses (its worker "paused"); a's is renewed below
    assert heartbeat.beat() and told == [] and fence.holds(kept.ticket)
    claimed = other.pop()  # b taken back, and claimed by the other worker
    assert claimed is not None and claimed.item == b"b" and other.reclaimed == 1
    leases.append((taken.host, taken.ticket))
    assert heartbeat.beat()
    assert told == [[taken.ticket]]
    assert fence.holds(kept.ticket) and not fence.holds(taken.ticket)


def test_a_lease_given_back_unfetched_is_queued_again_once(redis_server: RedisServer) -> None:
    """HAND_BACK: a lease still held goes back with its item at the head of its host's
    queue and the host ready at once (no rest: it was never contacted); a lease another
    worker took back meanwhile is left alone (its item is queued already): never twice."""
    client = redis_server.client()
    prefix = f"handback{time.monotonic_ns()}:frontier:"
    slow = DelayPolicy(factor=10.0, min_delay=30.0, max_delay=60.0)
    frontier = RedisFrontier(client, prefix, policy=slow, lease_timeout=0.3)
    frontier.push("h", 1, b"u1")
    frontier.push("h", 1, b"u2")
    lease = frontier.pop()
    assert lease is not None and lease.item == b"u1"
    assert frontier.complete(lease, 0.0, budget=HAND_BACK) is not None
    again = frontier.pop()  # at once: a rest of 30 s would have kept it away
    assert again is not None and again.item == b"u1" and again.ticket != lease.ticket
    check_redis_frontier(frontier)
    time.sleep(0.35)  # its worker "paused" past the lease
    other = RedisFrontier(client, prefix, policy=slow, lease_timeout=0.3)
    assert other.expire_leases() == [("h", b"u1")]  # taken back: u1 queued again
    assert frontier.complete(again, 0.0, budget=HAND_BACK) is None  # left alone
    queued = [item for _, _, item in frontier.iter_queued()]
    assert sorted(queued) == [b"u1", b"u2"]
    check_redis_frontier(frontier)


# -- the fence in the scheduler, on a shared frontier ------------------------------------


@pytest.fixture(params=("redis", "redis-cluster"))
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    name: str = request.param
    server = request.getfixturevalue("redis_cluster" if name == "redis-cluster"
                                     else "redis_server")
    prefix: str = request.getfixturevalue("redis_prefix")
    return Driver(name, driver_settings(name, state_dir=tmp_path / "state",
                                        redis_url=server.url, redis_prefix=prefix),
                  tmp_path / "state")


class ErrbackSpider(ContractSpider):
    name = "fenced"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures: list[Any] = []

    def failed(self, failure: Any) -> None:
        self.failures.append(failure)


def _paused(run: Run, seconds: float) -> Callable[[], None]:
    """The worker's fence sees ``seconds`` more pass than did (as after a pause in which
    Redis did not move: the leases are still held there). Returns the undo."""
    fence = run.scheduler.backend.driver.session.fence
    fence.clock = lambda: fence_clock() + seconds
    return lambda: setattr(fence, "clock", fence_clock)


@pytest_twisted.inlineCallbacks
def test_a_lapsed_lease_is_not_sent_from_the_downloader_middleware(shared: Driver) -> Gen:
    """The request was handed out; before it reaches the downloader its worker "pauses"
    past the lease. The timing middleware gives it back: the engine's enqueue drops the
    copy, no errback runs, nothing is fetched, the host gets no rest (a 30 s minimum would
    show), and the request comes out again, once, under a new lease."""
    run = Run(shared, spidercls=ErrbackSpider,
              extra={"FRONTIER_MIN_DELAY": 30.0, "FRONTIER_MAX_DELAY": 60.0})
    errors = run.spider.failures
    try:
        yield run.open()
        url = "http://fence.example/a"
        run.enqueue(Request(url, errback=run.spider.failed))
        first = yield drain(run.scheduler, 5.0, expect=1)  # handed out, not fetched
        assert urls(first) == [url]
        ticket = first[0].meta["frontier_lease"]
        resume = _paused(run, 60.0)
        back = run.fetcher.timing.process_request(first[0])
        resume()
        assert back is first[0] and back.meta[LAPSED_META]
        assert run.scheduler.enqueue_request(back)  # the engine's crawl(): dropped
        assert run.fetcher.fetched == [] and errors == []
        yield sleep(0.01)  # the warning's turn
        assert run.crawler.stats.get_value("frontier/leases/lapsed") == 1
        again = yield run.drain(expect=1, timeout=5.0)
        assert urls(again) == [url] and again[0].meta["frontier_lease"] != ticket
        assert urls(run.fetcher.fetched) == [url] and errors == []
        assert run.scheduler.backend.inspection.census().fetched == 1
    finally:
        yield run.close()


@pytest_twisted.inlineCallbacks
def test_a_lapsed_lease_is_not_handed_out(shared: Driver) -> Gen:
    """A claimed request waits at hand; its worker "pauses" past the lease: next_request
    hands it out no more, gives it back, and it comes out again once, under a new lease."""
    run = Run(shared, extra={"FRONTIER_MIN_DELAY": 30.0, "FRONTIER_MAX_DELAY": 60.0})
    try:
        yield run.open()
        url = "http://fence.example/b"
        run.enqueue(Request(url))
        inspection = run.scheduler.backend.inspection
        deadline = time.monotonic() + 5.0
        while not inspection.census().in_flight:  # claimed: at hand in this worker
            assert time.monotonic() < deadline, "never claimed"
            yield sleep(0.005)
        resume = _paused(run, 60.0)
        assert run.scheduler.next_request() is None
        resume()
        yield sleep(0.01)
        assert run.crawler.stats.get_value("frontier/leases/lapsed") == 1
        out = yield run.drain(expect=1, timeout=5.0)
        assert urls(out) == [url] and urls(run.fetcher.fetched) == [url]
    finally:
        yield run.close()


@pytest.mark.parametrize("name", ["memory", "sqlite"])
@pytest_twisted.inlineCallbacks
def test_the_local_backends_have_no_fence(name: str, tmp_path: Path) -> Gen:
    """Leases of the memory and SQLite backends live in the process that uses them: no other
    process can take them, so nothing is checked before a request is sent."""
    run = Run(Driver(name, driver_settings(name, state_dir=tmp_path / "state"),
                     tmp_path / "state"))
    try:
        yield run.open()
        assert type(run.scheduler.backend.queue).holds is QueuePort.holds  # the default: no fence
        run.enqueue(Request("http://local.example/a"))
        out = yield drain(run.scheduler, 5.0, expect=1)
        assert run.scheduler.fetches.lapsed(out[0]) is None
        run.fetcher.fetch(out[0])
        assert urls(run.fetcher.fetched) == ["http://local.example/a"]
    finally:
        yield run.close()
