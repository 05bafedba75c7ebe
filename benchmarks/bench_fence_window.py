"""How long a request takes from the Redis fence's last check to the server: the window in
which a pause of the worker still sends it under a lease that lapsed meanwhile.

The fence's last check runs in the timing middleware's ``process_request`` (order 950),
and the scheduler stamps the fetch's ``sent`` time right after it, on CLOCK_MONOTONIC
(the ``scrapy_frontier.politeness`` DEBUG line of each fetch prints it). The test web
logs the moment each request had arrived whole, on the same clock (system-wide on
Linux). Per host the fetches are one at a time, so the n-th ``sent`` of a host matches
its n-th server entry. The difference holds everything after the check: the rest of the
middleware chain, Scrapy's downloader slot, the HTTP/1.1 handler (a new connection's TCP
handshake, or a pooled one), the write, loopback, and the server's parse: an upper bound
on the time from the check to the request's bytes leaving the crawler.

One Redis worker crawls a loopback test web (``--hosts`` x ``--pages``); ``--load N``
runs N busy processes meanwhile (a loaded machine: the window grows with the reactor's
delays). Reports the count, median, 90th and 99th percentiles and the maximum, in ms, for
the first fetch of each host (a new connection: the TCP handshake comes first, and most are
sent together at the crawl's start) and for the later ones (a pooled connection).

    python benchmarks/bench_fence_window.py --load 0 --load 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from frontier_testweb import ServerProcess, read_log  # noqa: E402
from frontier_testweb.crawl import run_crawl  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = HERE / "results" / "fence_window.json"
_SENT = re.compile(r"host '([^']+)': fetch took [0-9.]+ s, rest at least [0-9.]+ s "
                   r"\(sent ([0-9.]+),")


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def one_run(hosts: int, pages: int, load: int, key: str, redis_url: str,
            ) -> tuple[list[float], list[float]]:
    """Seconds from each fetch's last fence check to its arrival at the server: of the first
    fetch of each host (a new connection, most at the crawl's start), and of the others."""
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(load)]
    for p in spinners:
        p.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "server.jsonl"
            web_args = ["--shape", "wide", "--hosts", str(hosts), "--pages", str(pages),
                        "--latency", "0.005", "0.02", "--seed", "3"]
            with ServerProcess(web_args, log_path=str(log)) as web:
                settings = {
                    "ADDONS": {"scrapy_frontier.Addon": 0}, "FRONTIER_BACKEND": "redis",
                    "REDIS_URL": redis_url, "FRONTIER_REDIS_KEY": f"{key}:frontier:",
                    "FRONTIER_REDIS_SEEN_KEY": f"{key}:seen:",
                    "FRONTIER_REDIS_HISTORY_KEY": f"{key}:history:",
                    "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_DELAY_FACTOR": 2.0,
                    "FRONTIER_REDIS_IDLE_GRACE": 1.0, "LOG_LEVEL": "DEBUG",
                }
                result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                                   workdir=Path(tmp) / "crawl", timeout=600)
                if result.returncode != 0:
                    raise SystemExit(result.output[-3000:])
            entries = read_log(log)
    finally:
        stop.set()
        for p in spinners:
            p.join()
    sent: dict[str, list[float]] = defaultdict(list)
    for host, at in _SENT.findall(result.output):
        sent[host].append(float(at))
    arrived: dict[str, list[float]] = defaultdict(list)
    for entry in sorted(entries, key=lambda e: e.start):
        arrived[entry.host].append(entry.start)
    first: list[float] = []
    later: list[float] = []
    for host, stamps in sent.items():
        stamps.sort()
        if len(stamps) != len(arrived[host]):
            raise SystemExit(f"{host}: {len(stamps)} fetches sent, "
                             f"{len(arrived[host])} at the server")
        gaps = [server - check for check, server in zip(stamps, arrived[host], strict=True)]
        first.append(gaps[0])
        later += gaps[1:]
    return first, later


def summary(gaps: list[float]) -> dict[str, float]:
    ms = sorted(1000 * g for g in gaps)
    q = statistics.quantiles(ms, n=100)
    return {"fetches": len(ms), "median_ms": round(statistics.median(ms), 3),
            "p90_ms": round(q[89], 3), "p99_ms": round(q[98], 3), "max_ms": round(ms[-1], 3),
            "min_ms": round(ms[0], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages", type=int, default=15)
    parser.add_argument("--load", type=int, action="append",
                        help="busy processes during a run (repeat for several runs)")
    args = parser.parse_args()
    loads = args.load or [0]
    results: dict[str, Any] = {"hosts": args.hosts, "pages": args.pages, "runs": {}}
    with RedisServer() as server:
        for i, load in enumerate(loads):
            first, later = one_run(args.hosts, args.pages, load, f"fence{i}", server.url)
            name = f"load-{load}" if f"load-{load}" not in results["runs"] else f"load-{load}#{i}"
            run = results["runs"][name] = {"first_of_host": summary(first),
                                           "later": summary(later)}
            print(f"load {load}: {json.dumps(run)}", flush=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
