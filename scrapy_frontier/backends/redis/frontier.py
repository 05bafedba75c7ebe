"""A distributed Mercator frontier kept in one Redis, shared by many crawler processes.

:class:`RedisFrontier` behaves like the in-memory
:class:`~scrapy_frontier.core.frontier.Frontier` for items that are ``bytes``
(the caller serializes its requests): F front queues, one back queue per active
host, a ready set ordered by each host's next-contact time, one fetch per host
at a time across *all* workers (``connections``: k at a time for a host of k
connections, each resting by its own fetch), and a rest after every fetch of
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
    P fetch           HASH   host -> "<fetch> <pace>": its last fetch's duration and the rest
                             the policy gave it (active hosts; due order, lapsed leases)
    P minrest         HASH   host -> minimum rest in seconds (robots.txt Crawl-delay)
    P retired         SET    hosts given up for good
    P capped          SET    retired hosts that reached their fetch budget
    P blocked         ZSET   host -> end of its block (server time; inf: until unblocked)
    P delay           HASH   host -> an operator's minimum rest (scrapy frontier delay)
    P budgets         HASH   host -> its fetch budget (scrapy frontier budget)
    P traps           HASH   host -> "contained" (a crawler trap) or "released" by an operator
    P policies        HASH   key -> fields as JSON: the per-host policy's steered entries
                             (scrapy frontier policy; kept in the first partition)
    P fetched         HASH   host -> fetches completed, while a budget is in force
    P leases          HASH   host -> "<id>|<level>|<handed_at>|<ready_at>|<item>" (one per host)
    P deadlines       ZSET   host -> lease deadline
    P conns           HASH   host -> connections, for hosts pushed with more than one (as the
                             last push while the host had no back queue said); absent while
                             no host has more than one
    P spare           ZSET   "host NUL c" -> rest end: idle connections of a host of several
                             with nothing queued
    P dropped         LIST   host NUL item: URLs of retired hosts dropped from front queues
    P quarantine      LIST   host NUL level NUL at NUL error NUL item: claimed items that
                             cannot be rebuilt, set aside (scrapy frontier quarantine)
    P seq             STRING lease id counter
    P workers         ZSET   worker -> end of its liveness window (server time), renewed by
                             its heartbeat (RedisFrontier.renew)
    P stats           HASH   pushed, popped, completed, expired, handed_back, activations,
                             releases, ...
    P robots:<origin> STRING a site's last definitive robots.txt answer (origin
                             ``scheme://host[:port]``), expiring 30 days after its fetch
                             (first partition only; robots.py)

A host of k > 1 connections (``connections``) is k members ``host NUL 1`` .. ``host NUL
k`` of ``ready``, ``leases``, ``deadlines`` and ``spare``, one per connection: each in
exactly one of ready, leases and spare while the host has a back queue. Its ``rest`` is
the latest of its connections' rests. A host of one connection is its own member, as when
no host has more (the scripts then read no key of connections at all).

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

import json
import math
import random
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, TypeVar

import redis
from redis.commands.core import Script

from scrapy_frontier.backends.redis.connection import (
    decodes_responses,
    describe,
    guard,
    is_cluster,
    text,
)
from scrapy_frontier.backends.redis.lua import load_script, lua_source
from scrapy_frontier.core.frontier import check_shape
from scrapy_frontier.core.politeness import DelayPolicy, rest_before_floors, saved_delay_rule
from scrapy_frontier.core.prioritizer import FrontQueueChooser
from scrapy_frontier.errors import RedisFrontierDataError, RedisFrontierError, RedisFrontierGone

FORMAT = "scrapy-frontier/redis"
VERSION = 1

R = TypeVar("R")

#: The ``budget`` of a completion that gives its lease back unfetched (a worker that cannot
#: prove it still holds it): if the lease is still held, its item goes back to the head of its
#: host's queue, as a lapsed lease's does; if not, it was taken back and queued already.
HAND_BACK = -2
#: The budget argument of a completion whose request never reached its host: done, no rest.
UNSENT = -3


@dataclass(frozen=True, slots=True)
class RedisLease:
    """One claimed item: its host (its connection, for a host of several) is busy for every
    worker until completed or expired."""

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

    @property
    def wait(self) -> float:
        """Seconds from the claim until the host may be contacted (0 unless the lease was
        claimed ahead of the host's ready time)."""
        return max(0.0, self.ready_at - self.handed_at)


class Quarantined(NamedTuple):
    """A claimed item that cannot be rebuilt, kept in ``P quarantine``."""

    host: str
    level: int
    at: str
    """When it was set aside (UTC, ISO 8601)."""
    error: str
    item: bytes

    def encode(self) -> bytes:
        head = [self.host, str(self.level), self.at, self.error.replace("\0", " ")]
        return "\0".join(head).encode() + b"\0" + self.item

    @classmethod
    def decode(cls, entry: bytes) -> Quarantined:
        """The entry's fields; an entry no worker wrote (Redis clients may write it) is
        :attr:`damaged`, with the whole entry as its item."""
        try:
            host, level, at, error, item = bytes(entry).split(b"\0", 4)
            return cls(host.decode(), int(level), at.decode(),
                       error.decode("utf-8", "replace"), item)
        except ValueError:  # too few fields, a level that is no number, or not UTF-8
            return cls("", -1, "", "a damaged entry that no worker wrote", bytes(entry))

    @property
    def damaged(self) -> bool:
        return self.level < 0


class SharedCensus(NamedTuple):
    """The whole frontier, as :meth:`RedisFrontier.census` reads it (hosts: see
    :class:`scrapy_frontier.core.frontier.HostStates`; ``known`` is approximate)."""

    queued: int
    in_flight: int
    front: int
    active: int
    waiting: int
    resting: int
    retired: int
    known: int
    fetched: int
    politeness_wait_seconds: float
    queued_hosts: int
    blocked: int = 0


class Finished(NamedTuple):
    """A fetch to complete in :meth:`RedisFrontier.round` (as :meth:`RedisFrontier.complete`
    takes it)."""

    lease: RedisLease
    fetch_seconds: float
    rest_at_least: float = 0.0
    budget: int = 0
    ended_ago: float = 0.0


class RoundReply(NamedTuple):
    """What :meth:`RedisFrontier.round` did and read, in one script call."""

    pushed: list[int]
    """Per push: 1 queued, 0 refused (retired host), 2 in the seen set already."""
    completed: list[Completion | None]
    """Per completion, as :meth:`RedisFrontier.complete` returns it."""
    leases: list[RedisLease]
    wakeup: float | None
    """Seconds until a host becomes ready, when fewer leases than wanted were claimed."""
    front: int
    back: int
    in_flight: int
    reclaimed: int
    """Lapsed leases the claims gave back to their hosts first."""
    ready_hosts: int = 0
    """Hosts with queued URLs that may be contacted now (after the claims)."""
    settled: bool = True
    """False: the sizes say idle, but a partition changed while they were read (see
    PartitionedFrontier.settled): not idle yet."""


class Completion(NamedTuple):
    at: float
    """Server time at which the completion was recorded (the end of the fetch)."""
    next_contact: float
    """Server time before which the host will not be handed out again."""
    capped: int = -1
    """The queued URLs dropped because this fetch spent the host's budget; -1: it did not."""


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
    "capped": "set",
    "blocked": "zset",
    "delay": "hash",
    "budgets": "hash",
    "fetched": "hash",
    "workers": "zset",
    "conns": "hash",
    "spare": "zset",
    "policies": "hash",
    "traps": "hash",
}



