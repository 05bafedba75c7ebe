"""Prometheus metrics: ``/metrics`` on ``FRONTIER_METRICS_HOST:FRONTIER_METRICS_PORT``.

Optional: it needs ``prometheus_client`` (``pip install 'scrapy-frontier[metrics]'``).
Each crawler gets its own ``CollectorRegistry`` (two crawlers in one process do not
clash) holding one collector that takes a census when Prometheus scrapes, so nothing
is updated per request. The page is served by Twisted on the reactor thread, the
thread the frontier lives on: the census never races the crawl.

Every series carries ``scope``, ``worker`` and ``partition`` labels. ``scope="worker"`` is
this process's own share; ``scope="shared"`` is the whole frontier as this process sees it
(on Redis, every worker exports the same shared values; on a local backend both scopes
agree). Sum ``scope="worker"`` series over workers; take one (``max``) of the
``scope="shared"`` ones; never add the two scopes. A partitioned Redis crawl also exports
the shared values of each partition, with ``scope="partition"`` and ``partition="<i>"``
(``partition`` is empty on the other scopes).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

from scrapy_frontier.errors import FrontierConfigError, require_extra
from scrapy_frontier.observe.census import Census

logger = logging.getLogger("scrapy_frontier.metrics")

def _prometheus() -> Any:
    require_extra("prometheus_client", "metrics", "FRONTIER_METRICS_PORT")
    import prometheus_client
    import prometheus_client.core

    return prometheus_client


def worker_id() -> str:
    """This process, as the ``worker`` label names it: ``<hostname>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class CensusCollector:
    """A prometheus_client collector that reads a census at each scrape."""

    def __init__(self, census: Callable[[], Census],
                 slots: Callable[[], tuple[int, int] | None], *, spider: str,
                 worker: str) -> None:
        self._census = census
        self._slots = slots
        self.spider = spider
        self.worker = worker
        self.scrapes = 0

    def describe(self) -> list[Any]:
        return []  # no census before the crawl opens: metrics are listed at scrape time

    def collect(self) -> Iterator[Any]:
        core = _prometheus().core
        gauge, counter = core.GaugeMetricFamily, core.CounterMetricFamily
        self.scrapes += 1
        census = self._census()
        labels = ["spider", "backend", "scope", "worker", "partition"]
        queued = gauge("scrapy_frontier_queued_requests",
                       "Requests queued in the frontier, not in flight", labels=labels)
        front = gauge("scrapy_frontier_front_queued_requests",
                      "Queued requests of hosts without a back queue yet", labels=labels)
        in_flight = gauge("scrapy_frontier_in_flight",
                          "Requests handed out whose fetch has not ended", labels=labels)
        hosts = gauge("scrapy_frontier_hosts", "Hosts by state", labels=[*labels, "state"])
        known = gauge("scrapy_frontier_hosts_known",
                      "Hosts the frontier keeps state for now", labels=labels)
        fetches = counter("scrapy_frontier_fetches", "Fetches ended", labels=labels)
        wait = counter("scrapy_frontier_politeness_wait_seconds",
                       "Rests imposed on hosts between two of their fetches", labels=labels)
        due = gauge("scrapy_frontier_recrawl_due_pages",
                    "Pages of the history due for a recrawl", labels=labels)
        pages = gauge("scrapy_frontier_history_pages", "Pages in the page history",
                      labels=labels)
        seen = gauge("scrapy_frontier_seen_fingerprints", "Fingerprints in the seen set",
                     labels=labels)
        views = [("worker", "", census)]
        if census.totals is not None:
            views.append(("shared", "", census.totals))
            views += [("partition", str(i), part)
                      for i, part in enumerate(census.totals.partitions)]
        for scope, partition, view in views:
            values = [self.spider, census.backend, scope, self.worker, partition]
            queued.add_metric(values, view.queued)
            in_flight.add_metric(values, view.in_flight)
            fetches.add_metric(values, view.fetched)
            if view.waiting_for_queue is not None:
                front.add_metric(values, view.waiting_for_queue)
            h = view.hosts
            if view is census.totals or scope == "partition":  # not a worker's share
                for state in ("active", "waiting", "resting", "blocked", "retired"):
                    hosts.add_metric([*values, state], getattr(h, state))
            if h.known is not None:
                known.add_metric(values, h.known)
            for family, value in ((wait, view.politeness_wait_seconds),
                                  (due, view.history_due), (pages, view.history_pages),
                                  (seen, view.seen)):
                if value is not None:
                    family.add_metric(values, value)
        yield from (queued, front, in_flight, hosts, known, fetches, wait, due, pages, seen)
        slots = self._slots()
        if slots is not None:
            values = [self.spider, census.backend, "worker", self.worker, ""]
            busy = gauge("scrapy_frontier_download_slots_busy",
                         "Requests in Scrapy's downloader", labels=labels)
            busy.add_metric(values, slots[0])
            total = gauge("scrapy_frontier_download_slots",
                          "Scrapy's CONCURRENT_REQUESTS", labels=labels)
            total.add_metric(values, slots[1])
            yield busy
            yield total
        if census.shared_age is not None:
            age = gauge("scrapy_frontier_shared_census_age_seconds",
                        "Seconds since the shared totals were read", labels=labels)
            age.add_metric([self.spider, census.backend, "shared", self.worker, ""],
                           census.shared_age)
            yield age


class MetricsServer:
    """``/metrics`` for one crawler, served by Twisted on the reactor."""

    def __init__(self, collector: CensusCollector, host: str, port: int) -> None:
        self.collector = collector
        self.host = host
        self.port = port
        self._listening: Any = None

    @property
    def scrapes(self) -> int:
        return self.collector.scrapes

    def start(self) -> None:
        prometheus_client = _prometheus()
        from twisted.internet import reactor as installed
        from twisted.internet.error import CannotListenError
        from twisted.web.resource import Resource
        from twisted.web.server import Site

        registry = prometheus_client.CollectorRegistry(auto_describe=False)
        registry.register(self.collector)

        class MetricsPage(Resource):
            isLeaf = True

            def render_GET(self, request: Any) -> bytes:
                request.setHeader(b"Content-Type",
                                  prometheus_client.CONTENT_TYPE_LATEST.encode())
                return bytes(prometheus_client.generate_latest(registry))

        class QuietSite(Site):
            def log(self, request: Any) -> None:  # no access log in the crawl's log
                return None

        root = Resource()
        page: Any = MetricsPage()
        root.putChild(b"metrics", page)
        reactor: Any = installed
        try:
            self._listening = reactor.listenTCP(self.port, QuietSite(root), interface=self.host)
        except CannotListenError as exc:
            raise FrontierConfigError(
                f"FRONTIER_METRICS_PORT={self.port}: cannot listen on "
                f"{self.host}:{self.port} ({exc.socketError}). Another process (another "
                "crawl?) may use that port: choose a free one, or leave "
                "FRONTIER_METRICS_PORT unset."
            ) from None
        self.port = self._listening.getHost().port
        if not _is_loopback(self.host):
            logger.warning("The metrics endpoint listens on %s, beyond this machine: it "
                           "has no authentication", self.host)
        logger.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        listening, self._listening = self._listening, None
        if listening is not None:
            listening.stopListening()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
