"""Run the test web in a child process, so crawler and server use separate CPU cores."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import TracebackType
from typing import IO, Any

from frontier_testweb.log import LogEntry, read_log


class ServerProcess:
    """``python -m frontier_testweb serve ARGS`` as a context manager.

    >>> with ServerProcess(["--shape", "skewed", "--hosts", "5"], log_path="log.jsonl") as web:
    ...     crawl(web.start_urls)
    ... audit(read_log("log.jsonl"), expected=web.expected)
    """

    def __init__(
        self,
        args: Sequence[str] = ("--shape", "skewed"),
        *,
        log_path: str | None = None,
        python: str = sys.executable,
        startup_timeout: float = 30.0,
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.python = python
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}  # the announcement line, parsed
        self.start_urls: list[str] = []
        self.expected: set[tuple[str, str]] = set()
        #: Host addresses; give them to the spider's allowed_domains to stay on loopback.
        self.allowed_domains: list[str] = []
        #: Named hosts' addresses (``--addresses``): the crawl's ``TESTWEB_HOST_ADDRESSES``.
        self.host_addresses: dict[str, str] = {}

    def start(self) -> ServerProcess:
        cmd = [self.python, "-m", "frontier_testweb", "serve", *self.args]
        if self.log_path is not None:
            cmd += ["--log", self.log_path]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        try:
            line = _read_line(self.proc.stdout, self.startup_timeout)
        except BaseException:
            self.stop()
            raise
        if not line:
            code = self.proc.wait(timeout=self.startup_timeout)
            raise RuntimeError(f"test web exited with code {code} before announcing itself")
        self.info = json.loads(line)
        self.start_urls = [str(u) for u in self.info["start_urls"]]
        self.expected = {(str(h), str(p)) for h, p in self.info["expected"]}
        self.allowed_domains = [str(a) for a in self.info["allowed_domains"]]
        self.host_addresses = {str(h["name"]): str(h["address"])
                               for h in self.info["hosts"] if h.get("name")}
        return self

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("not started")
        return self.proc.pid

    def read_log(self) -> list[LogEntry]:
        if self.log_path is None:
            raise RuntimeError("started without log_path")
        return read_log(self.log_path) if os.path.exists(self.log_path) else []

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        if proc.stdout is not None:
            proc.stdout.close()
        return proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _read_line(stream: IO[str], timeout: float) -> str:
    """One line from a child's stdout, or TimeoutError; '' means the child closed it."""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        left = deadline - time.monotonic()
        # The child prints its announcement as one flushed line, so readable means a full line
        # is (about to be) there; readline then blocks only for the rest of that line.
        if left <= 0 or not sel.select(left):
            raise TimeoutError(f"test web did not announce itself within {timeout}s")
    return stream.readline()
