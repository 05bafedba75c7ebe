"""The embedded driver: the core :class:`Frontier` in this process, in memory or on SQLite.

``FRONTIER_BACKEND = "memory"`` (the default without a directory) keeps
everything in RAM. ``"sqlite"`` (the default with ``JOBDIR`` or
``FRONTIER_PATH``) keeps the queues, leases and host rests in
``frontier.sqlite``, the seen-set in ``seen.sqlite`` (FrontierDupeFilter) and
the page history in ``history.sqlite``, crash-safe.

Write-through (``FRONTIER_WRITE_THROUGH``, the default): one commit per
``next_request`` call that handed something out or acknowledged something. The
acks it makes go with the lease it hands out. That is safe because the two rules
that matter are kept. A lease is durable before its request leaves
``next_request``, so no URL can be fetched without being marked in flight on
disk. An ack is only ever late, never early: until it is committed its URL stays
marked in flight, so a kill re-queues it, and the restart counts it among the
"requests in flight when the crawl stopped" -- the bound tests/test_crash.py
checks (repeats <= that count).

With a page history, the pages' records are committed to ``history.sqlite`` just before
the acks of the same batch (a kill cannot leave an ack without its record), and made
durable (fsync) with each periodic flush. After a power loss (not a kill) the acks of the
last ``FRONTIER_FLUSH_INTERVAL`` may reach the disk without their records: those pages
are then done but not in the history until they are found again.
"""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from scrapy_frontier.backends.ports import (
    Backend,
    BackendContext,
    HistoryPort,
    HostControlPort,
    InspectPort,
    QueuePort,
    SeenTest,
)
from scrapy_frontier.backends.sqlite.history import STORE_NAME as HISTORY_FILE
from scrapy_frontier.backends.sqlite.history import SQLiteHistoryStore
from scrapy_frontier.backends.sqlite.queue import SQLiteStore
from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore
from scrapy_frontier.backends.sqlite.steering import ControlPoller, select_records
from scrapy_frontier.codec import request_codec
from scrapy_frontier.core.frontier import Frontier, Lease
from scrapy_frontier.core.history import HistoryStore, MemoryHistoryStore
from scrapy_frontier.core.politeness import saved_delay_rule
from scrapy_frontier.errors import StoreError, UndecodableRow
from scrapy_frontier.hostkey import HostlessURL, url_host_key
from scrapy_frontier.observe.census import Census, HostCounts
from scrapy_frontier.reactor.resolve import HostResolver

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.core.history import PageRecord
    from scrapy_frontier.core.recrawl import PageClaim, Recrawler, Visit

logger = logging.getLogger("scrapy_frontier.scheduler")

#: The SQLite file inside JOBDIR or FRONTIER_PATH.
STATE_FILE = "frontier.sqlite"


