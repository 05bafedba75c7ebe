"""The page history in Redis, shared by the workers of a distributed crawl.

Keys under one prefix ``H`` (default ``<spider>:history:``)::

    H meta     HASH   format="scrapy-frontier/redis-history", version
    H pages    HASH   fingerprint -> the page record as JSON (PageRecord.to_json)
    H due      ZSET   fingerprint -> eligible time (pages not retired)
    H weight   ZSET   fingerprint -> quality, for eviction
    H trust    HASH   "<host>|agreed", "<host>|disagreed" -> checks of its change hints
    H quarantine HASH fingerprint -> JSON {"data", "error", "at"}: records that cannot be
                      read, set aside when met (scrapy frontier quarantine)

The ``due`` score is the authority on when a page may be recrawled: taking due
pages (:meth:`RedisHistoryStore.take_due`) is one Lua script that moves their
scores past the due hold, so two workers never hand out the same page. Times
are the workers' wall clocks (a page's due time is days away; seconds of skew
do not matter here, unlike politeness, which runs on the Redis server's clock).

Writes are buffered and sent in one pipeline by :meth:`flush`; the Redis
scheduler calls every method from its I/O thread only.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from scrapy_frontier.backends.redis.connection import guard, text
from scrapy_frontier.backends.redis.lua import lua_source
from scrapy_frontier.core.history import (
    QUARANTINE_LOGGED,
    PageRecord,
    quarantine_message,
    split_pending,
)
from scrapy_frontier.errors import RedisFrontierDataError

logger = logging.getLogger("scrapy_frontier.history")

FORMAT = "scrapy-frontier/redis-history"
VERSION = "1"



def trust_counts(raw: dict[Any, Any]) -> dict[str, tuple[int, int]]:
    """The ``H trust`` hash as (agreed, disagreed) per host."""
    out: dict[str, list[int]] = {}
    for field, value in raw.items():
        host, _, which = text(field).rpartition("|")
        out.setdefault(host, [0, 0])[which == "disagreed"] += int(value)
    return {host: (a, d) for host, (a, d) in out.items()}


class RedisHistoryStore:
    """A :class:`~scrapy_frontier.core.history.HistoryStore` in Redis."""

    def __init__(self, client: Any, prefix: str,
                 check_request: Callable[[str, bytes | None], str | None] | None = None) -> None:
        self.client = client
        self.prefix = prefix
        #: Refuses a record whose kept request fails the trust check (codec.RowTrust).
        self.check_request = check_request
        self._pending: dict[int, PageRecord] = {}
        self._trust: dict[str, tuple[int, int]] = {}
        # Records read ahead by prefetch, each handed out once by get.
        self._read: dict[int, PageRecord | None] = {}
        self._take_due = client.register_script(lua_source("history_take_due"))
        self._set_aside = client.register_script(lua_source("history_quarantine"))
        #: Records this process moved to the quarantine (frontier/history/quarantined).
        self.quarantined = 0
        self.guard("opening the page history", self._check_meta)

    def key(self, name: str) -> str:
        return self.prefix + name

    def guard(self, doing: str, fn: Any) -> Any:
        return guard(self.client, self.prefix, doing, fn)

    def _check_meta(self) -> None:
        meta = self.key("meta")
        kind = text(self.client.type(meta))
        if kind not in ("none", "hash"):
            raise RedisFrontierDataError(
                f"Redis key {meta!r} is a {kind}, not the page history's marker: pick another "
                "FRONTIER_REDIS_HISTORY_KEY, or move that key away (RENAME)."
            )
        self.client.hsetnx(meta, "format", FORMAT)
        self.client.hsetnx(meta, "version", VERSION)
        got = {text(k): text(v) for k, v in self.client.hgetall(meta).items()}
        if got.get("format") != FORMAT or got.get("version") != VERSION:
            raise RedisFrontierDataError(
                f"{meta!r} says format {got.get('format')!r} version {got.get('version')!r}; "
                f"this scrapy-frontier writes {FORMAT!r} version {VERSION}: pick another "
                "FRONTIER_REDIS_HISTORY_KEY; nothing was changed under this one."
            )

    def _decode(self, fp: int, raw: Any) -> PageRecord | None:
        """The record, or None for one that cannot be read (set aside, see the module)."""
        try:
            return PageRecord.from_json(fp, text(raw), self.check_request)
        except ValueError as exc:
            self._quarantine(fp, raw, str(exc))
            return None

    def _quarantine(self, fp: int, raw: Any, error: str) -> None:
        data = raw if isinstance(raw, bytes) else str(raw).encode()
        entry = json.dumps({"data": data.decode("utf-8", "replace"), "error": error,
                            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        keys = [self.key("pages"), self.key("due"), self.key("weight"), self.key("quarantine")]
        moved = self.guard("setting an unreadable page record aside",
                           lambda: self._set_aside(keys=keys, args=[fp, data, entry]))
        if not moved:
            return  # rewritten by a worker since it was read, or set aside by another
        self.quarantined += 1
        if self.quarantined <= QUARANTINE_LOGGED:
            logger.error("%s", quarantine_message(
                f"Redis {self.key('pages')!r}", fp, data, error, self.quarantined,
                "frontier/history/quarantined"))

    def quarantine_size(self) -> int:
        """Records in the quarantine, from this run and earlier ones."""
        return int(self.guard("counting the history's quarantine",
                              lambda: self.client.hlen(self.key("quarantine"))))

    # -- the store -------------------------------------------------------------------------

    def get(self, fp: int) -> PageRecord | None:
        pending = self._pending.get(fp)
        if pending is not None:
            return PageRecord.from_json(fp, pending.to_json())
        if fp in self._read:
            return self._read.pop(fp)
        return self._read_records([fp]).get(fp)

    def get_many(self, fps: Sequence[int]) -> dict[int, PageRecord]:
        found, wanted = split_pending(self._pending, fps)
        if wanted:
            found.update(self._read_records(wanted))
        return found

    def prefetch(self, fps: Sequence[int]) -> None:
        """Read the records of ``fps`` together, for the next :meth:`get` of each (the
        I/O round reads its visits' records in one round trip, then records each visit)."""
        _, wanted = split_pending(self._pending, fps)
        if not wanted:
            return
        got = self._read_records(wanted)
        self._read = {fp: got.get(fp) for fp in wanted}

    def _read_records(self, fps: list[int]) -> dict[int, PageRecord]:
        """The records of ``fps`` in Redis, with their due holds: two commands in one round
        trip, however many pages."""

        def read() -> Any:
            pipe = self.client.pipeline(transaction=False)
            pipe.hmget(self.key("pages"), fps)
            pipe.zmscore(self.key("due"), fps)
            return pipe.execute()

        raws, scores = self.guard("reading page records", read)
        found: dict[int, PageRecord] = {}
        for fp, raw, score in zip(fps, raws, scores, strict=True):
            record = None if raw is None else self._decode(fp, raw)
            if record is None:
                continue
            if score is not None and float(score) > record.eligible:
                record.held_until = float(score)  # claimed by a worker
            found[fp] = record
        return found

    def put(self, record: PageRecord) -> None:
        self._read.pop(record.fp, None)
        self._pending[record.fp] = record

    def take_due(self, until: float, limit: int, hold_until: float) -> list[PageRecord]:
        """Up to ``limit`` pages eligible by ``until``, claimed until ``hold_until`` (atomic)."""
        self.flush()
        reply = self.guard(
            "taking due pages",
            lambda: self._take_due(keys=[self.key("due"), self.key("pages")],
                                args=[repr(float(until)), limit, repr(float(hold_until))]),
        )
        out = []
        for i in range(0, len(reply), 2):
            fp, raw = int(reply[i]), reply[i + 1]
            record = self._decode(fp, raw) if raw else None
            if record is not None:
                record.held_until = hold_until
                out.append(record)
        return out

    def due(self, after: tuple[float, int], until: float, limit: int) -> list[PageRecord]:
        # Only for callers without take_due; the Recrawler claims through take_due.
        self.flush()
        rows = self.guard("reading due pages", lambda: self.client.zrangebyscore(
            self.key("due"), after[0], until, start=0, num=limit + 1000, withscores=True))
        keys = sorted((float(score), int(member)) for member, score in rows)
        out = []
        for key in keys:
            if key <= after:
                continue
            record = self.get(key[1])
            if record is not None:
                out.append(record)
            if len(out) >= limit:
                break
        return out

    def count_due(self, until: float, limit: int | None = None) -> int:
        """Pages not retired with an eligible time <= ``until`` (exact: ZCOUNT is
        O(log n), ``limit`` is only a hint)."""
        self.flush()
        return int(self.guard("counting due pages", lambda: self.client.zcount(
            self.key("due"), "-inf", repr(float(until)))))

    def next_due(self) -> float | None:
        self.flush()
        rows = self.guard("reading due pages",
                           lambda: self.client.zrange(self.key("due"), 0, 0, withscores=True))
        return float(rows[0][1]) if rows else None

    def evict(self, keep: int) -> int:
        self.flush()
        extra = len(self) - keep
        if extra <= 0:
            return 0
        fps = self.guard("evicting page records",
                          lambda: self.client.zrange(self.key("weight"), 0, extra - 1))
        if not fps:
            return 0

        def delete() -> Any:
            pipe = self.client.pipeline(transaction=True)
            pipe.hdel(self.key("pages"), *fps)
            pipe.zrem(self.key("due"), *fps)
            pipe.zrem(self.key("weight"), *fps)
            return pipe.execute()

        self.guard("evicting page records", delete)
        return len(fps)

    def scan(self) -> Iterator[PageRecord]:
        self.flush()
        bad: list[tuple[int, Any, str]] = []
        fields = self.client.hscan_iter(self.key("pages"), count=1000)
        while (item := self.guard("reading the page history",
                                  lambda: next(fields, None))) is not None:
            field, raw = item
            try:
                record = PageRecord.from_json(int(field), text(raw), self.check_request)
            except ValueError as exc:
                bad.append((int(field), raw, str(exc)))  # set aside once the scan is done
                continue
            if record.retired is None:
                yield record
        for fp, raw, error in bad:
            self._quarantine(fp, raw, error)

    def __len__(self) -> int:
        self.flush()
        return int(self.guard("counting page records",
                               lambda: self.client.hlen(self.key("pages"))))

    def unsaved(self) -> int:
        return len(self._pending)

    def load_trust(self) -> dict[str, tuple[int, int]]:
        return trust_counts(self.guard("reading the hosts' claim checks",
                                       lambda: self.client.hgetall(self.key("trust"))))

    def add_trust(self, host: str, agreed: int, disagreed: int) -> None:
        a, d = self._trust.get(host, (0, 0))
        self._trust[host] = (a + agreed, d + disagreed)

    def sync(self) -> None:
        """Flush; what Redis keeps across a failure is its persistence setting's business."""
        self.flush()

    def flush(self) -> None:
        self._read.clear()  # read ahead for this batch of events only
        if not self._pending and not self._trust:
            return
        # Taken whole in one step: a record put meanwhile (from another thread) goes to
        # the next flush instead of being cleared unwritten.
        taken, self._pending = self._pending, {}
        trust, self._trust = self._trust, {}
        batch = list(taken.values())

        def write() -> Any:
            pipe = self.client.pipeline(transaction=False)
            for host, (a, d) in trust.items():
                if a:
                    pipe.hincrby(self.key("trust"), f"{host}|agreed", a)
                if d:
                    pipe.hincrby(self.key("trust"), f"{host}|disagreed", d)
            # One command per key for the whole batch, not three per page.
            if batch:
                pipe.hset(self.key("pages"), mapping={r.fp: r.to_json() for r in batch})
                pipe.zadd(self.key("weight"), {str(r.fp): r.weight for r in batch})
            due = {str(r.fp): r.eligible for r in batch if r.retired is None}
            if due:
                pipe.zadd(self.key("due"), due)
            gone = [r.fp for r in batch if r.retired is not None]
            if gone:
                pipe.zrem(self.key("due"), *gone)
            return pipe.execute()

        try:
            self.guard(f"writing {len(batch)} page records", write)
        except BaseException:
            for fp, record in taken.items():  # kept for the next try; newer ones win
                self._pending.setdefault(fp, record)
            for host, (a, d) in trust.items():
                self.add_trust(host, a, d)
            raise

    def marks(self) -> int:
        """How many times ``scrapy frontier recrawl`` marked pages due (workers compare)."""
        return int(self.guard("reading the recrawl marks",
                              lambda: self.client.get(self.key("marks"))) or 0)

    def marked(self) -> None:
        """Tell the workers that pages were marked due (they read the feed again)."""
        self.guard("counting a recrawl mark", lambda: self.client.incr(self.key("marks")))

    def close(self) -> None:
        self.flush()
