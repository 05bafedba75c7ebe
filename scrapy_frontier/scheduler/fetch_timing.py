"""How long each fetch took as the server saw it, and when its answer ended.

One component owns the fetch's timing from its send to its end: the kernel's times
(``scheduler.tcp_timing``), the opt-in discount of the loop's own stalls
(``scheduler.stalls``, ``core.fetch_time``), and the stats of both. The scheduler asks it
one question per fetch, :meth:`FetchTiming.end`, and gets one answer, a :class:`FetchEnd`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from scrapy_frontier.core.fetch_time import FetchTimeEstimator
from scrapy_frontier.scheduler.engine import answer_transport
from scrapy_frontier.scheduler.inflight import Fetch
from scrapy_frontier.scheduler.stalls import HOLD_SLACK, StallMeter
from scrapy_frontier.scheduler.tcp_timing import (
    SocketWatch,
    TcpTimes,
    serves_http11,
    stamps_supported,
)

logger = logging.getLogger("scrapy_frontier.scheduler")
politeness_log = logging.getLogger("scrapy_frontier.politeness")


class FetchEnd(NamedTuple):
    """A fetch's time to rest by (seconds), and when its answer ended on the scheduler's
    clock (None: when the scheduler learnt of it, which is later)."""

    duration: float
    ended_at: float | None


#: Builds a FetchEnd from its two fields without the Python frame of the NamedTuple's
#: constructor (one per fetch).
_fetch_end: Callable[[tuple[float, float | None]], FetchEnd] = partial(tuple.__new__, FetchEnd)


class FetchTiming:
    """The fetch times the hosts rest by, from the kernel, the reads and the reports."""

    def __init__(self, *, clock: Callable[[], float], tcp_timing: bool,
                 stall_discount: bool) -> None:
        self.clock = clock
        self.stall_discount = stall_discount
        self.want_tcp = tcp_timing
        #: No timing middleware: Scrapy's signals report the fetches (less precisely).
        self.signals_only = False
        #: Whether each fetch's rest is logged (``scrapy_frontier.politeness`` at DEBUG when
        #: the crawl opened): tested once per fetch, so not asked of logging each time.
        self.log_each = False
        # The end where the bytes came in, less the loop's own stalls (core.fetch_time).
        self.stalls = StallMeter(clock)
        self.estimates = FetchTimeEstimator()
        # ... and, where the kernel keeps them, the times the network saw.
        self.tcp: TcpTimes | None = None
        self.watch: SocketWatch | None = None
        self.kernel_read = 0
        self.kernel_timed = 0
        self.kernel_seconds_cut = 0.0

    def open(self, handlers: Any, set_value: Callable[[str, Any], None]) -> None:
        """Start timing; ``handlers`` is the crawl's DOWNLOAD_HANDLERS. The stat
        ``frontier/fetch/timed_by`` says what times the fetches, and why."""
        self.log_each = politeness_log.isEnabledFor(logging.DEBUG)
        if self.stall_discount:
            self.stalls.start()
        reported = "Scrapy's signals" if self.signals_only else "the timing middleware"
        if not self.want_tcp:
            set_value("frontier/fetch/timed_by", f"{reported} (FRONTIER_TCP_TIMING is off)")
            return
        if not stamps_supported():
            logger.debug("FRONTIER_TCP_TIMING: this system does not stamp TCP reads; "
                         "fetches are timed to their report")
            set_value("frontier/fetch/timed_by",
                      f"{reported} (this system does not stamp TCP reads)")
            return
        self.tcp = TcpTimes()
        if serves_http11(handlers):
            self.watch = SocketWatch()
            set_value("frontier/fetch/timed_by", "the kernel's TCP stamps")
        else:
            # Another download handler (httpx, a browser...): its socket is not reachable.
            logger.info("FRONTIER_TCP_TIMING: the download handlers for http/https are not "
                        "Scrapy's HTTP/1.1 handler, whose socket the kernel's times are read "
                        "from: fetches are timed by %s instead", reported)
            set_value("frontier/fetch/timed_by",
                      f"{reported} (the download handler gives no TCP socket)")

    def close(self) -> None:
        self.stalls.stop()

    def sent(self, fetch: Fetch) -> None:
        """The request of ``fetch`` reaches the downloader now."""
        fetch.sent_at = self.clock()

    def headers(self, fetch: Fetch) -> None:
        """The answer to the request of ``fetch`` sent its headers."""
        now = self.clock()
        request = fetch.request
        if self.tcp is not None:
            # One frame deeper than a signal receiver (the scheduler's handler calls this).
            transport = answer_transport(request, depth=14)
            fetch.answer = None if transport is None else self.tcp.begin(transport, now)
            watch = self.watch
            if watch is not None and request.url.startswith(("http://", "https://")) and \
                    watch.note(fetch.answer is not None):
                logger.warning(
                    "FRONTIER_TCP_TIMING: the first %d answers of Scrapy's HTTP/1.1 handler "
                    "gave no TCP socket to read the kernel's stamps from (this Scrapy may have "
                    "moved the frame scrapy_frontier.scheduler.engine.answer_transport reads): "
                    "fetches are timed to their end in the crawler instead, which a busy "
                    "spider can lengthen. Please report it with your Scrapy version.",
                    watch.missed)

    def end(self, fetch: Fetch, now: float, failed: bool) -> FetchEnd:
        """``fetch`` ended (``failed``: with an exception), as the scheduler learnt ``now``.
        A fetch never sent never touched the network (a cache hit, an IgnoreRequest before
        the downloader): it took no time."""
        started = fetch.sent_at
        if started is None:
            return _fetch_end((0.0, None))
        answer, fetch.answer = fetch.answer, None
        span = None
        if answer is not None and self.tcp is not None:
            self.kernel_read += 1
            # A failed fetch may have kept the server busy after the last bytes that came.
            if not failed:
                span = self.tcp.end(answer, started, now)
        measured = now - started
        if measured <= 0.0:
            return _fetch_end((0.0, None if span is None else span.end))
        if span is not None:
            # The span holds the server's whole time and ends no earlier than its end.
            kernel = max(0.0, span.end - span.start)
            if kernel < measured:
                self.kernel_timed += 1
                self.kernel_seconds_cut += measured - kernel
            return _fetch_end((min(kernel, measured), span.end))
        if not self.stall_discount:
            return _fetch_end((measured, None))
        held = self.stalls.log.held(started, now, HOLD_SLACK)
        return _fetch_end((self.estimates.estimate(fetch.host, measured, held), None))

    def recent_stalls(self, since: float, now: float) -> Any:
        return self.stalls.log.recent(since, now)

    def publish_stats(self, set_value: Callable[[str, Any], None]) -> None:
        stalls, times = self.stalls.log, self.estimates
        if stalls.count:
            set_value("frontier/reactor/stalls_seen", stalls.count)
            set_value("frontier/reactor/stalled_seconds", round(stalls.total, 3))
        if self.stalls.congested:
            set_value("frontier/reactor/stalls_congested", self.stalls.congested)
        if times.stalled:
            set_value("frontier/fetch/stalled", times.stalled)
            set_value("frontier/fetch/discounted", times.discounted)
            set_value("frontier/fetch/seconds_discounted", round(times.seconds_discounted, 3))
        if self.kernel_read:
            set_value("frontier/fetch/tcp_read", self.kernel_read)
        if self.kernel_timed:
            set_value("frontier/fetch/tcp_timed", self.kernel_timed)
            set_value("frontier/fetch/tcp_seconds_cut", round(self.kernel_seconds_cut, 3))

