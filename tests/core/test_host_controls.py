"""The core frontier's operator controls: block, unblock, delay, budgets (fake clock)."""

from __future__ import annotations

import math
from typing import Any

from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier
from tests.invariants import check_frontier, check_redis_frontier


def make(**kwargs: object) -> tuple[Frontier[str], FakeClock]:
    clock = FakeClock(100.0)
    frontier: Frontier[str] = Frontier(
        front_queues=2, back_queues=4, policy=DelayPolicy(factor=10.0, min_delay=1.0,
                                                          max_delay=60.0),
        clock=clock, **kwargs)  # type: ignore[arg-type]
    return frontier, clock


def drain(frontier: Frontier[str], clock: FakeClock, seconds: float) -> list[tuple[float, str]]:
    """Fetch (0.1 s each) everything handed out within ``seconds``: (time, item)."""
    out = []
    end = clock.now + seconds
    while clock.now < end:
        lease = frontier.pop()
        if lease is None:
            clock.advance(0.5)
            continue
        out.append((clock.now, lease.item))
        clock.advance(0.1)
        frontier.complete(lease.ticket, 0.1)
        check_frontier(frontier)
    return out


def test_a_blocked_host_keeps_its_urls_and_goes_on_after_unblock() -> None:
    frontier, clock = make()
    for i in range(3):
        frontier.push("a", 1, f"a{i}")
        frontier.push("b", 1, f"b{i}")
    frontier.block("a")
    check_frontier(frontier)
    fetched = drain(frontier, clock, 30)
    assert [item for _, item in fetched] == ["b0", "b1", "b2"]
    assert len(frontier) == 3 and frontier.counts()["blocked"] == 1
    states = frontier.host_states()  # the census: blocked, not resting
    assert (states.blocked, states.resting, states.waiting, states.active) == (1, 0, 0, 0)
    assert frontier.next_wakeup() is None  # only a host blocked until unblocked
    assert frontier.unblock("a")
    assert [item for _, item in drain(frontier, clock, 30)] == ["a0", "a1", "a2"]
    assert len(frontier) == 0 and frontier.counts()["blocked"] == 0


def test_a_block_for_some_seconds_ends_by_itself_and_a_fetch_in_flight_ends_normally() -> None:
    frontier, clock = make()
    frontier.push("a", 1, "a0")
    frontier.push("a", 1, "a1")
    lease = frontier.pop()
    assert lease is not None
    frontier.block("a", clock.now + 20)
    clock.advance(0.1)
    frontier.complete(lease.ticket, 0.1)
    check_frontier(frontier)
    fetched = drain(frontier, clock, 40)
    assert [item for _, item in fetched] == ["a1"]
    assert fetched[0][0] >= 120.0


def test_a_rest_longer_than_the_block_it_ended_in_is_kept() -> None:
    """A fetch that ends during a short block owes a rest past the block's end: the host
    waits for the later of the two."""
    frontier, clock = make()
    frontier.push("a", 1, "a0")
    frontier.push("a", 1, "a1")
    lease = frontier.pop()
    assert lease is not None
    frontier.block("a", clock.now + 5)  # until 105
    clock.advance(1.0)
    frontier.complete(lease.ticket, 1.0)  # at 101: a rest of 10 s, until 111
    assert frontier.next_contact("a") == 111.0
    check_frontier(frontier)
    fetched = drain(frontier, clock, 40)
    assert [item for _, item in fetched] == ["a1"]
    assert fetched[0][0] >= 111.0


def test_block_before_the_host_is_known_holds_its_first_url() -> None:
    frontier, clock = make()
    frontier.block("a", clock.now + 10)
    frontier.push("a", 1, "a0")
    fetched = drain(frontier, clock, 20)
    assert fetched and fetched[0][0] >= 110.0


def test_an_operator_delay_lengthens_every_rest_beside_crawl_delay() -> None:
    frontier, clock = make()
    frontier.set_min_rest("a", 2.0)  # robots.txt
    frontier.controls.set_delay("a", 5.0)
    for i in range(4):
        frontier.push("a", 1, f"a{i}")
    times = [t for t, _ in drain(frontier, clock, 60)]
    assert len(times) == 4
    assert all(b - a >= 5.1 - 1e-9 for a, b in zip(times, times[1:], strict=False))
    frontier.controls.set_delay("a", 0)
    assert frontier.controls.delay_of("a") == 0.0


