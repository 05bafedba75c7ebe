"""Talking to Redis: a client from scrapy-redis's settings, and Redis errors as frontier errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from scrapy_frontier.errors import RedisFrontierDataError, RedisFrontierUnavailable

R = TypeVar("R")

UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def describe(client: redis.Redis) -> str:
    kw = client.connection_pool.connection_kwargs
    if "path" in kw:
        return f"Redis at unix:{kw['path']}"
    return f"Redis at {kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


def guard(client: redis.Redis, prefix: str, doing: str, fn: Callable[[], R]) -> R:
    """Run one Redis call, turning connection and data errors into frontier errors."""
    try:
        return fn()
    except UNAVAILABLE as exc:
        raise RedisFrontierUnavailable(
            f"{describe(client)} did not answer while {doing} ({type(exc).__name__}: {exc}). "
            "Nothing was removed on this side; retry once Redis is back (the queued and "
            "leased URLs are whatever Redis persisted)."
        ) from exc
    except redis.exceptions.ResponseError as exc:
        raise RedisFrontierDataError(
            f"{describe(client)} refused an operation on keys under {prefix!r} while {doing}: "
            f"{exc}. A key there holds data the frontier did not write; check it with "
            f"RedisFrontier.check(), or delete the keys under {prefix!r} (or pick another "
            "prefix) and start again."
        ) from exc


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def redis_from_settings(settings: Any) -> redis.Redis:
    """A Redis client from scrapy-redis's settings (REDIS_URL, REDIS_HOST, REDIS_PORT,
    REDIS_DB, REDIS_PARAMS...), with scrapy-redis's defaults when it is installed.

    Responses are always bytes (``decode_responses=False``): the frontier stores binary.
    """
    params = settings.getdict("REDIS_PARAMS")
    params["decode_responses"] = False
    copy = settings.copy()
    copy.frozen = False  # the crawler's settings are frozen once the crawl starts
    copy.set("REDIS_PARAMS", params, priority=1000)
    copy.set("REDIS_DECODE_RESPONSES", False, priority=1000)
    try:
        from scrapy_redis.connection import get_redis_from_settings
    except ImportError:
        get_redis_from_settings = None
    if get_redis_from_settings is not None:
        return get_redis_from_settings(copy)  # type: ignore[no-any-return]
    kwargs: dict[str, Any] = {"socket_timeout": 30, "socket_connect_timeout": 30,
                              "retry_on_timeout": True}
    kwargs.update(params)
    url = settings.get("REDIS_URL")
    for name, dest in (("REDIS_HOST", "host"), ("REDIS_PORT", "port"), ("REDIS_DB", "db")):
        if settings.get(name):
            kwargs[dest] = settings.get(name)
    if url:
        return redis.Redis.from_url(url, **kwargs)
    return redis.Redis(**kwargs)


def wait_for_redis(client: redis.Redis, timeout: float = 10.0) -> None:
    """Block until ``client`` answers PING (bounded), else raise RedisFrontierUnavailable."""
    deadline = time.monotonic() + timeout
    for _ in range(10_000):
        try:
            client.ping()
            return
        except UNAVAILABLE as exc:
            if time.monotonic() > deadline:
                raise RedisFrontierUnavailable(
                    f"{describe(client)} did not answer PING within {timeout} s: {exc}"
                ) from exc
            time.sleep(0.05)

