"""The frontier core: plain Python, no Scrapy or Twisted imports.

Everything here takes an injected clock (a zero-argument callable returning
seconds) and a seeded :class:`random.Random`, so it can be unit-tested on a
fake clock and reused by simulations.
"""

from scrapy_frontier.core.clock import Clock, FakeClock
from scrapy_frontier.core.frontier import Frontier, FrontierStats, Lease
from scrapy_frontier.core.politeness import DelayPolicy
from scrapy_frontier.core.prioritizer import FrontQueueChooser, PriorityMapper
from scrapy_frontier.core.refresh import PageHistory, RefreshConfig, Refresher

__all__ = [
    "Clock",
    "DelayPolicy",
    "FakeClock",
    "Frontier",
    "FrontierStats",
    "FrontQueueChooser",
    "Lease",
    "PageHistory",
    "PriorityMapper",
    "RefreshConfig",
    "Refresher",
]
