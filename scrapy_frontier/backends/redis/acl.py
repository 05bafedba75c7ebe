"""The Redis commands and keys the frontier uses, as ACL rules, and a check at open that the
Redis user may use them.

The check asks the server's ACL through ``redis.acl_check_cmd`` in a Lua script (Redis 7.0
and later): one round trip, no admin rights, no key touched. Where Redis cannot tell (Redis
6), a refusal comes with the first command refused, translated by ``connection.frontier_error``.
"""

from __future__ import annotations

from typing import Any

import redis

from scrapy_frontier.backends.redis.connection import (
    ACL_DOCS,
    describe,
    frontier_error,
    is_cluster,
)
from scrapy_frontier.backends.redis.lua import lua_source
from scrapy_frontier.errors import RedisFrontierSettingsError

#: What a worker runs: directly, in MULTI/EXEC pipelines, and inside its Lua scripts
#: (EVALSHA; SCRIPT LOAD when Redis does not have a script yet).
WORKER_COMMANDS = (
    "evalsha", "script|load", "multi", "exec", "ping", "time", "scan", "type", "exists", "del",
    "get", "incr",
    "hget", "hmget", "hgetall", "hexists", "hlen", "hset", "hsetnx", "hdel", "hincrby", "hscan",
    "llen", "lrange", "lpush", "rpush", "lpop",
    "sadd", "srem", "sismember", "scard",
    "zadd", "zrem", "zscore", "zmscore", "zcard", "zcount", "zrange", "zrangebyscore",
    "zremrangebyscore",
)
#: What ``scrapy frontier`` runs besides: status and hosts on a cluster, budget and policy
#: (HKEYS, SMEMBERS), recrawl (INCRBY), quarantine (LREM) and reset (UNLINK).
OPERATOR_COMMANDS = ("hkeys", "smembers", "incrby", "lrem", "unlink")
#: What redis-py's cluster client and the frontier run on a Redis Cluster besides.
CLUSTER_COMMANDS = ("cluster|slots", "cluster|getkeysinslot", "command")
#: What scrapy-redis's RedisSpider runs on its start-URL key, by the key's kind.
START_URL_COMMANDS = {
    "list": ("lrange", "ltrim", "llen", "multi", "exec"),
    "set": ("spop", "scard"),
    "zset": ("zrevrange", "zremrangebyrank", "zcard", "multi", "exec"),
}


def key_patterns(spider: str) -> tuple[str, ...]:
    """The key patterns of a crawl under the default key settings: ``SPIDER:*`` (the
    frontier, its seen set and history, RedisSpider's start URLs) and ``{SPIDER:*`` (the same,
    partitioned or on a Redis Cluster)."""
    return (f"~{spider}:*", f"~{{{spider}:*")


def acl_rules(spider: str, *, operator: bool = False, cluster: bool = False) -> str:
    """The ACL SETUSER rules (after the user name) for a worker of ``spider``; ``operator``
    adds what ``scrapy frontier`` needs besides, ``cluster`` what a Redis Cluster needs."""
    commands = list(WORKER_COMMANDS) + ["ltrim"]  # RedisSpider's list of start URLs
    if operator:
        commands += OPERATOR_COMMANDS
    if cluster:
        commands += CLUSTER_COMMANDS
    return " ".join(["on", ">PASSWORD", "resetkeys", *key_patterns(spider), "resetchannels",
                     "-@all", *(f"+{name}" for name in commands)])


def start_url_commands(spider: Any, settings: Any) -> tuple[tuple[str, ...], str | None]:
    """The commands and the key of a scrapy-redis RedisSpider's start URLs; none for another
    spider."""
    key = getattr(spider, "redis_key", None)
    if settings is None or not isinstance(key, str) or not hasattr(spider, "redis_batch_size"):
        return (), None
    if settings.getbool("REDIS_START_URLS_AS_SET"):
        return START_URL_COMMANDS["set"], key
    if settings.getbool("REDIS_START_URLS_AS_ZSET"):
        return START_URL_COMMANDS["zset"], key
    return START_URL_COMMANDS["list"], key


