"""``control.sqlite``: what operators asked of a crawl, and what the crawl says back.

Kept apart from ``frontier.sqlite`` so that ``scrapy frontier block`` never takes the
crawl's write lock, and so that the crawl reads one small table, not its queues:

* ``controls(host, blocked_until, delay, retired, budget)`` -- written by the command.
  ``blocked_until`` is wall-clock time (``inf``: until unblocked), ``delay`` a minimum
  rest in seconds, ``retired`` 1 for a host retired by hand (``RETIRED``) and -1 for one
  taken back by hand whatever retired it (``TAKEN_BACK``), ``budget`` a per-host
  fetch budget (NULL: the settings' budget). A host with nothing left set is deleted.
* ``crawl_hosts(host, fetched, closed)`` -- written by the crawl from its control timer:
  fetches per host while a budget is in force, and why a host was closed
  (``budget``, ``failures``, ``retired``).
* ``recrawl_requests(id, fp, host)`` -- written by ``scrapy frontier recrawl``: make the
  page ``fp`` due now, or every page of ``host``, or (both NULL) every page. The crawl
  applies each row to its page history and deletes it.
* ``policies(key, fields)`` -- written by ``scrapy frontier policy``: the per-host policy's
  steered entries, each key as in ``FRONTIER_HOST_POLICY`` and its fields as JSON.
* ``robots(origin, expires, record)`` -- written by the crawl: each site's last
  definitive robots.txt answer (``scrapy_frontier.core.robots_cache``), kept until
  ``expires`` (wall-clock time, 30 days after its fetch): the next run does not fetch it
  again while it is fresh (FRONTIER_ROBOTS_CACHE), and uses it after that while the
  site's robots.txt is unreachable.
* ``traps(host, state, budget)`` -- written by the crawl when it contains a crawler trap
  (``contained``, with the budget it gave the host), and by ``scrapy frontier budget``, which
  releases a contained host (``released``: it is not judged again).
* ``control_meta(key, value)`` -- ``format``, ``version`` and ``seq``, raised by every
  command write: the crawl polls ``seq`` (one indexed read) and reads the controls
  only when it changed.

Both sides write rarely and in short transactions with a busy timeout; a crawl that
finds the file busy tries again at its next poll.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrapy_frontier.errors import StoreError

FILE = "control.sqlite"
FORMAT = "scrapy-frontier/control"
VERSION = 1

#: ``controls.retired``: retired by hand (``scrapy frontier retire``), and taken back by
#: hand (``scrapy frontier unretire``, whether it was retired by hand or after failures; a
#: host over its budget stays retired until its budget is raised); 0: neither.
RETIRED, TAKEN_BACK = 1, -1

RAISE_SEQ = "UPDATE control_meta SET value = value + 1 WHERE key = 'seq'"

SCHEMA = """
CREATE TABLE IF NOT EXISTS control_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS controls(
    host TEXT PRIMARY KEY, blocked_until REAL, delay REAL, retired INTEGER NOT NULL DEFAULT 0,
    budget INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS crawl_hosts(
    host TEXT PRIMARY KEY, fetched INTEGER NOT NULL DEFAULT 0, closed TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS recrawl_requests(
    id INTEGER PRIMARY KEY, fp INTEGER, host TEXT);
CREATE TABLE IF NOT EXISTS policies(key TEXT PRIMARY KEY, fields TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS robots(
    origin TEXT PRIMARY KEY, expires REAL NOT NULL, record BLOB NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS robots_expires ON robots(expires);
CREATE TABLE IF NOT EXISTS traps(
    host TEXT PRIMARY KEY, state TEXT NOT NULL, budget INTEGER) WITHOUT ROWID;
"""

#: ``traps.state``: a host contained as a crawler trap, and one an operator released.
CONTAINED, RELEASED = "contained", "released"


@dataclass(slots=True)
class HostControl:
    """The operator's wishes for one host (wall-clock times)."""

    host: str
    blocked_until: float | None = None
    delay: float | None = None
    retired: int = 0
    """``RETIRED``, ``TAKEN_BACK`` or 0."""
    budget: int | None = None

    def empty(self) -> bool:
        return (self.blocked_until is None and self.delay is None and self.retired == 0
                and self.budget is None)

    def blocked(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self.blocked_until is not None and self.blocked_until > now


def _error(path: Path, problem: str, advice: str) -> StoreError:
    return StoreError(f"the control file {path} {problem}. {advice}")


class ControlFile:
    """One connection to ``control.sqlite`` (created when missing unless ``create=False``)."""

    def __init__(self, directory: str | Path, *, create: bool = True, readonly: bool = False,
                 timeout: float = 5.0) -> None:
        self.path = Path(directory) / FILE
        self.conn: sqlite3.Connection | None = None
        if (readonly or not create) and not self.path.exists():
            return
        if readonly:
            try:
                self.conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                            timeout=timeout, isolation_level=None)
            except sqlite3.Error as exc:
                raise _error(self.path, f"cannot be read ({type(exc).__name__}: {exc})",
                             "Check its permissions.") from exc
            return
        try:
            self.conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                        check_same_thread=False)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            # One transaction: a file of another format is left as it was, and a new file's
            # first write-ahead log stays small (a nearly full disk still opens it).
            with self._writing() as conn:
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                meta = dict(conn.execute("SELECT key, value FROM control_meta").fetchall())
                if not meta:
                    conn.executemany(
                        "INSERT OR IGNORE INTO control_meta VALUES (?, ?)",
                        [("format", FORMAT), ("version", VERSION), ("seq", 0)])
                elif meta.get("format") != FORMAT or meta.get("version") != VERSION:
                    raise _error(
                        self.path, f"holds format {meta.get('format')!r} version "
                        f"{meta.get('version')!r}; this scrapy-frontier reads {FORMAT!r} "
                        f"version {VERSION}", "Use the scrapy-frontier release that wrote it. "
                        "Nothing was changed in it.")
        except sqlite3.Error as exc:
            raise _error(self.path, f"cannot be used ({type(exc).__name__}: {exc})",
                         "Check that the directory is writable and the file is not "
                         "damaged.") from exc

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (rolled back on any error)."""
        assert self.conn is not None
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise

    # -- the crawl's side -------------------------------------------------------------

    def seq(self) -> int:
        if self.conn is None:
            return 0
        row = self.conn.execute("SELECT value FROM control_meta WHERE key = 'seq'").fetchone()
        return int(row[0]) if row else 0

    def controls(self) -> dict[str, HostControl]:
        if self.conn is None:
            return {}
        rows = self.conn.execute(
            "SELECT host, blocked_until, delay, retired, budget FROM controls").fetchall()
        return {h: HostControl(h, b, d, int(r), g) for h, b, d, r, g in rows}

    def save_crawl_hosts(self, rows: dict[str, tuple[int, str | None]]) -> None:
        """(fetched, closed) per host, written by the crawl."""
        with self._writing() as conn:
            conn.executemany(
                "INSERT INTO crawl_hosts VALUES (?, ?, ?) ON CONFLICT(host) DO UPDATE SET "
                "fetched = excluded.fetched, closed = excluded.closed",
                [(h, n, c) for h, (n, c) in rows.items()])

    def recrawl_requests(self) -> list[tuple[int, int | None, str | None]]:
        """(id, fp, host) of each recrawl asked for and not applied yet, oldest first."""
        if self.conn is None:
            return []
        return [(int(i), None if fp is None else int(fp), host) for i, fp, host in
                self.conn.execute("SELECT id, fp, host FROM recrawl_requests ORDER BY id")]

    def applied_recrawls(self, last_id: int) -> None:
        """The crawl applied every recrawl request up to ``last_id``."""
        assert self.conn is not None
        self.conn.execute("DELETE FROM recrawl_requests WHERE id <= ?", (last_id,))

    def request_recrawl(self, *, fp: int | None = None, host: str | None = None) -> None:
        """Ask for the page ``fp``, or the pages of ``host``, or every page, to be due now."""
        with self._writing() as conn:
            conn.execute("INSERT INTO recrawl_requests(fp, host) VALUES (?, ?)", (fp, host))
            conn.execute(RAISE_SEQ)

    def policies(self) -> dict[str, Any]:
        """The steered entries: key -> fields (a text that is not JSON stays as it is, for
        the crawl to refuse with its key)."""
        if self.conn is None:
            return {}
        out: dict[str, Any] = {}
        for key, text in self.conn.execute("SELECT key, fields FROM policies ORDER BY key"):
            try:
                out[key] = json.loads(text)
            except (TypeError, ValueError, RecursionError):
                out[key] = text
        return out

    def set_policy(self, key: str, fields: dict[str, Any] | None) -> bool:
        """Set the steered entry ``key`` (None: clear it) and raise ``seq``, in one
        transaction. Returns whether there was one before."""
        with self._writing() as conn:
            was = conn.execute("SELECT 1 FROM policies WHERE key = ?", (key,)).fetchone()
            if fields is None:
                conn.execute("DELETE FROM policies WHERE key = ?", (key,))
            else:
                conn.execute("INSERT OR REPLACE INTO policies VALUES (?, ?)",
                             (key, json.dumps(fields, sort_keys=True)))
            conn.execute(RAISE_SEQ)
        return was is not None

    def robots(self, origin: str, now: float) -> object:
        """The robots.txt record kept for ``origin`` until after ``now``, as stored (not
        checked: the caller checks it), or None."""
        if self.conn is None:
            return None
        row = self.conn.execute("SELECT record FROM robots WHERE origin = ? AND expires > ?",
                                (origin, now)).fetchone()
        return None if row is None else row[0]

    def save_robots(self, origin: str, record: bytes, expires: float, now: float) -> None:
        """Keep ``record`` for ``origin`` until ``expires``; records expired at ``now`` go."""
        with self._writing() as conn:
            conn.execute("DELETE FROM robots WHERE expires <= ?", (now,))
            conn.execute("INSERT OR REPLACE INTO robots VALUES (?, ?, ?)",
                         (origin, expires, record))
    def traps(self) -> dict[str, tuple[str, int | None]]:
        """host -> (state, budget) of the crawler traps contained or released (a file that
        an older release wrote, read only, has none)."""
        if self.conn is None or not self.conn.execute(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'traps'").fetchone()[0]:
            return {}
        return {str(h): (str(st), None if b is None else int(b)) for h, st, b in
                self.conn.execute("SELECT host, state, budget FROM traps")}

    def contained(self, host: str, budget: int) -> None:
        """The crawl contained ``host`` as a trap with ``budget`` (unless released)."""
        with self._writing() as conn:
            conn.execute("INSERT INTO traps VALUES (?, ?, ?) ON CONFLICT(host) DO UPDATE SET "
                         "budget = excluded.budget WHERE state = ?",
                         (host, CONTAINED, budget, CONTAINED))

    def crawl_hosts(self) -> dict[str, tuple[int, str | None]]:
        if self.conn is None:
            return {}
        rows = self.conn.execute("SELECT host, fetched, closed FROM crawl_hosts").fetchall()
        return {h: (int(n), c) for h, n, c in rows}

    # -- the command's side -----------------------------------------------------------

    def update(self, host: str, **changes: object) -> HostControl:
        """Change some fields of ``host``'s controls and raise ``seq``, in one transaction."""
        with self._writing() as conn:
            row = conn.execute(
                "SELECT blocked_until, delay, retired, budget FROM controls WHERE host = ?",
                (host,)).fetchone()
            control = HostControl(host) if row is None else HostControl(
                host, row[0], row[1], int(row[2]), row[3])
            for name, value in changes.items():
                setattr(control, name, value)
            if "budget" in changes:  # an operator's budget releases a contained trap
                conn.execute("UPDATE traps SET state = ? WHERE host = ? AND state = ?",
                             (RELEASED, host, CONTAINED))
            if control.empty():
                conn.execute("DELETE FROM controls WHERE host = ?", (host,))
            else:
                conn.execute(
                    "INSERT OR REPLACE INTO controls VALUES (?, ?, ?, ?, ?)",
                    (host, control.blocked_until, control.delay, int(control.retired),
                     control.budget))
            conn.execute(RAISE_SEQ)
        return control


def wall_to_clock(until: float | None, clock_now: float, wall_now: float) -> float | None:
    """A wall-clock block end on the crawl's (monotonic) clock."""
    if until is None:
        return None
    return math.inf if math.isinf(until) else clock_now + (until - wall_now)


__all__ = ["CONTAINED", "FILE", "RELEASED", "RETIRED", "TAKEN_BACK", "ControlFile",
           "HostControl", "wall_to_clock"]
