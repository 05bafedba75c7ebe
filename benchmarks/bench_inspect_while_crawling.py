"""Does ``scrapy frontier`` slow a running crawl? The same SQLite crawl of the test web,
with and without ``scrapy frontier status`` and ``hosts`` run back to back for its whole
length, in alternating rounds of one run.

    python benchmarks/bench_inspect_while_crawling.py [--rounds 3]

Prints, per round, the crawl's elapsed time and its dispatch lateness (how late requests
left after their host's rest ended), then the medians per mode.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from frontier_testweb import ServerProcess
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl

WEB = ["--shape", "wide", "--hosts", "6", "--pages", "25", "--latency", "0.005", "0.01",
       "--seed", "11"]


MODES = ("none", "inspect", "scrapy_version")
"""none: nothing beside the crawl; inspect: ``scrapy frontier status`` and ``hosts`` back to
back; scrapy_version: ``scrapy version`` back to back, the same process start-up without
reading the state (tells the reads' cost from the CPU that starting Scrapy takes)."""


def one(tmp: Path, mode: str) -> dict[str, Any]:
    job = tmp / "job"
    settings = {"ADDONS": FRONTIER_ADDON, "JOBDIR": str(job), "FRONTIER_MIN_DELAY": 0.1,
                "LOG_LEVEL": "WARNING"}
    reads = 0
    with ServerProcess(WEB, log_path=str(tmp / "server.jsonl")) as web:
        out: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: out.setdefault("r", run_crawl(
            web.start_urls, settings, allowed_domains=web.allowed_domains,
            workdir=tmp / "crawl", timeout=300)))
        thread.start()
        for _ in range(1000):  # bounded; the crawl takes about 15 s
            if not thread.is_alive():
                break
            if mode != "none":
                for sub in ("status", "hosts"):
                    argv = (["frontier", sub, "-s", f"JOBDIR={job}"] if mode == "inspect"
                            else ["version"])
                    subprocess.run([sys.executable, "-m", "scrapy.cmdline", *argv],
                                   capture_output=True, timeout=60, cwd="/tmp")
                    reads += 1
            else:
                time.sleep(0.2)
        thread.join()
    stats = out["r"].stats
    return {"mode": mode, "elapsed_s": round(stats["harness/elapsed"], 2),
            "fetched": stats["frontier/dequeued"], "reads": reads,
            "lateness_ms_mean": stats.get("frontier/dispatch_lateness_ms/mean"),
            "lateness_ms_max": stats.get("frontier/dispatch_lateness_ms/max")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for i in range(args.rounds):
        for mode in MODES:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(one(Path(tmp), mode))
                print(json.dumps({"round": i, **rows[-1]}), flush=True)
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        print(json.dumps({"mode": mode,
                          "elapsed_s_median": statistics.median(r["elapsed_s"] for r in mine),
                          "lateness_ms_mean_median": statistics.median(
                              r["lateness_ms_mean"] for r in mine),
                          "reads": sum(r["reads"] for r in mine)}))


if __name__ == "__main__":
    main()
