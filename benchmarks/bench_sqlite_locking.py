"""Write-through cost of the SQLite queue store: lock file (now) vs locking_mode=EXCLUSIVE.

The store used to hold its file with ``PRAGMA locking_mode=EXCLUSIVE`` (no reader could
open it). It now takes a lock file and runs SQLite in ordinary WAL mode so that
``scrapy frontier`` can read it beside the crawl. This measures what a write-through
cycle (push, lease, complete, ack, one commit) costs each way, back to back in the same
run, in alternating rounds so that the machine's noise hits both alike.

    python benchmarks/bench_sqlite_locking.py [--ops 3000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

from scrapy_frontier.backends.sqlite import queue
from scrapy_frontier.codec import Codec
from scrapy_frontier.core.frontier import Frontier

BYTES: Codec[bytes] = Codec(encode=bytes, decode=bytes)


_connect = sqlite3.connect


def _exclusive_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    conn = _connect(*args, **kwargs)
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")  # as before: set ahead of WAL mode
    return conn


def one_run(directory: Path, ops: int, *, exclusive: bool) -> float:
    path = directory / f"f{time.monotonic_ns()}.sqlite"
    patch = (mock.patch.object(queue.sqlite3, "connect", _exclusive_connect) if exclusive
             else mock.patch.object(queue.sqlite3, "connect", _connect))
    now = [0.0]
    with patch:
        store = queue.SQLiteStore(path, levels=4, spider="bench", codec=BYTES)
        frontier: Frontier[bytes] = Frontier(store=store, front_queues=4, back_queues=8,
                                             clock=lambda: now[0])
        started = time.perf_counter()
        for i in range(ops):
            frontier.push(f"h{i % 50}", 2, b"x" * 100)
            now[0] += 100.0  # every host is due again
            lease = frontier.pop()
            assert lease is not None
            frontier.complete(lease.ticket, 0.01)
            store.flush()  # write-through: one commit per request
        elapsed = time.perf_counter() - started
        store.close()
    return elapsed / ops * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"exclusive": [], "lock_file": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            results["exclusive"].append(one_run(Path(tmp), args.ops, exclusive=True))
            results["lock_file"].append(one_run(Path(tmp), args.ops, exclusive=False))
    summary = {k: {"median_us_per_request": round(statistics.median(v), 1),
                   "runs": [round(x, 1) for x in v]} for k, v in results.items()}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
