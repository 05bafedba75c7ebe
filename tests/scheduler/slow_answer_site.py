"""A slow answer sent while the spider blocks the reactor: the site and the spider.

Two loopback hosts, each a stdlib ``ThreadingHTTPServer`` (HTTP/1.1, keep-alive):

* the *slow* host serves ``/fast`` (its body 20 ms after its head), then ``/slow``, which
  answers no sooner than ``slow`` seconds after it came in, and not before the spider says
  its callback is blocking; then ``/after``, the host's next request, whose arrival the
  test measures the rest by;
* the *trigger* host holds ``/trigger`` until ``lead`` seconds after ``/slow`` came in.

The spider (run as
``python -m tests.scheduler.slow_answer_site SETTINGS_JSON OUT_DIR FAST TRIGGER``)
fetches ``/fast``, then ``/slow`` from its callback, then ``/after`` from the callback of
``/slow``; the callback of ``/trigger`` blocks the reactor: it writes ``blocking`` in
``OUT_DIR``, waits until the site writes ``answered`` there (``/slow`` was sent whole), then
blocks ``hold`` seconds more. So the slow answer is sent, start to end, while the crawler's
loop is blocked, whatever the machine's load: the two sides wait for each other, not for time.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BLOCKING = "blocking"
ANSWERED = "answered"
#: The longest either side waits for the other before giving up (a broken test, not a slow one).
PATIENCE = 60.0


@dataclass
class Served:
    """One answered request, on the server's monotonic clock."""

    host: str
    path: str
    received: float
    #: When the write of the answer's last bytes began: on loopback they reach the crawler's
    #: socket within that write, so this is the server's end as the network saw it.
    sending: float
    #: When that write had returned (later by the server's own scheduling, too).
    ended: float

    @property
    def seconds(self) -> float:
        """The server's own time, to its end as the network saw it."""
        return self.sending - self.received


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + PATIENCE
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.002)


class SlowAnswerSite:
    def __init__(self, markers: Path, *, slow: float, lead: float,
                 slow_host: str = "127.0.14.1", trigger_host: str = "127.0.14.2") -> None:
        self.markers = markers
        self.slow = slow
        self.lead = lead
        self.log: list[Served] = []
        self._lock = threading.Lock()
        self._slow_in = threading.Event()
        self._slow_received = 0.0
        self._servers = [ThreadingHTTPServer((host, 0), self._handler(host))
                         for host in (slow_host, trigger_host)]
        self._threads = []
        for server in self._servers:
            server.daemon_threads = True
            self._threads.append(threading.Thread(target=server.serve_forever, daemon=True))

    def url(self, which: int, path: str) -> str:
        host, port = self._servers[which].server_address[:2]
        return f"http://{host!s}:{port}{path}"

    def __enter__(self) -> SlowAnswerSite:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._slow_in.set()  # a trigger still waiting gives up
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def served(self, path: str) -> Served:
        with self._lock:
            found = [s for s in self.log if s.path == path]
        assert len(found) == 1, (path, self.log)
        return found[0]

    def _answer(self, host: str, path: str, received: float) -> bytes:
        if path == "/slow":
            self._slow_received = received
            self._slow_in.set()
            _wait_for(self.markers / BLOCKING)
            left = received + self.slow - time.monotonic()
            if left > 0:
                time.sleep(left)
        elif path == "/trigger":
            if not self._slow_in.wait(PATIENCE):
                raise TimeoutError("/slow never came")
            left = self._slow_received + self.lead - time.monotonic()
            if left > 0:
                time.sleep(left)
        return f"<html><title>{path}</title></html>".encode()

    def _handler(self, host: str) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: later fetches reuse the connection

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                received = time.monotonic()
                path = self.path
                body = site._answer(host, path, received)
                head = (f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode("ascii")
                if path == "/fast":
                    # Head and body apart: the body's read is the first the kernel stamps
                    # (the socket is wrapped at the head), which starts the crawler's trust
                    # in the wall clock that dates later arrivals (scheduler/tcp_timing.py).
                    self.wfile.write(head)
                    time.sleep(0.02)
                    head = b""
                sending = time.monotonic()
                self.wfile.write(head + body)  # one write: the answer's end leaves whole
                ended = time.monotonic()
                with site._lock:
                    site.log.append(Served(host, path, received, sending, ended))
                if path == "/slow":
                    (site.markers / ANSWERED).touch()

        return Handler


def main(settings_json: str, out_dir: str, fast: str, trigger: str) -> int:
    import scrapy
    from scrapy.crawler import CrawlerProcess

    out = Path(out_dir)
    hold = 0.2

    class BlockingSpider(scrapy.Spider):
        name = "blocking"

        async def start(self) -> Any:
            yield scrapy.Request(fast, callback=self.chain)
            yield scrapy.Request(trigger, callback=self.block)

        def chain(self, response: Any) -> Any:
            following = {"/fast": "/slow", "/slow": "/after"}.get(urlsplit(response.url).path)
            if following is not None:
                yield response.follow(following, callback=self.chain)

        def block(self, response: Any) -> None:
            started = time.monotonic()
            (out / BLOCKING).touch()
            _wait_for(out / ANSWERED)  # blocks the reactor on purpose, as heavy parsing would
            time.sleep(hold)
            (out / "block.json").write_text(json.dumps([started, time.monotonic()]))

    process = CrawlerProcess(settings=json.loads(settings_json))
    crawler = process.create_crawler(BlockingSpider)
    process.crawl(crawler)
    process.start()
    (out / "stats.json").write_text(json.dumps(dict(crawler.stats.get_stats()), default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(*sys.argv[1:]))
