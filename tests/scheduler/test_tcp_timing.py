"""Fetch times from the kernel and the socket: real loopback sockets, and the scheduler's use."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_twisted
from scrapy import Request
from scrapy.exceptions import IgnoreRequest

from scrapy_frontier.core.clock import FakeClock
from scrapy_frontier.meta import LEASE_META
from scrapy_frontier.scheduler import tcp_timing
from scrapy_frontier.scheduler.engine import EngineAdapter, answer_transport
from scrapy_frontier.scheduler.tcp_timing import (
    StampedSocket,
    TcpTimes,
    stamp_on_connect,
    stamp_reads,
    stamps_supported,
)
from tests.scheduler.test_fetch_time import _rest_after
from tests.scheduler.test_scheduler import make_scheduler

linux = pytest.mark.skipif(sys.platform != "linux",
                           reason="receive stamps (SO_TIMESTAMPNS) are Linux's")


@pytest.fixture
def times() -> TcpTimes:
    assert stamps_supported()
    return TcpTimes()


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


class Transport:
    """What the timing reads of a Twisted TCP transport: its ``socket``."""

    def __init__(self, sock: Any) -> None:
        self.socket: Any = sock


def _answer(transport: Transport, server: socket.socket, work: float, unread: float,
            ) -> tuple[float, float, float, float]:
    """A request sent through ``transport``, which ``server`` answers after ``work`` s;
    the answer then waits ``unread`` s before the crawler reads it. Returns (sent before,
    the server's start, the server's end, answer sent after), on the monotonic clock."""
    sent_before = time.monotonic()
    transport.socket.send(b"GET / HTTP/1.1\r\n\r\n")
    server.recv(100)
    server_start = time.monotonic()
    time.sleep(work)
    server_end = time.monotonic()
    server.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody")
    sent_after = time.monotonic()
    time.sleep(unread)
    return sent_before, server_start, server_end, sent_after


def _stamped(client: socket.socket, times: TcpTimes) -> Transport:
    """A transport whose socket was stamped at an earlier answer, the wall clock seen."""
    transport = Transport(client)
    assert stamp_reads(transport) is transport.socket
    times.wall.note(time.monotonic(), time.time())
    return transport


@linux
def test_the_span_holds_the_servers_time_and_not_the_unread_wait(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    client, server = pair
    transport = _stamped(client, times)
    sent_before, server_start, server_end, sent_after = _answer(transport, server, 0.03, 0.15)
    assert transport.socket.recv(100).endswith(b"body")
    read = time.monotonic()
    answer = times.begin(transport, read)
    assert answer is not None
    span = times.end(answer, sent_before - 1.0, time.monotonic())
    assert span.stamped
    # Polite: the span holds the server's whole time, so the rest (which counts from its
    # end) is never too short, and never starts before the server's answer was out.
    assert sent_before <= span.start <= server_start and span.end >= server_end
    # True: the kernel stamped the answer before the server's sendall returned; the
    # 150 ms it waited unread are not in the span (a read-time measure has all of them).
    assert span.end <= sent_after + 0.001
    assert read - span.end >= 0.149


@linux
def test_a_pause_between_the_clock_readings_never_dates_the_arrival_early(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read takes the wall clock and the monotonic clock one after the other; on a busy
    machine the process can be paused in between. The arrival (a wall-clock stamp) is
    turned into the monotonic clock with those two readings, so the pause must only ever
    make it later. Here every wall-clock reading comes after a pause of 0.9 ms (below what
    counts as a step of the wall clock)."""
    from types import SimpleNamespace

    def paused_wall_clock() -> float:
        until = time.perf_counter() + 0.0009
        while time.perf_counter() < until:
            pass
        return time.time()

    client, server = pair
    transport = _stamped(client, times)
    sent_before, server_start, server_end, _ = _answer(transport, server, 0.01, 0.02)
    monkeypatch.setattr(tcp_timing, "time", SimpleNamespace(time=paused_wall_clock,
                                                            monotonic=time.monotonic))
    times.wall.note(time.monotonic(), time.time())
    assert transport.socket.recv(100).endswith(b"body")
    answer = times.begin(transport, time.monotonic())
    assert answer is not None
    span = times.end(answer, sent_before - 1.0, time.monotonic())
    assert span.stamped
    assert span.end >= server_end
    assert span.end - span.start >= server_end - server_start


