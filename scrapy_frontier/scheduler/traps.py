"""The shell's side of crawler traps: each fetched page to the detector, each trap it finds
to the backend's budgets.

The recrawl spider middleware hands over every 2xx page the spider gets with its visible
text; the page's simhash is made here (:mod:`scrapy_frontier.core.simhash`), only for hosts
still judged. A host the detector finds to be a trap (:mod:`scrapy_frontier.core.traps`) is
logged once, counted in ``frontier/traps/contained``, and contained by the backend
(:meth:`HostControlPort.contain <scrapy_frontier.backends.ports.HostControlPort.contain>`).
What the backend keeps -- earlier containments, an operator's release -- comes back through
``take_trap_states``, so that a released host is never contained again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy_frontier.backends.ports import HostControlPort
from scrapy_frontier.core.simhash import simhash
from scrapy_frontier.core.traps import Containment, TrapConfig, TrapDetector
from scrapy_frontier.hostkey import HostlessURL
from scrapy_frontier.meta import RECRAWL_META, SITEMAP_META

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger("scrapy_frontier.traps")

#: Characters of a page's text that its simhash reads (bounded CPU per page).
TEXT_CHARS = 50_000


class TrapWatch:
    """Pages in, containments out (see the module doc)."""

    def __init__(self, config: TrapConfig, controls: HostControlPort,
                 key: Callable[[Request], str], stats: StatsCollector) -> None:
        self.config = config
        self.controls = controls
        self.key = key
        self.stats = stats
        self.detector = TrapDetector(config)

    @classmethod
    def build(cls, config: TrapConfig, controls: HostControlPort,
              key: Callable[[Request], str], stats: StatsCollector) -> TrapWatch | None:
        """A watch, or None when FRONTIER_TRAPS is off or the backend cannot contain."""
        if not config.enabled:
            return None
        if type(controls).contain is HostControlPort.contain:
            logger.info("Crawler traps are not contained: %s cannot shrink a host's budget "
                        "(FRONTIER_TRAPS)", type(controls).__name__)
            return None
        return cls(config, controls, key, stats)

    def wants(self, request: Request) -> bool:
        """Whether the page of ``request`` is judged: a page the spider asked for, not a
        recrawl (whose text repeats by nature), of a host still judged."""
        self._take_states()
        meta = request.meta
        if meta.get(RECRAWL_META) or meta.get(SITEMAP_META):
            return False
        try:
            host = self.key(request)
        except HostlessURL:
            return False
        detector = self.detector
        return host not in detector.contained and host not in detector.released

    def page(self, request: Request, text: str) -> None:
        """A fetched page of ``request`` (one :meth:`wants` judged) with visible ``text``."""
        found = self.detector.observe(self.key(request), request.url,
                                      simhash(text[:TEXT_CHARS]))
        if found is not None:
            self._contain(found)

    def _contain(self, found: Containment) -> None:
        allowance = self.config.allowance
        logger.warning(
            "Host %r looks like a crawler trap: %s. Its budget is now its fetches so far "
            "(%d or more) plus %d; `scrapy frontier budget %s PAGES` (0: unlimited) releases "
            "it (FRONTIER_TRAPS)", found.host, found.evidence(), found.pages, allowance,
            found.host)
        self.stats.inc_value("frontier/traps/contained")
        self.controls.contain(found.host, found.pages, allowance)

    def _take_states(self) -> None:
        detector = self.detector
        for host, state in self.controls.take_trap_states():
            if state == "released" and host not in detector.released:
                self.stats.inc_value("frontier/traps/released")
                logger.info("Host %r was released from its trap containment by an operator: "
                            "it is not judged again", host)
            detector.restore(host, state)
