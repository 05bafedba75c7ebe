"""Unit tests for the frontier core on a fake clock (no Scrapy, no Twisted)."""

from __future__ import annotations

import random

import pytest

from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier
from tests.invariants import check_frontier

# A policy with no rest at all: isolates queueing behaviour from politeness.
NO_REST = DelayPolicy(factor=0.0, min_delay=0.0, max_delay=0.0)


def make(start: float = 100.0, **kwargs) -> tuple[Frontier, FakeClock]:
    clock = FakeClock(start)
    kwargs.setdefault("rng", random.Random(1234))
    frontier: Frontier = Frontier(clock=clock, **kwargs)
    return frontier, clock


def drain_items(frontier: Frontier, clock: FakeClock, fetch: float = 0.0) -> list:
    """Pop and complete until empty, jumping the clock to each wake-up."""
    out = []
    for _ in range(10_000):
        lease = frontier.pop()
        if lease is None:
            if not len(frontier) and not frontier.in_flight:
                return out
            wake = frontier.next_wakeup()
            assert wake is not None and wake > clock.now
            clock.now = wake
            continue
        out.append(lease.item)
        frontier.complete(lease.ticket, fetch)
        check_frontier(frontier)
    raise AssertionError("frontier did not drain")


# -- Frontier: construction ----------------------------------------------------


class TestConstruction:
    @pytest.mark.parametrize(
        "kwargs",
        [
            {"front_queues": 0},
            {"back_queues": 0},
            {"back_queues": 4, "back_queues_max": 3},
            {"lease_timeout": 0},
            {"lease_timeout": -1.0},
            {"priority_bias": 0.5},
        ],
    )
    def test_validation(self, kwargs):
        with pytest.raises(ValueError):
            Frontier(clock=FakeClock(), **kwargs)

    def test_defaults(self):
        frontier = Frontier(clock=FakeClock())
        assert frontier.levels == 8
        assert frontier.back_queues == frontier.back_queues_max == 48
        assert frontier.policy == DelayPolicy()
        assert len(frontier) == 0 and frontier.in_flight == 0
        assert frontier.pop() is None
        assert frontier.next_wakeup() is None
        assert frontier.next_lease_deadline() is None
        assert list(frontier.iter_queued()) == []
        check_frontier(frontier)

    def test_back_queues_max_defaults_to_floor(self):
        frontier = Frontier(clock=FakeClock(), back_queues=5)
        assert frontier.back_queues_max == 5

    @pytest.mark.parametrize("level", [0, 4, -1])
    def test_push_level_out_of_range(self, level):
        frontier, _ = make(front_queues=3)
        with pytest.raises(ValueError):
            frontier.push("a", level, "x")
        assert frontier.stats.pushed == 0
        assert len(frontier) == 0
        check_frontier(frontier)


# -- Frontier: one fetch per host, politeness ------------------------------------


