"""Fault injection for the stores' tests (issue 13): real files, real Redis, failing on cue.

SQLite: :class:`SQLiteFaults` counts the statements a store sends through its
connection (``execute``, ``executemany``, ``executescript``, ``commit``,
``rollback``) and, at statement ``at``, raises ``sqlite3.OperationalError``
("database or disk is full", "disk I/O error") or simulates a ``kill -9``:
the files are copied as they are on disk at that instant, :class:`Killed` is
raised, and every later call on any connection of the plan raises it too.
:meth:`SQLiteFaults.die` then ends the "process": it closes the real
connections and puts the files back as the kill left them (for an error
fault, as they are now), so that a fresh store opening the file sees exactly
what a crashed process leaves -- the last committed transaction.

Install it with :meth:`SQLiteFaults.install` (a pytest ``MonkeyPatch``): it
replaces the ``sqlite3`` module seen by the SQLite store modules with a shim
whose ``connect`` returns a :class:`FaultyConnection`; everything else
(``sqlite3.Error``...) is the real module's.

Redis: :class:`RedisFaults` builds clients whose connections count the
commands they send (pipelines count once) and, at command ``at``, fail with
``redis.exceptions.ConnectionError``: ``mode="before"`` before the command
reaches Redis, ``mode="after"`` once Redis has run it and the reply is lost;
the next ``down`` commands fail too (Redis still away), then Redis is back.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

DISK_FULL: Final = "database or disk is full"
IO_ERROR: Final = "disk I/O error"
KILL: Final = "kill"
SQLiteFault = Literal["database or disk is full", "disk I/O error", "kill"]

#: The store modules whose ``sqlite3`` the shim replaces (files.py opens seen/history).
STORE_MODULES = (
    "scrapy_frontier.backends.sqlite.state",
    "scrapy_frontier.backends.sqlite.files",
    "scrapy_frontier.backends.sqlite.seen",
    "scrapy_frontier.backends.sqlite.history",
)
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "BEGIN", "COMMIT", "CREATE")


class Killed(BaseException):
    """The simulated process died: raised at the fault and by every later call.

    A BaseException, like SystemExit: no ``except Exception`` in a store may
    carry on after it, as no code runs after a real ``kill -9``.
    """


def is_write(statement: str) -> bool:
    """Whether a logged statement writes (or opens/ends a write transaction)."""
    head = statement.lstrip().upper()
    return head.startswith(_WRITES) or head.startswith("PRAGMA JOURNAL_MODE") or (
        head.startswith("SCRIPT")
    )


class SQLiteFaults:
    """One fault plan, shared by every connection opened while it is installed.

    ``at``: the 1-based statement number that fails (None: count only).
    ``fault``: :data:`DISK_FULL`, :data:`IO_ERROR` or :data:`KILL`.
    ``sticky``: an error fault keeps failing every later statement (a disk that
    stays full) except rollbacks; otherwise it fails once.
    """

    def __init__(self, at: int | None = None, fault: SQLiteFault = DISK_FULL, *,
                 sticky: bool = False) -> None:
        self.at = at
        self.fault = fault
        self.sticky = sticky
        self.count = 0
        self.log: list[str] = []
        self.fired = False
        self.killed = False
        self.armed = True
        self.connections: list[sqlite3.Connection] = []
        self._paths: set[Path] = set()
        self._image: dict[Path, bytes] | None = None

    # -- installing --------------------------------------------------------------------

    def install(self, monkeypatch: pytest.MonkeyPatch, modules: Iterable[str] = STORE_MODULES
                ) -> SQLiteFaults:
        shim = _SQLiteShim(self)
        for name in modules:
            monkeypatch.setattr(f"{name}.sqlite3", shim)
        return self

    def connect(self, database: Any, *args: Any, **kwargs: Any) -> FaultyConnection:
        if self.killed:
            raise Killed("the process was killed")
        conn = sqlite3.connect(database, *args, **kwargs)
        self.connections.append(conn)
        if str(database) != ":memory:":
            self._paths.add(Path(database))
        return FaultyConnection(conn, self)

    def disarm(self) -> None:
        """No more faults (counting goes on): the disk has room again."""
        self.armed = False

    # -- the fault -----------------------------------------------------------------------

    def _statement(self, what: str, sql: str) -> None:
        if self.killed:
            raise Killed("the process was killed")
        self.count += 1
        self.log.append(f"{what} {sql}".strip() if what != "execute" else sql)
        due = self.armed and self.at is not None and (
            self.count == self.at or (self.sticky and self.fired and self.fault != KILL))
        if not due or (self.fired and what == "rollback"):
            return
        self.fired = True
        if self.fault == KILL:
            self._image = self._snapshot()
            self.killed = True
            raise Killed(f"killed at statement {self.count}: {sql[:60]}")
        raise sqlite3.OperationalError(self.fault)

    def _snapshot(self) -> dict[Path, bytes]:
        image: dict[Path, bytes] = {}
        for path in self._paths:
            for suffix in ("", "-wal", "-journal", "-shm"):
                p = Path(str(path) + suffix)
                if p.exists():
                    image[p] = p.read_bytes()
        return image

    def die(self) -> None:
        """End the process: close the real connections and leave the files as the kill
        left them (as they are now, for an error fault or no fault)."""
        image = self._image if self._image is not None else self._snapshot()
        self.killed = True
        for conn in self.connections:
            with contextlib.suppress(sqlite3.Error):
                conn.close()  # an open transaction is rolled back, never committed
        for path in self._paths:
            for suffix in ("", "-wal", "-journal", "-shm"):
                p = Path(str(path) + suffix)
                if p not in image and p.exists():
                    p.unlink()
        for p, data in image.items():
            p.write_bytes(data)
        # The kernel drops a dead process's flock: a lock file unlinked here is a free
        # lock for the next opener (the dead store's descriptor no longer matters).
        for path in self._paths:
            Path(str(path) + ".lock").unlink(missing_ok=True)

    @property
    def writes(self) -> list[int]:
        """1-based numbers of the logged statements that write."""
        return [i + 1 for i, s in enumerate(self.log) if is_write(s)]


class _SQLiteShim:
    """Stands in for the ``sqlite3`` module: ``connect`` is the plan's, the rest is real."""

    def __init__(self, plan: SQLiteFaults) -> None:
        self._plan = plan

    def connect(self, database: Any, *args: Any, **kwargs: Any) -> FaultyConnection:
        return self._plan.connect(database, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(sqlite3, name)


class FaultyConnection:
    """A proxy for ``sqlite3.Connection`` that reports every statement to its plan."""

    def __init__(self, conn: sqlite3.Connection, plan: SQLiteFaults) -> None:
        self._conn = conn
        self._plan = plan

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._plan._statement("execute", sql)
        return self._conn.execute(sql, *args)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        self._plan._statement("executemany", sql)
        return self._conn.executemany(sql, rows)

    def executescript(self, script: str) -> sqlite3.Cursor:
        self._plan._statement("script", " ".join(script.split())[:40])
        return self._conn.executescript(script)

    def commit(self) -> None:
        self._plan._statement("commit", "")
        self._conn.commit()

    def rollback(self) -> None:
        self._plan._statement("rollback", "")
        self._conn.rollback()

    def close(self) -> None:
        if self._plan.killed:
            raise Killed("the process was killed")
        self._conn.close()

    def __getattr__(self, name: str) -> Any:
        if self._plan.killed:
            raise Killed("the process was killed")
        return getattr(self._conn, name)


# -- Redis ---------------------------------------------------------------------------------


class RedisFaults:
    """Commands counted across every connection of the clients it builds."""

    def __init__(self, at: int | None = None, *, mode: Literal["before", "after"] = "before",
                 down: int = 0) -> None:
        self.at = at
        self.mode = mode
        self.down = down
        self.count = 0
        self.failures = 0
        #: The command at ``at`` ran in Redis although its caller got an error.
        self.executed_unseen = False

    def client(self, port: int) -> redis.Redis:
        cls = type("FaultyRedisConnection", (_FaultyRedisConnection,), {"plan": self})
        pool = redis.ConnectionPool(host="127.0.0.1", port=port, connection_class=cls,
                                    socket_timeout=5, socket_connect_timeout=2)
        return redis.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))

    def _fails(self) -> Literal["no", "before", "after"]:
        self.count += 1
        if self.at is None or not self.at <= self.count <= self.at + self.down:
            return "no"
        self.failures += 1
        # Only the first failing command may have run: Redis is away for the rest.
        return self.mode if self.count == self.at else "before"


class _FaultyRedisConnection(redis.Connection):
    plan: RedisFaults
    _lose_reply = False

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        fails = self.plan._fails()
        if fails == "before":
            self.disconnect()
            raise redis.exceptions.ConnectionError("injected: Redis went away before the command")
        super().send_packed_command(command, check_health)
        if fails == "after":
            self._lose_reply = True

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        reply = super().read_response(*args, **kwargs)
        if self._lose_reply:
            self._lose_reply = False
            self.plan.executed_unseen = True
            self.disconnect()
            raise redis.exceptions.ConnectionError("injected: Redis went away before replying")
        return reply

