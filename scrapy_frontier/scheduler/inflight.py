"""The in-flight ledger: the one owner of a lease, from hand-out to acknowledgement.

A lease goes through three states:

1. **handed out** -- ``next_request`` returned its request (``meta["frontier_lease"]``
   holds the ticket); its host is busy;
2. **fetch ended** -- the timing middleware (or a signal, or a redirect / retry coming
   back through ``enqueue_request``) reported the end: the host is released and rests;
3. **acknowledged** -- the engine is done with the request (its callback's items are
   through the pipelines and flushed to the feeds, its requests, or the retry or redirect
   it became, are queued): the queue may forget the URL for good.

A lease whose end is never reported expires after ``FRONTIER_LEASE_TIMEOUT``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from scrapy_frontier.meta import LEASE_META

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_frontier.backends.ports import QueuePort

logger = logging.getLogger("scrapy_frontier.scheduler")


class Fetch:
    """One lease and everything known about its fetch, from hand-out to acknowledgement."""

    __slots__ = ("ticket", "host", "request", "handed_at", "deadline", "sent_at", "answer",
                 "token")

    def __init__(self, ticket: int, host: str, request: Request, handed_at: float,
                 deadline: float) -> None:
        self.ticket = ticket
        self.host = host
        self.request = request
        self.handed_at = handed_at
        self.deadline = deadline
        #: When the timing middleware passed the request to the downloader (never after it
        #: went out); None while it has not reached the downloader.
        self.sent_at: float | None = None
        #: What the kernel knows of the answer (scheduler.tcp_timing), once its headers came.
        self.answer: Any = None
        #: What the queue's ``ack`` takes once the engine is done with the request (from
        #: its ``release``); None: nothing to acknowledge.
        self.token: object = None

    def __repr__(self) -> str:
        return f"<Fetch {self.ticket} {self.host} {self.request.url}>"


class InFlight:
    def __init__(self, lease_timeout: float) -> None:
        self.lease_timeout = lease_timeout
        # Insertion-ordered; deadlines grow with insertion (one timeout for all).
        self._out: dict[int, Fetch] = {}
        #: Ended fetches whose queue token waits for the engine to be done with the
        #: request (a plain dict: the hot path tests it for emptiness on every hand-out).
        self.awaiting_ack: dict[int, Fetch] = {}
        #: Leases handed out, and fetch ends reported (the dequeued and completed stats).
        self.handed = 0
        self.ended = 0

    def __len__(self) -> int:
        """Leases handed out whose fetch has not ended."""
        return len(self._out)

    def hand_out(self, ticket: int, host: str, request: Request, now: float) -> Fetch:
        request.meta[LEASE_META] = ticket
        fetch = self._out[ticket] = Fetch(ticket, host, request, now, now + self.lease_timeout)
        self.handed += 1
        return fetch

    def get(self, ticket: object) -> Fetch | None:
        """The fetch of lease ``ticket`` while it has not ended."""
        return self._out.get(ticket)  # type: ignore[call-overload,no-any-return]

    def host_of(self, ticket: object) -> str | None:
        fetch = self._out.get(ticket)  # type: ignore[call-overload]
        return None if fetch is None else fetch.host

    def complete(self, ticket: int) -> Fetch | None:
        """The fetch of ``ticket`` ended: it, or None if the lease was unknown or had
        ended already. Pass it to :meth:`await_ack` once the queue completed it."""
        fetch = self._out.pop(ticket, None)
        if fetch is not None:
            self.ended += 1
        return fetch

    def await_ack(self, fetch: Fetch, token: object) -> None:
        """The queue completed ``fetch``; ``token`` (not None) waits here until the
        engine is done with the request (a store that can lose nothing)."""
        if token is not None:
            fetch.token = token
            self.awaiting_ack[fetch.ticket] = fetch

    def expired(self, now: float) -> list[Fetch]:
        """Leases whose end was never reported within the lease timeout (ended now)."""
        out: list[Fetch] = []
        while self._out:
            ticket, fetch = next(iter(self._out.items()))
            if fetch.deadline > now:
                break
            out.append(fetch)
            del self._out[ticket]
        return out

    def renew(self, fetch: Fetch, now: float) -> None:
        """Keep ``fetch`` out for another lease timeout (it is still running), even if
        :meth:`expired` just returned it."""
        self._out.pop(fetch.ticket, None)
        fetch.deadline = now + self.lease_timeout
        self._out[fetch.ticket] = fetch  # re-inserted last: deadlines stay in order

    def untracked(self, in_progress: Collection[Request], before: float) -> list[Fetch]:
        """Leases handed out before ``before`` whose request the engine no longer works on
        (e.g. dropped before the downloader by robots.txt): their fetch is over, whatever
        reported it. (The engine tracks a request from the moment it takes it.)"""
        return [f for f in self._out.values()
                if f.handed_at < before and f.request not in in_progress]

    def acknowledgeable(self, in_progress: Collection[Request] | None) -> list[Fetch]:
        """Ended fetches the engine is done with (all of them when it cannot tell);
        forgotten here, to be acknowledged by the caller."""
        ended = self.awaiting_ack
        if not ended:
            return []
        if in_progress is None:
            done = list(ended.values())
        else:
            done = [f for f in ended.values() if f.request not in in_progress]
        for fetch in done:
            del ended[fetch.ticket]
        return done

    def take_all(self) -> tuple[list[Fetch], list[Fetch]]:
        """(handed out, ended) leases, forgotten: at close."""
        out = list(self._out.values())
        ended = list(self.awaiting_ack.values())
        self._out.clear()
        self.awaiting_ack.clear()
        return out, ended


class LeaseKeeper:
    """Ends the leases the in-flight ledger holds that no report will end, and
    acknowledges the ended ones the engine is done with."""

    def __init__(self, inflight: InFlight, engine: Any, queue: QueuePort, stats: Any,
                 lease_timeout: float, *, ended: Callable[[Request], None],
                 items_safe: Callable[[], None]) -> None:
        self.inflight = inflight
        self.engine = engine  # scheduler.engine.EngineAdapter
        self.queue = queue
        self.stats = stats
        self.lease_timeout = lease_timeout
        self.ended = ended
        #: Makes the items of the fetches about to be acknowledged safe (the feed guard's
        #: flush); raises (a StoreError) if it cannot, and then nothing is acknowledged.
        self.items_safe = items_safe
        #: When to look again (at most once a second while the middleware reports ends).
        self.check_at = 0.0
        self._warned = False

    def acknowledge(self) -> None:
        """Acknowledge the fetched URLs whose request the engine is done with, once their
        items are safe. Fetches whose items cannot be made safe are forgotten here
        unacknowledged: the next run fetches them again."""
        done = self.inflight.acknowledgeable(self.engine.in_progress())
        if not done:
            return
        self.items_safe()
        ack = self.queue.ack
        for fetch in done:
            ack(fetch.token)

    def check(self, now: float, *, every_lease: bool = False) -> None:
        """End the leases whose fetch end was never reported.

        A lease whose request the engine no longer works on is over (the middleware
        never saw it end: a robots.txt IgnoreRequest in signals mode, a download handler
        that returned something that is not a Response); one past its deadline too.
        ``every_lease`` (signals mode, where no middleware reports): look at every lease,
        not only those out for a second. The caller tests :attr:`check_at` (the hot path).
        """
        self.check_at = now + 1.0
        inflight = self.inflight
        if not len(inflight):
            return
        in_progress = self.engine.in_progress()
        if in_progress is not None:
            # A request the engine has not taken yet is not orphaned.
            before = now if every_lease else now - 1.0
            for fetch in inflight.untracked(in_progress, before):
                self.ended(fetch.request)
        for fetch in inflight.expired(now):
            if in_progress is not None and fetch.request in in_progress:
                # Still downloading (FRONTIER_LEASE_TIMEOUT below the fetch time): the
                # host stays busy, or a second fetch would overlap this one.
                inflight.renew(fetch, now)
                self._extended(fetch)
                continue
            self.stats.inc_value("frontier/lease_expired")
            logger.warning(
                "No end was reported for %s within %.0f s (FRONTIER_LEASE_TIMEOUT); "
                "releasing host %r", fetch.request, self.lease_timeout, fetch.host,
            )
            inflight.await_ack(fetch, self.queue.complete(fetch.ticket, now - fetch.handed_at,
                                                         0.0))

    def _extended(self, fetch: Fetch) -> None:
        self.stats.inc_value("frontier/lease_extended")
        if not self._warned:
            self._warned = True
            logger.warning(
                "%s is still being fetched after FRONTIER_LEASE_TIMEOUT (%.0f s): its lease is "
                "extended. Set FRONTIER_LEASE_TIMEOUT above DOWNLOAD_TIMEOUT (the default is "
                "DOWNLOAD_TIMEOUT + 60 s).", fetch.request, self.lease_timeout,
            )

