"""Fencing: a Redis worker starts no fetch under a lease it cannot prove it still holds.

A lease lapses ``FRONTIER_REDIS_LIVENESS`` after the last renewal Redis ran (or after the
claim), on the Redis server's clock; any worker's next claim may then take its host back.
A worker stopped for longer than that (a long GC pause, a VM migration, SIGSTOP, a laptop
lid) must not fetch under its old leases when it runs again: another worker may have
fetched those hosts meanwhile.

The worker cannot ask Redis before every fetch, but it knows a bound it can check for free:
a claim or a renewal that Redis confirmed ran no earlier than it was *sent*, so the lease
holds at least until that send plus the window, on the server's clock. :class:`LeaseFence`
keeps that deadline per lease on a local monotonic clock (:func:`fence_clock`), less a
margin, and :meth:`LeaseFence.holds` says whether it is still ahead. A lease that fails the
test is given back unfetched (``backends.redis.frontier.HAND_BACK``), whether or not another
worker has taken it yet. A renewal that finds a lease gone marks it lost at once.

The claim, the renewals and the completions are recorded from the I/O and heartbeat
threads, and the reactor reads: every write holds one lock, and :meth:`LeaseFence.holds`
is one dictionary read (atomic in CPython).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial

#: The share of the window kept as a margin: a lease is used only while more than one
#: heartbeat (a quarter of the liveness window) of it is left, as the worker counts it.
MARGIN_SHARE = 0.25
#: The margin's ceiling in seconds (without a heartbeat the window is the lease timeout).
MAX_MARGIN = 1.25


def _clock() -> Callable[[], float]:
    """Linux's CLOCK_BOOTTIME, which counts the time the machine was suspended (a laptop
    lid closed on a worker: CLOCK_MONOTONIC stops then, and the Redis server's clock does
    not); elsewhere ``time.monotonic``."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        try:
            time.clock_gettime(boottime)
        except OSError:
            return time.monotonic
        return partial(time.clock_gettime, boottime)
    return time.monotonic


#: The fence's clock: monotonic, read by every thread of the worker.
fence_clock: Callable[[], float] = _clock()


class LeaseFence:
    """Until when this worker can prove it holds each of its leases (lease id -> a time
    of :attr:`clock`)."""

    def __init__(self, liveness: float, lease_timeout: float, *,
                 clock: Callable[[], float] = fence_clock) -> None:
        #: Seconds a confirmed renewal keeps a lease (a claim too, capped by the timeout).
        self.window = liveness if liveness > 0 else lease_timeout
        #: No renewal keeps a lease past its claim + this.
        self.cap = lease_timeout
        self.margin = min(MAX_MARGIN, MARGIN_SHARE * min(self.window, self.cap))
        self.clock = clock
        self._until: dict[int, float] = {}
        self._claimed: dict[int, float] = {}
        self._lock = threading.Lock()

    def claimed(self, tickets: Iterable[int], sent_at: float) -> None:
        """A round sent at ``sent_at`` claimed the leases ``tickets``."""
        until = sent_at + min(self.window, self.cap) - self.margin
        with self._lock:
            for ticket in tickets:
                self._claimed[ticket] = sent_at
                self._until[ticket] = until

    def renewed(self, tickets: Iterable[int], sent_at: float) -> None:
        """A renewal sent at ``sent_at`` renewed the leases ``tickets`` (Redis confirmed)."""
        with self._lock:
            for ticket in tickets:
                claimed = self._claimed.get(ticket)
                if claimed is None:  # completed meanwhile: nothing to extend
                    continue
                until = min(sent_at + self.window, claimed + self.cap) - self.margin
                if until > self._until[ticket]:
                    self._until[ticket] = until

    def lost(self, tickets: Iterable[int]) -> None:
        """Redis said these leases are no longer held: none of them is used again."""
        with self._lock:
            for ticket in tickets:
                if ticket in self._until:
                    self._until[ticket] = -math.inf

    def forget(self, tickets: Iterable[int]) -> None:
        """These leases were completed (or given back) in Redis."""
        with self._lock:
            for ticket in tickets:
                self._until.pop(ticket, None)
                self._claimed.pop(ticket, None)

    def holds(self, ticket: int) -> bool:
        """Whether the lease ``ticket`` is still proven held now (an unknown lease is not)."""
        return self.clock() < self._until.get(ticket, -math.inf)

    def left(self, ticket: int) -> float:
        """Seconds the lease ``ticket`` is still proven held (negative: it is not)."""
        return self._until.get(ticket, -math.inf) - self.clock()

    def __len__(self) -> int:
        return len(self._until)