def test_a_budget_caps_a_host_counted_apart_from_retirement() -> None:
    frontier, clock = make()
    frontier.budgets.default = 3
    for i in range(10):
        frontier.push("trap", 1, f"t{i}")
    frontier.push("ok", 1, "o0")
    fetched = [item for _, item in drain(frontier, clock, 60)]
    assert fetched.count("o0") == 1
    assert [x for x in fetched if x.startswith("t")] == ["t0", "t1", "t2"]
    assert frontier.over_budget("trap") and frontier.budgets.fetched("trap") == 3
    assert frontier.stats.budget_hosts == 1 and frontier.stats.retired_hosts == 0
    assert frontier.stats.budget_items == 7
    assert not frontier.push("trap", 1, "t10")  # refused, counted
    assert frontier.stats.budget_items == 8
    assert frontier.counts() | {"known": 0} == {"known": 0, "blocked": 0, "retired": 0,
                                                "over_budget": 1}
    frontier.set_budget("trap", 5)  # raised: new URLs are taken again
    assert not frontier.over_budget("trap")
    assert frontier.push("trap", 1, "t11")
    assert [item for _, item in drain(frontier, clock, 30)] == ["t11"]
    assert frontier.budgets.fetched("trap") == 4


def test_fetches_are_counted_only_while_some_host_has_a_budget() -> None:
    frontier, clock = make()
    frontier.push("a", 1, "a0")
    drain(frontier, clock, 5)
    assert frontier.budgets.fetched("a") == 0  # no budget anywhere: nothing counted
    frontier.set_budget("b", 10)  # one host's own budget turns counting on for all
    frontier.push("a", 1, "a1")
    drain(frontier, clock, 5)
    assert frontier.budgets.fetched("a") == 1
    frontier.set_budget("b", None)  # and dropping it turns it off again
    frontier.push("a", 1, "a2")
    drain(frontier, clock, 5)
    assert frontier.budgets.fetched("a") == 1
    frontier.budgets.default = 5
    frontier.push("a", 1, "a3")
    drain(frontier, clock, 5)
    assert frontier.budgets.fetched("a") == 2


def test_a_saved_fetch_count_over_budget_retires_at_once() -> None:
    frontier, _ = make()
    frontier.set_budget("a", 2)
    frontier.set_fetched("a", 2)
    assert frontier.over_budget("a") and not frontier.push("a", 1, "x")
    frontier.set_budget("a", 0)  # unlimited
    assert frontier.push("a", 1, "x")


def test_block_refuses_nan() -> None:
    frontier, _ = make()
    try:
        frontier.block("a", math.nan)
    except ValueError:
        return
    raise AssertionError("NaN accepted")


# -- the same controls on the Redis frontier (real redis-server) ------------------------


