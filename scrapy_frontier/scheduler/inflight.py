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
from typing import TYPE_CHECKING, Any

from scrapy_frontier.meta import LEASE_META

if TYPE_CHECKING:
    from scrapy import Request


class Fetch:
    """One lease and everything known about its fetch, from hand-out to acknowledgement."""

    __slots__ = ("ticket", "host", "request", "handed_at", "deadline", "sent_at", "answer")

    def __init__(self, ticket: int, host: str, request: Request, handed_at: float,
                 deadline: float) -> None:
        self.ticket = ticket
        self.host = host
        self.request = request
        self.handed_at = handed_at
        self.deadline = deadline
        #: When the request went out, as the crawler knows it (the timing middleware, then
        #: Scrapy's HTTP handler); None while it has not reached the downloader.
        self.sent_at: float | None = None
        #: What the kernel knows of the answer (scheduler.tcp_timing), once its headers came.
        self.answer: Any = None

    def __repr__(self) -> str:
        return f"<Fetch {self.ticket} {self.host} {self.request.url}>"


class InFlight:
    def __init__(self, lease_timeout: float) -> None:
        self.lease_timeout = lease_timeout
        # Insertion-ordered; deadlines grow with insertion (one timeout for all).
        self._out: dict[int, Fetch] = {}
        self._ended: dict[int, Fetch] = {}

    def __len__(self) -> int:
        """Leases handed out whose fetch has not ended."""
        return len(self._out)

    @property
    def unacknowledged(self) -> int:
        return len(self._ended)

    def hand_out(self, ticket: int, host: str, request: Request, now: float) -> Fetch:
        request.meta[LEASE_META] = ticket
        fetch = self._out[ticket] = Fetch(ticket, host, request, now, now + self.lease_timeout)
        return fetch

    def get(self, ticket: object) -> Fetch | None:
        """The fetch of lease ``ticket`` while it has not ended."""
        return self._out.get(ticket)  # type: ignore[call-overload,no-any-return]

    def host_of(self, ticket: object) -> str | None:
        fetch = self._out.get(ticket)  # type: ignore[call-overload]
        return None if fetch is None else fetch.host

    def end(self, ticket: int, *, keep: bool = True) -> Fetch | None:
        """The fetch of ``ticket`` ended: it, or None if the lease was unknown or had
        ended already.

        ``keep``: wait for the engine before acknowledging (a store that can lose
        nothing); without it the lease is over now.
        """
        fetch = self._out.pop(ticket, None)
        if fetch is None:
            return None
        if keep:
            self._ended[ticket] = fetch
        return fetch

    def expired(self, now: float, *, keep: bool = True) -> list[Fetch]:
        """Leases whose end was never reported within the lease timeout (ended now)."""
        out: list[Fetch] = []
        while self._out:
            ticket, fetch = next(iter(self._out.items()))
            if fetch.deadline > now:
                break
            out.append(fetch)
            self.end(ticket, keep=keep)
        return out

    def renew(self, fetch: Fetch, now: float) -> None:
        """Keep ``fetch`` out for another lease timeout (it is still running), even if
        :meth:`expired` just returned it."""
        self._ended.pop(fetch.ticket, None)
        self._out.pop(fetch.ticket, None)
        fetch.deadline = now + self.lease_timeout
        self._out[fetch.ticket] = fetch  # re-inserted last: deadlines stay in order

    def untracked(self, in_progress: Collection[Request], before: float) -> list[Fetch]:
        """Leases handed out before ``before`` whose request the engine no longer works on
        (e.g. dropped before the downloader by robots.txt): their fetch is over, whatever
        reported it. (The engine tracks a request from the moment it takes it.)"""
        return [f for f in self._out.values()
                if f.handed_at < before and f.request not in in_progress]

    def acknowledgeable(self, in_progress: Collection[Request] | None) -> list[int]:
        """Tickets of ended leases the engine is done with (all of them when it cannot
        tell); forgotten here, to be acknowledged by the caller."""
        ended = self._ended
        if not ended:
            return []
        if in_progress is None:
            done = list(ended)
        else:
            done = [t for t, f in ended.items() if f.request not in in_progress]
        for ticket in done:
            del ended[ticket]
        return done

    def take_all(self) -> tuple[list[Fetch], list[Fetch]]:
        """(handed out, ended) leases, forgotten: at close."""
        out = list(self._out.values())
        ended = list(self._ended.values())
        self._out.clear()
        self._ended.clear()
        return out, ended
