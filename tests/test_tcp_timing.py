"""Fetch times from the kernel's TCP stamps: real loopback sockets, and the scheduler's use."""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from scrapy import Request
from scrapy.exceptions import IgnoreRequest

from scrapy_frontier.meta import LEASE_META
from scrapy_frontier.scheduler.engine import answer_transport
from scrapy_frontier.scheduler.tcp_timing import (
    StampedSocket,
    TcpTimes,
    kernel_tick,
    read_stamps,
    stamp_reads,
    tick_from_steps,
)
from tests.test_fetch_time import _rest_after
from tests.test_scheduler import make_scheduler

linux = pytest.mark.skipif(sys.platform != "linux", reason="TCP_INFO stamps are Linux's")


@pytest.fixture
def times() -> TcpTimes:
    tick = kernel_tick()
    assert tick is not None
    return TcpTimes(tick)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected loopback TCP pair: (client, server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname(), timeout=5)
        server, _ = listener.accept()
    with client, server:
        yield client, server


@linux
@pytest.mark.parametrize(("steps", "tick_ms"), [
    ([4, 4, 4], 4),     # 250 Hz
    ([4, 8, 4], 4),     # 250 Hz, one poll late
    ([3, 4, 3], 4),     # 300 Hz (3.33 ms): rounded up
    ([3, 3], 4),        # 300 Hz seen for two steps only: not known to be exact
    ([1, 1, 1, 1], 1),  # 1000 Hz
    ([10, 10, 20], 10),  # 100 Hz
])
def test_the_tick_is_never_shorter_than_the_jiffy(steps: list[int], tick_ms: int) -> None:
    assert tick_from_steps(steps) == pytest.approx(tick_ms / 1000.0)


def test_one_step_tells_no_tick() -> None:
    assert tick_from_steps([4]) is None


def test_the_kernel_tick_is_one_jiffy_of_a_real_kernel() -> None:
    tick = kernel_tick()
    assert tick is not None
    assert 0.001 <= tick <= 0.010  # 1000 Hz to 100 Hz
    assert kernel_tick() == tick  # measured once per process


class Transport:
    """What the timing reads of a Twisted TCP transport: its ``socket``."""

    def __init__(self, sock: Any) -> None:
        self.socket: Any = sock


def _answer(client: socket.socket, server: socket.socket, work: float, unread: float,
            ) -> tuple[float, float, float, float]:
    """A request from ``client``, which ``server`` answers after ``work`` s; the answer
    then waits ``unread`` s before the crawler reads it. Returns (sent before, the
    server's start, the server's end, answer sent after), on the monotonic clock."""
    sent_before = time.monotonic()
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    server.recv(100)
    server_start = time.monotonic()
    time.sleep(work)
    server_end = time.monotonic()
    server.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody")
    sent_after = time.monotonic()
    time.sleep(unread)
    return sent_before, server_start, server_end, sent_after


