"""Fetch times from the kernel and the socket (Linux), which the crawler's own pauses
cannot stretch.

A response that arrives while the event loop is busy waits unread in the socket; timed from
the read, its fetch measures long and its host rests ten times too long. A connection's socket
is wrapped (:class:`StampedSocket`) as the connection is made, where the connection pool of
Scrapy's HTTP/1.1 handler is reachable (:func:`stamp_on_connect`), else once its first answer
has come, so that for every fetch on it (every later one, in the second case):

* **the send** is when the request's first bytes were handed to the kernel: the socket's
  ``send`` notes the monotonic time before it sends, so the server cannot have had the
  request earlier;
* **the arrival** is when the kernel received the answer's last bytes: each read is a
  ``recvmsg`` with ``SO_TIMESTAMPNS``, whose control message is the kernel's nanosecond
  wall-clock receive time of the last bytes it returned, taken as they arrived. It is turned
  into the monotonic clock with the two clocks read at the read (the wall clock first, so
  that a pause in between only dates it later), and not trusted across a step of the wall
  clock since the timing began. A read without a stamp ends the fetch at the
  read's own time: never before the bytes came in.

So the fetch as the server saw it lies inside the span given, and the rest counts from its
end: polite by construction. The stamps of ``TCP_INFO`` (``tcpi_last_data_sent`` /
``tcpi_last_data_recv``) are not used: they count jiffies, and jiffies that stand still for a
few ticks on a loaded virtual machine (its timekeeping CPU descheduled) date an arrival too
early, by more than the one tick that would cover their resolution.
"""

from __future__ import annotations

import logging
import socket
import struct
import sys
import time
from functools import partial
from typing import Any, NamedTuple

logger = logging.getLogger("scrapy_frontier.scheduler")

#: Linux's SO_TIMESTAMPNS; its control message has the same number and holds a timespec.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0

#: A change of the wall clock's offset from the monotonic clock larger than this is a step.
#: (NTP's slewing moves both clocks alike; only a step, such as clock_settime, moves one.)
_STEP = 0.001

_LINUX = sys.platform == "linux"
_probed = False
_supported = False


def stamps_supported() -> bool:
    """Whether this system stamps a TCP socket's reads (Linux's SO_TIMESTAMPNS); probed
    once per process."""
    global _probed, _supported
    if not _probed:
        _probed = True
        if _LINUX and _ANCILLARY:
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                _supported = True
            except OSError as exc:
                logger.debug("Receive timestamps unavailable: %s", exc)
    return _supported


class StampedSocket:
    """A TCP socket whose reads keep their own time and the kernel's arrival time of the
    last bytes they returned, and whose sends keep when a request began to go out;
    everything else is the socket's own.

    It takes the place of a Twisted TCP transport's ``socket``, whose ``doRead`` calls
    ``recv`` (``recvmsg`` gives the same bytes, with the stamp as a control message) and
    whose ``writeSomeData`` calls ``send``.
    """

    __slots__ = ("sock", "read_at", "wall_at", "arrived", "request_sent", "_sending")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        #: When the request the latest answer answers began to go out (monotonic), or
        #: None when it went out before the socket was wrapped.
        self.request_sent: float | None = None
        #: When the sends since the last read began: a request going out.
        self._sending: float | None = None
        #: The monotonic and wall-clock time of the last read that returned data.
        self.read_at: float | None = None
        self.wall_at = 0.0
        #: The wall-clock time the kernel received that read's last bytes, or None.
        self.arrived: float | None = None

    def recv(self, size: int, flags: int = 0) -> bytes:
        data, ancillary, _, _ = self.sock.recvmsg(size, _ANCILLARY, flags)
        if data:
            # The wall clock first: a pause between the two readings (a busy machine) then
            # only dates the arrival later, never earlier.
            self.wall_at = time.time()
            self.read_at = time.monotonic()
            if self._sending is not None:  # the first bytes of an answer to what was sent
                self.request_sent, self._sending = self._sending, None
            arrived = None
            for level, kind, payload in ancillary:
                if (level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS
                        and len(payload) >= _TIMESPEC.size):
                    seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
                    arrived = seconds + nanoseconds * 1e-9
            self.arrived = arrived
        return data

    def send(self, data: Any, flags: int = 0) -> int:
        if self._sending is None:
            self._sending = time.monotonic()  # before the bytes go: none left earlier
        return self.sock.send(data, flags)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def tcp_transport(transport: Any) -> Any:
    """The TCP transport under ``transport`` (itself, or the one a TLS protocol wraps):
    the one whose ``socket`` is a stream socket; None if there is none."""
    for _ in range(3):
        sock = getattr(transport, "socket", None)
        if sock is not None and getattr(sock, "type", None) == socket.SOCK_STREAM:
            return transport
        transport = getattr(transport, "transport", None)
    return None


