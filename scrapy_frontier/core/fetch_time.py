"""How long a fetch took as the server saw it, when the crawler's own pauses got in the way.

The crawler times a fetch from writing the request to reading the last bytes of the
answer. While its event loop is blocked (a slow callback, a synchronous pipeline, a
burst of work), an answer that has arrived waits unread in the socket, and the fetch
measures long: a 14 ms fetch read after a 300 ms pause measures 314 ms, and a host
resting ten times that rests 3 s instead of 0.14 s.

:class:`StallLog` keeps the intervals during which the loop was seen blocked (a timer
that fired late, see ``scheduler/stalls.py``). Only a stall that *held the read* can
have lengthened the measure: one that ended just before the last bytes were read
(within ``slack``). A stall in the middle of a fetch, with the read well after it,
delayed nothing: the server was working meanwhile, and that time stays counted.

:class:`FetchTimeEstimator` then discounts the held time, but never below ``margin``
times the host's typical recent clean fetch (the median of the last few that no stall
held): the answer may have been ready only at the end of the stall. For a fetch
measured ``m`` whose read a stall held for ``h`` seconds, on a host whose last clean
fetches took ``r`` (median)::

    estimate = max(m - h, min(m, margin x r))       (m when the host has no clean fetch)

Why this stays polite: the audit's rule is next start >= server end + factor x server
time. A clean fetch is never changed, and its measure contains the server's time. A
held fetch rests by at least ``margin`` x the host's typical recent time, and its rest
starts when the crawler reads the answer, after the stall, so later than the server's
end by however long the answer waited. A short gap would need this one fetch to take the
server more than ``margin`` times its typical time *and* to end so late in the stall
that the wait does not cover factor x the excess. Stalls of a machine short of CPU,
which slow the servers on it too, are never discounted (``scheduler/stalls.py``). This
is an assumption about servers, not a proof: the benchmarks and the crawl tests audit
it from the server's log (0 overlaps, 0 short gaps).
"""

from __future__ import annotations

from collections import deque

__all__ = ["FetchTimeEstimator", "StallLog"]


class StallLog:
    """The most recent intervals during which the event loop was blocked, oldest first."""

    def __init__(self, keep: int = 1024) -> None:
        self._spans: deque[tuple[float, float]] = deque(maxlen=keep)
        #: Stalls recorded, and their total length (seconds), for the stats.
        self.count = 0
        self.total = 0.0
        self.worst = 0.0

    def add(self, start: float, end: float) -> None:
        if end <= start:
            return
        self._spans.append((start, end))
        self.count += 1
        length = end - start
        self.total += length
        if length > self.worst:
            self.worst = length

    def held(self, start: float, end: float, slack: float) -> float:
        """Seconds of [start, end] in stalls that ended at most ``slack`` before ``end``
        (the stalls that kept the read at ``end`` waiting)."""
        total = 0.0
        limit = end - slack
        for a, b in reversed(self._spans):
            if b < limit:
                break  # older spans end earlier still
            lo = a if a > start else start
            hi = b if b < end else end
            if hi > lo:
                total += hi - lo
        return total

    def overlap(self, start: float, end: float) -> float:
        """Seconds of [start, end] during which the loop was seen blocked."""
        total = 0.0
        for a, b in reversed(self._spans):
            if b <= start:
                break  # older spans end earlier still
            lo = a if a > start else start
            hi = b if b < end else end
            if hi > lo:
                total += hi - lo
        return total

    def recent(self, start: float, end: float) -> list[tuple[float, float]]:
        """The spans that overlap [start, end] (for debug logs)."""
        return [(a, b) for a, b in self._spans if b > start and a < end]

    def __len__(self) -> int:
        return len(self._spans)


class FetchTimeEstimator:
    """Per host: the recent clean fetch times, and the discounted time of held fetches."""

    def __init__(self, window: int = 8, margin: float = 1.5, max_hosts: int = 100_000) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not margin >= 1.0:
            raise ValueError(f"margin must be >= 1, got {margin}")
        self.window = window
        self.margin = margin
        self.max_hosts = max_hosts
        self._recent: dict[str, deque[float]] = {}
        #: Fetches whose read a stall held, those given a shorter time, and the seconds taken off.
        self.stalled = 0
        self.discounted = 0
        self.seconds_discounted = 0.0

    def recent_typical(self, host: str) -> float | None:
        """The median of the host's last ``window`` clean fetches, None if it had none.

        The median, not the longest: a clean fetch's measure still holds the crawler's own
        delays (a new connection, a busy loop), and one such outlier would set every
        discounted rest of the host for ``window`` fetches."""
        recent = self._recent.get(host)
        if not recent:
            return None
        ordered = sorted(recent)
        return ordered[len(ordered) // 2]

    def estimate(self, host: str, measured: float, held: float) -> float:
        """The fetch time to rest by, for a fetch measured ``measured`` whose read a stall
        held for ``held`` seconds."""
        measured = max(0.0, measured)
        held = min(max(0.0, held), measured)
        if held <= 0.0:
            self._note(host, measured)
            return measured
        self.stalled += 1
        recent = self.recent_typical(host)
        if recent is None:
            return measured
        out = max(measured - held, min(measured, self.margin * recent))
        if out < measured:
            self.discounted += 1
            self.seconds_discounted += measured - out
        return out

    def _note(self, host: str, seconds: float) -> None:
        recent = self._recent.pop(host, None)
        if recent is None:
            if len(self._recent) >= self.max_hosts:
                # Forget the host heard from least recently (dicts keep insertion order).
                self._recent.pop(next(iter(self._recent)))
            recent = deque(maxlen=self.window)
        recent.append(seconds)
        self._recent[host] = recent  # re-inserted: most recent last

    def forget(self, host: str) -> None:
        self._recent.pop(host, None)