class LocalDriver(QueuePort, HistoryPort, HostControlPort, InspectPort):
    """The frontier of one process (``memory`` or ``sqlite``)."""

    shared_seen: ClassVar[bool] = False

    def __init__(self, context: BackendContext) -> None:
        self.ctx = context
        self.config = config = context.config
        self.clock = context.clock
        self.name = "sqlite" if config.backend == "sqlite" else "memory"
        #: Where the SQLite files live; None: everything in memory (FRONTIER_BACKEND
        #: "memory" even with JOBDIR set).
        self.state_dir = config.state_dir if self.name == "sqlite" else None
        self.persistent = self.state_dir is not None
        #: Where the state lives, for the opening line.
        self.location = self.state_dir or "in this process"
        self.dropped_later = 0  # push refuses at once
        self.frontier: Frontier[Request] = self._new_frontier(None)
        self.store: SQLiteStore[Request] | None = None
        self._seen_store: SQLiteFingerprintStore | None = None
        self.recrawler: Recrawler | None = None
        # Acks held back until the page history's records are committed (see ack).
        self._acks_after_history: list[object] = []
        self._dirty = False
        self._last_flush = 0.0
        # Per-IP politeness: the hostname to look up for keys that are not one
        # (download_slot overrides), and the resolver.
        self._slot_hostnames: dict[str, str] = {}
        self._resolver: HostResolver | None = None
        self._answered_now = False
        #: Why hosts were closed: "failures", "retired" (by hand), "budget".
        self.closed_hosts: dict[str, str] = {}
        self._control: ControlPoller | None = None
        if config.ip_politeness:
            self._resolver = HostResolver(self._on_group, timeout=config.dns_timeout)

    def _new_frontier(self, store: SQLiteStore[Request] | None) -> Frontier[Request]:
        config = self.config
        frontier: Frontier[Request] = Frontier(
            front_queues=config.front_queues,
            priority_bias=config.priority_bias,
            back_queues=config.back_queues,
            back_queues_max=config.back_queues_max,
            policy=config.policy,
            lease_timeout=config.lease_timeout,
            clock=self.clock,
            rng=random.Random(config.seed),
            store=store,
            group_hosts=config.ip_politeness,
        )
        frontier.budgets.default = config.host_budget
        for host, budget in config.host_budgets.items():
            frontier.set_budget(host, budget)
        return frontier

    # -- opening and closing -----------------------------------------------------------

    def open(self, spider: Spider) -> None:
        if self.state_dir:
            self._open_store(spider)
            # Steering (scrapy frontier block, delay, retire, budget): applied now, then
            # looked at once a second from a timer.
            self._control = ControlPoller(self.state_dir, self.frontier, self.ctx.stats,
                                          self.clock, closed=self.closed_hosts)
            self._control.start()

    def _open_store(self, spider: Spider) -> None:
        assert self.state_dir is not None
        stats = self.ctx.stats
        path = Path(self.state_dir) / STATE_FILE
        store: SQLiteStore[Request] = SQLiteStore(
            path, levels=self.config.front_queues, spider=spider.name, codec=request_codec(spider)
        )
        store.save_meta(saved_delay_rule(self.config.policy))
        hosts, rests = store.recover()
        frontier = self._new_frontier(store)
        now = self.clock()
        for host, (left, _) in rests.items():
            frontier.rest_until(host, now + left)
        # A fetch was in flight when the crawl stopped: its end (and the rest it
        # set) may not have been saved, so rest from the restart as if it had
        # just ended, taking as long as the host's last known fetch.
        for host, last_fetch in store.interrupted.items():
            frontier.rest_until(host, now + self.config.policy.delay(last_fetch or 0.0))
        for host, queued in hosts.items():
            store.adopt(host, queued)
        frontier.resume(store.front_count(), hosts)
        self.frontier = frontier
        self.store = store
        self._seen_store = _durable_seen_store(self.ctx.dupefilter)
        if self._seen_store is not None:
            # A fingerprint must never be durable before the URL it stands for is
            # queued durably, or a crash would lose that URL: the seen-set is
            # written only right after the frontier's own writes.
            self._seen_store.batch_size = 1 << 62
            self._seen_store.flush_interval = math.inf
            # An acknowledged row stays (in ``done``) until the seen-set has its URL: a
            # restart puts it back there, so a page found again is not fetched again.
            store.keep_done = True
            self._catch_up_seen(store, self._seen_store)
        restored = len(frontier)
        stats.set_value("frontier/restored", restored)
        stats.set_value("frontier/recovered_leases", store.recovered_leases)
        if store.volatile_lost:
            stats.set_value("frontier/volatile_lost", store.volatile_lost)
        if restored:
            logger.info(
                "Resumed %d queued requests (%d were in flight when the crawl stopped) and "
                "%d resting hosts from %s", restored, store.recovered_leases, len(rests), path,
            )

    def open_history(self) -> HistoryStore:
        settings = self.config.recrawl
        if self.state_dir:
            path = Path(self.state_dir) / HISTORY_FILE
            store = SQLiteHistoryStore(path)
            logger.debug("Page history: %s (%d pages), recrawl mode %r", path, len(store),
                         settings.mode)
            return store
        # Continuous mode without JOBDIR: the history lives as long as the crawl
        # (the scheduler keeps none in "due" mode without state).
        return MemoryHistoryStore()

    def attach(self, recrawler: Recrawler) -> None:
        self.recrawler = recrawler
        if self._control is not None:
            self._control.recrawl_to = self._mark_due
            self._control.apply_recrawls()  # asked for while the crawl was stopped

    def _mark_due(self, requests: list[tuple[int | None, str | None]]) -> int:
        """``scrapy frontier recrawl``: (fp, host) pairs; both None means every page."""
        assert self.recrawler is not None
        return self.recrawler.mark_due(select_records(self.recrawler.store, requests))

    def close(self, reason: str) -> None:
        stats = self.ctx.stats
        errors: list[StoreError] = []
        if self._control is not None:
            self._control.stop()
            self._control = None
        if self.recrawler is not None:
            try:
                self._ack_after_history(durable=True)
                self.recrawler.close()
            except StoreError as exc:
                errors.append(exc)
        store = self.store
        if store is not None:
            stats.set_value("frontier/store/flushes", store.flushes)
            if store.volatile:
                stats.set_value("frontier/volatile", store.volatile)
            try:
                store.close()
            except StoreError as exc:
                errors.append(exc)
                self._forget_unsaved_seen()
            else:
                stats.set_value("frontier/store/disk_bytes", store.disk_bytes())
                if self._seen_store is not None:
                    self._seen_store.flush(covers=store.last_row())
        if errors:
            raise errors[0]

    # -- queueing ---------------------------------------------------------------------

    def push(self, request: Request, host: str, level: int,
             seen: SeenTest | None = None) -> bool:
        # ``seen`` is None: this driver has no shared seen set.
        if self._resolver is not None and "download_slot" in request.meta:
            self._remember_slot_hostname(host, request)
        if self.store is None:
            return self.frontier.push(host, level, request)
        queued = self.frontier.push(host, level, request)
        self._maybe_flush()
        return queued

    def claim(self) -> Lease[Request] | None:
        store = self.store
        if store is not None:
            self._maybe_flush()
        lease = self.frontier.pop()
        if self._resolver is not None:
            lease = self._resolve_waiting(lease)
        if store is not None and (lease is not None or self._dirty):
            self._write_through()
        return lease  # a Handout by shape: no copy on the hot path

    def complete(self, ticket: int, seconds: float, rest: float, ended_at: float | None = None,
                ) -> object:
        ago = 0.0 if ended_at is None else self.clock() - ended_at
        frontier = self.frontier
        lease = frontier.complete(ticket, seconds, ack=False, rest_at_least=rest,
                                  ended_ago=ago)
        self._dirty = True
        if frontier.newly_capped:
            self._log_capped()
        return None if lease is None else lease.token

    def _log_capped(self) -> None:
        frontier = self.frontier
        for host, dropped in frontier.newly_capped:
            logger.info(
                "Host %r reached its budget of %d pages: %d queued requests dropped, and its "
                "later ones are refused (counted in frontier/budget/requests)",
                host, frontier.budgets.of(host), dropped)
        frontier.newly_capped.clear()

    def ack(self, token: object) -> None:
        if token is None:
            return
        recrawler = self.recrawler
        if self.store is not None and recrawler is not None and recrawler.store.unsaved():
            # The page's visit may be among the history's unsaved records: the queue
            # forgets the request only after they are committed (at this batch's write,
            # see pop), so that a kill in between fetches the page again instead of
            # losing its history.
            self._acks_after_history.append(token)
            self._dirty = True
            return
        self.frontier.ack(token)
        self._dirty = True

    def _ack_after_history(self, *, durable: bool) -> None:
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

    def set_min_rest(self, host: str, seconds: float) -> None:
        self.frontier.set_min_rest(host, seconds)

    def retire(self, host: str) -> list[Request]:
        self.closed_hosts.setdefault(host, "failures")
        return self.frontier.retire(host)

    def over_budget(self, host: str) -> bool:
        return self.frontier.over_budget(host)

    def host_counts(self) -> dict[str, int]:
        """Hosts known, blocked, retired and over budget, in this process (cheap)."""
        return self.frontier.counts()

    def take_dropped(self) -> list[tuple[str, Request]]:
        return self.frontier.take_dropped()

    # -- page history -----------------------------------------------------------------

    def record_visit(self, fp: int, url: str, visit: Visit | None) -> None:
        if self.recrawler is not None:
            self.recrawler.record(fp, url, visit)

    def record_hints(self, claims: list[PageClaim]) -> None:
        if self.recrawler is not None:
            self.recrawler.claim_many(claims)

    def record_signal_source(self, fp: int) -> None:
        if self.recrawler is not None:
            self.recrawler.signal_source(fp)

    def take_due(self, limit: int) -> list[PageRecord]:
        return [] if self.recrawler is None else self.recrawler.take_due(limit)

    # -- sizes and time ---------------------------------------------------------------

    def quarantine_size(self) -> int:
        """Requests set aside in the state file's quarantine (0 in memory: nothing there
        needs rebuilding)."""
        return self.store.quarantine_size() if self.store is not None else 0

    def __len__(self) -> int:
        return len(self.frontier)

    def has_pending(self) -> bool:
        return len(self.frontier) > 0

    def next_wakeup(self) -> float | None:
        return self.frontier.next_wakeup()

    def next_due(self) -> float | None:
        return None if self.recrawler is None else self.recrawler.next_due()

    def census(self) -> Census:
        frontier = self.frontier
        states = frontier.host_states()
        pages = due = None
        if self.recrawler is not None:
            pages, due = self.recrawler.census()
        seen = getattr(self.ctx.dupefilter, "seen", None)
        return Census(
            backend=self.name,
            queued=len(frontier),
            in_flight=frontier.in_flight,
            waiting_for_queue=frontier.front_len,
            hosts=HostCounts(known=states.known, active=states.active,
                             waiting=states.waiting, resting=states.resting,
                             blocked=states.blocked, retired=states.retired,
                             queued=states.queued),
            fetched=frontier.stats.completed + frontier.stats.expired,
            politeness_wait_seconds=frontier.stats.politeness_hold_seconds,
            seen=len(seen) if seen is not None and hasattr(seen, "__len__") else None,
            history_pages=pages,
            history_due=due,
        )

    def publish_stats(self, stats: StatsCollector) -> None:
        frontier = self.frontier
        st = frontier.stats
        set_value = stats.set_value
        set_value("frontier/back_queues/peak", st.peak_active)
        set_value("frontier/back_queues/activations", st.activations)
        set_value("frontier/hosts/tracked", frontier.tracked_hosts)
        set_value("frontier/back_queues/active", frontier.active_back_queues)
        set_value("frontier/politeness_hold_seconds", round(st.politeness_hold_seconds, 3))
        if st.budget_hosts:
            set_value("frontier/budget/hosts", st.budget_hosts)
            set_value("frontier/budget/requests", st.budget_items)
        # Scrapy's own scheduler stats, for dashboards that read them.
        pushed = st.pushed  # the core counts every URL it queued
        volatile = self.store.volatile if self.store is not None else pushed
        if pushed:
            set_value("scheduler/enqueued/memory", volatile)
            if self.store is not None:
                set_value("scheduler/enqueued/disk", pushed - volatile)
        if self.store is not None and volatile:
            set_value("scheduler/unserializable", volatile)
        if st.held_dispatches:
            set_value("frontier/dispatch_lateness_ms/mean",
                      round(1000 * st.dispatch_lateness_seconds / st.held_dispatches, 3))
            set_value("frontier/dispatch_lateness_ms/max",
                      round(1000 * st.dispatch_lateness_max, 3))
        if self.store is not None and self.store.undecodable:
            # Rows the store set aside in its quarantine table (logged at ERROR).
            set_value("frontier/store/undecodable", self.store.undecodable)
        if self._resolver is not None:
            set_value("frontier/ip/lookups", self._resolver.lookups)
            set_value("frontier/ip/lookup_failures", self._resolver.failures)
            set_value("frontier/ip/group_waits", st.group_parks)

    # -- durable writes ---------------------------------------------------------------

    def _write_through(self) -> None:
        """With FRONTIER_WRITE_THROUGH (the default), leases and acks are written at
        once (see the module doc); queued URLs need no such hurry: the page that
        found them is only forgotten by a later write."""
        self._dirty = False
        if self.store is not None and self.config.write_through:
            # Acks wait for their pages' records, committed just before them: one history
            # commit per batch. The seen-set waits for the periodic flush, which syncs.
            self._ack_after_history(durable=False)
            self.store.flush()

    def _maybe_flush(self) -> None:
        store = self.store
        now = self.clock()
        if store is None or now - self._last_flush < self.config.flush_interval:
            return
        self._last_flush = now
        self._ack_after_history(durable=True)
        self._flush(store)

    def _flush(self, store: SQLiteStore[Request]) -> None:
        # A failed write raises StoreError: the scheduler stops the crawl cleanly.
        seen = self._seen_store
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
            self._forget_unsaved_seen()
            raise
        covered = store.last_row()
        seen.flush(covers=covered)
        store.purge_done(covered)

    def _forget_unsaved_seen(self) -> None:
        """The queue's last writes failed: the fingerprints buffered since its last sync
        must not reach the disk without their URLs (the dupe filter closes later)."""
        if self._seen_store is not None:
            dropped = self._seen_store.discard()
            if dropped:
                logger.info("Seen-set: %d fingerprints not written, since the URLs they stand "
                            "for could not be saved", dropped)

    def _catch_up_seen(self, store: SQLiteStore[Request], seen: SQLiteFingerprintStore) -> None:
        """Put back the fingerprints of the URLs queued after the seen-set's last commit.

        The seen-set is written a little after the queue (see :meth:`_flush`): after a
        kill, the links of a page fetched again would otherwise be queued twice.
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

    # -- per-IP politeness ------------------------------------------------------------

    def _resolve_waiting(self, lease: Lease[Request] | None) -> Lease[Request] | None:
        """Start lookups for hosts waiting for their IP; pop again if one was
        answered at once and nothing was handed out yet."""
        assert self._resolver is not None
        frontier = self.frontier
        groups = frontier.groups
        assert groups is not None
        # Bounded: each round resolves hosts that pop() found unresolved.
        for _ in range(1000):
            waiting = groups.take_unresolved()
            if not waiting:
                break
            self._answered_now = False
            for key in waiting:
                self._resolver.resolve(key, self._slot_hostnames.get(key, key))
            if lease is not None or not self._answered_now:
                break
            lease = frontier.pop()
        return lease

    def _on_group(self, key: str, group: str, synchronous: bool) -> None:
        self.frontier.set_group(key, group)
        if synchronous:
            self._answered_now = True
        else:
            self.ctx.wake()

    def _remember_slot_hostname(self, key: str, request: Request) -> None:
        """A download_slot key is not a hostname: look up the first URL's host."""
        if key not in self._slot_hostnames:
            try:
                self._slot_hostnames[key] = url_host_key(request.url)
            except HostlessURL:
                self._slot_hostnames[key] = key


def _durable_seen_store(df: object) -> SQLiteFingerprintStore | None:
    seen = getattr(df, "seen", None)
    store = getattr(seen, "store", None)
    return store if isinstance(store, SQLiteFingerprintStore) else None


__all__ = ["STATE_FILE", "LocalBackend", "LocalDriver"]


class LocalBackend(Backend):
    """The ``memory`` and ``sqlite`` backends: one object serves the four ports."""

    def __init__(self, context: BackendContext) -> None:
        driver = self.driver = LocalDriver(context)
        self.queue = self.history = self.controls = self.inspection = driver
        self.name = driver.name
        self.persistent = driver.persistent
        self.location = str(driver.location)

    @property
    def frontier(self) -> Frontier[Request]:
        return self.driver.frontier

    @property
    def store(self) -> SQLiteStore[Request] | None:
        return self.driver.store

    def open(self, spider: Spider) -> None:
        self.driver.open(spider)

    def close(self, reason: str) -> None:
        self.driver.close(reason)
