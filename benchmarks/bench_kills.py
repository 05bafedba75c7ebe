"""Items and repeats after 20 kills: the frontier beside Scrapy's own scheduler.

The crawl of ``tests/crawls/test_items_after_kills.py`` (12 hosts × 80 pages, an item per page in
a JSON Lines feed, an item pipeline that holds each item 1-20 ms), killed 20 times at
random moments by itself (it writes down what was in flight first), then run to its end.
Configurations, in one run:

* ``frontier-sqlite`` -- this tree with JOBDIR and its defaults (FRONTIER_RECRAWL 'due');
* ``frontier-sqlite-recrawl-off`` -- the same with FRONTIER_RECRAWL = 'off';
* ``frontier-redis`` -- this tree on a private redis-server (loopback, no persistence);
* ``scrapy`` -- Scrapy's own scheduler with JOBDIR (its defaults, no add-on);
* ``baseline-sqlite`` and ``baseline-sqlite-recrawl-off`` (with ``--baseline TREE``) --
  another checkout of scrapy-frontier (``git worktree add /tmp/base <commit>``) with JOBDIR,
  imported ahead of this one.

Reported per configuration: pages answered, items in the feed, pages without their item,
lines that are not valid JSON, repeated items and fetches, what was in flight at the kills,
and how many repeats went beyond it.

    python benchmarks/bench_kills.py --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from frontier_testweb import ServerProcess
from frontier_testweb.crawl import FRONTIER_ADDON
from frontier_testweb.kills import crawl_with_kills

WEB = ["--shape", "wide", "--hosts", "12", "--pages", "80", "--latency", "0.005", "0.02",
       "--seed", "36"]
RESULTS = Path(__file__).parent / "results"


@contextlib.contextmanager
def redis_server(port: int) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                                 "--save", "", "--appendonly", "no", "--dir", tmp],
                                stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait()


def settings_for(name: str, tmp: Path, redis_url: str | None) -> dict[str, Any]:
    feed = {str(tmp / "items.jsonl"): {"format": "jsonlines"}}
    if name == "scrapy":
        return {"JOBDIR": str(tmp / "job"), "FEEDS": feed}
    settings: dict[str, Any] = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.2,
                                "FEEDS": feed}
    if name == "frontier-redis":
        settings.update({"FRONTIER_BACKEND": "redis", "REDIS_URL": redis_url,
                         "FRONTIER_REDIS_IDLE_GRACE": 1.0, "FRONTIER_REDIS_LIVENESS": 1.0,
                         "FRONTIER_REDIS_KEY": f"{tmp.name}:frontier:",
                         "FRONTIER_REDIS_SEEN_KEY": f"{tmp.name}:seen:",
                         "FRONTIER_REDIS_HISTORY_KEY": f"{tmp.name}:history:"})
    else:
        settings["JOBDIR"] = str(tmp / "job")
    if name.endswith("recrawl-off"):
        settings["FRONTIER_RECRAWL"] = "off"
    return settings


def run(name: str, seed: int, redis_url: str | None, baseline: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-kills-") as d:
        tmp = Path(d)
        log = tmp / "server.jsonl"
        old = os.environ.get("PYTHONPATH")
        if name.startswith("baseline"):
            os.environ["PYTHONPATH"] = str(baseline)
        try:
            with ServerProcess(WEB, log_path=str(log)) as web:
                crawl = crawl_with_kills(web.start_urls, settings_for(name, tmp, redis_url),
                                         log, tmp / "items.jsonl", tmp, kills=20, seed=seed,
                                         cwd=tmp)  # not this tree: it would be imported first
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old
        row = {
            "config": name, "seed": seed, "kills": crawl.kills,
            "finished": crawl.final is not None and crawl.final.returncode == 0,
            "pages": len(crawl.pages), "items": sum(crawl.items.values()),
            "pages_without_item": len(crawl.missing_items), "bad_lines": crawl.bad_lines,
            "repeated_items": sum(crawl.extra_items.values()),
            "repeated_fetches": sum(crawl.extra_fetches.values()),
            "in_flight_at_kills": sum(crawl.in_flight.values()),
            "items_beyond_in_flight": sum(crawl.beyond_in_flight(crawl.extra_items).values()),
            "fetches_beyond_in_flight": sum(
                crawl.beyond_in_flight(crawl.extra_fetches).values()),
        }
        print(json.dumps(row), flush=True)
        return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", help="another scrapy-frontier checkout")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--port", type=int, default=6391)
    parser.add_argument("--only", nargs="*", help="run only these configurations")
    args = parser.parse_args()
    configs = ["frontier-sqlite", "frontier-sqlite-recrawl-off", "frontier-redis", "scrapy"]
    if args.baseline:
        configs += ["baseline-sqlite", "baseline-sqlite-recrawl-off"]
    if args.only:
        configs = [name for name in configs if name in args.only]
    with redis_server(args.port) as url:
        rows = [run(name, args.seed, url, args.baseline) for name in configs]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kills.json").write_text(json.dumps(rows, indent=1) + "\n")
    header = ("config", "pages", "items", "pages_without_item", "bad_lines", "repeated_items",
              "repeated_fetches", "in_flight_at_kills", "fetches_beyond_in_flight")
    lines = [" | ".join(header)] + [" | ".join(str(r[h]) for h in header) for r in rows]
    (RESULTS / "kills.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