def stamp_reads(transport: Any) -> StampedSocket | None:
    """The transport's socket, made to stamp its reads (once per connection), or None
    when the transport has no TCP socket or the kernel gives no stamps."""
    sock = getattr(transport, "socket", None)
    if isinstance(sock, StampedSocket):
        return sock
    if not stamps_supported() or not isinstance(sock, socket.socket) \
            or sock.type != socket.SOCK_STREAM:
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return None
    stamped = StampedSocket(sock)
    transport.socket = stamped
    return stamped


def stamp_on_connect(pool: Any) -> bool:
    """Make the connections ``pool`` opens from now on stamp their socket as they are made,
    before their first request goes out and their first answer comes in: a connection's
    first fetch is then timed by the kernel as every later one (a stall of the crawler's
    loop that holds its read no longer lengthens it). ``pool`` is Twisted's
    ``HTTPConnectionPool`` as Scrapy's HTTP/1.1 handler keeps it, whose ``_factory`` (set
    by Scrapy itself) builds each connection's protocol. False when ``pool`` has no such
    factory: its connections are then stamped at their first answer."""
    factory = getattr(pool, "_factory", None)
    if not isinstance(factory, type) or not callable(getattr(factory, "buildProtocol", None)):
        return False
    if not issubclass(factory, _StampsOnConnect):
        pool._factory = type(factory.__name__, (_StampsOnConnect, factory), {})
    return True


class _StampsOnConnect:
    """Mixed into a connection pool's protocol factory: each protocol it builds stamps
    its connection's socket when the connection is made."""

    def buildProtocol(self, addr: Any) -> Any:  # noqa: N802 - Twisted's name
        protocol = super().buildProtocol(addr)  # type: ignore[misc]
        if protocol is not None:
            protocol.makeConnection = partial(_make_stamped_connection, protocol)
        return protocol


def _make_stamped_connection(protocol: Any, transport: Any) -> None:
    """``protocol.makeConnection(transport)``, its socket stamped first (once: the
    protocol's own method is back for any later call)."""
    del protocol.makeConnection
    stamp_reads(tcp_transport(transport))
    protocol.makeConnection(transport)


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
        #: When the request began to go out, or None when not known.
        self.sent_by = sent_by


def clock_readings() -> tuple[float, float]:
    """(monotonic, wall-clock) time now, the wall clock read first, as a read reads them."""
    wall = time.time()
    return time.monotonic(), wall


class WallClockWatch:
    """Since when the wall clock has moved with the monotonic clock, from the pairs of
    readings the stamped reads take (and the timing's first, as it begins): a change of
    their difference by more than 1 ms is a step (an operator, NTP at boot, a resume from
    suspend), and no arrival before it is trusted."""

    __slots__ = ("steady_since", "_offset")

    def __init__(self) -> None:
        #: No reading yet: nothing is known to be steady.
        self.steady_since = float("inf")
        self._offset: float | None = None

    def note(self, monotonic: float, wall: float) -> float:
        """One pair of readings; the monotonic time since which the wall clock is steady."""
        offset = wall - monotonic
        if self._offset is None or abs(offset - self._offset) > _STEP:
            self.steady_since = monotonic
        self._offset = offset
        return self.steady_since


class TcpTimes:
    """The kernel's times of fetches: :meth:`begin` as an answer's headers come in, and
    :meth:`end` when the fetch is over."""

    __slots__ = ("wall",)

    def __init__(self) -> None:
        self.wall = WallClockWatch()
        # A first pair of readings as the timing begins: an arrival since then is trusted
        # while the wall clock keeps with the monotonic clock, the first stamped read's too
        # (else the arrivals a stall held before that read would not be).
        self.wall.note(*clock_readings())

    def begin(self, transport: Any, now: float) -> Answer | None:
        """The answer's headers were read (at ``now``, monotonic) from ``transport``: what
        is known of the fetch, or None when its socket's reads cannot be stamped."""
        fresh = not isinstance(getattr(transport, "socket", None), StampedSocket)
        sock = stamp_reads(transport)
        if sock is None:
            return None
        if fresh:  # the request and the headers' read went by unstamped: ends no later than now
            sock.read_at, sock.wall_at, sock.arrived = now, 0.0, None
            return Answer(sock, None)
        return Answer(sock, sock.request_sent)

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
        at = read_at - waited
        return at if at >= steady_since else None
