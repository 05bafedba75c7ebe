"""A distributed Mercator frontier kept in one Redis, shared by many crawler processes.

:class:`RedisFrontier` behaves like the in-memory
:class:`~scrapy_frontier.core.frontier.Frontier` for items that are ``bytes``
(the caller serializes its requests): F front queues, one back queue per active
host, a ready set ordered by each host's next-contact time, one fetch per host
at a time across *all* workers, and a rest after every fetch of
``max(policy.delay(fetch), min_rest(host), rest_at_least)``.

Every state change is one atomic Lua script (push, claim, complete, retire),
and **every time comes from the Redis server** (``redis.call('TIME')``), so
workers whose clocks disagree still agree on who may fetch what and when. All
times this class returns (``RedisLease.handed_at``, ``deadline``,
``Completion.at``...) are *server* times, in seconds since the Unix epoch;
:meth:`RedisFrontier.next_wakeup` returns seconds *from now* (relative), which
is what a worker needs to arm a timer whatever its own clock says.

**Leases, not pops.** A claimed item stays in Redis under its host's lease until
:meth:`~RedisFrontier.complete`; a lease past its deadline is returned to the
head of its host's back queue by whoever calls :meth:`~RedisFrontier.expire_leases`
(every claim does it too), so a worker killed with ``kill -9`` loses nothing.
Nothing is removed client-side before Redis has answered: if Redis goes away,
methods raise :class:`RedisFrontierUnavailable` and the state is whatever Redis
persisted (with AOF ``appendfsync always``, nothing acknowledged is lost).

Redis key layout, all under one prefix ``P`` (default ``<spider>:frontier:``;
put the name in ``{...}`` to keep every key in one Redis Cluster slot)::

    P meta            HASH   format="scrapy-frontier/redis", version, levels (checked at connect)
    P count           HASH   front = URLs in front queues, back = URLs in back queues
    P f:<level>       LIST   front queue <level> (1..F, F highest); entry = host NUL item
    P b:<level>:<host> LIST  back queue of <host>, one list per level in use; entry = item
    P active          HASH   host -> URLs in its back queue (present iff host owns a back queue)
    P ready           ZSET   host -> next-contact time: active hosts with URLs and no lease
    P rest            ZSET   host -> next-contact time, while it is in the future (purged
                             when passed): a host coming back through the front queues
                             still honours its rest
    P head            HASH   host -> highest level in its back queue (hosts with URLs there)
    P fetch           HASH   host -> duration of its last fetch (active hosts; due order)
    P minrest         HASH   host -> minimum rest in seconds (robots.txt Crawl-delay)
    P retired         SET    hosts given up for good
    P leases          HASH   host -> "<id>|<level>|<handed_at>|<ready_at>|<item>" (one per host)
    P deadlines       ZSET   host -> lease deadline
    P dropped         LIST   host NUL item: URLs of retired hosts dropped from front queues
    P seq             STRING lease id counter
    P stats           HASH   pushed, popped, completed, expired, activations, releases, ...

The seen set (:class:`RedisSeenSet`) lives under its own prefix (default
``P seen:``): ``S meta`` HASH (format, buckets) and ``S <bucket>`` SETs of 64-bit
fingerprints as integers, which Redis stores as *intsets*: 8 bytes each.

Due order: among the (at most ``due_window``) hosts whose next contact has
passed, the one whose next URL has the highest level goes first, then the one
with the least slack (as in the core frontier). Refill moves at most
``refill_budget`` front-queue heads per script call, so one call never blocks
Redis for long; the next call continues.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, TypeVar

import redis
from redis.commands.core import Script

from scrapy_frontier.core.frontier import check_shape
from scrapy_frontier.core.politeness import DelayPolicy
from scrapy_frontier.sqlite_store import StoreError

FORMAT = "scrapy-frontier/redis"
VERSION = 1
SEEN_FORMAT = "scrapy-frontier/redis-seen"

R = TypeVar("R")


class RedisFrontierError(StoreError):
    """The Redis frontier cannot be used; the message says why and what to do."""


class RedisFrontierUnavailable(RedisFrontierError):
    """Redis did not answer (down, restarting, network): nothing was changed client-side."""


class RedisFrontierDataError(RedisFrontierError):
    """The keys under the frontier's prefix hold data the frontier did not write."""


@dataclass(frozen=True, slots=True)
class RedisLease:
    """One claimed item: its host is busy for every worker until completed or expired."""

    ticket: int
    host: str
    item: bytes
    level: int
    handed_at: float
    """Server time of the claim."""
    deadline: float
    """Server time after which the lease may be expired and the item returned."""
    ready_at: float
    """Server time at which the host became contactable."""


class Completion(NamedTuple):
    at: float
    """Server time at which the completion was recorded (the end of the fetch)."""
    next_contact: float
    """Server time before which the host will not be handed out again."""


# --------------------------------------------------------------------------------------
# Lua. Every script gets the same ARGV head (see RedisFrontier._head) and builds its
# keys from the prefix; op-specific arguments start at ARGV[13].

