"""Fetch times from the kernel's TCP clock (Linux), which the crawler's own pauses cannot stretch.

A response that arrives while the event loop is busy waits unread in the socket; timed from
the read, its fetch measures long and its host rests ten times too long. The kernel stamps
every TCP connection with the time it last sent data and the time it last received data
(``tcpi_last_data_sent`` / ``tcpi_last_data_recv`` of ``TCP_INFO``, in jiffies). For an
HTTP/1.x fetch the client sends its request and then nothing until the answer is complete,
so the interval between the two stamps, read while the answer is being read, is the fetch
as the network saw it.

Why it stays polite: the stamps are kernel events, so the request reached the server no
earlier than the send stamp and the server's answer was complete no later than the receive
stamp: the interval contains the server's own time. The stamps count whole jiffies
(``tick``, 1-10 ms), so one tick is added: a true interval is always shorter than the stamps'
difference plus one tick. The interval is only used when it is shorter than the crawler's
own measure (both contain the server's time), and never when the connection retransmitted
or sent more data during the answer (the send stamp moved).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("scrapy_frontier.scheduler")

#: ``struct tcp_info`` up to ``tcpi_total_retrans`` (Linux >= 2.6), and where its fields are.
_INFO_SIZE = 104
_LAST_DATA_SENT = 44
_LAST_DATA_RECV = 52
_TOTAL_RETRANS = 100
_U32 = struct.Struct("=I")
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None) if sys.platform == "linux" else None

_probed = False
_tick: float | None = None


def read_stamps(sock: socket.socket) -> tuple[int, int, int] | None:
    """(ms since data was last sent, ms since data was last received, retransmissions)."""
    if _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _INFO_SIZE)
    except OSError:  # closed, or not TCP
        return None
    if len(info) < _INFO_SIZE:
        return None
    return (_U32.unpack_from(info, _LAST_DATA_SENT)[0], _U32.unpack_from(info, _LAST_DATA_RECV)[0],
            _U32.unpack_from(info, _TOTAL_RETRANS)[0])


def kernel_tick(budget: float = 0.1) -> float | None:
    """The TCP stamps' resolution in seconds (one jiffy, rounded up to whole ms), or
    None where the kernel gives no stamps.

    Measured once per process on a loopback connection: the smallest step the
    "last received" age takes while time passes (at most ``budget`` seconds, ~10 ms
    on a 250 Hz kernel).
    """
    global _probed, _tick
    if _probed:
        return _tick
    _probed = True
    if _TCP_INFO is None:
        return None
    try:
        _tick = _measure_tick(budget)
    except OSError as exc:
        logger.debug("TCP timestamps unavailable: %s", exc)
        _tick = None
    return _tick


def _measure_tick(budget: float) -> float | None:
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = stack.enter_context(socket.create_connection(listener.getsockname(), timeout=1))
        server = stack.enter_context(listener.accept()[0])
        client.sendall(b"x")
        ages: list[int] = []
        deadline = time.monotonic() + budget
        while time.monotonic() < deadline:
            stamps = read_stamps(server)
            if stamps is None:
                return None
            if not ages or stamps[1] != ages[-1]:
                ages.append(stamps[1])
                if len(ages) >= 4:
                    break
            time.sleep(0.0002)
    return tick_from_steps([b - a for a, b in zip(ages, ages[1:], strict=False) if b > a])


def tick_from_steps(steps: list[int]) -> float | None:
    """The tick (seconds) from the steps (ms) the "last received" age was seen to take.

    A jiffy of whole ms (250 Hz: every step 4 ms, or a multiple when a poll came late)
    is exact; one that is not (300 Hz: 3.33 ms, steps of 3 and 4) is rounded up. Two
    steps cannot tell them apart (300 Hz can step 3, 3 before its 4), so exactness
    needs three; a tick too long only makes rests longer.
    """
    if len(steps) < 2:
        return None
    jiffy = min(steps)
    exact = len(steps) >= 3 and all(step % jiffy == 0 for step in steps)
    return (jiffy if exact else jiffy + 1) / 1000.0


class SocketWatch:
    """Says once when Scrapy's HTTP/1.1 handler answers yield no socket to read stamps from.

    :func:`~scrapy_frontier.scheduler.engine.answer_socket` reads a frame of that handler;
    a Scrapy release that moves it leaves TCP timing silently off. Counted only for
    answers to http(s) requests while that handler serves both schemes.
    """

    __slots__ = ("missed", "found", "_warned")

    #: Answers without a socket, and none with one, before the warning.
    LIMIT = 5

    def __init__(self) -> None:
        self.missed = 0
        self.found = 0
        self._warned = False

    def note(self, found: bool) -> bool:
        """One http(s) answer's lookup; True the one time the warning is due."""
        if found:
            self.found += 1
            return False
        self.missed += 1
        if self._warned or self.found or self.missed < self.LIMIT:
            return False
        self._warned = True
        return True