@linux
def test_the_span_holds_the_servers_time_and_not_the_unread_wait(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    client, server = pair
    transport = Transport(client)
    assert stamp_reads(transport) is transport.socket  # a connection stamped before
    times.wall.note(time.monotonic(), time.time())  # the wall clock was seen before
    sent_before, server_start, server_end, sent_after = _answer(client, server, 0.03, 0.15)
    assert transport.socket.recv(100).endswith(b"body")
    read = time.monotonic()
    answer = times.begin(transport, read)
    assert answer is not None
    span = times.end(answer, sent_before, time.monotonic())
    assert span.stamped
    # Polite: the span holds the server's whole time, so the rest (which counts from its
    # end) is never too short, and never starts before the server's answer was out.
    assert span.start <= server_start and span.end >= server_end
    assert span.start >= sent_before
    # True: the kernel stamped the answer before the server's sendall returned; the
    # 150 ms it waited unread are not in the span (a read-time measure has all of them).
    assert span.end <= sent_after + 0.001
    assert read - span.end >= 0.149


@linux
def test_jiffies_that_stood_still_never_shorten_the_span(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cause of short rests on loaded virtual machines: jiffies that stand still for
    a few ticks (the timekeeping CPU descheduled) stamp the answer's arrival too early,
    and "receive stamp less send stamp, plus one tick" comes out shorter than the
    server's own time. Here the kernel's stamps are made to lag by three ticks as the
    answer arrives; the span must still hold the server's time."""
    from scrapy_frontier.scheduler import tcp_timing

    real = tcp_timing.read_stamps
    lag = round(3 * times.tick * 1000)

    def lagging(sock: socket.socket) -> tuple[int, int, int] | None:
        stamps = real(sock)
        if stamps is None:
            return None
        sent, received, retrans = stamps
        return sent, received + lag, retrans  # the arrival stamped 3 ticks early

    monkeypatch.setattr(tcp_timing, "read_stamps", lagging)
    client, server = pair
    transport = Transport(client)
    stamp_reads(transport)
    times.wall.note(time.monotonic(), time.time())
    sent_before, server_start, server_end, _ = _answer(client, server, 4 * times.tick, 0.0)
    transport.socket.recv(100)
    now = time.monotonic()
    answer = times.begin(transport, now)
    assert answer is not None
    span = times.end(answer, sent_before, now)
    assert span is not None
    assert span.end - span.start >= server_end - server_start
    assert span.end >= server_end


@linux
def test_jiffies_behind_when_read_never_date_the_send_late(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jiffies that stand still as TCP_INFO is read make the send look recent; the
    coarse clock stands still with them, so the send is still dated no later than it was."""
    from scrapy_frontier.scheduler import tcp_timing

    tick = kernel_tick()
    assert tick is not None
    real = tcp_timing.read_stamps
    lag = round(3 * tick * 1000)

    def lagging(sock: socket.socket) -> tuple[int, int, int] | None:
        stamps = real(sock)
        assert stamps is not None
        return max(0, stamps[0] - lag), max(0, stamps[1] - lag), stamps[2]

    monkeypatch.setattr(tcp_timing, "read_stamps", lagging)
    times = TcpTimes(tick, coarse=lambda: tcp_timing.coarse_monotonic() - 3 * tick)
    client, server = pair
    transport = Transport(client)
    stamp_reads(transport)
    sent_before, server_start, server_end, _ = _answer(client, server, 0.02, 0.0)
    transport.socket.recv(100)
    now = time.monotonic()
    answer = times.begin(transport, now)
    assert answer is not None
    span = times.end(answer, sent_before - 1.0, now)  # the crawler's own start: far too early
    assert sent_before - 1.0 < span.start <= server_start


@linux
def test_a_step_of_the_wall_clock_leaves_the_arrival_untrusted(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    client, server = pair
    transport = Transport(client)
    stamped = stamp_reads(transport)
    assert stamped is not None
    times.wall.note(time.monotonic(), time.time())
    sent_before, _, server_end, _ = _answer(client, server, 0.01, 0.05)
    stamped.recv(100)
    # The wall clock stepped 10 s ahead between the answer's arrival and its read.
    stamped.wall_at += 10.0
    assert stamped.read_at is not None
    answer = times.begin(transport, stamped.read_at)
    assert answer is not None
    span = times.end(answer, sent_before, time.monotonic())
    assert not span.stamped
    assert span.end == stamped.read_at  # the read's own time: never before the arrival


@linux
def test_the_first_answer_on_a_connection_ends_at_its_read(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    client, server = pair
    transport = Transport(client)
    sent_before, _, server_end, _ = _answer(client, server, 0.01, 0.0)
    client.recv(100)  # read before the socket was stamped
    read = time.monotonic()
    answer = times.begin(transport, read)
    assert answer is not None
    assert isinstance(transport.socket, StampedSocket)
    span = times.end(answer, sent_before, time.monotonic())
    assert not span.stamped
    assert span.end == read >= server_end
    # The next answer on the same connection is stamped.
    times.wall.note(time.monotonic(), time.time())
    sent_before, _, server_end, sent_after = _answer(client, server, 0.01, 0.05)
    transport.socket.recv(100)
    answer = times.begin(transport, time.monotonic())
    assert answer is not None
    span = times.end(answer, sent_before, time.monotonic())
    assert span.stamped
    assert server_end <= span.end <= sent_after + 0.001


@linux
def test_a_closed_connection_gives_no_stamps(pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    client.close()
    assert read_stamps(client) is None
    assert stamp_reads(Transport(client)) is None


def test_no_socket_is_found_outside_scrapys_http11_handler() -> None:
    assert answer_transport(Request("http://a.example/")) is None


class FakeTcpSocket:
    """Only what read_stamps reads: TCP_INFO with given ages (ms)."""

    type = socket.SOCK_STREAM

    def __init__(self, sent_ms: int, received_ms: int, retrans: int = 0) -> None:
        self.info = bytearray(104)
        struct.pack_into("=I", self.info, 44, sent_ms)
        struct.pack_into("=I", self.info, 52, received_ms)
        struct.pack_into("=I", self.info, 100, retrans)

    def getsockopt(self, *args: Any) -> bytes:
        return bytes(self.info)


def _fetch_with_kernel(settings: dict[str, Any], sent_ms: int | None, arrived_ago: float | None,
                       retrans: int = 0, exception: BaseException | None = None,
                       ) -> tuple[float, Any]:
    """One fetch of 300 ms by the crawler's clock, read whole as it ended, whose request
    the kernel sent ``sent_ms`` before that and whose answer it received ``arrived_ago`` s
    before (None: no stamp); then the seconds until the host's next request."""
    sched, clock, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10, **settings})
    if sched.config.tcp_timing:
        sched.timing.tcp = TcpTimes(0.005, coarse=clock)  # as Linux at 200 Hz, whatever this kernel
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    sched.fetch_sent(req)
    clock.advance(0.3)
    if sent_ms is not None and sched.timing.tcp is not None:
        sock = StampedSocket(FakeTcpSocket(sent_ms, 0, retrans))  # type: ignore[arg-type]
        sock.read_at, sock.wall_at = clock(), 1000.0 + clock()
        sock.arrived = None if arrived_ago is None else sock.wall_at - arrived_ago
        sched.timing.tcp.wall.note(clock() - 1.0, 999.0 + clock())  # the wall clock was steady
        fetch = sched.inflight.get(req.meta[LEASE_META])
        assert fetch is not None
        fetch.answer = sched.timing.tcp.begin(Transport(sock), clock())
    sched.fetch_finished(req, exception=exception)
    waited = _rest_after(sched, clock, req)
    sched.publish_stats()
    return waited, sched.stats


def test_the_scheduler_rests_by_the_kernels_span_from_the_kernels_arrival() -> None:
    # Sent no later than 290 + 5 ms (a tick) before the release, last bytes in 200 ms
    # before it: a fetch of 95 ms (not the 300 ms of the crawler's clock), whose 950 ms
    # rest counts from the arrival (200 ms before the release): 750 ms more.
    waited, stats = _fetch_with_kernel({}, 290, 0.2)
    assert waited == pytest.approx(0.75, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") == 1
    assert stats.get_value("frontier/fetch/tcp_seconds_cut") == pytest.approx(0.205, abs=0.002)


def test_an_unstamped_read_ends_the_fetch_at_the_read() -> None:
    # The send is known (5 ms after the crawler's start), the arrival is not: the fetch
    # ends at the read (here as it was reported), 295 ms, and rests 2.95 s from then.
    waited, stats = _fetch_with_kernel({}, 290, None)
    assert waited == pytest.approx(2.95, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") == 1


@pytest.mark.parametrize("case", ["retransmitted", "failed fetch", "turned off"])
def test_the_scheduler_keeps_its_own_measure_when_the_kernels_is_not_trusted(case: str) -> None:
    settings: dict[str, Any] = {"FRONTIER_TCP_TIMING": case != "turned off"}
    # (IgnoreRequest: an exception that asks for no back-off of its own.)
    exception = IgnoreRequest("dropped") if case == "failed fetch" else None
    waited, stats = _fetch_with_kernel(settings, 290, None if case == "retransmitted" else 0.2,
                                       retrans=1 if case == "retransmitted" else 0,
                                       exception=exception)
    assert waited == pytest.approx(3.0, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") is None


def test_a_send_before_the_crawlers_start_changes_nothing() -> None:
    # The kernel's send stamp is older than the crawler's own start (another request's),
    # and the answer came in as it was read: the crawler's measure stands.
    waited, stats = _fetch_with_kernel({}, 900, 0.0)
    assert waited == pytest.approx(3.0, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") is None


@pytest_twisted.inlineCallbacks
def test_the_socket_is_found_under_scrapys_real_http11_handler() -> Any:
    """Scrapy's HTTP/1.1 download handler fetches from a loopback server; a
    headers_received handler (as the scheduler's) finds the answer's TCP socket. A Scrapy
    release that moves the frame the lookup reads fails here, without a crawl."""
    from scrapy import signals
    from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
    from scrapy.utils.test import get_crawler
    from twisted.internet import reactor
    from twisted.web.resource import Resource
    from twisted.web.server import Site

    class Page(Resource):
        isLeaf = True

        def render_GET(self, request: Any) -> bytes:  # noqa: N802 - Twisted's name
            return b"<html>answer</html>"

    port = reactor.listenTCP(0, Site(Page()), interface="127.0.0.1")  # type: ignore[attr-defined]
    crawler = get_crawler(settings_dict={"TELNETCONSOLE_ENABLED": False})
    found: list[Any] = []

    def headers_received(headers: Any, body_length: Any, request: Any, spider: Any) -> None:
        transport = answer_transport(request)
        found.append(getattr(transport, "socket", None))  # Twisted drops it once closed

    crawler.signals.connect(headers_received, signal=signals.headers_received)
    handler = HTTP11DownloadHandler.from_crawler(crawler)
    request = Request(f"http://127.0.0.1:{port.getHost().port}/page")
    import inspect

    spider_arg = len(inspect.signature(handler.download_request).parameters) > 1  # < 2.14
    try:
        download = (handler.download_request(request, None) if spider_arg
                    else handler.download_request(request))
        response = yield download
    finally:
        yield handler.close()
        yield port.stopListening()
    assert response.status == 200 and response.body == b"<html>answer</html>"
    assert len(found) == 1
    assert isinstance(found[0], socket.socket) and found[0].type == socket.SOCK_STREAM


def test_the_socket_watch_warns_once_when_no_answer_gives_a_socket() -> None:
    from scrapy_frontier.scheduler.tcp_timing import SocketWatch

    watch = SocketWatch()
    assert [watch.note(False) for _ in range(SocketWatch.LIMIT + 3)] == (
        [False] * (SocketWatch.LIMIT - 1) + [True] + [False] * 3)
    found = SocketWatch()
    found.note(True)
    assert not any(found.note(False) for _ in range(20))  # one socket found: the frame is there


def test_the_watch_applies_only_where_scrapys_http11_handler_serves_http() -> None:
    from scrapy.settings import Settings

    from scrapy_frontier.scheduler.tcp_timing import serves_http11

    assert serves_http11(Settings().getwithbase("DOWNLOAD_HANDLERS"))
    other = Settings({"DOWNLOAD_HANDLERS": {"https": "scrapy_zyte_api.Handler"}})
    assert not serves_http11(other.getwithbase("DOWNLOAD_HANDLERS"))
