"""Talking to Redis: a client from scrapy-redis's settings, and Redis errors as frontier errors."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from scrapy_frontier.errors import (
    RedisFrontierAuthError,
    RedisFrontierDataError,
    RedisFrontierError,
    RedisFrontierFull,
    RedisFrontierSettingsError,
    RedisFrontierUnavailable,
)

R = TypeVar("R")

UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
#: A cluster between masters (a failover, a resharding, no node for a slot yet): retried.
CLUSTER_MOVING = (redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError,
                  redis.exceptions.SlotNotCoveredError)
#: The errors ``guard`` turns into frontier errors; others (DataError: a bad argument) are bugs.
HANDLED = (*UNAVAILABLE, *CLUSTER_MOVING, redis.exceptions.ResponseError,
           redis.exceptions.InvalidResponse)
#: What Redis says when a script's command, or a key it names, is denied to the user.
_SCRIPT_DENIED = ("The user executing the script can't run this command",
                  "The user executing the script can't access at least one of the keys")
#: What OpenSSL says of a server certificate signed by an authority the client does not trust.
_TLS_UNTRUSTED = "CERTIFICATE_VERIFY_FAILED"
#: Where the ACL the frontier needs is documented (named in the refusals).
ACL_DOCS = 'docs/backends.rst, "Redis users and ACLs"'
#: First bytes of every RESP2/RESP3 reply.
_RESP_TYPES = b"+-:$*_,#!=(%~>|"
_PROBE_TIMEOUT = 2.0


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is redis-py's Redis Cluster client."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def _pool_kwargs(client: Any) -> dict[str, Any]:
    """The connection arguments of ``client`` (of the node it was given, for a cluster)."""
    if is_cluster(client):
        node = client.get_default_node()
        return {"host": node.host, "port": node.port, "cluster": True,
                **(client.get_connection_kwargs() if hasattr(client, "get_connection_kwargs")
                   else {})}
    return dict(client.connection_pool.connection_kwargs)


def decodes_responses(client: Any) -> bool:
    return bool(_pool_kwargs(client).get("decode_responses"))


def describe(client: redis.Redis) -> str:
    kw = _pool_kwargs(client)
    if kw.get("cluster"):
        return f"Redis Cluster at {kw.get('host', '?')}:{kw.get('port', '?')}"
    if "path" in kw:
        return f"Redis at unix:{kw['path']}"
    return f"Redis at {kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


def _address(client: redis.Redis) -> str:
    kw = _pool_kwargs(client)
    if "path" in kw:
        return f"unix:{kw['path']}"
    return f"{kw.get('host', '?')}:{kw.get('port', '?')}"


def guard(client: redis.Redis, prefix: str, doing: str, fn: Callable[[], R]) -> R:
    """Run one Redis call, turning connection and data errors into frontier errors."""
    try:
        return fn()
    except HANDLED as exc:
        raise frontier_error(client, prefix, doing, exc) from exc


def frontier_error(client: redis.Redis, prefix: str, doing: str,
                   exc: Exception) -> RedisFrontierError:
    """The frontier error for ``exc``, raised by ``client`` while ``doing``.

    Only RedisFrontierUnavailable is worth retrying: the others need a person to
    change a setting (or Redis's configuration) first.
    """
    where = describe(client)
    if isinstance(exc, CLUSTER_MOVING) or str(exc).startswith("NOREPLICAS"):
        return RedisFrontierUnavailable(
            f"{where} cannot take writes for now while {doing} ({type(exc).__name__}: {exc}): "
            "a master is failing over, its slots are moving, or it has no replica in sync "
            "(min-replicas-to-write). Nothing was removed on this side; the worker retries "
            "until the cluster serves the slot again.")
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return RedisFrontierAuthError(
            f"{where} refused the connection while {doing}: it needs a password, or the one "
            f"given is wrong ({exc}). Set it in REDIS_URL (redis://:PASSWORD@host:port/db, or "
            "redis://USER:PASSWORD@host:port/db for an ACL user) or in REDIS_PARAMS "
            '({"password": ..., "username": ...}), then run the same command again.'
        )
    if isinstance(exc, redis.exceptions.InvalidResponse) or (
        isinstance(exc, redis.exceptions.ConnectionError)
        and not isinstance(exc, redis.exceptions.BusyLoadingError)
        and _speaks_redis(client) is False
    ):
        return _not_redis(client, doing, exc)
    if isinstance(exc, redis.exceptions.ConnectionError) and _TLS_UNTRUSTED in str(exc):
        return RedisFrontierSettingsError(
            f"{where} answered over TLS with a certificate this client does not trust while "
            f"{doing} ({exc}). Give the certificate authority that signed the server's "
            "certificate: REDIS_URL rediss://host:port/db?ssl_ca_certs=/path/to/ca.pem, or "
            'REDIS_PARAMS {"ssl_ca_certs": "/path/to/ca.pem"}; then run the same command again.'
        )
    if isinstance(exc, UNAVAILABLE):
        return RedisFrontierUnavailable(
            f"{where} did not answer while {doing} ({type(exc).__name__}: {exc}). "
            "Is redis-server running there, and is REDIS_URL (or REDIS_HOST / REDIS_PORT) "
            "its address? Nothing was removed on this side; retry once Redis is back (the "
            "queued and leased URLs are whatever Redis persisted)."
        )
    message = str(exc)
    if isinstance(exc, redis.exceptions.OutOfMemoryError) or "OOM command not allowed" in message:
        return _full(client, doing, exc)
    if "DB index is out of range" in message or "invalid DB index" in message:
        return _no_database(client, exc)
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return RedisFrontierSettingsError(
            f"{where} is a read-only replica: it refused a write while {doing} ({exc}). Point "
            "REDIS_URL at the primary, then run the same command again; nothing was written."
        )
    if isinstance(exc, redis.exceptions.NoPermissionError) or any(
            said in message for said in _SCRIPT_DENIED):
        return RedisFrontierSettingsError(
            f"{where} refused a command while {doing}: the Redis user lacks the permission "
            f"({exc}). The frontier needs its commands on the keys under {prefix!r} (and its "
            f"seen set and page history): grant them (the ACL SETUSER line in {ACL_DOCS}) or "
            "connect as another user (REDIS_URL, REDIS_PARAMS), then run the same command again."
        )
    if "FRONTIER_DAMAGED " + prefix + "fetch field" in message:
        return RedisFrontierDataError(
            f"{where} found a damaged value under {prefix!r} while {doing}: "
            f"{message.split('FRONTIER_DAMAGED ', 1)[-1]}. The frontier keeps a host's last "
            "fetch time and its pace there (seconds, as two numbers: \"<fetch> <pace>\"). Set "
            f"the field to numbers (HSET {prefix}fetch <host> \"0 0\" if unknown), then run "
            "the same command again; the URLs queued there are kept."
        )
    if "FRONTIER_DAMAGED" in message or "hash value is not an integer" in message:
        return RedisFrontierDataError(
            f"{where} found a damaged value under {prefix!r} while {doing}: "
            f"{message.split('FRONTIER_DAMAGED ', 1)[-1]}. The frontier keeps counts there as "
            f"whole numbers: in {prefix}count, 'front' is the total length of the lists "
            f"{prefix}f:<level> and 'back' the sum of the values of {prefix}active. Set the "
            "field back to that number (HSET), then run the same command again; the URLs "
            "queued there are kept."
        )
    if "WRONGTYPE" in message:
        return RedisFrontierDataError(
            f"{where} refused an operation on keys under {prefix!r} while {doing}: {exc}. A "
            "key there holds data the frontier did not write (another program uses that "
            "prefix; redis-cli's TYPE on the keys under that prefix shows which). Pick another "
            "FRONTIER_REDIS_KEY prefix, "
            "or move the other data away (RENAME its keys, or another database), then start "
            "again."
        )
    return RedisFrontierError(
        f"{where} refused a command while {doing}: {exc}. The refused call changed nothing; "
        "Redis's log may say more. Fix what the error names, then run the same command again."
    )


def _speaks_redis(client: redis.Redis) -> bool | None:
    """Whether the server at the client's address answers PING in RESP; None: no answer."""
    if is_cluster(client):
        return None  # the cluster client found its nodes: they speak Redis
    pool = client.connection_pool
    if issubclass(pool.connection_class, redis.connection.SSLConnection):
        return None  # a raw probe would speak plain text to a TLS port
    kw = pool.connection_kwargs
    sock: socket.socket | None = None
    try:
        if "path" in kw:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(_PROBE_TIMEOUT)
            sock.connect(kw["path"])
        else:
            sock = socket.create_connection((kw.get("host", "localhost"), kw.get("port", 6379)),
                                            timeout=_PROBE_TIMEOUT)
        sock.sendall(b"PING\r\n")
        first = sock.recv(1)
    except OSError:
        return None
    finally:
        if sock is not None:
            sock.close()
    if not first:
        return None
    return first in _RESP_TYPES


def _not_redis(client: redis.Redis, doing: str,
               exc: redis.exceptions.RedisError) -> RedisFrontierSettingsError:
    return RedisFrontierSettingsError(
        f"the server at {_address(client)} does not speak the Redis protocol (is REDIS_URL "
        f"pointing at another service?): it answered unlike Redis while {doing} "
        f"({type(exc).__name__}: {exc}). Set REDIS_URL (or REDIS_HOST / REDIS_PORT) to the "
        "Redis server's address, then run the same command again."
    )


def _full(client: redis.Redis, doing: str, exc: Exception) -> RedisFrontierFull:
    memory: dict[str, Any] = {}
    try:
        memory = dict(client.info("memory"))
    except redis.exceptions.RedisError:
        with contextlib.suppress(redis.exceptions.RedisError):
            config: dict[Any, Any] = dict(client.config_get("maxmemory*"))
            memory = {text(k): text(v) for k, v in config.items()}
    limit = memory.get("maxmemory_human") or memory.get("maxmemory")
    policy = memory.get("maxmemory_policy") or memory.get("maxmemory-policy")
    used = memory.get("used_memory_human")
    state = (f"maxmemory {limit} reached" if limit else "maxmemory reached") + (
        f" with {used} used" if used else "") + (
        f", policy {policy}" if policy else "; see maxmemory and maxmemory-policy")
    evicting = policy is not None and policy != "noeviction"
    keep = ("Keep the policy at noeviction: an evicting policy drops keys, the frontier's "
            "among them." if evicting else
            "Do not switch to an evicting policy: it would drop the frontier's keys.")
    return RedisFrontierFull(
        f"Redis is out of memory ({state}): {describe(client)} refused a write while {doing} "
        f"({exc}). Nothing stored was lost: the frontier keeps what it had, and the refused "
        "command changed nothing. Raise maxmemory (CONFIG SET maxmemory <bytes>, and in "
        f"redis.conf to keep it), then run the same command again to resume. {keep}"
    )


def _no_database(client: redis.Redis, exc: Exception) -> RedisFrontierError:
    if is_cluster(client):
        return RedisFrontierSettingsError(
            f"{describe(client)} has only database 0: set REDIS_URL without a database "
            f"number (redis://host:port), then run the same command again. Redis said: {exc}")
    kw = client.connection_pool.connection_kwargs
    db = kw.get("db", 0)
    count = "fewer"
    pool = redis.ConnectionPool(connection_class=client.connection_pool.connection_class,
                                **{**kw, "db": 0})
    try:
        config: dict[Any, Any] = dict(redis.Redis(connection_pool=pool).config_get("databases"))
        found = {text(k): text(v) for k, v in config.items()}
        if found.get("databases", "").isdigit():
            count = found["databases"]
    except redis.exceptions.RedisError:
        pass  # CONFIG may be disabled (managed Redis): the message names the setting
    finally:
        pool.disconnect()
    return RedisFrontierSettingsError(
        f"Redis at {_address(client)} has no database {db} (it has {count}: `databases` in "
        "redis.conf); pick one in REDIS_URL (redis://host:port/DB, DB from 0) or REDIS_DB, "
        f"then run the same command again. Redis said: {exc}"
    )


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")


def check_redis_url(url: Any) -> None:
    """Refuse a REDIS_URL that redis-py cannot read, naming the forms it can."""
    if url is None or url == "":
        return
    if not isinstance(url, str) or not url.lower().startswith(REDIS_URL_SCHEMES):
        raise RedisFrontierSettingsError(
            f"REDIS_URL = {url!r} is not a Redis URL: it must start with redis://, rediss:// "
            "(TLS) or unix://, for example 'redis://localhost:6379/0' or "
            "'redis://:password@redis.example:6379/1'.")


def redis_from_settings(settings: Any) -> redis.Redis:
    """A Redis client from scrapy-redis's settings (REDIS_URL, REDIS_HOST, REDIS_PORT,
    REDIS_DB, REDIS_PARAMS...), with scrapy-redis's defaults when it is installed.

    Responses are always bytes (``decode_responses=False``): the frontier stores binary.
    With ``FRONTIER_REDIS_CLUSTER``, redis-py's cluster client, from ``REDIS_URL`` (or
    ``REDIS_HOST``/``REDIS_PORT``) naming any one node of the cluster.
    """
    check_redis_url(settings.get("REDIS_URL"))
    params = settings.getdict("REDIS_PARAMS")
    params["decode_responses"] = False
    if settings.getbool("FRONTIER_REDIS_CLUSTER"):
        return _cluster_from_settings(settings, params)
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


def _cluster_from_settings(settings: Any, params: dict[str, Any]) -> Any:
    from redis.cluster import RedisCluster

    kwargs: dict[str, Any] = {"socket_timeout": 30, "socket_connect_timeout": 30}
    kwargs.update(params)
    kwargs.pop("db", None)  # a cluster has database 0 only
    url = settings.get("REDIS_URL")
    try:
        if url:
            if url.lower().startswith("unix://"):
                raise RedisFrontierSettingsError(
                    f"REDIS_URL = {url!r}: a Redis Cluster is reached over TCP; give one "
                    "node's address, for example 'redis://10.0.0.5:7000'.")
            return RedisCluster.from_url(url, **kwargs)
        return RedisCluster(host=settings.get("REDIS_HOST") or "localhost",
                            port=int(settings.get("REDIS_PORT") or 6379), **kwargs)
    except HANDLED as exc:
        raise frontier_error_plain(url or settings.get("REDIS_HOST") or "localhost", exc) from exc
    except redis.exceptions.RedisClusterException as exc:
        raise RedisFrontierSettingsError(
            f"FRONTIER_REDIS_CLUSTER is on, but the Redis at {url or 'REDIS_HOST'} does not "
            f"serve a cluster ({exc}). Point REDIS_URL at a node of a Redis Cluster (one "
            "started with cluster-enabled yes, its slots assigned), or turn "
            "FRONTIER_REDIS_CLUSTER off for a single Redis."
        ) from exc


def frontier_error_plain(where: str, exc: Exception) -> RedisFrontierError:
    """The error for a cluster client that could not even be built (no client to describe)."""
    return RedisFrontierUnavailable(
        f"the Redis Cluster at {where} did not answer while discovering its nodes "
        f"({type(exc).__name__}: {exc}). Is a cluster node running there, and is REDIS_URL "
        "its address? Nothing was changed."
    )


def wait_for_redis(client: redis.Redis, timeout: float = 10.0) -> None:
    """Block until ``client`` answers PING (bounded), else raise RedisFrontierUnavailable.

    A Redis that answers with a refusal (a password is needed, no such database, not a
    Redis at all) raises its frontier error at once: waiting cannot help.
    """
    deadline = time.monotonic() + timeout
    for _ in range(10_000):
        try:
            client.ping()
            return
        except HANDLED as exc:
            error = frontier_error(client, "", "answering PING", exc)
            if not isinstance(error, RedisFrontierUnavailable):
                raise error from exc
            if time.monotonic() > deadline:
                raise RedisFrontierUnavailable(
                    f"{describe(client)} did not answer PING within {timeout} s ({exc}): is "
                    "redis-server running there, and is REDIS_URL (or REDIS_HOST / "
                    "REDIS_PORT) its address?"
                ) from exc
            time.sleep(0.05)
