"""scrapy-frontier: a polite Mercator-style crawl frontier for Scrapy."""

from scrapy_frontier.addon import Addon
from scrapy_frontier.middleware import FetchTimingMiddleware
from scrapy_frontier.scheduler import FrontierScheduler

__version__ = "0.1.0"

__all__ = ["Addon", "FetchTimingMiddleware", "FrontierScheduler", "__version__"]
