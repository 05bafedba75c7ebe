"""Politeness and speed: scrapy-frontier beside Scrapy's own scheduler and AutoThrottle.

Every configuration crawls the same loopback test web (served by a separate
process) with CONCURRENT_REQUESTS=16; the server's request log is audited
against the frontier's rule (next contact >= end + 10 x fetch time).

    python benchmarks/bench_politeness.py                  # every web, all configurations
    python benchmarks/bench_politeness.py --web cpu --web stall
    python benchmarks/bench_politeness.py --web skewed --quick

Webs:

* ``skewed`` -- the biggest host's polite schedule dominates;
* ``wide`` -- keeping 16 slots busy while hosts rest dominates;
* ``cpu`` -- CPU-bound: 300 hosts x 15 pages answered in 10-30 ms, so the crawler's own
  CPU per page sets the pace (``--cpu-hosts`` / ``--cpu-pages`` scale it down);
* ``real`` -- real content: three real HTML documentation trees installed from Debian
  packages (python3-doc: 530 pages; sqlite3-doc: 766 pages, 30 MB; postgresql-doc-15:
  1,171 pages of 10-100 KB), which the
  benchmark installs itself when missing (``--no-install`` to skip), plus 18 generated
  hosts;
* ``stall`` -- a spider whose callback blocks the reactor 300 ms on every 10th page
  (heavy parsing, a synchronous pipeline), on 20 hosts x 30 pages answered in 20-50 ms.
  Its rests are compared with what the server's own times require: a rest is
  *inflated* when it is longer than 2 x the required rest plus the spider's pauses
  that fall inside it.

On ``cpu`` and ``real`` the frontier also runs with ``FRONTIER_RECRAWL = "off"``, and on
``cpu`` with a ``JOBDIR`` (a page history that is kept, with and without recrawl): the
cost of the history bookkeeping. On ``stall`` it also runs with
``FRONTIER_STALL_DISCOUNT = True``, which now only records the loop's stalls (no fetch time
is shortened by one, see docs/design.rst): the cost of the stall meter.

Each crawl's own CPU seconds (user + system of the crawler process) are reported beside its
makespan, and their ratio to the impolite crawl's of the same round: on a machine whose speed
drifts, makespans move more than CPU seconds. ``--repeat N`` runs N interleaved rounds and
reports medians.

The floor of each web is the largest of the per-host polite bound, the
concurrency bound, and the impolite crawl's makespan in the same run (what
this machine's CPU allows).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.audit import rest_report
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "politeness.json"
PLOT = HERE.parent / "docs" / "_static" / "politeness.png"

#: The real-content web's documentation trees: the Debian package that installs each.
DOC_TREES = {
    "/usr/share/doc/python3.11/html": "python3-doc",
    "/usr/share/doc/sqlite3": "sqlite3-doc",
    "/usr/share/doc/postgresql-doc-15/html": "postgresql-doc-15",
}

WEBS: dict[str, list[str]] = {
    "skewed": ["--shape", "skewed", "--hosts", "30", "--largest", "150",
               "--latency", "0.005", "0.040", "--seed", "1"],
    "wide": ["--shape", "wide", "--hosts", "300", "--pages", "8",
             "--latency", "0.050", "0.150", "--seed", "1"],
    "cpu": ["--shape", "wide", "--hosts", "300", "--pages", "15",
            "--latency", "0.010", "0.030", "--seed", "1"],
    "real": ["--shape", "wide", "--hosts", "18", "--pages", "20",
             "--latency", "0.005", "0.040", "--seed", "1",
             *[a for root in DOC_TREES for a in ("--docs-root", root)]],
    "stall": ["--shape", "wide", "--hosts", "20", "--pages", "30",
              "--latency", "0.020", "0.050", "--seed", "1"],
}
QUICK_WEBS: dict[str, list[str]] = {
    "skewed": ["--shape", "skewed", "--hosts", "10", "--largest", "30",
               "--latency", "0.005", "0.040", "--seed", "1"],
    "wide": ["--shape", "wide", "--hosts", "60", "--pages", "4",
             "--latency", "0.050", "0.150", "--seed", "1"],
    "cpu": ["--shape", "wide", "--hosts", "60", "--pages", "5",
            "--latency", "0.010", "0.030", "--seed", "1"],
    "real": ["--shape", "wide", "--hosts", "6", "--pages", "5",
             "--latency", "0.005", "0.040", "--seed", "1", "--docs"],
    "stall": ["--shape", "wide", "--hosts", "5", "--pages", "10",
              "--latency", "0.020", "0.050", "--seed", "1"],
}
#: The stalling spider: its callback blocks this long on every N-th page.
PAUSE_EVERY = 10
PAUSE_SECONDS = 0.3

CONCURRENCY = 16
COMMON: dict[str, Any] = {"CONCURRENT_REQUESTS": CONCURRENCY, "LOG_LEVEL": "WARNING"}
FRONTIER = {"ADDONS": FRONTIER_ADDON, "FRONTIER_DELAY_FACTOR": 10, "FRONTIER_MIN_DELAY": 0.0}
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
    "scrapy-frontier": FRONTIER,
    "frontier-recrawl-off": {**FRONTIER, "FRONTIER_RECRAWL": "off"},
    # A page history that is kept (JOBDIR: SQLite frontier and history.sqlite) ...
    "frontier-jobdir": {**FRONTIER, "JOBDIR": True},
    # ... against the same durable frontier without one.
    "frontier-jobdir-off": {**FRONTIER, "JOBDIR": True, "FRONTIER_RECRAWL": "off"},
    "frontier-discount": {**FRONTIER, "FRONTIER_STALL_DISCOUNT": True},
}
#: Which configurations each web runs by default (impolite always: the floor needs it).
WEB_CONFIGS: dict[str, list[str]] = {
    "skewed": ["impolite", "scrapy-default", "autothrottle", "scrapy-frontier"],
    "wide": ["impolite", "scrapy-default", "autothrottle", "scrapy-frontier"],
    "cpu": ["impolite", "autothrottle", "scrapy-frontier", "frontier-recrawl-off",
            "frontier-jobdir", "frontier-jobdir-off"],
    "real": ["impolite", "autothrottle", "scrapy-frontier", "frontier-recrawl-off"],
    "stall": ["impolite", "autothrottle", "scrapy-frontier", "frontier-discount"],
}
FACTOR = 10.0


def ensure_doc_trees(install: bool) -> None:
    """Install the real-content web's documentation packages (apt) if a tree is missing."""
    missing = sorted({pkg for root, pkg in DOC_TREES.items() if not Path(root).is_dir()})
    if not missing:
        return
    if not install or shutil.which("apt-get") is None:
        raise SystemExit(f"the real-content web needs {', '.join(missing)} installed "
                         f"(apt-get install -y {' '.join(missing)})")
    print(f"installing {', '.join(missing)} ...", file=sys.stderr, flush=True)
    env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive"]
    subprocess.run([*env_cmd, "apt-get", "install", "-y", "-qq", *missing], check=False)
    still = [root for root in DOC_TREES if not Path(root).is_dir()]
    if still:
        subprocess.run([*env_cmd, "apt-get", "update", "-qq"], check=True)
        subprocess.run([*env_cmd, "apt-get", "install", "-y", "-qq", *missing], check=True)


