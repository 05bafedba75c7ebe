"""A Mercator-style URL frontier: F front queues, B back queues, a ready heap.

Vocabulary (Najork and Heydon's Mercator, "High-performance web crawling", 2001):

* **front queues** -- F FIFO queues, one per priority level 1..F (F is the
  highest). A URL whose host has no back queue waits here.
* **back queues** -- one per *active* host, holding only that host's URLs.
  Served highest level first, FIFO within a level (see ``push``).
* **ready heap** -- one entry ``(t_e, host)`` per active host that has queued
  URLs and no fetch in flight; ``t_e`` is the earliest time the host may be
  contacted again. A host given k **connections** (``connections``) has one
  entry per idle connection instead, each with its own ``t_e`` (see below).
* **due order** -- when several hosts are ready at once, the one whose next
  URL has the highest level goes first, then the one with the least slack:
  t_e minus its remaining polite schedule (backlog x (fetch + rest); unknown,
  so infinite, for a host never fetched). A finite crawl cannot end before its
  longest host schedule does, so those start first and waiting hosts age.
* **lease** -- a URL handed out for fetching. Its host has no heap entry until
  the lease is completed, which is what makes "one fetch per host at a time"
  hold; completing sets the host's next contact from the fetch duration.

**Connections** (``connections``, read when a host gets a back queue; None: one per
host): a host of k connections has up to k leases at once. Its back queue is
shared; each idle connection has its own heap entry, and a completion rests only
the connection that fetched, by the delay rule on its own fetch. An idle
connection whose host has nothing queued is *spare* (its rest end kept, no heap
entry) until the host's next URL. The host keeps one next contact, the latest of
its connections' rests: the one it saves, and the one every connection waits for
when the host gets a back queue again.

Site owners' wishes: a per-host **minimum rest** (robots.txt Crawl-delay,
``set_min_rest``) and a one-off ``rest_at_least`` on ``complete`` (Retry-After,
back-off) only ever lengthen the rest the delay policy gives. A host may have a
**delay rule** of its own (``policy_of``, per-host policy): it replaces ``policy`` for
that host's rests and slack. A **retired** host
(``retire``) loses its queued URLs; later ones are refused or dropped.

Operators' wishes (``scrapy frontier``): a **blocked** host (``block``) keeps its
URLs but is not contacted before the block ends; an operator **delay**
(``controls.set_delay``) is a minimum rest of its own, beside robots.txt's. Both,
and the minimum rests, are kept by ``controls`` (``core/host_controls.py``). A
**budget** (``budgets``, kept by ``core/budgets.py``, and ``set_budget``) caps the
fetches of a host: the fetch that reaches it retires the host the way ``retire``
does, counted apart (``stats.budget_*``).

**Host groups** (``group_hosts=True``, per-IP politeness as in BUbiNG, kept by
``core/host_groups.py``): hosts that share a group -- an IP address, set by the
caller with ``set_group`` -- also share one lease and one rest on top of their
own. A ready host whose group is unknown waits (the caller resolves the hosts
listed by ``groups.take_unresolved``); one whose group is busy is parked until
the group's fetch ends; one whose group is resting is put back in the ready heap
at the group's next contact.

The number of back queues adapts to demand between two bounds: the frontier
keeps at least ``back_queues`` hosts active whenever the front queues have work
(Mercator's refill), and activates more -- up to ``back_queues_max`` -- only
when asked for a URL while every active host is resting. See docs/design.rst.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from scrapy_frontier.core.budgets import Budgets
from scrapy_frontier.core.clock import Clock
from scrapy_frontier.core.host_controls import HostControls
from scrapy_frontier.core.host_groups import GO, PARKED, HostGroups
from scrapy_frontier.core.politeness import DelayPolicy, rest_after_fetch
from scrapy_frontier.core.prioritizer import FrontQueueChooser
from scrapy_frontier.core.store import MemoryQueueStore, QueueStore

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class Lease(Generic[T]):
    """One URL handed out for fetching; its host is busy until completed."""

    ticket: int
    host: str
    item: T
    level: int
    handed_at: float
    deadline: float
    ready_at: float
    """When the host became contactable (the heap entry's t_e)."""
    token: object = None
    """The store's handle for acknowledging this URL."""


@dataclass(slots=True)
class FrontierStats:
    pushed: int = 0
    popped: int = 0
    completed: int = 0
    expired: int = 0
    activations: int = 0
    releases: int = 0
    peak_active: int = 0
    retired_hosts: int = 0
    retired_items: int = 0
    """URLs dropped because their host was retired (queued, surfacing, or pushed later)."""
    group_parks: int = 0
    """Times a ready host waited because another host of its group was being fetched."""
    politeness_hold_seconds: float = 0.0
    """Sum, over fetches followed by another URL of the same host, of the rest imposed."""
    dispatch_lateness_seconds: float = 0.0
    """Sum, over URLs released by a politeness hold, of (handed out - t_e)."""
    dispatch_lateness_max: float = 0.0
    held_dispatches: int = 0
    budget_hosts: int = 0
    """Hosts that reached their fetch budget (and were retired for it)."""
    budget_items: int = 0
    """URLs kept out of the queues because their host was over its budget."""
    unsent: int = 0
    """Leases that ended before their request reached the host (no rest followed)."""


class HostStates(NamedTuple):
    """Hosts by state: ``active`` (a fetch in flight), ``waiting`` (rest over, URLs
    queued, not handed out yet), ``resting`` (URLs queued, rest still running),
    ``blocked`` (URLs queued, held by :meth:`Frontier.block`), ``retired``; ``known``
    is every host with state kept now (a back queue, a rest still running, or
    retired)."""

    known: int
    active: int
    waiting: int
    resting: int
    retired: int
    queued: int
    """Hosts with URLs in their back queue (whatever their state)."""
    blocked: int = 0


@dataclass(slots=True, eq=False)
class _Host(Generic[T]):
    key: str
    next_contact: float = 0.0
    last_fetch: float | None = None
    # Owns a back queue (in the store), and how many URLs wait in it.
    active: bool = False
    queued: int = 0
    busy: int = 0
    """Leases in flight (at most ``conns``)."""
    held: bool = field(default=False)
    """True while the host's heap entry comes from a politeness hold (with several
    connections: the last entry scheduled)."""
    conns: int = 1
    """Connections the host may use, read when it gets a back queue."""
    spare: list[float] | None = None
    """With several connections: the rest ends of the idle connections that have no
    heap entry (only while no URL is queued, or while they gather). None for a host with
    one connection."""
    gather: bool = False
    """Its idle connections wait, spare, for the busy ones, and all go at once at the
    latest of their rest ends (``set_connections(..., together=True)``)."""
    shrink: int = 0
    """Busy connections that end with their lease (``set_connections`` to fewer)."""


def check_shape(
    front_queues: int, back_queues: int, back_queues_max: int | None, lease_timeout: float
) -> int:
    """Validate a frontier's sizes (any backend); returns the effective back_queues_max."""
    if front_queues < 1:
        raise ValueError(f"front_queues must be >= 1, got {front_queues}")
    if back_queues < 1:
        raise ValueError(f"back_queues must be >= 1, got {back_queues}")
    if back_queues_max is None:
        back_queues_max = back_queues
    if back_queues_max < back_queues:
        raise ValueError(
            f"back_queues_max ({back_queues_max}) must be >= back_queues ({back_queues})"
        )
    if not lease_timeout > 0:
        raise ValueError(f"lease_timeout must be > 0, got {lease_timeout}")
    return back_queues_max


class Frontier(Generic[T]):
    """The in-memory Mercator frontier. ``T`` is whatever the caller queues."""

    def __init__(
        self,
        *,
        front_queues: int = 8,
        priority_bias: float = 2.0,
        back_queues: int = 48,
        back_queues_max: int | None = None,
        policy: DelayPolicy | None = None,
        policy_of: Callable[[str], DelayPolicy] | None = None,
        lease_timeout: float = 240.0,
        clock: Clock,
        rng: random.Random | None = None,
        store: QueueStore[T] | None = None,
        group_hosts: bool = False,
        connections: Callable[[str], int] | None = None,
    ) -> None:
        back_queues_max = check_shape(front_queues, back_queues, back_queues_max, lease_timeout)
        self.levels = front_queues
        self.back_queues = back_queues
        self.back_queues_max = back_queues_max
        self.policy = policy or DelayPolicy()
        #: Each host's own delay rule; None: ``policy`` for every host.
        self.policy_of = policy_of
        self.lease_timeout = lease_timeout
        self.clock = clock
        self.chooser = FrontQueueChooser(front_queues, priority_bias, rng or random.Random(0))
        self.stats = FrontierStats()
        self.store: QueueStore[T] = store if store is not None else MemoryQueueStore(front_queues)
        self._front_len = 0
        self._back_len = 0
        self._active = 0
        self._hosts: dict[str, _Host[T]] = {}
        self._ready: list[tuple[float, int, str]] = []
        # Hosts whose t_e has passed, best first: (-head level, slack, seq, host,
        # t_e) with slack = t_e - estimated remaining schedule. Filled by pop().
        self._due: list[tuple[int, float, int, str, float]] = []
        # Hosts without a back queue whose rest has not ended yet: kept so that a
        # host that comes back through the front queues still honours its rest.
        self._cooling: list[tuple[float, str]] = []
        # Insertion-ordered; deadlines grow with tickets (constant timeout).
        self._leases: dict[int, Lease[T]] = {}
        self._seq = 0
        #: robots.txt's and operators' wishes for single hosts: least rests, blocks.
        self.controls = HostControls()
        # Hosts given up for good (see retire): their URLs are refused or dropped.
        self._retired: set[str] = set()
        # Items of retired hosts dropped when they surfaced from a front queue,
        # until the caller collects them with take_dropped().
        self._dropped: list[tuple[str, T]] = []
        #: Fetches allowed per host, and fetches made.
        self.budgets = Budgets()
        # Retired hosts that were retired for reaching their budget.
        self._capped: set[str] = set()
        #: Hosts that reached their budget since the caller last looked, with the URLs
        #: their back queue dropped then (the caller logs each once and clears the list).
        self.newly_capped: list[tuple[str, int]] = []
        #: Per-IP politeness (hosts that share an address share a rest); None: off.
        self.groups = HostGroups(self.policy, clock) if group_hosts else None
        #: How many connections (leases at once) a host may use, read when it gets a back
        #: queue; None: one for every host. With host groups a host uses one: its group
        #: allows one fetch at a time.
        self.connections = None if group_hosts else connections

    # -- sizes -------------------------------------------------------------

    def __len__(self) -> int:
        """URLs queued (front and back), not counting those in flight."""
        return self._front_len + self._back_len

    @property
    def in_flight(self) -> int:
        return len(self._leases)

    @property
    def active_back_queues(self) -> int:
        return self._active

    @property
    def front_len(self) -> int:
        return self._front_len

    @property
    def tracked_hosts(self) -> int:
        return len(self._hosts)

    def next_contact(self, host: str) -> float | None:
        """The host's earliest next contact, if the frontier still remembers it."""
        hs = self._hosts.get(host)
        return None if hs is None else hs.next_contact

    def lease_host(self, ticket: int) -> str | None:
        """The host of an outstanding lease, or None if it is unknown or over."""
        lease = self._leases.get(ticket)
        return None if lease is None else lease.host

    def host_busy(self, host: str) -> bool:
        hs = self._hosts.get(host)
        return hs is not None and hs.busy > 0

    def connections_of(self, host: str) -> int:
        """The connections ``host`` may use now (1 for a host without a back queue)."""
        hs = self._hosts.get(host)
        return 1 if hs is None or not hs.active else hs.conns

    def rest_until(self, host: str, until: float) -> None:
        """Make ``host`` wait until at least ``until`` (restoring saved state).

        Only for a host that has no back queue yet, i.e. before its URLs are
        pushed again.
        """
        hs = self._hosts.get(host)
        if hs is not None and (hs.active or hs.busy):
            raise ValueError(f"host {host!r} is active; set its rest before pushing")
        if hs is None:
            hs = _Host(host)
            self._hosts[host] = hs
        hs.next_contact = max(hs.next_contact, until)
        heapq.heappush(self._cooling, (hs.next_contact, host))

    def set_min_rest(self, host: str, seconds: float) -> None:
        """Every fetch from ``host`` is followed by a rest of at least ``seconds``
        (on top of nothing: the policy's delay applies if it is longer).

        ``0`` removes the floor. Remembered even when the host's state is
        forgotten, so it holds for the whole crawl (see ``controls``).
        """
        self.controls.set_min_rest(host, seconds)

    def is_retired(self, host: str) -> bool:
        return host in self._retired

    def over_budget(self, host: str) -> bool:
        return host in self._capped

    def retire(self, host: str, *, budget: bool = False) -> list[T]:
        """Give up ``host`` for good: drop the URLs in its back queue and return them.

        Later pushes for the host are refused (``push`` returns False) and its
        URLs still waiting in front queues are dropped when they surface (see
        :meth:`take_dropped`). A fetch in flight is left to complete normally.
        ``budget``: the host reached its budget (counted in ``budget_*``, and its
        front-queue URLs are dropped silently).
        """
        dropped: list[T] = []
        if host in self._retired:
            return dropped
        self._retired.add(host)
        if budget:
            self._capped.add(host)
            self.stats.budget_hosts += 1
        else:
            self.stats.retired_hosts += 1
        hs = self._hosts.get(host)
        if hs is None:
            return dropped
        if hs.active and hs.queued:
            self._unschedule(host)
            while hs.queued:
                taken = self.store.back_lease(hs.key)
                self._recount(hs)  # rare: count exactly
                if taken is None:
                    break
                _, item, token = taken
                self.store.ack(token)
                dropped.append(item)
        if hs.active and not hs.busy:
            hs.active = False
            hs.spare = None
            hs.gather = False
            self.store.back_close(host)
            self._active -= 1
            self.stats.releases += 1
            heapq.heappush(self._cooling, (hs.next_contact, host))
        if budget:
            self.stats.budget_items += len(dropped)
        else:
            self.stats.retired_items += len(dropped)
        self._fill_to_floor()
        return dropped

    def unretire(self, host: str) -> bool:
        """Accept ``host``'s URLs again (its dropped ones are gone). False if not retired."""
        if host not in self._retired:
            return False
        self._retired.discard(host)
        self._capped.discard(host)
        return True

    # -- operator controls ---------------------------------------------------

    def block(self, host: str, until: float = math.inf) -> None:
        """Do not contact ``host`` before ``until`` (clock time; inf: until
        :meth:`unblock`). Its URLs stay queued; a fetch in flight ends normally."""
        hs = self._hosts.get(host)
        contact = self.controls.block(host, until, 0.0 if hs is None else hs.next_contact)
        if hs is None:
            hs = self._hosts[host] = _Host(host)
        self._reschedule(hs, contact)

    def unblock(self, host: str) -> bool:
        """End ``host``'s block: it rests as it would have without it. False if not blocked."""
        rest_end = self.controls.unblock(host)
        if rest_end is None:
            return False
        hs = self._hosts.get(host)
        if hs is not None:
            self._reschedule(hs, rest_end, lower=True)
        return True

    def _reschedule(self, hs: _Host[T], contact: float, *, lower: bool = False) -> None:
        """Move the host's next contact to ``contact`` (later only, unless ``lower``)."""
        hs.next_contact = contact if lower else max(hs.next_contact, contact)
        if hs.spare is not None:
            # Several connections: every idle one waits for the host's next contact (a
            # lease's completion applies the block to its own connection).
            self._unschedule(hs.key)
            self._idle_all(hs, hs.next_contact, held=False)
            return
        if hs.busy:
            return  # its release applies the block
        if hs.active and hs.queued:
            self._unschedule(hs.key)
            self._schedule(hs, held=False)
        elif not hs.active and not math.isinf(hs.next_contact):
            heapq.heappush(self._cooling, (hs.next_contact, hs.key))

    def set_connections(self, host: str, connections: int, *, together: bool = False) -> None:
        """``host`` uses ``connections`` from now (a measured capacity): more are idle from
        the host's next contact; fewer drop idle ones first (the latest to rest end), then
        busy ones as their leases end. ``together``: the idle connections wait for the busy
        ones, and all go at once, at the latest of their rest ends (each has rested its own
        rest): the burst that tests whether the host serves that many at once.

        A host without a back queue reads ``connections(host)`` when it gets one; the caller
        answers the new count there too."""
        if self.connections is None:
            raise ValueError("set_connections needs a frontier made with connections=")
        if connections < 1:
            raise ValueError(f"connections must be >= 1, got {connections}")
        hs = self._hosts.get(host)
        if hs is None or not hs.active:
            return
        if hs.spare is None:
            hs.spare = []
        self._unschedule(host)  # its heap entries become spare, their rest ends kept
        spare = hs.spare
        hs.shrink = 0
        if connections >= hs.conns:
            spare.extend([hs.next_contact] * (connections - hs.conns))
            hs.conns = connections
        else:
            spare.sort()
            idle = min(hs.conns - connections, len(spare))
            del spare[len(spare) - idle:]
            hs.conns -= idle
            hs.shrink = hs.conns - connections
        hs.gather = together and hs.conns > 1
        if hs.queued:
            self._wake_spare(hs, held=bool(spare) and max(spare) > self.clock())

    def set_budget(self, host: str, fetches: int | None) -> None:
        """``host`` may be fetched ``fetches`` times in all (None: the default
        ``budgets.default``; 0: unlimited). A raised budget takes a capped host back."""
        self.budgets.set(host, fetches)
        if host in self._capped and not self.budgets.spent(host):
            self.unretire(host)

    def budgets_changed(self) -> tuple[list[str], list[str]]:
        """Many hosts' budgets changed at once (a per-host policy): the hosts over budget
        whose budget now allows more are taken back, and the hosts whose fetches reach their
        new budget retire now. Returns (taken back, retired)."""
        back = [host for host in self._capped if not self.budgets.spent(host)]
        for host in back:
            self.unretire(host)
        spent = [host for host in self.budgets.counts()
                 if host not in self._retired and self.budgets.spent(host)]
        for host in spent:
            self.newly_capped.append((host, len(self.retire(host, budget=True))))
        return back, spent

    def active_hosts(self) -> list[str]:
        """The hosts with a back queue now."""
        return [key for key, hs in self._hosts.items() if hs.active]

    def set_fetched(self, host: str, count: int) -> None:
        """Restore a count saved by an earlier run; a host already over budget retires."""
        self.budgets.restore(host, count)
        if self.budgets.spent(host):
            self.retire(host, budget=True)

    def counts(self) -> dict[str, int]:
        """Hosts known, blocked now, retired (for failures or by hand), over budget."""
        now = self.clock()
        return {
            "known": len(self._hosts),
            "blocked": self.controls.blocked(now),
            "retired": len(self._retired) - len(self._capped),
            "over_budget": len(self._capped),
        }

    def take_dropped(self) -> list[tuple[str, T]]:
        """(host, item) of retired hosts dropped from front queues since the last call."""
        dropped, self._dropped = self._dropped, []
        return dropped

    def _unschedule(self, host: str) -> None:
        """Remove the host's heap entries (ready or due), or its place in a group, if any.

        With several connections, the idle connections whose entries go become spare,
        with their rest ends kept.
        """
        if self.groups is not None:
            self.groups.unschedule(host)
        hs = self._hosts[host]
        spare = hs.spare
        ready = [e for e in self._ready if e[2] != host]
        if len(ready) != len(self._ready):
            if spare is not None:
                spare.extend(e[0] for e in self._ready if e[2] == host)
            heapq.heapify(ready)
            self._ready = ready
        due = [e for e in self._due if e[3] != host]
        if len(due) != len(self._due):
            if spare is not None:
                spare.extend(e[4] for e in self._due if e[3] == host)
            heapq.heapify(due)
            self._due = due

    def _idle_all(self, hs: _Host[T], contact: float, *, held: bool) -> None:
        """Several connections, none in the heap: every idle one waits until ``contact``,
        in the heap if the host has URLs queued, else spare."""
        spare = hs.spare
        assert spare is not None
        spare[:] = [contact] * (hs.conns - hs.busy)
        if hs.queued:
            self._wake_spare(hs, held=held)

    def _spare_idle(self, hs: _Host[T]) -> None:
        """Several connections, nothing queued any more: the idle connections still in
        the heap become spare (a heap entry is only ever for a host with URLs)."""
        spare = hs.spare
        assert spare is not None and not hs.queued
        if hs.conns - hs.busy > len(spare):
            self._unschedule(hs.key)

    def _wake_spare(self, hs: _Host[T], *, held: bool) -> None:
        """URLs are queued: every spare connection of the host goes into the heap (while
        they gather: once none is busy, all at the latest of their rest ends)."""
        spare = hs.spare
        assert spare is not None
        if hs.gather:
            if hs.busy:
                return
            hs.gather = False
            if spare:
                spare[:] = [max(spare)] * len(spare)
        hs.held = held
        ready = self._ready
        for t in spare:
            self._seq += 1
            heapq.heappush(ready, (t, self._seq, hs.key))
        spare.clear()

    # -- host groups (per-IP politeness) -----------------------------------

    def set_group(self, host: str, group: str) -> None:
        """``host`` belongs to ``group`` (e.g. the IP address it resolves to).

        Only used with ``group_hosts``. A host waiting for its group becomes
        ready again. Moving a host that is fetching or parked is refused.
        """
        if self.groups is None:
            raise ValueError("set_group needs a frontier made with group_hosts=True")
        if self.groups.assign(host, group):
            hs = self._hosts.get(host)
            if hs is not None and hs.active and hs.queued and not hs.busy:
                self._schedule(hs, held=hs.next_contact > self.clock())

    def _group_allows(self, hs: _Host[T], now: float) -> bool:
        """Whether a due host's group lets it be fetched now; if not, it waits (parked,
        held until its group is known, or in the ready heap until its group's rest ends)."""
        assert self.groups is not None
        verdict = self.groups.gate(hs.key, now)
        if verdict == GO:
            return True
        if verdict == PARKED:
            self.stats.group_parks += 1
        elif verdict > 0:
            # The host may not go before its group does: wait in the ready heap.
            hs.next_contact = verdict
            self._schedule(hs, held=True)
        return False

    def _complete_group(self, host: str, fetch_seconds: float, now: float, *,
                        sent: bool = True) -> None:
        assert self.groups is not None
        parked, contact = self.groups.complete(host, fetch_seconds, now, sent=sent)
        for key in parked:
            hs = self._hosts[key]
            hs.next_contact = max(hs.next_contact, contact)
            self._schedule(hs, held=True)

    def resume(self, front_count: int, hosts: dict[str, int]) -> None:
        """Take over a durable store's state after a restart: ``front_count`` URLs
        in its front queues, and hosts that own back queues with their sizes.

        Call :meth:`rest_until` for resting hosts first.
        """
        if len(self) or self._active or self._leases:
            raise ValueError("resume() needs a frontier that has not been used yet")
        self._front_len = front_count
        for host, queued in hosts.items():
            hs = self._hosts.get(host)
            if hs is None:
                hs = self._hosts[host] = _Host(host)
            hs.active = True
            if self.connections is not None:
                self._connect(hs)
            self._active += 1
            self._back_len += queued
            hs.queued = queued
            if not queued:
                continue
            if hs.spare is not None:
                self._wake_spare(hs, held=False)
            else:
                self._schedule(hs, held=False)
        self.stats.peak_active = max(self.stats.peak_active, self._active)
        # A crash may have left fewer hosts active than the floor: refill now, as a
        # running frontier would have.
        self._fill_to_floor()

    def rests(self) -> dict[str, float]:
        """Every remembered host whose next contact is still ahead of the clock."""
        now = self.clock()
        return {k: hs.next_contact for k, hs in self._hosts.items() if hs.next_contact > now}

    # -- adding ------------------------------------------------------------

    def push(self, host: str, level: int, item: T) -> bool:
        """Queue ``item`` for ``host`` at priority ``level`` (1..F, F highest).

        A host that owns a back queue gets the item straight into it (the
        result Mercator's refill would reach, without the round trip through a
        front queue); other hosts' items wait in front queue ``level``.
        Returns False (and queues nothing) if the host was retired.
        """
        if not 1 <= level <= self.levels:
            raise ValueError(f"level must be in 1..{self.levels}, got {level}")
        if host in self._retired:
            if host in self._capped:
                self.stats.budget_items += 1
            else:
                self.stats.retired_items += 1
            return False
        self.stats.pushed += 1
        hs = self._hosts.get(host)
        if hs is not None and hs.active:
            self.store.back_append(host, level, item)
            self._added_to_back(hs)
            return True
        self.store.front_append(level, host, item)
        self._front_len += 1
        if self._active < self.back_queues:
            self._fill_to_floor()
        return True

    def _added_to_back(self, hs: _Host[T]) -> None:
        assert hs.active
        hs.queued += 1
        self._back_len += 1
        if hs.queued == 1:
            if hs.spare is not None:
                if hs.spare:
                    self._wake_spare(hs, held=max(hs.spare) > self.clock())
            elif not hs.busy:
                # A host coming back while still resting counts as held for politeness.
                self._schedule(hs, held=hs.next_contact > self.clock())

    def _schedule(self, hs: _Host[T], *, held: bool) -> None:
        self._seq += 1
        hs.held = held
        heapq.heappush(self._ready, (hs.next_contact, self._seq, hs.key))

    # -- Mercator refill ---------------------------------------------------

    def _fill_to_floor(self) -> None:
        while self._active < self.back_queues and self._front_len:
            self._activate_one()

    def _activate_one(self) -> bool:
        """Refill: move front-queue heads into back queues until a host without
        a back queue is found and given one. False if the front queues ran dry."""
        store = self.store
        while self._front_len:
            levels = store.front_levels()
            # One level in use is the common case: no draw, no list to build.
            level = (levels[0] if len(levels) == 1
                     else 1 + self.chooser.choose([lv - 1 for lv in levels]))
            host = store.front_head_host(level)
            if host in self._retired:
                self._drop_front_head(level, host)
                continue
            hs = self._hosts.get(host)
            activating = hs is None or not hs.active
            if activating:
                if hs is None:
                    hs = _Host(host)
                    self._hosts[host] = hs
                hs.active = True
                if self.connections is not None:
                    self._connect(hs)
                store.back_open(host)
                self._active += 1
                self.stats.activations += 1
                if self._active > self.stats.peak_active:
                    self.stats.peak_active = self._active
            assert hs is not None
            store.front_to_back(level)
            self._front_len -= 1
            self._added_to_back(hs)
            if activating:
                return True
        return False

    def _connect(self, hs: _Host[T]) -> None:
        """A host gets a back queue: read how many connections it may use. Each idle one
        rests until the host's next contact (one rest is kept per host)."""
        assert self.connections is not None
        conns = self.connections(hs.key)
        if conns < 1:
            raise ValueError(f"connections({hs.key!r}) must be >= 1, got {conns}")
        hs.conns = conns
        hs.spare = None if conns == 1 else [hs.next_contact] * conns

    def _drop_front_head(self, level: int, host: str) -> None:
        """Drop the head of front queue ``level``: a URL of a retired host.

        The store has no "delete head" operation, so the URL passes through a
        short-lived back queue and is leased and acknowledged at once.
        """
        store = self.store
        hs = self._hosts.get(host)
        # A retired host with a fetch in flight still owns its (empty) back queue.
        owned = hs is not None and hs.active
        if not owned:
            store.back_open(host)
        store.front_to_back(level)
        self._front_len -= 1
        taken = store.back_lease(host)  # None: the store set the URL aside as unreadable
        if taken is not None:
            _, item, token = taken
            store.ack(token)
            if host in self._capped:
                self.stats.budget_items += 1  # counted, not reported one by one
            else:
                self.stats.retired_items += 1
                self._dropped.append((host, item))
        if not owned:
            store.back_close(host)

    # -- taking ------------------------------------------------------------

    def pop(self) -> Lease[T] | None:
        """The next URL whose host may be contacted now, or None.

        When no active host is ready and the front queues hold other hosts,
        more back queues are activated (up to ``back_queues_max``): the caller
        only asks when it has a free download slot, so this is demand.
        """
        now = self.clock()
        cooling = self._cooling
        if cooling and cooling[0][0] <= now:
            self._purge_cooling(now)
        ready = self._ready
        due = self._due
        hosts = self._hosts
        while True:
            while ready and ready[0][0] <= now:
                t_e, seq, key = heapq.heappop(ready)
                hs = hosts[key]
                queued = hs.queued
                # Slack: t_e less the host's remaining polite schedule, backlog x cycle
                # (among hosts ready at once, the longest schedule left goes first: the
                # crawl cannot end before it does). A host never fetched has an unknown
                # site behind it: the longest, so that every host starts early.
                fetch = hs.last_fetch
                if fetch is None:
                    slack = -math.inf
                else:
                    rule = self.policy if self.policy_of is None else self.policy_of(key)
                    slack = t_e - queued * (fetch + rule.delay(fetch))
                heapq.heappush(due, (-self.store.back_head_level(key), slack, seq, key, t_e))
            if due:
                entry = heapq.heappop(due)
                hs = hosts[entry[3]]
                if self.groups is not None and not self._group_allows(hs, now):
                    continue
                lease = self._hand_out(hs, entry[4], now)
                if lease is not None:
                    return lease
                continue
            if self._active < self.back_queues_max and self._front_len:
                self._activate_one()
                continue
            return None

    def _recount(self, hs: _Host[T]) -> None:
        """Count out of the host the URLs the store set aside as unreadable while
        leasing (see QueueStore.back_lease)."""
        left = self.store.back_len(hs.key)
        self._back_len -= hs.queued - left
        hs.queued = left

    def _hand_out(self, hs: _Host[T], t_e: float, now: float) -> Lease[T] | None:
        """Lease the host's next URL on the connection free since ``t_e``; None if the
        store found none it could read."""
        assert hs.queued
        store = self.store
        before = store.undecodable
        taken = store.back_lease(hs.key)
        if taken is not None and store.undecodable == before:
            hs.queued -= 1  # the common case: one URL out, nothing set aside
            self._back_len -= 1
        else:
            self._recount(hs)
        if taken is None:
            # Nothing left to fetch: the host gives up its back queue, with its rest kept
            # (with several connections: once no other is fetching).
            if hs.spare is not None:
                hs.spare.append(t_e)
                self._spare_idle(hs)
                if hs.busy:
                    return None
                hs.spare = None  # each connection's rest ends with the host's
            self._close_back_queue(hs)
            return None
        level, item, token = taken
        self._seq += 1
        # Positional: this runs once per URL. (ticket, host, item, level, handed_at,
        # deadline, ready_at, token)
        lease = Lease(self._seq, hs.key, item, level, now, now + self.lease_timeout, t_e, token)
        if hs.spare is None:
            hs.busy = 1  # one connection
        else:
            hs.busy += 1
            if not hs.queued:
                self._spare_idle(hs)
        self._leases[lease.ticket] = lease
        if self.groups is not None:
            self.groups.take(hs.key)
        stats = self.stats
        stats.popped += 1
        if hs.held:
            late = now - t_e
            stats.held_dispatches += 1
            stats.dispatch_lateness_seconds += late
            if late > stats.dispatch_lateness_max:
                stats.dispatch_lateness_max = late
        return lease

    # -- finishing ---------------------------------------------------------

    def complete(
        self,
        ticket: int,
        fetch_seconds: float,
        *,
        ack: bool = True,
        rest_at_least: float = 0.0,
        ended_ago: float = 0.0,
        sent: bool = True,
    ) -> Lease[T] | None:
        """Report that the fetch of lease ``ticket`` ended after ``fetch_seconds``.

        The delay policy's rest counts from when the answer was complete, ``ended_ago``
        seconds before now (the caller knows it no later than the server's end; 0: now).
        ``rest_at_least`` makes the host rest at least that long from now, whatever
        the delay policy says (a Retry-After header, a back-off after errors).

        Returns the lease, or None if it was unknown (already completed or
        expired) -- a late report must not release a host twice. With
        ``ack=False`` the host is released but the store keeps the URL until
        :meth:`ack` (the caller waits until the response's links are queued).
        ``sent=False``: the request never reached the host (robots.txt forbade it, a
        cache answered it): the host rests nothing, keeps its last fetch time, and its
        budget does not count it.
        """
        lease = self._leases.pop(ticket, None)
        if lease is None:
            return None
        if not rest_at_least >= 0:  # NaN too
            raise ValueError(f"rest_at_least must be >= 0, got {rest_at_least}")
        if not sent:
            self._end_unsent(lease, self.clock(), ack=ack)
            return lease
        self._complete_lease(lease, fetch_seconds, self.clock(), ack=ack,
                             rest_at_least=rest_at_least, ended_ago=ended_ago)
        self.stats.completed += 1
        if self.budgets.active:
            host = lease.host
            if self.budgets.count(host) and host not in self._retired:
                self.newly_capped.append((host, len(self.retire(host, budget=True))))
        return lease

    def ack(self, token: object) -> None:
        """The URL of a completed lease is done for good (see ``complete``)."""
        self.store.ack(token)

    def _complete_lease(
        self,
        lease: Lease[T],
        fetch_seconds: float,
        now: float,
        *,
        ack: bool = True,
        rest_at_least: float = 0.0,
        ended_ago: float = 0.0,
    ) -> None:
        hs = self._hosts[lease.host]
        if hs.spare is not None:
            self._complete_connection(hs, lease, fetch_seconds, now, ack, rest_at_least,
                                      ended_ago)
            return
        hs.busy = 0  # one connection
        # As the Redis frontier keeps it (tests/backends/redis/test_lua_parity.py): never
        # negative, and only while the host owns a back queue (forgotten below when it frees it).
        hs.last_fetch = fetch_seconds if fetch_seconds > 0.0 else 0.0
        if self.groups is not None:
            self._complete_group(hs.key, fetch_seconds, now)
        controls = self.controls
        min_rests, delays = controls.min_rests, controls.delays
        rule = self.policy if self.policy_of is None else self.policy_of(hs.key)
        rest = rest_after_fetch(
            rule.delay(fetch_seconds), ended_ago,
            min_rests.get(hs.key, 0.0) if min_rests else 0.0, rest_at_least,
            delays.get(hs.key, 0.0) if delays else 0.0)
        hs.next_contact = now + rest
        if ack:
            self.store.ack(lease.token)
        self.store.save_rest(hs.key, rest, fetch_seconds)
        if controls.blocks:
            # The rest is saved as is; a block is kept beside it (and re-applied).
            hs.next_contact = controls.after_completion(hs.key, hs.next_contact, now)
        if hs.queued:
            self.stats.politeness_hold_seconds += rest
            # _schedule(hs, held=True), inline: once per URL.
            self._seq += 1
            hs.held = True
            heapq.heappush(self._ready, (hs.next_contact, self._seq, hs.key))
            return
        self._close_back_queue(hs)

    def _end_unsent(self, lease: Lease[T], now: float, *, ack: bool) -> None:
        """A lease whose request never reached its host: the host is ready again when it
        was ready for this lease (or now), with no rest and its last fetch time kept."""
        hs = self._hosts[lease.host]
        hs.busy -= 1
        if self.groups is not None:
            self._complete_group(hs.key, 0.0, now, sent=False)
        if hs.spare is not None:
            self._unsent_connection(hs, lease, now, ack=ack)
            return
        hs.next_contact = max(lease.ready_at, now)
        if ack:
            self.store.ack(lease.token)
        controls = self.controls
        if controls.blocks:
            hs.next_contact = controls.after_completion(hs.key, hs.next_contact, now)
        self.stats.unsent += 1
        if hs.queued:
            self._schedule(hs, held=False)
            return
        self._close_back_queue(hs)

    def _complete_connection(self, hs: _Host[T], lease: Lease[T], fetch_seconds: float,
                             now: float, ack: bool, rest_at_least: float,
                             ended_ago: float) -> None:
        """A lease of a host with several connections ended: its connection rests by the
        rule on this fetch (as ``_complete_lease`` rests a host of one); the others keep
        their own rests."""
        hs.busy -= 1
        hs.last_fetch = fetch_seconds if fetch_seconds > 0.0 else 0.0
        controls = self.controls
        min_rests, delays = controls.min_rests, controls.delays
        rule = self.policy if self.policy_of is None else self.policy_of(hs.key)
        rest = rest_after_fetch(
            rule.delay(fetch_seconds), ended_ago,
            min_rests.get(hs.key, 0.0) if min_rests else 0.0, rest_at_least,
            delays.get(hs.key, 0.0) if delays else 0.0)
        end = now + rest
        if ack:
            self.store.ack(lease.token)
        block = controls.blocks.get(hs.key) if controls.blocks else None
        # One rest is kept per host (and saved): the latest of its connections'.
        latest = max(end, hs.next_contact if block is None else block[1])
        self.store.save_rest(hs.key, latest - now, fetch_seconds)
        hs.next_contact = latest
        contact = end
        if block is not None:
            # As for one connection: the rest is kept beside a block that still runs.
            hs.next_contact = max(latest, controls.after_completion(hs.key, latest, now))
            if block[0] > now:
                contact = max(end, block[0])
        if hs.queued:
            self.stats.politeness_hold_seconds += rest
        self._idle_again(hs, contact, held=True)

    def _unsent_connection(self, hs: _Host[T], lease: Lease[T], now: float, *,
                           ack: bool) -> None:
        """A lease of a host with several connections ended unsent: its connection is
        ready again when it was ready for this lease (or now); the host's rest stays."""
        contact = max(lease.ready_at, now)
        if ack:
            self.store.ack(lease.token)
        controls = self.controls
        block = controls.blocks.get(hs.key) if controls.blocks else None
        if block is not None:
            controls.after_completion(hs.key, block[1], now)  # forgets a block that ended
            if block[0] > now:
                contact = max(contact, block[0])
        self.stats.unsent += 1
        self._idle_again(hs, contact, held=False)

    def _idle_again(self, hs: _Host[T], contact: float, *, held: bool) -> None:
        """A connection of a host with several is free from ``contact``: into the heap if
        URLs wait, else spare; gone if the host is shrinking; the back queue closes once
        nothing is queued or in flight (each rest ends with the host's, the latest)."""
        spare = hs.spare
        assert spare is not None
        if hs.shrink:
            hs.shrink -= 1
            hs.conns -= 1
        elif hs.queued and not hs.gather:
            hs.held = held
            self._seq += 1
            heapq.heappush(self._ready, (contact, self._seq, hs.key))
            return
        else:
            spare.append(contact)
        if hs.queued:
            if hs.gather and not hs.busy:
                self._wake_spare(hs, held=held)
            return
        if hs.busy:
            return
        hs.spare = None
        hs.gather = False
        self._close_back_queue(hs)

    def _close_back_queue(self, hs: _Host[T]) -> None:
        """Back queue empty: the host gives up its back queue (Mercator refill)."""
        hs.active = False
        hs.gather = False
        hs.last_fetch = None
        self.store.back_close(hs.key)
        self._active -= 1
        self.stats.releases += 1
        heapq.heappush(self._cooling, (hs.next_contact, hs.key))
        self._fill_to_floor()

    def next_lease_deadline(self) -> float | None:
        for lease in self._leases.values():
            return lease.deadline
        return None

    def expire_leases(self) -> list[Lease[T]]:
        """Release hosts whose fetch was never reported (the safety net).

        The host rests as if the fetch had lasted until now, which the delay
        policy clamps to at most ``max_delay``.
        """
        now = self.clock()
        expired: list[Lease[T]] = []
        leases = self._leases
        while leases:
            ticket, lease = next(iter(leases.items()))
            if lease.deadline > now:
                break
            del leases[ticket]
            self._complete_lease(lease, now - lease.handed_at, now)
            self.stats.expired += 1
            expired.append(lease)
        return expired

    def leases(self) -> list[Lease[T]]:
        return list(self._leases.values())

    # -- time --------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        """Earliest time at which ``pop`` could return something new, if any."""
        if self._due:
            return min(entry[4] for entry in self._due)
        if not self._ready or math.isinf(self._ready[0][0]):
            return None  # nothing, or only hosts blocked until unblocked
        return self._ready[0][0]

    def _purge_cooling(self, now: float) -> None:
        cooling = self._cooling
        hosts = self._hosts
        while cooling and cooling[0][0] <= now:
            _, key = heapq.heappop(cooling)
            hs = hosts.get(key)
            if (
                hs is not None
                and not hs.active
                and not hs.busy
                and hs.next_contact <= now
            ):
                del hosts[key]
                if self.groups is not None:
                    self.groups.forget(key)

    # -- inspection --------------------------------------------------------

    def host_states(self) -> HostStates:
        """How many hosts are in each state now (see :class:`HostStates`).

        O(hosts tracked): for a census every few seconds, never per URL.
        """
        now = self.clock()
        known = active = waiting = resting = queued = blocked = 0
        blocks = self.controls.blocks
        # With several connections, a host waits once its first idle connection may go.
        first: dict[str, float] = {}
        if self.connections is not None:
            for t_e, _, key in self._ready:
                if t_e < first.get(key, math.inf):
                    first[key] = t_e
            for *_, key, t_e in self._due:
                if t_e < first.get(key, math.inf):
                    first[key] = t_e
        for hs in self._hosts.values():
            if hs.active or hs.next_contact > now:
                known += 1
            if hs.queued:
                queued += 1
            if hs.busy:
                active += 1
            elif hs.active and hs.queued:
                block = blocks.get(hs.key) if blocks else None
                if block is not None and block[0] > now:
                    blocked += 1
                elif (first.get(hs.key, hs.next_contact) if hs.spare is not None
                      else hs.next_contact) > now:
                    resting += 1
                else:
                    waiting += 1
        retired = len(self._retired)
        known += sum(1 for host in self._retired if host not in self._hosts)
        return HostStates(known, active, waiting, resting, retired, queued, blocked)

    def iter_queued(self) -> Iterator[tuple[str, int, T]]:
        """Every queued (host, level, item), front queues then back queues."""
        yield from self.store.front_items()
        for hs in list(self._hosts.values()):
            if hs.queued:
                for level, item in self.store.back_items(hs.key):
                    yield hs.key, level, item
