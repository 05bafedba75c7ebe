"""Several crawler processes, one Redis: scrapy-frontier's shared frontier beside scrapy-redis.

N worker processes (``--workers``, default 3) crawl the same loopback test web through
one private redis-server (127.0.0.1, no persistence), for each configuration:

* ``frontier-redis`` -- the add-on with ``FRONTIER_BACKEND = "redis"``: one polite
  frontier for all workers (one fetch per host at a time across the cluster, rests of
  10 x the fetch time measured on the Redis server's clock);
* ``scrapy-redis`` -- scrapy-redis's scheduler and dupe filter (shared queue and seen
  set), ``CONCURRENT_REQUESTS_PER_DOMAIN = 1`` and ``DOWNLOAD_DELAY = 0``: Scrapy's
  per-host limit, which holds inside each worker only;
* ``scrapy-redis-autothrottle`` -- the same with AutoThrottle (target concurrency 0.1,
  about 10 x latency between requests), again per worker.

The server's log is audited against the frontier's rule (next request to a host no
earlier than the previous one's end + 10 x its duration): overlaps, short gaps,
coverage, duplicates and makespan, all workers together.

    python benchmarks/bench_redis_crawl.py             # skewed web, 3 workers
    python benchmarks/bench_redis_crawl.py --quick     # smaller web (smoke)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from frontier_testweb import ServerProcess, audit, read_log  # noqa: E402
from frontier_testweb.crawl import BASE_SETTINGS, FRONTIER_ADDON  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = HERE / "results" / "redis_crawl.json"

WEB = ["--shape", "skewed", "--hosts", "20", "--largest", "60", "--latency", "0.005", "0.040",
       "--seed", "1"]
QUICK_WEB = ["--shape", "skewed", "--hosts", "8", "--largest", "20", "--latency", "0.005",
             "0.040", "--seed", "1"]


def configs(redis_url: str, run: str) -> dict[str, dict[str, Any]]:
    scrapy_redis = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        # A plain Spider closes when idle: keep the shared queue for the other workers.
        "SCHEDULER_PERSIST": True,
        "SCHEDULER_IDLE_BEFORE_CLOSE": 2,
        "SCHEDULER_QUEUE_KEY": f"{run}:%(spider)s:requests",
        "SCHEDULER_DUPEFILTER_KEY": f"{run}:%(spider)s:dupefilter",
        "REDIS_URL": redis_url,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": 0,
    }
    return {
        "frontier-redis": {
            "ADDONS": FRONTIER_ADDON, "FRONTIER_BACKEND": "redis", "REDIS_URL": redis_url,
            "FRONTIER_REDIS_KEY": f"{run}:frontier:", "FRONTIER_REDIS_SEEN_KEY": f"{run}:seen:",
            "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_REDIS_IDLE_GRACE": 2.0,
            "FRONTIER_RECRAWL": "off",
        },
        "scrapy-redis": scrapy_redis,
        "scrapy-redis-autothrottle": {
            **scrapy_redis, "AUTOTHROTTLE_ENABLED": True,
            "AUTOTHROTTLE_TARGET_CONCURRENCY": 0.1, "AUTOTHROTTLE_START_DELAY": 0.1,
            "AUTOTHROTTLE_MAX_DELAY": 60,
        },
    }


def crawl(web_args: list[str], settings: dict[str, Any], workers: int, tmp: Path,
          timeout: float) -> dict[str, Any]:
    log = tmp / "server.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        spec = tmp / "crawl.json"
        spec.write_text(json.dumps({"start_urls": web.start_urls,
                                    "allowed_domains": web.allowed_domains,
                                    "settings": {**BASE_SETTINGS, "LOG_LEVEL": "WARNING",
                                                 **settings}}))
        started = time.monotonic()
        procs = [subprocess.Popen(
            [sys.executable, "-m", "frontier_testweb.crawl", str(spec),
             str(tmp / f"worker{i}.json")], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL) for i in range(workers)]
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=max(1.0, timeout - (time.monotonic() - started))))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        elapsed = time.monotonic() - started
        expected = web.expected
    report = audit(read_log(log), expected=expected, min_delay=0.0)
    return {"codes": codes, "wall_s": elapsed, **report.as_dict(), "summary": report.summary()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smaller web; nothing written")
    parser.add_argument("--timeout", type=float, default=600.0, help="per configuration")
    args = parser.parse_args(argv)
    web = QUICK_WEB if args.quick else WEB
    rows: dict[str, Any] = {}
    with RedisServer() as redis_server:
        for i, (name, settings) in enumerate(configs(redis_server.url, "bench").items()):
            settings = {k: (v.replace("bench:", f"bench{i}:") if isinstance(v, str) else v)
                        for k, v in settings.items()}
            tmp = Path(tempfile.mkdtemp(prefix=f"bench-redis-{name}-"))
            print(f"[{name}] {args.workers} workers ...", flush=True)
            rows[name] = crawl(web, settings, args.workers, tmp, args.timeout)
            print("  " + rows[name]["summary"].replace("\n", "\n  "), flush=True)
    print()
    print(f"{'configuration':>26} {'overlaps':>8} {'short':>6} {'coverage':>8} {'dups':>5} "
          f"{'makespan':>9} {'x floor':>8}")
    for name, r in rows.items():
        print(f"{name:>26} {r['overlaps']:8d} {r['short_gaps']:6d} {r['coverage']:8.3f} "
              f"{r['duplicates']:5d} {r['makespan']:9.2f} {r['makespan'] / r['floor']:8.2f}")
    if not args.quick:
        RESULTS.write_text(json.dumps({"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                                       "web": web, "workers": args.workers, "rows": rows},
                                      indent=2, default=str))
        print(f"wrote {RESULTS}")
    return 0 if all(c == 0 for r in rows.values() for c in r["codes"]) else 2


if __name__ == "__main__":
    sys.exit(main())
