"""Start a private redis-server on loopback for tests and benchmarks.

The server binds 127.0.0.1 only, on a free port, with its files in a private
temporary directory and persistence off unless asked for. A missing
redis-server is an error, not a skip: the Redis backend must be tested.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import redis

if TYPE_CHECKING:
    from tests.redis_tls import TlsFiles

REDIS_SERVER = os.environ.get("FRONTIER_TEST_REDIS_SERVER", "/usr/bin/redis-server")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process; ``start()`` waits for PING, ``stop()`` kills it."""

    def __init__(self, *, persistence: bool = False, directory: str | None = None,
                 extra: tuple[str, ...] = (), tls: TlsFiles | None = None) -> None:
        self.persistence = persistence
        #: With TLS files, the server takes TLS connections only (no plain port).
        self.tls = tls
        #: More redis-server arguments (e.g. cluster mode's).
        self.extra = extra
        self._own_dir = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="frontier-redis-")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.tls is not None:
            return (f"rediss://127.0.0.1:{self.port}/0"
                    f"?ssl_ca_certs={quote(str(self.tls.ca), safe='/')}")
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        if self.tls is not None:
            kwargs = {"ssl": True, "ssl_ca_certs": str(self.tls.ca), **kwargs}
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def start(self, port: int | None = None, timeout: float = 10.0) -> RedisServer:
        exe = shutil.which(REDIS_SERVER)
        if exe is None and os.access(REDIS_SERVER, os.X_OK):
            exe = REDIS_SERVER
        if exe is None:
            raise RuntimeError(
                f"redis-server not found at {REDIS_SERVER!r}: the Redis backend tests need it. "
                "Install it (apt-get install redis-server) or set FRONTIER_TEST_REDIS_SERVER."
            )
        self.port = port or free_port()
        ports = ["--port", str(self.port)]
        if self.tls is not None:
            ports = ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no",
                     "--tls-cert-file", str(self.tls.cert), "--tls-key-file", str(self.tls.key),
                     "--tls-ca-cert-file", str(self.tls.ca)]
        args = [exe, "--bind", "127.0.0.1", *ports, "--dir", self.dir,
                "--protected-mode", "yes", "--daemonize", "no", "--loglevel", "warning",
                "--logfile", str(Path(self.dir) / "redis.log")]
        if self.persistence:
            args += ["--save", "", "--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--save", "", "--appendonly", "no"]
        args += list(self.extra)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        client = self.client()
        try:
            for _ in range(1000):
                if self.proc.poll() is not None:
                    stderr = self.proc.stderr
                    err = stderr.read().decode(errors="replace") if stderr else ""
                    raise RuntimeError(f"redis-server exited at start: {err or self._log()}")
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        finally:
            client.close()
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING in {timeout} s")

    def _log(self) -> str:
        try:
            return (Path(self.dir) / "redis.log").read_text()[-2000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """Kill -9 the server (keeps its directory, so ``start`` can restart it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
