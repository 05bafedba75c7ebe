"""A small site for the spider-style tests: pages, a form, sitemaps and an RSS feed.

One loopback address, a thread of its own (stdlib ``ThreadingHTTPServer``). Pages are a
dict the test changes between runs: a changed page gets a new body (and so a new ETag),
a removed page answers 404. Every page sends ETag and Last-Modified and answers a
matching conditional GET with 304. ``/search`` takes a form POST. Each request is
logged as (method, path, status).
"""

from __future__ import annotations

import gzip
import hashlib
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


class StyleSite:
    def __init__(self, address: str = "127.0.3.1") -> None:
        self.address = address
        self.pages: dict[str, tuple[str, str]] = {}  # path -> (content type, body)
        self.modified: dict[str, float] = {}
        self.log: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((address, 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://{self.address}:{self.port}"

    def __enter__(self) -> StyleSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def put(self, path: str, body: str, ctype: str = "text/html") -> None:
        with self._lock:
            if self.pages.get(path) != (ctype, body):
                self.modified[path] = time.time()
            self.pages[path] = (ctype, body)

    def remove(self, path: str) -> None:
        with self._lock:
            self.pages.pop(path, None)

    def requests(self) -> list[tuple[str, str, int]]:
        with self._lock:
            return list(self.log)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._answer(None)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self._answer(self.rfile.read(length).decode("utf-8"))

            def _answer(self, form: str | None) -> None:
                path = self.path
                with site._lock:
                    page = site.pages.get(path)
                    modified = site.modified.get(path, 0.0)
                status, headers, body = 404, {"Content-Type": "text/plain"}, b"gone\n"
                if path == "/search" and form is not None:
                    query = parse_qs(form).get("q", [""])[0]
                    status, body = 200, f"<html><body><p id='result'>results for {query}</p>" \
                                        "</body></html>".encode()
                    headers = {"Content-Type": "text/html"}
                elif page is not None and form is None:
                    ctype, text = page
                    data = text.encode("utf-8")
                    if path.endswith(".gz"):
                        data = gzip.compress(data, mtime=0)
                    etag = '"' + hashlib.sha1(data).hexdigest()[:16] + '"'
                    headers = {"Content-Type": ctype, "ETag": etag,
                               "Last-Modified": formatdate(modified, usegmt=True)}
                    if self.headers.get("If-None-Match") == etag:
                        status, body = 304, b""
                    else:
                        status, body = 200, data
                with site._lock:
                    site.log.append((self.command, path, status))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
