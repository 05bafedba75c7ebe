"""Redis refusals as frontier errors with safe, specific advice (issue 13, items 5 and 8).

Each case runs against a real redis-server on 127.0.0.1 (or a real HTTP server posing
as one): out of memory, a password needed or wrong, REDIS_URL at another service or at
a database that does not exist, a read-only replica, a user without permissions, and
keys of the wrong type. Only "Redis did not answer" is retried; the others stop the crawl.
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from scrapy.settings import Settings
from twisted.python.failure import Failure

from scrapy_frontier.backends.redis.connection import redis_from_settings, wait_for_redis
from scrapy_frontier.backends.redis.driver import RedisDriver
from scrapy_frontier.backends.redis.frontier import RedisFrontier
from scrapy_frontier.backends.redis.view import MAX_BACKOFF, Outage
from scrapy_frontier.core import DelayPolicy
from scrapy_frontier.errors import (
    RedisFrontierAuthError,
    RedisFrontierDataError,
    RedisFrontierError,
    RedisFrontierFull,
    RedisFrontierSettingsError,
    RedisFrontierUnavailable,
)
from tests.redis_server import REDIS_SERVER, RedisServer, free_port

DESTRUCTIVE = ("delete", "flush", " del ", "unlink")


def _safe(message: str) -> None:
    lowered = message.lower()
    for word in DESTRUCTIVE:
        assert word not in lowered, f"advises a destructive action ({word!r}): {message}"


@pytest.fixture
def extra_server(tmp_path: Path) -> Iterator[Any]:
    """Start redis-servers with extra arguments (127.0.0.1, free port, no persistence)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> int:
        port = free_port()
        proc = subprocess.Popen(
            [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(tmp_path),
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
             "--logfile", str(tmp_path / f"redis-{port}.log"), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / f"redis-{port}.log").read_text()
            try:  # a plain connect: redis-py's own retries would back off for seconds
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return port
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"redis-server on {port} did not start")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def _client(url: str, **settings: Any) -> redis.Redis:
    return redis_from_settings(Settings({"REDIS_URL": url, **settings}))


# -- 1. out of memory ------------------------------------------------------------------------


def test_out_of_memory_is_full_with_safe_advice_and_loses_nothing(extra_server: Any) -> None:
    port = extra_server("--maxmemory-policy", "noeviction")
    client = _client(f"redis://127.0.0.1:{port}/0")
    prefix = "oom:frontier:"
    frontier = RedisFrontier(client, prefix, front_queues=4)
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + 200_000)
    pushed: list[bytes] = []
    with pytest.raises(RedisFrontierFull) as info:
        for i in range(10_000):
            item = b"%06d" % i + b"x" * 2000
            assert frontier.push(f"h{i}.example", 1 + i % 4, item)
            pushed.append(item)
    assert pushed, "the first push already failed: the test proves nothing"
    exc = info.value
    assert not isinstance(exc, RedisFrontierUnavailable)
    assert not isinstance(exc, RedisFrontierDataError)
    message = str(exc)
    assert "Redis is out of memory (maxmemory" in message
    assert "policy noeviction" in message
    assert "CONFIG SET maxmemory" in message and "redis.conf" in message
    assert "run the same command again" in message
    assert "Nothing stored was lost" in message
    _safe(message)

    client.config_set("maxmemory", 0)
    again = RedisFrontier(client, prefix, front_queues=4)
    assert len(again) == len(pushed)
    got: list[bytes] = []
    for _ in range(len(pushed) + 1):
        lease = again.pop()
        if lease is None:
            break
        got.append(lease.item)
    assert sorted(got) == sorted(pushed)
    client.close()


# -- 2. a password needed ----------------------------------------------------------------------


