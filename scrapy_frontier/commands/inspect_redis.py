"""The read side of ``scrapy frontier`` on the Redis backend.

Reads only (HGETALL, ZRANGE, LRANGE, SCARD...), pipelined, never a script or a write: the
workers of the crawl are not held up by more than the reads themselves. Times come from
the Redis server's clock (``TIME``), as the frontier's rests do. A frontier whose keys
are not there is an error, never created.
"""

from __future__ import annotations

import math
import time
from typing import Any

from scrapy_frontier.backends.redis.connection import describe, guard, is_cluster, text
from scrapy_frontier.backends.redis.frontier import FORMAT, VERSION, decode_policies, read_pace
from scrapy_frontier.backends.redis.partitions import Layout, partition_of
from scrapy_frontier.backends.redis.seen import RedisSeenSet
from scrapy_frontier.commands import shapes
from scrapy_frontier.commands.shapes import HostView, HostViews
from scrapy_frontier.core.history import readable_record
from scrapy_frontier.errors import FrontierCommandError
from scrapy_frontier.settings import FrontierConfig

#: Front-queue entries read per LRANGE, and at most in all (per call of ``views``).
CHUNK = 10_000
FRONT_CAP = 2_000_000


def _floats(pairs: list[tuple[bytes, float]]) -> dict[str, float]:
    return {text(member): float(score) for member, score in pairs}


def _host_of(member: bytes | str) -> str:
    """The host of a member of ``ready`` or ``leases`` (a connection of a host of several
    is "host NUL c")."""
    return text(member).partition("\0")[0]


def _leases_per_host(members: list[bytes]) -> dict[str, int]:
    out: dict[str, int] = {}
    for member in members:
        host = _host_of(member)
        out[host] = out.get(host, 0) + 1
    return out


def _first_ready(pairs: list[tuple[bytes, float]]) -> dict[str, float]:
    """Each host's earliest ready connection."""
    out: dict[str, float] = {}
    for member, score in pairs:
        host = _host_of(member)
        out[host] = min(out.get(host, math.inf), float(score))
    return out


