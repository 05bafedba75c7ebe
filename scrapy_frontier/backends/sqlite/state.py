"""``frontier.sqlite``'s connection: opening and checking the file, its lock, transactions,
durability and size on disk. The queue store (queue.py) decides what is written.

Layout (one file, WAL mode):

* ``front(id, level, host, data)`` -- the front queues, FIFO by ``id`` per level;
* ``back(id, host, level, leased, data)`` -- the back queues of active hosts,
  served by ``level DESC, id``; ``leased = 1`` while a fetch is in flight;
* ``done(id, data)`` -- with a seen-set beside this file (``SQLiteStore.keep_done``),
  the rows acknowledged since the seen-set's last write, so that a restart puts their
  URLs back in it (a page found again is then not fetched again); purged once the
  seen-set has them;
* ``hosts(host, rest_until, last_fetch)`` -- each host's rest, as wall-clock
  time so that it survives a restart;
* ``meta(key, value)`` -- format, version and spider name;
* ``quarantine(id, host, level, data, error, at)`` -- rows set aside because
  they cannot be rebuilt (created at the first one), kept for inspection.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from scrapy_frontier.backends.sqlite.files import SQLiteFile, describe, sync_wal
from scrapy_frontier.backends.sqlite.lock import FileLock
from scrapy_frontier.errors import StoreError

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

_SAVE_META = "INSERT OR REPLACE INTO meta VALUES (?, ?)"


def file_error(path: Path, problem: str, advice: str) -> StoreError:
    return StoreError(f"the frontier state {path} {problem}. {advice}")


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
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


class StateFile:
    """The open ``frontier.sqlite`` of one spider, held with its lock until :meth:`close`."""

    def __init__(self, path: Path, spider: str) -> None:
        self.path = path
        self.file = SQLiteFile(path, file_error, fmt=FORMAT, version=VERSION, what="state file")
        self._lock: FileLock | None = None
        #: Commits since the last :meth:`sync`.
        self.unsynced = False
        self.db = self._connect(spider)

    # -- opening -------------------------------------------------------------

    def _connect(self, spider: str) -> sqlite3.Connection:
        opened: list[sqlite3.Connection] = []
        try:
            return self._open_db(spider, opened)
        except BaseException as exc:
            for db in opened:
                db.close()
            self._unlock(refused=True)
            if isinstance(exc, sqlite3.Error):  # one mapping for every SQLite file (files.py)
                raise self.file.classify(exc, "cannot be opened",
                                         "nothing was changed in it") from exc
            raise

    def _open_db(self, spider: str, opened: list[sqlite3.Connection]) -> sqlite3.Connection:
        """Open, check and set up the file; a connection made is put in ``opened``, for
        :meth:`_connect` to close and map a failure."""
        path = self.path
        fresh = not path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self.file.error(path, f"cannot be created ({describe(exc)})",
                                  "Check that its directory can be created and written.") \
                from exc
        # The checks every scrapy-frontier SQLite file gets (backends/sqlite/files.py).
        if fresh:
            self.file.check_directory()
        else:
            self.file.check_file()
        # One crawl writes the file (see backends/sqlite/lock.py); readers may open it.
        self._lock = FileLock(path, file_error)
        db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=1.0
        )
        opened.append(db)
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
            raise self.file.error(
                path, f"is corrupt (quick_check: {quick})",
                "Nothing was changed. Restore it from a backup, or move it away to start "
                "afresh (the crawl then starts without its URLs).")
        db.executescript(SCHEMA)
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if fresh or not meta:
            with transaction(db):
                db.executemany(
                    _SAVE_META,
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
        if "meta" not in self.file.check_tables(db, "meta", empty_ok=True):
            return  # no tables: it gets the schema
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if meta and meta.get("format") != FORMAT:
            raise file_error(
                self.path, f"holds format {meta.get('format')!r}, not {FORMAT!r}",
                "It is not a scrapy-frontier state file: move it, or point FRONTIER_PATH / "
                "JOBDIR elsewhere. Nothing was changed in it.",
            )

    def _unlock(self, *, refused: bool = False) -> None:
        if self._lock is not None:
            self._lock.end(refused=refused)
            self._lock = None

    # -- using it ------------------------------------------------------------

    @contextlib.contextmanager
    def sql(self, doing: str) -> Iterator[None]:
        """SQLite errors as a StoreError that names the file and says what to do."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self.file.classify(
                exc, doing, "the state as of its last write is kept: run the crawl again "
                "once the problem is fixed") from exc

    def save_meta(self, values: dict[str, str]) -> None:
        """Keep ``values`` in the ``meta`` table, at once."""
        with self.sql("saving the crawl's settings"), transaction(self.db):
            self.db.executemany(_SAVE_META, sorted(values.items()))

    def quarantine_size(self) -> int:
        """Rows written to the quarantine table (by this run and earlier ones)."""
        db = self.db
        with self.sql("counting the quarantine"):
            exists = db.execute(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'quarantine'").fetchone()[0]
            return int(db.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
                       if exists else 0)

    def sync(self) -> None:
        """Make every commit so far durable (see files.sync_wal)."""
        if not self.unsynced:
            return
        try:
            sync_wal(self.path)
        except OSError as exc:
            raise StoreError(
                f"cannot write the frontier state {self.path} to the disk ({describe(exc)}). "
                "A restart with the same directory re-fetches what was in flight. Check the "
                "disk and the file system."
            ) from exc
        self.unsynced = False

    def disk_bytes(self) -> int:
        """The file's size with its write-ahead log and shared memory."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def checkpoint(self) -> None:
        """Fold the WAL back into the file (before :meth:`close`)."""
        with self.sql("writing its last changes"):
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        """Close, and release the lock (even if closing fails)."""
        try:
            self.db.close()
        finally:
            self._unlock()
