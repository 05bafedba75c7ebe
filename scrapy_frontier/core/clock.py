"""Clocks: the frontier never reads the time itself, it asks an injected clock."""

from __future__ import annotations

from collections.abc import Callable

#: Any zero-argument callable returning seconds as a float (``time.monotonic``).
Clock = Callable[[], float]


class FakeClock:
    """A manually advanced clock for tests and simulations."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self.now += seconds
        return self.now
