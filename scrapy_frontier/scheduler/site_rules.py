"""Site owners' wishes, applied to what Scrapy saw: the same on every backend.

Retry-After on 429 / 503, a doubling back-off after consecutive failures (5xx,
429 without Retry-After, download errors), retirement of a host that keeps
failing, robots.txt Crawl-delay / Request-rate as a minimum rest, and the rest
owed after a robots.txt fetch. The arithmetic is in
:mod:`scrapy_frontier.core.site_rules`; the drivers only receive rests.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest

from scrapy_frontier.core.site_rules import backoff, parse_retry_after, robots_delay

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.settings import FrontierConfig

politeness_log = logging.getLogger("scrapy_frontier.politeness")


class SiteRules:
    def __init__(
        self, config: FrontierConfig, stats: StatsCollector, clock: Callable[[], float]
    ) -> None:
        self.limits = config.site_limits
        self.policies = config.host_policies
        self.stats = stats
        self.clock = clock
        # Consecutive failed fetches per host (only hosts currently failing).
        self._failures: dict[str, int] = {}
        #: Host -> minimum rest from its robots.txt (as given to the driver).
        self.crawl_delays: dict[str, float] = {}
        self._capped: set[str] = set()
        # Host -> (end, duration) of a robots.txt fetch made during its lease.
        #: Host -> (end, duration) of a robots.txt fetch made during its lease; empty
        #: almost always (read on every fetch end).
        self.robots_done: dict[str, tuple[float, float]] = {}

    # -- fetch outcomes ---------------------------------------------------------------

    def outcome_rest(
        self, host: str, response: Response | None, exception: BaseException | None
    ) -> tuple[float, int]:
        """(the rest a fetch's outcome asks for, the host's consecutive failures).

        Failures: a 5xx or 429 response, or any download exception except
        IgnoreRequest. A 429 or 503 with a usable Retry-After rests as asked
        (up to FRONTIER_MAX_RETRY_AFTER); other failures back off exponentially.
        Any other response resets the count.
        """
        retry_after: float | None = None
        if exception is not None:
            if isinstance(exception, IgnoreRequest):
                return 0.0, self._failures.get(host, 0)
        elif response is not None:
            status = response.status
            if status < 500 and status != 429:
                self._failures.pop(host, None)
                return 0.0, 0
            if status in (429, 503):
                retry_after = parse_retry_after(response.headers.get(b"Retry-After"), time.time())
        else:
            return 0.0, self._failures.get(host, 0)
        failures = self._failures[host] = self._failures.get(host, 0) + 1
        if retry_after is not None:
            self.stats.inc_value("frontier/retry_after/honoured")
            cap = self.limits.max_retry_after
            if retry_after > cap:
                self.stats.inc_value("frontier/retry_after/clamped")
                politeness_log.warning(
                    "host %r asked to retry after %.0f s; waiting FRONTIER_MAX_RETRY_AFTER "
                    "(%.0f s) instead", host, retry_after, cap,
                )
                retry_after = cap
            return retry_after, failures
        self.stats.inc_value("frontier/backoff/count")
        return backoff(self.limits.backoff_base, self.limits.backoff_max, failures), failures

    def should_retire(self, failures: int) -> bool:
        return bool(self.limits.retire_after) and failures >= self.limits.retire_after

    def forget(self, host: str) -> None:
        self._failures.pop(host, None)

    # -- robots.txt -------------------------------------------------------------------

    def crawl_delay(self, host: str, robotparser: Any, agent: str) -> float | None:
        """The minimum rest a parsed robots.txt asks of ``host`` (capped), or None."""
        wanted = robots_delay(robotparser, agent)
        if wanted is None or wanted <= 0:
            return None
        self.stats.inc_value("frontier/crawl_delay/hosts")
        cap = self.limits.max_crawl_delay
        if not math.isfinite(wanted) or wanted > cap:
            self.stats.inc_value("frontier/crawl_delay/capped")
            if host not in self._capped:
                self._capped.add(host)
                politeness_log.warning(
                    "host %r asks for a crawl delay of %s s in robots.txt; using "
                    "FRONTIER_MAX_CRAWL_DELAY (%.0f s) instead",
                    host, "an infinite" if not math.isfinite(wanted) else f"{wanted:.0f}", cap,
                )
            wanted = cap
        self.crawl_delays[host] = wanted
        politeness_log.debug("host %r: robots.txt crawl delay %.3f s", host, wanted)
        return wanted

    def robots_fetched(self, host: str, seconds: float) -> None:
        """A robots.txt fetch of ``host`` ended now after ``seconds``."""
        self.robots_done[host] = (self.clock(), seconds)
        self.stats.inc_value("frontier/robots/fetches")

    def robots_rest_end(self, host: str, *, take: bool) -> float | None:
        """When the rest owed after ``host``'s robots.txt fetch ends, if one is owed."""
        if not self.robots_done:
            return None
        robots = self.robots_done.pop(host, None) if take else self.robots_done.get(host)
        if robots is None:
            return None
        end, seconds = robots
        delay = self.policies.of(host).delay.delay(seconds)
        return end + max(delay, self.crawl_delays.get(host, 0.0))
