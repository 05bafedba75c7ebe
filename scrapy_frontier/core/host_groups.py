"""Per-IP politeness: hosts that share one address share one lease and one rest.

:class:`HostGroups` keeps which group (IP address) each host belongs to, which member
holds the group's one lease, and the ready members parked until it ends. The frontier
asks it before handing a host out (:meth:`HostGroups.gate`) and tells it when a fetch
ends (:meth:`HostGroups.complete`); it never touches the frontier's queues or heaps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from scrapy_frontier.core.politeness import DelayPolicy

#: What :meth:`HostGroups.gate` says of a ready host, besides a time to wait for.
GO = 0.0
"""The host may be fetched now."""
UNKNOWN = -1.0
"""Its group is not known yet (see :meth:`HostGroups.take_unresolved`): it has no heap
entry until :meth:`HostGroups.assign` is called for it."""
PARKED = -2.0
"""Another member holds the group's lease: the host waits, with no heap entry, for
:meth:`HostGroups.complete` to hand it back."""


@dataclass(slots=True, eq=False)
class _Group:
    """Hosts that share one connection and one rest (an IP address)."""

    key: str
    next_contact: float = 0.0
    busy: str | None = None
    """The member host holding the group's one lease."""
    parked: list[str] = field(default_factory=list)
    """Ready member hosts waiting for the lease to end (no heap entry meanwhile)."""
    members: int = 0


class HostGroups:
    def __init__(self, policy: DelayPolicy, clock: Callable[[], float]) -> None:
        self.policy = policy
        self.clock = clock
        self._group_of: dict[str, str] = {}
        self._groups: dict[str, _Group] = {}
        # Ready hosts held until their group is known, and those not yet reported.
        self._unresolved: set[str] = set()
        self._to_resolve: list[str] = []

    def __len__(self) -> int:
        """Groups known (with members, a lease, parked hosts or a rest running)."""
        return len(self._groups)

    def group_of(self, host: str) -> str | None:
        return self._group_of.get(host)

    def assign(self, host: str, group: str) -> bool:
        """``host`` belongs to ``group``; True if the host was held waiting for it (the
        caller makes it ready again). Moving a host that is fetching or parked is
        refused with a ValueError."""
        old = self._group_of.get(host)
        if old == group:
            return False
        if old is not None:
            og = self._groups[old]
            if og.busy == host or host in og.parked:
                raise ValueError(f"host {host!r} is fetching or waiting in group {old!r}")
            og.members -= 1
            self._forget_if_idle(og)
        self._group_of[host] = group
        g = self._groups.get(group)
        if g is None:
            g = self._groups[group] = _Group(group)
        g.members += 1
        if host in self._unresolved:
            self._unresolved.discard(host)
            return True
        return False

    def take_unresolved(self) -> list[str]:
        """Hosts that became ready without a known group since the last call."""
        hosts, self._to_resolve = self._to_resolve, []
        return hosts

    def gate(self, host: str, now: float) -> float:
        """Whether a ready ``host`` may be fetched now: :data:`GO`, :data:`UNKNOWN`,
        :data:`PARKED`, or the group's next contact (a clock time after ``now``), before
        which it must wait."""
        gkey = self._group_of.get(host)
        if gkey is None:
            if host not in self._unresolved:
                self._unresolved.add(host)
                self._to_resolve.append(host)
            return UNKNOWN
        g = self._groups[gkey]
        if g.busy is not None:
            g.parked.append(host)
            return PARKED
        if g.next_contact > now:
            return g.next_contact
        return GO

    def take(self, host: str) -> None:
        """``host`` (which :meth:`gate` let go) holds its group's lease now."""
        self._groups[self._group_of[host]].busy = host

    def complete(self, host: str, fetch_seconds: float, now: float, *,
                 sent: bool = True) -> tuple[list[str], float]:
        """``host``'s fetch ended: the group rests by the delay policy (not at all when
        nothing was ``sent``). Returns the parked hosts to make ready again, and the
        group's next contact (none before it)."""
        gkey = self._group_of.get(host)
        if gkey is None:
            return [], 0.0
        g = self._groups[gkey]
        if g.busy != host:
            return [], 0.0
        g.busy = None
        if sent:
            g.next_contact = max(g.next_contact, now + self.policy.delay(fetch_seconds))
        parked, g.parked = g.parked, []
        return parked, g.next_contact

    def unschedule(self, host: str) -> None:
        """``host`` is no longer ready: out of its group's parked list, or its wait."""
        self._unresolved.discard(host)
        gkey = self._group_of.get(host)
        if gkey is not None:
            parked = self._groups[gkey].parked
            if host in parked:
                parked.remove(host)

    def forget(self, host: str) -> None:
        """The frontier forgot ``host``: it leaves its group (forgotten once idle)."""
        gkey = self._group_of.pop(host, None)
        if gkey is not None:
            g = self._groups[gkey]
            g.members -= 1
            self._forget_if_idle(g)

    def _forget_if_idle(self, g: _Group) -> None:
        if g.members <= 0 and g.busy is None and not g.parked and g.next_contact <= self.clock():
            del self._groups[g.key]