def _one_slot(prefix: str) -> bool:
    """Whether every key under ``prefix`` hashes to one Redis Cluster slot (a non-empty
    ``{...}`` hash tag in the prefix)."""
    start = prefix.find("{")
    end = prefix.find("}", start + 1)
    return start >= 0 and end > start + 1


def decode_policies(raw: dict[Any, Any]) -> dict[str, Any]:
    """``P policies`` as read: key -> fields (a value that is not JSON stays as it is, for
    the workers to refuse with its key)."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        try:
            out[name] = json.loads(value)
        except (TypeError, ValueError, RecursionError):
            out[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return out


def read_pace(raw: bytes | str) -> tuple[float, float]:
    """A ``P fetch`` entry: the host's last fetch time and its pace (the policy's rest for
    that fetch), as the scripts write it."""
    fetch, pace = text(raw).split(" ")
    return float(fetch), float(pace)


def _check_fetch(fetch_seconds: float, rest_at_least: float) -> None:
    """A completion's numbers, checked before they reach a script."""
    if math.isnan(rest_at_least) or rest_at_least < 0:
        raise ValueError(f"rest_at_least must be >= 0, got {rest_at_least}")
    if math.isnan(fetch_seconds):
        raise ValueError("fetch_seconds must be a number, got NaN")