@linux
def test_the_send_is_when_the_requests_first_bytes_went(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    """A request sent in two parts (a body that follows its headers): the server may start
    on the first part, so the span starts no later than that one went."""
    client, server = pair
    transport = _stamped(client, times)
    before = time.monotonic()
    transport.socket.send(b"POST / HTTP/1.1\r\ncontent-length: 4\r\n\r\n")
    first_sent = time.monotonic()
    time.sleep(0.02)
    transport.socket.send(b"body")
    server.recv(100)
    server.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    transport.socket.recv(100)
    now = time.monotonic()
    answer = times.begin(transport, now)
    assert answer is not None
    span = times.end(answer, before - 1.0, now)
    assert before <= span.start <= first_sent


@linux
def test_a_step_of_the_wall_clock_leaves_the_arrival_untrusted(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    client, server = pair
    transport = _stamped(client, times)
    stamped = transport.socket
    sent_before, _, server_end, _ = _answer(transport, server, 0.01, 0.05)
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
def test_the_first_answer_on_a_connection_spans_the_crawlers_own_times(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    client, server = pair
    transport = Transport(client)
    started = time.monotonic()
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")  # before the socket was stamped
    server.recv(100)
    server.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody")
    client.recv(100)
    read = time.monotonic()
    answer = times.begin(transport, read)
    assert answer is not None
    assert isinstance(transport.socket, StampedSocket)
    span = times.end(answer, started, time.monotonic())
    assert not span.stamped
    assert (span.start, span.end) == (started, read)
    # The next fetch on the same connection is stamped at both ends.
    times.wall.note(time.monotonic(), time.time())
    sent_before, server_start, server_end, sent_after = _answer(transport, server, 0.01, 0.05)
    transport.socket.recv(100)
    answer = times.begin(transport, time.monotonic())
    assert answer is not None
    span = times.end(answer, sent_before - 1.0, time.monotonic())
    assert span.stamped
    assert sent_before <= span.start <= server_start
    assert server_end <= span.end <= sent_after + 0.001


@linux
def test_a_closed_socket_is_not_stamped(pair: tuple[socket.socket, socket.socket]) -> None:
    client, _ = pair
    client.close()
    assert stamp_reads(Transport(client)) is None


def test_no_socket_is_found_outside_scrapys_http11_handler() -> None:
    assert answer_transport(Request("http://a.example/")) is None




def _fetch_with_kernel(settings: dict[str, Any], sent_ago: float | None,
                       arrived_ago: float | None, exception: BaseException | None = None,
                       ) -> tuple[float, Any]:
    """One fetch of 300 ms by the crawler's clock, read whole as it was reported, whose
    request went out ``sent_ago`` s before that (None: before the socket was stamped) and
    whose answer the kernel received ``arrived_ago`` s before (None: no stamp); then the
    seconds until the host's next request."""
    sched, clock, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10, **settings})
    if sched.config.tcp_timing:
        sched.fetches.timing.tcp = TcpTimes()
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    sched.fetches.sent(req)
    clock.advance(0.3)
    tcp = sched.fetches.timing.tcp
    if tcp is not None:
        sock = StampedSocket(None)  # type: ignore[arg-type]
        sock.request_sent = None if sent_ago is None else clock() - sent_ago
        sock.read_at, sock.wall_at = clock(), 1000.0 + clock()
        sock.arrived = None if arrived_ago is None else sock.wall_at - arrived_ago
        tcp.wall.note(clock() - 1.0, 999.0 + clock())  # the wall clock was steady
        fetch = sched.fetches.inflight.get(req.meta[LEASE_META])
        assert fetch is not None
        fetch.answer = tcp.begin(Transport(sock), clock())
    sched.fetches.completed(req, exception=exception)
    waited = _rest_after(sched, clock, req)
    sched.publish_stats()
    return waited, sched.stats


def test_the_scheduler_rests_by_the_kernels_span_from_the_kernels_arrival() -> None:
    # Sent 290 ms before the release, last bytes in 200 ms before it: a fetch of 90 ms
    # (not the 300 ms of the crawler's clock), whose 900 ms rest counts from the arrival
    # (200 ms before the release): 700 ms more.
    waited, stats = _fetch_with_kernel({}, 0.29, 0.2)
    assert waited == pytest.approx(0.7, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") == 1
    assert stats.get_value("frontier/fetch/tcp_seconds_cut") == pytest.approx(0.21, abs=0.002)


def test_an_unstamped_read_ends_the_fetch_at_the_read() -> None:
    # The send is known (10 ms after the crawler's start), the arrival is not: the fetch
    # ends at the read (here as it was reported), 290 ms, and rests 2.9 s from then.
    waited, stats = _fetch_with_kernel({}, 0.29, None)
    assert waited == pytest.approx(2.9, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") == 1


@pytest.mark.parametrize("case", ["failed fetch", "turned off"])
def test_the_scheduler_keeps_its_own_measure_when_the_kernels_is_not_trusted(case: str) -> None:
    settings: dict[str, Any] = {"FRONTIER_TCP_TIMING": case != "turned off"}
    # (IgnoreRequest: an exception that asks for no back-off of its own.)
    exception = IgnoreRequest("dropped") if case == "failed fetch" else None
    waited, stats = _fetch_with_kernel(settings, 0.29, 0.2, exception=exception)
    assert waited == pytest.approx(3.0, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") is None


def test_a_send_before_the_crawlers_start_changes_nothing() -> None:
    # The socket's last request went out before the crawler's own start (another
    # request's), and the answer came in as it was read: the crawler's measure stands.
    waited, stats = _fetch_with_kernel({}, 0.9, 0.0)
    assert waited == pytest.approx(3.0, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") is None


def _loopback_page() -> Any:
    """A one-page web server on 127.0.0.1 (any free port); the caller stops listening."""
    from twisted.internet import reactor
    from twisted.web.resource import Resource
    from twisted.web.server import Site

    class Page(Resource):
        isLeaf = True

        def render_GET(self, request: Any) -> bytes:  # noqa: N802 - Twisted's name
            return b"<html>answer</html>"

    return reactor.listenTCP(0, Site(Page()), interface="127.0.0.1")  # type: ignore[attr-defined]


@pytest_twisted.inlineCallbacks
def test_the_socket_is_found_under_scrapys_real_http11_handler() -> Any:
    """Scrapy's HTTP/1.1 download handler fetches from a loopback server; a
    headers_received handler (as the scheduler's) finds the answer's TCP socket. A Scrapy
    release that moves the frame the lookup reads fails here, without a crawl."""
    from scrapy import signals
    from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
    from scrapy.utils.test import get_crawler
    port = _loopback_page()
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


class _Protocol:
    """A connection's protocol, as a pool's factory builds it: notes the socket it is
    given its connection on."""

    seen: Any = None

    def makeConnection(self, transport: Any) -> None:  # noqa: N802 - Twisted's name
        self.seen = transport.socket


class _Factory:
    """A connection pool's protocol factory (Twisted's ``_HTTP11ClientFactory`` shape)."""

    def __init__(self, quiescent_callback: Any, metadata: Any) -> None:
        self.metadata = metadata

    def buildProtocol(self, addr: Any) -> _Protocol:  # noqa: N802 - Twisted's name
        return _Protocol()


@linux
def test_a_connection_stamped_as_it_connects_times_its_first_fetch(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    """Its first request goes out through the wrapped socket's send and its first answer's
    read carries the kernel's arrival: the first fetch is the kernel's, as every later one."""
    pool = SimpleNamespace(_factory=_Factory)
    assert stamp_on_connect(pool) and stamp_on_connect(pool)
    assert pool._factory.__mro__.count(_Factory) == 1  # wrapped once
    protocol = pool._factory(None, "endpoint").buildProtocol(None)
    client, server = pair
    transport = Transport(client)
    protocol.makeConnection(transport)
    assert isinstance(protocol.seen, StampedSocket)  # before the protocol had its transport
    assert "makeConnection" not in vars(protocol)  # the protocol's own method again
    sent_before, server_start, server_end, sent_after = _answer(transport, server, 0.01, 0.02)
    assert transport.socket.recv(100).endswith(b"body")
    answer = times.begin(transport, time.monotonic())
    assert answer is not None and answer.sent_by is not None
    span = times.end(answer, sent_before - 1.0, time.monotonic())
    assert span.stamped
    assert sent_before <= span.start <= server_start
    assert server_end <= span.end <= sent_after + 0.001


def test_a_pool_without_a_protocol_factory_is_left_alone() -> None:
    pool = SimpleNamespace(_factory=None)
    assert not stamp_on_connect(pool) and pool._factory is None
    assert not stamp_on_connect(object())


def test_the_engine_without_download_handlers_hands_out_no_pool() -> None:
    engine = SimpleNamespace(downloader=SimpleNamespace())
    assert EngineAdapter(SimpleNamespace(engine=engine)).connection_pools() == []  # type: ignore[arg-type]


def _first_stamped_fetch(monkeypatch: pytest.MonkeyPatch, wall_step: float) -> float:
    """A crawl opens at t=100 (the wall clock 1000 s ahead); its first fetch goes out at
    once on a connection stamped as it connected, the server answers in 40 ms, and a
    callback blocks the loop 300 ms before the answer is read and the fetch reported:
    the first stamped read of the crawl, after a stall. The wall clock steps ``wall_step``
    s between the opening and the read. Returns the seconds from the report until the
    host's next request."""
    clock = FakeClock(100.0)
    # The socket's and the timing's clock readings, on the test's clock.
    offset = [1000.0]
    monkeypatch.setattr(tcp_timing, "time", SimpleNamespace(
        monotonic=clock, time=lambda: offset[0] + clock()))
    sched, _, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10}, clock=clock)
    tcp = sched.fetches.timing.tcp
    assert tcp is not None
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    sched.fetches.sent(req)
    sock = StampedSocket(None)  # type: ignore[arg-type]
    sock.request_sent = clock()
    clock.advance(0.04)
    offset[0] += wall_step
    arrived = offset[0] + clock()
    clock.advance(0.3)  # the callback's stall
    sock.read_at, sock.wall_at, sock.arrived = clock(), offset[0] + clock(), arrived
    fetch = sched.fetches.inflight.get(req.meta[LEASE_META])
    assert fetch is not None
    fetch.answer = tcp.begin(Transport(sock), clock())
    sched.fetches.completed(req)
    return _rest_after(sched, clock, req)


@linux
def test_the_first_stamped_read_of_a_crawl_is_dated_at_its_arrival(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A 40 ms fetch rests 400 ms from its arrival, 300 ms of which the stall took: 100 ms
    # more (not 3.4 s, ten times the fetch with the stall, from the read).
    assert _first_stamped_fetch(monkeypatch, 0.0) == pytest.approx(0.1, abs=0.015)


@linux
def test_a_step_of_the_wall_clock_since_the_crawl_opened_leaves_the_first_arrival_untrusted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The arrival cannot be placed on the monotonic clock: the fetch ends at its read.
    assert _first_stamped_fetch(monkeypatch, 10.0) == pytest.approx(3.4, abs=0.015)


@linux
@pytest_twisted.inlineCallbacks
def test_scrapys_http11_handler_stamps_a_new_connection_before_its_first_answer() -> Any:
    """The engine's download handlers hand out their connection pools; stamped on connect,
    the first answer on a new connection of Scrapy's real HTTP/1.1 handler is read from a
    stamped socket that knows when its request went and when the answer came. A Scrapy
    release that moves the handlers or the pool fails here, without a crawl."""
    from scrapy import Spider, signals
    from scrapy.core.downloader.handlers import DownloadHandlers
    from scrapy.utils.defer import deferred_from_coro
    from scrapy.utils.test import get_crawler
    port = _loopback_page()
    crawler = get_crawler(Spider, settings_dict={"TELNETCONSOLE_ENABLED": False})
    crawler.spider = Spider("s")
    handlers = DownloadHandlers(crawler)
    crawler.engine = SimpleNamespace(downloader=SimpleNamespace(handlers=handlers))
    pools = EngineAdapter(crawler).connection_pools()
    assert pools and all([stamp_on_connect(pool) for pool in pools])
    found: list[tuple[Any, Any, Any]] = []

    def headers_received(headers: Any, body_length: Any, request: Any, spider: Any) -> None:
        sock = getattr(answer_transport(request), "socket", None)
        found.append((sock, getattr(sock, "request_sent", None), getattr(sock, "arrived", None)))

    crawler.signals.connect(headers_received, signal=signals.headers_received)
    request = Request(f"http://127.0.0.1:{port.getHost().port}/page")
    try:
        download = getattr(handlers, "download_request_async", None)
        response = yield (deferred_from_coro(download(request)) if download is not None
                          else handlers.download_request(request, crawler.spider))
    finally:
        stopped = getattr(crawler.signals, "send_catch_log_async", None)  # Scrapy >= 2.14
        yield (deferred_from_coro(stopped(signals.engine_stopped)) if stopped is not None
               else crawler.signals.send_catch_log_deferred(signals.engine_stopped))
        yield port.stopListening()
    assert response.status == 200
    assert len(found) == 1
    sock, request_sent, arrived = found[0]
    assert isinstance(sock, StampedSocket)
    assert request_sent is not None and arrived is not None