_PRELUDE = r"""
local P = ARGV[1]
local F = tonumber(ARGV[2])
local B = tonumber(ARGV[3])
local BMAX = tonumber(ARGV[4])
local FACTOR = tonumber(ARGV[5])
local MIND = tonumber(ARGV[6])
local MAXD = tonumber(ARGV[7])
local BIAS = tonumber(ARGV[8])
local LEASE_T = tonumber(ARGV[9])
local BUDGET = {tonumber(ARGV[10])}
local WINDOW = tonumber(ARGV[11])
-- Park-Miller generator seeded by the client on every call: Redis before 7 reseeds
-- Lua's math.random identically for every script, which would always pick one level.
local SEED = {tonumber(ARGV[12])}
local function rand()
  SEED[1] = (SEED[1] * 16807) % 2147483647
  return SEED[1] / 2147483647
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function fmt(x) return string.format('%.6f', x) end
local K_COUNT, K_ACTIVE, K_READY = P .. 'count', P .. 'active', P .. 'ready'
local K_REST, K_FETCH, K_MINREST = P .. 'rest', P .. 'fetch', P .. 'minrest'
local K_RETIRED, K_LEASES, K_DEADLINES = P .. 'retired', P .. 'leases', P .. 'deadlines'
local K_DROPPED, K_SEQ, K_STATS = P .. 'dropped', P .. 'seq', P .. 'stats'
local K_HEAD = P .. 'head'
local function fkey(lv) return P .. 'f:' .. lv end
local function bkey(lv, host) return P .. 'b:' .. lv .. ':' .. host end

local function delay(fetch)
  local w = FACTOR * math.max(0, fetch)
  return math.min(MAXD, math.max(MIND, w))
end

local function stat(name, n) redis.call('HINCRBY', K_STATS, name, n) end

-- Highest non-empty level of a host's back queue, kept in K_HEAD.
local function update_head(host, from)
  for lv = from, 1, -1 do
    if redis.call('LLEN', bkey(lv, host)) > 0 then
      redis.call('HSET', K_HEAD, host, lv)
      return
    end
  end
  redis.call('HDEL', K_HEAD, host)
end

local function schedule(host)
  local s = redis.call('ZSCORE', K_REST, host)
  local t_e = now
  if s then t_e = tonumber(s) end
  redis.call('ZADD', K_READY, fmt(t_e), host)
end

local function add_to_back(host, lv, item, at_head)
  if at_head then
    redis.call('LPUSH', bkey(lv, host), item)
  else
    redis.call('RPUSH', bkey(lv, host), item)
  end
  local q = redis.call('HINCRBY', K_ACTIVE, host, 1)
  redis.call('HINCRBY', K_COUNT, 'back', 1)
  if lv > tonumber(redis.call('HGET', K_HEAD, host) or '0') then
    redis.call('HSET', K_HEAD, host, lv)
  end
  if q == 1 and redis.call('HEXISTS', K_LEASES, host) == 0 then schedule(host) end
end

local function choose_level()
  local total = 0
  local levels = {}
  for lv = 1, F do
    if redis.call('LLEN', fkey(lv)) > 0 then
      levels[#levels + 1] = lv
      total = total + BIAS ^ (lv - 1)
    end
  end
  if #levels == 0 then return nil end
  if #levels == 1 then return levels[1] end
  local x = rand() * total
  for _, lv in ipairs(levels) do
    x = x - BIAS ^ (lv - 1)
    if x < 0 then return lv end
  end
  return levels[#levels]
end

local function split(entry)
  local i = string.find(entry, '\0', 1, true)
  return string.sub(entry, 1, i - 1), string.sub(entry, i + 1)
end

-- Mercator refill: move front heads into back queues until a host gets one.
local function activate_one()
  while BUDGET[1] > 0 do
    local lv = choose_level()
    if not lv then return false end
    BUDGET[1] = BUDGET[1] - 1
    local entry = redis.call('LPOP', fkey(lv))
    redis.call('HINCRBY', K_COUNT, 'front', -1)
    local host, item = split(entry)
    if redis.call('SISMEMBER', K_RETIRED, host) == 1 then
      redis.call('RPUSH', K_DROPPED, entry)
      stat('retired_items', 1)
    else
      local activating = redis.call('HEXISTS', K_ACTIVE, host) == 0
      if activating then
        redis.call('HSET', K_ACTIVE, host, 0)
        stat('activations', 1)
      end
      add_to_back(host, lv, item, false)
      if activating then return true end
    end
  end
  return false
end

local function front_len()
  return tonumber(redis.call('HGET', K_COUNT, 'front') or '0')
end

local function fill_to_floor()
  for _ = 1, B + 1 do
    if redis.call('HLEN', K_ACTIVE) >= B or front_len() == 0 then return end
    if not activate_one() then return end
  end
end

local function deactivate(host)
  redis.call('HDEL', K_ACTIVE, host)
  redis.call('HDEL', K_FETCH, host)
  stat('releases', 1)
end

-- End of a fetch (complete or expiry): the host rests, then is ready again or
-- gives up its back queue.
local function release(host, fetch, at_least)
  local mr = tonumber(redis.call('HGET', K_MINREST, host) or '0')
  local nc = now + math.max(delay(fetch), mr, at_least)
  redis.call('HDEL', K_LEASES, host)
  redis.call('ZREM', K_DEADLINES, host)
  redis.call('ZADD', K_REST, fmt(nc), host)
  local q = tonumber(redis.call('HGET', K_ACTIVE, host) or '0')
  if q > 0 then
    redis.call('HSET', K_FETCH, host, fmt(math.max(0, fetch)))
    redis.call('ZADD', K_READY, fmt(nc), host)
  else
    deactivate(host)
    fill_to_floor()
  end
  return nc
end

local function parse_lease(rec)
  local _, e, id, lv, handed, ready = string.find(rec, '^(%d+)|(%d+)|([^|]*)|([^|]*)|')
  return id, tonumber(lv), tonumber(handed), tonumber(ready), string.sub(rec, e + 1)
end

local function expire(limit)
  local hosts = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', fmt(now), 'LIMIT', 0, limit)
  local out = {}
  for _, host in ipairs(hosts) do
    local rec = redis.call('HGET', K_LEASES, host)
    local _, lv, handed, _, item = parse_lease(rec)
    if redis.call('SISMEMBER', K_RETIRED, host) == 1 then
      redis.call('RPUSH', K_DROPPED, host .. '\0' .. item)
      stat('retired_items', 1)
    else
      -- Back to the head of its level: it was next before, it is next again.
      add_to_back(host, lv, item, true)
    end
    release(host, now - handed, 0)
    stat('expired', 1)
    out[#out + 1] = host
    out[#out + 1] = item
  end
  return out
end

local function next_wakeup()
  local first = redis.call('ZRANGE', K_READY, 0, 0, 'WITHSCORES')
  if #first == 0 then return false end
  return fmt(math.max(0, tonumber(first[2]) - now))
end
"""