class TestPoliteness:
    def test_host_handed_out_once_until_complete(self):
        frontier, clock = make(policy=NO_REST)
        for i in range(3):
            frontier.push("a", 1, f"a{i}")
        lease = frontier.pop()
        assert lease is not None and lease.item == "a0" and lease.host == "a"
        assert frontier.host_busy("a")
        # However long we wait, a second URL of the host is not handed out.
        for _ in range(5):
            clock.advance(1000.0)
            assert frontier.pop() is None
            check_frontier(frontier)
        assert frontier.in_flight == 1 and len(frontier) == 2
        assert frontier.complete(lease.ticket, 0.1) is lease
        assert not frontier.host_busy("a")
        second = frontier.pop()
        assert second is not None and second.item == "a1"
        assert frontier.pop() is None

    def test_other_hosts_served_while_one_is_busy(self):
        frontier, _ = make(policy=NO_REST)
        frontier.push("a", 1, "a0")
        frontier.push("a", 1, "a1")
        frontier.push("b", 1, "b0")
        first = frontier.pop()
        second = frontier.pop()
        assert {first.host, second.host} == {"a", "b"}
        assert frontier.pop() is None
        assert frontier.in_flight == 2

    @pytest.mark.parametrize(
        ("fetch", "rest"),
        [(0.5, 5.0), (0.05, 1.0), (10.0, 30.0), (0.0, 1.0)],
    )
    def test_next_contact_is_finish_plus_clamped_delay(self, fetch, rest):
        policy = DelayPolicy(factor=10.0, min_delay=1.0, max_delay=30.0)
        frontier, clock = make(policy=policy)
        frontier.push("a", 1, "a0")
        frontier.push("a", 1, "a1")
        lease = frontier.pop()
        clock.advance(fetch)  # the fetch takes `fetch` seconds of fake time
        finish = clock.now
        frontier.complete(lease.ticket, fetch)
        expected = finish + rest
        assert frontier.next_contact("a") == pytest.approx(expected)
        assert frontier.next_wakeup() == frontier.next_contact("a")
        # Just before: nothing. Exactly at t_e: the next URL.
        clock.now = expected - 1e-6
        assert frontier.pop() is None
        clock.now = frontier.next_wakeup()
        second = frontier.pop()
        assert second is not None and second.item == "a1"
        assert second.ready_at == clock.now
        assert frontier.stats.dispatch_lateness_max == 0.0
        assert frontier.stats.dispatch_lateness_seconds == 0.0
        assert frontier.stats.held_dispatches == 1
        assert frontier.stats.politeness_hold_seconds == pytest.approx(rest)

    def test_pop_none_while_only_host_rests(self):
        policy = DelayPolicy(factor=10.0, min_delay=0.0, max_delay=60.0)
        frontier, clock = make(policy=policy)
        frontier.push("a", 1, "a0")
        frontier.push("a", 1, "a1")
        lease = frontier.pop()
        clock.advance(2.0)
        frontier.complete(lease.ticket, 2.0)
        wake = frontier.next_wakeup()
        assert wake == pytest.approx(clock.now + 20.0)
        for step in (0.0, 5.0, 10.0, 4.999):
            clock.advance(step)
            assert frontier.pop() is None
            assert frontier.next_wakeup() == wake
        clock.now = wake
        again = frontier.pop()
        assert again is not None and again.item == "a1"
        assert frontier.next_wakeup() is None

    def test_next_wakeup_is_the_earliest_rest(self):
        policy = DelayPolicy(factor=10.0, min_delay=0.0, max_delay=60.0)
        frontier, clock = make(policy=policy)
        for host in "abc":
            frontier.push(host, 1, f"{host}0")
            frontier.push(host, 1, f"{host}1")
        leases = {lease.host: lease for lease in (frontier.pop(), frontier.pop(), frontier.pop())}
        frontier.complete(leases["a"].ticket, 3.0)  # rests 30 s
        frontier.complete(leases["b"].ticket, 1.0)  # rests 10 s
        frontier.complete(leases["c"].ticket, 2.0)  # rests 20 s
        order = []
        while len(frontier):
            wake = frontier.next_wakeup()
            clock.now = wake
            lease = frontier.pop()
            assert lease.ready_at == wake
            assert frontier.pop() is None
            order.append((lease.item, wake - 100.0))
            frontier.complete(lease.ticket, 0.0)
        assert order == [("b1", 10.0), ("c1", 20.0), ("a1", 30.0)]

    def test_late_dispatch_is_measured(self):
        frontier, clock = make(policy=DelayPolicy(factor=1.0, min_delay=3.0, max_delay=3.0))
        frontier.push("a", 1, "a0")
        frontier.push("a", 1, "a1")
        lease = frontier.pop()
        frontier.complete(lease.ticket, 0.0)
        wake = frontier.next_wakeup()
        clock.now = wake + 2.5
        frontier.pop()
        assert frontier.stats.dispatch_lateness_seconds == pytest.approx(2.5)
        assert frontier.stats.dispatch_lateness_max == pytest.approx(2.5)
        assert frontier.stats.held_dispatches == 1

    def test_first_contact_is_not_a_held_dispatch(self):
        frontier, clock = make()
        frontier.push("a", 1, "a0")
        clock.advance(50.0)
        assert frontier.pop() is not None
        assert frontier.stats.held_dispatches == 0
        assert frontier.stats.dispatch_lateness_seconds == 0.0

    def test_host_returning_while_resting_still_rests(self):
        policy = DelayPolicy(factor=10.0, min_delay=0.0, max_delay=60.0)
        frontier, clock = make(policy=policy)
        frontier.push("a", 1, "a0")
        lease = frontier.pop()
        frontier.complete(lease.ticket, 1.0)  # rest until now + 10
        rest_until = clock.now + 10.0
        assert frontier.active_back_queues == 0  # gave its back queue up
        clock.advance(3.0)
        assert frontier.pop() is None  # purge must not forget a resting host
        assert frontier.next_contact("a") == pytest.approx(rest_until)
        frontier.push("a", 1, "a1")
        assert frontier.pop() is None
        assert frontier.next_wakeup() == pytest.approx(rest_until)
        clock.now = frontier.next_wakeup()
        again = frontier.pop()
        assert again is not None and again.item == "a1"
        assert frontier.stats.held_dispatches == 1

    def test_rested_host_is_forgotten(self):
        frontier, clock = make(policy=DelayPolicy(factor=1.0, min_delay=2.0, max_delay=2.0))
        frontier.push("a", 1, "a0")
        lease = frontier.pop()
        frontier.complete(lease.ticket, 0.0)
        assert frontier.tracked_hosts == 1
        clock.advance(1.0)
        frontier.pop()
        assert frontier.tracked_hosts == 1
        clock.advance(1.0)
        frontier.pop()
        assert frontier.tracked_hosts == 0
        assert frontier.next_contact("a") is None
        # Coming back after the rest: contactable at once.
        frontier.push("a", 1, "a1")
        assert frontier.pop() is not None