def test_redis_block_unblock_delay_and_budget(redis_server: object) -> None:
    import time

    from scrapy_frontier.backends.redis.frontier import RedisFrontier

    client = redis_server.client()  # type: ignore[attr-defined]
    prefix = f"steer{time.monotonic_ns()}:"
    remote = RedisFrontier(client, prefix, front_queues=2, back_queues=4,
                           policy=DelayPolicy(factor=1.0, min_delay=0.0, max_delay=1.0))
    for i in range(3):
        remote.push("a", 1, f"a{i}".encode())
        remote.push("b", 1, f"b{i}".encode())
    remote.control("block", "a", math.inf)
    check_redis_frontier(remote)
    got = []
    for _ in range(200):
        lease = remote.pop()
        if lease is None:
            if len(got) == 3:
                break
            time.sleep(0.01)
            continue
        got.append(lease.item)
        remote.complete(lease, 0.0)
        check_redis_frontier(remote)
    assert got == [b"b0", b"b1", b"b2"]
    assert remote.next_wakeup() is None  # only a host blocked until unblocked
    census = remote.census()  # blocked, not resting
    assert (census.blocked, census.resting, census.waiting, census.queued) == (1, 0, 0, 3)
    assert remote.control("unblock", "a")[0] == 1
    remote.control("delay", "a", 0.3)
    remote.control("budget", "a", 2)
    times = []
    capped = []
    for _ in range(500):
        lease = remote.pop()
        if lease is None:
            if not len(remote):
                break
            time.sleep(0.01)
            continue
        times.append((remote.server_time(), lease.item))
        completed = remote.complete(lease, 0.0)
        assert completed is not None
        capped.append(completed.capped)
        check_redis_frontier(remote)
    assert [item for _, item in times] == [b"a0", b"a1"]  # the budget dropped a2
    assert capped == [-1, 1]  # the completion that spent it says how many it dropped
    assert times[1][0] - times[0][0] >= 0.3
    stats = remote.stats()
    assert stats["budget_hosts"] == 1 and stats["budget_items"] == 1
    assert remote.push("a", 1, b"a3") is False  # refused: over budget
    assert remote.stats()["budget_items"] == 2
    assert remote.control("unretire", "a")[0] == -1  # over budget: only a budget reopens
    assert remote.push("a", 1, b"a3") is False
    assert remote.control("budget", "a", 5)[0] == 1  # raised: taken back
    assert remote.push("a", 1, b"a4") is True
    remote.control("retire", "b")
    assert remote.push("b", 1, b"b9") is False
    assert remote.control("unretire", "b")[0] == 1
    assert remote.push("b", 1, b"b10") is True
    assert remote.control("unretire", "b")[0] == 0  # not retired: nothing to do


# -- the SQLite control file, applied by the scheduler's control timer ---------------------


def test_control_file_is_applied_by_the_poll_and_budget_counts_survive_a_restart(
        tmp_path: object) -> None:
    from pathlib import Path

    from scrapy import Request

    from scrapy_frontier.backends.sqlite.control import RETIRED, TAKEN_BACK, ControlFile
    from tests.scheduler.test_scheduler import finish, make_scheduler

    job = Path(str(tmp_path)) / "job"
    settings = {"JOBDIR": str(job), "FRONTIER_HOST_BUDGET": 3}
    sched, clock, _ = make_scheduler(settings)
    driver: Any = sched.backend
    for i in range(6):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
        sched.enqueue_request(Request(f"http://b.example/{i}"))
    control = ControlFile(job)
    control.update("b.example", blocked_until=math.inf)
    control.update("a.example", delay=7.0)
    driver.history.control.poll()
    frontier = driver.frontier
    assert frontier.controls.blocked_until("b.example", clock()) == math.inf
    assert frontier.controls.delay_of("a.example") == 7.0
    fetched = []
    for _ in range(60):
        request = sched.next_request()
        if request is None:
            clock.advance(1.0)
            continue
        fetched.append(request.url)
        finish(sched, clock, request, 0.01)
    assert fetched == [f"http://a.example/{i}" for i in range(3)]  # b blocked; a capped at 3
    assert frontier.over_budget("a.example")
    sched.close("finished")
    assert control.crawl_hosts()["a.example"] == (3, "budget")
    # A restart resumes the counts and the block; unblocking lets b go.
    sched, clock, _ = make_scheduler(settings)
    driver = sched.backend
    assert driver.frontier.over_budget("a.example")
    assert not sched.enqueue_request(Request("http://a.example/new"))
    clock.advance(30.0)
    assert sched.next_request() is None and len(sched) == 6  # b is still blocked
    control.update("b.example", blocked_until=None)
    driver.history.control.poll()
    got = []
    for _ in range(60):
        request = sched.next_request()
        if request is None:
            clock.advance(1.0)
            continue
        got.append(request.url)
        finish(sched, clock, request, 0.01)
    assert got == [f"http://b.example/{i}" for i in range(3)]  # its budget is 3 as well
    # Retired by hand, then taken back by hand: its new URLs are taken again. A host over
    # its budget stays retired (only a higher budget reopens it).
    control.update("c.example", retired=RETIRED)
    driver.history.control.poll()
    assert not sched.enqueue_request(Request("http://c.example/0"))
    control.update("c.example", retired=TAKEN_BACK)
    control.update("a.example", retired=TAKEN_BACK)
    driver.history.control.poll()
    assert sched.enqueue_request(Request("http://c.example/1"))
    assert not sched.enqueue_request(Request("http://a.example/again"))
    sched.close("finished")
    control.close()