_PUSH = _PRELUDE + r"""
local out = {}
for i = 13, #ARGV, 3 do
  local host, lv, item = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  if redis.call('SISMEMBER', K_RETIRED, host) == 1 then
    stat('retired_items', 1)
    out[#out + 1] = 0
  else
    stat('pushed', 1)
    if redis.call('HEXISTS', K_ACTIVE, host) == 1 then
      add_to_back(host, lv, item, false)
    else
      redis.call('RPUSH', fkey(lv), host .. '\0' .. item)
      redis.call('HINCRBY', K_COUNT, 'front', 1)
      fill_to_floor()
    end
    out[#out + 1] = 1
  end
end
return out
"""

_CLAIM = _PRELUDE + r"""
local expired = expire(tonumber(ARGV[13]))
redis.call('ZREMRANGEBYSCORE', K_REST, '-inf', fmt(now))
fill_to_floor()
for _ = 1, BMAX + 1 do
  local due = redis.call('ZRANGEBYSCORE', K_READY, '-inf', fmt(now), 'WITHSCORES',
                         'LIMIT', 0, WINDOW)
  if #due > 0 then
    local best, best_lv, best_slack, best_te = nil, -1, 0, 0
    local hosts = {}
    for i = 1, #due, 2 do hosts[#hosts + 1] = due[i] end
    local heads = redis.call('HMGET', K_HEAD, unpack(hosts))
    local fetches = redis.call('HMGET', K_FETCH, unpack(hosts))
    local queued = redis.call('HMGET', K_ACTIVE, unpack(hosts))
    for j, host in ipairs(hosts) do
      local t_e = tonumber(due[2 * j])
      local lv = tonumber(heads[j])
      local slack = -math.huge
      if fetches[j] then
        local fetch = tonumber(fetches[j])
        slack = t_e - tonumber(queued[j]) * (fetch + delay(fetch))
      end
      if lv > best_lv or (lv == best_lv and slack < best_slack) then
        best, best_lv, best_slack, best_te = host, lv, slack, t_e
      end
    end
    local item = redis.call('LPOP', bkey(best_lv, best))
    if redis.call('LLEN', bkey(best_lv, best)) == 0 then update_head(best, best_lv - 1) end
    redis.call('HINCRBY', K_ACTIVE, best, -1)
    redis.call('HINCRBY', K_COUNT, 'back', -1)
    redis.call('ZREM', K_READY, best)
    local id = redis.call('INCR', K_SEQ)
    redis.call('HSET', K_LEASES, best,
               id .. '|' .. best_lv .. '|' .. fmt(now) .. '|' .. fmt(best_te) .. '|' .. item)
    redis.call('ZADD', K_DEADLINES, fmt(now + LEASE_T), best)
    stat('popped', 1)
    return {1, fmt(now), id, best, best_lv, item, fmt(now + LEASE_T), fmt(best_te), #expired / 2}
  end
  if redis.call('HLEN', K_ACTIVE) < BMAX and front_len() > 0 then
    if not activate_one() then break end
  else
    break
  end
end
return {0, fmt(now), next_wakeup(), #expired / 2}
"""

_COMPLETE = _PRELUDE + r"""
local host, id = ARGV[13], ARGV[14]
local fetch, at_least = tonumber(ARGV[15]), tonumber(ARGV[16])
local rec = redis.call('HGET', K_LEASES, host)
if not rec then return {0, fmt(now)} end
local lid = parse_lease(rec)
if lid ~= id then return {0, fmt(now)} end
local nc = release(host, fetch, at_least)
stat('completed', 1)
return {1, fmt(now), fmt(nc)}
"""

_EXPIRE = _PRELUDE + r"""
return expire(tonumber(ARGV[13]))
"""

