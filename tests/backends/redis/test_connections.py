"""Hosts of several connections on Redis: what the core's tests cannot show, because the
state is shared by clients (workers) that each hold a :class:`RedisFrontier`.

The contract (``tests/backends/test_contract.py::test_connections_per_host``) checks the
rests per connection; these check that the leases of all clients together stay within a
host's connections, that lapses, renewals, retirement, blocks and ends unsent work per
connection, and that a crawl whose hosts all have one connection keeps the keys it had.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest
import redis

from scrapy_frontier.backends.redis.frontier import Finished, RedisFrontier, RedisLease
from scrapy_frontier.core import DelayPolicy
from tests.invariants import check_redis_frontier
from tests.redis_server import RedisServer

CONNS = {"a": 2, "b": 3}


def conns(host: str) -> int:
    return CONNS.get(host, 1)


def open_frontier(client: redis.Redis, prefix: str, *, factor: float = 0.0,
                  connections: Callable[[str], int] | None = conns,
                  **kw: object) -> RedisFrontier:
    kw.setdefault("lease_timeout", 5.0)
    return RedisFrontier(client, prefix, front_queues=2, back_queues=2, back_queues_max=4,
                         policy=DelayPolicy(factor=factor, min_delay=0.0, max_delay=10.0),
                         connections=connections, **kw)  # type: ignore[arg-type]


def pop_wait(f: RedisFrontier, max_wait: float = 3.0) -> RedisLease:
    end = time.monotonic() + max_wait
    while time.monotonic() < end:
        lease = f.pop()
        if lease is not None:
            return lease
        time.sleep(0.01)
    raise AssertionError("nothing handed out in time")


def test_two_clients_together_hold_at_most_a_hosts_connections(
        redis_server: RedisServer, redis_prefix: str) -> None:
    one = open_frontier(redis_server.client(), redis_prefix)
    two = open_frontier(redis_server.client(), redis_prefix)
    one.push_many([("a", 1, b"a%d" % i) for i in range(6)])
    first, second = one.pop(), two.pop()
    assert first is not None and second is not None
    assert (first.host, second.host) == ("a", "a")
    assert one.pop() is None and two.pop() is None, "a third lease on a host of two"
    check_redis_frontier(one)
    assert two.complete(first, 0.0) is not None  # either client may end either lease
    third = two.pop()
    assert third is not None and third.host == "a"
    assert one.pop() is None
    check_redis_frontier(one)
    for lease in (second, third):
        assert one.complete(lease, 0.0) is not None
    got = [pop_wait(one), pop_wait(two)]
    assert one.pop() is None and two.pop() is None
    for lease in got:
        one.complete(lease, 0.0)
    check_redis_frontier(one)


def test_workers_on_threads_never_exceed_any_hosts_connections(
        redis_server: RedisServer, redis_prefix: str) -> None:
    """Four clients claim and complete at once; each lease is counted while its client
    holds it (inside the server's lease): never more than the host's connections."""
    hosts = {"a": 2, "b": 3, "c": 1}
    seed = open_frontier(redis_server.client(), redis_prefix, connections=hosts.__getitem__)
    items = {(h, b"%s%d" % (h.encode(), i)) for h in hosts for i in range(25)}
    seed.push_many([(h, 1, item) for h, item in sorted(items)])
    lock = threading.Lock()
    held = dict.fromkeys(hosts, 0)
    peak = dict.fromkeys(hosts, 0)
    fetched: list[bytes] = []
    errors: list[BaseException] = []

    def work(n: int) -> None:
        rng = random.Random(n)
        f = open_frontier(redis_server.client(), redis_prefix, connections=hosts.__getitem__)
        try:
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 0.5:
                lease = f.pop()
                if lease is None:
                    time.sleep(0.002)
                    continue
                idle_since = time.monotonic()
                with lock:
                    held[lease.host] += 1
                    peak[lease.host] = max(peak[lease.host], held[lease.host])
                    fetched.append(lease.item)
                time.sleep(rng.uniform(0.0, 0.01))
                with lock:
                    held[lease.host] -= 1
                assert f.complete(lease, 0.001) is not None
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert sorted(fetched) == sorted(item for _, item in items), "lost or fetched twice"
    for host, k in hosts.items():
        assert peak[host] <= k, f"{host}: {peak[host]} leases at once, {k} connections"
    assert peak["b"] >= 2, "a host of three never had two leases at once"
    assert seed.idle()
    check_redis_frontier(seed)


@pytest.mark.parametrize("connections", [None, lambda host: 1])
def test_one_connection_everywhere_keeps_the_keys_of_one(
        redis_client: redis.Redis, redis_prefix: str,
        connections: Callable[[str], int] | None) -> None:
    f = open_frontier(redis_client, redis_prefix, connections=connections, liveness=2.0)
    f.push_many([(h, 1, b"%s%d" % (h.encode(), i)) for h in "abc" for i in range(3)])
    leases = [pop_wait(f) for _ in range(3)]
    assert sorted(lease.host for lease in leases) == ["a", "b", "c"]
    assert f.pop() is None
    f.renew("w", [(lease.host, lease.ticket) for lease in leases])
    members = [*redis_client.hkeys(f.key("leases")), *redis_client.zrange(f.key("ready"), 0, -1)]
    assert all(b"\0" not in m for m in members), members
    for lease in leases:
        f.complete(lease, 0.0)
    while not f.idle():
        f.complete(pop_wait(f), 0.0)
    assert not redis_client.exists(f.key("conns"), f.key("spare"))


def test_a_lapsed_lease_gives_back_its_connection_only(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    f = open_frontier(redis_client, redis_prefix, lease_timeout=0.3)
    f.push_many([("a", 1, b"a%d" % i) for i in range(3)])
    early = pop_wait(f)
    time.sleep(0.15)
    late = pop_wait(f)
    assert (early.host, late.host) == ("a", "a") and f.pop() is None
    time.sleep(0.2)  # past the first lease's deadline, not the second's
    assert f.expire_leases() == [("a", early.item)]
    check_redis_frontier(f)
    assert f.complete(early, 0.0) is None, "a lapsed lease's completion is refused"
    again = pop_wait(f)  # its connection rests the lapse rest (0 here), then goes again
    assert again.item == early.item
    assert f.pop() is None
    assert f.complete(late, 0.0) is not None
    assert f.complete(again, 0.0) is not None
    last = pop_wait(f)
    f.complete(last, 0.0)
    assert f.idle()
    check_redis_frontier(f)


def test_renewals_find_each_connections_lease(redis_client: redis.Redis,
                                              redis_prefix: str) -> None:
    f = open_frontier(redis_client, redis_prefix, liveness=1.0)
    f.push_many([("a", 1, b"a%d" % i) for i in range(3)])
    leases = [pop_wait(f), pop_wait(f)]
    pairs = [(lease.host, lease.ticket) for lease in leases]
    assert f.renew("w", pairs) == []
    assert f.renew("w", [("a", leases[0].ticket + 100)]) == [("a", leases[0].ticket + 100)]
    deadlines = redis_client.zrange(f.key("deadlines"), 0, -1, withscores=True)
    assert sorted(m for m, _ in deadlines) == [b"a\x001", b"a\x002"]
    for lease in leases:
        f.complete(lease, 0.0)
    check_redis_frontier(f)


def test_retiring_a_host_waits_for_each_of_its_leases(redis_client: redis.Redis,
                                                      redis_prefix: str) -> None:
    f = open_frontier(redis_client, redis_prefix)
    f.push_many([("a", 1, b"a%d" % i) for i in range(5)])
    one, two = pop_wait(f), pop_wait(f)
    assert sorted(f.retire("a")) == [b"a2", b"a3", b"a4"]
    check_redis_frontier(f)
    assert f.complete(one, 0.0) is not None
    assert redis_client.hexists(f.key("active"), "a"), "given up with a lease still out"
    check_redis_frontier(f)
    assert f.complete(two, 0.0) is not None
    assert not redis_client.hexists(f.key("active"), "a")
    assert f.idle() and f.push("a", 1, b"a5") is False
    check_redis_frontier(f)


def test_an_end_unsent_readies_its_connection_as_it_was(redis_client: redis.Redis,
                                                        redis_prefix: str) -> None:
    f = open_frontier(redis_client, redis_prefix, factor=2.0)
    f.push_many([("a", 1, b"a%d" % i) for i in range(4)])
    one, two = pop_wait(f), pop_wait(f)
    done = f.complete(one, 0.5)  # this connection rests 1 s
    assert done is not None
    f.complete(two, 0.0, sent=False)  # this one is ready again at once
    again = f.pop()
    assert again is not None and again.item == b"a2"
    assert f.pop() is None, "the connection that fetched still rests"
    check_redis_frontier(f)
    f.complete(again, 0.0, sent=False)
    check_redis_frontier(f)


def test_a_block_holds_every_connection_and_its_end_frees_them(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    f = open_frontier(redis_client, redis_prefix)
    f.push_many([("a", 1, b"a%d" % i) for i in range(5)])
    one = pop_wait(f)
    f.control("block", "a", float("inf"))
    assert f.pop() is None
    f.complete(one, 0.0)
    assert f.pop() is None, "a blocked host's connections wait"
    check_redis_frontier(f)
    f.control("unblock", "a")
    assert {pop_wait(f).host, pop_wait(f).host} == {"a"}
    assert f.pop() is None
    check_redis_frontier(f)


def test_the_spare_connections_wake_with_the_hosts_next_url(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    f = open_frontier(redis_client, redis_prefix)
    f.push("b", 1, b"b0")  # three connections, one URL: two spare once it is leased
    lease = pop_wait(f)
    assert redis_client.zcard(f.key("spare")) == 2
    check_redis_frontier(f)
    f.push_many([("b", 1, b"b1"), ("b", 1, b"b2")])  # the spare ones go
    assert {pop_wait(f).item, pop_wait(f).item} == {b"b1", b"b2"}
    assert f.pop() is None
    check_redis_frontier(f)
    f.complete(lease, 0.0)
    check_redis_frontier(f)


def test_a_pages_links_wake_the_spare_connections_at_its_end_as_in_the_core(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    """A round pushes a page's links before it sends its fetch's end. The core, told of the
    end first, gives the host's back queue up with its last lease and gets it again with
    the links: every connection then waits for the host's rest. So do these."""
    f = open_frontier(redis_client, redis_prefix, factor=1.0)
    f.push("b", 1, b"b0")
    lease = pop_wait(f)
    reply = f.round([("b", 1, b"b1", None), ("b", 1, b"b2", None)], [Finished(lease, 0.2)], 0)
    done = reply.completed[0]
    assert done is not None
    check_redis_frontier(f)
    got = [pop_wait(f), pop_wait(f)]
    assert {g.item for g in got} == {b"b1", b"b2"}
    assert min(g.handed_at for g in got) >= done.next_contact - 1e-5
    assert f.pop() is None
    check_redis_frontier(f)
    # In a partitioned round the pushes come in an earlier call: the round says whose
    # leases end in it.
    for g in got:
        f.complete(g, 0.0)
    f.push("b", 1, b"b3")
    page = pop_wait(f)
    f.round([("b", 1, b"b4", None)], [], 0, ending={"b"})
    assert f.pop() is None, "the links wait for their page's end"
    check_redis_frontier(f)
    f.round([], [Finished(page, 0.0)], 0)
    assert pop_wait(f).item == b"b4"
    check_redis_frontier(f)


def test_a_lease_end_with_another_out_wakes_the_spare_connections_at_their_own_rests(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    f = open_frontier(redis_client, redis_prefix, factor=1.0)
    f.push_many([("a", 1, b"a0"), ("a", 1, b"a1")])
    one, two = pop_wait(f), pop_wait(f)
    done = f.complete(one, 0.3)  # nothing queued, another lease out: spare, resting 0.3
    assert done is not None
    f.push_many([("a", 1, b"a2"), ("a", 1, b"a3")])
    assert f.pop() is None
    f.complete(two, 0.0, sent=False)  # the other ends: its connection goes at once
    first = f.pop()
    assert first is not None and first.item == b"a2"
    assert f.pop() is None, "the connection that fetched rests its own rest"
    second = pop_wait(f)
    assert second.item == b"a3" and second.handed_at >= done.next_contact - 1e-5
    check_redis_frontier(f)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_steps_keep_the_invariants(redis_client: redis.Redis, redis_prefix: str,
                                          seed: int) -> None:
    """Pushes, claims, completions (sent or not, handed back), lapses, retirements and
    blocks at random over hosts of one to three connections; the invariants after each."""
    rng = random.Random(seed)
    hosts = {"a": 1, "b": 2, "c": 3, "d": 2}
    f = open_frontier(redis_client, redis_prefix, factor=rng.choice([0.0, 0.5]),
                      connections=hosts.__getitem__, lease_timeout=0.2)
    held: list[RedisLease] = []
    blocked: set[str] = set()
    n = 0
    for _ in range(150):
        op = rng.random()
        if op < 0.3:
            host = rng.choice(list(hosts))
            f.push(host, rng.randint(1, 2), b"%s%d" % (host.encode(), n))
            n += 1
        elif op < 0.6:
            lease = f.pop()
            if lease is not None:
                held.append(lease)
        elif op < 0.8 and held:
            lease = held.pop(rng.randrange(len(held)))
            how = rng.random()
            if how < 0.15:
                f.complete(lease, 0.0, sent=False)
            elif how < 0.3:
                f.complete(lease, 0.0, budget=-2)  # handed back
            elif how < 0.6:  # its page's links first, then its end, in one round
                links = [(lease.host, 1, b"%s%d" % (lease.host.encode(), n + i), None)
                         for i in range(rng.randint(1, 3))]
                n += len(links)
                f.round(links, [Finished(lease, rng.uniform(0.0, 0.02))], 0)
            else:
                f.complete(lease, rng.uniform(0.0, 0.02))
        elif op < 0.85:
            f.expire_leases()
        elif op < 0.88:
            f.retire(rng.choice(list(hosts)))
        elif op < 0.94:
            host = rng.choice(list(hosts))
            if host not in blocked:  # (a block over a block keeps the later end)
                blocked.add(host)
                f.control("block", host, float("inf"))
        else:
            host = rng.choice(list(hosts))
            blocked.discard(host)
            f.control("unblock", host)
        check_redis_frontier(f)
        leased: dict[str, int] = {}
        for lease in f.leases():
            leased[lease.host] = leased.get(lease.host, 0) + 1
        assert all(k <= hosts[h] for h, k in leased.items()), leased
