"""The ``sqlite`` backend: the core frontier in this process, kept crash-safe on disk.

The queues, leases and host rests live in ``frontier.sqlite``, the seen-set in
``seen.sqlite`` (FrontierDupeFilter) and the page history in ``history.sqlite``, in
``FRONTIER_PATH`` or else ``JOBDIR``.

Write-through (``FRONTIER_WRITE_THROUGH``, the default): one commit per ``next_request``
call that handed something out or acknowledged something. The acks it makes go with the
lease it hands out. That is safe because the two rules that matter are kept. A lease is
durable before its request leaves ``next_request``, so no URL can be fetched without being
marked in flight on disk. An ack is only ever late, never early: until it is committed its
URL stays marked in flight, so a kill re-queues it, and the restart counts it among the
"requests in flight when the crawl stopped" -- the bound tests/crawls/test_crash.py checks
(repeats <= that count).

With a page history, the pages' records are committed to ``history.sqlite`` just before
the acks of the same batch (a kill cannot leave an ack without its record), and made
durable (fsync) with each periodic flush. After a power loss (not a kill) the acks of the
last ``FRONTIER_FLUSH_INTERVAL`` may reach the disk without their records: those pages
are then done but not in the history until they are found again.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, succeed

from scrapy_frontier.backends.memory import MemoryBackend
from scrapy_frontier.backends.memory.ports import LocalControls, LocalHistory, LocalQueue
from scrapy_frontier.backends.sqlite.control import FILE as CONTROL_FILE
from scrapy_frontier.backends.sqlite.control import ControlFile
from scrapy_frontier.backends.sqlite.files import exposed
from scrapy_frontier.backends.sqlite.history import STORE_NAME as HISTORY_FILE
from scrapy_frontier.backends.sqlite.history import SQLiteHistoryStore
from scrapy_frontier.backends.sqlite.queue import SQLiteStore
from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore
from scrapy_frontier.backends.sqlite.steering import ControlPoller, select_records
from scrapy_frontier.codec import RowTrust, request_codec
from scrapy_frontier.core.politeness import saved_delay_rule
from scrapy_frontier.errors import StoreError, UndecodableRow

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.spiders import Spider

    from scrapy_frontier.backends.memory.ip_groups import IPGroups
    from scrapy_frontier.backends.ports import BackendContext
    from scrapy_frontier.core.clock import Clock
    from scrapy_frontier.core.frontier import Frontier, Lease
    from scrapy_frontier.core.history import HistoryStore
    from scrapy_frontier.core.recrawl import Recrawler
    from scrapy_frontier.settings import FrontierConfig

logger = logging.getLogger("scrapy_frontier.scheduler")

#: The SQLite file inside JOBDIR or FRONTIER_PATH.
STATE_FILE = "frontier.sqlite"


class SQLiteQueue(LocalQueue):
    """The local queue, written through to ``frontier.sqlite`` (see the module doc)."""

    store: SQLiteStore[Request] | None = None
    #: The seen-set on disk, written only right after the queue's own writes.
    seen_store: SQLiteFingerprintStore | None = None
    #: The page history's recrawler: acks wait for its records.
    recrawler: Recrawler | None = None

    def __init__(self, frontier: Frontier[Request], clock: Clock, ip_groups: IPGroups | None,
                 config: FrontierConfig) -> None:
        super().__init__(frontier, clock, ip_groups)
        self.write_through = config.write_through
        self.flush_interval = config.flush_interval
        # Acks held back until the page history's records are committed (see ack).
        self._acks_after_history: list[object] = []
        self._dirty = False
        self._last_flush = 0.0

    def push(self, request: Request, host: str, level: int, seen: object = None) -> bool:
        queued = super().push(request, host, level)
        self._maybe_flush()
        return queued

    def claim(self) -> Lease[Request] | None:
        self._maybe_flush()
        lease = super().claim()
        if lease is not None or self._dirty:
            self._write_through()
        return lease

    def complete(self, ticket: int, seconds: float, rest: float,
                 ended_at: float | None = None, *, sent: bool = True) -> object:
        token = (super().complete(ticket, seconds, rest, ended_at) if sent
                 else super().complete(ticket, seconds, rest, ended_at, sent=False))
        self._dirty = True
        return token

    def ack(self, token: object) -> None:
        if token is None:
            return
        recrawler = self.recrawler
        if recrawler is not None and recrawler.store.unsaved():
            # The page's visit may be among the history's unsaved records: the queue
            # forgets the request only after they are committed (at this batch's write,
            # see claim), so that a kill in between fetches the page again instead of
            # losing its history.
            self._acks_after_history.append(token)
        else:
            self.frontier.ack(token)
        self._dirty = True

    def ack_after_history(self, *, durable: bool) -> None:
        """Commit the history, then the acks that waited for it. ``durable``: make the
        history durable first (fsync), as the periodic flush does; else commit it only,
        which a kill cannot undo."""
        if not self._acks_after_history:
            return
        assert self.recrawler is not None
        # The history first: an ack written before its page's record would forget the page.
        if durable:
            self.recrawler.store.sync()
        else:
            self.recrawler.store.flush()
        for token in self._acks_after_history:
            self.frontier.ack(token)
        self._acks_after_history.clear()
        self._dirty = True

    def _write_through(self) -> None:
        """With FRONTIER_WRITE_THROUGH (the default), leases and acks are written at
        once (see the module doc); queued URLs need no such hurry: the page that
        found them is only forgotten by a later write."""
        self._dirty = False
        if self.store is not None and self.write_through:
            # Acks wait for their pages' records, committed just before them: one history
            # commit per batch. The seen-set waits for the periodic flush, which syncs.
            self.ack_after_history(durable=False)
            self.store.flush()

    def _maybe_flush(self) -> None:
        store = self.store
        now = self.clock()
        if store is None or now - self._last_flush < self.flush_interval:
            return
        self._last_flush = now
        self.ack_after_history(durable=True)
        self._flush(store)

    def _flush(self, store: SQLiteStore[Request]) -> None:
        # A failed write raises StoreError: the scheduler stops the crawl cleanly.
        seen = self.seen_store
        if seen is None or not seen.pending:
            if seen is not None:
                # Every queued URL's fingerprint is written: no acknowledged row is needed.
                store.purge_done(store.last_row())
            store.flush()
            return
        # A fingerprint on the disk before the URL it stands for would lose that URL
        # after a power loss or a file system gone read-only: the queue goes first.
        try:
            store.sync()
        except StoreError:
            self.forget_unsaved_seen()
            raise
        covered = store.last_row()
        seen.flush(covers=covered)
        store.purge_done(covered)

    def forget_unsaved_seen(self) -> None:
        """The queue's last writes failed: the fingerprints buffered since its last sync
        must not reach the disk without their URLs (the dupe filter closes later)."""
        if self.seen_store is not None:
            dropped = self.seen_store.discard()
            if dropped:
                logger.info("Seen-set: %d fingerprints not written, since the URLs they stand "
                            "for could not be saved", dropped)


class SQLiteHistory(LocalHistory):
    """The page history in ``history.sqlite``; ``scrapy frontier recrawl`` reaches it."""

    def __init__(self, state_dir: str, queue: SQLiteQueue) -> None:
        super().__init__()
        self.state_dir = state_dir
        self.queue = queue
        self.control: ControlPoller | None = None
        self.trust = RowTrust(private=True)

    def open_history(self) -> HistoryStore:
        path = Path(self.state_dir) / HISTORY_FILE
        trust = self.trust
        store = SQLiteHistoryStore(path, check_request=trust.check_record if trust.checks else None)
        logger.debug("Page history: %s (%d pages)", path, len(store))
        return store

    def attach(self, recrawler: Recrawler) -> None:
        super().attach(recrawler)
        self.queue.recrawler = recrawler
        if self.control is not None:
            self.control.recrawl_to = self._mark_due
            self.control.apply_recrawls()  # asked for while the crawl was stopped

    def _mark_due(self, requests: list[tuple[int | None, str | None]]) -> int:
        """``scrapy frontier recrawl``: (fp, host) pairs; both None means every page."""
        assert self.recrawler is not None
        return self.recrawler.mark_due(select_records(self.recrawler.store, requests))


class SQLiteControls(LocalControls):
    """The local controls; robots.txt records are kept in ``control.sqlite``, for the next
    runs (one indexed read per site on the reactor, as the control timer's)."""

    #: The control file, while the crawl is open.
    file: ControlFile | None = None
    _warned = False

    def robots_get(self, origin: str) -> Deferred[object]:
        file = self.file
        if file is None:
            return succeed(None)
        try:
            raw = file.robots(origin, time.time())
        except sqlite3.Error as exc:  # busy or damaged: fetched from the site instead
            logger.debug("robots.txt of %s not read from %s: %s", origin, file.path, exc)
            raw = None
        return succeed(raw)

    def robots_put(self, origin: str, record: bytes, keep: float) -> None:
        file = self.file
        if file is None:
            return
        now = time.time()
        try:
            file.save_robots(origin, record, now + keep, now)
        except sqlite3.Error as exc:
            if not self._warned:
                self._warned = True
                logger.warning("Could not keep robots.txt in %s (%s): the next run fetches "
                               "it again", file.path, exc)


class SQLiteBackend(MemoryBackend):
    """The memory backend's ports over a frontier that ``frontier.sqlite`` keeps."""

    name = "sqlite"
    persistent = True
    queue: SQLiteQueue
    history: SQLiteHistory
    controls: SQLiteControls

    def __init__(self, context: BackendContext) -> None:
        state_dir = context.config.state_dir
        assert state_dir is not None  # FrontierConfig gives "sqlite" a directory
        self.state_dir = self.location = state_dir
        super().__init__(context)

    def _new_queue(self) -> SQLiteQueue:
        return SQLiteQueue(self.frontier, self.ctx.clock, self.ip_groups, self.ctx.config)

    def _new_history(self) -> SQLiteHistory:
        return SQLiteHistory(self.state_dir, self.queue)

    def _new_controls(self) -> SQLiteControls:
        config = self.ctx.config
        return SQLiteControls(self.frontier, self.measured, config.host_policies,
                              measuring=bool(config.capacity))

    def open(self, spider: Spider) -> None:
        self.row_trust = self.history.trust = self._trust()
        # Steered policies first: the frontier is made, and its restart rests set, by them.
        early = ControlFile(self.state_dir, create=False, timeout=0.5)
        try:
            steered = early.policies()
        finally:
            early.close()
        if steered:
            self.ctx.config.host_policies.steer(steered)
        self._open_store(spider)
        # Steering (scrapy frontier block, delay, retire, budget, policy): applied now,
        # then looked at once a second from a timer.
        control = self.history.control = ControlPoller(
            self.state_dir, self.frontier, self.ctx.stats, self.ctx.clock,
            closed=self.controls.closed_hosts)
        control.steer_to = self.controls.steer_policies
        self.controls.file = control.file
        control.traps_to = self.controls.trap_kept
        self.controls.on_contain = control.contain
        control.start()

    def _trust(self) -> RowTrust:
        """A directory only this user can write is inside the code's boundary, as Scrapy's
        own JOBDIR: its rows are read in full (sealed ones verified, with keys). Any other
        is refused: Scrapy itself unpickles ``spider.state`` from JOBDIR."""
        dirs = {self.state_dir, self.ctx.crawler.settings.get("JOBDIR") or self.state_dir}
        for directory in sorted(dirs):
            reason = exposed(directory, (STATE_FILE, HISTORY_FILE, CONTROL_FILE, "spider.state"))
            if reason is not None:
                raise StoreError(
                    f"{reason}. Scrapy and scrapy-frontier unpickle the crawl's files there "
                    "(spider.state, frontier.sqlite), so whoever may write them could run code "
                    f"in this crawl. Make {directory} and its files writable by this user "
                    "alone (chmod -R go-w), or point JOBDIR / FRONTIER_PATH at a private "
                    "directory; nothing was changed (docs/security.rst).")
        return RowTrust.of(self.ctx.config.signing_keys, private=True)

    def _open_store(self, spider: Spider) -> None:
        config, stats = self.ctx.config, self.ctx.stats
        path = Path(self.state_dir) / STATE_FILE
        store: SQLiteStore[Request] = SQLiteStore(
            path, levels=config.front_queues, spider=spider.name,
            codec=request_codec(spider, trust=self.row_trust)
        )
        store.save_meta(saved_delay_rule(config.policy))
        hosts, rests = store.recover()
        frontier = self._new_frontier(store)
        now = self.ctx.clock()
        for host, (left, _) in rests.items():
            frontier.rest_until(host, now + left)
        # A fetch was in flight when the crawl stopped: its end (and the rest it
        # set) may not have been saved, so rest from the restart as if it had
        # just ended, taking as long as the host's last known fetch.
        rule = config.host_policies.delay_of
        for host, last_fetch in store.interrupted.items():
            frontier.rest_until(host, now + rule(host).delay(last_fetch or 0.0))
        for host, queued in hosts.items():
            store.adopt(host, queued)
        frontier.resume(store.front_count(), hosts)
        self._use(frontier)
        self.queue.store = self.inspection.store = store
        seen = self.queue.seen_store = _durable_seen_store(self.ctx.dupefilter)
        if seen is not None:
            # A fingerprint must never be durable before the URL it stands for is
            # queued durably, or a crash would lose that URL: the seen-set is
            # written only right after the frontier's own writes.
            seen.batch_size = 1 << 62
            seen.flush_interval = math.inf
            # An acknowledged row stays (in ``done``) until the seen-set has its URL: a
            # restart puts it back there, so a page found again is not fetched again.
            store.keep_done = True
            self._catch_up_seen(store, seen)
        restored = len(frontier)
        stats.set_value("frontier/restored", restored)
        stats.set_value("frontier/recovered_leases", store.counts.recovered_leases)
        if store.counts.volatile_lost:
            stats.set_value("frontier/volatile_lost", store.counts.volatile_lost)
        if restored:
            logger.info(
                "Resumed %d queued requests (%d were in flight when the crawl stopped) and "
                "%d resting hosts from %s", restored, store.counts.recovered_leases, len(rests),
                path,
            )

    def _catch_up_seen(self, store: SQLiteStore[Request], seen: SQLiteFingerprintStore) -> None:
        """Put back the fingerprints of the URLs queued after the seen-set's last commit.

        The seen-set is written a little after the queue (see SQLiteQueue._flush): after
        a kill, the links of a page fetched again would otherwise be queued twice.
        """
        # None: the seen-set never covered a row (the first run stopped before its first
        # write): every row is after it.
        covered = seen.covers or 0
        store.start_ids_after(covered)
        df = self.ctx.dupefilter
        fp64 = getattr(df, "fp64", None)
        seen_set = getattr(df, "seen", None)
        if fp64 is None or seen_set is None:
            return
        added = 0
        for data in store.rows_after(covered):
            try:
                request = store.codec.decode(data)
            except UndecodableRow:
                continue  # set aside when its turn comes
            if not request.dont_filter and not seen_set.seen(fp64(request)):
                added += 1
        if added:
            logger.info("Seen-set: %d URLs queued after its last write were added back to it",
                        added)
            self.ctx.stats.set_value("frontier/seen/caught_up", added)

    def close(self, reason: str) -> None:
        stats = self.ctx.stats
        errors: list[StoreError] = []
        control, self.history.control = self.history.control, None
        self.controls.file = None
        if control is not None:
            control.stop()
        if self.history.recrawler is not None:
            try:
                self.queue.ack_after_history(durable=True)
                self.history.close()
            except StoreError as exc:
                errors.append(exc)
        store = self.queue.store
        if store is not None:
            stats.set_value("frontier/store/flushes", store.counts.flushes)
            if store.counts.volatile:
                stats.set_value("frontier/volatile", store.counts.volatile)
            try:
                store.close()
            except StoreError as exc:
                errors.append(exc)
                self.queue.forget_unsaved_seen()
            else:
                stats.set_value("frontier/store/disk_bytes", store.disk_bytes())
                if self.queue.seen_store is not None:
                    self.queue.seen_store.flush(covers=store.last_row())
        if errors:
            raise errors[0]


def _durable_seen_store(df: object) -> SQLiteFingerprintStore | None:
    seen = getattr(df, "seen", None)
    store = getattr(seen, "store", None)
    return store if isinstance(store, SQLiteFingerprintStore) else None


__all__ = ["STATE_FILE", "SQLiteBackend"]