# -- Frontier: saved rests --------------------------------------------------------


class TestRestUntil:
    def test_restored_rest_is_honoured(self):
        frontier, clock = make(policy=NO_REST)
        frontier.rest_until("a", 130.0)
        assert frontier.next_contact("a") == 130.0
        assert frontier.rests() == {"a": 130.0}
        frontier.push("a", 1, "a0")
        frontier.push("b", 1, "b0")
        first = frontier.pop()
        assert first.item == "b0"
        assert frontier.pop() is None
        assert frontier.next_wakeup() == 130.0
        clock.now = 129.5
        assert frontier.pop() is None
        clock.now = 130.0
        lease = frontier.pop()
        assert lease.item == "a0" and lease.ready_at == 130.0
        assert frontier.stats.held_dispatches == 1
        assert frontier.stats.dispatch_lateness_max == 0.0
        check_frontier(frontier)

    def test_rest_never_shortened(self):
        frontier, clock = make(policy=DelayPolicy(factor=1.0, min_delay=50.0, max_delay=50.0))
        frontier.push("a", 1, "a0")
        lease = frontier.pop()
        frontier.complete(lease.ticket, 0.0)  # rests until 150
        frontier.rest_until("a", 120.0)
        assert frontier.next_contact("a") == 150.0
        frontier.rest_until("a", 170.0)
        assert frontier.next_contact("a") == 170.0
        frontier.push("a", 1, "a1")
        clock.now = 169.0
        assert frontier.pop() is None
        clock.now = 170.0
        assert frontier.pop().item == "a1"

    def test_rest_of_an_active_host_is_refused(self):
        frontier, _ = make(policy=NO_REST)
        frontier.push("a", 1, "a0")  # a owns a back queue
        with pytest.raises(ValueError):
            frontier.rest_until("a", 500.0)
        lease = frontier.pop()  # a in flight, back queue empty
        with pytest.raises(ValueError):
            frontier.rest_until("a", 500.0)
        assert frontier.next_contact("a") == 0.0
        frontier.complete(lease.ticket, 0.0)
        frontier.rest_until("a", 500.0)  # released: allowed again
        assert frontier.next_contact("a") == 500.0
        check_frontier(frontier)

    def test_rests_lists_only_future_rests_and_are_forgotten(self):
        frontier, clock = make(policy=NO_REST)
        frontier.rest_until("a", 110.0)
        frontier.rest_until("b", 90.0)  # already over
        frontier.rest_until("c", 120.0)
        assert frontier.rests() == {"a": 110.0, "c": 120.0}
        clock.now = 110.0
        assert frontier.rests() == {"c": 120.0}
        assert frontier.pop() is None  # purges hosts whose rest is over
        assert frontier.tracked_hosts == 1
        assert frontier.next_contact("a") is None


# -- Frontier: back queues -----------------------------------------------------------


