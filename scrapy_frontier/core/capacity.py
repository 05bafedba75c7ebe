"""How many connections a host gets, by measuring what it serves at once (opt-in).

Mercator's rule rests a connection ``factor x fetch`` after each fetch, so one connection keeps
a server busy at most ``1/(1 + factor)`` of the time. A host whose server handles *c* fetches at
once has *c* times that room: *c* connections, each resting by Mercator's rule, use the same
share, ``1/(1 + factor)``, of what the host can serve. This module finds *c* for each host by
measurement and gives the host that many connections, never more than the policy's cap and
never fewer than one.

The measurement
   Each completion brings the fetch's *service time* (its time at the server, queueing
   included, as the crawler measured it), its *concurrency* (how many of the host's fetches
   were in flight when it was sent, itself included) and its *overlap* (how many of those were
   still in flight halfway through it, itself included). A fetch sent alone gives the host's
   idle time: the *baseline* is a low quantile (``quantile``) of the last ``window`` solo
   fetches, and their *spread* is the high quantile (``1 - quantile``) less the baseline. A
   fetch is *inflated* when its service time exceeds ``(1 + tolerance) x baseline + spread``:
   clearly above the host's idle time, by more than its solo fetches vary. An inflated fetch
   of concurrency two or more *waited* (for a server worker) when it took ``waited x
   baseline`` more still.

   A server of *c* workers that queues the rest makes a fetch of concurrency ``c + 1`` wait
   for a worker: so a fetch of concurrency *j* that waited shows the host serves fewer than
   *j* at once. A flat fetch of overlap *m* shows it serves *m* at once: the *m - 1* others came
   first (first come, first served), so had it found no free worker it would have waited for
   one of them to end, past its own halfway point, and taken about twice the idle time.
   Concurrency alone would not show this: a fetch sent as the others end waits only for the
   rest of theirs, too little to see, and would "prove" a level the host does not serve.

Why concurrency must be known, and why a rise is followed by a burst
   With each connection resting ``factor x fetch``, *k* connections rarely overlap by chance:
   a send finds all *k - 1* others in flight about ``(1/(1 + factor)) ** (k - 1)`` of the time.
   Watching service times alone therefore cannot tell a host of 4 workers from one of 40, and
   would grow to the cap. So the host's connections go together once after each rise (the
   wiring's part: each waits, idle, for the others and they all go at the latest of their rest
   ends; each has still rested its own rest). That burst of *k* fetches is the test of level
   *k*: flat with overlap *k*, the level is *proven*; its *k*-th fetch waiting, the host serves
   fewer.

The rule (additive increase, measured or multiplicative decrease)
   * A host starts at one connection.
   * Rise by one when: ``samples x k`` fetches in a row at the present *k* were not inflated;
     level *k* is proven (some fetch of overlap ``>= k`` was served flat); no strain in
     the last ``hold`` seconds; *k* is below the cap; and *k* is below the host's *ceiling*,
     unless the ceiling's re-probe time has come.
   * A fetch of concurrency ``j >= 2`` that waited is queueing that we caused: the host serves
     at most ``j - 1`` at once. Its connections fall to ``j - 1`` at once and ``j - 1`` becomes its
     ceiling. The ceiling holds for ``reprobe`` seconds; then one probe at ``ceiling + 1`` is
     allowed. A probe that queues again doubles the wait (up to ``reprobe_max``); a flat fetch of
     overlap above the ceiling removes the ceiling.
   * A rise whose level is not proven within ``samples x k`` fetches (the burst did not
     happen, or did not overlap) is undone the same way, with the proven level as the ceiling:
     the connections stay above the proven level for one such trial at most.
   * Any other inflated fetch (solo: the host's own slowness; or inflated by less than a wait
     takes: a partial overlap, or noise) restarts the count of flat fetches (no rise while the
     service time is not flat) and changes nothing else.
   * A strained fetch (429, 503, a timeout) halves the connections (at least one) and stops
     rises for ``hold`` seconds. Its service time is not measured.
   * The cap (a callable of the host) is read at every observation; *k* above it falls to it.

What it assumes
   The service times of one host's fetches are alike when none waits (the time to the answer's
   first bytes is better than the whole fetch time for pages of different sizes). The spread
   in the threshold absorbs what solo fetches vary; a host whose times have a long tail (a
   solo fetch often far above the window's high quantile) looks strained now and then and
   keeps fewer connections, which errs on the polite side. The probe above the ceiling costs
   one queued fetch per probe, at intervals that double while the ceiling holds.

Cost: O(1) per observation (a sorted window of ``window`` floats per host). Only hosts whose cap
is above one keep any state. Times are the caller's clock (``now``), never read here.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Capacities", "CapacityRule", "HostCapacity", "SoloTimes"]


@dataclass(frozen=True, slots=True)
class CapacityRule:
    """The numbers of the rule (module docstring)."""

    #: A fetch is inflated above ``(1 + tolerance) x baseline + spread``.
    tolerance: float = 0.1
    #: An inflated fetch of concurrency >= 2 waited for a worker when it took ``waited x
    #: baseline`` more still (one that waits in a burst takes about twice the idle time).
    waited: float = 0.5
    #: ``samples x k`` flat fetches in a row at *k* connections before a rise to ``k + 1``.
    samples: int = 8
    #: The solo fetches the baseline is taken from (the last ``window``).
    window: int = 16
    #: No judgement before this many solo fetches.
    min_solo: int = 4
    #: The baseline is this quantile of the window (low: a solo fetch rarely beats it); the
    #: spread reaches up to the ``1 - quantile`` quantile.
    quantile: float = 0.125
    #: Seconds without a rise after a strained fetch.
    hold: float = 60.0
    #: Seconds a ceiling holds before the first probe above it.
    reprobe: float = 60.0
    #: The longest a ceiling holds, doubling from ``reprobe`` while probes confirm it.
    reprobe_max: float = 900.0

    def __post_init__(self) -> None:
        for name in ("tolerance", "waited"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        if not 1 <= self.min_solo <= self.window:
            raise ValueError(f"min_solo must be in [1, window={self.window}], "
                             f"got {self.min_solo}")
        if not 0.0 <= self.quantile <= 0.5:
            raise ValueError(f"quantile must be in [0, 0.5], got {self.quantile}")
        for name in ("hold", "reprobe", "reprobe_max"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.reprobe_max < self.reprobe:
            raise ValueError(f"reprobe_max ({self.reprobe_max}) must be >= reprobe "
                             f"({self.reprobe})")


class SoloTimes:
    """The service times of a host's last ``size`` solo fetches, in arrival and in sorted
    order; the baseline is a low quantile of them."""

    __slots__ = ("_arrived", "_sorted", "_size")

    def __init__(self, size: int) -> None:
        self._size = size
        self._arrived: deque[float] = deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, seconds: float) -> None:
        if len(self._arrived) == self._size:
            old = self._arrived.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        self._arrived.append(seconds)
        bisect.insort(self._sorted, seconds)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (lower element) of the window; the window must not be empty."""
        return self._sorted[int(q * len(self._sorted))]


