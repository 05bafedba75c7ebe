"""``scrapy frontier quarantine``: what a crawl set aside, put back, or cleared.

A crawl sets aside a queued request it cannot rebuild (its meta no longer unpickles, its
callback is gone) and a page record it cannot read, so that one bad entry never stops a
run. This lists them (``quarantine``), puts them back once the spider or the release can
read them (``--requeue``: requests go back to the front queues, bypassing the dupe filter;
page records go back to the history, due at once), or clears them (``--drop``).

``--requeue`` refuses what fails the trust check (:class:`~scrapy_frontier.codec.RowTrust`,
docs/security.rst): a request, or a page record's kept request, that is sealed with no key
of ``FRONTIER_SIGNING_KEYS``, is not sealed where rows must be, or (read without a seal)
names a class outside the plain values. It stays in the quarantine; nothing of it runs.

SQLite: the crawl's files are written by the crawl alone, so ``--requeue`` and ``--drop``
take the files' locks and refuse while a crawl runs. Redis: every change is one command on
the shared keys, safe beside running workers; an entry is removed only after it is queued
again, so a failure in between leaves a duplicate, never a loss.
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from scrapy_frontier.backends.sqlite.files import exposed
from scrapy_frontier.backends.sqlite.history import STORE_NAME as HISTORY_FILE
from scrapy_frontier.backends.sqlite.lock import FileLock
from scrapy_frontier.codec import RowTrust, saved_url
from scrapy_frontier.core.history import record_url
from scrapy_frontier.errors import FrontierCommandError

ACTIONS = ("list", "requeue", "drop")
#: The error shown for a history quarantine entry that no worker wrote.
DAMAGED_RECORD = "a damaged entry that no worker wrote"


def _refused(path: Path, problem: str, advice: str) -> Exception:
    return FrontierCommandError(f"{path} {problem}. {advice}")


def _request_row(url: str | None, host: str, level: int, error: str, at: str) -> dict[str, Any]:
    return {"url": url, "host": host, "level": level, "error": error, "at": at}


def _record_row(fp: int | None, data: Any, error: str, at: str) -> dict[str, Any]:
    return {"fp": fp, "url": record_url(data if isinstance(data, str | bytes) else str(data)),
            "error": error, "at": at}


def _record_entry(raw: Any) -> dict[str, str] | None:
    """A history quarantine entry's fields (data, error, at), or None for one that no
    worker wrote (Redis clients may write it)."""
    try:
        info = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(info, dict) or not all(
            isinstance(info.get(k, ""), str) for k in ("data", "error", "at")):
        return None
    return {k: info.get(k, "") for k in ("data", "error", "at")}


def _fp(field: Any) -> int | None:
    try:
        return int(field)
    except ValueError:
        return None


def _record_refused(data: Any, trust: RowTrust) -> str | None:
    """Why a quarantined page record's kept request fails the trust check, or None (also
    for a record too damaged to show one: it goes back as it is, for a release to read)."""
    try:
        kept = json.loads(data).get("rq")
        raw = None if kept is None else base64.b64decode(kept, validate=True)
    except (TypeError, ValueError, AttributeError, binascii.Error):
        return None
    return None if raw is None else trust.check(raw)


def _refusals(done: str, requests: int, records: int) -> str:
    if requests or records:
        done += (f"; {requests} requests and {records} page records stay in the quarantine: "
                 "they fail the trust check (docs/security.rst), and nothing of them is run")
    return done


def result(action: str, requests: list[dict[str, Any]], records: list[dict[str, Any]],
           counts: tuple[int, int], done: str) -> dict[str, Any]:
    return {"action": action, "requests": requests, "records": records,
            "total": {"requests": counts[0], "records": counts[1]}, "applied": done}


# -- SQLite -------------------------------------------------------------------------------


def _has_table(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute(
        "SELECT COUNT(*) FROM sqlite_master WHERE name = 'quarantine'").fetchone()[0])


def sqlite_quarantine(inspector: Any, action: str, limit: int) -> dict[str, Any]:
    if action == "list":
        return _sqlite_list(inspector, limit)
    if inspector.running:
        raise FrontierCommandError(
            f"the crawl in {inspector.directory} is running: its files are written by it "
            f"alone. Stop it (Ctrl-C once), then run scrapy frontier quarantine --{action} "
            "again. Nothing was changed.")
    paths = [inspector.path]
    if inspector.history is not None:
        paths.append(inspector.directory / HISTORY_FILE)
    listed = _sqlite_list(inspector, limit)
    trust = RowTrust.of(inspector.config.signing_keys, private=exposed(
        inspector.directory, (inspector.path.name, HISTORY_FILE)) is None)
    with ExitStack() as stack:
        for path in paths:  # a crawl that starts meanwhile waits for them
            stack.callback(FileLock(path, _refused).release)
        requests, bad_requests = _sqlite_move_requests(inspector.path, action, trust)
        records, kept, bad_records = (_sqlite_move_records(paths[1], action, trust)
                                      if len(paths) > 1 else (0, 0, 0))
    if action == "drop":
        done = f"{requests} requests and {records} page records dropped"
    else:
        done = (f"{requests} requests queued again and {records} page records back in the "
                "history (due now), for the next run of the crawl")
        if kept:
            done += (f"; {kept} page records stay in the quarantine: the page was fetched "
                     "again since, and its new record is kept")
        done = _refusals(done, bad_requests, bad_records)
    return result(action, listed["requests"], listed["records"],
                  (listed["total"]["requests"], listed["total"]["records"]), done)


def _sqlite_list(inspector: Any, limit: int) -> dict[str, Any]:
    requests: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    counts = [0, 0]
    if _has_table(inspector.db):
        counts[0] = inspector.db.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
        for host, level, data, error, at in inspector.db.execute(
                "SELECT host, level, data, error, at FROM quarantine ORDER BY rowid LIMIT ?",
                (limit,)):
            url = None if data is None else saved_url(bytes(data))
            requests.append(_request_row(url, host, level, error, at))
    history = inspector.history
    if history is not None and _has_table(history):
        counts[1] = history.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
        for fp, data, error, at in history.execute(
                "SELECT fp, data, error, at FROM quarantine ORDER BY at, fp LIMIT ?", (limit,)):
            records.append(_record_row(fp, data, error, at))
    return result("list", requests, records, (counts[0], counts[1]),
                  "nothing changed" if any(counts) else "the quarantine is empty")


@contextmanager
def _transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``path``: committed whole, or rolled back with a message."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise FrontierCommandError(
            f"cannot write {path} ({type(exc).__name__}: {exc}): the crawl's directory must "
            "be writable by this user. Nothing was changed.") from None
    try:
        yield conn
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise FrontierCommandError(f"cannot change {path} ({type(exc).__name__}: {exc}). "
                                   "Nothing was changed.") from None
    finally:
        conn.close()


def _sqlite_move_requests(path: Path, action: str, trust: RowTrust) -> tuple[int, int]:
    """(requests moved or dropped, requests refused by the trust check)."""
    with _transaction(path) as conn:
        if not _has_table(conn):
            return 0, 0
        if action != "requeue":
            moved = conn.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
            conn.execute("DELETE FROM quarantine")
            return int(moved), 0
        # New ids after every row the file holds: each goes to the back of its level.
        next_id = 1 + max(
            conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()[0]
            for table in ("front", "back"))
        rows = [row for row in conn.execute(
            "SELECT rowid, level, host, data FROM quarantine ORDER BY rowid")
            if row[3] is not None and trust.check(bytes(row[3])) is None]
        conn.executemany("INSERT INTO front(id, level, host, data) VALUES (?, ?, ?, ?)",
                         [(next_id + i, level, host, data)
                          for i, (_, level, host, data) in enumerate(rows)])
        conn.executemany("DELETE FROM quarantine WHERE rowid = ?", [(r[0],) for r in rows])
        refused = conn.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
    return len(rows), int(refused)


def _sqlite_move_records(path: Path, action: str, trust: RowTrust) -> tuple[int, int, int]:
    """(records moved or dropped, records kept because the page has a newer one, records
    refused by the trust check)."""
    with _transaction(path) as conn:
        if not _has_table(conn):
            return 0, 0, 0
        if action != "requeue":
            moved = conn.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
            conn.execute("DELETE FROM quarantine")
            return int(moved), 0, 0
        rows = conn.execute("SELECT fp, data FROM quarantine").fetchall()
        fine = [(fp,) for fp, data in rows if _record_refused(data, trust) is None]
        refused = len(rows) - len(fine)
        before = conn.total_changes
        conn.executemany("INSERT OR IGNORE INTO pages(fp, eligible, weight, retired, data) "
                         "SELECT fp, 0, 1.0, 0, data FROM quarantine WHERE fp = ?", fine)
        moved = conn.total_changes - before
        conn.execute("DELETE FROM quarantine WHERE fp IN (SELECT q.fp FROM quarantine q "
                     "JOIN pages p ON p.fp = q.fp AND p.data IS q.data)")
        left = conn.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
    return int(moved), int(left) - refused, refused


# -- Redis --------------------------------------------------------------------------------


def redis_quarantine(inspector: Any, action: str, limit: int) -> dict[str, Any]:
    """The quarantine over every partition of the crawl."""
    from scrapy_frontier.backends.redis.frontier import Quarantined

    client = inspector.client
    keys = [(inspector.k("quarantine", i), inspector.layout.history_prefix(i) + "quarantine")
            for i in range(inspector.count)]

    def read(queue_key: str, history_key: str) -> list[Any]:
        pipe = client.pipeline(transaction=not inspector.cluster)
        pipe.llen(queue_key)
        pipe.hlen(history_key)
        pipe.lrange(queue_key, 0, max(limit, 1) - 1)
        pipe.hscan(history_key, 0, count=max(limit, 1))
        return pipe.execute()

    n_requests = n_records = 0
    requests: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for queue_key, history_key in keys:
        nq, nh, entries, (_, fields) = _guard(inspector, "reading the quarantine",
                                              lambda q=queue_key, h=history_key: read(q, h))
        n_requests, n_records = n_requests + int(nq), n_records + int(nh)
        for entry in entries[:max(0, limit - len(requests))]:
            q = Quarantined.decode(bytes(entry))
            url = None if q.damaged else saved_url(q.item[8:])
            requests.append(_request_row(url, q.host, q.level, q.error, q.at))
        for fp, raw in list(fields.items())[:max(0, limit - len(records))]:
            info = _record_entry(raw) or {"data": "", "error": DAMAGED_RECORD, "at": ""}
            records.append(_record_row(_fp(fp), info["data"], info["error"], info["at"]))
    counts = (n_requests, n_records)
    if action == "list":
        return result(action, requests, records, counts,
                      "nothing changed" if any(counts) else "the quarantine is empty")
    if action == "requeue":
        moved = refused = back = kept = bad_requests = bad_records = 0
        trust = RowTrust.of(inspector.config.signing_keys, private=False)
        for i in range(inspector.count):
            m, r, u = _redis_requeue_requests(inspector, i, trust)
            b, k, v = _redis_requeue_records(inspector, i, trust)
            moved, refused, back, kept = moved + m, refused + r, back + b, kept + k
            bad_requests, bad_records = bad_requests + u, bad_records + v
        done = (f"{moved} requests queued again and {back} page records back in the history "
                "(due now); the workers take them at once")
        if refused:
            done += (f"; {refused} requests stay in the quarantine: their hosts are retired "
                     "(scrapy frontier unretire HOST, then --requeue again)")
        if kept:
            done += (f"; {kept} page records stay in the quarantine: the page was fetched "
                     "again since, and its new record is kept")
        done = _refusals(done, bad_requests, bad_records)
    else:
        def delete(queue_key: str, history_key: str) -> list[Any]:
            pipe = client.pipeline(transaction=not inspector.cluster)
            pipe.llen(queue_key)
            pipe.hlen(history_key)
            pipe.delete(queue_key)
            pipe.delete(history_key)
            return pipe.execute()

        gone_requests = gone_records = 0
        for queue_key, history_key in keys:
            nq, nh, _, _ = _guard(inspector, "clearing the quarantine",
                                  lambda q=queue_key, h=history_key: delete(q, h))
            gone_requests, gone_records = gone_requests + int(nq), gone_records + int(nh)
        done = f"{gone_requests} requests and {gone_records} page records dropped"
    return result(action, requests, records, counts, done)


def _guard(inspector: Any, doing: str, fn: Any) -> Any:
    from scrapy_frontier.backends.redis.connection import guard

    return guard(inspector.client, inspector.prefix, doing, fn)


def _redis_requeue_requests(inspector: Any, partition: int,
                            trust: RowTrust) -> tuple[int, int, int]:
    """(requests queued again, refused for a retired host, refused by the trust check)."""
    remote = inspector.frontier(partition)
    moved = refused = untrusted = 0
    total = remote.quarantine_size()
    start = 0
    while start < total:  # bounded: entries set aside meanwhile wait for the next call
        chunk = remote.quarantined(start, min(total, start + 500) - 1)
        if not chunk:
            break
        kept = 0
        for raw, q in chunk:
            if q.damaged or trust.check(q.item[8:]) is not None:
                untrusted += 1
                kept += 1
            elif remote.push(q.host, q.level, q.item):
                remote.unquarantine(raw)  # only once queued: a failure leaves a duplicate
                moved += 1
            else:
                refused += 1
                kept += 1
        start += kept  # the entries removed shift the rest down
        total -= len(chunk) - kept
    return moved, refused, untrusted


def _redis_requeue_records(inspector: Any, partition: int,
                           trust: RowTrust) -> tuple[int, int, int]:
    """(records put back, records kept because the page has a newer one, records refused
    by the trust check)."""
    client = inspector.client
    h = inspector.layout.history_prefix(partition)

    def run() -> tuple[int, int, int]:
        back = kept = untrusted = 0
        for fp, raw in client.hscan_iter(h + "quarantine", count=500):
            info = _record_entry(raw)
            data = "" if info is None else info["data"]
            if info is None or _fp(fp) is None or _record_refused(data, trust) is not None:
                untrusted += 1
                continue
            if not client.hsetnx(h + "pages", fp, data):
                kept += 1
                continue
            pipe = client.pipeline(transaction=not inspector.cluster)
            pipe.zadd(h + "due", {fp: 0.0})
            pipe.zadd(h + "weight", {fp: 1.0})
            pipe.hdel(h + "quarantine", fp)  # only once back: a failure leaves a copy
            pipe.execute()
            back += 1
        return back, kept, untrusted

    return _guard(inspector, "putting page records back", run)
