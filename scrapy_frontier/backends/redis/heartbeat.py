"""A Redis worker's heartbeat: the thread that keeps its leases alive while it lives.

Every lease a worker claims lapses ``FRONTIER_REDIS_LIVENESS`` seconds after the claim
unless renewed. This thread renews them, with the worker's place among the live workers,
every quarter of that window, from its own thread: a reactor busy in a spider callback,
or an I/O round waiting on a slow Redis, does not stop it. When the process dies, the
renewals stop, and the next claim of any worker takes its leases back within the window,
instead of after ``FRONTIER_LEASE_TIMEOUT``. A lease still outlives no claim by more than
``FRONTIER_LEASE_TIMEOUT``: a live process whose download hangs loses it then.

Each renewal Redis confirmed moves the worker's fence (redis_fence.py) for the leases it
renewed, from the moment it was sent; the leases it found gone are marked lost at once, and
``lost`` is told which (from this thread).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from scrapy_frontier.backends.redis.fence import LeaseFence
from scrapy_frontier.backends.redis.partitions import PartitionedFrontier
from scrapy_frontier.errors import RedisFrontierError

redis_log = logging.getLogger("scrapy_frontier.redis")


def worker_name() -> str:
    """This process's name among the crawl's workers: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Heartbeat:
    """Renews ``leases()`` (host, lease id pairs) in ``remote`` every ``remote.liveness / 4``
    seconds until stopped."""

    def __init__(self, remote: PartitionedFrontier, leases: Callable[[], list[tuple[str, int]]],
                 worker: str | None = None, *, fence: LeaseFence | None = None,
                 lost: Callable[[list[int]], None] | None = None) -> None:
        self.remote = remote
        self.leases = leases
        self.worker = worker or worker_name()
        self.fence = fence
        self.lost = lost
        self.interval = remote.liveness / 4
        #: Beats that reached Redis, and beats that failed.
        self.beats = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.beat()  # registered before the first claim
        self._thread = threading.Thread(target=self._run, name="scrapy-frontier-heartbeat",
                                        daemon=True)
        self._thread.start()

    def beat(self) -> bool:
        """One renewal; False (logged at the first of a run of failures) if Redis failed."""
        fence = self.fence
        # Before the call: Redis renews no earlier than this, whenever the answer comes.
        sent_at = fence.clock() if fence is not None else 0.0
        leases = self.leases()
        try:
            gone = self.remote.renew(self.worker, leases)
        except RedisFrontierError as exc:
            self.failures += 1
            if self.failures == 1:
                redis_log.warning(
                    "The heartbeat could not reach Redis (%s): if it stays away for more than "
                    "FRONTIER_REDIS_LIVENESS (%.1f s), other workers take this worker's "
                    "leases back and fetch their requests again", exc, self.remote.liveness)
            return False
        lost = [ticket for _, ticket in gone]
        if fence is not None:
            if lost:
                fence.lost(lost)
            kept = set(lost)
            fence.renewed([ticket for _, ticket in leases if ticket not in kept], sent_at)
        if lost and self.lost is not None:
            self.lost(lost)
        if self.failures:
            redis_log.info("The heartbeat reaches Redis again")
        self.failures = 0
        self.beats += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception:  # a beat must never end the thread: log, and beat again
                redis_log.exception("The heartbeat failed unexpectedly")

    def stop(self) -> None:
        """Stop beating, and leave the live workers (the worker's leases are completed or
        handed back by then)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        # If Redis is away, it drops out of the live count when its window ends.
        with contextlib.suppress(RedisFrontierError):
            self.remote.leave(self.worker)