class HostCapacity:
    """One host's measurement: its connections, the level proven served flat, its ceiling,
    and the count of flat fetches since its connections last changed."""

    __slots__ = ("ceiling", "connections", "flat", "hold_until", "proven", "reprobe_after",
                 "reprobe_at", "since", "solo")

    def __init__(self, rule: CapacityRule) -> None:
        self.connections = 1
        #: The highest overlap of a flat fetch: the level proven (0: none yet).
        self.proven = 0
        #: The most fetches at once the host was measured to serve (0: no ceiling).
        self.ceiling = 0
        self.reprobe_at = 0.0
        self.reprobe_after = rule.reprobe
        self.hold_until = -math.inf
        self.flat = 0
        #: Fetches measured since the connections last changed.
        self.since = 0
        self.solo = SoloTimes(rule.window)

    def observe(self, rule: CapacityRule, service_seconds: float, concurrent: int,
                overlapped: int, strained: bool, now: float, cap: int) -> int | None:
        """One completion; the new connections if they change, else None."""
        k = self.connections
        if strained:
            self.hold_until = now + rule.hold
            self.flat = 0
            return self._set(min(max(1, k // 2), cap))
        if not service_seconds >= 0.0 or service_seconds == math.inf:
            return self._set(min(k, cap))  # nothing measured (NaN, negative, infinite)
        self.since += 1
        if concurrent <= 1:
            self.solo.add(service_seconds)
        if len(self.solo) < rule.min_solo:
            return self._set(min(k, cap))
        base = self.solo.quantile(rule.quantile)
        limit = self.solo.quantile(1.0 - rule.quantile) + rule.tolerance * base
        if service_seconds > limit:
            self.flat = 0
            if concurrent >= 2 and service_seconds > limit + rule.waited * base:
                return self._set(min(self._queued(rule, concurrent - 1, now), cap))
        else:
            self._served_flat(rule, max(1, min(overlapped, concurrent)))
        if k > max(1, self.proven) and self.since >= rule.samples * k:
            # A rise whose level was never seen served: as if the probe had queued.
            return self._set(min(self._queued(rule, max(1, self.proven), now), cap))
        if (self.flat >= rule.samples * k and k <= self.proven and k < cap
                and now >= self.hold_until
                and (not self.ceiling or k < self.ceiling or now >= self.reprobe_at)):
            return self._set(k + 1)
        return self._set(min(k, cap))

    def _served_flat(self, rule: CapacityRule, overlapped: int) -> None:
        self.flat += 1
        if overlapped > self.proven:
            self.proven = overlapped
        if self.ceiling and overlapped > self.ceiling:
            # The host served more at once than its ceiling: the ceiling goes.
            self.ceiling = 0
            self.reprobe_after = rule.reprobe

    def _queued(self, rule: CapacityRule, level: int, now: float) -> int:
        """The host serves at most ``level`` at once: a fetch waited behind ``level`` others
        of ours, or a rise above ``level`` went unproven. The connections to keep."""
        if self.ceiling == level:  # a probe above the ceiling queued again
            self.reprobe_after = min(2.0 * self.reprobe_after, rule.reprobe_max)
        elif not self.ceiling or level < self.ceiling:
            self.reprobe_after = rule.reprobe
        else:  # an older fetch, sent when the host had more connections: nothing new
            return min(self.connections, level)
        self.ceiling = level
        self.reprobe_at = now + self.reprobe_after
        if self.proven > level:
            self.proven = level
        return min(self.connections, level)

    def _set(self, connections: int) -> int | None:
        if connections == self.connections:
            return None
        self.connections = connections
        self.flat = self.since = 0
        return connections


class Capacities:
    """Each host's connections by measurement (module docstring); ``connections`` is the
    core ``Frontier``'s ``connections=`` callable."""

    def __init__(self, cap: Callable[[str], int], rule: CapacityRule | None = None) -> None:
        #: The most connections a host may get (the policy's, per host); 1 keeps no state.
        self.cap = cap
        self.rule = rule or CapacityRule()
        self._hosts: dict[str, HostCapacity] = {}

    def observe(self, host: str, service_seconds: float, *, concurrent: int, overlapped: int,
                strained: bool, now: float) -> int | None:
        """A fetch of ``host`` completed after ``service_seconds`` at the server.
        ``concurrent``: the host's fetches in flight when it was sent, itself included;
        ``overlapped``: how many of those were still in flight halfway between its send and
        its answer, itself included; ``strained``: its answer was a 429 or a 503, or it timed
        out. Returns the host's new connections when they change, else None. After a rise,
        the host's connections should next go together (module docstring)."""
        cap = self.cap(host)
        if cap < 1:
            raise ValueError(f"cap({host!r}) must be >= 1, got {cap}")
        state = self._hosts.get(host)
        if state is None:
            if cap == 1:
                return None
            state = self._hosts[host] = HostCapacity(self.rule)
        return state.observe(self.rule, service_seconds, concurrent, overlapped, strained, now,
                             cap)

    def connections(self, host: str) -> int:
        """The connections ``host`` may use now."""
        state = self._hosts.get(host)
        return 1 if state is None else state.connections

    def state(self, host: str) -> HostCapacity | None:
        """What is measured of ``host`` (None: nothing yet)."""
        return self._hosts.get(host)

    def forget(self, host: str) -> None:
        """Drop what is measured of ``host`` (a retired host): it starts again at one."""
        self._hosts.pop(host, None)

    def __len__(self) -> int:
        return len(self._hosts)
