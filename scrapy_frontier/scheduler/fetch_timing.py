"""How long each fetch took as the server saw it, and when its answer ended.

One component owns the fetch's timing from its send to its end: the kernel's times
(``scheduler.tcp_timing``), the rule that turns them into a fetch time
(``core.fetch_time.fetch_seconds``), the opt-in record of the loop's own stalls
(``reactor.stalls``), and the stats of these. The scheduler asks it one question per
fetch, :meth:`FetchTiming.measure`, and gets one answer, a :class:`FetchTime`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, NamedTuple

from scrapy_frontier.core.fetch_time import fetch_seconds
from scrapy_frontier.reactor.stalls import StallMeter
from scrapy_frontier.scheduler.engine import answer_transport
from scrapy_frontier.scheduler.inflight import Fetch
from scrapy_frontier.scheduler.tcp_timing import (
    SocketWatch,
    TcpTimes,
    serves_http11,
    stamp_on_connect,
    stamps_supported,
)

logger = logging.getLogger("scrapy_frontier.scheduler")
politeness_log = logging.getLogger("scrapy_frontier.politeness")


class FetchTime(NamedTuple):
    """A fetch's time to rest by (seconds), and when its answer ended on the scheduler's
    clock (None: when the scheduler learnt of it, which is later)."""

    duration: float
    ended_at: float | None


#: Builds a FetchTime from its two fields without the Python frame of the NamedTuple's
#: constructor (one per fetch).
_fetch_time: Callable[[tuple[float, float | None]], FetchTime] = partial(tuple.__new__, FetchTime)


class FetchTiming:
    """The fetch times the hosts rest by, from the kernel, the reads and the reports."""

    def __init__(self, *, clock: Callable[[], float], tcp_timing: bool,
                 watch_stalls: bool) -> None:
        self.clock = clock
        #: Record the loop's stalls (FRONTIER_STALL_DISCOUNT): for the stats and the
        #: politeness DEBUG log; no fetch time is made shorter by them (core.fetch_time).
        self.watch_stalls = watch_stalls
        self.want_tcp = tcp_timing
        #: No timing middleware: Scrapy's signals report the fetches (less precisely).
        self.signals_only = False
        #: Whether each fetch's rest is logged (``scrapy_frontier.politeness`` at DEBUG when
        #: the crawl opened): tested once per fetch, so not asked of logging each time.
        self.log_each = False
        # The loop's own stalls, seen by a late timer.
        self.stalls = StallMeter(clock)
        # Where the kernel keeps them, the times the network saw.
        self.tcp: TcpTimes | None = None
        self.watch: SocketWatch | None = None
        self.kernel_read = 0
        self.kernel_timed = 0
        self.kernel_seconds_cut = 0.0

    def open(self, handlers: Any, set_value: Callable[[str, Any], None],
             pools: Iterable[Any] = ()) -> None:
        """Start timing; ``handlers`` is the crawl's DOWNLOAD_HANDLERS, ``pools`` the
        connection pools of its http and https handlers (their connections are stamped as
        they connect, so that a connection's first fetch is the kernel's too). The stat
        ``frontier/fetch/timed_by`` says what times the fetches, and why."""
        self.log_each = politeness_log.isEnabledFor(logging.DEBUG)
        if self.watch_stalls:
            logger.warning(
                "FRONTIER_STALL_DISCOUNT no longer shortens fetch times: a stall of the "
                "crawler's loop says when an answer could not be read, not when it came in, "
                "and a slow server's answer sent during a stall was timed shorter than the "
                "server's own time. Only the time after an answer's last bytes came in is "
                "left out, as FRONTIER_TCP_TIMING does from the kernel's stamps. The setting "
                "now only records the loop's stalls (the frontier/reactor/* stats).")
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
            if not any([stamp_on_connect(pool) for pool in pools]):
                logger.debug("FRONTIER_TCP_TIMING: no connection pool of the HTTP/1.1 "
                             "handler found; each connection's first fetch is timed by the "
                             "crawler's own times")
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

    def headers(self, fetch: Fetch, body_length: Any = None) -> None:
        """The answer to the request of ``fetch`` sent its headers (``body_length``: as
        Scrapy's headers_received gives it; 0 for an answer without a body, such as a 304,
        which Scrapy's handler reads without the frame that holds the socket)."""
        now = self.clock()
        request = fetch.request
        if self.tcp is not None:
            # One frame deeper than a signal receiver (the scheduler's handler calls this).
            transport = answer_transport(request, depth=14)
            fetch.answer = None if transport is None else self.tcp.begin(transport, now)
            watch = self.watch
            if watch is not None and body_length != 0 and \
                    request.url.startswith(("http://", "https://")) and \
                    watch.note(fetch.answer is not None):
                logger.warning(
                    "FRONTIER_TCP_TIMING: the first %d answers of Scrapy's HTTP/1.1 handler "
                    "gave no TCP socket to read the kernel's stamps from (this Scrapy may have "
                    "moved the frame scrapy_frontier.scheduler.engine.answer_transport reads): "
                    "fetches are timed to their end in the crawler instead, which a busy "
                    "spider can lengthen. Please report it with your Scrapy version.",
                    watch.missed)

    def measure(self, fetch: Fetch, now: float, failed: bool) -> FetchTime:
        """``fetch`` ended (``failed``: with an exception), as the scheduler learnt ``now``.
        A fetch never sent never touched the network (a cache hit, an IgnoreRequest before
        the downloader): it took no time."""
        started = fetch.sent_at
        if started is None:
            return _fetch_time((0.0, None))
        answer, fetch.answer = fetch.answer, None
        if answer is not None and self.tcp is not None:
            self.kernel_read += 1
            # A failed fetch may have kept the server busy after the last bytes that came.
            if not failed:
                # From no later than the request went out to no earlier than the answer's
                # last bytes came in: the server's whole time, and the rest counts from its end.
                span = self.tcp.end(answer, started, now)
                seconds = fetch_seconds(span.start, now, span.end)
                if seconds < now - started:
                    self.kernel_timed += 1
                    self.kernel_seconds_cut += now - started - seconds
                return _fetch_time((seconds, span.end))
        # Nothing says when the answer came in: a stall that held its read (if any) may
        # have been the server still sending, so the fetch runs to its report.
        return _fetch_time((fetch_seconds(started, now), None))

    def recent_stalls(self, since: float, now: float) -> Any:
        return self.stalls.log.recent(since, now)

    def publish_stats(self, set_value: Callable[[str, Any], None]) -> None:
        stalls = self.stalls.log
        if stalls.count:
            set_value("frontier/reactor/stalls_seen", stalls.count)
            set_value("frontier/reactor/stalled_seconds", round(stalls.total, 3))
        if self.stalls.congested:
            set_value("frontier/reactor/stalls_congested", self.stalls.congested)
        if self.kernel_read:
            set_value("frontier/fetch/tcp_read", self.kernel_read)
        if self.kernel_timed:
            set_value("frontier/fetch/tcp_timed", self.kernel_timed)
            set_value("frontier/fetch/tcp_seconds_cut", round(self.kernel_seconds_cut, 3))