_RETIRE = _PRELUDE + r"""
local host = ARGV[13]
if redis.call('SADD', K_RETIRED, host) == 0 then return {} end
stat('retired_hosts', 1)
local dropped = {}
if redis.call('HEXISTS', K_ACTIVE, host) == 1 then
  for lv = F, 1, -1 do
    local items = redis.call('LRANGE', bkey(lv, host), 0, -1)
    for _, item in ipairs(items) do dropped[#dropped + 1] = item end
    redis.call('DEL', bkey(lv, host))
  end
  redis.call('HSET', K_ACTIVE, host, 0)
  redis.call('HDEL', K_HEAD, host)
  redis.call('HINCRBY', K_COUNT, 'back', -#dropped)
  redis.call('ZREM', K_READY, host)
  if redis.call('HEXISTS', K_LEASES, host) == 0 then
    deactivate(host)
    fill_to_floor()
  end
end
stat('retired_items', #dropped)
return dropped
"""

_WAKEUP = _PRELUDE + r"""
return {fmt(now), next_wakeup()}
"""

# Fixed keys and the Redis type each must have.
_KEY_TYPES = {
    "meta": "hash",
    "count": "hash",
    "active": "hash",
    "ready": "zset",
    "rest": "zset",
    "fetch": "hash",
    "minrest": "hash",
    "retired": "set",
    "leases": "hash",
    "deadlines": "zset",
    "dropped": "list",
    "seq": "string",
    "stats": "hash",
    "head": "hash",
}

_UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def _describe(client: redis.Redis) -> str:
    kw = client.connection_pool.connection_kwargs
    if "path" in kw:
        return f"Redis at unix:{kw['path']}"
    return f"Redis at {kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


