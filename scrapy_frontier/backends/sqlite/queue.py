"""The SQLite queue store: the frontier's URLs on disk, crash-safe, in bounded memory.

Layout (one file, WAL mode):

* ``front(id, level, host, data)`` -- the front queues, FIFO by ``id`` per level;
* ``back(id, host, level, leased, data)`` -- the back queues of active hosts,
  served by ``level DESC, id``; ``leased = 1`` while a fetch is in flight;
* ``done(id, data)`` -- with a seen-set beside this file (:attr:`SQLiteStore.keep_done`),
  the rows acknowledged since the seen-set's last write, so that a restart puts their
  URLs back in it (a page found again is then not fetched again); purged once the
  seen-set has them;
* ``hosts(host, rest_until, last_fetch)`` -- each host's rest, as wall-clock
  time so that it survives a restart;
* ``meta(key, value)`` -- format, version and spider name;
* ``quarantine(id, host, level, data, error, at)`` -- rows set aside because
  they cannot be rebuilt (created at the first one), kept for inspection.

Memory holds only windows: the next few hundred rows of each front level and
of each active host's back queue, and the writes not yet committed. Writes are
batched and committed together (:meth:`SQLiteStore.flush`), in order, in one
transaction, so a crash loses a suffix of the operations and never reorders
them: an acknowledgement is never durable before the URLs queued ahead of it.

At open, URLs that were leased when the process died go back to their queues:
after a ``kill -9`` the repeats are at most the fetches that were in flight.

A row that cannot be rebuilt (:class:`~scrapy_frontier.errors.UndecodableRow`)
is moved to ``quarantine`` when its turn comes, and the host's next row is
served instead: one bad row must not stop every later run of the JOBDIR.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from scrapy_frontier.backends.sqlite.files import SQLiteFile, describe, sync_wal
from scrapy_frontier.backends.sqlite.lock import FileLock
from scrapy_frontier.codec import Codec, saved_url
from scrapy_frontier.errors import StoreError, UndecodableRow, Unserializable

T = TypeVar("T")

logger = logging.getLogger("scrapy_frontier.store")

FORMAT = "scrapy-frontier/sqlite"
#: The state's layout; request rows start with a format byte (scrapy_frontier.codec).
VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS front(
    id INTEGER PRIMARY KEY, level INTEGER NOT NULL, host TEXT NOT NULL, data BLOB);
CREATE INDEX IF NOT EXISTS front_by_level ON front(level, id);
CREATE TABLE IF NOT EXISTS back(
    id INTEGER PRIMARY KEY, host TEXT NOT NULL, level INTEGER NOT NULL,
    leased INTEGER NOT NULL DEFAULT 0, data BLOB);
CREATE INDEX IF NOT EXISTS back_by_host ON back(host, level DESC, id);
CREATE TABLE IF NOT EXISTS done(id INTEGER PRIMARY KEY, data BLOB);
CREATE TABLE IF NOT EXISTS hosts(
    host TEXT PRIMARY KEY, rest_until REAL NOT NULL, last_fetch REAL) WITHOUT ROWID;
"""

# Not in SCHEMA: created with the first row set aside, so a healthy file stays as it was.
QUARANTINE_SCHEMA = """
CREATE TABLE IF NOT EXISTS quarantine(
    id INTEGER NOT NULL, host TEXT NOT NULL, level INTEGER NOT NULL, data BLOB,
    error TEXT NOT NULL, at TEXT NOT NULL)
"""

#: Rows set aside that are logged one by one; later ones are only counted.
QUARANTINE_LOGGED = 10


@dataclass
class _Back:
    """An active host's back queue: a window of its head rows, and a count on disk."""

    window: list[tuple[int, int, bytes | None]] = field(default_factory=list)
    nbytes: int = 0  # bytes of request data in the window
    # (−level, id, data) sorted ascending == served order; rows also on disk (or pending).
    size: int = 0  # all queued rows of the host, window included (leased rows excluded)


