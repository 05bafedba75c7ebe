"""A steered policy on the local backends' frontier (memory and SQLite share the port): its
delay rule, connections and budget hold for hosts already queued."""

from __future__ import annotations

import pytest

from scrapy_frontier.backends.memory.ports import LocalControls
from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier
from scrapy_frontier.core.host_policy import HostPolicies, HostPolicy

CRAWL = DelayPolicy(factor=1.0, min_delay=0.0, max_delay=60.0)


def make(measuring: bool = False) -> tuple[Frontier[str], LocalControls, FakeClock]:
    clock = FakeClock(100.0)
    policies = HostPolicies(HostPolicy(CRAWL))
    frontier: Frontier[str] = Frontier(clock=clock, policy=CRAWL,
                                       connections=policies.connections)
    controls = LocalControls(frontier, {}, policies, measuring=measuring)
    return frontier, controls, clock


def test_the_delay_rule_of_a_steered_entry_holds_from_the_next_fetch() -> None:
    frontier, controls, clock = make()
    for i in range(3):
        frontier.push("a.example", 1, f"a{i}")
    lease = frontier.pop()
    assert lease is not None
    assert controls.steer_policies({"a.example": {"delay_factor": 0, "min_delay": 5}}) == []
    frontier.complete(lease.ticket, 0.1)
    assert frontier.next_wakeup() == pytest.approx(clock() + 5.0)
    clock.advance(5.0)
    lease = frontier.pop()
    assert lease is not None
    controls.steer_policies({})  # cleared: the crawl's rule, 1 x the fetch
    frontier.complete(lease.ticket, 0.1)
    assert frontier.next_wakeup() == pytest.approx(clock() + 0.1)


def test_a_steered_concurrency_opens_connections_to_a_queued_host_and_closes_them() -> None:
    frontier, controls, clock = make()
    for i in range(6):
        frontier.push("a.example", 1, f"a{i}")
    first = frontier.pop()
    assert first is not None and frontier.pop() is None
    controls.steer_policies({"=a.example": {"concurrency": 3}})
    assert frontier.connections_of("a.example") == 3
    more = [frontier.pop(), frontier.pop()]
    assert all(lease is not None for lease in more) and frontier.pop() is None
    assert frontier.in_flight == 3
    controls.steer_policies({})
    for lease in (first, *more):
        assert lease is not None
        frontier.complete(lease.ticket, 0.0)
    clock.advance(1.0)
    assert frontier.connections_of("a.example") == 1
    assert frontier.pop() is not None and frontier.pop() is None


def test_a_steered_budget_caps_and_a_raised_one_takes_the_host_back() -> None:
    frontier, controls, _ = make()
    controls.steer_policies({"a.example": {"budget": 1}})
    for i in range(3):
        frontier.push("a.example", 1, f"a{i}")
    lease = frontier.pop()
    assert lease is not None
    frontier.complete(lease.ticket, 0.0)
    assert frontier.over_budget("a.example")
    controls.closed_hosts["a.example"] = "budget"
    controls.steer_policies({"a.example": {"budget": 5}})
    assert not frontier.over_budget("a.example") and "a.example" not in controls.closed_hosts
    assert frontier.push("a.example", 1, "a9")


def test_measured_connections_stay_within_a_lowered_cap() -> None:
    frontier, controls, _ = make(measuring=True)
    frontier.connections = controls.measured.get  # type: ignore[assignment]
    controls.measured["a.example"] = 1
    frontier.push("a.example", 1, "a0")
    controls.set_connections("a.example", 4)
    controls.steer_policies({"a.example": {"concurrency": 2}})
    assert controls.measured["a.example"] == 2 and frontier.connections_of("a.example") == 2


def test_a_lowered_budget_retires_a_host_that_reached_it_at_once() -> None:
    frontier, controls, _ = make()
    controls.steer_policies({"a.example": {"budget": 5}})
    for i in range(4):
        frontier.push("a.example", 1, f"a{i}")
    for _ in range(2):
        lease = frontier.pop()
        assert lease is not None
        frontier.complete(lease.ticket, 0.0)
        frontier.clock.advance(1.0)  # type: ignore[attr-defined]
    controls.steer_policies({"a.example": {"budget": 2}})
    assert frontier.over_budget("a.example") and controls.closed_hosts["a.example"] == "budget"
    assert frontier.pop() is None and frontier.newly_capped[-1][0] == "a.example"


def test_a_lowered_cap_holds_for_measured_hosts_not_queued_now() -> None:
    _, controls, _ = make(measuring=True)
    controls.measured.update({"a.example": 4, "b.example": 1})
    controls.steer_policies({"a.example": {"concurrency": 2}})
    assert controls.measured == {"a.example": 2, "b.example": 1}
