"""The SQLite queue store: the frontier's URLs on disk, crash-safe, in bounded memory.

The file, its layout and its connection are state.py's; the writes not committed yet
are writes.py's; what a stopped crawl left is read by recovery.py.

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

import logging
import os
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from scrapy_frontier.backends.sqlite import recovery
from scrapy_frontier.backends.sqlite.state import FORMAT, VERSION, StateFile
from scrapy_frontier.backends.sqlite.writes import PendingWrites
from scrapy_frontier.codec import Codec, saved_url
from scrapy_frontier.errors import (
    StoreError,
    UndecodableRow,
    Unserializable,
    requeue_advice,
)

__all__ = ["FORMAT", "QUARANTINE_LOGGED", "VERSION", "SQLiteStore", "StoreCounts"]

T = TypeVar("T")

logger = logging.getLogger("scrapy_frontier.store")

#: Rows set aside that are logged one by one; later ones are only counted.
QUARANTINE_LOGGED = 10

_FRONT_WINDOW = "SELECT id, host, data FROM front WHERE level = ? ORDER BY id LIMIT ?"
_BACK_WINDOW = ("SELECT id, level, data FROM back WHERE host = ? AND leased = 0 "
                "ORDER BY level DESC, id LIMIT ?")

_Entry = tuple[int, int, bytes | None]  # (-level, id, data)


@dataclass(slots=True)
class _Front:
    """A front level: a window of its head rows loaded from disk, and counts."""

    window: deque[tuple[int, str, bytes | None]] = field(default_factory=deque)  # id, host, data
    size: int = 0  # all queued rows of the level, window included
    on_disk: int = 0  # rows on disk (or pending) not in the window


@dataclass(slots=True)
class _Back:
    """An active host's back queue: a window of its head rows, and a count on disk."""

    # (-level, id, data) sorted ascending == served order; rows also on disk (or pending).
    window: list[_Entry] = field(default_factory=list)
    nbytes: int = 0  # bytes of request data in the window
    size: int = 0  # all queued rows of the host, window included (leased rows excluded)


