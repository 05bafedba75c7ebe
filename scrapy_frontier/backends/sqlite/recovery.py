"""What a stopped crawl left in ``frontier.sqlite``, read when the next one opens it.

URLs that were leased when the process died go back to their queues: after a
``kill -9`` the repeats are at most the fetches that were in flight. Rows whose
request could not be saved lived in the stopped process only: they are dropped.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from scrapy_frontier.backends.sqlite.state import StateFile, transaction
from scrapy_frontier.errors import StoreError

logger = logging.getLogger("scrapy_frontier.store")


@dataclass(frozen=True, slots=True)
class Interrupted:
    """What :func:`release_leases` found and put back."""

    #: Hosts that had a fetch in flight, with their last known fetch time: their latest
    #: rest may not have been saved.
    hosts: dict[str, float | None]
    #: Leased rows queued again.
    leases: int
    #: Rows dropped: their requests could not be saved (volatile).
    lost: int


def release_leases(state: StateFile) -> Interrupted:
    """Return leased rows to their queues and drop the rows that were never saved, in
    one transaction (logged first)."""
    db = state.db
    try:
        hosts = dict(db.execute(
            "SELECT DISTINCT back.host, hosts.last_fetch FROM back "
            "LEFT JOIN hosts ON hosts.host = back.host WHERE back.leased = 1"
        ).fetchall())
        in_flight = db.execute("SELECT COUNT(*) FROM back WHERE leased = 1").fetchone()[0]
        if in_flight:
            # Logged before the rows change, so that a crash during recovery
            # cannot hide them: the next run would count them again.
            logger.info(
                "%s: %d requests were in flight when the crawl stopped; queueing them again",
                state.path,
                in_flight,
            )
        # Requests that could not be serialised lived in the stopped process only.
        lost = [
            row
            for table in ("front", "back")
            for row in db.execute(f"SELECT id, host FROM {table} WHERE data IS NULL")
        ]
        if lost:
            logger.error(
                "%s: %d requests that could not be saved (callbacks that are not spider "
                "methods, or meta that cannot be pickled) were lost when the crawl "
                "stopped; hosts: %s",
                state.path,
                len(lost),
                sorted({host for _, host in lost})[:20],
            )
        with transaction(db):
            db.execute("DELETE FROM front WHERE data IS NULL")
            db.execute("DELETE FROM back WHERE data IS NULL")
            leased = db.execute("UPDATE back SET leased = 0 WHERE leased = 1").rowcount
    except sqlite3.OperationalError as exc:
        raise state.file.classify(exc, "cannot be recovered",
                                  "nothing was changed in it") from exc
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"the frontier state {state.path} is corrupt or truncated ({exc}). Restore it "
            "from a backup; nothing was changed in it."
        ) from exc
    return Interrupted(hosts, leased, len(lost))


def back_queues(db: sqlite3.Connection) -> dict[str, int]:
    """The hosts with back queues, and their sizes."""
    return dict(db.execute("SELECT host, COUNT(*) FROM back GROUP BY host").fetchall())


def rests(db: sqlite3.Connection, now: float) -> dict[str, tuple[float, float | None]]:
    """Every resting host's rest as (seconds left, last fetch time); ``now``: wall clock."""
    return {
        host: (until - now, last)
        for host, until, last in db.execute(
            "SELECT host, rest_until, last_fetch FROM hosts WHERE rest_until > ?", (now,)
        )
    }


def rows_after(state: StateFile, row: int) -> Iterator[bytes]:
    """The saved data of the rows queued, leased or acknowledged (``done``) with ids
    above ``row``."""
    with state.sql("reading the newest rows"):
        for table in ("front", "back", "done"):
            cursor = state.db.execute(
                f"SELECT data FROM {table} WHERE id > ? AND data IS NOT NULL", (row,))
            while rows := cursor.fetchmany(1000):
                for (data,) in rows:
                    yield data


def last_id(db: sqlite3.Connection) -> int:
    """The highest row id in the queues and ``done``."""
    return int(max(
        db.execute("SELECT COALESCE(MAX(id), 0) FROM front").fetchone()[0],
        db.execute("SELECT COALESCE(MAX(id), 0) FROM back").fetchone()[0],
        db.execute("SELECT COALESCE(MAX(id), 0) FROM done").fetchone()[0],
    ))