def run_one(web_name: str, web_args: list[str], settings: dict[str, Any],
            workdir: Path) -> dict[str, Any]:
    log = workdir / "server.jsonl"
    settings = {**COMMON, **settings}
    if settings.get("JOBDIR") is True:
        settings["JOBDIR"] = str(workdir / "job")
    stalling = web_name == "stall"
    pauses_path = workdir / "pauses.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        # The crawl's own CPU (user + system), from the children this process has reaped:
        # the crawl ends, and is reaped, while the server still runs.
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = run_crawl(
            web.start_urls,
            settings,
            allowed_domains=web.allowed_domains,
            timeout=900,
            workdir=workdir / "crawl",
            pause_every=PAUSE_EVERY if stalling else 0,
            pause_seconds=PAUSE_SECONDS if stalling else 0.0,
            pause_log=pauses_path if stalling else None,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"crawl failed:\n{result.output[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    entries = read_log(log)
    report = audit(entries, expected=web.expected, factor=FACTOR, min_delay=0.0,
                   concurrency=CONCURRENCY)
    row = report.as_dict()
    pauses: list[tuple[float, float]] = []
    if stalling and pauses_path.exists():
        pauses = [(float(a), float(b)) for a, b in
                  (json.loads(line) for line in pauses_path.read_text().splitlines() if line)]
    rests = rest_report(entries, factor=FACTOR, pauses=pauses)
    row["rests"] = rests.as_dict()
    row["pauses"] = len(pauses)
    row["stats"] = {k: v for k, v in result.stats.items() if k.startswith("frontier/")}
    row["crawler_cpu"] = cpu
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--web", choices=sorted(WEBS), action="append")
    parser.add_argument("--config", choices=sorted(CONFIGS), action="append",
                        help="run only these configurations (impolite always runs)")
    parser.add_argument("--quick", action="store_true", help="small webs, for a smoke run")
    parser.add_argument("--cpu-hosts", type=int, help="scale the cpu web down (default 300)")
    parser.add_argument("--cpu-pages", type=int, help="pages per cpu-web host (default 15)")
    parser.add_argument("--no-install", action="store_true",
                        help="do not apt-get install the real-content web's doc packages")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of every configuration, interleaved; medians are "
                             "reported (makespans on a shared machine vary by ~10%%)")
    args = parser.parse_args(argv)
    webs = {k: list(v) for k, v in (QUICK_WEBS if args.quick else WEBS).items()}
    if args.cpu_hosts:
        webs["cpu"][webs["cpu"].index("--hosts") + 1] = str(args.cpu_hosts)
    if args.cpu_pages:
        webs["cpu"][webs["cpu"].index("--pages") + 1] = str(args.cpu_pages)
    chosen = args.web or list(webs)
    if "real" in chosen and not args.quick:
        ensure_doc_trees(not args.no_install)
    results: dict[str, Any] = {"webs": {}}
    if RESULTS.exists() and not args.quick:
        results = json.loads(RESULTS.read_text())  # keep the webs not run this time
    results.update({"generated": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": args.quick})
    for web_name in chosen:
        configs = [c for c in WEB_CONFIGS[web_name] if not args.config or c in args.config]
        if "impolite" not in configs:
            configs = ["impolite", *configs]  # the floor needs it
        rounds: list[dict[str, Any]] = []
        for r in range(args.repeat):
            # Each round starts one configuration later: slow drift in the machine's
            # load does not always fall on the same configuration.
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            runs: dict[str, Any] = {}
            for name in order:
                with tempfile.TemporaryDirectory(prefix=f"bench-{web_name}-{name}-") as tmp:
                    print(f"[{web_name}] round {r + 1}/{args.repeat}: {name} ...",
                          file=sys.stderr, flush=True)
                    runs[name] = run_one(web_name, webs[web_name], CONFIGS[name], Path(tmp))
            impolite_r = runs["impolite"]["makespan"]
            impolite_cpu = runs["impolite"]["crawler_cpu"]
            for row in runs.values():
                row["floor"] = max(row["host_bound"], row["concurrency_bound"], impolite_r)
                row["ratio"] = row["makespan"] / row["floor"]
                row["x_impolite"] = row["makespan"] / impolite_r
                row["cpu_x_impolite"] = row["crawler_cpu"] / impolite_cpu if impolite_cpu else 0.0
            rounds.append(runs)
        rows = {name: combine_rounds([runs[name] for runs in rounds]) for name in configs}
        impolite = rows["impolite"]["makespan"]
        any_row = next(iter(rows.values()))
        floor = rows["impolite"]["floor"]
        results["webs"][web_name] = {"args": webs[web_name], "rows": rows, "floor": floor,
                                     "generated": results["generated"]}
        print_table(web_name, rows, any_row, impolite, floor)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2, default=str))
        print(f"\nwrote {RESULTS}")
        if not args.no_plot:
            plot(results)
    return 0


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def combine_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's rounds as one row: the round of median makespan, with the
    medians of the per-round ratios (each against that round's own impolite crawl),
    every round's makespan, and violations and inflated rests summed over all rounds."""
    by_makespan = sorted(runs, key=lambda row: row["makespan"])
    row = dict(by_makespan[(len(runs) - 1) // 2])
    row["rounds"] = len(runs)
    row["makespans"] = [round(r["makespan"], 3) for r in runs]
    for key in ("makespan", "ratio", "x_impolite", "floor", "crawler_cpu", "cpu_x_impolite"):
        row[key] = _median([r[key] for r in runs])
    for key in ("overlaps", "short_gaps", "duplicates", "missing"):
        row[key] = sum(r[key] for r in runs)
    row["coverage"] = min(r["coverage"] for r in runs)
    rests = dict(row["rests"])
    rests["rests"] = sum(r["rests"]["rests"] for r in runs)
    rests["inflated"] = sum(r["rests"]["inflated"] for r in runs)
    rests["inflated_share"] = rests["inflated"] / rests["rests"] if rests["rests"] else 0.0
    rests["median_ratio"] = _median([r["rests"]["median_ratio"] for r in runs])
    row["rests"] = rests
    return row


def print_table(web: str, rows: dict[str, Any], any_row: dict[str, Any], impolite: float,
                floor: float) -> None:
    rounds = any_row.get("rounds", 1)
    print(f"\n== {web} web: host bound {any_row['host_bound']:.2f} s, concurrency bound "
          f"{any_row['concurrency_bound']:.2f} s, impolite {impolite:.2f} s -> floor {floor:.2f} s"
          + (f" (medians of {rounds} interleaved rounds; violations and inflated rests summed)"
             if rounds > 1 else ""))
    print(f"{'configuration':<22}{'requests':>9}{'overlaps':>9}{'short gaps':>11}"
          f"{'coverage':>9}{'dups':>6}{'makespan':>10}{'x floor':>9}{'x impol.':>9}"
          f"{'inflated':>10}{'rest/req':>9}{'CPU s':>8}{'CPU x imp.':>11}")
    for name, row in rows.items():
        rests = row["rests"]
        inflated = f"{100 * rests['inflated_share']:.1f}%"
        print(f"{name:<22}{row['requests']:>9}{row['overlaps']:>9}{row['short_gaps']:>11}"
              f"{row['coverage']:>9.3f}{row['duplicates']:>6}{row['makespan']:>9.2f}s"
              f"{row['ratio']:>9.2f}{row['x_impolite']:>9.3f}{inflated:>10}"
              f"{rests['median_ratio']:>9.2f}{row.get('crawler_cpu', 0.0):>8.2f}"
              f"{row.get('cpu_x_impolite', 0.0):>11.3f}")
        if rounds > 1:
            spread = ", ".join(f"{m:.2f}" for m in row["makespans"])
            print(f"{'':<22}makespans by round: {spread}")
    frontier = rows.get("scrapy-frontier")
    if frontier is None:
        return
    polite = frontier["overlaps"] == 0 and frontier["short_gaps"] == 0
    verdict = {True: "MET", False: "MISSED"}
    if web == "cpu":
        print(f"target (frontier <= 1.05 x impolite): {verdict[frontier['x_impolite'] <= 1.05]}"
              f" ({frontier['x_impolite']:.3f}; the crawler's CPU: "
              f"{frontier['cpu_x_impolite']:.3f} x impolite's)")
        for on, off in (("scrapy-frontier", "frontier-recrawl-off"),
                        ("frontier-jobdir", "frontier-jobdir-off")):
            if on in rows and off in rows:
                cost = rows[on]["makespan"] / rows[off]["makespan"] - 1
                print(f"history cost ({on} vs {off}) <= 5%: {verdict[cost <= 0.05]} "
                      f"({100 * cost:+.1f}%)")
    elif web == "stall":
        share = frontier["rests"]["inflated_share"]
        print(f"target (<= 1% of rests inflated, 0 violations): "
              f"{verdict[share <= 0.01 and polite]} ({100 * share:.2f}%)")
    else:
        target = 1.10
        print(f"target (0 overlaps, 0 short gaps, <= {target:.2f} x floor): "
              f"{verdict[polite and frontier['ratio'] <= target]}")


def plot(results: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib not installed: no plot")
        return
    webs = list(results["webs"])
    cols = min(3, len(webs))
    nrows = (len(webs) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.8 * cols, 4.2 * nrows), squeeze=False)
    for ax in axes.flat[len(webs):]:
        ax.set_visible(False)
    for ax, web in zip(axes.flat, webs, strict=False):
        rows = results["webs"][web]["rows"]
        names = [n for n in rows if n != "impolite"] + ["impolite"]
        ratios = [rows[n]["ratio"] for n in names]
        bad = [rows[n]["overlaps"] + rows[n]["short_gaps"] for n in names]
        colors = ["tab:green" if b == 0 else "tab:red" for b in bad]
        bars = ax.bar(names, ratios, color=colors)
        for bar, b, n in zip(bars, bad, names, strict=True):
            label = f"{b} viol."
            if web == "stall" and "rests" in rows[n]:
                label += f"\n{100 * rows[n]['rests']['inflated_share']:.1f}% infl."
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
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
