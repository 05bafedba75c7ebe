"""What the scheduler starts and stops: the progress line and the metrics endpoint."""

from __future__ import annotations

from collections.abc import Callable

from scrapy_frontier.observe.census import Census
from scrapy_frontier.observe.progress import CallLater, ProgressReporter
from scrapy_frontier.settings import ObserveConfig


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

    def start(self) -> None:
        """Raises FrontierConfigError when the metrics endpoint cannot start."""
        if self.metrics is not None:
            self.metrics.start()
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
