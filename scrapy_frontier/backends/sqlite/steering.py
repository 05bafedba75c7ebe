"""Operators' controls reach a running SQLite crawl: the control timer.

``scrapy frontier block|unblock|delay|retire|budget|policy`` writes ``control.sqlite`` in the
job directory (:mod:`scrapy_frontier.backends.sqlite.control`). Once a second -- from a
timer, never from ``next_request`` -- the crawl reads the file's ``seq`` (one indexed
read); when it changed, it reads the controls and applies what differs from what it
applied last: a block or its end, a delay, a retirement, a budget, a steered policy. The
same step writes back the per-host fetch counts of the budget and the hosts the crawl
closed, which ``scrapy frontier hosts`` shows and which a restart resumes from.

At open the controls are applied before the first request is handed out, so a restart
keeps them. A busy or unreadable control file is logged once and tried again at the
next tick: the crawl itself never stops for it. (On Redis the command changes the shared
state directly; see :mod:`scrapy_frontier.backends.redis.control`.)
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_frontier.backends.sqlite.control import (
    RETIRED,
    TAKEN_BACK,
    ControlFile,
    HostControl,
    wall_to_clock,
)
from scrapy_frontier.errors import StoreError
from scrapy_frontier.hostkey import url_host_key_or_none
from scrapy_frontier.reactor.timer import Timer, call_later

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.core.frontier import Frontier
    from scrapy_frontier.core.history import HistoryStore, PageRecord

logger = logging.getLogger("scrapy_frontier.control")

#: Seconds between two looks at the control file (the "about 2 s" of a steering command).
INTERVAL = 1.0


class ControlPoller:
    """Applies ``control.sqlite`` to one process's core frontier."""

    def __init__(self, directory: str, frontier: Frontier[Request], stats: StatsCollector,
                 clock: Callable[[], float], *, closed: dict[str, str],
                 interval: float = INTERVAL) -> None:
        # A short busy timeout: this runs on the reactor; a busy file is tried next tick.
        self.file = ControlFile(directory, timeout=0.5)
        self.frontier = frontier
        self.stats = stats
        self.clock = clock
        self.interval = interval
        #: Why hosts were closed (shared with the driver): "budget", "failures", "retired".
        self.closed = closed
        self._seq = -1
        self._applied: dict[str, HostControl] = {}
        self._saved: dict[str, tuple[int, str | None]] = {}
        self._timer: Timer | None = None
        self._warned = False
        self.polls = 0
        #: Applies recrawl requests to the page history: (fp, host) pairs in, pages
        #: marked out. Set once the history is open; until then the requests wait.
        self.recrawl_to: Callable[[list[tuple[int | None, str | None]]], int] | None = None
        #: Puts the steered policy entries in force (``HostControlPort.steer_policies``).
        self.steer_to: Callable[[dict[str, Any]], list[str]] | None = None
        self._policies: dict[str, Any] | None = None
        #: Applies a row of the traps table that changed: host, state, budget.
        self.traps_to: Callable[[str, str, int | None], None] | None = None
        self._traps: dict[str, tuple[str, int | None]] = {}

    def start(self) -> None:
        """Resume the counts of an earlier run and apply the controls, then tick."""
        for host, (fetched, _) in self.file.crawl_hosts().items():
            if fetched:
                self.frontier.set_fetched(host, fetched)
                if self.frontier.over_budget(host):
                    self.closed[host] = "budget"
        self._saved = self.file.crawl_hosts()
        self.poll()
        self.apply_traps()  # after the controls: a contained host's budget is the trap's
        self._arm()

    def _arm(self) -> None:
        self._timer = call_later(self.interval, self._tick)

    def _tick(self) -> None:
        self._timer = None
        try:
            self.poll()
        finally:
            self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            self._save_counts()
        except (sqlite3.Error, StoreError) as exc:
            logger.warning("Could not save the hosts' fetch counts in %s: %s", self.file.path,
                           exc)
        self.file.close()

    def poll(self) -> None:
        self.polls += 1
        try:
            seq = self.file.seq()
            if seq != self._seq:
                self._apply(self.file.controls())
                self.apply_policies()
                self.apply_recrawls()
                if self._seq >= 0:
                    self.apply_traps()
                self._seq = seq
            self._save_counts()
        except (sqlite3.Error, StoreError) as exc:
            if not self._warned:
                self._warned = True
                logger.warning("Cannot read the control file %s (%s); trying again every "
                               "%.0f s", self.file.path, exc, self.interval)
            return
        self._warned = False

    def apply_recrawls(self) -> None:
        """Mark the pages of the waiting recrawl requests due, then delete the requests."""
        if self.recrawl_to is None:
            return
        rows = self.file.recrawl_requests()
        if not rows:
            return
        marked = self.recrawl_to([(fp, host) for _, fp, host in rows])
        self.file.applied_recrawls(rows[-1][0])
        logger.info("scrapy frontier recrawl: %d pages marked due now", marked)

    def apply_traps(self) -> None:
        """Hand on the rows of the traps table that changed (a release by an operator, or
        what an earlier run contained)."""
        if self.traps_to is None:
            return
        rows = self.file.traps()
        for host, row in rows.items():
            if self._traps.get(host) != row:
                self.traps_to(host, *row)
        self._traps = rows

    def contain(self, host: str, budget: int) -> None:
        """Keep a containment of this crawl in the control file."""
        self._traps[host] = ("contained", budget)
        try:
            self.file.contained(host, budget)
        except (sqlite3.Error, StoreError) as exc:
            logger.warning("Could not keep the containment of host %r in %s (%s): a restart "
                           "judges it again", host, self.file.path, exc)

    def apply_policies(self) -> None:
        """Put the steered policy entries in force when they changed."""
        if self.steer_to is None:
            return
        raw = self.file.policies()
        if raw == self._policies:
            return
        if raw or self._policies is not None:
            self.steer_to(raw)
        self._policies = raw

    def _apply(self, controls: dict[str, HostControl]) -> None:
        frontier = self.frontier
        now, wall = self.clock(), time.time()
        for host in set(controls) | set(self._applied):
            new = controls.get(host, HostControl(host))
            old = self._applied.get(host, HostControl(host))
            if new.blocked_until != old.blocked_until:
                until = wall_to_clock(new.blocked_until, now, wall)
                if until is None or until <= now:
                    if frontier.unblock(host):
                        logger.info("Host %r unblocked", host)
                else:
                    frontier.block(host, until)
                    logger.info("Host %r blocked %s", host, "until unblocked"
                                if math.isinf(until) else f"for {until - now:.0f} s")
            if new.delay != old.delay:
                frontier.controls.set_delay(host, new.delay or 0.0)
                logger.info("Host %r: minimum rest %s s", host, new.delay or 0)
            if new.budget != old.budget:
                was = frontier.over_budget(host)
                frontier.set_budget(host, new.budget)
                if frontier.over_budget(host):
                    self.closed[host] = "budget"
                elif was:
                    self.closed.pop(host, None)
                budgets = frontier.budgets
                logger.info("Host %r: budget %s pages (%d fetched)", host,
                            budgets.of(host) or "unlimited", budgets.fetched(host))
            if new.retired != old.retired:
                if new.retired == RETIRED:
                    self._retire(host)
                elif new.retired == TAKEN_BACK:
                    self._take_back(host)
        self._applied = controls

    def _retire(self, host: str) -> None:
        dropped = self.frontier.retire(host)
        self.closed[host] = "retired"
        self.stats.inc_value("frontier/retired_hosts")
        self.stats.inc_value("frontier/retired_hosts/by_hand")
        if dropped:
            self.stats.inc_value("frontier/retired_requests", len(dropped))
        logger.warning("Retired host %r by hand (scrapy frontier retire): dropped %d queued "
                       "requests", host, len(dropped))

    def _take_back(self, host: str) -> None:
        frontier = self.frontier
        if frontier.over_budget(host):
            logger.warning("Host %r stays retired: it reached its budget of %d pages (raise "
                           "it with scrapy frontier budget HOST PAGES)", host,
                           frontier.budgets.of(host))
            return
        if frontier.unretire(host):
            self.closed.pop(host, None)
            self.stats.inc_value("frontier/unretired_hosts")
            logger.warning("Host %r taken back by hand (scrapy frontier unretire): its new URLs "
                           "are queued again (those dropped at its retirement are gone)", host)

    def _save_counts(self) -> None:
        """Write the fetch counts and closed hosts that changed since the last save."""
        frontier = self.frontier
        counts = frontier.budgets.counts()
        changed: dict[str, tuple[int, str | None]] = {}
        for host in counts:
            if host not in self.closed and frontier.over_budget(host):
                self.closed[host] = "budget"
        for host in set(counts) | set(self.closed):
            row = (counts.get(host, 0), self.closed.get(host))
            if self._saved.get(host) != row:
                changed[host] = row
        if changed:
            self.file.save_crawl_hosts(changed)
            self._saved.update(changed)


def select_records(store: HistoryStore, requests: list[tuple[int | None, str | None]]
                   ) -> list[PageRecord]:
    """The records that recrawl requests name: (fp, None) one page (retired or not),
    (None, host) the pages of a host, (None, None) every page not retired."""
    chosen: dict[int, PageRecord] = {}
    hosts = {host for fp, host in requests if fp is None and host is not None}
    every = any(fp is None and host is None for fp, host in requests)
    for fp, _ in requests:
        if fp is not None:
            record = store.get(fp)
            if record is not None:
                chosen[fp] = record
    if every or hosts:
        for record in store.scan():
            if every or url_host_key_or_none(record.url) in hosts:
                chosen.setdefault(record.fp, record)
    return list(chosen.values())
