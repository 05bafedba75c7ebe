"""Fetch times from the kernel (Linux), which the crawler's own pauses cannot stretch.

A response that arrives while the event loop is busy waits unread in the socket; timed from
the read, its fetch measures long and its host rests ten times too long. The kernel knows
better, at both ends of a fetch:

* **When the request went out.** ``TCP_INFO`` gives the age of the connection's last data
  sent (``tcpi_last_data_sent``), in jiffies. Jiffies never run ahead of the monotonic
  clock, but they can fall behind it: on a virtual machine whose timekeeping CPU is
  descheduled they stand still for several ticks and then catch up. The coarse monotonic
  clock moves with them, so the coarse time read before ``TCP_INFO``, less the stamp's age
  and one jiffy, is a moment no later than the send.
* **When the answer's last bytes came in.** Each read of the answer's socket is a
  ``recvmsg`` with ``SO_TIMESTAMPNS`` (:class:`StampedSocket`): the kernel's nanosecond
  wall-clock time of the last bytes that read returned, taken as they arrived, not a
  jiffy. It is turned into the monotonic clock at the read, with room for the wall clock's
  largest slew, and not trusted across a step of the wall clock. Where a read has no stamp,
  its own time is the end: never before the bytes came in.

So the fetch as the network saw it lies inside the interval given, and the rest counts from
its end: polite by construction. The receive stamp of ``TCP_INFO`` is not used: it is a
jiffy, and a jiffy that stood still dates the answer too early.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

logger = logging.getLogger("scrapy_frontier.scheduler")

#: ``struct tcp_info`` up to ``tcpi_total_retrans`` (Linux >= 2.6), and where its fields are.
_INFO_SIZE = 104
_LAST_DATA_SENT = 44
_LAST_DATA_RECV = 52
_TOTAL_RETRANS = 100
_U32 = struct.Struct("=I")
_LINUX = sys.platform == "linux"
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None) if _LINUX else None
#: Linux's SO_TIMESTAMPNS; its control message has the same number and holds a timespec.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
#: Linux's CLOCK_MONOTONIC_COARSE: the monotonic clock as of the last jiffy update.
_COARSE = 6

#: NTP slews the wall clock by at most 500 ppm; a wall-clock interval is shrunk by twice that.
_SLEW = 0.001
#: A change of the wall clock's offset larger than this (plus the slew) is a step.
_STEP = 0.001

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


def coarse_monotonic() -> float:
    """The monotonic clock as of the kernel's last jiffy update."""
    return time.clock_gettime(_COARSE)


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
    steps cannot tell them apart, so exactness needs three; a tick too long only makes
    rests longer.
    """
    if len(steps) < 2:
        return None
    jiffy = min(steps)
    exact = len(steps) >= 3 and all(step % jiffy == 0 for step in steps)
    return (jiffy if exact else jiffy + 1) / 1000.0


class StampedSocket:
    """A TCP socket whose reads keep their own time and the kernel's arrival time of the
    last bytes they returned; everything else is the socket's own.

    It takes the place of a Twisted TCP transport's ``socket``, whose ``doRead`` calls
    ``recv``; ``recvmsg`` gives the same bytes, with the stamp as a control message.
    """

    __slots__ = ("sock", "read_at", "wall_at", "arrived")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        #: The monotonic and wall-clock time of the last read that returned data.
        self.read_at: float | None = None
        self.wall_at = 0.0
        #: The wall-clock time the kernel received that read's last bytes, or None.
        self.arrived: float | None = None

    def recv(self, size: int, flags: int = 0) -> bytes:
        data, ancillary, _, _ = self.sock.recvmsg(size, _ANCILLARY, flags)
        if data:
            self.read_at = time.monotonic()
            self.wall_at = time.time()
            arrived = None
            for level, kind, payload in ancillary:
                if (level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS
                        and len(payload) >= _TIMESPEC.size):
                    seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
                    arrived = seconds + nanoseconds * 1e-9
            self.arrived = arrived
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def stamp_reads(transport: Any) -> StampedSocket | None:
    """The transport's socket, made to stamp its reads (once per connection), or None
    when the transport has no TCP socket or the kernel gives no stamps."""
    sock = getattr(transport, "socket", None)
    if isinstance(sock, StampedSocket):
        return sock
    if not _LINUX or not isinstance(sock, socket.socket) or sock.type != socket.SOCK_STREAM:
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return None
    stamped = StampedSocket(sock)
    transport.socket = stamped
    return stamped


class SocketWatch:
    """Says once when Scrapy's HTTP/1.1 handler answers yield no socket to read stamps from.

    :func:`~scrapy_frontier.scheduler.engine.answer_transport` reads a frame of that handler;
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



