"""A one-shot timer on whichever reactor Scrapy runs (asyncio or Twisted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


def call_later(delay: float, func: Callable[[], Any]) -> Timer:
    try:  # Scrapy >= 2.14 picks the asyncio loop or the Twisted reactor for us.
        from scrapy.utils.asyncio import call_later as scrapy_call_later
    except ImportError:  # pragma: no cover - Scrapy 2.13
        from twisted.internet import reactor

        return reactor.callLater(delay, func)  # type: ignore[attr-defined,arg-type,no-any-return]
    return scrapy_call_later(delay, func)


class EngineWaker:
    """Makes the engine ask for requests without waiting for its 5 s heartbeat: soon when
    told to, and when the earliest resting host is ready (one timer, moved only earlier)."""

    __slots__ = ("engine", "clock", "counted", "closed", "_timer", "_at")

    def __init__(self, engine: Any, clock: Callable[[], float], *,
                 counted: Callable[[], None]) -> None:
        self.engine = engine  # scheduler.engine.EngineAdapter
        self.clock = clock
        self.counted = counted
        #: Set while the scheduler is closed: nothing is woken.
        self.closed = False
        self._timer: Timer | None = None
        self._at: float | None = None

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def nudge(self, *, now: bool = False) -> None:
        """Make the engine ask again soon; ``now`` only from a reactor callback of the
        frontier's own (EngineAdapter.wake)."""
        if not self.closed and self.engine.wake(now=now):
            self.counted()

    def wake_at(self, at: float | None) -> None:
        """Make the engine ask at ``at`` (the clock's time) unless it is asked earlier."""
        if at is None or (self._at is not None and self._timer is not None and self._at <= at):
            return
        self.cancel()
        self._at = at
        self._timer = call_later(max(0.0, at - self.clock()), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._at = None
        # The timer is a reactor callback of its own: the engine may ask now.
        self.nudge(now=True)

    def close(self) -> None:
        self.closed = True
        self.cancel()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._at = None
