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

from scrapy_frontier.meta import FETCH_END_META, FETCH_START_META, LEASE_META
from scrapy_frontier.scheduler.engine import answer_socket
from scrapy_frontier.scheduler.tcp_timing import (
    TcpTimes,
    kernel_tick,
    read_stamps,
    tick_from_steps,
)
from tests.test_fetch_time import _rest_after
from tests.test_scheduler import make_scheduler

linux = pytest.mark.skipif(sys.platform != "linux", reason="TCP_INFO stamps are Linux's")


@pytest.fixture
def times() -> TcpTimes:
    tick = kernel_tick()
    assert tick is not None
    return TcpTimes(tick, time.monotonic)


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


@linux
def test_the_interval_contains_the_servers_time_and_not_the_unread_wait(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    client, server = pair
    sent = time.monotonic()
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    server.recv(100)
    arrived = time.monotonic()
    time.sleep(0.03)  # the server works
    answered = time.monotonic()
    server.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
    server.sendall(b"body")
    done = time.monotonic()
    time.sleep(0.15)  # the crawler is busy: the answer waits unread
    times.begin(1, client)
    client.recv(100)
    times.update(1)
    read = time.monotonic()
    kernel = times.end(1)
    assert kernel is not None
    interval, came_in = kernel
    # Polite: never shorter than what the server itself took, and the answer is never
    # said to have come in before the server sent it.
    assert interval >= answered - arrived
    assert came_in >= answered
    # True: the 150 ms the answer waited unread is not in either (50 ms for the
    # kernel's own delivery on a loaded machine), while a read-time measure has all of it.
    assert interval <= done - sent + times.tick + 0.05
    assert came_in <= done + times.tick + 0.05
    assert read - sent > interval + 0.09
    assert times.end(1) is None  # taken once


@linux
def test_data_sent_during_the_answer_makes_the_interval_untrusted(
    pair: tuple[socket.socket, socket.socket], times: TcpTimes,
) -> None:
    client, server = pair
    client.sendall(b"request")
    server.recv(100)
    server.sendall(b"first part")
    times.begin(7, client)
    client.recv(100)
    time.sleep(3 * times.tick)
    client.sendall(b"more")  # a request body still going out, a retransmission, a reuse
    server.recv(100)
    server.sendall(b"rest")
    time.sleep(0.01)
    times.update(7)
    assert times.end(7) is None


@linux
def test_a_closed_connection_is_not_trusted(pair: tuple[socket.socket, socket.socket],
                                            times: TcpTimes) -> None:
    client, server = pair
    client.sendall(b"request")
    server.recv(100)
    server.sendall(b"answer")
    times.begin(3, client)
    client.close()
    times.update(3)
    assert times.end(3) is None
    assert read_stamps(client) is None


def test_no_socket_is_found_outside_scrapys_http11_handler() -> None:
    assert answer_socket(Request("http://a.example/")) is None


class FakeTcpSocket:
    """Only what read_stamps reads: TCP_INFO with given ages (ms)."""

    def __init__(self, sent_ms: int, received_ms: int, retrans: int = 0) -> None:
        self.info = bytearray(104)
        struct.pack_into("=I", self.info, 44, sent_ms)
        struct.pack_into("=I", self.info, 52, received_ms)
        struct.pack_into("=I", self.info, 100, retrans)

    def getsockopt(self, *args: Any) -> bytes:
        return bytes(self.info)


def _fetch_with_kernel(settings: dict[str, Any], kernel: tuple[int, int, int] | None,
                       exception: BaseException | None = None) -> tuple[float, Any]:
    """One fetch of 300 ms by the read (20 ms of it on the wire, per ``kernel``), then the
    seconds until the host's next request is handed out."""
    sched, clock, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10, **settings})
    if sched.config.tcp_timing:
        sched.tcp = TcpTimes(0.005, clock)  # as Linux at 250 Hz, whatever this kernel's jiffy
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    req.meta[FETCH_START_META] = clock()
    clock.advance(0.3)
    req.meta[FETCH_END_META] = clock()
    if kernel is not None and sched.tcp is not None:
        sched.tcp.begin(req.meta[LEASE_META], FakeTcpSocket(*kernel))  # type: ignore[arg-type]
    sched.fetch_finished(req, exception=exception)
    waited = _rest_after(sched, clock, req)
    sched.publish_stats()
    return waited, sched.stats


def test_the_scheduler_rests_by_the_kernels_interval_from_the_kernels_arrival() -> None:
    # Sent 290 ms before the release, last bytes in 200 ms before it: a fetch of 90 ms
    # + 5 ms tick (not the 300 ms the reads took), whose 950 ms rest counts from the
    # latest moment the bytes can have come in (195 ms before the release): 755 ms more.
    waited, stats = _fetch_with_kernel({}, (290, 200, 0))
    assert waited == pytest.approx(0.755, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") == 1
    assert stats.get_value("frontier/fetch/tcp_seconds_cut") == pytest.approx(0.205, abs=0.001)


@pytest.mark.parametrize("case", ["retransmitted", "failed fetch", "turned off"])
def test_the_scheduler_keeps_its_own_measure_when_the_kernels_is_not_trusted(case: str) -> None:
    settings: dict[str, Any] = {"FRONTIER_TCP_TIMING": case != "turned off"}
    kernel = (290, 270, 1 if case == "retransmitted" else 0)
    # (IgnoreRequest: an exception that asks for no back-off of its own.)
    exception = IgnoreRequest("dropped") if case == "failed fetch" else None
    waited, stats = _fetch_with_kernel(settings, kernel, exception)
    assert waited == pytest.approx(3.0, abs=0.015)
    assert stats.get_value("frontier/fetch/tcp_timed") is None


def test_a_longer_kernel_interval_changes_nothing() -> None:
    # The read measure is the shorter one (both contain the server's time), and the
    # last bytes came in as they were read: the kernel changes nothing.
    waited, stats = _fetch_with_kernel({}, (900, 0, 0))
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
        found.append(answer_socket(request))

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
