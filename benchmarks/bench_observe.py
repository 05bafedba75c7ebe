"""What watching a crawl costs: one census, one metrics scrape, against one request.

The progress line takes one census per FRONTIER_PROGRESS_INTERVAL, and each Prometheus
scrape one more; neither touches the hot path. This script measures, on the same
frontier in the same process:

* **census**: ``scheduler.backend.inspection.census()`` (median of ``--repeat`` calls);
* **scrape**: one ``/metrics`` exposition (census + text), without HTTP;
* **baseline, per request**: ``enqueue_request`` + ``next_request`` +
  ``fetch_completed`` of one request, averaged over ``--n`` requests.

for a backlog of ``--n`` queued requests over ``--hosts`` hosts, with
``--back-queues`` hosts active (a census walks the hosts the frontier tracks, not the
URLs), on ``memory`` and ``sqlite``; and, with ``--redis-url``, the Redis census script
(``RedisFrontier.census``) against the round trip each I/O round already makes
(``RedisFrontier.sizes``). Nothing is downloaded; no network beyond a loopback Redis.

Usage::

    python benchmarks/bench_observe.py                       # 200k requests, 1000 hosts
    python benchmarks/bench_observe.py --quick
    python benchmarks/bench_observe.py --hosts 20000 --back-queues 5000
    python benchmarks/bench_observe.py --redis-url redis://127.0.0.1:6379/15
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from typing import Any

from _fakes import FakeDownloader


class _FakeEngine:
    def __init__(self, downloader: FakeDownloader) -> None:
        self.downloader = downloader


def _scheduler(backend: str, back_queues: int, state_dir: str) -> Any:
    from scrapy import Spider
    from scrapy.utils.misc import build_from_crawler
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.downloadermiddlewares import FetchTimingMiddleware
    from scrapy_frontier.scheduler import FrontierScheduler

    class BenchSpider(Spider):
        name = "bench_observe"

    settings: dict[str, Any] = {"FRONTIER_DELAY_FACTOR": 0, "FRONTIER_MIN_DELAY": 0,
                                "LOG_ENABLED": False, "FRONTIER_BACKEND": backend,
                                "FRONTIER_BACK_QUEUES": back_queues,
                                "FRONTIER_PROGRESS_INTERVAL": 0, "FRONTIER_RECRAWL": "off"}
    if backend == "sqlite":
        settings["FRONTIER_PATH"] = state_dir
    crawler = get_crawler(BenchSpider, settings)
    crawler.engine = _FakeEngine(  # type: ignore[assignment]
        FakeDownloader([FetchTimingMiddleware(crawler)]))
    spider = BenchSpider.from_crawler(crawler)
    crawler.spider = spider
    scheduler = build_from_crawler(FrontierScheduler, crawler)
    scheduler.open(spider)
    return scheduler


def _median_seconds(func: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench_local(backend: str, n: int, hosts: int, back_queues: int, repeat: int) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry, generate_latest
    from scrapy import Request

    from scrapy_frontier.observe.metrics import CensusCollector

    with tempfile.TemporaryDirectory() as state_dir:
        scheduler = _scheduler(backend, back_queues, state_dir)
        requests = [Request(f"http://h{k % hosts}.example/p/{k // hosts}") for k in range(n)]
        half = requests[: n // 2]
        started = time.perf_counter()
        for request in half:
            scheduler.enqueue_request(request)
        out = 0
        while out < len(half) // 2:  # hand out and finish a quarter: hosts get leases
            request = scheduler.next_request()
            if request is None:
                break
            scheduler.fetches.completed(request)
            out += 1
        per_request = (time.perf_counter() - started) / (len(half) + out)
        for request in requests[n // 2:]:
            scheduler.enqueue_request(request)
        census = scheduler.backend.inspection.census()
        collector = CensusCollector(scheduler.backend.inspection.census, lambda: (8, 16),
                                    spider="bench", worker="w")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        census_s = _median_seconds(scheduler.backend.inspection.census, repeat)
        scrape_s = _median_seconds(lambda: generate_latest(registry), repeat)
        scheduler.close("finished")
    return {"backend": backend, "queued": census.queued, "tracked_hosts": census.hosts.known,
            "census_ms": 1000 * census_s, "scrape_ms": 1000 * scrape_s,
            "per_request_us": 1e6 * per_request,
            "census_in_requests": census_s / per_request}


def bench_redis(url: str, n: int, hosts: int, back_queues: int, repeat: int) -> dict[str, Any]:
    import redis

    from scrapy_frontier.backends.redis.frontier import RedisFrontier

    client = redis.Redis.from_url(url)
    prefix = f"bench_observe:{time.time_ns()}:frontier:"
    frontier = RedisFrontier(client, prefix, back_queues=back_queues)
    try:
        entries = [(f"h{k % hosts}.example", 1, b"x" * 200) for k in range(n)]
        for i in range(0, n, 1000):
            frontier.push_many(entries[i:i + 1000])
        for _ in range(min(back_queues, 200)):
            if frontier.pop() is None:
                break
        census_s = _median_seconds(frontier.census, repeat)
        sizes_s = _median_seconds(frontier.sizes, repeat)
        census = frontier.census()
    finally:
        frontier.clear()
    return {"backend": "redis", "queued": census.queued, "tracked_hosts": census.known,
            "census_ms": 1000 * census_s, "sizes_round_trip_ms": 1000 * sizes_s,
            "census_in_round_trips": census_s / sizes_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--hosts", type=int, default=1_000)
    parser.add_argument("--back-queues", type=int, default=352)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--quick", action="store_true", help="20k requests")
    parser.add_argument("--redis-url", help="also measure the Redis census (loopback only)")
    args = parser.parse_args(argv)
    n = 20_000 if args.quick else args.n
    print(f"{n} requests over {args.hosts} hosts, {args.back_queues} back queues, "
          f"median of {args.repeat}")
    for backend in ("memory", "sqlite"):
        r = bench_local(backend, n, args.hosts, args.back_queues, args.repeat)
        print(f"{backend:7} queued {r['queued']:>7}  hosts tracked {r['tracked_hosts']:>6}  "
              f"census {r['census_ms']:7.3f} ms  scrape {r['scrape_ms']:7.3f} ms  | baseline: "
              f"one request {r['per_request_us']:6.1f} us -> a census costs as much as "
              f"{r['census_in_requests']:.1f} requests")
    if args.redis_url:
        r = bench_redis(args.redis_url, n, args.hosts, args.back_queues, args.repeat)
        print(f"redis   queued {r['queued']:>7}  hosts tracked {r['tracked_hosts']:>6}  "
              f"census {r['census_ms']:7.3f} ms  | baseline: sizes() round trip "
              f"{r['sizes_round_trip_ms']:.3f} ms -> {r['census_in_round_trips']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
