"""How long a fetch took as the server saw it, when the crawler's own pauses got in the way.

The crawler times a fetch from writing the request to learning that it ended. While its
event loop is blocked (a slow callback, a synchronous pipeline, a burst of work), an answer
that has come in waits unread in the socket, and the fetch measures long: a 14 ms fetch read
after a 300 ms pause measures 314 ms, and a host resting ten times that rests 3 s instead of
0.14 s.

:func:`fetch_seconds` is the one rule: a fetch lasts from its start to the moment its
complete answer is *known* to have come in, which is

* the kernel's arrival stamp of the answer's last bytes (``scheduler/tcp_timing.py``),
* else the time of the read that returned them,
* else when the crawler learnt the fetch ended (its report).

What comes after that moment is the complete answer waiting unread (in a stall or behind
other work) and is left out; nothing before it is, stall or not.

Why a stall alone takes nothing off. A stall (:class:`StallLog`, seen by a late timer in
``scheduler/stalls.py``) says when the loop could not read, not when the answer came in. An
answer read just after a stall may have been complete long before it, or only at its last
instant: the server may have been sending all along. Nothing else the crawler knows bounds
that moment below the read, so no share of the stall is safe to take off. Taking it off
anyway breaks the promise that a fetch time is never shorter than the server's own time, and
with it the politeness rule: in a broad crawl, a server that took 9.16 s sent its answer
during a 4.8 s stall of the crawler, the stall was subtracted (down to 1.5 x the host's
typical fetch, the former ``FRONTIER_STALL_DISCOUNT`` rule), and the host rested 43.4 s,
0.47 of the 91.6 s it was owed. The kernel's stamp is the only source that dates the
complete answer inside a stall; where it exists the fetch ends there, and the stall log
serves the stats and the politeness DEBUG log only.
"""

from __future__ import annotations

from collections import deque

__all__ = ["StallLog", "fetch_seconds"]


def fetch_seconds(start: float, reported: float, complete_at: float | None = None) -> float:
    """Seconds from ``start`` (no later than the server can have had the request) to the
    earliest moment the complete answer is known to have come in: ``complete_at`` (its last
    bytes' arrival or read) when it is before ``reported``, else ``reported``.

    Never shorter than the server's own time when ``complete_at`` is no earlier than the
    answer's last bytes came in: the time the answer waited unread after that moment is the
    only time left out."""
    end = reported if complete_at is None or complete_at > reported else complete_at
    return end - start if end > start else 0.0


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
