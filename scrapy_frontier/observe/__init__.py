"""Seeing inside a running crawl: the census, the progress line and Prometheus metrics.

:mod:`~scrapy_frontier.observe.census` is a leaf (what a driver reports);
:mod:`~scrapy_frontier.observe.progress` and :mod:`~scrapy_frontier.observe.metrics`
read census snapshots on the reactor thread, never per request.
"""
