"""The persistent seen-set: 64-bit fingerprints in one SQLite file.

One table, ``seen(fp INTEGER PRIMARY KEY) WITHOUT ROWID``: the fingerprint is
the B-tree key, about a dozen bytes per URL on disk. The file is in WAL mode
and held with a lock file while open (backends/sqlite/lock.py), so two crawls cannot share it by
accident. New fingerprints are buffered in memory and written in one
transaction every ``batch_size`` additions, when the oldest buffered one has
waited ``flush_interval`` seconds, and on :meth:`close`; lookups see the
buffer too. A crash loses at most the buffered (newest) fingerprints, which
then only get crawled again: the safe direction for a seen-set.

A file this class cannot use -- not SQLite, another program's database, a
newer format version, truncated or corrupt, in a read-only place, on a full
disk -- raises :class:`SeenStoreError` naming the file and what to do. A file
is never deleted, reset or rewritten to make an error go away.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

from scrapy_frontier.backends.sqlite.files import SQLiteFile, WALFileStore
from scrapy_frontier.errors import SeenStoreError

#: Recorded in the file's ``frontier_meta`` table.
FORMAT = "scrapy-frontier/seen"
VERSION = 1

#: Flush the write buffer after this many new fingerprints...
DEFAULT_BATCH_SIZE = 4096
#: ...or once its oldest fingerprint has waited this many seconds.
DEFAULT_FLUSH_INTERVAL = 1.0

_LIMIT = 1 << 63


class SQLiteFingerprintStore(WALFileStore):
    """A :class:`~scrapy_frontier.core.seen.FingerprintStore` in an SQLite file.

    ``path`` is created (with its schema) if missing; an existing file must be
    one this class wrote, in a version it reads.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not flush_interval >= 0:  # also refuses NaN
            raise ValueError(f"flush_interval must be >= 0 seconds, got {flush_interval!r}")
        self.path = Path(path)
        self._file = SQLiteFile(self.path, SeenStoreError, fmt=FORMAT, version=VERSION,
                                what="seen-set")
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._clock = clock
        self._flush_at = 0.0
        self._pending: set[int] = set()
        self._count = 0
        #: The queue rows (ids up to this) whose fingerprints are all in the file, as the
        #: frontier's driver said at the last flush; None if it never said.
        self.covers: int | None = None
        self._closed = False
        self._open()

    # -- opening -----------------------------------------------------------------------

    def _setup(self, *, fresh: bool) -> None:
        conn = self._conn
        if fresh:
            self._file.check_directory()
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE frontier_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID")
            conn.execute("CREATE TABLE seen(fp INTEGER PRIMARY KEY) WITHOUT ROWID")
            conn.executemany(
                "INSERT INTO frontier_meta(key, value) VALUES (?, ?)",
                [("format", FORMAT), ("version", VERSION), ("count", 0)],
            )
            conn.execute("COMMIT")
            self._count = 0
            self.covers = None
            return
        meta = self._file.check_meta(conn, "seen")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        count = meta.get("count")
        if not isinstance(count, int) or count < 0:
            raise SeenStoreError(self.path, f"has an invalid count {count!r} (damaged)",
                                 "Restore it from a backup, or move it away.")
        self._count = count
        covers = meta.get("covers")
        self.covers = covers if isinstance(covers, int) and covers >= 0 else None

    def _error(self, exc: sqlite3.Error, doing: str) -> SeenStoreError:
        error = self._file.classify(exc, doing, "fingerprints written before this error are kept")
        assert isinstance(error, SeenStoreError)
        return error

    # -- the store -------------------------------------------------------------------------

    def contains(self, fp: int) -> bool:
        if fp in self._pending:
            return True
        self._check_open()
        try:
            row = self._conn.execute("SELECT 1 FROM seen WHERE fp = ?", (fp,)).fetchone()
        except sqlite3.Error as exc:
            raise self._error(exc, "lookup failed") from exc
        return row is not None

    def add(self, fp: int) -> None:
        """Record ``fp`` (a signed 64-bit int); written at the next flush.

        Meant for fingerprints the store does not hold yet (as
        :class:`~scrapy_frontier.core.seen.SeenSet` uses it): one it already
        holds is ignored when written, but counts in ``len()`` until then.
        """
        if not -_LIMIT <= fp < _LIMIT:
            raise ValueError(f"fingerprint {fp} is not a signed 64-bit integer")
        self._check_open()
        pending = self._pending
        if not pending:
            self._flush_at = self._clock() + self.flush_interval
        pending.add(fp)
        if len(pending) >= self.batch_size or self._clock() >= self._flush_at:
            self.flush()

    def add_many(self, fps: Iterable[int]) -> None:
        for fp in fps:
            self.add(fp)

    def flush(self, covers: int | None = None) -> None:
        """Write the buffered fingerprints in one committed transaction.

        ``covers``: the frontier's queue rows up to this id are all in the file once this
        commits (kept in ``frontier_meta``; see :attr:`covers`).
        """
        if not self._pending:
            return
        self._check_open()
        batch = sorted(self._pending)
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            before = conn.total_changes
            conn.executemany("INSERT OR IGNORE INTO seen(fp) VALUES (?)", ((fp,) for fp in batch))
            added = conn.total_changes - before
            count = self._count + added
            conn.execute("UPDATE frontier_meta SET value = ? WHERE key = 'count'", (count,))
            if covers is not None:
                conn.execute("INSERT OR REPLACE INTO frontier_meta(key, value) "
                             "VALUES ('covers', ?)", (covers,))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise self._error(exc, f"writing {len(batch)} fingerprints failed") from exc
        self._count = count
        self._pending.clear()
        if covers is not None:
            self.covers = covers

    def discard(self) -> int:
        """Forget the buffered fingerprints without writing them; return how many."""
        dropped = len(self._pending)
        self._pending.clear()
        return dropped

    def __len__(self) -> int:
        """Distinct fingerprints stored, the buffer included."""
        return self._count + len(self._pending)

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> SQLiteFingerprintStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
