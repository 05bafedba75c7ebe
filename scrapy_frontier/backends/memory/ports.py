"""The four ports over a core :class:`~scrapy_frontier.core.frontier.Frontier` in this
process. The ``sqlite`` backend extends them with its store."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, succeed

from scrapy_frontier.backends.ports import (
    HistoryPort,
    HostControlPort,
    InspectPort,
    QueuePort,
    RobotsPort,
    SeenTest,
)
from scrapy_frontier.backends.steered import log_steered
from scrapy_frontier.core.history import HistoryStore, MemoryHistoryStore
from scrapy_frontier.observe.census import Census, HostCounts

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from scrapy import Request
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.backends.memory.ip_groups import IPGroups
    from scrapy_frontier.backends.sqlite.queue import SQLiteStore
    from scrapy_frontier.core.clock import Clock
    from scrapy_frontier.core.frontier import Frontier, Lease
    from scrapy_frontier.core.history import PageRecord
    from scrapy_frontier.core.host_policy import HostPolicies
    from scrapy_frontier.core.recrawl import PageHint, Recrawler, Visit

logger = logging.getLogger("scrapy_frontier.scheduler")


class LocalQueue(QueuePort):
    """The frontier's queues and leases; a lease ends at ``complete``, its token at ``ack``."""

    def __init__(self, frontier: Frontier[Request], clock: Clock,
                 ip_groups: IPGroups | None) -> None:
        self.frontier = frontier
        self.clock = clock
        self.ip_groups = ip_groups

    def push(self, request: Request, host: str, level: int,
             seen: SeenTest | None = None) -> bool:
        # ``seen`` is None: a local queue has no shared seen set.
        if self.ip_groups is not None and "download_slot" in request.meta:
            self.ip_groups.remember_slot(host, request)
        return self.frontier.push(host, level, request)

    def claim(self) -> Lease[Request] | None:
        lease = self.frontier.pop()
        if self.ip_groups is not None:
            lease = self.ip_groups.resolve_waiting(lease)
        return lease  # a Handout by shape: no copy on the hot path

    def complete(self, ticket: int, seconds: float, rest: float,
                 ended_at: float | None = None, *, sent: bool = True) -> object:
        frontier = self.frontier
        if sent:
            ago = 0.0 if ended_at is None else self.clock() - ended_at
            lease = frontier.complete(ticket, seconds, ack=False, rest_at_least=rest,
                                      ended_ago=ago)
        else:  # (apart: one keyword fewer per fetch on the common path)
            lease = frontier.complete(ticket, 0.0, ack=False, sent=False)
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
        if token is not None:
            self.frontier.ack(token)

    def __len__(self) -> int:
        return len(self.frontier)

    def has_pending(self) -> bool:
        return len(self.frontier) > 0

    def next_wakeup(self) -> float | None:
        return self.frontier.next_wakeup()


class LocalHistory(HistoryPort):
    """Hands the events to the recrawler at once: its store answers on this thread."""

    def __init__(self) -> None:
        self.recrawler: Recrawler | None = None

    def open_history(self) -> HistoryStore:
        # A continuous crawl without a directory: the history lives as long as the crawl.
        return MemoryHistoryStore()

    def attach(self, recrawler: Recrawler) -> None:
        self.recrawler = recrawler

    def record_visit(self, fp: int, url: str, visit: Visit | None) -> None:
        if self.recrawler is not None:
            self.recrawler.record(fp, url, visit)

    def record_hints(self, hints: list[PageHint]) -> None:
        if self.recrawler is not None:
            self.recrawler.hint_many(hints)

    def record_signal_source(self, fp: int) -> None:
        if self.recrawler is not None:
            self.recrawler.signal_source(fp)

    def take_due(self, limit: int) -> list[PageRecord]:
        return [] if self.recrawler is None else self.recrawler.take_due(limit)

    def next_due(self) -> float | None:
        return None if self.recrawler is None else self.recrawler.next_due()

    def close(self) -> None:
        if self.recrawler is not None:
            self.recrawler.close()


