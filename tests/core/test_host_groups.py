"""Per-IP politeness in the core: hosts grouped (by IP) share one lease and one rest.

Unit tests on a fake clock, then the core state machine run with groups on: the
model checks that no two hosts of a group are fetched at once and that a group's
rest after each fetch is honoured, on top of every per-host rule.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import invariant, rule

from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier, Lease
from tests.core.test_statemachine import FrontierMachine, clamp_delay
from tests.invariants import check_frontier

POLICY = DelayPolicy(factor=10.0, min_delay=0.0, max_delay=60.0)


def make(**kwargs: object) -> tuple[Frontier[str], FakeClock]:
    clock = FakeClock(100.0)
    f: Frontier[str] = Frontier(
        clock=clock, policy=POLICY, rng=random.Random(3), group_hosts=True, **kwargs  # type: ignore[arg-type]
    )
    return f, clock


def test_unknown_group_holds_host_until_set_group() -> None:
    f, _ = make()
    f.push("a.example", 1, "a1")
    assert f.pop() is None
    assert f.groups.take_unresolved() == ["a.example"]
    assert f.groups.take_unresolved() == []  # reported once
    check_frontier(f)
    f.set_group("a.example", "10.0.0.1")
    lease = f.pop()
    assert lease is not None and lease.item == "a1"
    check_frontier(f)


def test_hosts_of_one_group_take_turns_with_the_group_rest() -> None:
    f, clock = make()
    for host in ("a", "b", "c"):
        f.push(host, 1, f"{host}1")
        f.push(host, 1, f"{host}2")
    f.pop()
    for host in f.groups.take_unresolved():
        f.set_group(host, "ip1")
    first = f.pop()
    assert first is not None
    # The other two hosts are ready but their group is busy.
    assert f.pop() is None
    assert f.stats.group_parks == 2
    check_frontier(f)
    clock.advance(0.1)
    f.complete(first.ticket, 0.1)  # host and group rest 1 s
    check_frontier(f)
    assert f.pop() is None
    assert f.next_wakeup() == pytest.approx(clock.now + 1.0)
    clock.advance(1.0)
    second = f.pop()
    assert second is not None and second.host != first.host
    assert f.pop() is None  # the group is busy again
    check_frontier(f)
    f.complete(second.ticket, 0.2)
    clock.advance(2.0)
    third = f.pop()
    assert third is not None and third.host not in (first.host, second.host)
    check_frontier(f)


def test_other_groups_are_not_held() -> None:
    f, _ = make()
    f.push("a", 1, "a1")
    f.push("b", 1, "b1")
    f.pop()
    f.set_group("a", "ip1")
    f.set_group("b", "ip2")
    leases = [f.pop(), f.pop()]
    assert all(lease is not None for lease in leases)
    check_frontier(f)


def test_a_host_cannot_move_group_while_fetching() -> None:
    f, _ = make()
    f.push("a", 1, "a1")
    f.pop()
    f.set_group("a", "ip1")
    lease = f.pop()
    assert lease is not None
    with pytest.raises(ValueError, match="fetching"):
        f.set_group("a", "ip2")
    f.complete(lease.ticket, 0.0)
    f.set_group("a", "ip2")
    assert f.groups.group_of("a") == "ip2"
    check_frontier(f)


def test_retiring_a_parked_host_unparks_it() -> None:
    f, clock = make()
    for host in ("a", "b"):
        f.push(host, 1, f"{host}1")
    f.pop()
    for host in f.groups.take_unresolved():
        f.set_group(host, "ip1")
    lease = f.pop()
    assert lease is not None
    assert f.pop() is None
    other = "b" if lease.host == "a" else "a"
    assert f.retire(other) == [f"{other}1"]
    check_frontier(f)
    f.complete(lease.ticket, 0.0)
    clock.advance(1.0)
    assert f.pop() is None
    check_frontier(f)


def test_groups_are_forgotten_with_their_hosts() -> None:
    f, clock = make()
    f.push("a", 1, "a1")
    f.pop()
    f.set_group("a", "ip1")
    lease = f.pop()
    assert lease is not None
    f.complete(lease.ticket, 0.1)
    clock.advance(5.0)
    assert f.pop() is None
    assert f.groups.group_of("a") is None
    assert len(f.groups) == 0


# -- the core state machine, with groups ------------------------------------------------

GROUP_OF = {"a": "g1", "b": "g1", "c": "g1", "d": "g2", "e": "g2", "f": "f"}


class GroupedFrontierMachine(FrontierMachine):
    group_hosts = True

    def __init__(self) -> None:
        super().__init__()
        self.group_rest_until: dict[str, float] = {}

    def _resolve_all(self) -> None:
        for host in self.frontier.groups.take_unresolved():
            self.frontier.set_group(host, GROUP_OF[host])

    @rule()
    def resolve(self) -> None:
        self._resolve_all()

    @rule()
    def resolve_and_pop_all_ready(self) -> None:
        for _ in range(2):  # the first round finds hosts to resolve
            while (lease := self.frontier.pop()) is not None:
                self._record_pop(lease)
            self._resolve_all()
        while (lease := self.frontier.pop()) is not None:
            self._record_pop(lease)
        self._collect_dropped()

    @invariant()
    def group_events(self) -> None:
        if self.frontier is not None and self.frontier.stats.group_parks:
            event("a host was parked behind its group")

    def _record_pop(self, lease: Lease[int]) -> None:
        group = GROUP_OF[lease.host]
        busy = {GROUP_OF[held.host] for held in self.outstanding.values()}
        assert group not in busy, f"second concurrent lease in group {group}"
        assert self.clock.now >= self.group_rest_until.get(group, float("-inf"))
        super()._record_pop(lease)

    def _record_completion(self, lease: Lease[int], fetch: float, at_least: float = 0.0) -> None:
        group = GROUP_OF[lease.host]
        until = self.clock.now + clamp_delay(self.policy, fetch)
        self.group_rest_until[group] = max(self.group_rest_until.get(group, until), until)
        super()._record_completion(lease, fetch, at_least)

    @invariant()
    def next_contact_matches_model(self):  # type: ignore[no-untyped-def]
        # A host's next contact may be pushed later by its group's rest.
        now = self.clock.now
        for host, until in self.rest_until.items():
            remembered = self.frontier.next_contact(host)
            if remembered is not None and remembered >= until:
                continue
            assert until <= now, f"{host} forgotten while still resting"

    @rule()
    def advance_to_wakeup(self):  # type: ignore[no-untyped-def]
        wake = self.frontier.next_wakeup()
        if wake is not None and wake > self.clock.now:
            self.clock.now = wake
            # The host due now may be parked behind its group instead.
            while (lease := self.frontier.pop()) is not None:
                self._record_pop(lease)
            self._collect_dropped()

    def teardown(self):  # type: ignore[no-untyped-def]
        f = self.frontier
        if f is None:
            return
        for _ in range(6 * len(self.pushed) + 20):
            if self.popped | self.dropped == set(self.pushed):
                break
            for ticket in sorted(self.outstanding):
                lease = self.outstanding.pop(ticket)
                assert f.complete(ticket, 0.1) is lease
                self.completed += 1
                self._record_completion(lease, 0.1)
            while True:
                lease = f.pop()
                self._resolve_all()
                if lease is None:
                    lease = f.pop()
                if lease is None:
                    break
                self._record_pop(lease)
            self._collect_dropped()
            check_frontier(f)
            if not self.outstanding:
                wake = f.next_wakeup()
                if wake is not None and wake > self.clock.now:
                    self.clock.now = wake
        assert self.popped | self.dropped == set(self.pushed), "items never handed out"
        assert len(f) == 0


GroupedFrontierMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupedFrontierStateMachine = GroupedFrontierMachine.TestCase


def test_set_group_without_host_groups_is_refused() -> None:
    f = Frontier(front_queues=2, back_queues=2, clock=FakeClock(), policy=POLICY)
    with pytest.raises(ValueError, match="group_hosts"):
        f.set_group("a.example", "10.0.0.1")