class SQLiteStore(Generic[T]):
    """A :class:`~scrapy_frontier.core.store.QueueStore` on SQLite."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        levels: int,
        spider: str,
        codec: Codec[T],
        window: int = 256,
        flush_ops: int = 5000,
        window_bytes: int = 64 * 1024,
        flush_bytes: int = 8 * 1024 * 1024,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.levels = levels
        self.codec = codec
        self.window = window
        self.flush_ops = flush_ops
        # Memory is capped in bytes too: requests with big meta would otherwise keep
        # window x row size in RAM per queue (and flush_ops x row size pending).
        self.window_bytes = window_bytes
        self.flush_bytes = flush_bytes
        self._pending_bytes = 0
        self.wall_clock = wall_clock
        self.volatile = 0  # items kept in memory only because they cannot be encoded
        self.volatile_lost = 0
        self._volatile: dict[int, T] = {}
        self._file = SQLiteFile(self.path, _file_error, fmt=FORMAT, version=VERSION,
                                what="state file")
        self._db = self._connect(spider)
        self._next_id = 1 + max(
            self._db.execute("SELECT COALESCE(MAX(id), 0) FROM front").fetchone()[0],
            self._db.execute("SELECT COALESCE(MAX(id), 0) FROM back").fetchone()[0],
            self._db.execute("SELECT COALESCE(MAX(id), 0) FROM done").fetchone()[0],
        )
        # Front level -> window of (id, host, data) loaded from disk, and counts.
        self._fwin: list[deque[tuple[int, str, bytes | None]]] = [deque() for _ in range(levels)]
        self._count_front()
        self._back: dict[str, _Back] = {}
        # Pending writes, applied in this order by flush().
        self._ins_front: list[tuple[int, int, str, bytes | None]] = []
        # Back rows not written yet, by id: (id, host, level, data, leased). A
        # lease of such a row is folded into its INSERT, and an ack drops it: the
        # same state after the transaction, with fewer statements.
        self._ins_back: dict[int, tuple[int, str, int, bytes | None, int]] = {}
        self._del_front: list[tuple[int]] = []
        self._lease: list[tuple[int]] = []
        self._del_back: list[tuple[int]] = []
        #: Acknowledged rows, moved to ``done`` (keep_done) or deleted.
        self._ack_back: list[tuple[int]] = []
        self._ins_done: list[tuple[int, bytes | None]] = []
        self._purge_done: int | None = None
        # True at first: rows an earlier run left in ``done`` are purged at the first chance.
        self._done_since_purge = True
        #: Keep acknowledged rows in ``done`` until :meth:`purge_done` (set by a driver
        #: with a seen-set that is written after this file).
        self.keep_done = False
        self._rests: dict[str, tuple[float, float | None]] = {}
        self._quarantine: list[tuple[int, str, int, bytes, str, str]] = []
        #: Rows moved to the quarantine table by this process (frontier/store/undecodable).
        self.undecodable = 0
        self._ops = 0
        self.flushes = 0
        self._unsynced = False

    # -- opening -------------------------------------------------------------

    def _connect(self, spider: str) -> sqlite3.Connection:
        self._opening: sqlite3.Connection | None = None
        self._lock: FileLock | None = None
        try:
            db = self._open_db(spider)
        except BaseException as exc:
            if self._opening is not None:
                self._opening.close()
            self._opening = None
            self._unlock(refused=True)
            if isinstance(exc, sqlite3.Error):  # one mapping for every SQLite file (files.py)
                raise self._file.classify(exc, "cannot be opened",
                                          "nothing was changed in it") from exc
            raise
        self._opening = None
        return db

    def _unlock(self, *, refused: bool = False) -> None:
        if self._lock is not None:
            self._lock.end(refused=refused)
            self._lock = None

    @contextlib.contextmanager
    def _sql(self, doing: str) -> Iterator[None]:
        """SQLite errors as a StoreError that names the file and says what to do."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._file.classify(
                exc, doing, "the state as of its last write is kept: run the crawl again "
                "once the problem is fixed") from exc

    def _open_db(self, spider: str) -> sqlite3.Connection:
        path = self.path
        fresh = not path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._file.error(path, f"cannot be created ({describe(exc)})",
                                   "Check that its directory can be created and written.") \
                from exc
        # The checks every scrapy-frontier SQLite file gets (backends/sqlite/files.py).
        if fresh:
            self._file.check_directory()
        else:
            self._file.check_file()
        # One crawl writes the file (see backends/sqlite/lock.py); readers may open it.
        self._lock = FileLock(path, _file_error)
        # A failure from here on is _connect's to close and map (self._opening).
        db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=1.0
        )
        self._opening = db
        if not fresh:
            # Before the pragmas and the schema below write to it: another
            # program's database is refused unchanged.
            self._check_foreign(db)
        if fresh:
            # Small pages: a write-through commit writes about five pages to
            # the WAL (front, back and their indexes, the host's rest); 1 KiB
            # pages write a quarter of the bytes of the default 4 KiB, for
            # rows of about 100 bytes. Only takes effect in a new file.
            db.execute("PRAGMA page_size=1024")
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives a process crash (kill -9);
        # only an OS crash or power loss can lose the last commits. FULL
        # would fsync every commit; the at-least-once contract is about
        # the process dying, and a lost suffix of commits only repeats fetches.
        db.execute("PRAGMA synchronous=NORMAL")
        # Checkpoint every 8 MiB of WAL instead of 1,000 pages: fewer fsyncs and
        # hot pages copied back once per checkpoint. The WAL stays bounded.
        db.execute("PRAGMA wal_autocheckpoint=8192")
        db.execute("PRAGMA cache_size=-8192")  # 8 MiB page cache: bounded memory
        quick = db.execute("PRAGMA quick_check").fetchone()[0]
        if quick != "ok":
            raise self._file.error(
                path, f"is corrupt (quick_check: {quick})",
                "Nothing was changed. Restore it from a backup, or move it away to start "
                "afresh (the crawl then starts without its URLs).")
        db.executescript(SCHEMA)
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if fresh or not meta:
            with _transaction(db):
                db.executemany(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    [("format", FORMAT), ("version", str(VERSION)), ("spider", spider)],
                )
            return db
        if meta.get("version") != str(VERSION):
            raise StoreError(
                f"{path} was written by an incompatible scrapy-frontier (state version "
                f"{meta.get('version')}, this version reads {VERSION}). "
                "Finish the crawl with the version that wrote it, or use a new JOBDIR."
            )
        if meta.get("spider") != spider:
            raise StoreError(
                f"{path} belongs to spider {meta.get('spider')!r}, not {spider!r}. "
                "Each spider needs its own JOBDIR (or FRONTIER_PATH)."
            )
        return db

    def _check_foreign(self, db: sqlite3.Connection) -> None:
        """Refuse a database with tables but no scrapy-frontier ``meta`` (reads only)."""
        try:
            if "meta" not in self._file.check_tables(db, "meta", empty_ok=True):
                return  # no tables: it gets the schema
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if meta and meta.get("format") != FORMAT:
                raise _file_error(
                    self.path, f"holds format {meta.get('format')!r}, not {FORMAT!r}",
                    "It is not a scrapy-frontier state file: move it, or point FRONTIER_PATH / "
                    "JOBDIR elsewhere. Nothing was changed in it.",
                )
        except StoreError:
            db.close()
            raise

    def _count_front(self) -> None:
        self._fsize = [0] * self.levels
        with self._sql("counting its queued URLs"):
            counts = self._db.execute("SELECT level, COUNT(*) FROM front GROUP BY level")
            for level, count in counts.fetchall():
                self._check_level(level)
                self._fsize[level - 1] = count
        self._fdisk = list(self._fsize)  # rows on disk (or pending) not in the window

    def _check_level(self, level: int) -> None:
        if not 1 <= level <= self.levels:
            raise StoreError(
                f"{self.path} holds front level {level}, but FRONTIER_FRONT_QUEUES is "
                f"{self.levels}. Run with the FRONTIER_FRONT_QUEUES it was written with."
            )

    def recover(self) -> tuple[dict[str, int], dict[str, tuple[float, float | None]]]:
        """Return leased URLs to their queues; the hosts with back queues and their sizes,
        and every host's rest as (seconds left, last fetch time).

        A host that had a fetch in flight is in :attr:`interrupted` with its last
        known fetch time: its latest rest may not have been saved.
        """
        self.interrupted: dict[str, float | None] = {}
        try:
            leased_hosts = self._db.execute(
                "SELECT DISTINCT back.host, hosts.last_fetch FROM back "
                "LEFT JOIN hosts ON hosts.host = back.host WHERE back.leased = 1"
            ).fetchall()
            self.interrupted = dict(leased_hosts)
            in_flight = self._db.execute("SELECT COUNT(*) FROM back WHERE leased = 1").fetchone()[0]
            if in_flight:
                # Logged before the rows change, so that a crash during recovery
                # cannot hide them: the next run would count them again.
                logger.info(
                    "%s: %d requests were in flight when the crawl stopped; queueing them again",
                    self.path,
                    in_flight,
                )
            # Requests that could not be serialised lived in the stopped process only.
            lost = [
                row
                for table in ("front", "back")
                for row in self._db.execute(f"SELECT id, host FROM {table} WHERE data IS NULL")
            ]
            if lost:
                logger.error(
                    "%s: %d requests that could not be saved (callbacks that are not spider "
                    "methods, or meta that cannot be pickled) were lost when the crawl "
                    "stopped; hosts: %s",
                    self.path,
                    len(lost),
                    sorted({host for _, host in lost})[:20],
                )
            self.volatile_lost = len(lost)
            with _transaction(self._db):
                self._db.execute("DELETE FROM front WHERE data IS NULL")
                self._db.execute("DELETE FROM back WHERE data IS NULL")
                leased = self._db.execute("UPDATE back SET leased = 0 WHERE leased = 1").rowcount
        except sqlite3.OperationalError as exc:
            raise self._file.classify(exc, "cannot be recovered",
                                      "nothing was changed in it") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"the frontier state {self.path} is corrupt or truncated ({exc}). Restore it "
                "from a backup; nothing was changed in it."
            ) from exc
        self.recovered_leases = leased
        self._count_front()
        hosts = dict(self._db.execute("SELECT host, COUNT(*) FROM back GROUP BY host").fetchall())
        now = self.wall_clock()
        rests = {
            host: (until - now, last)
            for host, until, last in self._db.execute(
                "SELECT host, rest_until, last_fetch FROM hosts WHERE rest_until > ?", (now,)
            )
        }
        return hosts, rests

    def front_count(self) -> int:
        return sum(self._fsize)

    def adopt(self, host: str, size: int) -> None:
        """Open a back queue for a host that had one when the crawl stopped."""
        self._back[host] = _Back(size=size)

    # -- encoding ------------------------------------------------------------

    def _encode(self, item: T, row: int) -> bytes | None:
        try:
            return self.codec.encode(item)
        except Unserializable as exc:
            # Documented fallback: kept in memory, lost on a crash (frontier/volatile).
            self._volatile[row] = item
            self.volatile += 1
            if self.volatile == 1:
                logger.warning(
                    "Unable to serialize request %s (%s): it is kept in memory only, so a "
                    "stop or a crash loses it (counted in frontier/volatile; no more such "
                    "requests are logged). Use spider methods as callbacks and picklable meta.",
                    item, exc,
                )
            return None

    def _decode(self, row: int, data: bytes | None) -> T:
        if data is None:
            item = self._volatile.pop(row, None)
            if item is None:
                raise StoreError(
                    f"{self.path}: row {row} held a request that could not be saved and was "
                    "kept in memory by the process that stopped; it is lost."
                )
            return item
        try:
            return self.codec.decode(data)
        except UndecodableRow as exc:
            raise UndecodableRow(f"{self.path}, row {row}: {exc}") from exc
        except StoreError as exc:
            raise StoreError(f"{self.path}, row {row}: {exc}") from exc

    def _new_id(self) -> int:
        row = self._next_id
        self._next_id += 1
        return row

    def _op(self, nbytes: int = 0) -> None:
        self._ops += 1
        self._pending_bytes += nbytes
        if self._ops >= self.flush_ops or self._pending_bytes >= self.flush_bytes:
            self.flush()

    def _rows(self, cursor: Iterator[tuple[Any, ...]], data_at: int) -> list[tuple[Any, ...]]:
        """Rows for a window: at most ``window`` of them and about ``window_bytes`` of
        request data (at least one row)."""
        rows: list[tuple[Any, ...]] = []
        total = 0
        for row in cursor:
            rows.append(row)
            total += len(row[data_at] or b"")
            if len(rows) >= self.window or total >= self.window_bytes:
                break
        return rows

    @property
    def memory_bytes(self) -> int:
        """Request data held in memory: windows and writes not flushed yet."""
        front = sum(len(d or b"") for w in self._fwin for _, _, d in w)
        return front + sum(b.nbytes for b in self._back.values()) + self._pending_bytes

    # -- front queues ----------------------------------------------------------

    def front_append(self, level: int, host: str, item: T) -> None:
        row = self._new_id()
        data = self._encode(item, row)
        self._ins_front.append((row, level, host, data))
        self._fsize[level - 1] += 1
        self._fdisk[level - 1] += 1
        self._op(len(data or b""))

    def front_levels(self) -> list[int]:
        return [i + 1 for i, n in enumerate(self._fsize) if n]

    def _front_take(self, level: int) -> tuple[int, str, bytes | None]:
        window = self._fwin[level - 1]
        if not window:
            self.flush()  # the window is loaded from disk: pending rows first
            last = -1
            with self._sql("reading its front queue"):
                rows = self._rows(self._db.execute(
                    "SELECT id, host, data FROM front WHERE level = ? AND id > ? ORDER BY id "
                    "LIMIT ?", (level, last, self.window),
                ), 2)
            if not rows:
                raise IndexError(f"front queue {level} is empty")
            window.extend(rows)
            self._fdisk[level - 1] -= len(rows)
        row, host, data = window.popleft()
        self._fsize[level - 1] -= 1
        # No _op() here: a flush between this delete and the back insert that follows
        # would commit a URL that is in neither table.
        self._del_front.append((row,))
        return row, host, data

    def front_to_back(self, level: int) -> str:
        """Move the head of front ``level`` into its host's back queue without decoding it.

        The host must have a back queue. Returns the host.
        """
        row, host, data = self._front_take(level)
        self._back_insert(host, level, row, data)
        return host

    def front_head_host(self, level: int) -> str:
        window = self._fwin[level - 1]
        if not window:
            self.flush()
            with self._sql("reading its front queue"):
                rows = self._rows(self._db.execute(
                    "SELECT id, host, data FROM front WHERE level = ? ORDER BY id LIMIT ?",
                    (level, self.window),
                ), 2)
            if not rows:
                raise IndexError(f"front queue {level} is empty")
            window.extend(rows)
            self._fdisk[level - 1] -= len(rows)
        return window[0][1]

    def front_items(self) -> Iterator[tuple[str, int, T]]:
        self.flush()
        for level in range(1, self.levels + 1):
            for row, host, data in self._fwin[level - 1]:
                yield host, level, self._peek(row, data)
        loaded = {row for w in self._fwin for row, _, _ in w}
        for row, level, host, data in self._db.execute(
            "SELECT id, level, host, data FROM front ORDER BY level, id"
        ):
            if row not in loaded:
                yield host, level, self._peek(row, data)

    def _peek(self, row: int, data: bytes | None) -> T:
        return self._volatile[row] if data is None else self._decode(row, data)

    # -- back queues -----------------------------------------------------------

    def back_open(self, host: str) -> None:
        self._back[host] = _Back()

    def back_close(self, host: str) -> None:
        back = self._back.pop(host)
        assert back.size == 0 and not back.window

    def back_append(self, host: str, level: int, item: T) -> None:
        row = self._new_id()
        self._back_insert(host, level, row, self._encode(item, row))

    def _back_insert(self, host: str, level: int, row: int, data: bytes | None) -> None:
        self._ins_back[row] = (row, host, level, data, 0)
        back = self._back[host]
        entry = (-level, row, data)
        window = back.window
        on_disk_only = back.size - len(window)
        # The window must hold the head of the host's order: a new row belongs in
        # it when nothing is on disk only, or when it sorts before the window's end.
        size = len(data or b"")
        if on_disk_only == 0 or (window and entry < window[-1]):
            _insort(window, entry)
            back.nbytes += size
            while len(window) > 1 and (
                    len(window) > self.window or back.nbytes > self.window_bytes):
                # Stays on disk (or in the pending writes); loaded again in its turn.
                back.nbytes -= len(window.pop()[2] or b"")
        back.size += 1
        self._op(size)

    def back_len(self, host: str) -> int:
        return self._back[host].size

    def back_head_level(self, host: str) -> int:
        back = self._back[host]
        self._fill_window(host, back)
        return -back.window[0][0]

    def _fill_window(self, host: str, back: _Back) -> None:
        if back.window or not back.size:
            return
        self.flush()
        with self._sql("reading a back queue"):
            rows = self._rows(self._db.execute(
                "SELECT id, level, data FROM back WHERE host = ? AND leased = 0 "
                "ORDER BY level DESC, id LIMIT ?",
                (host, self.window),
            ), 2)
        back.window = [(-level, row, data) for row, level, data in rows]
        back.nbytes = sum(len(data or b"") for _, _, data in rows)
        if not back.window:
            raise StoreError(f"{self.path}: back queue of {host!r} lost {back.size} rows")

    def back_lease(self, host: str) -> tuple[int, T, object] | None:
        """Lease the host's head row, setting aside the rows before it that cannot be
        rebuilt; None if none could (back_len tells the caller how many went)."""
        back = self._back[host]
        while back.size:
            self._fill_window(host, back)
            neg_level, row, data = back.window.pop(0)
            back.nbytes -= len(data or b"")
            back.size -= 1
            try:
                item = self._decode(row, data)
            except UndecodableRow as exc:
                assert data is not None
                self._set_aside(host, -neg_level, row, data, exc)
                continue
            pending = self._ins_back.get(row)
            if pending is None:
                self._lease.append((row,))
            else:
                self._ins_back[row] = pending[:4] + (1,)
            self._op()
            return -neg_level, item, row
        return None

    def _set_aside(
        self, host: str, level: int, row: int, data: bytes, exc: UndecodableRow
    ) -> None:
        """Move a back row that cannot be rebuilt to the quarantine table (at the next
        flush, in the same transaction as its removal from ``back``)."""
        if self._ins_back.pop(row, None) is None:
            self._del_back.append((row,))
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.wall_clock()))
        error = str(exc.__cause__ or exc)  # the codec's words; the log names file and row
        self._quarantine.append((row, host, level, data, error, at))
        self.undecodable += 1
        if self.undecodable <= QUARANTINE_LOGGED:
            url = saved_url(data)
            logger.error(
                "%s: the queued request %s cannot be rebuilt (%s). It is not crawled: it is "
                "kept in the quarantine of that file, and the crawl goes on without it. "
                "scrapy frontier quarantine lists what is there; once the spider can "
                "rebuild it, scrapy frontier quarantine --requeue puts it back.%s",
                self.path,
                url if url is not None else f"in row {row} (host {host!r})",
                error,
                " Further rows set aside are only counted (frontier/store/undecodable)."
                if self.undecodable == QUARANTINE_LOGGED
                else "",
            )
        self._op()

    def ack(self, token: object) -> None:
        assert isinstance(token, int)
        pending = self._ins_back.pop(token, None)
        if pending is None:
            self._ack_back.append((token,))
        elif self.keep_done:
            self._ins_done.append((token, pending[3]))
        self._done_since_purge = self.keep_done
        self._op()

    def purge_done(self, covered: int) -> None:
        """The seen-set holds the URLs of every row up to ``covered``: forget those
        acknowledged rows (at the next flush)."""
        if self._done_since_purge:
            self._purge_done = covered
            self._done_since_purge = False
            self._op()

    def back_items(self, host: str) -> Iterator[tuple[int, T]]:
        self.flush()
        for row, level, data in self._db.execute(
            "SELECT id, level, data FROM back WHERE host = ? AND leased = 0 "
            "ORDER BY level DESC, id",
            (host,),
        ):
            yield level, self._peek(row, data)

    # -- hosts -----------------------------------------------------------------

    def save_meta(self, values: dict[str, str]) -> None:
        """Keep ``values`` in the ``meta`` table beside the format marker (read by the
        command line), at once."""
        with self._sql("saving the crawl's settings"), _transaction(self._db):
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 sorted(values.items()))

    def save_rest(self, host: str, rest_seconds: float, last_fetch: float | None) -> None:
        self._rests[host] = (self.wall_clock() + rest_seconds, last_fetch)
        self._op()

    # -- durability ------------------------------------------------------------

    def flush(self) -> None:
        """Apply every pending write in one transaction, in order."""
        if not self._ops:
            return
        db = self._db
        # Write-through commits a handful of rows per request: single rows go
        # through execute(), and no context manager, to keep the fixed cost low.
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                if self._quarantine:
                    db.execute(QUARANTINE_SCHEMA)
                for sql, rows in (
                    ("INSERT INTO front VALUES (?, ?, ?, ?)", self._ins_front),
                    ("INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?)", self._quarantine),
                    (
                        "INSERT INTO back(id, host, level, data, leased) VALUES (?, ?, ?, ?, ?)",
                        list(self._ins_back.values()),
                    ),
                    ("DELETE FROM front WHERE id = ?", self._del_front),
                    ("UPDATE back SET leased = 1 WHERE id = ?", self._lease),
                    ("DELETE FROM back WHERE id = ?", self._del_back),
                    (("INSERT OR REPLACE INTO done SELECT id, data FROM back WHERE id = ?"
                      if self.keep_done else ""), self._ack_back),
                    ("DELETE FROM back WHERE id = ?", self._ack_back),
                    ("INSERT OR REPLACE INTO done VALUES (?, ?)", self._ins_done),
                ):
                    if not sql:
                        continue
                    if len(rows) == 1:
                        db.execute(sql, rows[0])
                    elif rows:
                        db.executemany(sql, rows)
                if self._purge_done is not None:
                    db.execute("DELETE FROM done WHERE id <= ?", (self._purge_done,))
                if self._rests:
                    db.executemany(
                        "INSERT OR REPLACE INTO hosts VALUES (?, ?, ?)",
                        [(h, until, last) for h, (until, last) in self._rests.items()],
                    )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.rollback()
                raise
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot write the frontier state {self.path} ({exc}). The last "
                f"{self._ops} operations are not saved; a restart with the same directory "
                "re-fetches what was in flight. Free disk space or fix permissions."
            ) from exc
        self._ins_front.clear()
        self._ins_back.clear()
        self._del_front.clear()
        self._lease.clear()
        self._del_back.clear()
        self._ack_back.clear()
        self._ins_done.clear()
        self._purge_done = None
        self._rests.clear()
        self._quarantine.clear()
        self._ops = 0
        self._pending_bytes = 0
        self.flushes += 1
        self._unsynced = True

    def last_row(self) -> int:
        """The id of the newest row (queued or moved), written or not."""
        return self._next_id - 1

    def start_ids_after(self, row: int) -> None:
        """New rows get ids above ``row``, even if the rows up to it are gone."""
        self._next_id = max(self._next_id, row + 1)

    def rows_after(self, row: int) -> Iterator[bytes]:
        """The saved data of the rows queued, leased or acknowledged (``done``) with ids
        above ``row``."""
        with self._sql("reading the newest rows"):
            for table in ("front", "back", "done"):
                cursor = self._db.execute(
                    f"SELECT data FROM {table} WHERE id > ? AND data IS NOT NULL", (row,))
                while rows := cursor.fetchmany(1000):
                    for (data,) in rows:
                        yield data

    def sync(self) -> None:
        """Flush, and make every commit so far durable (see files.sync_wal)."""
        self.flush()
        if not self._unsynced:
            return
        try:
            sync_wal(self.path)
        except OSError as exc:
            raise StoreError(
                f"cannot write the frontier state {self.path} to the disk ({describe(exc)}). "
                "A restart with the same directory re-fetches what was in flight. Check the "
                "disk and the file system."
            ) from exc
        self._unsynced = False

    def close(self) -> None:
        try:
            self.flush()
            with self._sql("writing its last changes"):
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            try:
                self._db.close()
            finally:
                self._unlock()

    def quarantine_size(self) -> int:
        """Rows in the quarantine table (from this run and earlier ones), written or not."""
        with self._sql("counting the quarantine"):
            exists = self._db.execute(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'quarantine'").fetchone()[0]
            written = (self._db.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
                       if exists else 0)
        return int(written) + len(self._quarantine)

    def disk_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def stats(self) -> dict[str, Any]:
        return {"flushes": self.flushes, "volatile": self.volatile, "undecodable": self.undecodable}


_Entry = tuple[int, int, bytes | None]


def _file_error(path: Path, problem: str, advice: str) -> StoreError:
    return StoreError(f"the frontier state {path} {problem}. {advice}")


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One explicit transaction. The connection runs in autocommit mode
    (``isolation_level=None``), where ``with db:`` would commit every statement
    -- every row of an ``executemany`` -- on its own."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.rollback()
        raise
    db.execute("COMMIT")



def _insort(window: list[_Entry], entry: _Entry) -> None:
    lo, hi = 0, len(window)
    key = entry[:2]
    while lo < hi:
        mid = (lo + hi) // 2
        if window[mid][:2] < key:
            lo = mid + 1
        else:
            hi = mid
    window.insert(lo, entry)