class TestBackQueues:
    def test_floor_refill_hosts_wait_in_front(self):
        frontier, clock = make(back_queues=2, policy=NO_REST)
        for host in "abcd":
            frontier.push(host, 1, host)
            check_frontier(frontier)
        assert frontier.active_back_queues == 2
        assert frontier.front_len == 2
        assert len(frontier) == 4
        a = frontier.pop()
        b = frontier.pop()
        assert (a.item, b.item) == ("a", "b")  # FIFO within the single level
        assert frontier.pop() is None  # c and d wait: no back queue free
        assert frontier.stats.activations == 2
        frontier.complete(a.ticket, 0.0)  # a's back queue empties: c gets it
        check_frontier(frontier)
        assert frontier.active_back_queues == 2
        assert frontier.front_len == 1
        c = frontier.pop()
        assert c.item == "c"
        assert frontier.pop() is None
        frontier.complete(b.ticket, 0.0)
        d = frontier.pop()
        assert d.item == "d"
        assert frontier.stats.activations == 4
        assert frontier.stats.releases == 2
        assert frontier.stats.peak_active == 2

    def test_refill_moves_front_urls_of_active_hosts_and_repeats(self):
        frontier, _ = make(back_queues=2, policy=NO_REST)
        frontier.push("a", 1, "a0")
        frontier.push("b", 1, "b0")
        frontier.push("c", 1, "c0")  # front: c not active
        frontier.push("c", 1, "c1")  # front: c still not active
        frontier.push("d", 1, "d0")
        assert frontier.front_len == 3
        a = frontier.pop()
        frontier.complete(a.ticket, 0.0)  # refill: head c0 activates c
        assert frontier.front_len == 2
        b = frontier.pop()
        assert b.item == "b0"
        frontier.complete(b.ticket, 0.0)
        # refill: head c1 belongs to active c -> appended there, then d0 activates d
        assert frontier.front_len == 0
        assert frontier.active_back_queues == 2
        check_frontier(frontier)
        queued = sorted(item for _, _, item in frontier.iter_queued())
        assert queued == ["c0", "c1", "d0"]
        assert frontier.stats.activations == 4

    def test_pushes_to_an_active_host_skip_the_front(self):
        frontier, _ = make(back_queues=1, policy=NO_REST)
        frontier.push("a", 1, "a0")
        frontier.push("b", 1, "b0")
        frontier.push("a", 1, "a1")
        assert frontier.front_len == 1  # only b0
        assert [frontier.pop().item] == ["a0"]

    def test_pushes_to_a_busy_host_go_to_its_back_queue(self):
        frontier, _ = make(back_queues=1, policy=NO_REST)
        frontier.push("a", 1, "a0")
        frontier.push("b", 1, "b0")
        a0 = frontier.pop()
        frontier.push("a", 1, "a1")  # a is busy but keeps its back queue
        assert frontier.front_len == 1
        frontier.complete(a0.ticket, 0.0)
        assert frontier.active_back_queues == 1 and frontier.front_len == 1
        assert frontier.pop().item == "a1"  # b0 still waits for a back queue

    def test_demand_growth_only_when_nothing_ready(self):
        frontier, _ = make(back_queues=1, back_queues_max=3, policy=NO_REST)
        for host in "abcd":
            frontier.push(host, 1, host)
        # push fills only to the floor
        assert frontier.active_back_queues == 1
        first = frontier.pop()
        assert first.item == "a"
        assert frontier.active_back_queues == 1  # a was ready: no growth
        second = frontier.pop()  # a busy, nothing ready: grow
        assert second.item == "b"
        assert frontier.active_back_queues == 2
        third = frontier.pop()
        assert third.item == "c"
        assert frontier.active_back_queues == 3
        assert frontier.pop() is None  # at back_queues_max
        assert frontier.active_back_queues == 3
        assert frontier.front_len == 1
        assert frontier.stats.peak_active == 3
        check_frontier(frontier)
        frontier.complete(first.ticket, 0.0)
        assert frontier.active_back_queues == 2  # released, and above the floor
        assert frontier.front_len == 1  # no refill above the floor on release
        fourth = frontier.pop()  # demand again: d gets a back queue
        assert fourth.item == "d"
        assert frontier.active_back_queues == 3

    def test_growth_while_active_host_rests(self):
        policy = DelayPolicy(factor=10.0, min_delay=5.0, max_delay=5.0)
        frontier, _ = make(back_queues=1, back_queues_max=2, policy=policy)
        frontier.push("a", 1, "a0")
        frontier.push("a", 1, "a1")
        frontier.push("b", 1, "b0")
        lease = frontier.pop()
        frontier.complete(lease.ticket, 0.1)  # a rests with a1 queued
        assert frontier.active_back_queues == 1
        other = frontier.pop()
        assert other is not None and other.item == "b0"
        assert frontier.active_back_queues == 2

    def test_no_growth_without_max(self):
        frontier, _ = make(back_queues=1, policy=NO_REST)
        frontier.push("a", 1, "a0")
        frontier.push("b", 1, "b0")
        frontier.pop()
        assert frontier.pop() is None
        assert frontier.active_back_queues == 1

    def test_within_host_higher_level_first_fifo_within_level(self):
        frontier, clock = make(front_queues=3, policy=NO_REST)
        pushes = [(1, "x1"), (3, "y1"), (2, "w1"), (3, "y2"), (1, "x2"), (2, "w2"), (3, "y3")]
        # The host is busy while we push, so everything lands in its back queue.
        frontier.push("a", 2, "first")
        first = frontier.pop()
        for level, item in pushes:
            frontier.push("a", level, item)
        frontier.complete(first.ticket, 0.0)
        order = []
        for _ in pushes:
            lease = frontier.pop()
            assert lease is not None
            order.append((lease.level, lease.item))
            frontier.complete(lease.ticket, 0.0)
        assert order == [
            (3, "y1"),
            (3, "y2"),
            (3, "y3"),
            (2, "w1"),
            (2, "w2"),
            (1, "x1"),
            (1, "x2"),
        ]

    def test_late_high_priority_overtakes_queued_low(self):
        frontier, _ = make(front_queues=2, policy=NO_REST)
        frontier.push("a", 1, "low0")
        frontier.push("a", 1, "low1")
        lease = frontier.pop()
        frontier.push("a", 2, "high")
        frontier.complete(lease.ticket, 0.0)
        assert frontier.pop().item == "high"

    def test_iter_queued_lists_everything(self):
        frontier, _ = make(front_queues=3, back_queues=2, policy=NO_REST)
        pushed = []
        for i in range(30):
            host = f"h{i % 7}"
            level = 1 + i % 3
            frontier.push(host, level, i)
            pushed.append((host, level, i))
        assert sorted(frontier.iter_queued(), key=lambda t: t[2]) == pushed
        popped = [frontier.pop(), frontier.pop()]
        assert None not in popped
        left = {t[2] for t in frontier.iter_queued()}
        assert left == set(range(30)) - {lease.item for lease in popped}
        assert len(frontier) == 28 == len(list(frontier.iter_queued()))


