"""Contained crawler traps as the backends keep them: the budget a containment gives, an
operator's budget that releases the host, and a release that holds (memory, SQLite's
control file, Redis's control script)."""

from __future__ import annotations

from pathlib import Path

import redis

from scrapy_frontier.backends.memory.ports import LocalControls
from scrapy_frontier.backends.redis.frontier import RedisFrontier
from scrapy_frontier.backends.sqlite.control import CONTAINED, RELEASED, ControlFile
from scrapy_frontier.core import DelayPolicy
from scrapy_frontier.core.frontier import Frontier
from scrapy_frontier.core.host_policy import HostPolicies, HostPolicy


def test_a_local_containment_caps_the_host_at_its_fetches_plus_the_allowance() -> None:
    now = [0.0]
    frontier: Frontier[str] = Frontier(policy=DelayPolicy(0.0, 0.0, 1.0), clock=lambda: now[0])
    controls = LocalControls(frontier, {}, HostPolicies(HostPolicy()))  # type: ignore[arg-type]
    kept: list[tuple[str, int]] = []
    controls.on_contain = lambda host, budget: kept.append((host, budget))
    for i in range(10):
        frontier.push("trap", 1, f"u{i}")
    controls.contain("trap", 50, 3)
    assert kept == [("trap", 53)] and frontier.budgets.of("trap") == 53
    for _ in range(3):
        lease = frontier.pop()
        assert lease is not None
        frontier.complete(lease.ticket, 0.0)
    assert frontier.over_budget("trap")  # its 50 fetches and 3 more
    frontier.set_budget("other", 5)  # a lower budget of its own stays
    controls.contain("other", 50, 3)
    assert frontier.budgets.of("other") == 5
    controls.trap_kept("again", "contained", 7)  # kept by an earlier run
    assert frontier.budgets.of("again") == 7
    assert controls.take_trap_states() == [("again", "contained")]
    assert controls.take_trap_states() == []


def test_the_control_file_keeps_a_containment_until_a_budget_releases_it(
        tmp_path: Path) -> None:
    control = ControlFile(tmp_path)
    try:
        control.contained("trap.example", 70)
        control.contained("trap.example", 75)  # contained again: the budget follows
        assert control.traps() == {"trap.example": (CONTAINED, 75)}
        control.update("trap.example", budget=0)  # scrapy frontier budget HOST 0
        assert control.traps() == {"trap.example": (RELEASED, 75)}
        control.contained("trap.example", 90)  # a released host stays released
        assert control.traps() == {"trap.example": (RELEASED, 75)}
        control.update("other.example", budget=10)  # no trap: nothing to release
        assert "other.example" not in control.traps()
    finally:
        control.close()
    assert ControlFile(tmp_path / "none", readonly=True).traps() == {}


def test_redis_contains_atomically_and_a_budget_releases_for_good(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    f = RedisFrontier(redis_client, redis_prefix, front_queues=2,
                      policy=DelayPolicy(0.0, 0.0, 1.0))
    for i in range(5):
        f.push("trap", 1, f"u{i}".encode())
    assert f.contain("trap", 50, 20) == 70
    assert f.traps() == {"trap": "contained"}
    assert f.contain("trap", 60, 20) == 70  # a second worker keeps the first's budget
    assert f.contain("spent", 0, 1) == 1
    f.control("budget", "trap", 0)  # scrapy frontier budget trap 0
    assert f.traps()["trap"] == "released"
    assert f.contain("trap", 80, 20) == -1
    f.control("budget", "own", 5)
    assert f.contain("own", 50, 20) == 5  # a lower budget of its own stays
    assert f.traps()["own"] == "contained"
