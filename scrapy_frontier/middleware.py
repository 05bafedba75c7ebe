"""Deprecated path: use :mod:`scrapy_frontier.downloadermiddlewares`."""

from scrapy_frontier.downloadermiddlewares import FetchTimingMiddleware

__all__ = ["FetchTimingMiddleware"]
