"""Capacity by measurement: connections per host found by measuring what the host serves.

One host of the loopback test web serves ``--pages`` pages of ``--latency`` seconds each with
*c* server workers (requests beyond *c* queue at the server, first come first served). Four
real Scrapy crawls of it, in the same run, for each *c* in ``--workers``:

* ``one connection``: the frontier's default (Mercator's rule, one connection per host);
* ``fixed 4``: the frontier with ``FRONTIER_HOST_POLICY`` giving the host 4 connections;
* ``AutoThrottle``: Scrapy's own scheduler with ``AUTOTHROTTLE_ENABLED`` and Scrapy's other
  defaults (``CONCURRENT_REQUESTS_PER_DOMAIN = 8``);
* ``capacity``: the frontier with ``FRONTIER_CAPACITY = 8``.

From the server's log: the pages per second (over the whole crawl, and over its second half,
once any ramp is over), the ratio to one connection, the service time (a worker's time on the
request) and the queueing at the server, against the idle service time (the one-connection
crawl's median), the most requests in flight, and whether each connection kept the rule
(``audit`` with the connections the arm allows), and the *load*: the share of what the host
can serve (c workers' time) that the crawl used, which Mercator's rule keeps near
``1/(1 + factor)`` (9 %) on every host. Targets: with c = 4 the capacity arm comes
close to 4 x the one-connection rate with the service time within 10 % of idle; with c = 1 it
stays at one connection (no queueing beyond the probes).

Run from any directory: ``python benchmarks/bench_capacity.py`` (about 10 minutes). Writes
``benchmarks/results/capacity.json`` and, with matplotlib, ``docs/_static/capacity.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "capacity.json"
PLOT = HERE.parent / "docs" / "_static" / "capacity.png"

FACTOR = 10.0
MAX_DELAY = 5.0


def arms(host: str) -> dict[str, tuple[dict[str, Any], int]]:
    """Settings of each arm, and the connections its audit allows."""
    frontier = {"ADDONS": FRONTIER_ADDON, "FRONTIER_DELAY_FACTOR": FACTOR,
                "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_MAX_DELAY": MAX_DELAY}
    return {
        "one connection": (frontier, 1),
        "fixed 4": ({**frontier, "FRONTIER_HOST_POLICY": {f"={host}": {"concurrency": 4}}}, 4),
        "AutoThrottle": ({"AUTOTHROTTLE_ENABLED": True}, 8),
        "capacity": ({**frontier, "FRONTIER_CAPACITY": 8}, 8),
    }


def in_flight(entries: list[Any]) -> list[tuple[float, int]]:
    """(time, requests open at the server) at each change."""
    events = sorted([(e.start, 1) for e in entries] + [(e.end, -1) for e in entries],
                    key=lambda x: (x[0], x[1]))
    out, open_ = [], 0
    for t, d in events:
        open_ += d
        out.append((t, open_))
    return out


def measure(entries: list[Any], allowed: int, idle: float | None,
            workers: int) -> dict[str, Any]:
    pages = sorted((e for e in entries if e.path != "/robots.txt"), key=lambda e: e.start)
    first, last = pages[0].start, pages[-1].end
    span = last - first
    half = first + span / 2
    late = [e for e in pages if e.start >= half]
    late_span = last - late[0].start if len(late) > 1 else span
    service = [e.service for e in pages]
    queued = [e.queued for e in pages]
    idle = idle if idle is not None else statistics.median(service)
    report = audit(entries, factor=FACTOR, min_delay=0.0, max_delay=MAX_DELAY,
                   connections=allowed)
    strict = audit(entries, factor=FACTOR, min_delay=0.0, max_delay=MAX_DELAY)
    return {
        "pages": len(pages),
        "seconds": span,
        "rate": len(pages) / span,
        "late_rate": len(late) / late_span,
        "service_mean": statistics.mean(service),
        "service_median": statistics.median(service),
        "service_over_idle": statistics.mean(service) / idle - 1.0,
        "queued_mean": statistics.mean(queued),
        "queued_max": max(queued),
        "queued_requests": sum(1 for q in queued if q > 0.25 * idle),
        # The share of what the host can serve that the crawl used (Mercator: 1/(1 + factor)).
        "load": sum(service) / (span * workers),
        "most_in_flight": max(n for _, n in in_flight(pages)),
        "polite_per_connection": report.polite,
        "overlaps_one_connection": strict.overlaps,
        "timeline": [(t - first, n) for t, n in in_flight(pages)],
    }


def run_arm(name: str, settings: dict[str, Any], allowed: int, workers: int, pages: int,
            latency: float, tmp: Path, idle: float | None) -> dict[str, Any]:
    log = tmp / f"{name.replace(' ', '_')}-{workers}.jsonl"
    web = ["--shape", "wide", "--hosts", "1", "--pages", str(pages), "--latency",
           str(latency), str(latency), "--workers", str(workers)]
    with ServerProcess(web, log_path=str(log)) as served:
        result = run_crawl(served.start_urls, settings, allowed_domains=served.allowed_domains,
                           workdir=tmp / f"crawl-{name.replace(' ', '_')}-{workers}",
                           timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"{name} (c={workers}) failed:\n{result.output[-3000:]}")
    row = measure(read_log(log), allowed, idle, workers)
    row["stats"] = {k: v for k, v in result.stats.items() if k.startswith("frontier/capacity")}
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 1])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {"pages": args.pages, "latency": args.latency,
                               "factor": FACTOR, "runs": {}}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for workers in args.workers:
            rows: dict[str, Any] = {}
            idle = None
            for name, (settings, allowed) in arms("127.0.1.1").items():
                row = run_arm(name, settings, allowed, workers, args.pages, args.latency,
                              tmp, idle)
                if name == "one connection":
                    idle = row["service_median"]
                rows[name] = row
                print(f"c={workers} {name:15s} {row['rate']:6.2f} pages/s "
                      f"(second half {row['late_rate']:6.2f}), service +"
                      f"{100 * row['service_over_idle']:5.1f} % of idle, queued mean "
                      f"{1000 * row['queued_mean']:6.2f} ms, {row['queued_requests']} waited, load "
                      f"{100 * row['load']:4.1f} %, "
                      f"at most {row['most_in_flight']} in flight, polite per connection "
                      f"{row['polite_per_connection']}", flush=True)
            base = rows["one connection"]
            for row in rows.values():
                row["ratio"] = row["rate"] / base["rate"]
                row["late_ratio"] = row["late_rate"] / base["late_rate"]
            results["runs"][str(workers)] = rows
    print()
    print(table(results))
    if not args.no_write:
        slim = json.loads(json.dumps(results))
        for rows in slim["runs"].values():
            for row in rows.values():
                row.pop("timeline")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(slim, indent=2) + "\n")
        print(f"wrote {RESULTS}")
        plot(results)
    return 0


def table(results: dict[str, Any]) -> str:
    lines = ["| c | arm | pages/s | x one | second half x one | service vs idle | waited "
             "| load | most in flight | polite per connection |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for workers, rows in results["runs"].items():
        for name, r in rows.items():
            lines.append(
                f"| {workers} | {name} | {r['rate']:.2f} | {r['ratio']:.2f} | "
                f"{r['late_ratio']:.2f} | {100 * r['service_over_idle']:+.1f} % | "
                f"{r['queued_requests']} | {100 * r['load']:.1f} % | {r['most_in_flight']} | "
                f"{'yes' if r['polite_per_connection'] else 'no'} |")
    return "\n".join(lines)


def plot(results: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib not installed: no plot")
        return
    runs = results["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(6.2 * len(runs), 4.2), squeeze=False)
    for ax, (workers, rows) in zip(axes.flat, runs.items(), strict=True):
        for name, row in rows.items():
            ts = [t for t, _ in row["timeline"]]
            ns = [n for _, n in row["timeline"]]
            ax.step(ts, ns, where="post", lw=0.8,
                    label=f"{name} ({row['ratio']:.2f}x, service "
                          f"{100 * row['service_over_idle']:+.0f} %)")
        ax.axhline(int(workers), color="black", ls="--", lw=0.8)
        ax.set_title(f"host with {workers} worker(s): requests open at the server")
        ax.set_xlabel("seconds")
        ax.set_ylabel("in flight")
        ax.legend(fontsize=7)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {PLOT}")


if __name__ == "__main__":
    sys.exit(main())
