"""RedisFrontier specifics: seeded random stress with invariant checks, foreign data,
Redis going away, connection settings, and the seen set."""

from __future__ import annotations

import random
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy.settings import Settings

from scrapy_frontier.backends.redis.connection import redis_from_settings
from scrapy_frontier.backends.redis.frontier import RedisFrontier, RedisLease, read_pace
from scrapy_frontier.backends.redis.seen import RedisSeenSet
from scrapy_frontier.core import DelayPolicy
from scrapy_frontier.errors import (
    RedisFrontierDataError,
    RedisFrontierError,
    RedisFrontierUnavailable,
    StoreError,
)
from tests.invariants import check_redis_frontier
from tests.redis_server import RedisServer

HOSTS = ["a", "b", "c", "d", "e", "f"]
EPS = 2e-6


def clamp_delay(policy: DelayPolicy, fetch: float) -> float:
    return min(policy.max_delay, max(policy.min_delay, policy.factor * max(0.0, fetch)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_stress_keeps_invariants(redis_client: redis.Redis, redis_prefix: str,
                                        seed: int) -> None:
    rng = random.Random(seed)
    policy = DelayPolicy(factor=rng.choice([0.0, 1.0, 3.0]), min_delay=0.0, max_delay=0.05)
    levels = rng.randint(1, 4)
    back = rng.randint(1, 3)
    f = RedisFrontier(redis_client, redis_prefix, front_queues=levels, back_queues=back,
                      back_queues_max=back + rng.randint(0, 2), policy=policy,
                      lease_timeout=0.15, priority_bias=rng.choice([1.0, 2.0, 5.0]))
    pushed: dict[bytes, str] = {}
    handed: dict[bytes, RedisLease] = {}  # item -> latest lease
    outstanding: dict[str, RedisLease] = {}  # host -> lease we believe is held
    rest_until: dict[str, float] = {}
    completed: set[bytes] = set()
    retired: set[str] = set()
    dropped: set[bytes] = set()
    min_rest: dict[str, float] = {}
    n = 0
    started = time.monotonic()

    def on_handed(lease: RedisLease) -> None:
        assert lease.item in pushed and pushed[lease.item] == lease.host
        assert lease.host not in retired
        assert lease.item not in completed and lease.item not in dropped
        prev = handed.get(lease.item)
        if prev is not None:
            # Only an expired lease's item comes back.
            assert lease.handed_at >= prev.deadline - EPS, "item handed out twice"
        held = outstanding.get(lease.host)
        if held is not None:
            assert lease.handed_at >= held.deadline - EPS, "second lease on a host"
            del outstanding[lease.host]
        assert lease.handed_at >= rest_until.get(lease.host, 0.0) - EPS, "rest not honoured"
        assert lease.ready_at <= lease.handed_at + EPS
        handed[lease.item] = lease
        outstanding[lease.host] = lease

    for _step in range(300):
        op = rng.random()
        if op < 0.35:
            host = rng.choice(HOSTS)
            item = b"i%d" % n
            n += 1
            ok = f.push(host, rng.randint(1, levels), item)
            assert ok == (host not in retired)
            if ok:
                pushed[item] = host
        elif op < 0.65:
            lease = f.pop()
            if lease is not None:
                on_handed(lease)
        elif op < 0.85 and outstanding:
            host = rng.choice(sorted(outstanding))
            lease = outstanding.pop(host)
            fetch = rng.choice([0.0, 0.005, 0.02])
            at_least = rng.choice([0.0, 0.0, 0.03])
            done = f.complete(lease, fetch, rest_at_least=at_least)
            if done is None:
                assert f.server_time() >= lease.deadline - EPS, "live lease refused"
            else:
                completed.add(lease.item)
                rest = max(clamp_delay(policy, fetch), min_rest.get(host, 0.0), at_least)
                assert abs(done.next_contact - (done.at + rest)) < 1e-5
                rest_until[host] = done.next_contact
        elif op < 0.9:
            time.sleep(rng.choice([0.01, 0.05, 0.2]))
            for host, _item in f.expire_leases():
                if host in outstanding and f.server_time() >= outstanding[host].deadline:
                    del outstanding[host]
        elif op < 0.95:
            host = rng.choice(HOSTS)
            seconds = rng.choice([0.0, 0.02])
            f.set_min_rest(host, seconds)
            min_rest[host] = seconds
        elif op < 0.97 and not retired:
            host = rng.choice(HOSTS)
            retired.add(host)
            dropped.update(f.retire(host))
        for host, item in f.take_dropped():
            assert host in retired
            dropped.add(item)
        check_redis_frontier(f)
        assert time.monotonic() - started < 60, "stress test too slow"
    # Drain: complete every lease still believed held, then everything left.
    for lease in list(outstanding.values()):
        if f.complete(lease, 0.0) is not None:
            completed.add(lease.item)
    outstanding.clear()
    for _ in range(2000):
        for _host, item in f.take_dropped():
            dropped.add(item)
        if f.idle():
            break
        lease = f.pop()
        if lease is None:
            time.sleep(0.01)
            continue
        on_handed(lease)
        del outstanding[lease.host]
        assert f.complete(lease, 0.0) is not None
        completed.add(lease.item)
        check_redis_frontier(f)
    for _host, item in f.take_dropped():
        dropped.add(item)
    assert f.idle()
    assert completed | dropped == set(pushed), "items lost"
    assert not completed & dropped
    assert all(pushed[i] in retired for i in dropped)


def test_foreign_or_mismatched_data_is_refused(redis_client: redis.Redis,
                                               redis_prefix: str) -> None:
    redis_client.set(redis_prefix + "f:2", "not a list")
    with pytest.raises(RedisFrontierDataError, match=r"f:2.*string.*list"):
        RedisFrontier(redis_client, redis_prefix, front_queues=4)
    redis_client.delete(redis_prefix + "f:2")
    with pytest.raises(RedisFrontierDataError, match="does not mark them"):
        redis_client.set(redis_prefix + "other", "x")
        RedisFrontier(redis_client, redis_prefix, front_queues=4)
    redis_client.delete(redis_prefix + "other")
    f = RedisFrontier(redis_client, redis_prefix, front_queues=4)
    with pytest.raises(RedisFrontierDataError, match="4 front queues"):
        RedisFrontier(redis_client, redis_prefix, front_queues=8)
    redis_client.hset(redis_prefix + "meta", "version", "99")
    with pytest.raises(RedisFrontierDataError, match="version '99'"):
        RedisFrontier(redis_client, redis_prefix, front_queues=4)
    redis_client.hset(redis_prefix + "meta", "version", "1")
    # A key clobbered while running: the script error names the prefix.
    redis_client.set(redis_prefix + "ready", "oops")
    with pytest.raises(RedisFrontierDataError, match=redis_prefix):
        f.push("a", 1, b"x")
    assert issubclass(RedisFrontierDataError, StoreError)


def test_redis_going_away_raises_unavailable_and_loses_nothing() -> None:
    server = RedisServer(persistence=True).start()
    try:
        port = server.port
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2,
                             socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
        f = RedisFrontier(client, "x:frontier:", front_queues=2, back_queues=2,
                          policy=DelayPolicy(0.0, 0.0, 1.0), lease_timeout=0.3)
        for i in range(4):
            f.push(f"h{i % 2}", 1, b"u%d" % i)
        held = f.pop()
        assert held is not None
        server.kill()
        with pytest.raises(RedisFrontierUnavailable, match=f"127.0.0.1:{port}"):
            f.complete(held, 0.0)
        with pytest.raises(RedisFrontierError):
            f.pop()
        server.start(port=port)
        # The failed completion changed nothing: the lease expires, its item comes back.
        seen = []
        deadline = time.monotonic() + 10
        while not f.idle() and time.monotonic() < deadline:
            lease = f.pop()
            if lease is None:
                time.sleep(0.02)
                continue
            seen.append(lease.item)
            f.complete(lease, 0.0)
            check_redis_frontier(f)
        assert sorted(seen) == sorted(b"u%d" % i for i in range(4))
    finally:
        server.stop()


def test_redis_from_settings_follows_scrapy_redis(redis_server: RedisServer) -> None:
    client = redis_from_settings(Settings({
        "REDIS_URL": redis_server.url, "REDIS_PARAMS": {"decode_responses": True},
        "REDIS_DECODE_RESPONSES": True,
    }))
    assert client.ping()
    assert not client.connection_pool.connection_kwargs.get("decode_responses")
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 30  # scrapy-redis'
    client2 = redis_from_settings(Settings({"REDIS_HOST": "127.0.0.1",
                                            "REDIS_PORT": redis_server.port}))
    assert client2.ping()
    from scrapy_frontier.settings import FrontierConfig

    keys = FrontierConfig.from_settings(Settings({"FRONTIER_FRONT_QUEUES": 3})).redis
    assert keys.keys_for("spider") == ("spider:frontier:", "spider:seen:", "spider:history:")
    with pytest.raises(ValueError, match="decodes responses"):
        RedisFrontier(redis.Redis(port=redis_server.port, decode_responses=True), "q:")


def test_seen_set(redis_client: redis.Redis, redis_prefix: str) -> None:
    seen = RedisSeenSet(redis_client, redis_prefix + "seen:", expected=50_000)
    assert seen.buckets == 256
    rng = random.Random(5)
    fps = [rng.getrandbits(64) for _ in range(3000)]
    assert seen.add_many(fps) == [True] * 3000
    assert seen.add_many(fps[:10] + [fps[0]]) == [False] * 11
    assert all(fp in seen for fp in fps[:50])
    assert seen.add_if_new(0) and not seen.add_if_new(0)
    assert seen.add_if_new(2**64 - 1) and not seen.add_if_new(2**64 - 1)
    # Reopened with another expectation: the stored bucket count wins.
    again = RedisSeenSet(redis_client, redis_prefix + "seen:", expected=10**9)
    assert again.buckets == 256 and fps[7] in again
    kinds = {redis_client.object("encoding", k) for k in
             redis_client.scan_iter(match=redis_prefix + "seen:[0-9a-f]*")}
    assert kinds == {b"intset"}




def test_front_queue_choice_is_biased(redis_client: redis.Redis, redis_prefix: str) -> None:
    """Weight bias**(level-1): with bias 3 and two levels, level 2 is served 3/4 of the time."""
    f = RedisFrontier(redis_client, redis_prefix, front_queues=2, back_queues=1,
                      priority_bias=3.0, policy=DelayPolicy(0.0, 0.0, 0.0),
                      rng=random.Random(11))
    f.push_many([(f"h{i}", 1 + i % 2, b"%d" % i) for i in range(600)])
    levels = []
    for _ in range(200):
        lease = f.pop()
        assert lease is not None
        levels.append(lease.level)
        f.complete(lease, 0.0)
    share = levels[1:].count(2) / len(levels[1:])
    assert 0.65 < share < 0.85, share
    check_redis_frontier(f)


def test_a_redis_restarted_empty_is_noticed_and_nothing_is_written() -> None:
    from scrapy_frontier.errors import RedisFrontierGone
    from tests.redis_server import RedisServer

    server = RedisServer().start()  # no persistence
    try:
        client = server.client()
        frontier = RedisFrontier(client, "gone:frontier:")
        frontier.push_many([("a.example", 1, b"x"), ("b.example", 1, b"y")])
        port = server.port
        server.kill()
        server.start(port=port)
        with pytest.raises(RedisFrontierGone, match="gone.*restarted without persistence"):
            frontier.pop()
        with pytest.raises(RedisFrontierGone):
            frontier.push("c.example", 1, b"z")
        assert client.dbsize() == 0  # nothing written into the empty Redis
        client.close()
    finally:
        server.stop()


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_round_runs_without_a_thread(redis_client: redis.Redis, redis_prefix: str,
                                       partitions: int) -> None:
    """The Redis driver's I/O round is a function of its round and the shared state: run
    here directly, it pushes, drops a duplicate, claims and completes on a real Redis, in
    one partition or across three."""
    from scrapy_frontier.backends.redis.partitions import Layout, open_frontier, open_seen
    from scrapy_frontier.backends.redis.round import (
        LeaseEnd,
        Pushed,
        Round,
        RoundRunner,
    )

    layout = Layout(redis_prefix, redis_prefix + "seen:", redis_prefix + "history:",
                    count=partitions, tagged=partitions > 1)
    frontier = open_frontier(redis_client, layout, front_queues=2, back_queues=2,
                             policy=DelayPolicy(0.0, 0.0, 0.0))
    seen = open_seen(redis_client, layout, expected=1000)
    runner = RoundRunner(frontier, seen, budget_for=lambda host: 0, clock=time.monotonic,
                         unfetched=set())

    def pushed(fp: int, host: str) -> Pushed:
        return Pushed(fp, fp, True, True, False, host, 1, fp.to_bytes(8, "big") + b"r")

    first = runner.run(Round(pushes=[pushed(1, "a.example"), pushed(2, "b.example")], want=1))
    assert first.duplicates == 0 and first.dropped == [] and len(first.leases) == 1
    again = runner.run(Round(pushes=[pushed(1, "a.example")], want=1))
    assert again.duplicates == 1 and again.dropped == [0]  # seen: dropped as Scrapy drops it
    assert len(again.leases) == 1  # the other host's request
    done = runner.run(Round(completions=[LeaseEnd(lease, 0.01, 0.0, None)
                                         for lease in first.leases + again.leases]))
    assert done.idle and done.queued == 0 and done.leases == []
    for part in frontier.parts:
        check_redis_frontier(part)


def test_a_claim_that_takes_back_an_overdue_lease_counts_it(redis_server: RedisServer) -> None:
    """Worker A holds a lease past its timeout (stopped mid-fetch); worker B's next claim
    gives it back to its host and counts it, so B can say so (frontier/leases/reclaimed)."""
    client = redis_server.client()
    prefix = f"reclaim{time.monotonic_ns()}:frontier:"
    a = RedisFrontier(client, prefix, policy=DelayPolicy(0.0, 0.0, 1.0), lease_timeout=0.2)
    b = RedisFrontier(client, prefix, policy=DelayPolicy(0.0, 0.0, 1.0), lease_timeout=0.2)
    a.push("h", 1, b"u1")
    held = a.pop()
    assert held is not None and b.pop() is None and b.reclaimed == 0  # not overdue yet
    time.sleep(0.3)  # past the lease's deadline (server time)
    again = None
    deadline = time.monotonic() + 10
    while again is None and time.monotonic() < deadline:
        again = b.pop()
    assert again is not None and again.item == b"u1"
    assert b.reclaimed == 1 and a.reclaimed == 0
    assert a.complete(held, 0.0) is None  # A's late completion changes nothing
    b.complete(again, 0.0)
    check_redis_frontier(b)


def test_a_lease_lasts_the_liveness_window_and_its_heartbeat_renews_it(
        redis_server: RedisServer) -> None:
    """With a liveness window, a claim's lease lapses that long after the claim (server
    time); a renewal by its ticket extends it, never past claim + lease_timeout; a renewal
    naming another ticket, or a completed lease, changes nothing."""
    client = redis_server.client()
    prefix = f"live{time.monotonic_ns()}:frontier:"
    a = RedisFrontier(client, prefix, policy=DelayPolicy(0.0, 0.0, 1.0), lease_timeout=1.0,
                      liveness=0.5)
    a.push("h", 1, b"u1")
    a.push("g", 1, b"u2")
    lease = a.pop()
    other = a.pop()
    assert lease is not None and other is not None
    assert lease.deadline == pytest.approx(lease.handed_at + 0.5, abs=1e-5)
    deadlines = a.key("deadlines")
    before = client.zscore(deadlines, lease.host)
    # Renewal says which leases it found gone: here the one named by a wrong ticket.
    assert a.renew("w1", [(lease.host, lease.ticket), (other.host, other.ticket + 99)]) == [
        (other.host, other.ticket + 99)]
    renewed = client.zscore(deadlines, lease.host)
    assert renewed > before
    assert client.zscore(deadlines, other.host) == pytest.approx(other.deadline, abs=1e-5)
    time.sleep(0.6)  # now + 0.5 is past the claim + lease_timeout: the cap holds
    assert a.renew("w1", [(lease.host, lease.ticket)]) == []
    assert client.zscore(deadlines, lease.host) == pytest.approx(lease.handed_at + 1.0, abs=1e-5)
    assert a.live_workers() == 1
    a.complete(lease, 0.0)
    # Completed: left alone, and reported as no longer held.
    assert a.renew("w1", [(lease.host, lease.ticket)]) == [(lease.host, lease.ticket)]
    assert a.renew("w1", []) == []
    a.leave("w1")
    assert a.live_workers() == 0
    with pytest.raises(ValueError, match="liveness"):
        RedisFrontier(client, prefix, liveness=-1.0)
    with pytest.raises(ValueError, match="renew needs"):
        RedisFrontier(client, prefix).renew("w", [])


def test_a_dead_workers_lease_comes_back_after_its_liveness_not_its_timeout(
        redis_server: RedisServer) -> None:
    """Worker A stops renewing (it died): worker B's claim takes A's lease back once A's
    liveness window has passed, long before the 600 s lease timeout, and counts it."""
    client = redis_server.client()
    prefix = f"dead{time.monotonic_ns()}:frontier:"
    kw: dict = {"policy": DelayPolicy(0.0, 0.0, 1.0), "lease_timeout": 600.0, "liveness": 0.3}
    a, b = RedisFrontier(client, prefix, **kw), RedisFrontier(client, prefix, **kw)
    a.push("h", 1, b"u1")
    held = a.pop()
    assert held is not None and b.pop() is None
    time.sleep(0.4)  # past A's window, with no heartbeat
    again = b.pop()
    assert again is not None and again.item == b"u1" and b.reclaimed == 1
    assert a.complete(held, 0.0) is None  # A's late completion changes nothing
    b.complete(again, 0.0)
    check_redis_frontier(b)


def test_one_round_pushes_completes_claims_and_reads_the_sizes(
        redis_server: RedisServer) -> None:
    """RedisFrontier.round does in one script call what push_unseen, complete, pop, sizes and
    next_wakeup do one by one: duplicates are refused by the seen set, a completion whose
    lease is gone is None, claims stop when no host is due, and the wake-up is read then."""
    from scrapy_frontier.backends.redis.frontier import Finished

    client = redis_server.client()
    prefix = f"round{time.monotonic_ns()}:frontier:"
    seen = f"{prefix}seen"
    f = RedisFrontier(client, prefix, policy=DelayPolicy(10.0, 0.0, 60.0), liveness=5.0)
    first = f.round([("a", 1, b"a1", (seen, 1, True)), ("a", 1, b"a2", (seen, 2, True)),
                     ("b", 2, b"b1", (seen, 3, True)), ("b", 1, b"dup", (seen, 3, True))],
                    [], want=8)
    assert first.pushed == [1, 1, 1, 2]
    assert sorted((lease.host, lease.item) for lease in first.leases) == [("a", b"a1"),
                                                                        ("b", b"b1")]
    # One lease per host: a's second URL waits, so no host is due and no wake-up either
    # (a is leased, not resting).
    assert (first.front, first.back, first.in_flight) == (0, 1, 2) and first.wakeup is None
    for lease in first.leases:
        assert lease.deadline == pytest.approx(lease.handed_at + 5.0, abs=1e-5)
    a = next(lease for lease in first.leases if lease.host == "a")
    b = next(lease for lease in first.leases if lease.host == "b")
    stale = RedisLease(a.ticket + 100, "a", a.item, 1, a.handed_at, a.deadline, a.ready_at)
    second = f.round([], [Finished(a, 0.5), Finished(b, 0.0), Finished(stale, 0.1)], want=1)
    assert second.completed[0] is not None and second.completed[1] is not None
    assert second.completed[2] is None  # that lease id does not hold host a
    assert second.completed[0].next_contact == pytest.approx(second.completed[0].at + 5.0)
    # a rests 5 s (10 x 0.5 s): nothing is due, and the round says when a will be.
    assert second.leases == [] and second.wakeup == pytest.approx(5.0, abs=0.1)
    assert (second.front, second.back, second.in_flight) == (0, 1, 0)
    assert f.stats()["completed"] == 2 and f.stats()["pushed"] == 3
    check_redis_frontier(f)


def test_a_round_claims_ahead_only_what_comes_ready_soon_and_never_shortens_a_rest(
        redis_server: RedisServer) -> None:
    """With ``ahead``, a round that finds no host ready claims the one ready first within
    that many seconds, and the lease says how long to wait; a host ready now comes first;
    a lease claimed ahead and given back unfetched leaves its host resting until its ready
    time, not until the giving back (0 s fetch, no rest)."""
    from scrapy_frontier.backends.redis.frontier import Finished

    client = redis_server.client()
    prefix = f"ahead{time.monotonic_ns()}:frontier:"
    f = RedisFrontier(client, prefix, policy=DelayPolicy(10.0, 0.0, 60.0), liveness=5.0)
    for item in (b"a1", b"a2", b"b1", b"b2"):
        f.push(item[:1].decode(), 1, item)
    first = f.round([], [], want=2)
    a, b = sorted(first.leases, key=lambda lease: lease.host)
    assert a.wait == 0.0 and b.wait == 0.0
    # a rests 0.5 s (10 x 0.05 s), b 3 s.
    f.round([], [Finished(a, 0.05), Finished(b, 0.3)], want=0)
    assert f.round([], [], want=2).leases == []  # nothing ready now, none ahead
    assert f.round([], [], want=2, ahead=0.1).leases == []  # a is 0.5 s away
    time.sleep(0.45)
    f.push("c", 1, b"c1")  # a new host: ready now
    now_first = f.round([], [], want=1, ahead=0.2)
    assert [(lease.host, lease.wait) for lease in now_first.leases] == [("c", 0.0)]
    got = f.round([], [], want=2, ahead=0.2)
    assert [lease.host for lease in got.leases] == ["a"]  # b is still 2.5 s away
    early = got.leases[0]
    assert early.item == b"a2" and 0.0 < early.wait <= 0.2
    assert early.ready_at > early.handed_at
    # Given back unfetched at once: a still rests until the ready time it was claimed in.
    done = f.round([], [Finished(early, 0.0, budget=-1)], want=0).completed[0]
    assert done is not None and done.next_contact >= early.ready_at - EPS
    check_redis_frontier(f)


def test_a_dead_workers_host_rests_its_own_pace_or_the_first_pace(
        redis_server: RedisServer) -> None:
    """A lapsed lease of a dead worker: a measured host rests the pace it was given with its
    last fetch (its stored fetch and pace stay); a host never measured rests the pace of a
    fetch of no known time (``policy.delay(0)``, sent by the client), not the lapse rest of
    a whole lease, and keeps that pace with the fetch the dead worker could have made (the
    claim to one heartbeat after the last renewal).
    Both rests count from two heartbeats after the last renewal (the worker was dead by
    then), not from when the lapse was noticed."""
    client = redis_server.client()
    prefix = f"deadrest{time.monotonic_ns()}:frontier:"
    policy = DelayPolicy(2.0, 0.8, 60.0)
    kw: dict = {"policy": policy, "lease_timeout": 10.0, "liveness": 0.4}
    a, b = RedisFrontier(client, prefix, **kw), RedisFrontier(client, prefix, **kw)
    fetches = a.key("fetch")
    first_pace = policy.delay(0.0)  # 0.8 s, not the 20 s of a fetch that ran the whole lease
    for item in (b"m1", b"m2", b"m3"):
        a.push("measured", 1, item)
    a.push("new", 1, b"n1")
    a.push("new", 1, b"n2")
    first = a.pop()
    assert first is not None and first.host == "measured"
    # Measured: 0.5 s, so a pace of 1 s; the answer ended 1 s ago, so no rest is left.
    a.complete(first, 0.5, ended_ago=1.0)
    assert read_pace(client.hget(fetches, "measured")) == (0.5, 1.0)
    held = {lease.host: lease for lease in (a.pop(), a.pop()) if lease is not None}
    assert set(held) == {"measured", "new"}
    time.sleep(0.5)  # past the window, with no heartbeat: A died
    assert b.pop() is None  # both taken back; neither rest is over
    assert b.reclaimed == 2
    # Dead from claim + 0.2 s (the deadline, claim + 0.4 s, less two beats of 0.1 s).
    died = {host: lease.handed_at + 0.2 for host, lease in held.items()}
    # "measured" rests its own pace from then (1 s), its fetch and pace kept as they were.
    assert b.next_contact("measured") == pytest.approx(died["measured"] + 1.0, abs=EPS)
    assert read_pace(client.hget(fetches, "measured")) == (0.5, 1.0)
    # "new" rests the first pace from then; its fetch: claim to one beat after it (0.1 s).
    assert b.next_contact("new") == pytest.approx(died["new"] + first_pace, abs=EPS)
    last, pace = read_pace(client.hget(fetches, "new"))
    assert last == pytest.approx(0.1, abs=EPS) and pace == first_pace
    check_redis_frontier(b)


def test_a_lease_that_ran_its_whole_length_rests_the_lapse_rest(
        redis_server: RedisServer) -> None:
    """A lease that lapses at claim + lease_timeout (no heartbeat) rests its host the lapse
    rest, ``policy.delay(lease_timeout)``, from when it is taken back: not the rest of the
    time the lapse took to notice, and not the host's own pace. Its fetch counts as lasting
    until then."""
    client = redis_server.client()
    prefix = f"wholelapse{time.monotonic_ns()}:frontier:"
    policy = DelayPolicy(2.0, 0.0, 60.0)
    a = RedisFrontier(client, prefix, policy=policy, lease_timeout=0.3)
    fetches = a.key("fetch")
    lapse_rest = policy.delay(0.3)  # 0.6 s
    for host in ("measured", "new"):
        for i in range(3):
            a.push(host, 1, f"{host}/{i}".encode())
    first = a.pop()
    assert first is not None
    a.complete(first, 0.01)  # a pace of 20 ms
    measured = first.host
    assert read_pace(client.hget(fetches, measured)) == (0.01, 0.02)
    time.sleep(0.03)
    held = {lease.host: lease for lease in (a.pop(), a.pop()) if lease is not None}
    assert set(held) == {"measured", "new"}
    time.sleep(0.5)  # 0.2 s past the deadlines: a delay of 1.0 s on the core's rule
    before = a.server_time()
    assert sorted(host for host, _ in a.expire_leases()) == ["measured", "new"]
    after = a.server_time()
    for host, lease in held.items():
        rest_end = a.next_contact(host)
        assert rest_end is not None
        assert before + lapse_rest - EPS <= rest_end <= after + lapse_rest + EPS, host
        last, pace = read_pace(client.hget(fetches, host))
        assert pace == lapse_rest
        assert before - lease.handed_at - EPS <= last <= after - lease.handed_at + EPS
    check_redis_frontier(a)


def test_a_push_refused_for_a_retired_host_is_not_marked_seen(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    """The push tests and marks the seen set in one command; a push refused because its host
    is retired takes its mark back, so the URL is queued once the host is taken back."""
    frontier = RedisFrontier(redis_client, redis_prefix)
    seen = RedisSeenSet(redis_client, redis_prefix + "seen:", expected=1000)
    entry = ("gone.example", 1, b"u", (*seen.bucket(42), True))
    frontier.retire("gone.example")
    assert frontier.push_unseen([entry]) == [0]
    assert seen.contains_many([42]) == [False]
    frontier.control("unretire", "gone.example")
    assert frontier.push_unseen([entry]) == [1]
    assert frontier.push_unseen([entry]) == [2]  # marked now
    assert seen.contains_many([42]) == [True]


def test_every_frontier_script_ships_as_package_data() -> None:
    """The frontier registers only scripts read from lua/*.lua: none is written inline."""
    import ast
    from pathlib import Path

    from scrapy_frontier.backends.redis import frontier
    from scrapy_frontier.backends.redis.lua import lua_source

    assert "redis.call('TIME')" in lua_source("clock")
    assert "HSET" in lua_source("init_meta")
    tree = ast.parse(Path(frontier.__file__).read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and ast.get_docstring(node) is not None}
    inline = [node.value[:40] for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str)
              and "redis.call" in node.value and id(node) not in docstrings]
    assert not inline, inline