# -- Frontier: leases ------------------------------------------------------------------


class TestLeases:
    def test_expire_releases_a_host_whose_completion_never_came(self):
        policy = DelayPolicy(factor=10.0, min_delay=1.0, max_delay=30.0)
        frontier, clock = make(policy=policy, lease_timeout=10.0)
        frontier.push("a", 1, "a0")
        frontier.push("a", 1, "a1")
        lease = frontier.pop()
        assert lease.deadline == pytest.approx(clock.now + 10.0)
        assert frontier.next_lease_deadline() == lease.deadline
        clock.advance(9.999)
        assert frontier.expire_leases() == []
        assert frontier.host_busy("a")
        clock.now = lease.deadline
        assert frontier.expire_leases() == [lease]
        check_frontier(frontier)
        assert not frontier.host_busy("a")
        assert frontier.in_flight == 0
        assert frontier.stats.expired == 1
        assert frontier.stats.completed == 0
        # The fetch counts as having lasted until now: 10 s -> 100 s, clamped to 30.
        assert frontier.next_contact("a") == pytest.approx(clock.now + 30.0)
        rest_until = frontier.next_contact("a")
        assert frontier.expire_leases() == []  # nothing twice

        # A late completion of the expired ticket changes nothing.
        assert frontier.complete(lease.ticket, 0.5) is None
        check_frontier(frontier)
        assert frontier.stats.completed == 0
        assert frontier.next_contact("a") == rest_until
        assert frontier.active_back_queues == 1
        assert frontier.next_wakeup() == rest_until

        # Nor does it release the host's next lease.
        clock.now = rest_until
        second = frontier.pop()
        assert second.item == "a1"
        assert frontier.complete(lease.ticket, 0.5) is None
        assert frontier.host_busy("a")
        assert frontier.in_flight == 1
        check_frontier(frontier)

    def test_expired_lease_of_a_drained_host_releases_the_back_queue_once(self):
        frontier, clock = make(back_queues=1, policy=NO_REST, lease_timeout=5.0)
        frontier.push("a", 1, "a0")
        frontier.push("b", 1, "b0")
        frontier.push("c", 1, "c0")
        lease = frontier.pop()
        clock.advance(5.0)
        frontier.expire_leases()
        # a's back queue went to b.
        assert frontier.active_back_queues == 1 and frontier.front_len == 1
        assert frontier.complete(lease.ticket, 0.1) is None
        check_frontier(frontier)
        assert frontier.active_back_queues == 1 and frontier.front_len == 1
        assert frontier.stats.releases == 1
        assert frontier.pop().item == "b0"

    def test_expire_only_overdue_in_order(self):
        frontier, clock = make(policy=NO_REST, lease_timeout=10.0)
        for host in "abc":
            frontier.push(host, 1, host)
        a = frontier.pop()
        clock.advance(3.0)
        b = frontier.pop()
        clock.advance(3.0)
        c = frontier.pop()
        frontier.complete(b.ticket, 0.0)
        assert frontier.next_lease_deadline() == a.deadline
        clock.now = a.deadline + 0.5  # past a's deadline, before c's (6 s later)
        assert frontier.expire_leases() == [a]
        assert frontier.next_lease_deadline() == c.deadline
        clock.now = c.deadline
        assert frontier.expire_leases() == [c]
        assert frontier.stats.expired == 2 and frontier.stats.completed == 1

    def test_double_and_unknown_complete(self):
        frontier, _ = make(policy=NO_REST)
        frontier.push("a", 1, "a0")
        lease = frontier.pop()
        assert frontier.complete(lease.ticket, 0.0) is lease
        assert frontier.complete(lease.ticket, 0.0) is None
        assert frontier.complete(987654, 0.0) is None
        assert frontier.stats.completed == 1
        assert frontier.stats.releases == 1
        check_frontier(frontier)

    def test_leases_listing(self):
        frontier, _ = make(policy=NO_REST)
        frontier.push("a", 1, "a0")
        frontier.push("b", 1, "b0")
        a, b = frontier.pop(), frontier.pop()
        assert frontier.leases() == [a, b]
        frontier.complete(a.ticket, 0.0)
        assert frontier.leases() == [b]


