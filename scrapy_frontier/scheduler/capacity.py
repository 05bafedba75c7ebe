"""What each fetch tells :mod:`scrapy_frontier.core.capacity` (``FRONTIER_CAPACITY``).

For every fetch of a host the feed knows when it was sent, which of the host's fetches were in
flight then (its *concurrency*), and which of those were still in flight halfway between its
send and its answer's end (its *overlap*). Each end goes to the host's capacity, with its
service time (the fetch time the host rests by) and whether the host was strained (429, 503,
a timeout, a lease that lapsed). A change of the host's connections goes to the backend; a
rise makes its connections go together once (the burst that tests the new level).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from twisted.internet.error import TCPTimedOutError, TimeoutError

from scrapy_frontier.core.capacity import Capacities

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.backends.ports import HostControlPort

logger = logging.getLogger("scrapy_frontier.politeness")

#: Answers that say the host is strained.
STRAINED_STATUSES = frozenset({429, 503})


class _Sent:
    __slots__ = ("at", "end")

    def __init__(self, at: float) -> None:
        self.at = at
        self.end: float | None = None


class CapacityFeed:
    """Sends, ends and strains of each host's fetches -> its measured connections."""

    def __init__(self, cap: Callable[[str], int], controls: HostControlPort,
                 stats: StatsCollector) -> None:
        self.capacities = Capacities(cap)
        self.controls = controls
        self.stats = stats
        # host -> its fetches in flight; ticket -> (the fetch, the host's others at its send)
        self._open: dict[str, list[_Sent]] = {}
        self._fetches: dict[int, tuple[str, _Sent, list[_Sent]]] = {}

    def sent(self, ticket: int, host: str, at: float) -> None:
        fetch = _Sent(at)
        others = self._open.setdefault(host, [])
        self._fetches[ticket] = (host, fetch, list(others))
        others.append(fetch)

    def ended(self, ticket: int, service: float, end: float, *, strained: bool) -> None:
        """The fetch of ``ticket`` ended at ``end`` after ``service`` seconds."""
        taken = self._fetches.pop(ticket, None)
        if taken is None:
            return  # never sent
        host, fetch, others = taken
        fetch.end = end
        self._close(host, fetch)
        halfway = fetch.at + (end - fetch.at) / 2.0
        overlapped = 1 + sum(1 for o in others if o.end is None or o.end > halfway)
        before = self.capacities.connections(host)
        changed = self.capacities.observe(host, service, concurrent=len(others) + 1,
                                          overlapped=overlapped, strained=strained, now=end)
        if changed is None:
            return
        rise = changed > before
        self.stats.inc_value("frontier/capacity/rises" if rise else "frontier/capacity/falls")
        logger.debug("host %r: %d connection(s), measured (was %d)", host, changed, before)
        self.controls.set_connections(host, changed, together=rise)

    def dropped(self, ticket: int) -> None:
        """The fetch of ``ticket`` is not measured (it was never sent, or was given back)."""
        taken = self._fetches.pop(ticket, None)
        if taken is not None:
            taken[1].end = taken[1].at
            self._close(taken[0], taken[1])

    def _close(self, host: str, fetch: _Sent) -> None:
        others = self._open[host]
        others.remove(fetch)
        if not others:
            del self._open[host]

    def forget(self, host: str) -> None:
        """``host`` is retired: its measurements go."""
        self.capacities.forget(host)

    @staticmethod
    def strained(response: Response | None, exception: BaseException | None) -> bool:
        if response is not None:
            return response.status in STRAINED_STATUSES
        return isinstance(exception, (TimeoutError, TCPTimedOutError))