@pytest.mark.parametrize("auth", ["", ":wrong@", "someone:wrong@"])
def test_a_password_needed_or_wrong_is_an_auth_error_not_an_outage(
        extra_server: Any, auth: str) -> None:
    port = extra_server("--requirepass", "secret")
    client = _client(f"redis://{auth}127.0.0.1:{port}/0")
    with pytest.raises(RedisFrontierAuthError) as info:
        RedisFrontier(client, "auth:frontier:")
    assert not isinstance(info.value, RedisFrontierUnavailable)
    assert isinstance(info.value, RedisFrontierSettingsError)
    message = str(info.value)
    assert "refused the connection" in message and "needs a password" in message
    assert "redis://:PASSWORD@host:port/db" in message and "REDIS_PARAMS" in message
    assert "did not answer" not in message
    _safe(message)
    started = time.monotonic()
    with pytest.raises(RedisFrontierAuthError):
        wait_for_redis(client, timeout=10)
    assert time.monotonic() - started < 5, "waited for a Redis that refuses, not one away"
    client.close()
    # The advice works, both ways.
    for good in (_client(f"redis://:secret@127.0.0.1:{port}/0"),
                 _client(f"redis://127.0.0.1:{port}/0", REDIS_PARAMS={"password": "secret"})):
        assert len(RedisFrontier(good, "auth:frontier:")) == 0
        good.close()


# -- 3. not a Redis, no such database ----------------------------------------------------------


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("url", ["localhost:6379", "127.0.0.1:6379/0", "http://localhost/"])
def test_redis_url_without_a_redis_scheme_names_the_forms_it_takes(url: str) -> None:
    with pytest.raises(RedisFrontierSettingsError) as info:
        _client(url)
    message = str(info.value)
    assert f"REDIS_URL = {url!r} is not a Redis URL" in message
    assert "redis://localhost:6379/0" in message
    _safe(message)


def test_redis_url_at_an_http_server_says_it_is_not_redis(http_port: int) -> None:
    client = _client(f"redis://127.0.0.1:{http_port}/0")
    with pytest.raises(RedisFrontierSettingsError) as info:
        RedisFrontier(client, "http:frontier:")
    message = str(info.value)
    assert (f"at 127.0.0.1:{http_port} does not speak the Redis protocol "
            "(is REDIS_URL pointing at another service?)") in message
    assert not isinstance(info.value, RedisFrontierUnavailable)
    _safe(message)
    with pytest.raises(RedisFrontierSettingsError, match="does not speak the Redis protocol"):
        wait_for_redis(client, timeout=10)
    client.close()


def test_redis_url_at_a_missing_database_names_the_count(redis_server: RedisServer) -> None:
    client = _client(f"redis://127.0.0.1:{redis_server.port}/999")
    with pytest.raises(RedisFrontierSettingsError) as info:
        RedisFrontier(client, "db:frontier:")
    message = str(info.value)
    assert "has no database 999 (it has 16: `databases` in redis.conf)" in message
    assert "pick one in REDIS_URL" in message
    _safe(message)
    client.close()


# -- more refusals that no retry can fix -------------------------------------------------------