# -- Frontier: stats and end to end ------------------------------------------------------


class TestStats:
    def test_counters(self):
        frontier, clock = make(back_queues=2, back_queues_max=3, policy=NO_REST, lease_timeout=50.0)
        for i, host in enumerate("abcde"):
            frontier.push(host, 1, i)
        frontier.push("a", 1, 99)
        s = frontier.stats
        assert (s.pushed, s.popped, s.activations, s.peak_active) == (6, 0, 2, 2)
        leases = [frontier.pop() for _ in range(3)]
        assert None not in leases
        assert (s.popped, s.activations, s.peak_active) == (3, 3, 3)
        frontier.complete(leases[0].ticket, 0.0)
        frontier.complete(leases[1].ticket, 0.0)
        assert s.completed == 2
        clock.advance(50.0)
        assert frontier.expire_leases() == [leases[2]]
        assert s.expired == 1
        rest = drain_items(frontier, clock)
        assert sorted([lease.item for lease in leases] + rest) == [0, 1, 2, 3, 4, 99]
        assert s.popped == 6
        assert s.completed == 5
        assert s.expired == 1
        assert s.activations == s.releases == 5
        assert s.peak_active == 3
        assert frontier.active_back_queues == 0

    def test_drain_delivers_every_item_exactly_once(self):
        policy = DelayPolicy(factor=10.0, min_delay=0.5, max_delay=4.0)
        frontier, clock = make(front_queues=4, back_queues=3, back_queues_max=5, policy=policy)
        rng = random.Random(5)
        items = []
        for i in range(300):
            frontier.push(f"h{rng.randrange(20)}", rng.randint(1, 4), i)
            items.append(i)
        out = drain_items(frontier, clock, fetch=0.2)
        assert sorted(out) == items
        assert len(frontier) == 0 and frontier.in_flight == 0
        assert frontier.stats.peak_active <= 5
