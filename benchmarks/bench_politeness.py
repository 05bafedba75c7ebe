"""Politeness and speed: scrapy-frontier beside Scrapy's own scheduler and AutoThrottle.

Every configuration crawls the same loopback test web (served by a separate
process) with CONCURRENT_REQUESTS=16; the server's request log is audited
against the frontier's rule (next contact >= end + 10 x fetch time).

    python benchmarks/bench_politeness.py            # both webs, all configurations
    python benchmarks/bench_politeness.py --web skewed --quick

The floor of each web is the largest of the per-host polite bound, the
concurrency bound, and the impolite crawl's makespan in the same run (what
this machine's CPU allows).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scrapy_frontier.testweb import ServerProcess, audit, read_log
from scrapy_frontier.testweb.crawl import FRONTIER_ADDON, run_crawl

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "politeness.json"
PLOT = HERE.parent / "docs" / "_static" / "politeness.png"

WEBS: dict[str, list[str]] = {
    # The biggest host's polite schedule dominates.
    "skewed": ["--shape", "skewed", "--hosts", "30", "--largest", "150",
               "--latency", "0.005", "0.040", "--seed", "1"],
    # Keeping 16 slots busy while hosts rest dominates.
    "wide": ["--shape", "wide", "--hosts", "300", "--pages", "8",
             "--latency", "0.050", "0.150", "--seed", "1"],
}
QUICK_WEBS: dict[str, list[str]] = {
    "skewed": ["--shape", "skewed", "--hosts", "10", "--largest", "30",
               "--latency", "0.005", "0.040", "--seed", "1"],
    "wide": ["--shape", "wide", "--hosts", "60", "--pages", "4",
             "--latency", "0.050", "0.150", "--seed", "1"],
}

COMMON = {"CONCURRENT_REQUESTS": 16, "LOG_LEVEL": "WARNING"}
CONFIGS: dict[str, dict[str, Any]] = {
    "impolite": {"CONCURRENT_REQUESTS_PER_DOMAIN": 16, "DOWNLOAD_DELAY": 0},
    "scrapy-default": {"CONCURRENT_REQUESTS_PER_DOMAIN": 1, "DOWNLOAD_DELAY": 0},
    "autothrottle": {
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": True,
        # About 10 x latency between requests to a host, as the frontier's rule.
        "AUTOTHROTTLE_TARGET_CONCURRENCY": 0.1,
        # Scrapy's 5 s default start delay would only measure the ramp-down.
        "AUTOTHROTTLE_START_DELAY": 0.1,
        "AUTOTHROTTLE_MAX_DELAY": 60,
    },
    "scrapy-frontier": {
        "ADDONS": FRONTIER_ADDON,
        "FRONTIER_DELAY_FACTOR": 10,
        "FRONTIER_MIN_DELAY": 0.0,
    },
}
FACTOR = 10.0


def run_one(web_args: list[str], settings: dict[str, Any], workdir: Path) -> dict[str, Any]:
    log = workdir / "server.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        result = run_crawl(
            web.start_urls,
            {**COMMON, **settings},
            allowed_domains=web.allowed_domains,
            timeout=900,
            workdir=workdir / "crawl",
        )
    if result.returncode != 0:
        raise RuntimeError(f"crawl failed:\n{result.output[-3000:]}")
    report = audit(read_log(log), expected=web.expected, factor=FACTOR, min_delay=0.0,
                   concurrency=COMMON["CONCURRENT_REQUESTS"])
    row = report.as_dict()
    row["stats"] = {k: v for k, v in result.stats.items() if k.startswith("frontier/")}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--web", choices=sorted(WEBS), action="append")
    parser.add_argument("--config", choices=sorted(CONFIGS), action="append")
    parser.add_argument("--quick", action="store_true", help="small webs, for a smoke run")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    webs = QUICK_WEBS if args.quick else WEBS
    configs = args.config or list(CONFIGS)
    if "impolite" not in configs:
        configs = ["impolite", *configs]  # the floor needs it
    results: dict[str, Any] = {"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "quick": args.quick, "webs": {}}
    for web_name in args.web or list(webs):
        rows: dict[str, Any] = {}
        for name in configs:
            with tempfile.TemporaryDirectory(prefix=f"bench-{web_name}-{name}-") as tmp:
                print(f"[{web_name}] {name} ...", file=sys.stderr, flush=True)
                rows[name] = run_one(webs[web_name], CONFIGS[name], Path(tmp))
        impolite = rows["impolite"]["makespan"]
        any_row = next(iter(rows.values()))
        floor = max(any_row["host_bound"], any_row["concurrency_bound"], impolite)
        for row in rows.values():
            row["floor"] = floor
            row["ratio"] = row["makespan"] / floor
        results["webs"][web_name] = {"args": webs[web_name], "rows": rows, "floor": floor}
        print_table(web_name, rows, any_row, impolite, floor)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2, default=str))
        print(f"\nwrote {RESULTS}")
        if not args.no_plot:
            plot(results)
    return 0


def print_table(web: str, rows: dict[str, Any], any_row: dict[str, Any], impolite: float,
                floor: float) -> None:
    print(f"\n== {web} web: host bound {any_row['host_bound']:.2f} s, concurrency bound "
          f"{any_row['concurrency_bound']:.2f} s, impolite {impolite:.2f} s -> floor {floor:.2f} s")
    print(f"{'configuration':<16}{'requests':>9}{'overlaps':>9}{'short gaps':>11}"
          f"{'coverage':>9}{'dups':>6}{'makespan':>10}{'x floor':>9}")
    for name, row in rows.items():
        print(f"{name:<16}{row['requests']:>9}{row['overlaps']:>9}{row['short_gaps']:>11}"
              f"{row['coverage']:>9.3f}{row['duplicates']:>6}{row['makespan']:>9.2f}s"
              f"{row['ratio']:>9.2f}")
    frontier = rows.get("scrapy-frontier")
    if frontier:
        ok = (frontier["overlaps"] == 0 and frontier["short_gaps"] == 0
              and frontier["ratio"] <= 1.10)
        print(f"target (0 overlaps, 0 short gaps, <= 1.10 x floor): {'MET' if ok else 'MISSED'}")


def plot(results: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib not installed: no plot")
        return
    webs = list(results["webs"])
    fig, axes = plt.subplots(1, len(webs), figsize=(5.5 * len(webs), 4), squeeze=False)
    for ax, web in zip(axes[0], webs, strict=False):
        rows = results["webs"][web]["rows"]
        names = [n for n in rows if n != "impolite"] + ["impolite"]
        ratios = [rows[n]["ratio"] for n in names]
        bad = [rows[n]["overlaps"] + rows[n]["short_gaps"] for n in names]
        colors = ["tab:green" if b == 0 else "tab:red" for b in bad]
        bars = ax.bar(names, ratios, color=colors)
        for bar, b in zip(bars, bad, strict=True):
            ax.annotate(f"{b} viol.", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhline(1.10, color="gray", lw=0.8, ls="--")
        ax.set_title(f"{web} web (floor {results['webs'][web]['floor']:.1f} s)")
        ax.set_ylabel("makespan / floor")
        ax.tick_params(axis="x", labelrotation=20)
    fig.suptitle("Politeness violations (red) and makespan against the floor")
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {PLOT}")


if __name__ == "__main__":
    sys.exit(main())