def _weights(levels: int, bias: float) -> str:
    """The front queues' weights, level 1 first, as the scripts read them (ARGV[5])."""
    chooser = FrontQueueChooser(levels, bias, random.Random(0))
    return " ".join(repr(w) for w in chooser.weights)


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
        policy_of: Callable[[str], DelayPolicy] | None = None,
        lease_timeout: float = 240.0,
        refill_budget: int = 10_000,
        due_window: int = 16,
        expire_batch: int = 16,
        rng: random.Random | None = None,
        spider: str | None = None,
        liveness: float = 0.0,
        partition: tuple[int, int] | None = None,
        connections: Callable[[str], int] | None = None,
    ) -> None:
        back_queues_max = check_shape(front_queues, back_queues, back_queues_max, lease_timeout)
        if not priority_bias >= 1.0:
            raise ValueError(f"priority bias must be >= 1, got {priority_bias}")
        if not prefix:
            raise ValueError("the Redis key prefix must not be empty")
        if decodes_responses(client):
            raise ValueError(
                "the Redis client decodes responses; the frontier needs bytes "
                "(build it with decode_responses=False, as redis_from_settings does)"
            )
        # Typed loosely: redis-py's stubs type replies as bytes | str (decode_responses).
        self.client: Any = client
        self.prefix = prefix
        #: On a Redis Cluster, every key of this frontier must share one hash tag.
        self.cluster = is_cluster(client)
        if self.cluster and not _one_slot(prefix):
            raise ValueError(
                f"on a Redis Cluster the prefix {prefix!r} must carry a hash tag ({{...}}) so "
                "that every key of the frontier lands in one slot")
        #: (index, count) of this frontier among its crawl's partitions (None: the single
        #: frontier of an unpartitioned crawl; checked at connect).
        self.partition = partition
        #: The spider that owns these keys (checked at connect, like SQLite's meta table).
        self.spider = spider
        self.levels = front_queues
        self.back_queues = back_queues
        self.back_queues_max = back_queues_max
        self.policy = policy or DelayPolicy()
        #: Each host's own delay rule (FRONTIER_HOST_POLICY); None: ``policy`` for all.
        self.policy_of = policy_of
        #: How many connections (leases at once) a host may use, sent with its pushes and
        #: read by the scripts when it gets a back queue (None: one for every host).
        self.connections = connections
        self.lease_timeout = lease_timeout
        if math.isnan(liveness) or liveness < 0:
            raise ValueError(f"liveness must be >= 0 seconds, got {liveness}")
        #: Seconds a lease this client claims lasts unless :meth:`renew` extends it (0: it
        #: lasts ``lease_timeout``, and is never renewed).
        self.liveness = liveness
        self.expire_batch = expire_batch
        #: Leases past their deadline that this client's claims gave back to their hosts
        #: (each claim first expires up to ``expire_batch`` of them).
        self.reclaimed = 0
        # Seeds the scripts' biased front-queue choice (see lua/prelude.lua).
        self._rng = rng or random.Random()
        self._head = [
            prefix,
            front_queues,
            back_queues,
            back_queues_max,
            _weights(front_queues, float(priority_bias)),
            repr(float(lease_timeout)),
            # The rests of a lapse (see expire): after a fetch that ran the whole lease, and
            # the pace of a host never measured (a fetch of no known time).
            f"{self.policy.delay(float(lease_timeout))!r} {self.policy.delay(0.0)!r}",
            refill_budget,
            due_window,
        ]
        self._push = client.register_script(load_script("push"))
        self._claim = client.register_script(load_script("claim"))
        self._complete = client.register_script(load_script("complete"))
        self._expire = client.register_script(load_script("expire"))
        self._retire = client.register_script(load_script("retire"))
        self._wakeup = client.register_script(load_script("wakeup"))
        self._census = client.register_script(load_script("census"))
        self._control = client.register_script(load_script("control"))
        self._renew = client.register_script(load_script("renew"))
        self._round = client.register_script(load_script("round"))
        self._clock = client.register_script(lua_source("clock"))
        self._init_meta = client.register_script(lua_source("init_meta"))
        self._connect()

    # -- plumbing ---------------------------------------------------------------------

    def key(self, name: str) -> str:
        return self.prefix + name

    def _run(self, script: Script, doing: str, *args: Any) -> Any:
        argv = [*self._head, self._rng.randrange(1, 2147483646), *args]
        try:
            return guard(
                self.client, self.prefix, doing,
                lambda: script(keys=[self.key("meta")], args=argv, client=self.client),
            )
        except RedisFrontierError as exc:
            if "FRONTIER_GONE" not in str(exc.__cause__):
                raise
            raise RedisFrontierGone(
                f"The frontier's keys under {self.prefix!r} are gone from "
                f"{describe(self.client)} while {doing}: Redis restarted without persistence "
                "(or the keys were deleted), so the queued URLs and leases it held are lost "
                "there. The crawl stops instead of reporting an empty frontier as finished. "
                "Turn on Redis persistence (appendonly yes) for crawls that must survive a "
                "restart; to crawl again, start the crawl anew (its seen set and history may "
                "be gone too)."
            ) from exc

    def _call(self, doing: str, fn: Callable[[], R]) -> R:
        return guard(self.client, self.prefix, doing, fn)

    def _completion_args(self, lease: RedisLease, fetch_seconds: float, rest_at_least: float,
                         budget: int, ended_ago: float) -> list[Any]:
        """Six script arguments per completion (see complete_one in lua/prelude.lua): the
        host's pace (the policy's rest for this fetch, kept with its fetch time for the due
        order and a later lapse) and the rest are computed here, by the core's rules; the
        scripts raise the rest to the host's floors kept in Redis."""
        _check_fetch(fetch_seconds, rest_at_least)
        fetch = float(fetch_seconds)
        policy = self.policy if self.policy_of is None else self.policy_of(lease.host)
        pace = policy.delay(fetch)
        rest = rest_before_floors(policy, fetch, max(0.0, float(ended_ago)),
                                  float(rest_at_least))
        return [lease.host, lease.ticket, repr(fetch), repr(pace), repr(rest), int(budget)]

    def _pipeline(self) -> Any:
        """A pipeline of this frontier's keys: a MULTI transaction on one Redis; on a
        cluster a plain pipeline (redis-py < 6 runs no transaction there), to one node."""
        return self.client.pipeline(transaction=not self.cluster)

    def _some_keys(self) -> list[Any]:
        """A few keys under the prefix, if any (on a cluster: from the prefix's slot)."""
        client = self.client
        if self.cluster:
            keys = client.cluster_get_keys_in_slot(client.keyslot(self.key("meta")), 1000)
            return [k for k in keys if text(k).startswith(self.prefix)][:1]
        cursor, found = client.scan(0, match=self._glob() + "*", count=1000)
        for _ in range(100):
            if found or not cursor:
                break
            cursor, found = client.scan(cursor, match=self._glob() + "*", count=1000)
        return list(found)

    def save_delay_rule(self) -> None:
        """Keep this crawl's delay rule in the meta key, for ``scrapy frontier hosts`` (the
        last worker to open wins: workers of one crawl share their settings)."""
        fields = saved_delay_rule(self.policy)
        self._call("saving the delay rule",
                   lambda: self.client.hset(self.key("meta"), mapping=fields))

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
            types = [text(t) for t in pipe.execute()]
            wanted = list(_KEY_TYPES.items()) + [
                (f"f:{lv}", "list") for lv in range(1, self.levels + 1)
            ]
            for (name, kind), got in zip(wanted, types, strict=True):
                if got not in ("none", kind):
                    raise RedisFrontierDataError(
                        f"Redis key {self.key(name)!r} is a {got}, the frontier keeps a {kind} "
                        f"there: the prefix {self.prefix!r} is used by something else. Pick "
                        "another FRONTIER_REDIS_KEY prefix, or move that key away (RENAME)."
                    )
            meta = {text(k): text(v) for k, v in client.hgetall(meta_key).items()}
            if not meta:
                found = self._some_keys()
                if found:
                    raise RedisFrontierDataError(
                        f"keys under {self.prefix!r} exist (e.g. {text(found[0])!r}) but "
                        f"{meta_key!r} does not mark them as a scrapy-frontier frontier. Pick "
                        "another FRONTIER_REDIS_KEY prefix, or move those keys away if they are "
                        "left over."
                    )
                # One script: a connection lost midway must not leave a meta hash with
                # some fields only (redis-py < 6 does not retry a command by itself).
                fields = ["format", FORMAT, "version", str(VERSION), "levels", str(self.levels)]
                if self.partition is not None:
                    fields += ["partition", str(self.partition[0]),
                               "partitions", str(self.partition[1])]
                self._init_meta(keys=[meta_key], args=fields, client=client)
                meta = {text(k): text(v) for k, v in client.hgetall(meta_key).items()}
            if self.spider is not None and meta.get("format") == FORMAT:
                # The first opener that names a spider records it; later ones must match.
                client.hsetnx(meta_key, "spider", self.spider)
                owner = text(client.hget(meta_key, "spider") or b"")
                if owner != self.spider:
                    raise RedisFrontierDataError(
                        f"the frontier under {self.prefix!r} belongs to spider {owner!r}, not "
                        f"{self.spider!r}: two spiders must not share queues. Give this spider "
                        "its own FRONTIER_REDIS_KEY (the default, '%(spider)s:frontier:', "
                        "does that)."
                    )
            if meta.get("format") != FORMAT:
                raise RedisFrontierDataError(
                    f"{meta_key!r} says format {meta.get('format')!r}, not {FORMAT!r}: the keys "
                    f"under {self.prefix!r} were not written by scrapy-frontier. Pick another "
                    "FRONTIER_REDIS_KEY prefix; nothing was changed under this one."
                )
            if meta.get("version") != str(VERSION):
                raise RedisFrontierDataError(
                    f"{meta_key!r} says version {meta.get('version')!r}; this scrapy-frontier "
                    f"reads version {VERSION}. Finish the crawl with the version that wrote it, "
                    "or start a new crawl under another FRONTIER_REDIS_KEY prefix."
                )
            self._check_partition(meta)
            if meta.get("levels") != str(self.levels):
                raise RedisFrontierDataError(
                    f"{meta_key!r} was created with {meta.get('levels')} front queues, this "
                    f"frontier has {self.levels}: set FRONTIER_FRONT_QUEUES={meta.get('levels')} "
                    "to continue it, or use another FRONTIER_REDIS_KEY prefix for a new crawl."
                )

        self._call("checking the frontier's keys", check)

    def _check_partition(self, meta: dict[str, str]) -> None:
        """The partition this frontier was opened as is the one its meta key records."""
        want = self.partition or (0, 1)
        got = (int(meta.get("partition", "0")), int(meta.get("partitions", "1")))
        if meta.get("format") == FORMAT and got != want:
            raise RedisFrontierDataError(
                f"{self.key('meta')!r} is partition {got[0]} of {got[1]}, but it was opened "
                f"as partition {want[0]} of {want[1]}: a crawl keeps the partition count it "
                f"started with. Set FRONTIER_REDIS_PARTITIONS={got[1]} to continue it, or "
                "start a new crawl under another FRONTIER_REDIS_KEY prefix."
            )

    def _glob(self) -> str:
        out = []
        for ch in self.prefix:
            out.append("\\" + ch if ch in "*?[]\\" else ch)
        return "".join(out)

    def server_time(self) -> float:
        """The clock of the Redis that holds this frontier (on a cluster: its node's)."""
        sec, usec = self._call("reading the server time", lambda: self._clock(
            keys=[self.key("meta")], client=self.client))
        return float(sec) + int(usec) / 1e6

    # -- adding -----------------------------------------------------------------------

    def push(self, host: str, level: int, item: bytes) -> bool:
        """Queue ``item`` for ``host`` at ``level`` (1..F, F highest); False if retired."""
        return self.push_many([(host, level, item)])[0]

    def push_many(self, entries: Iterable[tuple[str, int, bytes]]) -> list[bool]:
        """Queue many items in one atomic script call; one bool per entry."""
        return [x == 1 for x in self.push_unseen((h, lv, item, None) for h, lv, item in entries)]

    def push_unseen(
        self, entries: Iterable[tuple[str, int, bytes, tuple[str, int, bool] | None]]
    ) -> list[int]:
        """Queue items, each tested against and added to a seen set in the same atomic
        script: ``(host, level, item, seen)`` with ``seen`` None or ``(set key, member,
        test)``. Returns per entry 1 (queued), 0 (refused: retired host) or 2 (in the
        seen set already: not queued)."""
        args = self._push_args(entries)
        if not args:
            return []
        return [int(x) for x in self._run(self._push, "pushing URLs", *args)]

    def _push_args(
        self, entries: Iterable[tuple[str, int, bytes, tuple[str, int, bool] | None]],
        ending: Collection[str] = (),
    ) -> list[Any]:
        """Eight script arguments per push (see push_one in lua/prelude.lua); ``ending``: the
        hosts whose leases end in the same round."""
        args: list[Any] = []
        conns = self._connections_of
        for host, level, item, seen in entries:
            self._check_host(host)
            if not 1 <= level <= self.levels:
                raise ValueError(f"level must be in 1..{self.levels}, got {level}")
            if not isinstance(item, bytes | bytearray | memoryview):
                raise TypeError(f"items must be bytes, got {type(item).__name__}")
            end = 1 if host in ending else 0
            if seen is None:
                args += [host, level, bytes(item), "", 0, 0, conns(host), end]
            else:
                key, member, test = seen
                args += [host, level, bytes(item), key, member, 2 if test else 1, conns(host),
                         end]
        return args

    def _connections_of(self, host: str) -> int:
        """The connections ``host`` may use (1 without ``connections``)."""
        if self.connections is None:
            return 1
        conns = self.connections(host)
        if isinstance(conns, bool) or not isinstance(conns, int) or conns < 1:
            raise ValueError(f"connections({host!r}) must be an int >= 1, got {conns!r}")
        return conns

    @staticmethod
    def _check_host(host: str) -> None:
        if not isinstance(host, str) or "\0" in host:
            raise ValueError(f"host must be a string without NUL, got {host!r}")

    # -- taking -----------------------------------------------------------------------

    def pop(self) -> RedisLease | None:
        """Claim the next URL whose host may be contacted now (server time), or None.

        Expires overdue leases first (their items go back to their hosts' queues).
        """
        reply = self._run(self._claim, "claiming a URL", self.expire_batch,
                          repr(float(self.liveness)))
        self.reclaimed += int(reply[-1])
        if not reply[0]:
            return None
        _, _, ticket, host, level, item, deadline, ready_at, _ = reply
        return RedisLease(
            ticket=int(ticket),
            host=text(host),
            item=bytes(item),
            level=int(level),
            handed_at=float(reply[1]),
            deadline=float(deadline),
            ready_at=float(ready_at),
        )

    claim = pop

    # -- finishing --------------------------------------------------------------------

    def complete(
        self, lease: RedisLease, fetch_seconds: float, *, rest_at_least: float = 0.0,
        budget: int = 0, ended_ago: float = 0.0, sent: bool = True,
    ) -> Completion | None:
        """The fetch of ``lease`` ended after ``fetch_seconds``: forget the item, and the
        host rests ``max(policy.delay(fetch) - ended_ago, min_rest(host), rest_at_least)``
        from now (``ended_ago``: how long before now the answer was complete).

        ``budget``: the host's fetch budget from this worker's settings (0: unlimited,
        -1: handed back unfetched, not counted; :data:`HAND_BACK`: given back unfetched,
        its item queued again at the head of its host's queue and the host ready when it
        was for this lease; a budget set with ``scrapy frontier budget`` wins). The fetch
        that reaches it retires the host for every worker, counted in
        ``budget_hosts``/``budget_items``. ``sent=False`` (or budget :data:`UNSENT`): the
        request never reached its host: its item is done, and the host is ready again
        when it was for this lease, with no rest and its fetch time kept.

        Returns None (and changes nothing) if the lease is no longer held: it expired and
        its item was returned to the queue, so the item will be fetched again.
        """
        reply = self._run(
            self._complete, "completing a lease",
            *self._completion_args(lease, fetch_seconds, rest_at_least,
                                   budget if sent else UNSENT, ended_ago))
        if not reply[0]:
            return None
        return Completion(float(reply[1]), float(reply[2]),
                          int(reply[3]) if len(reply) > 3 else -1)

    def round(self, pushes: Iterable[tuple[str, int, bytes, tuple[str, int, bool] | None]],
              finished: Iterable[Finished], want: int, *, count_ready: bool = False,
              ahead: float = 0.0, ending: Collection[str] = ()) -> RoundReply:
        """One worker's round in one atomic script call: the pushes (as
        :meth:`push_unseen`), then the completions (as :meth:`complete`), then up to
        ``want`` claims (as :meth:`pop`), then the sizes (as :meth:`sizes`) and, if fewer
        leases than wanted were claimed or a fetch completed, the next wake-up (as
        :meth:`next_wakeup`);
        ``count_ready``: also how many hosts are ready now (``ready_hosts``).

        ``ahead``: when no host is ready now, a claim takes the host that is ready first
        within that many seconds. Its lease's ``ready_at`` is then later than its
        ``handed_at``: the worker must not fetch before ``ready_at - handed_at`` seconds
        after the reply (see :meth:`RedisLease.wait`).

        ``ending``: hosts whose leases end in this worker's round though not in this call
        (a partitioned round completes after every partition's pushes); the hosts of
        ``finished`` are counted too. A host of several connections that had nothing queued
        wakes its spare connections at the end of a lease, not at the push of its page's
        links (see lease_ended in lua/prelude.lua)."""
        done = list(finished)
        push_args = self._push_args(pushes, {f.lease.host for f in done}.union(ending))
        done_args: list[Any] = []
        for f in done:
            done_args += self._completion_args(f.lease, f.fetch_seconds, f.rest_at_least,
                                               f.budget, f.ended_ago)
        reply = self._run(
            self._round, "running a round", self.expire_batch, repr(float(self.liveness)),
            int(want), len(push_args) // 8, len(done), int(count_ready),
            repr(max(0.0, float(ahead))), *push_args, *done_args)
        at = float(reply[0])
        reclaimed = int(reply[1])
        self.reclaimed += reclaimed
        completed: list[Completion | None] = [
            Completion(at, float(r[1]), int(r[2])) if int(r[0]) else None for r in reply[3]]
        leases = [
            RedisLease(ticket=int(ticket), host=text(host), item=bytes(item), level=int(level),
                       handed_at=at, deadline=float(deadline), ready_at=float(ready_at))
            for ticket, host, level, item, deadline, ready_at in reply[4]]
        wake = reply[5]
        return RoundReply(
            [int(x) for x in reply[2]], completed, leases,
            None if wake is None else float(wake), int(reply[6]), int(reply[7]),
            int(reply[8]), reclaimed, int(reply[9]))

    def expire_leases(self, limit: int = 1000) -> list[tuple[str, bytes]]:
        """Return the items of leases past their deadline to their hosts' queues.

        The host rests as after a fetch that ran the whole lease
        (``policy.delay(lease_timeout)``, sent to the scripts with every call).
        Returns the (host, item) pairs returned (or dropped, for a retired host).
        """
        out = self._run(self._expire, "expiring leases", limit)
        return [(text(out[i]), bytes(out[i + 1])) for i in range(0, len(out), 2)]

    # -- liveness ---------------------------------------------------------------------

    def renew(self, worker: str, leases: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """A heartbeat of ``worker``: it stays among the live workers for :attr:`liveness`
        seconds, and so do its leases, given as (host, lease id) pairs (never past their
        claim + ``lease_timeout``). A lease taken back or completed meanwhile is left
        alone. Returns the pairs that were not renewed: those leases are no longer held."""
        if not self.liveness:
            raise ValueError("renew needs a frontier opened with liveness > 0")
        pairs = list(leases)
        args: list[Any] = [worker, repr(float(self.liveness))]
        for host, ticket in pairs:
            args += [host, int(ticket)]
        held = self._run(self._renew, "renewing leases", *args)
        return [pair for pair, flag in zip(pairs, held, strict=True) if not int(flag)]

    def leave(self, worker: str) -> None:
        """``worker`` closed: it is no longer counted among the live workers."""
        self._call("leaving the crawl", lambda: self.client.zrem(self.key("workers"), worker))

    def live_workers(self) -> int:
        """Workers whose last heartbeat is still within its liveness window."""
        now = repr(self.server_time())
        return int(self._call("reading the workers", lambda: self.client.zcount(
            self.key("workers"), f"({now}", "+inf")))

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

    def control(self, op: str, host: str, value: float | int = 0) -> list[Any]:
        """An operator's change (``block`` seconds or inf, ``unblock``, ``delay`` seconds,
        ``budget`` pages, ``rebudget`` pages of a per-host policy, ``retire``), atomic with
        the queues; see lua/control.lua."""
        self._check_host(host)
        arg = "inf" if isinstance(value, float) and math.isinf(value) else repr(value)
        return list(self._run(self._control, f"changing host {host!r} ({op})", op, host, arg))

    def contain(self, host: str, fetched: int, allowance: int) -> int:
        """``host`` is a crawler trap: its budget becomes its fetch count (at least
        ``fetched``) plus ``allowance``; returns it (as it was for a host contained
        already), or -1 for a host an operator released. See lua/control.lua."""
        self._check_host(host)
        return int(self._run(self._control, f"containing host {host!r}", "contain", host,
                             f"{int(fetched)} {int(allowance)}")[0])

    def traps(self) -> dict[str, str]:
        """host -> "contained" or "released"."""
        raw = self._call("reading the crawler traps",
                         lambda: self.client.hgetall(self.key("traps")))
        return {text(h): text(state) for h, state in raw.items()}

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

        first = self._call("reading lease deadlines", lambda: self.client.zrange(
            self.key("deadlines"), 0, 0, withscores=True))
        if not first:
            return None
        return max(0.0, float(first[0][1]) - self.server_time())

    def sizes(self) -> tuple[int, int, int]:
        """(URLs in front queues, URLs in back queues, leases), in one round trip."""

        def read() -> list[Any]:
            pipe = self._pipeline()
            pipe.hmget(self.key("count"), "front", "back")
            pipe.hlen(self.key("leases"))
            return pipe.execute()  # type: ignore[no-any-return]

        (front, back), leases = self._call("reading sizes", read)
        return int(front or 0), int(back or 0), int(leases)

    def activity(self) -> tuple[int, int, int, int, int, int]:
        """(front URLs, back URLs, leases, then the pushed, completed and expired counters),
        in one round trip: what changes whenever work moves."""

        def read() -> list[Any]:
            pipe = self._pipeline()
            pipe.hmget(self.key("count"), "front", "back")
            pipe.hlen(self.key("leases"))
            pipe.hmget(self.key("stats"), "pushed", "completed", "expired")
            return pipe.execute()  # type: ignore[no-any-return]

        (front, back), leases, counters = self._call("reading the sizes", read)
        pushed, completed, expired = (int(x or 0) for x in counters)
        return int(front or 0), int(back or 0), int(leases), pushed, completed, expired

    def census(self) -> SharedCensus:
        """The whole frontier's sizes and host states, in one script call."""
        (front, back, leases, active, ready, due, retired, resting_ahead, fetched,
         hold_us, with_urls, blocked) = (int(x) for x in self._run(self._census,
                                                                  "reading the census"))
        resting = ready - due  # blocked hosts included: their rest is the block
        return SharedCensus(
            queued=front + back, in_flight=leases, front=front, active=leases,
            waiting=due, resting=resting - blocked, retired=retired,
            # Hosts with a back queue, plus those resting without one (a host resting
            # with a back queue has its rest in both sorted sets).
            known=active + max(0, resting_ahead - resting) + retired,
            fetched=fetched, politeness_wait_seconds=hold_us / 1e6, queued_hosts=with_urls,
            blocked=blocked,
        )

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
        for member, rec in raw.items():
            # A connection of a host of several is "host NUL c".
            host = text(member).partition("\0")[0]
            ticket, level, handed, ready, item = bytes(rec).split(b"|", 4)
            out.append(RedisLease(int(ticket), host, item, int(level), float(handed),
                                  float(deadlines.get(member, math.nan)), float(ready)))
        return out

    def policies(self) -> dict[str, Any]:
        """The steered policy entries: key -> fields (a value that is not JSON stays as it
        is, for the workers to refuse with its key)."""
        return decode_policies(self._call("reading the steered policies",
                                          lambda: self.client.hgetall(self.key("policies"))))

    def set_policy(self, key: str, fields: dict[str, Any] | None) -> bool:
        """Set the steered entry ``key`` (None: clear it). Returns whether there was one."""
        name = self.key("policies")

        def write() -> bool:
            if fields is None:
                return bool(self.client.hdel(name, key))
            return not self.client.hset(name, key, json.dumps(fields, sort_keys=True))

        return self._call("steering a policy", write)

    def budget_stats(self) -> dict[str, int]:
        """The shared budget counters (budget_hosts, budget_items) and how many hosts are
        blocked now, retired (by hand or for failures) and over budget: one round trip."""
        names = ("budget_hosts", "budget_items")

        def read() -> list[Any]:
            pipe = self._pipeline()
            pipe.hmget(self.key("stats"), names)
            pipe.scard(self.key("retired"))
            pipe.scard(self.key("capped"))
            pipe.zrange(self.key("blocked"), 0, -1, withscores=True)
            return pipe.execute()  # type: ignore[no-any-return]

        raw, retired, capped, blocked = self._call("reading stats", read)
        now = self.server_time()
        out = {n: int(v) for n, v in zip(names, raw, strict=True) if v is not None}
        out["blocked"] = sum(1 for _, until in blocked if float(until) > now)
        out["retired"] = int(retired) - int(capped)
        out["over_budget"] = int(capped)
        return out

    def stats(self) -> dict[str, int]:
        raw = self._call("reading stats", lambda: self.client.hgetall(self.key("stats")))
        return {text(k): int(v) for k, v in raw.items()}

    # -- the quarantine -------------------------------------------------------------

    def quarantine(self, entries: list[Quarantined]) -> None:
        """Keep items that cannot be rebuilt, to list and requeue later (newest last)."""
        if entries:
            self._call("setting requests aside", lambda: self.client.rpush(
                self.key("quarantine"), *(e.encode() for e in entries)))

    def quarantine_size(self) -> int:
        return int(self._call("counting the quarantine",
                              lambda: self.client.llen(self.key("quarantine"))))

    def quarantined(self, start: int = 0, stop: int = -1) -> list[tuple[bytes, Quarantined]]:
        """Entries ``start..stop`` (inclusive) of the quarantine, raw and decoded."""
        raw = self._call("reading the quarantine", lambda: self.client.lrange(
            self.key("quarantine"), start, stop))
        return [(bytes(e), Quarantined.decode(e)) for e in raw]

    def unquarantine(self, raw: bytes) -> bool:
        """Remove one entry (as :meth:`quarantined` gave it); False if it was gone."""
        return bool(self._call("clearing the quarantine", lambda: self.client.lrem(
            self.key("quarantine"), 1, raw)))

    def iter_queued(self) -> Iterator[tuple[str, int, bytes]]:
        """Every queued (host, level, item): front queues, then back queues (not atomic)."""
        for level in range(1, self.levels + 1):
            fkey = self.key(f"f:{level}")
            for entry in self._call("listing", partial(self.client.lrange, fkey, 0, -1)):
                host, _, item = bytes(entry).partition(b"\0")
                yield host.decode(), level, item
        active = self._call("listing", lambda: self.client.hkeys(self.key("active")))
        for host in active:
            h = text(host)
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