class LocalControls(HostControlPort, RobotsPort):
    """Rests, retirements and budgets, on the frontier itself."""

    def __init__(self, frontier: Frontier[Request], measured: dict[str, int],
                 policies: HostPolicies, *, measuring: bool = False) -> None:
        self.frontier = frontier
        #: Why hosts were closed: "failures", "retired" (by hand), "budget".
        self.closed_hosts: dict[str, str] = {}
        self.measured = measured
        self.policies = policies
        #: FRONTIER_CAPACITY: connections are measured, and the policy's are their cap.
        self.measuring = measuring
        #: Each origin's robots.txt record, for the run (``robots_get``).
        self.robots: dict[str, bytes] = {}
        #: Trap states learnt from the control file (SQLite), for take_trap_states.
        self.trap_states: list[tuple[str, str]] = []
        #: Keeps a containment (SQLite: in control.sqlite): host, its budget.
        self.on_contain: Callable[[str, int], None] | None = None

    def set_connections(self, host: str, connections: int, *, together: bool = False) -> None:
        self.measured[host] = connections
        self.frontier.set_connections(host, connections, together=together)

    def steer_policies(self, raw: Mapping[str, Any]) -> list[str]:
        policies, frontier = self.policies, self.frontier
        said = policies.steer(raw)
        log_steered(policies, said)
        frontier.policy_of = policies.delays
        frontier.budgets.by_policy = policies.budget_of if policies.has_budgets else None
        back, capped = frontier.budgets_changed()
        for host in back:
            self.closed_hosts.pop(host, None)
        for host in capped:
            self.closed_hosts[host] = "budget"
        if policies.connections_fixed:
            return said
        if self.measuring:  # the measured counts, within the new caps
            for host, count in self.measured.items():
                self.measured[host] = min(count, policies.connections_of(host))
        elif frontier.connections is None:
            frontier.connections = policies.connections_of  # 1 for every host until now
        for host in frontier.active_hosts():
            allowed = (self.measured.get(host, 1) if self.measuring
                       else policies.connections_of(host))
            if allowed != frontier.connections_of(host):
                frontier.set_connections(host, allowed)
        return said

    def robots_get(self, origin: str) -> Deferred[object]:
        return succeed(self.robots.get(origin))

    def robots_put(self, origin: str, record: bytes, keep: float) -> None:
        self.robots[origin] = record  # the run ends long before ``keep``

    def set_min_rest(self, host: str, seconds: float) -> None:
        self.frontier.set_min_rest(host, seconds)

    def contain(self, host: str, fetched: int, allowance: int) -> None:
        budget = self.trap_budget(host, fetched, allowance)
        if self.on_contain is not None:
            self.on_contain(host, budget)

    def trap_budget(self, host: str, fetched: int, allowance: int | None,
                    budget: int | None = None) -> int:
        """Give ``host`` the budget of a trap: its fetches (at least ``fetched``) plus
        ``allowance``, or ``budget`` as kept; a lower budget of its own stays. A host that
        has spent it retires now."""
        frontier = self.frontier
        budgets = frontier.budgets
        if budgets.fetched(host) < fetched:
            budgets.restore(host, fetched)
        if budget is None:
            budget = budgets.fetched(host) + (allowance or 0)
        own = budgets.of(host)
        if own and own < budget:
            budget = own
        frontier.set_budget(host, budget)
        if budgets.spent(host) and not frontier.is_retired(host):
            frontier.newly_capped.append((host, len(frontier.retire(host, budget=True))))
        if frontier.over_budget(host):
            self.closed_hosts[host] = "budget"
        return budget

    def trap_kept(self, host: str, state: str, budget: int | None) -> None:
        """A row of the control file's traps table: a containment of an earlier run (its
        budget holds again), or a release by an operator (whose budget is in force)."""
        if state == "contained":
            self.trap_budget(host, 0, None, budget)
        self.trap_states.append((host, state))

    def take_trap_states(self) -> list[tuple[str, str]]:
        if not self.trap_states:
            return []
        states, self.trap_states = self.trap_states, []
        return states

    def retire(self, host: str) -> list[Request]:
        self.closed_hosts.setdefault(host, "failures")
        return self.frontier.retire(host)

    def take_dropped(self) -> list[tuple[str, Request]]:
        return self.frontier.take_dropped()

    def over_budget(self, host: str) -> bool:
        return self.frontier.over_budget(host)

    def host_counts(self) -> dict[str, int]:
        """Hosts known, blocked, retired and over budget, in this process (cheap)."""
        return self.frontier.counts()


class LocalInspection(InspectPort):
    """The census and stats of the frontier (and of its store, once there is one)."""

    def __init__(self, name: str, frontier: Frontier[Request], history: LocalHistory,
                 dupefilter: BaseDupeFilter, ip_groups: IPGroups | None) -> None:
        self.name = name
        self.frontier = frontier
        self.history = history
        self.dupefilter = dupefilter
        self.ip_groups = ip_groups
        #: The SQLite store under the frontier (None in memory).
        self.store: SQLiteStore[Request] | None = None

    def quarantine_size(self) -> int:
        """Requests set aside in the state file's quarantine (0 in memory: nothing there
        needs rebuilding)."""
        return self.store.quarantine_size() if self.store is not None else 0

    def census(self) -> Census:
        frontier = self.frontier
        states = frontier.host_states()
        pages = due = None
        recrawler = self.history.recrawler
        if recrawler is not None:
            pages, due = recrawler.census()
        seen = getattr(self.dupefilter, "seen", None)
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
        if st.held_dispatches:
            set_value("frontier/dispatch_lateness_ms/mean",
                      round(1000 * st.dispatch_lateness_seconds / st.held_dispatches, 3))
            set_value("frontier/dispatch_lateness_ms/max",
                      round(1000 * st.dispatch_lateness_max, 3))
        self._publish_enqueued(stats)
        if self.ip_groups is not None:
            resolver = self.ip_groups.resolver
            set_value("frontier/ip/lookups", resolver.lookups)
            set_value("frontier/ip/lookup_failures", resolver.failures)
            set_value("frontier/ip/group_waits", st.group_parks)

    def _publish_enqueued(self, stats: StatsCollector) -> None:
        """Scrapy's own scheduler stats, for dashboards that read them."""
        pushed = self.frontier.stats.pushed  # the core counts every URL it queued
        store = self.store
        volatile = store.counts.volatile if store is not None else pushed
        if pushed:
            stats.set_value("scheduler/enqueued/memory", volatile)
            if store is not None:
                stats.set_value("scheduler/enqueued/disk", pushed - volatile)
        if store is not None:
            if volatile:
                stats.set_value("scheduler/unserializable", volatile)
            if store.undecodable:
                # Rows the store set aside in its quarantine table (logged at ERROR).
                stats.set_value("frontier/store/undecodable", store.undecodable)
