"""One behavioural contract, every frontier backend.

The same tests run against the core :class:`Frontier` (memory and SQLite
stores, on a fake clock) and against :class:`RedisFrontier` (a real
redis-server, on the server's clock). Each backend is wrapped in an adapter
that speaks bytes items, gives times from the backend's own clock, and waits
by advancing the fake clock or by sleeping. The durations are short real ones
(a few hundred ms) so the Redis runs stay quick; the "not before" rules compare
times taken from the same clock, so they need no tolerance beyond the 1 us
rounding of Redis times.

Properties: everything pushed is handed out exactly once and completed (nothing
lost or duplicated); at most one lease per host; a host's highest level first,
FIFO within a level; rests (policy, minimum rest, rest_at_least) honoured, also
for a host that gave up its back queue and came back; an expired lease's item
is handed out again and the late completion is refused; a retired host's URLs
are dropped and later pushes refused; len/in_flight/idle accounting; and (for
Redis) the state survives a reconnect with a new frontier object on the same keys.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_frontier.backends.redis.frontier import RedisFrontier
from scrapy_frontier.backends.sqlite.queue import SQLiteStore
from scrapy_frontier.codec import Codec
from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier
from scrapy_frontier.core.store import MemoryQueueStore
from tests.invariants import check_frontier, check_redis_frontier

BYTES_CODEC: Codec[Any] = Codec(bytes, bytes)
EPS = 2e-6
LEASE_TIMEOUT = 0.5


@dataclass
class Claim:
    host: str
    level: int
    item: bytes
    handed_at: float
    deadline: float
    handle: Any


class Backend:
    """What the contract needs from a frontier; see the two implementations."""

    name = "?"
    frontier: Any

    def push(self, host: str, level: int, item: bytes) -> bool:
        return bool(self.frontier.push(host, level, item))

    def pop(self) -> Claim | None:
        raise NotImplementedError

    def complete(self, claim: Claim, fetch: float, rest_at_least: float = 0.0,
                 ended_ago: float = 0.0, *, sent: bool = True) -> float | None:
        raise NotImplementedError

    def expire(self) -> list[bytes]:
        raise NotImplementedError

    def set_min_rest(self, host: str, seconds: float) -> None:
        self.frontier.set_min_rest(host, seconds)

    def retire(self, host: str) -> list[bytes]:
        return list(self.frontier.retire(host))

    def take_dropped(self) -> list[bytes]:
        return [item for _, item in self.frontier.take_dropped()]

    def __len__(self) -> int:
        return len(self.frontier)

    def in_flight(self) -> int:
        return int(self.frontier.in_flight)

    def idle(self) -> bool:
        raise NotImplementedError

    def now(self) -> float:
        raise NotImplementedError

    def wait(self, seconds: float) -> None:
        raise NotImplementedError

    def next_wakeup(self) -> float | None:
        """Seconds from now."""
        raise NotImplementedError

    def reopen(self) -> None:
        """Continue with a new frontier object on the same state, where that means anything."""

    def check(self) -> None:
        raise NotImplementedError


class CoreBackend(Backend):
    def __init__(self, store: str, tmp: Path, policy: DelayPolicy, **kw: Any) -> None:
        self.name = f"core-{store}"
        self.clock = FakeClock(1000.0)
        levels = kw.get("front_queues", 4)
        self.store: Any = (
            MemoryQueueStore(levels) if store == "memory"
            else SQLiteStore(tmp / "f.sqlite", levels=levels, spider="t", codec=BYTES_CODEC,
                             window=3, flush_ops=5)
        )
        self.frontier: Frontier[bytes] = Frontier(
            store=self.store, clock=self.clock, policy=policy, lease_timeout=LEASE_TIMEOUT, **kw
        )

    def pop(self) -> Claim | None:
        lease = self.frontier.pop()
        if lease is None:
            return None
        return Claim(lease.host, lease.level, lease.item, lease.handed_at, lease.deadline,
                     lease.ticket)

    def complete(self, claim: Claim, fetch: float, rest_at_least: float = 0.0,
                 ended_ago: float = 0.0, *, sent: bool = True) -> float | None:
        done = self.frontier.complete(claim.handle, fetch, rest_at_least=rest_at_least,
                                      ended_ago=ended_ago, sent=sent)
        return None if done is None else self.clock()

    def expire(self) -> list[bytes]:
        # The core frontier hands expired leases back to the caller, whose job is to
        # queue them again (the scheduler does); the Redis frontier does it itself.
        out = []
        for lease in self.frontier.expire_leases():
            self.frontier.push(lease.host, lease.level, lease.item)
            out.append(lease.item)
        return out

    def idle(self) -> bool:
        return len(self.frontier) == 0 and self.frontier.in_flight == 0

    def now(self) -> float:
        return self.clock()

    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def next_wakeup(self) -> float | None:
        wake = self.frontier.next_wakeup()
        return None if wake is None else max(0.0, wake - self.clock())

    def check(self) -> None:
        check_frontier(self.frontier)

    def close(self) -> None:
        if isinstance(self.store, SQLiteStore):
            self.store.close()


class RedisBackend(Backend):
    def __init__(self, client: redis.Redis, prefix: str, policy: DelayPolicy, **kw: Any) -> None:
        self.name = "redis"
        self.client = client
        self.prefix = prefix
        self.kw = dict(kw, policy=policy, lease_timeout=LEASE_TIMEOUT)
        self.frontier = RedisFrontier(client, prefix, **self.kw)

    def pop(self) -> Claim | None:
        lease = self.frontier.pop()
        if lease is None:
            return None
        return Claim(lease.host, lease.level, lease.item, lease.handed_at, lease.deadline, lease)

    def complete(self, claim: Claim, fetch: float, rest_at_least: float = 0.0,
                 ended_ago: float = 0.0, *, sent: bool = True) -> float | None:
        done = self.frontier.complete(claim.handle, fetch, rest_at_least=rest_at_least,
                                      ended_ago=ended_ago, sent=sent)
        return None if done is None else done.at

    def expire(self) -> list[bytes]:
        return [item for _, item in self.frontier.expire_leases()]

    def idle(self) -> bool:
        return self.frontier.idle()

    def now(self) -> float:
        return self.frontier.server_time()

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def next_wakeup(self) -> float | None:
        return self.frontier.next_wakeup()

    def reopen(self) -> None:
        kw = self.client.connection_pool.connection_kwargs
        self.client = redis.Redis(host=kw["host"], port=kw["port"], db=kw.get("db", 0))
        self.frontier = RedisFrontier(self.client, self.prefix, **self.kw)

    def check(self) -> None:
        check_redis_frontier(self.frontier)

    def close(self) -> None:
        pass


BACKENDS = ["core-memory", "core-sqlite", "redis"]


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: list[Any] = []

    def factory(policy: DelayPolicy | None = None, **kw: Any) -> Backend:
        policy = policy or DelayPolicy(factor=0.0, min_delay=0.0, max_delay=10.0)
        kw.setdefault("front_queues", 4)
        kw.setdefault("back_queues", 2)
        kw.setdefault("back_queues_max", 3)
        if request.param == "redis":
            client = request.getfixturevalue("redis_client")
            prefix = request.getfixturevalue("redis_prefix") + f"{len(made)}:"
            backend: Any = RedisBackend(client, prefix, policy, **kw)
        else:
            sub = tmp_path / str(len(made))
            sub.mkdir()
            backend = CoreBackend(request.param.split("-")[1], sub, policy, **kw)
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        backend.close()


def pop_soon(b: Backend, max_wait: float = 3.0) -> Claim:
    """Pop, waiting for rests (bounded); fail if nothing comes."""
    start = b.now()
    for _ in range(400):
        claim = b.pop()
        if claim is not None:
            return claim
        wake = b.next_wakeup()
        b.wait(min(0.05, wake) if wake else 0.02)
        assert b.now() - start < max_wait, "nothing handed out in time"
    raise AssertionError("nothing handed out")


def drain(b: Backend, fetch: float = 0.0, limit: int = 500) -> list[Claim]:
    got: list[Claim] = []
    for _ in range(limit):
        if b.idle():
            return got
        claim = pop_soon(b)
        got.append(claim)
        assert b.complete(claim, fetch) is not None
        b.check()
    raise AssertionError("did not drain")


def test_everything_handed_out_once_and_accounted(make: Any) -> None:
    b = make()
    assert b.idle() and len(b) == 0 and b.next_wakeup() is None
    items = {}
    for i in range(30):
        item = f"u{i}".encode()
        items[item] = f"h{i % 5}"
        assert b.push(items[item], 1 + i % 4, item)
        b.check()
    assert len(b) == 30 and b.in_flight() == 0 and not b.idle()
    done: list[bytes] = []
    for _ in range(200):
        if b.idle():
            break
        claim = pop_soon(b)
        assert items[claim.item] == claim.host
        assert len(b) + b.in_flight() + len(done) == 30
        assert b.in_flight() == 1
        assert b.complete(claim, 0.0) is not None
        done.append(claim.item)
        b.check()
    assert sorted(done) == sorted(items)
    assert b.idle() and len(b) == 0 and b.in_flight() == 0


def test_one_lease_per_host(make: Any) -> None:
    b = make()
    for i in range(4):
        b.push("a", 2, b"a%d" % i)
        b.push("b", 2, b"b%d" % i)
    first = b.pop()
    assert first is not None
    other = "b" if first.host == "a" else "a"
    second = b.pop()
    assert second is not None and second.host == other
    assert b.pop() is None, "a host was handed out while its fetch is in flight"
    assert b.in_flight() == 2
    assert b.complete(first, 0.0) is not None
    third = b.pop()
    assert third is not None and third.host == first.host
    assert b.pop() is None
    b.check()


def test_highest_level_first_fifo_within_level(make: Any) -> None:
    b = make()
    order = [(1, b"l1a"), (3, b"l3a"), (2, b"l2a"), (3, b"l3b"), (1, b"l1b"), (4, b"l4a")]
    for level, item in order:
        b.push("a", level, item)
    got = [c.item for c in drain(b)]
    # The first push may have been handed straight from its front queue: it is the only
    # URL then. Every other one comes highest level first, FIFO within a level.
    assert got == [b"l4a", b"l3a", b"l3b", b"l2a", b"l1a", b"l1b"]


@pytest.mark.parametrize("ago", [0.0, 0.15])
@pytest.mark.parametrize("how", ["policy", "min_rest", "rest_at_least"])
def test_rest_is_honoured(make: Any, how: str, ago: float) -> None:
    """The delay policy's rest counts from when the answer was complete (``ended_ago``
    before the report); a minimum rest and ``rest_at_least`` count from the report."""
    rest = 0.4
    b = make(DelayPolicy(factor=2.0 if how == "policy" else 0.0, min_delay=0.0, max_delay=10.0))
    if how == "min_rest":
        b.set_min_rest("a", rest)
    b.push("a", 1, b"a1")
    b.push("a", 1, b"a2")
    claim = pop_soon(b)
    fetch = rest / 2 if how == "policy" else 0.0
    before = b.now()
    ended = b.complete(claim, fetch, rest_at_least=rest if how == "rest_at_least" else 0.0,
                       ended_ago=ago)
    assert ended is not None
    assert b.pop() is None, "host handed out during its rest"
    wake = b.next_wakeup()
    assert wake is not None
    expected = rest - ago if how == "policy" else rest
    assert expected - (b.now() - before) - EPS <= wake <= expected + EPS
    second = pop_soon(b)
    assert second.item == b"a2"
    assert second.handed_at >= ended + expected - EPS


def test_a_request_never_sent_rests_its_host_nothing(make: Any) -> None:
    """robots.txt forbade it, or a cache answered it: the host is ready again as it was for
    that lease, so its next URL waits one rest after the last fetch sent, not one per URL
    that was never sent. The last URL ended unsent gives the back queue up as any other."""
    rest = 0.4
    b = make(DelayPolicy(factor=0.0, min_delay=rest, max_delay=10.0))
    for i in range(4):
        b.push("a", 1, b"a%d" % i)
    first = pop_soon(b)
    ended = b.complete(first, 0.01)
    assert ended is not None
    second = pop_soon(b)
    assert second.handed_at >= ended + rest - EPS
    assert b.complete(second, 0.0, sent=False) is not None
    third = b.pop()
    assert third is not None and third.item == b"a2", "a rest after a request never sent"
    b.check()
    sent_end = b.complete(third, 0.01)
    assert sent_end is not None
    fourth = pop_soon(b)
    assert fourth.item == b"a3" and fourth.handed_at >= sent_end + rest - EPS
    assert b.complete(fourth, 0.0, sent=False) is not None
    assert b.idle()
    b.check()


def test_connections_per_host(make: Any) -> None:
    """A host of two connections has two leases at once; each connection rests by the
    delay rule on its own fetch, and a host of one connection keeps one lease."""
    b = make(DelayPolicy(factor=2.0, min_delay=0.0, max_delay=10.0),
             connections=lambda host: 2 if host == "a" else 1)
    for i in range(5):
        b.push("a", 1, b"a%d" % i)
        b.push("b", 1, b"b%d" % i)
    claims = [pop_soon(b) for _ in range(3)]
    assert sorted(c.host for c in claims) == ["a", "a", "b"]
    assert b.pop() is None, "more leases on a host than its connections"
    b.check()
    fast, slow = (c for c in claims if c.host == "a")
    fast_end = b.complete(fast, 0.05)  # this connection rests 0.1
    assert fast_end is not None
    b.check()
    again = pop_soon(b)
    assert again.host == "a" and again.handed_at >= fast_end + 0.1 - EPS
    assert b.pop() is None
    b.wait(0.05)
    slow_end = b.complete(slow, 0.3)  # this one rests 0.6; the other goes on meanwhile
    assert slow_end is not None
    fast_end = b.complete(again, 0.05)
    assert fast_end is not None
    third = pop_soon(b)
    assert third.host == "a" and fast_end + 0.1 - EPS <= third.handed_at < slow_end + 0.6
    b.check()
    b.complete(third, 0.0)
    for claim in claims:
        if claim.host == "b":
            b.complete(claim, 0.0)
    got = drain(b)
    assert sorted(c.item for c in got) == [b"a4", b"b1", b"b2", b"b3", b"b4"]
    assert b.idle()


def test_rest_survives_giving_up_the_back_queue(make: Any) -> None:
    rest = 0.3
    b = make()
    b.set_min_rest("a", rest)
    b.push("a", 1, b"a1")
    claim = pop_soon(b)
    ended = b.complete(claim, 0.0)
    assert ended is not None
    b.check()
    assert b.idle()
    # The host comes back through the front queues: it still waits out its rest.
    b.push("a", 1, b"a2")
    b.push("b", 1, b"b1")
    got = pop_soon(b)
    assert got.host == "b"
    b.complete(got, 0.0)
    again = pop_soon(b)
    assert again.item == b"a2" and again.handed_at >= ended + rest - EPS
    b.set_min_rest("a", 0.0)


def test_expired_lease_returns_its_item(make: Any) -> None:
    b = make()
    b.push("a", 1, b"a1")
    b.push("a", 1, b"a2")
    lost = pop_soon(b)
    assert lost.item == b"a1"
    b.wait(LEASE_TIMEOUT + 0.1)
    returned = b.expire()
    assert returned == [b"a1"]
    assert b.in_flight() == 0 and len(b) == 2
    b.check()
    got = drain(b)
    assert sorted(c.item for c in got) == [b"a1", b"a2"]
    assert all(c.handed_at >= lost.deadline - EPS for c in got)
    assert b.complete(lost, 0.0) is None, "a late completion released the host twice"
    assert b.idle()


def test_retire_drops_queued_and_refuses_new(make: Any) -> None:
    b = make(back_queues=1, back_queues_max=1)
    b.push("a", 1, b"a1")
    b.push("a", 2, b"a2")
    b.push("c", 1, b"c1")  # waits in a front queue: one back queue, owned by a
    b.push("c", 1, b"c2")
    assert sorted(b.retire("a")) == [b"a1", b"a2"]
    b.check()
    assert not b.push("a", 1, b"a3")
    # Retiring a freed the back queue, so c got it: its URLs are split between its
    # back queue (returned now) and the front queue (dropped when they surface).
    from_back = b.retire("c")
    b.push("d", 1, b"d1")
    got = drain(b)
    assert [c.item for c in got] == [b"d1"]
    assert sorted(from_back + b.take_dropped()) == [b"c1", b"c2"]
    assert b.idle()


def test_retire_during_fetch_lets_it_finish(make: Any) -> None:
    b = make()
    b.push("a", 1, b"a1")
    b.push("a", 1, b"a2")
    claim = pop_soon(b)
    assert b.retire("a") == [b"a2"]
    b.check()
    assert b.complete(claim, 0.0) is not None
    b.check()
    assert b.idle()


def test_next_wakeup(make: Any) -> None:
    b = make()
    assert b.next_wakeup() is None
    b.push("a", 1, b"a1")
    assert b.next_wakeup() == 0.0
    claim = pop_soon(b)
    assert b.next_wakeup() is None  # only a lease is out
    b.complete(claim, 0.0)


def test_state_survives_reconnect(make: Any) -> None:
    b = make()
    for i in range(6):
        b.push(f"h{i % 3}", 1 + i % 2, b"x%d" % i)
    held = pop_soon(b)
    b.reopen()
    b.check()
    assert len(b) == 5 and b.in_flight() == 1
    assert b.complete(held, 0.0) is not None
    got = drain(b)
    assert sorted([held.item] + [c.item for c in got]) == sorted(b"x%d" % i for i in range(6))


def test_a_host_rests_by_its_own_delay_rule(make: Any) -> None:
    """A host with a rule of its own (per-host policy) rests by it; the others by the
    crawl's rule."""
    own = DelayPolicy(factor=4.0, min_delay=0.0, max_delay=10.0)
    crawl = DelayPolicy(factor=0.0, min_delay=0.0, max_delay=10.0)
    b = make(crawl, policy_of=lambda host: own if host == "slow" else crawl)
    for host in ("slow", "fast"):
        b.push(host, 1, f"{host}1".encode())
        b.push(host, 1, f"{host}2".encode())
    ends = {}
    for claim in (pop_soon(b), pop_soon(b)):
        end = b.complete(claim, 0.1)
        assert end is not None
        ends[claim.host] = end
    again = pop_soon(b)
    assert again.host == "fast" and again.handed_at < ends["slow"] + 0.4 - EPS
    assert b.complete(again, 0.0) is not None
    last = pop_soon(b)
    assert last.host == "slow" and last.handed_at >= ends["slow"] + 0.4 - EPS
    b.check()
