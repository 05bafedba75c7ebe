"""Deprecated path: use :mod:`scrapy_frontier.spidermiddlewares`."""

from scrapy_frontier.spidermiddlewares import NotModified, RecrawlMiddleware

__all__ = ["NotModified", "RecrawlMiddleware"]
