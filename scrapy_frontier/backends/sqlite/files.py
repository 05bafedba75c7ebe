"""Checks shared by the project's SQLite files (seen-set, page history).

Each file carries a ``frontier_meta`` table with its ``format`` and ``version``.
A file that cannot be used -- not SQLite, another program's database, another
format or version, truncated, corrupt, read-only, on a full disk, locked by
another crawl -- gives an error naming the file and what to do. Nothing here
deletes, resets or rewrites a file to make an error go away.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scrapy_frontier.backends.sqlite.lock import FileLock

logger = logging.getLogger("scrapy_frontier.store")

_HEADER = b"SQLite format 3\x00"

#: Builds the caller's exception from (path, problem, advice).
ErrorFactory = Callable[[Path, str, str], Exception]


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


#: Room the three state files' write-ahead logs take before a checkpoint folds them back:
#: frontier.sqlite checkpoints every 8192 pages (32 MiB), the others every 1000 (4 MiB).
DISK_FULL_HEADROOM_MB = 48


class SQLiteFile:
    """The checks for one file; ``what`` names its contents in messages ("seen-set")."""

    def __init__(
        self, path: Path, error: ErrorFactory, *, fmt: str, version: int, what: str
    ) -> None:
        self.path = path
        self.error = error
        self.fmt = fmt
        self.version = version
        self.what = what

    def check_directory(self) -> None:
        parent = self.path.parent
        if not parent.is_dir():
            raise self.error(
                self.path, f"its directory {parent} does not exist or is not a directory",
                "Create the directory, or point FRONTIER_PATH / JOBDIR elsewhere.",
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise self.error(
                self.path, f"its directory {parent} is not writable",
                "Make it writable for this user, or point FRONTIER_PATH / JOBDIR elsewhere.",
            )

    def check_file(self) -> None:
        """An existing file must look like a whole SQLite database."""
        path = self.path
        if not path.is_file():
            raise self.error(path, "is not a regular file",
                             "Move it away, or point FRONTIER_PATH / JOBDIR elsewhere.")
        size = path.stat().st_size
        if size == 0:
            self.check_directory()
            return  # an empty file holds nothing to lose: it gets the schema
        try:
            with open(path, "rb") as f:
                header = f.read(100)
        except OSError as exc:
            raise self.error(path, f"cannot be read ({describe(exc)})",
                             "Check its permissions.") from exc
        if len(header) < 100 or not header.startswith(_HEADER):
            raise self.error(
                path, "is not an SQLite database (wrong header)",
                "It was not written by scrapy-frontier, or is damaged: move it away (the "
                f"crawl then starts with an empty {self.what}) or restore it from a backup.",
            )
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        pages = int.from_bytes(header[28:32], "big")
        # A checkpoint cut short (full disk, crash) leaves the file shorter than its
        # header says while the -wal file still holds the missing pages: SQLite
        # replays them on open, and real damage shows in the checks that follow.
        wal = path.with_name(path.name + "-wal")
        if wal.is_file() and wal.stat().st_size > 0:
            return
        # The in-header page count is valid when the change counter matches
        # "version-valid-for" (SQLite file format, section 1.3.7).
        if header[24:28] == header[92:96] and pages and size < pages * page_size:
            raise self.error(
                path,
                f"is truncated ({size} bytes, its header says {pages * page_size})",
                "It was cut short (a failed copy or a full disk?): restore it from a backup, "
                f"or move it away to start with an empty {self.what}.",
            )

    def check_tables(self, conn: sqlite3.Connection, meta: str = "frontier_meta", *,
                     empty_ok: bool = False) -> set[str]:
        """The tables of an existing file, after checking it has our ``meta`` table.

        Reads only, so run it before anything writes: another program's database is
        refused unchanged. ``empty_ok``: a database without tables may get the schema.
        """
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if meta not in tables and not (empty_ok and not tables):
            raise self.error(
                self.path,
                f"is an SQLite database, but not a scrapy-frontier {self.what} "
                f"(tables: {', '.join(sorted(tables)) or 'none'})",
                "Another program's file is in the way: move it, or point FRONTIER_PATH / "
                "JOBDIR elsewhere. Nothing was changed in it.",
            )
        return tables

    def check_meta(self, conn: sqlite3.Connection, table: str) -> dict[str, Any]:
        """The ``frontier_meta`` of an existing file, after checking format and version."""
        tables = self.check_tables(conn)
        meta = dict(conn.execute("SELECT key, value FROM frontier_meta").fetchall())
        if meta.get("format") != self.fmt:
            raise self.error(
                self.path, f"holds format {meta.get('format')!r}, not {self.fmt!r}",
                "Another scrapy-frontier file is in the way: move it, or point "
                "FRONTIER_PATH / JOBDIR elsewhere. Nothing was changed in it.",
            )
        version = meta.get("version")
        if version != self.version:
            raise self.error(
                self.path,
                f"was written in format version {version!r}; this scrapy-frontier reads "
                f"version {self.version}",
                "Use the scrapy-frontier release that wrote it, or move it away to start with "
                f"an empty {self.what}. Nothing was changed in it.",
            )
        if table not in tables:
            raise self.error(self.path, f"has no {table!r} table (damaged)",
                             "Restore it from a backup, or move it away.")
        return meta

    def _writable(self) -> bool:
        """Whether SQLite can write here: the file (if any) and its directory (for -wal)."""
        parent = self.path.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            return False
        return not self.path.exists() or os.access(self.path, os.W_OK)

    def classify(self, exc: sqlite3.Error, doing: str, kept: str) -> Exception:
        """The error for an SQLite failure while ``doing``; ``kept`` says what survives."""
        text = str(exc).lower()
        code = getattr(exc, "sqlite_errorcode", None)
        path = self.path
        if "disk is full" in text or code == getattr(sqlite3, "SQLITE_FULL", 13):
            return self.error(
                path, f"{doing}: the disk is full ({describe(exc)})",
                f"Free some space and run the crawl again; {kept}. Free at least "
                f"{DISK_FULL_HEADROOM_MB} MB more than the crawl will add: each state file's "
                "write-ahead log grows to a few MB (frontier.sqlite's to 32 MB) before SQLite "
                "folds it back into the file, so a few freed MB fill up again at once.",
            )
        if ("readonly" in text or "read-only" in text
                or (("disk i/o" in text or "unable to open" in text) and not self._writable())):
            return self.error(
                path, f"{doing}: it is read-only ({describe(exc)})",
                "Make the file and its directory writable, or point FRONTIER_PATH / JOBDIR "
                "elsewhere.",
            )
        if "locked" in text or "busy" in text:
            return self.error(
                path, f"{doing}: it is in use by another process ({describe(exc)})",
                "Another crawl is using this job directory: stop it, or use another "
                "FRONTIER_PATH / JOBDIR.",
            )
        if "unable to open" in text:
            return self.error(path, f"{doing} ({describe(exc)})",
                              "Check that its directory exists and is writable.")
        if "malformed" in text or "not a database" in text or "corrupt" in text:
            return self.error(
                path, f"{doing}: it is corrupt ({describe(exc)})",
                f"Restore it from a backup, or move it away to start with an empty {self.what}.",
            )
        return self.error(path, f"{doing} ({describe(exc)})",
                          "Check the file and the disk it is on.")


class WALFileStore:
    """Closing for a store kept in one SQLite file in WAL mode (seen-set, page history).

    The store sets ``_conn``, ``_file``, ``_closed`` and ``path`` and provides
    ``flush()`` and ``_error()``.
    """

    path: Path
    _conn: sqlite3.Connection
    _file: SQLiteFile
    _closed: bool
    _lock: FileLock | None = None

    def flush(self) -> None:  # pragma: no cover - provided by the store
        raise NotImplementedError

    def _setup(self, *, fresh: bool) -> None:  # pragma: no cover - provided by the store
        raise NotImplementedError

    def _open(self) -> None:
        """Check the file (or its directory), connect, and let the store set up its schema."""
        existed = self.path.exists()
        if existed:
            self._file.check_file()
        else:
            self._file.check_directory()
        # One crawl writes the file (see lock.py); readers may open it beside it.
        self._lock = FileLock(self.path, self._file.error)
        try:
            # isolation_level=None: transactions are explicit (BEGIN ... COMMIT).
            self._conn = sqlite3.connect(self.path, timeout=1.0, isolation_level=None)
        except sqlite3.Error as exc:
            self._unlock(refused=True)
            raise self._error(exc, "cannot be opened") from exc
        try:
            self._setup(fresh=not existed or self.path.stat().st_size == 0
                        or self._blank())
        except sqlite3.Error as exc:
            self._conn.close()
            self._unlock(refused=True)
            raise self._error(exc, "cannot be read") from exc
        except BaseException:
            self._conn.close()
            self._unlock(refused=True)
            raise

    def _blank(self) -> bool:
        """An SQLite file without a single table holds nothing to lose: it gets the schema.

        A crash or a file-system error right after the file was created leaves one like
        this (its first commit never reached the disk).
        """
        if self._conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None:
            return False
        logger.info("%s %s holds no tables (its first write never reached the disk): "
                    "it gets an empty %s", self._file.what, self.path, self._file.what)
        return True

    def _unlock(self, *, refused: bool = False) -> None:
        if self._lock is not None:
            self._lock.end(refused=refused)
            self._lock = None

    def _error(self, exc: sqlite3.Error, doing: str) -> Exception:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:
        """Flush, checkpoint the WAL into the main file, and close. Idempotent."""
        if self._closed:
            return
        try:
            self.flush()
        except BaseException:
            self._closed = True
            self._conn.close()
            self._unlock()
            raise
        self._closed = True
        try:
            checkpoint_and_close(self._conn, lambda exc: self._error(exc, "checkpoint failed"))
        finally:
            self._unlock()

    def sync(self) -> None:
        """Flush, and make every commit so far durable (see :func:`sync_wal`)."""
        self.flush()
        try:
            sync_wal(self.path)
        except OSError as exc:
            raise self._file.error(self.path, f"cannot be written to the disk ({describe(exc)})",
                                   "Check the disk and the file system.") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise self._file.error(self.path, "is closed", "Open a new store to use it again.")


def checkpoint_and_close(conn: sqlite3.Connection, error: Callable[[sqlite3.Error], Exception]
                         ) -> None:
    """Checkpoint the WAL into the main file and close the connection (closed even on error)."""
    try:
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise error(exc) from exc
    finally:
        conn.close()


def sync_wal(path: Path) -> None:
    """fsync ``path``'s write-ahead log: its commits so far survive a power loss.

    With ``synchronous=NORMAL`` a commit reaches only the page cache, and the kernel
    writes files back in any order. A store whose commits must not get ahead of
    another's (the seen-set after the queue, queue acks after the page history)
    syncs the other first. Raises OSError.
    """
    try:
        fd = os.open(path.with_name(path.name + "-wal"), os.O_RDONLY)
    except FileNotFoundError:
        return  # no log: every commit is in the main file, which checkpoints sync
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def exposed(directory: str | os.PathLike[str], names: tuple[str, ...]) -> str | None:
    """Why the crawl's files are outside its user's own boundary, or None: the directory
    or one of its files ``names`` (those that exist) is owned by another user, or may be
    written by the group or others. The crawl refuses to open such a directory."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return None  # no POSIX owner and mode bits to go by
    me = getuid()
    base = Path(directory)
    for path in (base, *(base / name for name in names)):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        if st.st_uid != me:
            return f"{path} is owned by user id {st.st_uid}, not this user ({me})"
        if st.st_mode & 0o022:
            return f"{path} may be written by others (mode {st.st_mode & 0o777:o})"
    return None
