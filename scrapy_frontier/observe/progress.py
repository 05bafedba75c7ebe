"""The live progress line: one INFO line every ``FRONTIER_PROGRESS_INTERVAL`` seconds.

Driven by a reactor timer (started when the scheduler opens, stopped when it closes,
with one last line then), so it costs one census per interval and nothing per request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from scrapy_frontier.observe.census import Census
from scrapy_frontier.reactor.timer import Timer

logger = logging.getLogger("scrapy_frontier.progress")


#: ``call_later(delay, func)`` on the running reactor (reactor/timer.py's).
CallLater = Callable[[float, Callable[[], Any]], Timer]


def _n(value: float) -> str:
    """Exact below 100 000, then three digits: 123k, 12.3M (a line stays short)."""
    if value < 100_000:
        return f"{value:.0f}"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            scaled = value / size
            return f"{scaled:.1f}{unit}" if scaled < 100 else f"{scaled:.0f}{unit}"
    return f"{value:.0f}"  # pragma: no cover


def progress_line(census: Census, per_minute: float | None,
                  slots: tuple[int, int] | None) -> str:
    """The line for ``census``; ``per_minute`` is the fetch rate since the last line.

    On a shared frontier (Redis) the queue and host numbers are the whole frontier's
    and "fetched" is this worker's, followed by every worker's total.
    """
    whole = census.whole
    hosts = whole.hosts
    rate = "" if per_minute is None else f" ({_n(per_minute)}/min)"
    fetched = f"fetched {_n(census.fetched)}{rate}"
    if census.shared is not None:
        fetched += f", all {_n(whole.fetched)}"
    queued = f"queued {_n(whole.queued)}"
    if hosts.queued is not None:
        queued += f" on {_n(hosts.queued)} host{'' if hosts.queued == 1 else 's'}"
    parts = [
        fetched,
        queued,
        # (hosts waiting for a download slot: in the metrics, not here; slots say it)
        f"hosts {_n(hosts.active)} active, {_n(hosts.resting)} resting, "
        f"{_n(hosts.blocked)} blocked",
    ]
    if slots is not None:
        busy, total = slots
        share = 100 * busy / total if total else 0.0
        parts.append(f"slots {busy}/{total} ({share:.0f}%)")
    if whole.history_due is not None:
        parts.append(f"due {_n(whole.history_due)}")
    return " | ".join(parts)


class ProgressReporter:
    """Logs :func:`progress_line` every ``interval`` seconds of ``clock``."""

    def __init__(
        self,
        interval: float,
        census: Callable[[], Census],
        slots: Callable[[], tuple[int, int] | None],
        clock: Callable[[], float],
        call_later: CallLater,
    ) -> None:
        self.interval = interval
        self._call_later = call_later
        self._census = census
        self._slots = slots
        self._clock = clock
        self._timer: Timer | None = None
        self._last: tuple[float, int] | None = None
        self.lines = 0

    def start(self) -> None:
        self._last = (self._clock(), self._census().fetched)
        try:
            self._schedule()
        except RuntimeError:
            # No reactor or event loop (a scheduler driven by hand, as in the
            # scheduler-cost benchmark): nothing could tick, so no progress line.
            logger.debug("no reactor running: no progress line")

    def stop(self) -> None:
        """Cancel the timer and log the last line (the crawl's final numbers)."""
        running = self._timer is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if running:
            self.report()

    def _schedule(self) -> None:
        self._timer = self._call_later(self.interval, self._tick)

    def _tick(self) -> None:
        self._timer = None
        try:
            self.report()
        except Exception:  # noqa: BLE001 -- a progress line must never stop a crawl
            logger.debug("progress line failed", exc_info=True)
        self._schedule()

    def report(self) -> None:
        census = self._census()
        now = self._clock()
        per_minute = None
        if self._last is not None and now > self._last[0]:
            per_minute = 60.0 * (census.fetched - self._last[1]) / (now - self._last[0])
        self._last = (now, census.fetched)
        logger.info("%s", progress_line(census, per_minute, self._slots()))
        self.lines += 1
