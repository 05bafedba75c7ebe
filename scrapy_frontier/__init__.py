"""scrapy-frontier: a polite Mercator-style crawl frontier for Scrapy."""

from scrapy_frontier.addon import Addon
from scrapy_frontier.downloadermiddlewares import FetchTimingMiddleware
from scrapy_frontier.dupefilter import FrontierDupeFilter
from scrapy_frontier.scheduler import FrontierScheduler
from scrapy_frontier.spidermiddlewares import RecrawlMiddleware

__version__ = "0.2.0"

__all__ = [
    "Addon",
    "FetchTimingMiddleware",
    "FrontierDupeFilter",
    "FrontierScheduler",
    "RecrawlMiddleware",
    "__version__",
]
