"""Per-IP politeness for a local queue: hosts that share an address share a back queue.

The core frontier parks a host until its group (its IP address) is known; this looks the
addresses up through the reactor's resolver, never blocking it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy_frontier.hostkey import HostlessURL, url_host_key
from scrapy_frontier.reactor.resolve import HostResolver

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_frontier.core.frontier import Frontier, Lease


class IPGroups:
    """Looks up the hosts the frontier parked, and tells it their groups."""

    def __init__(self, frontier: Frontier[Request], *, timeout: float,
                 wake: Callable[[], None]) -> None:
        self.frontier = frontier
        self.wake = wake
        self.resolver = HostResolver(self.on_group, timeout=timeout)
        #: The hostname to look up for keys that are not one (download_slot overrides).
        self._slot_hostnames: dict[str, str] = {}
        self._answered_now = False

    def remember_slot(self, key: str, request: Request) -> None:
        """A download_slot key is not a hostname: look up the first URL's host."""
        if key not in self._slot_hostnames:
            try:
                self._slot_hostnames[key] = url_host_key(request.url)
            except HostlessURL:
                self._slot_hostnames[key] = key

    def resolve_waiting(self, lease: Lease[Request] | None) -> Lease[Request] | None:
        """Start lookups for hosts waiting for their IP; claim again if one was answered
        at once and nothing was handed out yet."""
        frontier = self.frontier
        groups = frontier.groups
        assert groups is not None
        # Bounded: each round resolves hosts that the claim found unresolved.
        for _ in range(1000):
            waiting = groups.take_unresolved()
            if not waiting:
                break
            self._answered_now = False
            for key in waiting:
                self.resolver.resolve(key, self._slot_hostnames.get(key, key))
            if lease is not None or not self._answered_now:
                break
            lease = frontier.pop()
        return lease

    def on_group(self, key: str, group: str, synchronous: bool) -> None:
        self.frontier.set_group(key, group)
        if synchronous:
            self._answered_now = True
        else:
            self.wake()
