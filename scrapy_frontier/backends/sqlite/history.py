"""``history.sqlite``: page records for incremental recrawls, in JOBDIR / FRONTIER_PATH.

One table, ``pages(fp INTEGER PRIMARY KEY, eligible REAL, weight REAL, retired
INTEGER, data TEXT) WITHOUT ROWID``, with an index on ``(retired, eligible, fp)``
for the due order and one on ``weight`` for eviction. A record that cannot be read
is moved to ``quarantine(fp, data, error, at)`` when it is met (the table is created
with the first one): one bad record must not stop every later run. Writes are buffered and
committed together (every ``batch_size`` records, every ``flush_interval``
seconds, and at close); reads see the buffer. A crash loses at most the buffered
updates: those pages keep their previous due time and are simply visited again.

The same checks as the seen-set apply (see :mod:`scrapy_frontier.backends.sqlite.files`):
a file from another program, format or version, a damaged, read-only or locked
file, a full disk all raise :class:`HistoryStoreError` naming the file and what
to do; nothing is reset.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from scrapy_frontier.backends.sqlite.files import SQLiteFile, WALFileStore
from scrapy_frontier.core.history import (
    QUARANTINE_LOGGED,
    PageRecord,
    quarantine_message,
    split_pending,
)
from scrapy_frontier.errors import HistoryStoreError

#: Fingerprints per query of ``get_many`` (below SQLite's oldest limit of 999 parameters).
GET_MANY_CHUNK = 500

logger = logging.getLogger("scrapy_frontier.history")

FORMAT = "scrapy-frontier/history"
VERSION = 1
STORE_NAME = "history.sqlite"
#: Both due queries are a SEARCH of the ``pages_due`` index (tests check the plans).
DUE_QUERY = (
    "SELECT fp, data FROM pages WHERE retired = 0 AND (eligible, fp) > (?, ?) "
    "AND eligible <= ? ORDER BY eligible, fp LIMIT ?"
)
COUNT_DUE_QUERY = ("SELECT COUNT(*) FROM (SELECT 1 FROM pages WHERE retired = 0 AND "
                   "eligible <= ? LIMIT ?)")
NEXT_DUE_QUERY = "SELECT MIN(eligible) FROM pages WHERE retired = 0"
#: Each host's checked change hints (core/hint_trust.py), added to at every flush.
TRUST_SCHEMA = ("CREATE TABLE IF NOT EXISTS hint_trust(host TEXT PRIMARY KEY, "
                "agreed INTEGER NOT NULL, disagreed INTEGER NOT NULL) WITHOUT ROWID")
TRUST_UPSERT = ("INSERT INTO hint_trust(host, agreed, disagreed) VALUES (?, ?, ?) "
                "ON CONFLICT(host) DO UPDATE SET agreed = agreed + excluded.agreed, "
                "disagreed = disagreed + excluded.disagreed")
# Not in the schema: created with the first record set aside.
QUARANTINE_SCHEMA = ("CREATE TABLE IF NOT EXISTS quarantine(fp INTEGER PRIMARY KEY, data, "
                     "error TEXT NOT NULL, at TEXT NOT NULL) WITHOUT ROWID")


class SQLiteHistoryStore(WALFileStore):
    """A :class:`~scrapy_frontier.core.history.HistoryStore` in an SQLite file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        batch_size: int = 2048,
        flush_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        check_request: Callable[[str, bytes | None], str | None] | None = None,
    ) -> None:
        self.path = Path(path)
        #: Refuses a record whose kept request fails the trust check (codec.RowTrust).
        self.check_request = check_request
        self._file = SQLiteFile(self.path, HistoryStoreError, fmt=FORMAT, version=VERSION,
                                what="page history")
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._clock = clock
        self._pending: dict[int, PageRecord] = {}
        self._trust: dict[str, tuple[int, int]] = {}
        self._flush_at = 0.0
        self._closed = False
        #: Records this process moved to the quarantine (frontier/history/quarantined).
        self.quarantined = 0
        self._open()

    def _setup(self, *, fresh: bool) -> None:
        conn = self._conn
        if fresh:
            self._file.check_directory()
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE frontier_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID")
            conn.execute(
                "CREATE TABLE pages(fp INTEGER PRIMARY KEY, eligible REAL NOT NULL, "
                "weight REAL NOT NULL, retired INTEGER NOT NULL, data TEXT NOT NULL) "
                "WITHOUT ROWID"
            )
            conn.execute("CREATE INDEX pages_due ON pages(retired, eligible, fp)")
            conn.execute("CREATE INDEX pages_weight ON pages(weight, fp)")
            conn.executemany(
                "INSERT INTO frontier_meta(key, value) VALUES (?, ?)",
                [("format", FORMAT), ("version", VERSION)],
            )
            conn.execute("COMMIT")
            return
        self._file.check_meta(conn, "pages")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")

    def _error(self, exc: sqlite3.Error, doing: str) -> HistoryStoreError:
        error = self._file.classify(exc, doing, "page records written before this are kept")
        assert isinstance(error, HistoryStoreError)
        return error

    def _decode(self, fp: int, text: str, bad: list[tuple[int, str, str]] | None = None,
                ) -> PageRecord | None:
        """The record, or None for one that cannot be read: set aside now, or added to
        ``bad`` for the caller to set aside once its cursor is done."""
        try:
            return PageRecord.from_json(fp, text, self.check_request)
        except ValueError as exc:
            if bad is None:
                self._set_aside([(fp, text, str(exc))])
            else:
                bad.append((fp, text, str(exc)))
            return None

    def _set_aside(self, bad: list[tuple[int, str, str]]) -> None:
        """Move unreadable records to the quarantine table, in one transaction."""
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(QUARANTINE_SCHEMA)
            conn.executemany("INSERT OR REPLACE INTO quarantine VALUES (?, ?, ?, ?)",
                             [(fp, data, error, at) for fp, data, error in bad])
            # Only the bad version: a record written meanwhile is kept.
            conn.executemany("DELETE FROM pages WHERE fp = ? AND data IS ?",
                             [(fp, data) for fp, data, _ in bad])
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise self._error(exc, "setting an unreadable page record aside failed") from exc
        for fp, data, error in bad:
            self.quarantined += 1
            if self.quarantined <= QUARANTINE_LOGGED:
                logger.error("%s", quarantine_message(str(self.path), fp, data, error,
                                                      self.quarantined,
                                                      "frontier/history/quarantined"))

    def quarantine_size(self) -> int:
        """Records in the quarantine, from this run and earlier ones."""
        try:
            row = self._conn.execute(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'quarantine'").fetchone()
            if not row[0]:
                return 0
            return int(self._conn.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0])
        except sqlite3.Error as exc:
            raise self._error(exc, "counting the quarantine failed") from exc

    # -- the store -------------------------------------------------------------------------

    def get(self, fp: int) -> PageRecord | None:
        pending = self._pending.get(fp)
        if pending is not None:
            return PageRecord.from_json(fp, pending.to_json())
        self._check_open()
        try:
            row = self._conn.execute("SELECT data FROM pages WHERE fp = ?", (fp,)).fetchone()
        except sqlite3.Error as exc:
            raise self._error(exc, "lookup failed") from exc
        return None if row is None else self._decode(fp, row[0])

    def get_many(self, fps: Sequence[int]) -> dict[int, PageRecord]:
        found, wanted = split_pending(self._pending, fps)
        self._check_open()
        try:
            for start in range(0, len(wanted), GET_MANY_CHUNK):
                chunk = wanted[start:start + GET_MANY_CHUNK]
                rows = self._conn.execute(
                    f"SELECT fp, data FROM pages WHERE fp IN ({','.join('?' * len(chunk))})",
                    chunk).fetchall()
                for fp, data in rows:
                    record = self._decode(fp, data)
                    if record is not None:
                        found[fp] = record
        except sqlite3.Error as exc:
            raise self._error(exc, "lookup failed") from exc
        return found

    def put(self, record: PageRecord) -> None:
        self._check_open()
        if not self._pending:
            self._flush_at = self._clock() + self.flush_interval
        self._pending[record.fp] = record
        if len(self._pending) >= self.batch_size or self._clock() >= self._flush_at:
            self.flush()

    def due(self, after: tuple[float, int], until: float, limit: int) -> list[PageRecord]:
        self.flush()
        due, fp = after
        try:
            # A row value, so the cursor is a range bound on the pages_due index: the
            # query seeks to it and reads only the rows it returns (an OR of the two
            # cases read every row before the cursor, or sorted the whole due range).
            rows = self._conn.execute(DUE_QUERY, (due, fp, until, limit)).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc, "due query failed") from exc
        records = [self._decode(fp, data) for fp, data in rows]
        return [r for r in records if r is not None]

    def count_due(self, until: float, limit: int | None = None) -> int:
        """Pages not retired with an eligible time <= ``until`` (on the pages_due index),
        at most ``limit``: counting reads every index entry it counts."""
        self.flush()
        try:
            row = self._conn.execute(COUNT_DUE_QUERY, (until, -1 if limit is None else limit)
                                     ).fetchone()
        except sqlite3.Error as exc:
            raise self._error(exc, "due count failed") from exc
        return int(row[0])

    def take_due(self, until: float, limit: int, hold_until: float) -> None:
        """Not shared: the recrawler walks :meth:`due` itself."""
        return None

    def next_due(self) -> float | None:
        self.flush()
        try:
            row = self._conn.execute(NEXT_DUE_QUERY).fetchone()
        except sqlite3.Error as exc:
            raise self._error(exc, "due query failed") from exc
        return None if row is None or row[0] is None else float(row[0])

    def evict(self, keep: int) -> int:
        self.flush()
        extra = len(self) - keep
        if extra <= 0:
            return 0
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "DELETE FROM pages WHERE fp IN "
                "(SELECT fp FROM pages ORDER BY weight, fp DESC LIMIT ?)", (extra,))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise self._error(exc, f"evicting {extra} records failed") from exc
        return extra

    def scan(self) -> Iterator[PageRecord]:
        self.flush()
        bad: list[tuple[int, str, str]] = []
        try:
            cursor = self._conn.execute("SELECT fp, data FROM pages WHERE retired = 0")
            while rows := cursor.fetchmany(1000):
                for fp, data in rows:
                    record = self._decode(fp, data, bad)
                    if record is not None:
                        yield record
        except sqlite3.Error as exc:
            raise self._error(exc, "scan failed") from exc
        if bad:
            self._set_aside(bad)

    def __len__(self) -> int:
        self.flush()
        try:
            row = self._conn.execute("SELECT COUNT(*) FROM pages").fetchone()
        except sqlite3.Error as exc:
            raise self._error(exc, "count failed") from exc
        return int(row[0])

    def unsaved(self) -> int:
        return len(self._pending)

    def load_trust(self) -> dict[str, tuple[int, int]]:
        try:
            if not self._conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = "
                                      "'hint_trust'").fetchone()[0]:
                return {}
            rows = self._conn.execute(
                "SELECT host, agreed, disagreed FROM hint_trust").fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc, "reading the hosts' hint checks failed") from exc
        return {str(host): (int(a), int(d)) for host, a, d in rows}

    def add_trust(self, host: str, agreed: int, disagreed: int) -> None:
        a, d = self._trust.get(host, (0, 0))
        self._trust[host] = (a + agreed, d + disagreed)

    def flush(self) -> None:
        if not self._pending and not self._trust:
            return
        self._check_open()
        batch = [
            (r.fp, r.eligible, r.weight, 0 if r.retired is None else 1, r.to_json())
            for _, r in sorted(self._pending.items())
        ]
        trust = [(host, a, d) for host, (a, d) in sorted(self._trust.items())]
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT OR REPLACE INTO pages(fp, eligible, weight, retired, data) "
                "VALUES (?, ?, ?, ?, ?)", batch)
            if trust:
                conn.execute(TRUST_SCHEMA)
                conn.executemany(TRUST_UPSERT, trust)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise self._error(exc, f"writing {len(batch)} page records failed") from exc
        self._pending.clear()
        self._trust.clear()

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