#: Scrapy's HTTP/1.1 download handler, under the names a project may give it.
HTTP11_HANDLERS = frozenset({
    "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler",
    "scrapy.core.downloader.handlers.http.HTTPDownloadHandler",
    "scrapy.core.downloader.handlers.http.HTTP11DownloadHandler",
})


def serves_http11(handlers: Any) -> bool:
    """True if Scrapy's HTTP/1.1 handler serves both http and https (DOWNLOAD_HANDLERS)."""
    from scrapy_frontier.settings import dotted_name

    return all(dotted_name(handlers.get(scheme)) in HTTP11_HANDLERS
               for scheme in ("http", "https"))


class TcpTimes:
    """The kernel's interval of each fetch whose answer is being read, by lease ticket."""

    __slots__ = ("tick", "clock", "_open")

    def __init__(self, tick: float, clock: Callable[[], float]) -> None:
        self.tick = tick
        #: Read after the stamps, so that an age is never taken from too early a moment.
        self.clock = clock
        #: ticket -> [socket, send stamp (ms, on the caller's clock), interval ms or -1,
        #: latest moment the last bytes can have come in (s, on the caller's clock)]
        self._open: dict[int, list[Any]] = {}

    def begin(self, ticket: int, sock: socket.socket) -> None:
        """The answer's headers were read from ``sock``."""
        stamps = read_stamps(sock)
        if stamps is None or stamps[2]:
            return
        now = self.clock()
        sent, received, _ = stamps
        if sent >= received:  # else the request went out after the answer: not this fetch
            self._open[ticket] = [sock, now * 1000.0 - sent, sent - received,
                                  now - received / 1000.0 + self.tick]

    def update(self, ticket: int) -> None:
        """More of the answer was read: the receive stamp moves on, the send stamp must not."""
        entry = self._open.get(ticket)
        if entry is None or entry[2] < 0:
            return
        stamps = read_stamps(entry[0])
        now = self.clock()
        if (stamps is None or stamps[2] or stamps[0] < stamps[1]
                or abs(now * 1000.0 - stamps[0] - entry[1]) > 2000.0 * self.tick):
            entry[2] = -1  # closed, retransmitted, or sent data mid-answer: not trusted
            return
        entry[2] = stamps[0] - stamps[1]
        entry[3] = now - stamps[1] / 1000.0 + self.tick

    def end(self, ticket: int) -> tuple[float, float] | None:
        """(the fetch's interval, plus one tick; the latest moment its last bytes can have
        come in, on the caller's clock), or None when not known."""
        entry = self._open.pop(ticket, None)
        if entry is None or entry[2] < 0:
            return None
        return entry[2] / 1000.0 + self.tick, entry[3]

    def forget(self, ticket: int) -> None:
        self._open.pop(ticket, None)

    def clear(self) -> None:
        self._open.clear()

    def __len__(self) -> int:
        return len(self._open)
