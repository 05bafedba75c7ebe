"""Model-based test of the Frontier: random push/pop/complete/expire on a fake clock.

After every step the frontier's own structural check runs, and a model kept
here checks what the frontier promises from the outside: one lease per host
(up to its connections, in :class:`ConnectionsMachine`), the next-contact rule
(per connection), nothing lost or duplicated, and (in teardown) that everything
pushed is eventually handed out.
"""

from __future__ import annotations

import math
import random
from collections import Counter

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier, Lease
from tests.invariants import check_frontier

HOSTS = "abcdef"


def clamp_delay(policy: DelayPolicy, fetch: float) -> float:
    """The documented rule, computed independently of DelayPolicy.delay."""
    wanted = policy.factor * max(0.0, fetch)
    return min(policy.max_delay, max(policy.min_delay, wanted))


class FrontierMachine(RuleBasedStateMachine):
    #: Builds the QueueStore for a run (None: the frontier's default MemoryQueueStore).
    make_store = None
    #: Run the frontier with host groups (per-IP politeness); see test_core_groups.
    group_hosts = False
    #: Connections per host (None: the frontier's default, one each).
    connections: dict[str, int] | None = None

    def conns(self, host: str) -> int:
        return 1 if self.connections is None else self.connections.get(host, 1)

    def _allowed(self, host: str) -> int:
        """Leases the host may have at once."""
        return self.conns(host)

    def __init__(self) -> None:
        super().__init__()
        self.frontier: Frontier[int] | None = None

    @initialize(
        back_queues=st.integers(1, 3),
        extra=st.integers(0, 3),
        front_queues=st.integers(1, 4),
        bias=st.sampled_from([1.0, 1.5, 2.0, 5.0]),
        factor=st.sampled_from([0.0, 0.5, 1.0, 10.0]),
        min_delay=st.sampled_from([0.0, 0.25, 1.0]),
        span=st.sampled_from([0.0, 1.0, 5.0]),
        lease_timeout=st.sampled_from([0.5, 2.0, 7.0]),
        start=st.sampled_from([0.0, 1000.5]),
        seed=st.integers(0, 2**16),
    )
    def setup(
        self,
        back_queues,
        extra,
        front_queues,
        bias,
        factor,
        min_delay,
        span,
        lease_timeout,
        start,
        seed,
    ):
        self.clock = FakeClock(start)
        self.policy = DelayPolicy(factor=factor, min_delay=min_delay, max_delay=min_delay + span)
        self.frontier = Frontier(
            store=self.make_store(front_queues) if self.make_store else None,
            front_queues=front_queues,
            priority_bias=bias,
            back_queues=back_queues,
            back_queues_max=back_queues + extra,
            policy=self.policy,
            lease_timeout=lease_timeout,
            clock=self.clock,
            rng=random.Random(seed),
            group_hosts=self.group_hosts,
            connections=None if self.connections is None else self.conns,
        )
        self.next_id = 0
        self.pushed: dict[int, tuple[str, int]] = {}
        self.popped: set[int] = set()
        self.outstanding: dict[int, Lease[int]] = {}
        self.finished_tickets: list[int] = []
        # host -> earliest time it may be contacted again, from its last release (with
        # several connections: the latest of its connections' rests)
        self.rest_until: dict[str, float] = {}
        # host -> the rest ends of its connections not leased (-inf: never used)
        self.free: dict[str, list[float]] = {
            host: [float("-inf")] * self.conns(host) for host in HOSTS}
        self.completed = 0
        self.expired = 0
        # Per-host floors (robots.txt Crawl-delay), retired hosts and their dropped items.
        self.min_rest: dict[str, float] = {}
        self.retired: set[str] = set()
        self.dropped: set[int] = set()

    # -- model bookkeeping ---------------------------------------------------------

    def _record_pop(self, lease: Lease[int]) -> None:
        now = self.clock.now
        assert lease.item in self.pushed, "handed out something never pushed"
        assert lease.item not in self.popped, f"item {lease.item} handed out twice"
        assert lease.item not in self.dropped, f"dropped item {lease.item} handed out"
        assert lease.host not in self.retired, f"retired host {lease.host} handed out"
        host, level = self.pushed[lease.item]
        assert (lease.host, lease.level) == (host, level)
        busy = [held.host for held in self.outstanding.values()].count(host)
        assert busy < self.conns(host), f"more concurrent leases on {host} than connections"
        if self.conns(host) == 1:
            assert now >= self.rest_until.get(host, float("-inf")), (
                f"{host} contacted at {now} before its rest ended at {self.rest_until[host]}"
            )
        # Some connection of the host has rested: take the latest rested one (any other
        # choice leaves fewer connections for later leases).
        free = self.free[host]
        rested = [t for t in free if t <= now]
        assert rested, f"{host} contacted at {now}, before any connection rested: {free}"
        free.remove(max(rested))
        assert lease.ready_at <= now
        # Within a host, the highest level in its back queue goes first.
        assert all(level <= lease.level for level, _ in self.frontier.store.back_items(host))
        assert lease.handed_at == now
        assert lease.deadline == now + self.frontier.lease_timeout
        assert lease.ticket not in self.outstanding
        self.popped.add(lease.item)
        self.outstanding[lease.ticket] = lease

    def _record_completion(self, lease: Lease[int], fetch: float, at_least: float = 0.0) -> None:
        rest = max(clamp_delay(self.policy, fetch), self.min_rest.get(lease.host, 0.0), at_least)
        end = self.clock.now + rest
        self.free[lease.host].append(end)
        if self.conns(lease.host) > 1:
            end = max(end, self.rest_until.get(lease.host, end))
        self.rest_until[lease.host] = end
        self.finished_tickets.append(lease.ticket)
        self._collect_dropped()

    def _collect_dropped(self) -> None:
        for host, item in self.frontier.take_dropped():
            assert host in self.retired and self.pushed[item][0] == host
            assert item not in self.dropped and item not in self.popped
            self.dropped.add(item)

    # -- rules -----------------------------------------------------------------------

    @rule(host=st.sampled_from(HOSTS), level=st.integers(1, 4))
    def push(self, host, level):
        level = 1 + (level - 1) % self.frontier.levels
        item = self.next_id
        self.next_id += 1
        queued = self.frontier.push(host, level, item)
        assert queued == (host not in self.retired)
        if queued:
            self.pushed[item] = (host, level)
        self._collect_dropped()

    @rule(host=st.sampled_from(HOSTS), seconds=st.sampled_from([0.0, 0.3, 2.0, 9.0]))
    def set_min_rest(self, host, seconds):
        self.frontier.set_min_rest(host, seconds)
        self.min_rest[host] = seconds

    @rule(host=st.sampled_from(HOSTS[-2:]))
    def retire(self, host):
        queued_before = {item for h, _, item in self.frontier.iter_queued() if h == host}
        dropped = self.frontier.retire(host)
        if host in self.retired:
            assert dropped == []
        self.retired.add(host)
        assert set(dropped) <= queued_before
        assert not set(dropped) & self.dropped
        self.dropped.update(dropped)
        self._collect_dropped()
        event("host retired")

    @rule(host=st.sampled_from(HOSTS), dt=st.sampled_from([0.0, 0.5, 3.0, 20.0]))
    def restore_rest(self, host, dt):
        until = self.clock.now + dt
        busy = self.frontier.host_busy(host)
        try:
            self.frontier.rest_until(host, until)
        except ValueError:
            # Refused only for a host that owns a back queue: busy, or with queued URLs.
            assert busy or any(h == host for h, _, _ in self.frontier.iter_queued())
            return
        assert not busy
        self.rest_until[host] = max(self.rest_until.get(host, until), until)
        self.free[host] = [max(t, until) for t in self.free[host]]

    @rule()
    def pop(self):
        lease = self.frontier.pop()
        self._collect_dropped()
        if lease is not None:
            self._record_pop(lease)
            return
        if len(self.frontier):
            event("pop found nothing ready with items queued")
        # Nothing handed out: no host is ready, and no more back queues could be added.
        wake = self.frontier.next_wakeup()
        assert wake is None or wake > self.clock.now
        f = self.frontier
        assert f.front_len == 0 or f.active_back_queues == f.back_queues_max

    @rule()
    def pop_all_ready(self):
        while (lease := self.frontier.pop()) is not None:
            self._record_pop(lease)
        self._collect_dropped()

    @precondition(lambda self: self.frontier is not None and self.outstanding)
    @rule(
        data=st.data(),
        fetch=st.floats(-1.0, 20.0, allow_nan=False),
        at_least=st.sampled_from([0.0, 0.0, 0.7, 12.0]),
    )
    def complete(self, data, fetch, at_least):
        ticket = data.draw(st.sampled_from(sorted(self.outstanding)))
        lease = self.outstanding.pop(ticket)
        assert self.frontier.complete(ticket, fetch, rest_at_least=at_least) is lease
        self.completed += 1
        self._record_completion(lease, fetch, at_least)

    @precondition(lambda self: self.frontier is not None and self.finished_tickets)
    @rule(data=st.data(), fetch=st.floats(0.0, 5.0))
    def complete_stale(self, data, fetch):
        ticket = data.draw(st.sampled_from(self.finished_tickets))
        before = (self.frontier.stats.completed, self.frontier.active_back_queues)
        assert self.frontier.complete(ticket, fetch) is None
        after = (self.frontier.stats.completed, self.frontier.active_back_queues)
        assert before == after

    @rule(dt=st.one_of(st.sampled_from([0.0, 0.25, 1.0, 3.0]), st.floats(0.0, 10.0)))
    def advance(self, dt):
        self.clock.advance(dt)

    @rule()
    def advance_to_wakeup(self):
        wake = self.frontier.next_wakeup()
        if wake is not None and wake > self.clock.now:
            self.clock.now = wake  # exactly t_e
            lease = self.frontier.pop()
            self._collect_dropped()
            assert lease is not None, "nothing handed out exactly at next_wakeup()"
            assert lease.ready_at == wake
            self._record_pop(lease)

    @rule()
    def expire(self):
        now = self.clock.now
        expired = self.frontier.expire_leases()
        if expired:
            event("a lease expired")
        for lease in expired:
            assert lease.deadline <= now
            assert self.outstanding.pop(lease.ticket) is lease
            self.expired += 1
            self._record_completion(lease, now - lease.handed_at)
        assert all(lease.deadline > now for lease in self.outstanding.values())

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def structure(self):
        if self.frontier is not None:
            check_frontier(self.frontier)
            if self.frontier.front_len:
                event("hosts waiting in front queues")
            if self.frontier.active_back_queues > self.frontier.back_queues:
                event("back queues grown above the floor")

    @invariant()
    def conservation(self):
        f = self.frontier
        if f is None:
            return
        queued = Counter(item for _, _, item in f.iter_queued())
        assert all(n == 1 for n in queued.values()), "an item is queued twice"
        assert not (set(queued) & self.popped), "a handed-out item is still queued"
        assert not (set(queued) & self.dropped), "a dropped item is still queued"
        pending = {item for _, item in f._dropped}
        assert set(queued) | self.popped | self.dropped | pending == set(self.pushed), (
            "an item was lost"
        )
        assert len(f) == len(queued)
        for host, level, item in f.iter_queued():
            assert self.pushed[item] == (host, level)
        assert f.in_flight == len(self.outstanding)
        assert {lease.ticket for lease in f.leases()} == set(self.outstanding)
        s = f.stats
        assert (s.pushed, s.popped, s.completed, s.expired) == (
            len(self.pushed),
            len(self.popped),
            self.completed,
            self.expired,
        )
        assert s.activations - s.releases == f.active_back_queues
        assert s.peak_active <= f.back_queues_max

    @invariant()
    def one_lease_per_host(self):
        if self.frontier is None:
            return
        hosts = Counter(lease.host for lease in self.outstanding.values())
        for host in HOSTS:
            assert hosts[host] <= self._allowed(host)
            if hosts[host] > 1:
                event(f"{hosts[host]} leases on one host")
            assert self.frontier.host_busy(host) == (host in hosts)

    @invariant()
    def next_contact_matches_model(self):
        if self.frontier is None:
            return
        now = self.clock.now
        for host, until in self.rest_until.items():
            remembered = self.frontier.next_contact(host)
            if remembered == until:
                continue
            # Only a host whose rest is over may be forgotten (and later start afresh).
            assert until <= now, f"{host} forgotten while still resting"
            assert remembered is None or remembered == 0.0

    # -- eventual delivery -------------------------------------------------------------

    def teardown(self):
        f = self.frontier
        if f is None:
            return
        bound = 3 * len(self.pushed) + 10
        def done() -> bool:
            return self.popped | self.dropped == set(self.pushed)

        for _ in range(bound):
            if done():
                break
            for ticket in sorted(self.outstanding):
                lease = self.outstanding.pop(ticket)
                assert f.complete(ticket, 0.1) is lease
                self.completed += 1
                self._record_completion(lease, 0.1)
            check_frontier(f)
            if done():
                break
            wake = f.next_wakeup()
            assert wake is not None, "items queued but no host scheduled"
            if wake > self.clock.now:
                self.clock.now = wake
            lease = f.pop()
            self._collect_dropped()
            if lease is None and done():
                break
            assert lease is not None, "no progress at next_wakeup()"
            self._record_pop(lease)
            while (lease := f.pop()) is not None:
                self._record_pop(lease)
            self._collect_dropped()
            check_frontier(f)
        assert self.popped | self.dropped == set(self.pushed), (
            "some pushed items were never handed out nor dropped"
        )
        assert not {self.pushed[i][0] for i in self.dropped} - self.retired
        assert len(f) == 0


FrontierMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestFrontierStateMachine = FrontierMachine.TestCase


class ConnectionsMachine(FrontierMachine):
    """The same machine with hosts of three and two connections beside hosts of one, which
    are also retired, blocked and unblocked with leases in flight."""

    connections = {"a": 3, "b": 2}

    def __init__(self) -> None:
        super().__init__()
        self.blocked: dict[str, float] = {}
        #: Leases above a host's lowered connections, which end with their leases.
        self.leaving: dict[str, int] = {}

    @rule(host=st.sampled_from("ab"))
    def retire_shared(self, host):
        self.retire(host)

    @rule(host=st.sampled_from("ab"), dt=st.sampled_from([0.0, 0.5, 4.0, 30.0, math.inf]))
    def block(self, host, dt):
        until = self.clock.now + dt
        self.frontier.block(host, until)
        self.blocked[host] = until

    @rule(host=st.sampled_from("ab"))
    def unblock(self, host):
        unblocked = self.frontier.unblock(host)
        # A block is forgotten once it has ended and the host was released after it.
        assert unblocked <= (host in self.blocked)
        if self.blocked.get(host, -math.inf) > self.clock.now:
            assert unblocked
        self.blocked.pop(host, None)

    @precondition(lambda self: self.frontier is not None and self.outstanding)
    @rule(data=st.data())
    def complete_unsent(self, data):
        """The request never reached its host: its connection is ready again as it was
        for the lease (or now)."""
        ticket = data.draw(st.sampled_from(sorted(self.outstanding)))
        lease = self.outstanding.pop(ticket)
        assert self.frontier.complete(ticket, 0.0, sent=False) is lease
        now = self.clock.now
        self.free[lease.host].append(now)
        self._left(lease.host)
        self._trim_free(lease.host)
        if self.conns(lease.host) == 1:
            self.rest_until[lease.host] = max(lease.ready_at, now)
        self.finished_tickets.append(ticket)
        self._collect_dropped()

    @precondition(lambda self: self.frontier is not None)
    @rule(host=st.sampled_from(HOSTS), k=st.integers(1, 4), together=st.booleans())
    def set_connections(self, host, k, together):
        """A measured capacity changes a host's connections while it runs: never more
        leases than the new count (busy ones beyond it end with their leases)."""
        self.connections = {**(self.connections or {}), host: k}
        self.frontier.set_connections(host, k, together=together)
        busy = sum(1 for held in self.outstanding.values() if held.host == host)
        self.leaving[host] = max(0, busy - k)
        self._trim_free(host)

    def _trim_free(self, host: str, leaving: int | None = None) -> None:
        busy = sum(1 for t, held in self.outstanding.items()
                   if held.host == host and t != leaving)
        free = self.free[host]
        free.sort()
        while free and len(free) + busy > self.conns(host):
            free.pop()
        while len(free) + busy < self.conns(host):
            free.append(self.rest_until.get(host, float("-inf")))

    def _record_completion(self, lease: Lease[int], fetch: float, at_least: float = 0.0) -> None:
        super()._record_completion(lease, fetch, at_least)
        self._left(lease.host)
        self._trim_free(lease.host, leaving=lease.ticket)

    def _left(self, host: str) -> None:
        if self.leaving.get(host):
            self.leaving[host] -= 1

    def _allowed(self, host: str) -> int:
        return self.conns(host) + self.leaving.get(host, 0)

    @rule(host=st.sampled_from(HOSTS), dt=st.sampled_from([0.0, 0.5, 3.0, 20.0]))
    def restore_rest(self, host, dt):
        # Rests are restored at a start, before any block (an unblock restores the rest
        # the host had when it was blocked).
        if host not in self.blocked:
            super().restore_rest(host, dt)

    def _record_pop(self, lease: Lease[int]) -> None:
        until = self.blocked.get(lease.host, -math.inf)
        assert self.clock.now >= until, f"{lease.host} contacted while blocked until {until}"
        super()._record_pop(lease)

    @invariant()
    def next_contact_matches_model(self):
        if self.frontier is None:
            return
        now = self.clock.now
        for host, until in self.rest_until.items():
            remembered = self.frontier.next_contact(host)
            if remembered == until:
                continue
            if host in self.blocked and remembered is not None and remembered >= until:
                continue  # a block holds the host later; its rest is kept beside it
            assert until <= now, f"{host} forgotten while still resting"
            # Forgotten, or held by a block that has ended since.
            assert remembered is None or remembered <= now

    def teardown(self):
        if self.frontier is not None:
            for host in list(self.blocked):
                self.unblock(host)
        super().teardown()


ConnectionsMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestConnectionsStateMachine = ConnectionsMachine.TestCase