class FetchSpan(NamedTuple):
    """A fetch as the kernel saw it: from no later than the request went out (``start``)
    to no earlier than its answer's last bytes came in (``end``), on the monotonic clock."""

    start: float
    end: float
    #: The end is the kernel's arrival time, not a read's.
    stamped: bool


class Answer:
    """What the kernel said of one fetch as its answer's headers came in."""

    __slots__ = ("sock", "sent_by")

    def __init__(self, sock: StampedSocket, sent_by: float | None) -> None:
        self.sock = sock
        #: A moment no later than the request went out, or None when not known.
        self.sent_by = sent_by


class WallClockWatch:
    """Since when the wall clock has moved with the monotonic clock, from the pairs of
    readings the stamped reads take: a change of their difference beyond the slew is a
    step (an operator, or NTP at boot), and no arrival before it is trusted."""

    __slots__ = ("steady_since", "_offset", "_at")

    def __init__(self) -> None:
        #: No reading yet: nothing is known to be steady.
        self.steady_since = float("inf")
        self._offset: float | None = None
        self._at = 0.0

    def note(self, monotonic: float, wall: float) -> float:
        """One pair of readings; the monotonic time since which the wall clock is steady."""
        offset = wall - monotonic
        if self._offset is None or abs(offset - self._offset) > _STEP + _SLEW * abs(
                monotonic - self._at):
            self.steady_since = monotonic
        self._offset, self._at = offset, monotonic
        return self.steady_since


class TcpTimes:
    """The kernel's times of fetches: :meth:`begin` as an answer's headers come in, and
    :meth:`end` when the fetch is over."""

    __slots__ = ("tick", "coarse", "wall")

    def __init__(self, tick: float, coarse: Callable[[], float] = coarse_monotonic) -> None:
        self.tick = tick
        self.coarse = coarse
        self.wall = WallClockWatch()

    def begin(self, transport: Any, now: float) -> Answer | None:
        """The answer's headers were read (at ``now``, monotonic) from ``transport``: what
        the kernel knows of the fetch, or None when its socket's reads cannot be stamped."""
        fresh = not isinstance(getattr(transport, "socket", None), StampedSocket)
        sock = stamp_reads(transport)
        if sock is None:
            return None
        if fresh:  # the headers' read was not stamped; it was no later than now
            sock.read_at, sock.wall_at, sock.arrived = now, 0.0, None
        coarse = self.coarse()  # before the stamps: jiffies no older than this
        stamps = read_stamps(sock.sock)
        sent_by = None
        # No retransmission (a resent request would date the send late), and the last
        # data sent went out before the last data came in (the request, not a later send).
        if stamps is not None and not stamps[2] and stamps[0] >= stamps[1]:
            sent_by = coarse - stamps[0] / 1000.0 - self.tick
        return Answer(sock, sent_by)

    def end(self, answer: Answer, started: float, now: float) -> FetchSpan:
        """The fetch whose answer is ``answer``, read whole by ``now`` and sent no earlier
        than ``started`` by the crawler's own clock."""
        sock = answer.sock
        read_at = sock.read_at
        end = read_at if read_at is not None and read_at <= now else now
        start = started
        if answer.sent_by is not None and started < answer.sent_by < end:
            start = answer.sent_by
        arrived = self._arrival(sock)
        if arrived is not None and start < arrived < end:
            return FetchSpan(start, arrived, True)
        return FetchSpan(start, end, False)

    def _arrival(self, sock: StampedSocket) -> float | None:
        """The last read's arrival stamp on the monotonic clock, if it can be trusted."""
        read_at, arrived = sock.read_at, sock.arrived
        if arrived is None or read_at is None:
            return None
        steady_since = self.wall.note(read_at, sock.wall_at)
        waited = sock.wall_at - arrived
        if waited < 0.0:
            return None
        # Shrunk by the largest slew: a wall clock running fast never dates it early.
        at = read_at - waited * (1.0 - _SLEW)
        return at if at >= steady_since else None
