"""Shared fixtures: a private redis-server for the Redis backend's tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis

from tests.redis_cluster import RedisClusterServers
from tests.redis_server import RedisServer

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server per test session (127.0.0.1, free port, temp dir, no persistence).

    A missing redis-server fails the tests with a message; it never skips them.
    """
    server = RedisServer()
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix no other test uses, so tests share one server without interfering."""
    return f"t{next(_prefixes)}:frontier:"


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """One Redis Cluster of three masters per test session (127.0.0.1, free ports)."""
    cluster = RedisClusterServers(masters=3)
    try:
        cluster.start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield cluster
    cluster.stop()
