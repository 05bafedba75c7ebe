"""Hosts with more than one connection (``Frontier(connections=...)``), on a fake clock.

A host of k connections has up to k leases at once; each connection rests by the delay
rule on its own last fetch, so a slow connection does not hold back a fast one. With one
connection everywhere the frontier hands out exactly what it hands out without the
argument. The state machine runs with several connections too
(``tests/core/test_statemachine.py``, ``ConnectionsMachine``).
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from scrapy_frontier.backends.sqlite.queue import SQLiteStore
from scrapy_frontier.codec import Codec
from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier, Lease
from tests.invariants import check_frontier

POLICY = DelayPolicy(factor=10.0, min_delay=0.0, max_delay=100.0)
CONNS = {"a": 3}
BYTES_CODEC: Codec[Any] = Codec(bytes, bytes)


def conns(host: str) -> int:
    return CONNS.get(host, 1)


def make(**kwargs: Any) -> tuple[Frontier[Any], FakeClock]:
    clock = FakeClock(100.0)
    kwargs.setdefault("policy", POLICY)
    kwargs.setdefault("connections", conns)
    frontier: Frontier[Any] = Frontier(clock=clock, rng=random.Random(7), **kwargs)
    return frontier, clock


def pop_all(frontier: Frontier[Any]) -> list[Lease[Any]]:
    out = []
    while (lease := frontier.pop()) is not None:
        out.append(lease)
        check_frontier(frontier)
    return out


def per_host(leases: list[Lease[Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for lease in leases:
        counts[lease.host] = counts.get(lease.host, 0) + 1
    return counts


def test_leases_per_host_up_to_its_connections() -> None:
    f, _ = make()
    for i in range(6):
        for host in "abc":
            f.push(host, 1, f"{host}{i}")
    got = pop_all(f)
    assert per_host(got) == {"a": 3, "b": 1, "c": 1}
    assert f.connections_of("a") == 3 and f.connections_of("b") == 1
    assert f.host_busy("a") and f.host_states().active == 3
    # A completion frees one connection of "a": one more lease, no more.
    first_a = next(lease for lease in got if lease.host == "a")
    f.complete(first_a.ticket, 0.0)
    check_frontier(f)
    again = pop_all(f)
    assert [lease.host for lease in again] == ["a"]


def test_each_connection_rests_after_its_own_fetch() -> None:
    f, clock = make()
    for i in range(8):
        f.push("a", 1, f"a{i}")
    x, y, z = pop_all(f)
    assert x.ready_at == y.ready_at == z.ready_at == 0.0
    clock.advance(0.1)
    f.complete(x.ticket, 0.1)  # x rests 1 s: until 101.1
    clock.advance(0.1)
    f.complete(y.ticket, 0.2)  # y rests 2 s: until 102.2
    assert f.pop() is None
    assert f.next_wakeup() == pytest.approx(101.1)
    # The host keeps one rest, the latest of its connections'.
    assert f.next_contact("a") == pytest.approx(102.2)
    clock.now = 101.1
    first = f.pop()
    assert first is not None and first.ready_at == pytest.approx(101.1)
    assert f.pop() is None, "a connection went before its own rest ended"
    clock.now = 102.2 - 1e-9
    assert f.pop() is None
    clock.now = 102.2
    second = f.pop()
    assert second is not None and second.ready_at == pytest.approx(102.2)
    assert f.pop() is None, "the third connection is still fetching"
    check_frontier(f)


def test_a_slow_connection_does_not_hold_back_a_fast_one() -> None:
    f, clock = make()
    for i in range(20):
        f.push("a", 1, f"a{i}")
    slow, fast, _ = pop_all(f)
    served_fast = 0
    # The slow fetch lasts 5 s; meanwhile the fast connection fetches every 0.1 + 1 s.
    for _ in range(4):
        clock.advance(0.1)
        f.complete(fast.ticket, 0.1)
        assert f.pop() is None
        wake = f.next_wakeup()
        assert wake == pytest.approx(clock.now + 1.0)
        clock.now = wake
        lease = f.pop()
        assert lease is not None
        fast = lease
        served_fast += 1
        check_frontier(f)
    assert served_fast == 4 and f.lease_host(slow.ticket) == "a"
    assert clock.now < slow.handed_at + 5.0


def test_one_connection_everywhere_hands_out_as_without_connections() -> None:
    def run(**kwargs: Any) -> list[tuple[str, Any, float]]:
        f, clock = make(back_queues=2, back_queues_max=4, **kwargs)
        rng = random.Random(11)
        out = []
        for i in range(300):
            f.push(rng.choice("abcdef"), rng.randint(1, 8), i)
        while len(f) or f.in_flight:
            lease = f.pop()
            if lease is None:
                clock.now = f.next_wakeup() or clock.now + 1.0
                continue
            out.append((lease.host, lease.item, lease.ready_at))
            clock.advance(rng.random() / 10)
            f.complete(lease.ticket, rng.random() / 5)
        return out

    assert run(connections=None) == run(connections=lambda host: 1)


def test_connections_are_read_when_a_host_gets_a_back_queue() -> None:
    asked: list[str] = []
    wanted = {"a": 2}

    def connections(host: str) -> int:
        asked.append(host)
        return wanted.get(host, 1)

    f, clock = make(connections=connections)
    f.push("a", 1, "a1")
    f.push("a", 1, "a2")
    assert asked == ["a"]
    first, second = pop_all(f)
    wanted["a"] = 1  # read again only at the host's next back queue
    clock.advance(1.0)
    f.complete(first.ticket, 0.0)
    f.complete(second.ticket, 0.0)  # the host frees its back queue
    clock.advance(1.0)
    f.push("a", 1, "a3")
    f.push("a", 1, "a4")
    assert asked == ["a", "a"] and f.connections_of("a") == 1
    assert len(pop_all(f)) == 1


def test_connections_below_one_are_refused() -> None:
    f, _ = make(connections=lambda host: 0)
    with pytest.raises(ValueError, match="connections"):
        f.push("a", 1, "a1")


def test_host_groups_use_one_connection_per_host() -> None:
    f, _ = make(group_hosts=True)
    assert f.connections is None
    f.push("a", 1, "a1")
    f.push("a", 1, "a2")
    assert f.pop() is None  # its group is not known yet
    f.set_group("a", "10.0.0.1")
    assert len(pop_all(f)) == 1


def test_host_gives_up_its_back_queue_with_the_latest_rest() -> None:
    f, clock = make()
    for i in range(3):
        f.push("a", 1, f"a{i}")
    x, y, z = pop_all(f)
    clock.advance(1.0)
    f.complete(y.ticket, 2.0)  # until 121
    f.complete(x.ticket, 0.1)  # until 102
    assert f.active_back_queues == 1  # z is still in flight
    f.complete(z.ticket, 0.0)  # until 101
    assert f.active_back_queues == 0
    check_frontier(f)
    assert f.next_contact("a") == pytest.approx(121.0)
    # Back through the front queues: every connection waits for the host's rest.
    f.push("a", 1, "a3")
    f.push("a", 1, "a4")
    assert f.pop() is None and f.next_wakeup() == pytest.approx(121.0)
    clock.now = 121.0
    assert len(pop_all(f)) == 2


def test_links_of_a_fetch_find_the_idle_connections() -> None:
    """Connections idle while the host had nothing queued serve its next URLs at once."""
    f, clock = make()
    f.push("a", 1, "a0")
    (only,) = pop_all(f)
    f.push("a", 1, "a1")  # a link found while a0 is fetched: two connections are idle
    f.push("a", 1, "a2")
    got = pop_all(f)
    assert [lease.item for lease in got] == ["a1", "a2"]
    assert f.pop() is None
    clock.advance(0.5)
    f.complete(only.ticket, 0.5)
    check_frontier(f)


def test_retire_with_leases_in_flight() -> None:
    f, clock = make()
    for i in range(6):
        f.push("a", 1, f"a{i}")
    got = pop_all(f)
    assert len(got) == 3
    assert sorted(f.retire("a")) == ["a3", "a4", "a5"]
    check_frontier(f)
    assert f.active_back_queues == 1
    for lease in got:
        clock.advance(0.1)
        assert f.complete(lease.ticket, 0.1) is lease
        check_frontier(f)
    assert f.active_back_queues == 0 and not f.push("a", 1, "a6")


def test_expire_with_several_leases() -> None:
    f, clock = make(lease_timeout=5.0)
    for i in range(5):
        f.push("a", 1, f"a{i}")
    x, y, z = pop_all(f)
    clock.advance(1.0)
    f.complete(y.ticket, 0.1)  # until 102
    clock.now = x.deadline
    expired = f.expire_leases()
    assert expired == [x, z]
    check_frontier(f)
    # Each expired connection rests as if its fetch lasted until now (clamped at 100 s);
    # y's connection is ready.
    got = pop_all(f)
    assert [lease.ready_at for lease in got] == [pytest.approx(102.0)]
    assert f.complete(x.ticket, 0.0) is None


def test_block_holds_every_connection_and_unblock_restores_the_rest() -> None:
    f, clock = make()
    for i in range(8):
        f.push("a", 1, f"a{i}")
    x, y, _ = pop_all(f)
    clock.advance(0.1)
    f.complete(x.ticket, 0.1)  # x's connection: until 101.1
    f.block("a", 150.0)
    check_frontier(f)
    assert f.host_states().active == 1
    clock.now = 120.0
    assert f.pop() is None
    f.complete(y.ticket, 0.1)  # y's connection: until 121, held to 150 by the block
    check_frontier(f)
    assert f.pop() is None and f.next_wakeup() == 150.0
    assert f.unblock("a")
    check_frontier(f)
    # The idle connections rest until the host's latest rest, 121.
    assert f.pop() is None and f.next_wakeup() == pytest.approx(121.0)
    clock.now = 121.0
    assert len(pop_all(f)) == 2


def test_a_lease_ended_unsent_frees_its_connection_as_it_was() -> None:
    f, clock = make()
    for i in range(5):
        f.push("a", 1, f"a{i}")
    x, y, z = pop_all(f)
    clock.advance(1.0)
    f.complete(x.ticket, 1.0)  # x's connection rests until 111
    assert f.complete(y.ticket, 0.0, sent=False) is y
    check_frontier(f)
    again = f.pop()
    assert again is not None and again.ready_at == clock.now
    assert f.pop() is None
    assert f.next_contact("a") == pytest.approx(111.0)
    assert f.stats.unsent == 1
    f.complete(z.ticket, 0.0, sent=False)
    f.complete(again.ticket, 0.0, sent=False)
    check_frontier(f)


def test_host_states_count_a_host_once() -> None:
    f, clock = make()
    for i in range(4):
        f.push("a", 1, f"a{i}")
    f.push("b", 1, "b0")
    f.push("b", 1, "b1")
    got = pop_all(f)
    states = f.host_states()
    assert (states.active, states.waiting, states.resting) == (2, 0, 0)
    for lease in got:
        f.complete(lease.ticket, 1.0)
    states = f.host_states()
    assert (states.active, states.waiting, states.resting, states.queued) == (0, 0, 2, 2)
    clock.advance(10.0)
    assert f.host_states().waiting == 2


def test_budget_counts_every_connection() -> None:
    f, _ = make()
    f.set_budget("a", 2)
    for i in range(6):
        f.push("a", 1, f"a{i}")
    got = pop_all(f)
    assert len(got) == 3
    f.complete(got[0].ticket, 0.0)
    f.complete(got[1].ticket, 0.0)
    assert f.over_budget("a") and f.newly_capped == [("a", 3)]
    check_frontier(f)
    f.complete(got[2].ticket, 0.0)
    check_frontier(f)
    assert f.active_back_queues == 0 and len(f) == 0


def test_sqlite_store_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"

    def open_store() -> SQLiteStore[Any]:
        return SQLiteStore(path, levels=2, spider="t", codec=BYTES_CODEC, window=2,
                           flush_ops=3)

    clock = FakeClock(100.0)
    store = open_store()
    f: Frontier[Any] = Frontier(store=store, clock=clock, policy=POLICY, connections=conns,
                                front_queues=2)
    for i in range(6):
        f.push("a", 1, b"a%d" % i)
    f.push("b", 1, b"b0")
    got = pop_all(f)
    assert per_host(got) == {"a": 3, "b": 1}
    a_leases = [lease for lease in got if lease.host == "a"]
    clock.advance(0.5)
    f.complete(a_leases[0].ticket, 2.0)  # rests 20 s
    f.complete(a_leases[1].ticket, 0.5)  # rests 5 s: the host keeps the latest, 20 s
    store.close()  # a stop with a lease of "a" (and one of "b") in flight

    store = open_store()
    hosts, rests = store.recover()
    clock = FakeClock(0.0)  # a new process: a new clock
    f = Frontier(store=store, clock=clock, policy=POLICY, connections=conns, front_queues=2)
    for host, (left, _) in rests.items():
        f.rest_until(host, clock.now + left)
    assert f.next_contact("a") == pytest.approx(20.0, abs=0.5)
    # As the SQLite backend does: a host with a fetch in flight rests as if it had just
    # ended, taking as long as its last known fetch.
    assert set(store.interrupted) == {"a", "b"}
    for host, last_fetch in store.interrupted.items():
        f.rest_until(host, clock.now + POLICY.delay(last_fetch or 0.0))
    for host in hosts:
        store.adopt(host, hosts[host])
    f.resume(store.front_count(), hosts)
    check_frontier(f)
    assert len(f) == 5  # a2..a5 and b0 (its lease came back)
    assert per_host(pop_all(f)) == {"b": 1}
    clock.now = 20.5
    back = pop_all(f)
    assert per_host(back) == {"a": 3}, "every connection of a comes back after the saved rest"
    assert b"a2" in {lease.item for lease in back}  # the lease in flight came back
    store.close()


def test_never_more_leases_than_connections_in_a_random_crawl() -> None:
    rng = random.Random(5)
    widths = {"a": 3, "b": 2}
    f, clock = make(connections=lambda host: widths.get(host, 1), back_queues=2,
                    back_queues_max=3, lease_timeout=3.0)
    out: list[Lease[Any]] = []
    contacts: dict[str, list[float]] = {}
    for step in range(3000):
        roll = rng.random()
        if roll < 0.35:
            f.push(rng.choice("abcde"), rng.randint(1, 8), step)
        elif roll < 0.6:
            lease = f.pop()
            if lease is not None:
                out.append(lease)
                contacts.setdefault(lease.host, []).append(clock.now)
        elif roll < 0.85 and out:
            lease = out.pop(rng.randrange(len(out)))
            f.complete(lease.ticket, rng.random(), sent=rng.random() > 0.1)
        elif roll < 0.9:
            for lease in f.expire_leases():
                out.remove(lease)
        else:
            clock.advance(rng.random() * 2)
        held = per_host(out)
        for host, n in held.items():
            assert n <= widths.get(host, 1)
        if step % 50 == 0:
            check_frontier(f)
    assert max(per_host(out).values(), default=0) <= 3
    assert not math.isnan(clock.now)


def test_set_connections_raises_and_lowers_a_running_host() -> None:
    f, clock = make(connections=lambda host: 1)
    for i in range(8):
        f.push("a", 1, f"a{i}")
    first = f.pop()
    assert first is not None and f.pop() is None
    f.set_connections("a", 3)
    check_frontier(f)
    assert per_host(pop_all(f)) == {"a": 2}, "two more connections, idle at once"
    f.set_connections("a", 1)
    check_frontier(f)
    assert f.connections_of("a") == 3, "the busy ones end with their leases"
    assert f.complete(first.ticket, 0.0) is not None
    check_frontier(f)
    assert f.pop() is None, "two leases still out on a host of one connection"


def test_together_the_connections_go_at_once_at_the_latest_rest() -> None:
    f, clock = make(connections=lambda host: 1)
    for i in range(8):
        f.push("a", 1, f"a{i}")
    lease = f.pop()
    assert lease is not None
    f.set_connections("a", 3, together=True)
    assert f.pop() is None, "the idle connections wait for the busy one"
    check_frontier(f)
    f.complete(lease.ticket, 0.5)  # this connection rests 5 s
    check_frontier(f)
    assert f.pop() is None
    clock.advance(5.0)
    burst = pop_all(f)
    assert len(burst) == 3 and {b.handed_at for b in burst} == {clock()}


def test_set_connections_needs_the_argument_and_a_count() -> None:
    plain: Frontier[Any] = Frontier(clock=FakeClock(0.0))
    with pytest.raises(ValueError, match="connections="):
        plain.set_connections("a", 2)
    f, _ = make()
    with pytest.raises(ValueError, match=">= 1"):
        f.set_connections("a", 0)
