"""The frontier's side of robots.txt: a host's Crawl-delay becomes its minimum rest, and
a robots.txt fetch counts as a fetch of its host, so the host's first page waits for the
rest it owes after it (see docs/design.rst, *robots.txt*)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_frontier.hostkey import HostlessURL
from scrapy_frontier.meta import LEASE_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.backends.ports import HostControlPort
    from scrapy_frontier.scheduler.inflight import InFlight
    from scrapy_frontier.scheduler.robots_cache import RobotsCache
    from scrapy_frontier.scheduler.site_rules import SiteRules
    from scrapy_frontier.scheduler.slots import SlotKeys

politeness_log = logging.getLogger("scrapy_frontier.politeness")


class RobotsPacing:
    """What the middlewares ask of the frontier around robots.txt fetches."""

    def __init__(self, *, slots: SlotKeys, rules: SiteRules, inflight: InFlight,
                 controls: HostControlPort, stats: StatsCollector,
                 clock: Callable[[], float], settings: BaseSettings,
                 cache: RobotsCache | None = None) -> None:
        self.slots = slots
        self.rules = rules
        self.inflight = inflight
        self.controls = controls
        self.stats = stats
        self.clock = clock
        self.agent = str(settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT")
                         or "*")
        #: The robots.txt answers kept with the frontier (None: FRONTIER_ROBOTS_CACHE = 0).
        self.cache = cache

    def parsed(self, robotparser: Any, request: Request) -> None:
        """A robots.txt was parsed: its Crawl-delay (or Request-rate) becomes the host's
        minimum rest."""
        try:
            host = self.slots.key(request, remember=False)
        except HostlessURL:
            return
        wanted = self.rules.crawl_delay(host, robotparser, self.agent)
        if wanted is not None:
            self.controls.set_min_rest(host, wanted)

    def fetched(self, request: Request, seconds: float) -> None:
        """A robots.txt fetch of ``request``'s host ended now after ``seconds``."""
        try:
            host = self.slots.key(request, remember=False)
        except HostlessURL:
            return
        self.rules.robots_fetched(host, seconds)

    def wait(self, request: Request) -> float:
        """Seconds a robots.txt request waits before it is sent: 0 for a first attempt; a
        retry (RetryMiddleware sends it again at once) waits for the rest owed after the
        attempt before it, by the same rule as any page."""
        try:
            host = self.slots.key(request, remember=False)
        except HostlessURL:
            return 0.0
        wait = self._rest_left(host)
        if wait <= 0:
            return 0.0
        self.stats.inc_value("frontier/robots/paced")
        politeness_log.debug("host %r: robots.txt sent again in %.3f s", host, wait)
        return wait

    def hold(self, request: Request) -> Request | None:
        """If the leased ``request`` follows its host's robots.txt fetch too soon,
        a copy to queue again (the host rests until the gap is kept); else None.

        For the robots.txt step (``RobotsHoldMiddleware``), before any project middleware
        has seen the request. The copy goes back through ``enqueue_request``, which ends
        the lease with the rest still owed: no download slot waits.
        """
        if self._owed(request, "queued again") <= 0:
            return None
        return request.replace(dont_filter=True)

    def wait_in_place(self, request: Request) -> float:
        """Seconds the leased ``request`` waits in the downloader before it is sent: the
        rest its host still owes after its robots.txt fetch (0 almost always).

        For the timing middleware, when the request was not held at the robots.txt step
        (a project middleware sees it before that step): sent back to the queue, it would
        pass that middleware twice, so it waits where it is, holding a request slot.
        """
        wait = self._owed(request, "in the downloader")
        if wait > 0:
            self.stats.inc_value("frontier/robots/held_in_place")
        return wait

    def _owed(self, request: Request, how: str) -> float:
        """Seconds of rest the leased ``request``'s host still owes after its robots.txt
        fetch, counted in ``frontier/robots/held`` when any; else 0."""
        if not self.rules.robots_done:  # the hot path: no robots.txt fetch awaits a page
            return 0.0
        host = self.inflight.host_of(request.meta.get(LEASE_META))
        if host is None:
            return 0.0
        wait = self._rest_left(host)
        if wait <= 0:
            return 0.0
        self.stats.inc_value("frontier/robots/held")
        politeness_log.debug("host %r: %s waits %.3f s after robots.txt (%s)",
                             host, request, wait, how)
        return wait

    def _rest_left(self, host: str) -> float:
        """Seconds of the rest ``host`` owes after its robots.txt fetch (0 or less: none)."""
        until = self.rules.robots_rest_end(host, take=False)
        return 0.0 if until is None else until - self.clock()