class RedisInspector:
    """A read-only look at one spider's frontier, seen set and page history in Redis, over
    all of its partitions (see backends/redis/partitions.py)."""

    backend = "redis"
    #: Whether workers run is not known from Redis: a command applies to the keys at once.
    running = True

    def __init__(self, config: FrontierConfig, client: Any, spider: str) -> None:
        self.config = config
        self.client = client
        self.cluster = is_cluster(client)
        layout = self.layout = Layout(*config.redis.keys_for(spider),
                                      count=config.redis.partitions, tagged=config.redis.tagged)
        self.count = layout.count
        #: Partition 0's prefixes (the only ones of an unpartitioned crawl).
        self.prefix = layout.frontier_prefix(0)
        self.seen_prefix = layout.seen_prefix(0)
        self.history_prefix = layout.history_prefix(0)
        meta = self._read("reading the frontier's meta key",
                          lambda: client.hgetall(self.prefix + "meta"))
        meta = {text(k): text(v) for k, v in meta.items()}
        if not meta:
            other = self._read("reading the frontier's meta key",
                               lambda: client.exists(layout.other_layout()))
            hint = (f" Its keys are there in the other layout ({layout.other_layout()!r}): "
                    "pass the crawl's FRONTIER_REDIS_PARTITIONS and FRONTIER_REDIS_CLUSTER "
                    "(-s NAME=VALUE)." if other else "")
            raise FrontierCommandError(
                f"no frontier under {self.prefix!r} on {describe(client)}: no crawl of spider "
                f"{spider!r} has run there. Check --spider, FRONTIER_REDIS_KEY and REDIS_URL."
                f"{hint} Nothing was created.")
        if int(meta.get("partitions", "1")) != self.count:
            raise FrontierCommandError(
                f"the crawl of spider {spider!r} has {meta.get('partitions', '1')} "
                f"partition(s), not {self.count}: pass -s FRONTIER_REDIS_PARTITIONS="
                f"{meta.get('partitions', '1')}. Nothing was changed.")
        if meta.get("format") != FORMAT or meta.get("version") != str(VERSION):
            raise FrontierCommandError(
                f"{self.prefix}meta says format {meta.get('format')!r} version "
                f"{meta.get('version')!r}; this scrapy-frontier reads {FORMAT!r} version "
                f"{VERSION}. Use the scrapy-frontier release that wrote it. Nothing was changed.")
        self.levels = int(meta.get("levels", self.config.front_queues))
        self.spider = meta.get("spider", spider)
        steered = self._read("reading the steered policies",
                             lambda: client.hgetall(self.prefix + "policies"))
        config.host_policies.steer(decode_policies(steered))  # shown in force by hosts

    def _read(self, doing: str, fn: Any) -> Any:
        return guard(self.client, self.prefix, doing, fn)

    def close(self) -> None:
        self.client.close()

    def k(self, name: str, partition: int = 0) -> str:
        return self.layout.frontier_prefix(partition) + name

    def partition(self, host: str) -> int:
        return partition_of(host, self.count)

    def frontier(self, partition: int) -> Any:
        """Partition ``partition``'s frontier, opened with the crawl's shape (for writes)."""
        from scrapy_frontier.backends.redis.frontier import RedisFrontier

        config = self.config
        return RedisFrontier(
            self.client, self.layout.frontier_prefix(partition), front_queues=self.levels,
            back_queues=config.back_queues, back_queues_max=config.back_queues_max,
            policy=config.policy, lease_timeout=config.lease_timeout,
            partition=(partition, self.count) if self.layout.tagged else None)

    def history(self) -> Any:
        """The crawl's page history over its partitions (for writes)."""
        from scrapy_frontier.backends.redis.partitions import open_history

        return open_history(self.client, self.layout)

    def server_time(self) -> float:
        sec, usec = self._read("reading the server time", self.client.time)
        return float(sec) + int(usec) / 1e6

    # -- hosts -------------------------------------------------------------------------

    def _snapshot(self) -> dict[str, Any]:
        """Every partition's host state, merged (a host is in one partition)."""
        merged: dict[str, Any] = {}
        for i in range(self.count):
            snap = self._partition_snapshot(i)
            if not merged:
                merged = snap
                continue
            for name, value in snap.items():
                if name == "count":
                    for field, n in value.items():
                        merged[name][field] = merged[name].get(field, 0) + n
                elif isinstance(value, dict | set):
                    merged[name].update(value)
        return merged

    def _partition_snapshot(self, i: int) -> dict[str, Any]:
        def k(name: str) -> str:
            return self.k(name, i)

        def read() -> list[Any]:
            # One consistent view (on a cluster, a pipeline to the partition's node).
            pipe = self.client.pipeline(transaction=not self.cluster)
            if not self.cluster:
                pipe.time()
            pipe.hgetall(k("count"))
            pipe.hgetall(k("active"))
            pipe.hkeys(k("leases"))
            pipe.zrange(k("ready"), 0, -1, withscores=True)
            pipe.zrange(k("rest"), 0, -1, withscores=True)
            pipe.zrange(k("blocked"), 0, -1, withscores=True)
            pipe.hgetall(k("fetch"))
            pipe.hgetall(k("minrest"))
            pipe.hgetall(k("delay"))
            pipe.smembers(k("retired"))
            pipe.smembers(k("capped"))
            pipe.hgetall(k("budgets"))
            pipe.hgetall(k("fetched"))
            pipe.hgetall(k("traps"))
            out = pipe.execute()
            if self.cluster:
                return [self.client.time(), *out]
            return out  # type: ignore[no-any-return]

        (sec, usec), count, active, leases, ready, rest, blocked, fetch, minrest, delay, \
            retired, capped, budgets, fetched, traps = self._read("reading the frontier", read)
        return {
            "now": sec + usec / 1e6,
            "count": {text(a): int(b) for a, b in count.items()},
            "active": {text(a): int(b) for a, b in active.items()},
            "leases": _leases_per_host(leases),
            "ready": _first_ready(ready), "rest": _floats(rest), "blocked": _floats(blocked),
            "fetch": {text(a): read_pace(b) for a, b in fetch.items()},
            "minrest": {text(a): float(b) for a, b in minrest.items()},
            "delay": {text(a): float(b) for a, b in delay.items()},
            "retired": {text(h) for h in retired}, "capped": {text(h) for h in capped},
            "budgets": {text(a): int(b) for a, b in budgets.items()},
            "fetched": {text(a): int(b) for a, b in fetched.items()},
            "traps": {text(a): text(b) for a, b in traps.items()},
        }

    def _front_hosts(self) -> dict[str, int]:
        """URLs per host in the front queues (reads at most FRONT_CAP entries)."""
        out: dict[str, int] = {}
        read = 0
        for i, level in ((i, lv) for i in range(self.count) for lv in range(1, self.levels + 1)):
            key = self.k(f"f:{level}", i)
            start = 0
            while read < FRONT_CAP:
                chunk = self._read("reading a front queue",
                                   lambda key=key, start=start: self.client.lrange(
                                       key, start, start + CHUNK - 1))
                for entry in chunk:
                    host = bytes(entry).partition(b"\0")[0].decode()
                    out[host] = out.get(host, 0) + 1
                read += len(chunk)
                start += CHUNK
                if len(chunk) < CHUNK:
                    break
        return out

    def views(self) -> tuple[dict[str, HostView], int, dict[str, Any]]:
        snap = self._snapshot()
        now = snap["now"]
        views = HostViews()

        for host, n in self._front_hosts().items():
            views[host].front = n
        for host, n in snap["active"].items():
            v = views[host]
            v.back_queue = True
            v.back = n
        for host, n in snap["leases"].items():
            views[host].in_flight = n
        # A rest that has ended stays in its sorted set until the next claim purges it:
        # its host is not resting any more.
        rests = {host: t for host, t in snap["rest"].items() if t > now}
        for host, t in {**rests, **snap["ready"]}.items():
            v = views[host]
            if not math.isinf(t):
                v.next_contact_in = max(v.next_contact_in or 0.0, t - now)
        # Each host's rest as the crawl's policy gave it, kept with its last fetch.
        for host, (f, pace) in snap["fetch"].items():
            v = views[host]
            v.last_fetch_s = f
            v.rest_s = pace
        for name in ("minrest", "delay"):
            for host, d in snap[name].items():
                v = views[host]
                v.crawl_delay = max(v.crawl_delay or 0.0, d)
                v.rest_s = max(v.rest_s or 0.0, d)
        for host, until in snap["blocked"].items():
            if until > now:
                views[host].blocked_for = until - now
        for host in snap["retired"]:
            views[host].retired = "budget" if host in snap["capped"] else "retired"
        shapes.add_hints(views, self._hint_checks())
        return views, len(views), snap

    def _hint_checks(self) -> dict[str, tuple[int, int]]:
        from scrapy_frontier.backends.redis.history import trust_counts

        out: dict[str, tuple[int, int]] = {}
        for i in range(self.count):
            key = self.layout.history_prefix(i) + "trust"
            out.update(trust_counts(self._read("reading the hosts' claim checks",
                                               lambda key=key: self.client.hgetall(key))))
        return out

    def notes(self, views: dict[str, HostView], snap: dict[str, Any]) -> dict[str, str]:
        notes: dict[str, str] = {}
        for host, v in views.items():
            budget = snap["budgets"].get(host, self.config.budget_for(host))
            fetched = snap["fetched"].get(host, 0)
            parts = []
            if v.retired == "budget":
                parts.append(f"budget {fetched}/{budget}" if budget
                             else f"budget reached at {fetched}")
            elif budget:
                parts.append(f"{fetched}/{budget} of budget")
            trap = snap["traps"].get(host)
            if trap in shapes.TRAP_NOTES:
                parts.append(shapes.TRAP_NOTES[trap])
            policy = self.config.host_policies.note(host)
            if policy is not None:
                parts.append(policy)
            if parts:
                notes[host] = ", ".join(parts)
        return notes

    # -- seen set and history ----------------------------------------------------------

    def _seen_count(self) -> int:
        return sum(self._partition_seen_count(self.layout.seen_prefix(i))
                   for i in range(self.count))

    def _partition_seen_count(self, seen_prefix: str) -> int:
        bits = self._read("reading the seen set", lambda: self.client.hget(
            seen_prefix + "meta", "bits"))
        if bits is None:
            return 0
        n = 1 << int(bits)

        def count() -> int:
            total = 0
            for first in range(0, n, 4096):
                pipe = self.client.pipeline(transaction=False)
                for b in range(first, min(n, first + 4096)):
                    pipe.scard(f"{seen_prefix}{b:x}")
                total += sum(pipe.execute())
            return total

        return int(self._read("counting the seen set", count))

    def _history_counts(self) -> tuple[int, int]:
        pages = due = 0
        for i in range(self.count):
            h = self.layout.history_prefix(i)

            def read(h: str = h) -> list[Any]:
                pipe = self.client.pipeline(transaction=False)
                pipe.hlen(h + "pages")
                pipe.zcount(h + "due", "-inf", time.time())  # the history runs on wall clocks
                return pipe.execute()  # type: ignore[no-any-return]

            n, d = self._read("reading the page history", read)
            pages, due = pages + int(n), due + int(d)
        return pages, due

    # -- the subcommands -------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        seen = self._seen_count()  # first: see SQLiteInspector.status
        pages, due = self._history_counts()
        views, known, snap = self.views()
        count = snap["count"]
        return shapes.status(
            self.backend, count.get("front", 0) + count.get("back", 0),
            sum(snap["leases"].values()),
            shapes.host_counts(list(views.values()), known), seen, pages, due)

    def hosts(self, limit: int, sort: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        views, _, snap = self.views()
        chosen = shapes.sort_hosts(list(views.values()), sort, limit)
        return [shapes.host_row(v) for v in chosen], self.notes(views, snap)

    def known_host(self, host: str) -> bool:
        views, _, snap = self.views()
        return host in views or host in snap["budgets"] or host in snap["fetched"]

    def host_view(self, host: str) -> HostView | None:
        return self.views()[0].get(host)

    def url(self, url: str, host: str, fp: int) -> dict[str, Any]:
        client = self.client
        seen = False
        seen_prefix = self.layout.seen_prefix(self.partition(host))
        history_prefix = self.layout.history_prefix(fp % self.count)
        bits = self._read("reading the seen set",
                          lambda: client.hget(seen_prefix + "meta", "bits"))
        if bits is not None:
            probe = RedisSeenSet.__new__(RedisSeenSet)  # no setup: it would write the meta key
            probe.bits = int(bits)
            probe.prefix = seen_prefix
            key, member = probe.bucket(fp)
            seen = bool(self._read("reading the seen set",
                                   lambda: client.sismember(key, member)))
        queued = self._queued(host, url, fp)
        raw = self._read("reading the page history",
                         lambda: client.hget(history_prefix + "pages", fp))
        record = None if raw is None else readable_record(fp, text(raw))
        return shapes.url(url, host, seen, queued, record, self.config.recrawl.predictor)

    def _queued(self, host: str, url: str, fp: int) -> bool:
        from scrapy_frontier.codec import saved_url

        def matches(data: bytes) -> bool:
            # Entries are 8 bytes of fingerprint, then the request.
            return data[:8] == fp.to_bytes(8, "big", signed=True) or saved_url(data[8:]) == url

        part = self.partition(host)
        for level in range(1, self.levels + 1):
            items = self._read("reading a back queue", lambda level=level: self.client.lrange(
                self.k(f"b:{level}:{host}", part), 0, -1))
            if any(matches(bytes(i)) for i in items):
                return True
        prefix = host.encode() + b"\0"
        for level in range(1, self.levels + 1):
            start = 0
            while start < FRONT_CAP:
                chunk = self._read("reading a front queue",
                                   lambda level=level, start=start: self.client.lrange(
                                       self.k(f"f:{level}", part), start, start + CHUNK - 1))
                for entry in chunk:
                    e = bytes(entry)
                    if e.startswith(prefix) and matches(e[len(prefix):]):
                        return True
                start += CHUNK
                if len(chunk) < CHUNK:
                    break
        return False

    def due(self, limit: int) -> list[dict[str, Any]]:
        """The ``limit`` pages due first, over every history partition."""
        found: list[tuple[float, Any, Any]] = []
        for i in range(self.count):
            h = self.layout.history_prefix(i)
            first = self._read("reading the page history", lambda h=h: self.client.zrange(
                h + "due", 0, limit - 1, withscores=True))
            if not first:
                continue
            fps = [fp for fp, _ in first]
            raws = self._read("reading the page history",
                              lambda h=h, fps=fps: self.client.hmget(h + "pages", fps))
            found += [(float(score), fp, raw)
                      for (fp, score), raw in zip(first, raws, strict=True) if raw is not None]
        found.sort(key=lambda row: row[0])
        now = time.time()
        records = (readable_record(int(fp), text(raw)) for _, fp, raw in found[:limit])
        return [shapes.due_row(r, now) for r in records if r is not None]