def _guard(client: redis.Redis, prefix: str, doing: str, fn: Callable[[], R]) -> R:
    """Run one Redis call, turning connection and data errors into frontier errors."""
    try:
        return fn()
    except _UNAVAILABLE as exc:
        raise RedisFrontierUnavailable(
            f"{_describe(client)} did not answer while {doing} ({type(exc).__name__}: {exc}). "
            "Nothing was removed on this side; retry once Redis is back (the queued and "
            "leased URLs are whatever Redis persisted)."
        ) from exc
    except redis.exceptions.ResponseError as exc:
        raise RedisFrontierDataError(
            f"{_describe(client)} refused an operation on keys under {prefix!r} while {doing}: "
            f"{exc}. A key there holds data the frontier did not write; check it with "
            f"RedisFrontier.check(), or delete the keys under {prefix!r} (or pick another "
            "prefix) and start again."
        ) from exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisFrontier:
    """The Mercator frontier in Redis, shared by every process that opens the same prefix."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        *,
        front_queues: int = 8,
        priority_bias: float = 2.0,
        back_queues: int = 48,
        back_queues_max: int | None = None,
        policy: DelayPolicy | None = None,
        lease_timeout: float = 240.0,
        refill_budget: int = 10_000,
        due_window: int = 16,
        expire_batch: int = 16,
        rng: random.Random | None = None,
    ) -> None:
        back_queues_max = check_shape(front_queues, back_queues, back_queues_max, lease_timeout)
        if not priority_bias >= 1.0:
            raise ValueError(f"priority bias must be >= 1, got {priority_bias}")
        if not prefix:
            raise ValueError("the Redis key prefix must not be empty")
        if client.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError(
                "the Redis client decodes responses; the frontier needs bytes "
                "(build it with decode_responses=False, as redis_from_settings does)"
            )
        # Typed loosely: redis-py's stubs type replies as bytes | str (decode_responses).
        self.client: Any = client
        self.prefix = prefix
        self.levels = front_queues
        self.back_queues = back_queues
        self.back_queues_max = back_queues_max
        self.policy = policy or DelayPolicy()
        self.lease_timeout = lease_timeout
        self.expire_batch = expire_batch
        # Seeds the scripts' biased front-queue choice (see _PRELUDE).
        self._rng = rng or random.Random()
        self._head = [
            prefix,
            front_queues,
            back_queues,
            back_queues_max,
            repr(self.policy.factor),
            repr(self.policy.min_delay),
            repr(self.policy.max_delay),
            repr(float(priority_bias)),
            repr(float(lease_timeout)),
            refill_budget,
            due_window,
        ]
        self._push = client.register_script(_PUSH)
        self._claim = client.register_script(_CLAIM)
        self._complete = client.register_script(_COMPLETE)
        self._expire = client.register_script(_EXPIRE)
        self._retire = client.register_script(_RETIRE)
        self._wakeup = client.register_script(_WAKEUP)
        self._connect()

    # -- plumbing ---------------------------------------------------------------------

    def key(self, name: str) -> str:
        return self.prefix + name

    def _run(self, script: Script, doing: str, *args: Any) -> Any:
        argv = [*self._head, self._rng.randrange(1, 2147483646), *args]
        return _guard(
            self.client, self.prefix, doing,
            lambda: script(keys=[self.key("meta")], args=argv, client=self.client),
        )

    def _call(self, doing: str, fn: Callable[[], R]) -> R:
        return _guard(self.client, self.prefix, doing, fn)

    def _connect(self) -> None:
        """Check (or write) the format marker and the types of the fixed keys."""
        meta_key = self.key("meta")
        client = self.client

        def check() -> None:
            pipe = client.pipeline(transaction=False)
            for name in _KEY_TYPES:
                pipe.type(self.key(name))
            for level in range(1, self.levels + 1):
                pipe.type(self.key(f"f:{level}"))
            types = [_text(t) for t in pipe.execute()]
            wanted = list(_KEY_TYPES.items()) + [
                (f"f:{lv}", "list") for lv in range(1, self.levels + 1)
            ]
            for (name, kind), got in zip(wanted, types, strict=True):
                if got not in ("none", kind):
                    raise RedisFrontierDataError(
                        f"Redis key {self.key(name)!r} is a {got}, the frontier keeps a {kind} "
                        f"there: the prefix {self.prefix!r} is used by something else. Pick "
                        "another prefix or delete that key."
                    )
            meta = {_text(k): _text(v) for k, v in client.hgetall(meta_key).items()}
            if not meta:
                cursor, found = client.scan(0, match=self._glob() + "*", count=1000)
                for _ in range(100):
                    if found or not cursor:
                        break
                    cursor, found = client.scan(cursor, match=self._glob() + "*", count=1000)
                if found:
                    raise RedisFrontierDataError(
                        f"keys under {self.prefix!r} exist (e.g. {_text(found[0])!r}) but "
                        f"{meta_key!r} does not mark them as a scrapy-frontier frontier. Pick "
                        "another prefix, or delete those keys if they are left over."
                    )
                client.hsetnx(meta_key, "format", FORMAT)
                client.hsetnx(meta_key, "version", str(VERSION))
                client.hsetnx(meta_key, "levels", str(self.levels))
                meta = {_text(k): _text(v) for k, v in client.hgetall(meta_key).items()}
            if meta.get("format") != FORMAT:
                raise RedisFrontierDataError(
                    f"{meta_key!r} says format {meta.get('format')!r}, not {FORMAT!r}: the keys "
                    f"under {self.prefix!r} were not written by scrapy-frontier. Pick another "
                    "prefix or delete them."
                )
            if meta.get("version") != str(VERSION):
                raise RedisFrontierDataError(
                    f"{meta_key!r} says version {meta.get('version')!r}; this scrapy-frontier "
                    f"reads version {VERSION}. Finish the crawl with the version that wrote it, "
                    f"or delete the keys under {self.prefix!r} to start afresh."
                )
            if meta.get("levels") != str(self.levels):
                raise RedisFrontierDataError(
                    f"{meta_key!r} was created with {meta.get('levels')} front queues, this "
                    f"frontier has {self.levels}: set FRONTIER_FRONT_QUEUES={meta.get('levels')} "
                    f"or delete the keys under {self.prefix!r}."
                )

        self._call("checking the frontier's keys", check)

    def _glob(self) -> str:
        out = []
        for ch in self.prefix:
            out.append("\\" + ch if ch in "*?[]\\" else ch)
        return "".join(out)

    def server_time(self) -> float:
        sec, usec = self._call("reading the server time", self.client.time)
        return float(sec) + usec / 1e6

    # -- adding -----------------------------------------------------------------------

    def push(self, host: str, level: int, item: bytes) -> bool:
        """Queue ``item`` for ``host`` at ``level`` (1..F, F highest); False if retired."""
        return self.push_many([(host, level, item)])[0]

    def push_many(self, entries: Iterable[tuple[str, int, bytes]]) -> list[bool]:
        """Queue many items in one atomic script call; one bool per entry."""
        args: list[Any] = []
        for host, level, item in entries:
            self._check_host(host)
            if not 1 <= level <= self.levels:
                raise ValueError(f"level must be in 1..{self.levels}, got {level}")
            if not isinstance(item, bytes | bytearray | memoryview):
                raise TypeError(f"items must be bytes, got {type(item).__name__}")
            args += [host, level, bytes(item)]
        if not args:
            return []
        out = self._run(self._push, "pushing URLs", *args)
        return [bool(x) for x in out]

    @staticmethod
    def _check_host(host: str) -> None:
        if not host or "\0" in host:
            raise ValueError(f"host must be a non-empty string without NUL, got {host!r}")

    # -- taking -----------------------------------------------------------------------

    def pop(self) -> RedisLease | None:
        """Claim the next URL whose host may be contacted now (server time), or None.

        Expires overdue leases first (their items go back to their hosts' queues).
        """
        reply = self._run(self._claim, "claiming a URL", self.expire_batch)
        if not reply[0]:
            return None
        _, _, ticket, host, level, item, deadline, ready_at, _ = reply
        return RedisLease(
            ticket=int(ticket),
            host=_text(host),
            item=bytes(item),
            level=int(level),
            handed_at=float(reply[1]),
            deadline=float(deadline),
            ready_at=float(ready_at),
        )

    claim = pop

    # -- finishing --------------------------------------------------------------------

    def complete(
        self, lease: RedisLease, fetch_seconds: float, *, rest_at_least: float = 0.0
    ) -> Completion | None:
        """The fetch of ``lease`` ended now after ``fetch_seconds``: forget the item, and
        the host rests ``max(policy.delay(fetch), min_rest(host), rest_at_least)``.

        Returns None (and changes nothing) if the lease is no longer held: it expired and
        its item was returned to the queue, so the item will be fetched again.
        """
        if math.isnan(rest_at_least) or rest_at_least < 0:
            raise ValueError(f"rest_at_least must be >= 0, got {rest_at_least}")
        if math.isnan(fetch_seconds):
            raise ValueError("fetch_seconds must be a number, got NaN")
        reply = self._run(
            self._complete, "completing a lease",
            lease.host, lease.ticket, repr(float(fetch_seconds)), repr(float(rest_at_least)),
        )
        if not reply[0]:
            return None
        return Completion(float(reply[1]), float(reply[2]))

    def expire_leases(self, limit: int = 1000) -> list[tuple[str, bytes]]:
        """Return the items of leases past their deadline to their hosts' queues.

        The host rests as if the fetch had lasted until now (clamped by the policy).
        Returns the (host, item) pairs returned (or dropped, for a retired host).
        """
        out = self._run(self._expire, "expiring leases", limit)
        return [(_text(out[i]), bytes(out[i + 1])) for i in range(0, len(out), 2)]

    # -- host rules -------------------------------------------------------------------

    def set_min_rest(self, host: str, seconds: float) -> None:
        """Every fetch from ``host`` is followed by a rest of at least ``seconds``; 0 removes."""
        self._check_host(host)
        if math.isnan(seconds) or seconds < 0:
            raise ValueError(f"minimum rest must be >= 0, got {seconds}")
        key = self.key("minrest")
        if seconds:
            self._call("setting a minimum rest", lambda: self.client.hset(key, host, repr(seconds)))
        else:
            self._call("clearing a minimum rest", lambda: self.client.hdel(key, host))

    def min_rest(self, host: str) -> float:
        key = self.key("minrest")
        value = self._call("reading a minimum rest", lambda: self.client.hget(key, host))
        return float(value) if value is not None else 0.0

    def retire(self, host: str) -> list[bytes]:
        """Give up ``host``: drop and return its back-queue items; later pushes are refused
        and its front-queue items are dropped when they surface (see :meth:`take_dropped`).
        A fetch in flight completes normally."""
        self._check_host(host)
        return [bytes(x) for x in self._run(self._retire, "retiring a host", host)]

    def is_retired(self, host: str) -> bool:
        return bool(self._call("reading retired hosts",
                               lambda: self.client.sismember(self.key("retired"), host)))

    def take_dropped(self, limit: int = 10_000) -> list[tuple[str, bytes]]:
        """(host, item) of retired hosts dropped from front queues or expired leases."""
        raw = self._call("taking dropped URLs",
                         lambda: self.client.lpop(self.key("dropped"), limit)) or []
        out = []
        for entry in raw:
            host, _, item = bytes(entry).partition(b"\0")
            out.append((host.decode(), item))
        return out

    def next_contact(self, host: str) -> float | None:
        """The server time before which ``host`` will not be contacted, if still ahead."""
        score = self._call("reading a rest", lambda: self.client.zscore(self.key("rest"), host))
        return None if score is None else float(score)

    # -- time and sizes ---------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        """Seconds from now (server time) until the earliest host with URLs may be contacted;
        0 if one is due, None if no host with queued URLs is waiting (only leases are out, or
        nothing is queued). Lease expiry is not counted: see :meth:`next_lease_deadline`."""
        _, wake = self._run(self._wakeup, "reading the next wake-up")
        return None if wake is None else float(wake)

    def next_lease_deadline(self) -> float | None:
        """Seconds from now until the earliest lease deadline, if any lease is out."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.time()
            pipe.zrange(self.key("deadlines"), 0, 0, withscores=True)
            return pipe.execute()  # type: ignore[no-any-return]

        (sec, usec), first = self._call("reading lease deadlines", read)
        if not first:
            return None
        return max(0.0, float(first[0][1]) - (sec + usec / 1e6))

    def sizes(self) -> tuple[int, int, int]:
        """(URLs in front queues, URLs in back queues, leases), in one round trip."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(self.key("count"), "front", "back")
            pipe.hlen(self.key("leases"))
            return pipe.execute()  # type: ignore[no-any-return]

        (front, back), leases = self._call("reading sizes", read)
        return int(front or 0), int(back or 0), int(leases)

    def __len__(self) -> int:
        """URLs queued (front and back queues), not counting those leased."""
        front, back, _ = self.sizes()
        return front + back

    @property
    def in_flight(self) -> int:
        """Leases held by all workers."""
        return int(self._call("counting leases", lambda: self.client.hlen(self.key("leases"))))

    @property
    def front_len(self) -> int:
        return self.sizes()[0]

    @property
    def active_back_queues(self) -> int:
        return int(self._call("counting hosts", lambda: self.client.hlen(self.key("active"))))

    def idle(self) -> bool:
        """No queued URL and no lease anywhere: the distributed crawl has nothing left."""
        front, back, leases = self.sizes()
        return front + back + leases == 0

    def leases(self) -> list[RedisLease]:
        raw = self._call("reading leases", lambda: self.client.hgetall(self.key("leases")))
        deadlines = dict(
            self._call("reading deadlines",
                       lambda: self.client.zrange(self.key("deadlines"), 0, -1, withscores=True))
        )
        out = []
        for host, rec in raw.items():
            ticket, level, handed, ready, item = bytes(rec).split(b"|", 4)
            out.append(RedisLease(int(ticket), _text(host), item, int(level), float(handed),
                                  float(deadlines.get(host, math.nan)), float(ready)))
        return out

    def stats(self) -> dict[str, int]:
        raw = self._call("reading stats", lambda: self.client.hgetall(self.key("stats")))
        return {_text(k): int(v) for k, v in raw.items()}

    def iter_queued(self) -> Iterator[tuple[str, int, bytes]]:
        """Every queued (host, level, item): front queues, then back queues (not atomic)."""
        for level in range(1, self.levels + 1):
            fkey = self.key(f"f:{level}")
            for entry in self._call("listing", partial(self.client.lrange, fkey, 0, -1)):
                host, _, item = bytes(entry).partition(b"\0")
                yield host.decode(), level, item
        active = self._call("listing", lambda: self.client.hkeys(self.key("active")))
        for host in active:
            h = _text(host)
            for level in range(self.levels, 0, -1):
                key = self.key(f"b:{level}:{h}")
                for item in self._call("listing", partial(self.client.lrange, key, 0, -1)):
                    yield h, level, bytes(item)

    def clear(self) -> int:
        """Delete every key under the prefix (a fresh crawl); returns how many."""

        def run() -> int:
            n = 0
            batch: list[Any] = []
            for key in self.client.scan_iter(match=self._glob() + "*", count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    n += self.client.delete(*batch)
                    batch = []
            if batch:
                n += self.client.delete(*batch)
            return n

        n = self._call("deleting the frontier's keys", run)
        self._connect()
        return n

    # -- inspection -------------------------------------------------------------------

    def check(self) -> None:
        """Assert every structural invariant by reading all keys; O(size), for tests.

        Only meaningful while no other worker changes the frontier.
        """
        c = self.client
        k = self.key

        def h(name: str) -> dict[str, bytes]:
            return {_text(a): b for a, b in c.hgetall(k(name)).items()}

        def z(name: str) -> dict[str, float]:
            return {_text(a): b for a, b in c.zrange(k(name), 0, -1, withscores=True)}

        now = self.server_time()
        count = {a: int(b) for a, b in h("count").items()}
        active = {a: int(b) for a, b in h("active").items()}
        leases = h("leases")
        deadlines = z("deadlines")
        ready = z("ready")
        rest = z("rest")
        fetch = h("fetch")
        retired = {_text(x) for x in c.smembers(k("retired"))}
        front = 0
        for lv in range(1, self.levels + 1):
            entries = c.lrange(k(f"f:{lv}"), 0, -1)
            front += len(entries)
            for e in entries:
                assert b"\0" in e, f"front entry without host in f:{lv}"
        assert count.get("front", 0) == front, f"front count {count.get('front')} != {front}"
        back_keys: dict[str, int] = {}
        pattern = self._glob() + "b:*"
        for key in c.scan_iter(match=pattern, count=1000):
            rest_of = _text(key)[len(self.prefix) + 2:]
            level, _, host = rest_of.partition(":")
            n = c.llen(key)
            assert n > 0, f"empty back list {key!r} kept"
            assert 1 <= int(level) <= self.levels, f"back list {key!r} with bad level"
            back_keys[host] = back_keys.get(host, 0) + n
        for host, n in back_keys.items():
            assert host in active, f"back queue for {host} without an active entry"
            assert active[host] == n, f"{host}: active says {active[host]}, lists hold {n}"
        for host, q in active.items():
            assert q == back_keys.get(host, 0), f"{host}: active says {q}, lists hold none"
            assert q >= 0
            assert q or host in leases, f"idle empty back queue for {host}"
            if host in retired:
                assert q == 0, f"retired {host} still queued"
        assert count.get("back", 0) == sum(active.values()), "back count drift"
        assert len(active) <= self.back_queues_max, "more back queues than allowed"
        if front:
            assert len(active) >= self.back_queues, "front queues wait while back queues are free"
        assert set(leases) == set(deadlines), "leases and deadlines disagree"
        for host, rec in leases.items():
            assert host in active, f"lease on {host} without a back queue"
            assert host not in ready, f"leased {host} also ready"
            _, _, handed, _, _ = rec.split(b"|", 4)
            assert abs(deadlines[host] - float(handed) - self.lease_timeout) < 1e-3
        want_ready = {host for host, q in active.items() if q and host not in leases}
        assert set(ready) == want_ready, f"ready {sorted(ready)} != {sorted(want_ready)}"
        for host, t_e in ready.items():
            if host in rest:
                assert abs(rest[host] - t_e) < 1e-5, f"{host}: ready {t_e} != rest {rest[host]}"
            else:
                assert t_e <= now + 1e-3, f"{host}: ready in the future without a rest"
        assert set(fetch) <= set(active), "fetch durations for inactive hosts"
        head = {a: int(b) for a, b in h("head").items()}
        assert set(head) == {host for host, q in active.items() if q}, "head levels drift"
        for host, lv in head.items():
            top = max(lvl for lvl in range(1, self.levels + 1)
                      if c.llen(k(f"b:{lvl}:{host}")))
            assert lv == top, f"{host}: head level {lv}, lists say {top}"

    # -- settings ---------------------------------------------------------------------

    @classmethod
    def from_settings(cls, settings: Any, spider_name: str,
                      client: redis.Redis | None = None) -> RedisFrontier:
        """Build from ``FRONTIER_*`` settings and scrapy-redis's ``REDIS_*`` settings.

        ``FRONTIER_REDIS_KEY`` (default ``"%(spider)s:frontier:"``) is the key prefix.
        """
        from scrapy_frontier.config import FrontierConfig

        cfg = FrontierConfig.from_settings(settings)
        prefix = settings.get("FRONTIER_REDIS_KEY") or "%(spider)s:frontier:"
        return cls(
            client if client is not None else redis_from_settings(settings),
            prefix % {"spider": spider_name},
            front_queues=cfg.front_queues,
            priority_bias=cfg.priority_bias,
            back_queues=cfg.back_queues,
            back_queues_max=cfg.back_queues_max,
            policy=cfg.policy,
            lease_timeout=cfg.lease_timeout,
        )


# --------------------------------------------------------------------------------------


class RedisSeenSet:
    """64-bit fingerprints in bucketed Redis sets of integers (intsets: 8 bytes each).

    The top bits of a fingerprint pick the bucket, so each bucket holds about
    ``expected / buckets`` integers; the bucket count is chosen from ``expected``
    (about 256 per bucket, under Redis's ``set-max-intset-entries`` 512) and
    stored in ``S meta`` the first time: later openers use the stored count.
    """

    PER_BUCKET = 256

    def __init__(self, client: redis.Redis, prefix: str, *, expected: int = 10_000_000,
                 batch: int = 1000) -> None:
        self.client: Any = client
        self.prefix = prefix
        self.batch = batch
        bits = max(0, math.ceil(math.log2(max(1, expected) / self.PER_BUCKET)))
        bits = min(bits, 24)
        meta = prefix + "meta"

        def setup() -> int:
            kind = _text(client.type(meta))
            if kind not in ("none", "hash"):
                raise RedisFrontierDataError(
                    f"Redis key {meta!r} is a {kind}, not the seen set's marker hash: pick "
                    "another prefix or delete it."
                )
            client.hsetnx(meta, "format", SEEN_FORMAT)
            client.hsetnx(meta, "bits", str(bits))
            got = {_text(a): _text(b) for a, b in client.hgetall(meta).items()}
            if got.get("format") != SEEN_FORMAT:
                raise RedisFrontierDataError(
                    f"{meta!r} says format {got.get('format')!r}, not {SEEN_FORMAT!r}: pick "
                    "another prefix or delete the keys under it."
                )
            return int(got["bits"])

        self.bits = _guard(client, prefix, "opening the seen set", setup)
        self.buckets = 1 << self.bits

    def _bucket(self, fp: int) -> tuple[str, int]:
        fp &= 0xFFFF_FFFF_FFFF_FFFF
        bucket = fp >> (64 - self.bits) if self.bits else 0
        signed = fp - (1 << 64) if fp >= 1 << 63 else fp
        return f"{self.prefix}{bucket:x}", signed

    def add_if_new(self, fp: int) -> bool:
        return self.add_many([fp])[0]

    def add_many(self, fps: Iterable[int]) -> list[bool]:
        """Add fingerprints; True for each one not seen before (pipelined in batches)."""
        return self._each(fps, "sadd", "adding fingerprints")

    def contains_many(self, fps: Iterable[int]) -> list[bool]:
        """Whether each fingerprint is in the set (pipelined in batches; changes nothing)."""
        return self._each(fps, "sismember", "testing fingerprints")

    def _each(self, fps: Iterable[int], command: str, doing: str) -> list[bool]:
        """One set command per fingerprint, pipelined in batches of ``self.batch``."""
        fps = list(fps)
        out: list[bool] = []

        def run(chunk: list[int]) -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for fp in chunk:
                getattr(pipe, command)(*self._bucket(fp))
            return pipe.execute()  # type: ignore[no-any-return]

        for i in range(0, len(fps), self.batch):
            chunk = fps[i:i + self.batch]
            out += [bool(x) for x in _guard(self.client, self.prefix, doing, partial(run, chunk))]
        return out

    def __contains__(self, fp: int) -> bool:
        key, member = self._bucket(fp)
        return bool(_guard(self.client, self.prefix, "testing a fingerprint",
                           lambda: self.client.sismember(key, member)))

    @staticmethod
    def fingerprint(data: bytes) -> int:
        """A 64-bit fingerprint of bytes (e.g. Scrapy's request fingerprint)."""
        import hashlib

        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


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
        except _UNAVAILABLE as exc:
            if time.monotonic() > deadline:
                raise RedisFrontierUnavailable(
                    f"{_describe(client)} did not answer PING within {timeout} s: {exc}"
                ) from exc
            time.sleep(0.05)


__all__ = [
    "Completion",
    "RedisFrontier",
    "RedisFrontierDataError",
    "RedisFrontierError",
    "RedisFrontierUnavailable",
    "RedisLease",
    "RedisSeenSet",
    "redis_from_settings",
    "wait_for_redis",
]
