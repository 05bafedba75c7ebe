"""What the scheduler starts and stops: the progress line and the metrics endpoint."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from scrapy_frontier.observe.census import Census
from scrapy_frontier.observe.progress import CallLater, ProgressReporter
from scrapy_frontier.settings import ObserveConfig

logger = logging.getLogger("scrapy_frontier.progress")


class Observer:
    def __init__(
        self,
        config: ObserveConfig,
        *,
        census: Callable[[], Census],
        slots: Callable[[], tuple[int, int] | None],
        clock: Callable[[], float],
        call_later: CallLater,
        spider: str,
    ) -> None:
        self.progress: ProgressReporter | None = None
        if config.progress_interval > 0:
            self.progress = ProgressReporter(config.progress_interval, census, slots, clock,
                                             call_later)
        self.metrics = None
        if config.metrics_port:
            from scrapy_frontier.observe.metrics import CensusCollector, MetricsServer, worker_id

            collector = CensusCollector(census, slots, spider=spider, worker=worker_id())
            self.metrics = MetricsServer(collector, config.metrics_host, config.metrics_port)

    @classmethod
    def idle(cls) -> Observer:
        """One that does nothing (before the settings were looked at)."""
        return cls(ObserveConfig(progress_interval=0.0), census=cls._no_census,
                   slots=lambda: None, clock=lambda: 0.0, call_later=_never, spider="")

    @staticmethod
    def _no_census() -> Census:  # pragma: no cover - never called: nothing is enabled
        raise AssertionError("no census")

    def start_metrics(self) -> None:
        """Raises FrontierConfigError when the metrics endpoint cannot start."""
        if self.metrics is not None:
            self.metrics.start()

    def start_progress(self) -> None:
        if self.progress is not None:
            self.progress.start()

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.metrics is not None:
            self.metrics.stop()

    def stats(self) -> dict[str, int]:
        out = {}
        if self.progress is not None:
            out["frontier/progress/lines"] = self.progress.lines
        if self.metrics is not None:
            out["frontier/metrics/scrapes"] = self.metrics.scrapes
        return out


def _never(delay: float, func: Callable[[], Any]) -> Any:  # pragma: no cover - never called
    raise AssertionError("an idle observer schedules nothing")
