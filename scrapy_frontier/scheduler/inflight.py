"""The in-flight ledger: the one owner of a lease, from hand-out to acknowledgement.

A lease goes through three states:

1. **handed out** -- ``next_request`` returned its request (``meta["frontier_lease"]``
   holds the ticket); its host is busy;
2. **fetch ended** -- the timing middleware (or a signal, or a redirect / retry coming
   back through ``enqueue_request``) reported the end: the host is released and rests;
3. **acknowledged** -- the engine is done with the request (its callback's output, or
   the retry or redirect it became, is queued): the driver may forget the URL for good.

A lease whose end is never reported expires after ``FRONTIER_LEASE_TIMEOUT``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, NamedTuple

from scrapy_frontier.meta import LEASE_META

if TYPE_CHECKING:
    from scrapy import Request


class Flight(NamedTuple):
    """One lease, as the cold paths (expiry, acknowledgement, close) see it."""

    ticket: int
    host: str
    request: Request
    handed_at: float
    deadline: float


# The ledger keeps plain tuples in Flight's field order: building one costs far
# less than an object, and this happens once per request.
_Entry = tuple[int, str, "Request", float, float]


class InFlight:
    def __init__(self, lease_timeout: float) -> None:
        self.lease_timeout = lease_timeout
        # Insertion-ordered; deadlines grow with insertion (one timeout for all).
        self._out: dict[int, _Entry] = {}
        self._ended: dict[int, _Entry] = {}

    def __len__(self) -> int:
        """Leases handed out whose fetch has not ended."""
        return len(self._out)

    @property
    def unacknowledged(self) -> int:
        return len(self._ended)

    def hand_out(self, ticket: int, host: str, request: Request, now: float) -> None:
        request.meta[LEASE_META] = ticket
        self._out[ticket] = (ticket, host, request, now, now + self.lease_timeout)

    def host_of(self, ticket: object) -> str | None:
        entry = self._out.get(ticket)  # type: ignore[call-overload]
        return None if entry is None else entry[1]

    def end(self, ticket: int, *, keep: bool = True) -> str | None:
        """The fetch of ``ticket`` ended: its host, or None if the lease was unknown or
        had ended already.

        ``keep``: wait for the engine before acknowledging (a store that can lose
        nothing); without it the lease is over now.
        """
        entry = self._out.pop(ticket, None)
        if entry is None:
            return None
        if keep:
            self._ended[ticket] = entry
        return entry[1]

    def expired(self, now: float, *, keep: bool = True) -> list[Flight]:
        """Leases whose end was never reported within the lease timeout (ended now)."""
        out: list[Flight] = []
        while self._out:
            ticket, entry = next(iter(self._out.items()))
            if entry[4] > now:
                break
            out.append(Flight._make(entry))
            self.end(ticket, keep=keep)
        return out

    def renew(self, flight: Flight, now: float) -> None:
        """Keep ``flight`` out for another lease timeout (its fetch is still running),
        even if :meth:`expired` just returned it."""
        self._ended.pop(flight.ticket, None)
        # Re-inserted last: deadlines stay in order.
        self._out[flight.ticket] = flight._replace(deadline=now + self.lease_timeout)

    def untracked(self, in_progress: Collection[Request], before: float) -> list[Flight]:
        """Leases handed out before ``before`` whose request the engine no longer works on
        (e.g. dropped before the downloader by robots.txt): their fetch is over, whatever
        reported it. (The engine tracks a request from the moment it takes it.)"""
        return [Flight._make(e) for e in self._out.values()
                if e[3] < before and e[2] not in in_progress]

    def acknowledgeable(self, in_progress: Collection[Request] | None) -> list[int]:
        """Tickets of ended leases the engine is done with (all of them when it cannot
        tell); forgotten here, to be acknowledged by the caller."""
        ended = self._ended
        if not ended:
            return []
        if in_progress is None:
            done = list(ended)
        else:
            done = [t for t, e in ended.items() if e[2] not in in_progress]
        for ticket in done:
            del ended[ticket]
        return done

    def take_all(self) -> tuple[list[Flight], list[Flight]]:
        """(handed out, ended) leases, forgotten: at close."""
        out = [Flight._make(e) for e in self._out.values()]
        ended = [Flight._make(e) for e in self._ended.values()]
        self._out.clear()
        self._ended.clear()
        return out, ended