@dataclass(slots=True)
class StoreCounts:
    """What the store counted (frontier/store/* and frontier/volatile* stats); the rows
    set aside are :attr:`SQLiteStore.undecodable` (QueueStore)."""

    flushes: int = 0
    #: Items kept in memory only because they cannot be encoded.
    volatile: int = 0
    #: Such items of the stopped process, found at :meth:`SQLiteStore.recover`: lost.
    volatile_lost: int = 0
    #: Rows leased when the crawl stopped, queued again at :meth:`SQLiteStore.recover`.
    recovered_leases: int = 0


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
        # Memory is capped in bytes too: requests with big meta would otherwise keep
        # window x row size in RAM per queue (and flush_ops x row size pending).
        self.window_bytes = window_bytes
        self.wall_clock = wall_clock
        self.counts = StoreCounts()
        #: Rows moved to the quarantine table by this process (frontier/store/undecodable).
        self.undecodable = 0
        self._volatile: dict[int, T] = {}  # by row: items that cannot be encoded
        self._state = StateFile(self.path, spider)
        self._next_id = 1 + recovery.last_id(self._state.db)
        self._front = [_Front() for _ in range(levels)]
        self._count_front()
        self._back: dict[str, _Back] = {}
        self._writes = PendingWrites(flush_ops, flush_bytes)
        #: Keep acknowledged rows in ``done`` until :meth:`purge_done` (set by a driver
        #: with a seen-set that is written after this file).
        self.keep_done = False
        # True at first: rows an earlier run left in ``done`` are purged at the first chance.
        self._done_since_purge = True
        #: Hosts that had a fetch in flight when the crawl stopped, with their last known
        #: fetch time (set by :meth:`recover`): their latest rest may not have been saved.
        self.interrupted: dict[str, float | None] = {}

    # -- opening -------------------------------------------------------------

    def _count_front(self) -> None:
        for front in self._front:
            front.size = 0
        with self._state.sql("counting its queued URLs"):
            counts = self._state.db.execute("SELECT level, COUNT(*) FROM front GROUP BY level")
            for level, count in counts.fetchall():
                if not 1 <= level <= self.levels:
                    raise StoreError(
                        f"{self.path} holds front level {level}, but FRONTIER_FRONT_QUEUES "
                        f"is {self.levels}. Run with the FRONTIER_FRONT_QUEUES it was written "
                        "with.")
                self._front[level - 1].size = count
        for front in self._front:
            front.on_disk = front.size

    def recover(self) -> tuple[dict[str, int], dict[str, tuple[float, float | None]]]:
        """Return leased URLs to their queues; the hosts with back queues and their sizes,
        and every host's rest as (seconds left, last fetch time).

        A host that had a fetch in flight is in :attr:`interrupted`.
        """
        found = recovery.release_leases(self._state)
        self.interrupted = found.hosts
        self.counts.volatile_lost = found.lost
        self.counts.recovered_leases = found.leases
        self._count_front()
        db = self._state.db
        hosts = recovery.back_queues(db)
        return hosts, recovery.rests(db, self.wall_clock())

    def adopt(self, host: str, size: int) -> None:
        """Open a back queue for a host that had one when the crawl stopped."""
        self._back[host] = _Back(size=size)

    def start_ids_after(self, row: int) -> None:
        """New rows get ids above ``row``, even if the rows up to it are gone."""
        self._next_id = max(self._next_id, row + 1)

    def rows_after(self, row: int) -> Iterator[bytes]:
        """The saved data of the rows queued, leased or acknowledged (``done``) with ids
        above ``row``."""
        return recovery.rows_after(self._state, row)

    def last_row(self) -> int:
        """The id of the newest row (queued or moved), written or not."""
        return self._next_id - 1

    # -- encoding ------------------------------------------------------------

    def _encode(self, item: T, row: int) -> bytes | None:
        try:
            return self.codec.encode(item)
        except Unserializable as exc:
            # Documented fallback: kept in memory, lost on a crash (frontier/volatile).
            self._volatile[row] = item
            self.counts.volatile += 1
            if self.counts.volatile == 1:
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
            raise type(exc)(f"{self.path}, row {row}: {exc}") from exc
        except StoreError as exc:
            raise StoreError(f"{self.path}, row {row}: {exc}") from exc

    def _peek(self, row: int, data: bytes | None) -> T:
        return self._volatile[row] if data is None else self._decode(row, data)

    def _op(self, nbytes: int = 0) -> None:
        writes = self._writes
        writes.ops += 1
        writes.nbytes += nbytes
        if writes.ops >= writes.max_ops or writes.nbytes >= writes.max_bytes:
            self.flush()

    def _rows(self, sql: str, key: object) -> list[tuple[Any, ...]]:
        """Rows for a window: at most ``window`` of them and about ``window_bytes`` of
        request data (at least one row). ``data`` is the third column."""
        rows: list[tuple[Any, ...]] = []
        total = 0
        for row in self._state.db.execute(sql, (key, self.window)):
            rows.append(row)
            total += len(row[2] or b"")
            if len(rows) >= self.window or total >= self.window_bytes:
                break
        return rows

    @property
    def memory_bytes(self) -> int:
        """Request data held in memory: windows and writes not flushed yet."""
        front = sum(len(d or b"") for f in self._front for _, _, d in f.window)
        return front + sum(b.nbytes for b in self._back.values()) + self._writes.nbytes

    # -- front queues ----------------------------------------------------------

    def front_append(self, level: int, host: str, item: T) -> None:
        row = self._next_id
        self._next_id = row + 1
        data = self._encode(item, row)
        self._writes.front.append((row, level, host, data))
        front = self._front[level - 1]
        front.size += 1
        front.on_disk += 1
        self._op(len(data or b""))

    def front_levels(self) -> list[int]:
        return [i + 1 for i, front in enumerate(self._front) if front.size]

    def front_count(self) -> int:
        return sum(front.size for front in self._front)

    def _front_window(self, level: int) -> deque[tuple[int, str, bytes | None]]:
        """The level's window, loaded from disk if empty (pending rows written first)."""
        front = self._front[level - 1]
        window = front.window
        if not window:
            self.flush()  # the window is loaded from disk: pending rows first
            with self._state.sql("reading its front queue"):
                rows = self._rows(_FRONT_WINDOW, level)
            if not rows:
                raise IndexError(f"front queue {level} is empty")
            window.extend(rows)
            front.on_disk -= len(rows)
        return window

    def front_to_back(self, level: int) -> str:
        """Move the head of front ``level`` into its host's back queue without decoding it.

        The host must have a back queue. Returns the host.
        """
        row, host, data = self._front_window(level).popleft()
        self._front[level - 1].size -= 1
        # No _op() here: a flush between this delete and the back insert that follows
        # would commit a URL that is in neither table.
        self._writes.front_taken.append((row,))
        self._back_insert(host, level, row, data)
        return host

    def front_head_host(self, level: int) -> str:
        return self._front_window(level)[0][1]

    def front_items(self) -> Iterator[tuple[str, int, T]]:
        self.flush()
        for level, front in enumerate(self._front, 1):
            for row, host, data in front.window:
                yield host, level, self._peek(row, data)
        loaded = {row for front in self._front for row, _, _ in front.window}
        for row, level, host, data in self._state.db.execute(
            "SELECT id, level, host, data FROM front ORDER BY level, id"
        ):
            if row not in loaded:
                yield host, level, self._peek(row, data)

    # -- back queues -----------------------------------------------------------

    def back_open(self, host: str) -> None:
        self._back[host] = _Back()

    def back_close(self, host: str) -> None:
        back = self._back.pop(host)
        assert back.size == 0 and not back.window

    def back_append(self, host: str, level: int, item: T) -> None:
        row = self._next_id
        self._next_id = row + 1
        self._back_insert(host, level, row, self._encode(item, row))

    def _back_insert(self, host: str, level: int, row: int, data: bytes | None) -> None:
        self._writes.back[row] = (row, host, level, data, 0)
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
        with self._state.sql("reading a back queue"):
            rows = self._rows(_BACK_WINDOW, host)
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
            pending = self._writes.back
            written = pending.get(row)
            if written is None:
                self._writes.leases.append((row,))
            else:
                pending[row] = written[:4] + (1,)
            self._op()
            return -neg_level, item, row
        return None

    def ack(self, token: object) -> None:
        assert isinstance(token, int)
        writes = self._writes
        pending = writes.back.pop(token, None)
        if pending is None:
            writes.acks.append((token,))
        elif self.keep_done:
            writes.done.append((token, pending[3]))
        self._done_since_purge = self.keep_done
        self._op()

    def back_items(self, host: str) -> Iterator[tuple[int, T]]:
        self.flush()
        for row, level, data in self._state.db.execute(
            "SELECT id, level, data FROM back WHERE host = ? AND leased = 0 "
            "ORDER BY level DESC, id",
            (host,),
        ):
            yield level, self._peek(row, data)

    # -- rows set aside, rows done ---------------------------------------------

    def _set_aside(
        self, host: str, level: int, row: int, data: bytes, exc: UndecodableRow
    ) -> None:
        """Move a back row that cannot be rebuilt to the quarantine table (at the next
        flush, in the same transaction as its removal from ``back``)."""
        writes = self._writes
        if writes.back.pop(row, None) is None:
            writes.back_dropped.append((row,))
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.wall_clock()))
        error = str(exc.__cause__ or exc)  # the codec's words; the log names file and row
        writes.quarantine.append((row, host, level, data, error, at))
        self.undecodable += 1
        count = self.undecodable
        if count <= QUARANTINE_LOGGED:
            url = saved_url(data)
            logger.error(
                "%s: the queued request %s cannot be rebuilt (%s). It is not crawled: it is "
                "kept in the quarantine of that file, and the crawl goes on without it. "
                "scrapy frontier quarantine lists what is there. %s.%s",
                self.path,
                url if url is not None else f"in row {row} (host {host!r})",
                error, requeue_advice(exc),
                " Further rows set aside are only counted (frontier/store/undecodable)."
                if count == QUARANTINE_LOGGED
                else "",
            )
        self._op()

    def quarantine_size(self) -> int:
        """Rows in the quarantine table (from this run and earlier ones), written or not."""
        return self._state.quarantine_size() + len(self._writes.quarantine)

    def purge_done(self, covered: int) -> None:
        """The seen-set holds the URLs of every row up to ``covered``: forget those
        acknowledged rows (at the next flush)."""
        if self._done_since_purge:
            self._writes.purge_done = covered
            self._done_since_purge = False
            self._op()

    # -- hosts -----------------------------------------------------------------

    def save_meta(self, values: dict[str, str]) -> None:
        """Keep ``values`` in the ``meta`` table beside the format marker (read by the
        command line), at once."""
        self._state.save_meta(values)

    def save_rest(self, host: str, rest_seconds: float, last_fetch: float | None) -> None:
        self._writes.rests[host] = (self.wall_clock() + rest_seconds, last_fetch)
        self._op()

    # -- durability ------------------------------------------------------------

    def flush(self) -> None:
        """Apply every pending write in one transaction, in order."""
        writes = self._writes
        if not writes.ops:
            return
        try:
            writes.commit(self._state.db, self.keep_done)
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot write the frontier state {self.path} ({exc}). The last "
                f"{writes.ops} operations are not saved; a restart with the same directory "
                "re-fetches what was in flight. Free disk space or fix permissions."
            ) from exc
        self.counts.flushes += 1
        self._state.unsynced = True

    def sync(self) -> None:
        """Flush, and make every commit so far durable (see files.sync_wal)."""
        self.flush()
        self._state.sync()

    def close(self) -> None:
        try:
            self.flush()
            self._state.checkpoint()
        finally:
            self._state.close()

    def disk_bytes(self) -> int:
        return self._state.disk_bytes()

    def stats(self) -> dict[str, Any]:
        counts = self.counts
        return {"flushes": counts.flushes, "volatile": counts.volatile,
                "undecodable": self.undecodable}

    # -- counts by name, for backends/local.py (it can read ``counts``) ---------


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