def test_a_read_only_replica_says_so(extra_server: Any) -> None:
    port = extra_server("--replicaof", "127.0.0.1", str(free_port()))
    client = _client(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(RedisFrontierSettingsError, match="read-only replica.*primary") as info:
        RedisFrontier(client, "ro:frontier:")
    _safe(str(info.value))
    client.close()


def test_a_user_without_permissions_says_so(redis_server: RedisServer) -> None:
    admin = redis_server.client()
    admin.execute_command("ACL", "SETUSER", "reader", "on", ">pw", "~*", "+@read", "+@connection")
    try:
        client = _client(f"redis://reader:pw@127.0.0.1:{redis_server.port}/0")
        with pytest.raises(RedisFrontierSettingsError, match="lacks the permission") as info:
            RedisFrontier(client, "acl:frontier:")
        assert "ACL SETUSER" in str(info.value)
        _safe(str(info.value))
        client.close()
    finally:
        admin.execute_command("ACL", "DELUSER", "reader")
        admin.close()


# -- 4. keys of the wrong type -----------------------------------------------------------------


def test_wrong_type_keys_advise_another_prefix_not_deletion(redis_client: redis.Redis,
                                                           redis_prefix: str) -> None:
    frontier = RedisFrontier(redis_client, redis_prefix, front_queues=4)
    redis_client.set(redis_prefix + "ready", "someone else's")
    with pytest.raises(RedisFrontierDataError) as info:
        frontier.push("a.example", 1, b"x")
    message = str(info.value)
    assert "WRONGTYPE" in message and redis_prefix in message
    assert "Pick another FRONTIER_REDIS_KEY prefix, or move the other data away" in message
    _safe(message)


@pytest.mark.parametrize(("call", "field"), [("push", "front"), ("push", "back"),
                                             ("census", "front"), ("census", "back"),
                                             ("pop", "back")])
def test_garbage_in_the_count_hash_names_the_key_and_the_field(
        redis_client: redis.Redis, redis_prefix: str, field: str, call: str) -> None:
    frontier = RedisFrontier(redis_client, redis_prefix, front_queues=4, back_queues=1)
    frontier.push("a.example", 1, b"x")
    frontier.push("b.example", 1, b"y")
    redis_client.hset(redis_prefix + "count", field, "garbage")
    with pytest.raises(RedisFrontierDataError) as info:
        if call == "push":
            frontier.push("c.example" if field == "front" else "a.example", 1, b"z")
        elif call == "census":
            frontier.census()
        else:
            frontier.pop()
            frontier.pop()
    message = str(info.value)
    assert f"{redis_prefix}count" in message, message
    assert "whole numbers" in message and "HSET" in message
    _safe(message)
    assert redis_client.llen(redis_prefix + "f:1") + sum(
        redis_client.llen(k) for k in redis_client.keys(redis_prefix + "b:*")) >= 1


def test_garbage_in_a_hosts_pace_names_the_key_and_the_field(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    frontier = RedisFrontier(redis_client, redis_prefix, front_queues=4, back_queues=1,
                             policy=DelayPolicy(0.0, 0.0, 0.0))
    frontier.push("a.example", 1, b"x")
    frontier.push("a.example", 1, b"y")
    lease = frontier.pop()
    assert lease is not None and frontier.complete(lease, 0.0) is not None
    redis_client.hset(redis_prefix + "fetch", "a.example", "0.5")  # no pace
    with pytest.raises(RedisFrontierDataError) as info:
        frontier.pop()
    message = str(info.value)
    assert f"{redis_prefix}fetch field a.example" in message, message
    assert "HSET" in message and "<fetch> <pace>" in message
    _safe(message)
    redis_client.hset(redis_prefix + "fetch", "a.example", "0 0")
    again = frontier.pop()
    assert again is not None and again.item == b"y"


# -- the driver: retry an outage, stop on everything else --------------------------------------


@pytest.mark.parametrize("exc", [
    RedisFrontierFull("full"), RedisFrontierAuthError("password"),
    RedisFrontierSettingsError("not redis"), RedisFrontierDataError("wrong type"),
    RedisFrontierError("other"),
])
def test_the_driver_stops_on_refusals(exc: RedisFrontierError) -> None:
    failed: list[tuple[str, BaseException]] = []
    stats = SimpleNamespace(inc_value=lambda *a, **k: None)
    fake = SimpleNamespace(sending=None, next=None, closed=False,
                           ctx=SimpleNamespace(fail=lambda r, e: failed.append((r, e)),
                                               stats=stats))
    RedisDriver._round_failed(fake, Failure(exc))  # type: ignore[arg-type]
    assert failed == [("frontier_redis_error", exc)]


def test_the_driver_retries_an_outage() -> None:
    failed: list[tuple[str, BaseException]] = []
    stats = SimpleNamespace(inc_value=lambda *a, **k: None)
    fake = SimpleNamespace(sending=None, next=SimpleNamespace(pushes=[]), closed=False,
                           outage=Outage(time.monotonic),
                           ctx=SimpleNamespace(fail=lambda r, e: failed.append((r, e)),
                                               clock=time.monotonic, stats=stats))
    RedisDriver._round_failed(fake, Failure(RedisFrontierUnavailable("away")))  # type: ignore[arg-type]
    assert failed == [] and not fake.outage.may_try()


def test_an_outage_backs_off_doubling_to_a_cap_and_ends_when_a_round_lands() -> None:
    now = [100.0]
    outage = Outage(lambda: now[0])
    assert outage.may_try() and outage.reached() is None  # no outage: nothing to report
    assert outage.failed()  # the first failure begins the outage
    pauses = [outage.backoff]
    for _ in range(12):
        assert not outage.failed()  # the same outage
        pauses.append(outage.backoff)
    assert pauses[:4] == [0.25, 0.5, 1.0, 2.0] and pauses[-1] == MAX_BACKOFF
    assert not outage.may_try()
    now[0] = outage.retry_at
    assert outage.may_try()
    now[0] += 5.0
    assert outage.reached() == now[0] - 100.0  # how long Redis was away
    assert outage.backoff == 0.0 and outage.since is None
