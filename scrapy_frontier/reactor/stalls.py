"""The scheduler's own view of the event loop: when was it blocked, and by whom?

A timer asks to run every :data:`BEAT` seconds; when it runs late by more than
:data:`MIN_STALL`, the loop was blocked from when the beat was due until now. Only
what the timer saw is recorded: the interval starts when the beat was due, not
earlier, so a stall is never taken for longer than it was.

Whose stall was it? A callback that blocks (heavy parsing, a synchronous pipeline)
stalls this process alone: the servers it talks to are not slowed by it. A machine
short of CPU stalls everyone, servers on it included, whose answers then really take
longer. Linux tells the two apart: ``/proc/thread-self/schedstat`` counts the time
the loop's thread waited for a CPU. A stall during which the thread mostly waited for
a CPU is *congestion* and is not put in the
:class:`~scrapy_frontier.core.fetch_time.StallLog`; where the kernel does not say, no
stall is recorded at all.

What the log is for: the stats (``frontier/reactor/*``) and the politeness DEBUG log. No
fetch time is made shorter by a stall: it says when the loop could not read, not when an
answer came in (``core/fetch_time.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from scrapy_frontier.core.fetch_time import StallLog
from scrapy_frontier.reactor.timer import Timer, call_later

#: Seconds between beats: 100 cheap calls a second. The start of a stall is known only to
#: within a beat (it is taken as the beat's due time, never earlier).
BEAT = 0.01
#: Lateness below this is the loop's ordinary jitter, not a stall.
MIN_STALL = 0.005
#: A stall during which the thread waited for a CPU this share of the time is congestion.
CONGESTED_SHARE = 0.2
SCHEDSTAT = "/proc/thread-self/schedstat"


#: A beat later than this counts in :attr:`StallMeter.over`.
LONG_STALL = 0.1


class StallMeter:
    """Beats every ``beat`` seconds and records when the loop kept a beat waiting.

    Also the worst lateness seen and how many beats came more than :data:`LONG_STALL`
    late: the Redis driver reports these (its I/O thread's answers wait for the loop)."""

    def __init__(self, clock: Callable[[], float], log: StallLog | None = None,
                 schedstat: str | None = SCHEDSTAT, beat: float = BEAT) -> None:
        self.clock = clock
        self.log = log if log is not None else StallLog()
        self.beat = beat
        #: Stalls seen but not recorded because the machine was short of CPU.
        self.congested = 0
        #: The latest a beat came (seconds), and the beats over LONG_STALL late.
        self.worst = 0.0
        self.over = 0
        self._schedstat_path = schedstat
        self._schedstat: IO[bytes] | None = None
        self._waited = 0.0
        self._due = 0.0
        self._timer: Timer | None = None
        self._running = False

    @property
    def knows_causes(self) -> bool:
        """Whether the kernel says how long the loop's thread waited for a CPU."""
        return self._schedstat is not None

    def start(self) -> None:
        """Start beating (on the loop's thread: the CPU-wait counter is that thread's)."""
        if self._running:
            return
        self._running = True
        if self._schedstat_path is not None:
            try:
                self._schedstat = open(self._schedstat_path, "rb")  # noqa: SIM115
            except OSError:
                self._schedstat = None
        self._waited = self._cpu_wait()
        try:
            self._schedule(self.clock())
        except RuntimeError:
            # No reactor or event loop (a scheduler driven by hand, as in the scheduler-cost
            # benchmark): no stall can be seen, so none is recorded.
            self._running = False
            self._timer = None

    def _cpu_wait(self) -> float:
        """Seconds this thread has waited for a CPU so far (0 where unknown)."""
        f = self._schedstat
        if f is None:
            return 0.0
        try:
            f.seek(0)
            return int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            self._schedstat = None
            return 0.0

    def _schedule(self, now: float) -> None:
        self._due = now + self.beat
        self._timer = call_later(self.beat, self._beat)

    def _beat(self) -> None:
        self._timer = None
        if not self._running:
            return
        now = self.clock()
        late = now - self._due
        if late > self.worst:
            self.worst = late
        if late > LONG_STALL:
            self.over += 1
        if late > MIN_STALL:
            waited = self._cpu_wait()
            self.stalled(self._due, now, waited - self._waited)
            self._waited = waited
        elif self._schedstat is not None:
            self._waited = self._cpu_wait()
        self._schedule(now)

    def stalled(self, start: float, end: float, cpu_wait: float) -> None:
        """The loop was blocked over [start, end]; its thread waited ``cpu_wait`` seconds
        for a CPU meanwhile (since the previous beat)."""
        if not self.knows_causes:
            return
        if cpu_wait > CONGESTED_SHARE * (end - start):
            self.congested += 1
            return
        self.log.add(start, end)

    def stop(self) -> None:
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._schedstat is not None:
            self._schedstat.close()
            self._schedstat = None