#: A well-formed call of each command, to ask the ACL about (KEY: the key it is asked
#: for). Redis 7 reads past the arguments of a call shorter than the command's arity while
#: checking it (fixed in redis/redis#14847), so every call here is whole.
KEY = "\x00key"
PROBE_CALLS: dict[str, tuple[str, ...]] = {
    "evalsha": ("evalsha", "0" * 40, "1", KEY), "script|load": ("script", "load", "return 1"),
    "multi": ("multi",), "exec": ("exec",), "ping": ("ping",), "time": ("time",),
    "scan": ("scan", "0"), "type": ("type", KEY), "exists": ("exists", KEY),
    "del": ("del", KEY), "get": ("get", KEY), "incr": ("incr", KEY),
    "hget": ("hget", KEY, "f"), "hmget": ("hmget", KEY, "f"), "hgetall": ("hgetall", KEY),
    "hexists": ("hexists", KEY, "f"), "hlen": ("hlen", KEY), "hset": ("hset", KEY, "f", "v"),
    "hsetnx": ("hsetnx", KEY, "f", "v"), "incrby": ("incrby", KEY, "1"), "hdel": ("hdel", KEY, "f"),
    "hincrby": ("hincrby", KEY, "f", "1"), "hkeys": ("hkeys", KEY),
    "hscan": ("hscan", KEY, "0"), "llen": ("llen", KEY), "lrange": ("lrange", KEY, "0", "-1"),
    "lpush": ("lpush", KEY, "v"), "rpush": ("rpush", KEY, "v"), "lpop": ("lpop", KEY),
    "ltrim": ("ltrim", KEY, "0", "-1"), "lrem": ("lrem", KEY, "0", "v"),
    "sadd": ("sadd", KEY, "m"), "srem": ("srem", KEY, "m"), "sismember": ("sismember", KEY, "m"),
    "scard": ("scard", KEY), "smembers": ("smembers", KEY), "spop": ("spop", KEY),
    "zadd": ("zadd", KEY, "1", "m"), "zrem": ("zrem", KEY, "m"), "zscore": ("zscore", KEY, "m"),
    "zmscore": ("zmscore", KEY, "m"), "zcard": ("zcard", KEY),
    "zcount": ("zcount", KEY, "0", "1"), "zrange": ("zrange", KEY, "0", "-1"),
    "zrangebyscore": ("zrangebyscore", KEY, "0", "1"),
    "zremrangebyscore": ("zremrangebyscore", KEY, "0", "1"),
    "zrevrange": ("zrevrange", KEY, "0", "-1"),
    "zremrangebyrank": ("zremrangebyrank", KEY, "0", "-1"), "unlink": ("unlink", KEY),
    "cluster|slots": ("cluster", "slots"),
    "cluster|getkeysinslot": ("cluster", "getkeysinslot", "0", "1"), "command": ("command",),
}


def check_permissions(client: Any, keys: list[str], *, extra: tuple[str, ...] = (),
                      extra_key: str | None = None) -> None:
    """Refuse to start, naming what is denied, when the Redis user may not run one of the
    worker's commands on ``keys[0]`` (and ``extra`` on ``extra_key``), or may not read and
    write one of ``keys``. Nothing is written."""
    calls = [_call(name, keys[0]) for name in WORKER_COMMANDS]
    if is_cluster(client):
        calls += [_call(name, keys[0]) for name in CLUSTER_COMMANDS]
    if extra_key is not None:
        calls += [_call(name, extra_key) for name in extra]
        keys = [*keys, extra_key]
    args: list[Any] = [len(calls)]
    for call in calls:
        args += [len(call), *call]
    probe = client.register_script(lua_source("acl_probe"))
    try:
        reply = probe(keys=[], args=[*args, *keys])
    except redis.exceptions.NoPermissionError as exc:  # EVALSHA or SCRIPT LOAD itself
        said = str(exc)
        raise refusal(client, [said.split("'")[1]] if "'" in said else [], [], said) from exc
    except (redis.exceptions.RedisError, ValueError) as exc:
        error = frontier_error(client, "", "checking the Redis user's permissions", exc)
        raise error from exc
    denied_keys = [_text(k) for k in reply[1]]
    # Every command is asked about on the frontier's key: with that key denied, naming the
    # key says it all.
    denied = [] if keys[0] in denied_keys else list(dict.fromkeys(_text(c) for c in reply[0]))
    if denied or denied_keys:
        raise refusal(client, denied, denied_keys, None)


def _call(name: str, key: str) -> tuple[str, ...]:
    return tuple(key if arg == KEY else arg for arg in PROBE_CALLS[name])


def refusal(client: Any, commands: list[str], keys: list[str],
            said: str | None) -> RedisFrontierSettingsError:
    """The error for a Redis user denied ``commands`` or ``keys``."""
    what = ["a command"] if not commands and not keys else []
    if commands:
        what.append("the command" + ("s " if len(commands) > 1 else " ")
                    + ", ".join(c.upper().replace("|", " ") for c in commands))
    if keys:
        what.append("the key" + ("s " if len(keys) > 1 else " ") + ", ".join(keys))
    return RedisFrontierSettingsError(
        f"{describe(client)} does not let this Redis user use {' and '.join(what)}, which "
        "the frontier needs" + (f" (Redis said: {said})" if said else "") + ". Grant them "
        f"(the ACL SETUSER line in {ACL_DOCS}), or connect as a user who has them (REDIS_URL "
        "rediss://USER:PASSWORD@host:port/db, or REDIS_PARAMS), then run the same command "
        "again. Nothing was changed.")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
