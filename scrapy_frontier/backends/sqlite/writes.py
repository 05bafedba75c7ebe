"""The queue store's writes not committed yet, applied in order in one transaction.

A crash loses a suffix of the operations and never reorders them: an acknowledgement
is never durable before the URLs queued ahead of it.
"""

from __future__ import annotations

import sqlite3

from scrapy_frontier.backends.sqlite.state import QUARANTINE_SCHEMA

INSERT_FRONT = "INSERT INTO front VALUES (?, ?, ?, ?)"
INSERT_QUARANTINE = "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?)"
INSERT_BACK = "INSERT INTO back(id, host, level, data, leased) VALUES (?, ?, ?, ?, ?)"
DELETE_FRONT = "DELETE FROM front WHERE id = ?"
LEASE_BACK = "UPDATE back SET leased = 1 WHERE id = ?"
DELETE_BACK = "DELETE FROM back WHERE id = ?"
COPY_DONE = "INSERT OR REPLACE INTO done SELECT id, data FROM back WHERE id = ?"
INSERT_DONE = "INSERT OR REPLACE INTO done VALUES (?, ?)"
PURGE_DONE = "DELETE FROM done WHERE id <= ?"
SAVE_RESTS = "INSERT OR REPLACE INTO hosts VALUES (?, ?, ?)"

FrontRow = tuple[int, int, str, bytes | None]  # id, level, host, data
BackRow = tuple[int, str, int, bytes | None, int]  # id, host, level, data, leased
QuarantineRow = tuple[int, str, int, bytes, str, str]  # id, host, level, data, error, at


class PendingWrites:
    """Rows to write, in the order :meth:`commit` applies them, and when that is due."""

    def __init__(self, max_ops: int, max_bytes: int) -> None:
        #: Commit after this many operations, or this many bytes of request data.
        self.max_ops = max_ops
        self.max_bytes = max_bytes
        self.ops = 0
        self.nbytes = 0
        self.front: list[FrontRow] = []
        self.quarantine: list[QuarantineRow] = []
        # Back rows not written yet, by id. A lease of such a row is folded into its
        # INSERT, and an ack drops it: the same state after the transaction, with
        # fewer statements.
        self.back: dict[int, BackRow] = {}
        self.front_taken: list[tuple[int]] = []
        self.leases: list[tuple[int]] = []
        self.back_dropped: list[tuple[int]] = []  # set aside
        #: Acknowledged rows, moved to ``done`` (keep_done) or deleted.
        self.acks: list[tuple[int]] = []
        self.done: list[tuple[int, bytes | None]] = []
        self.purge_done: int | None = None
        self.rests: dict[str, tuple[float, float | None]] = {}

    def commit(self, db: sqlite3.Connection, keep_done: bool) -> None:
        """Apply every pending write in one transaction, in order, and forget them."""
        # Write-through commits a handful of rows per request: single rows go
        # through execute(), and no context manager, to keep the fixed cost low.
        db.execute("BEGIN IMMEDIATE")
        try:
            if self.quarantine:
                db.execute(QUARANTINE_SCHEMA)
            for sql, rows in (
                (INSERT_FRONT, self.front),
                (INSERT_QUARANTINE, self.quarantine),
                (INSERT_BACK, list(self.back.values())),
                (DELETE_FRONT, self.front_taken),
                (LEASE_BACK, self.leases),
                (DELETE_BACK, self.back_dropped),
                (COPY_DONE if keep_done else "", self.acks),
                (DELETE_BACK, self.acks),
                (INSERT_DONE, self.done),
            ):
                if not sql:
                    continue
                if len(rows) == 1:
                    db.execute(sql, rows[0])
                elif rows:
                    db.executemany(sql, rows)
            if self.purge_done is not None:
                db.execute(PURGE_DONE, (self.purge_done,))
            if self.rests:
                db.executemany(
                    SAVE_RESTS, [(h, until, last) for h, (until, last) in self.rests.items()])
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.rollback()
            raise
        self.front.clear()
        self.back.clear()
        self.front_taken.clear()
        self.leases.clear()
        self.back_dropped.clear()
        self.acks.clear()
        self.done.clear()
        self.purge_done = None
        self.rests.clear()
        self.quarantine.clear()
        self.ops = 0
        self.nbytes = 0
