"""Incremental recrawl end to end: repeated ``scrapy crawl`` runs over pages that change.

Two test webs with the same seed start together (so their pages change at the
same moments, as Poisson processes with gamma-distributed rates; some pages are
also noisy: a line that differs on every fetch). Each is crawled in rounds, one
``scrapy crawl`` process per round, every ``--period`` seconds:

* ``recrawl`` -- scrapy-frontier with ``JOBDIR`` and ``FRONTIER_RECRAWL = "due"``
  (the default predictor, ``FRONTIER_RECRAWL_INITIAL`` = the period): each run
  fetches the pages that are due, conditionally;
* ``everything`` -- the same frontier with ``FRONTIER_RECRAWL = "off"`` and no
  job directory: each run fetches every page again, as a crawl without a page
  history does;
* ``signals`` -- ``recrawl``, plus ``FRONTIER_SITEMAPS`` naming the sitemap index of each
  host that publishes one: the frontier reads them (and the sitemaps they name) every run,
  their claims make changed pages due and, once a host's claims have proved right, let its
  unchanged pages wait (docs/signals.rst).

The three configs crawl at the same moments (their rounds run side by side), so that a slow
round of one does not shift the others' schedule.

Every server publishes sitemaps (``serve --signals``): by host number, truthful, liar (lastmod
never moves), noisy (lastmod always now) or silent; the table breaks freshness and fetches
down by kind. Sitemap fetches are counted apart and in the totals.

From each server's log and the ground truth of its change model
(:mod:`frontier_testweb.changes`), sampled every 0.25 s over the whole
run: **freshness** (share of pages whose copy -- the version of the last 200, or
confirmed by a 304 -- equals the live page), **age** (time since the live page
first changed after the copy, 0 when fresh), plus fetches, 304s and bytes sent.

    python benchmarks/bench_recrawl_e2e.py             # 12 rounds, 5 s apart
    python benchmarks/bench_recrawl_e2e.py --quick     # 3 rounds (smoke)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from frontier_testweb import ServerProcess, read_log
from frontier_testweb.changes import GroundTruth
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from frontier_testweb.log import LogEntry

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "recrawl_e2e.json"
PLOT = HERE.parent / "docs" / "_static" / "recrawl_e2e.png"

WEB = ["--shape", "wide", "--hosts", "12", "--pages", "40", "--latency", "0.005", "0.02",
       "--cross-links", "0", "--seed", "3", "--change-rate", "0.02", "--rate-shape", "0.5",
       "--noisy-fraction", "0.3", "--signals"]
NAMES = ("everything", "recrawl", "signals")
KINDS = ("truthful", "liar", "noisy", "silent")
COMMON: dict[str, Any] = {"ADDONS": FRONTIER_ADDON, "LOG_LEVEL": "WARNING",
                          "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_DELAY_FACTOR": 2.0}


def settings_for(name: str, job: Path, period: float,
                 sitemaps: list[str]) -> dict[str, Any]:
    if name in ("recrawl", "signals"):
        recrawl = {**COMMON, "JOBDIR": str(job), "FRONTIER_RECRAWL": "due",
                   "FRONTIER_RECRAWL_INITIAL": period, "FRONTIER_RECRAWL_MIN": period / 2,
                   "FRONTIER_RECRAWL_MAX": 100 * period}
        return {**recrawl, "FRONTIER_SITEMAPS": sitemaps} if name == "signals" else recrawl
    return {**COMMON, "FRONTIER_RECRAWL": "off"}


def measure(entries: list[LogEntry], truth: GroundTruth, pages: set[tuple[str, str]],
            t0: float, t1: float, step: float = 0.25) -> dict[str, Any]:
    """Time-averaged freshness and age of the crawler's copies over [t0, t1]."""
    fetches = sorted((e for e in entries if (e.host, e.path) in pages), key=lambda e: e.start)
    copy: dict[tuple[str, str], tuple[int, float]] = {}  # page -> (version, since)
    i = 0
    fresh_sum = age_sum = 0.0
    samples = 0
    series: list[tuple[float, float]] = []
    t = t0
    while t <= t1:
        while i < len(fetches) and fetches[i].end <= t:
            e = fetches[i]
            key = (e.host, e.path)
            if e.status == 200:
                copy[key] = (e.version, e.start)
            elif e.status == 304 and key in copy:
                copy[key] = (copy[key][0], e.start)  # confirmed current when served
            i += 1
        fresh = 0
        for key in pages:
            held = copy.get(key)
            if held is None:
                continue  # not fetched yet: counted stale, age 0 (no copy to age)
            version, since = held
            if truth.version(key[0], key[1], t) == version:
                fresh += 1
            else:
                changes = truth.change_times(key[0], key[1], since, t)
                age_sum += t - changes[0] if changes else 0.0
        fresh_sum += fresh / len(pages)
        series.append((t - t0, fresh / len(pages)))
        samples += 1
        t += step
    ok = [e for e in fetches if e.start >= t0 - 1e-9]
    return {
        "freshness": fresh_sum / samples,
        "age_s": age_sum / (samples * len(pages)),
        "fetches": len(ok),
        "full_responses": sum(1 for e in ok if e.status == 200),
        "not_modified": sum(1 for e in ok if e.status == 304),
        "bytes": sum(e.bytes for e in ok),
        "series": series,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--period", type=float, default=5.0, help="seconds between rounds")
    parser.add_argument("--quick", action="store_true", help="3 rounds, nothing written")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    tmp = Path(tempfile.mkdtemp(prefix="bench-recrawl-"))
    names = NAMES
    logs = {n: tmp / f"{n}.jsonl" for n in names}
    servers = {n: ServerProcess(WEB, log_path=str(logs[n])).start() for n in names}
    try:
        truths = {n: GroundTruth.from_announcement(servers[n].info) for n in names}
        pages = {n: {(h, p) for h, p in servers[n].expected} for n in names}
        info = servers["signals"].info
        kind_of = {h["address"]: h.get("signals", "silent") for h in info["hosts"]}
        sitemaps = [f"http://{h['address']}:{info['port']}/sitemap.xml" for h in info["hosts"]
                    if h.get("signals", "silent") != "silent"]

        def crawl_round(n: str, r: int) -> str | None:
            """One config's round: None, or the crawl's output if it failed."""
            started = time.monotonic()
            result = run_crawl(servers[n].start_urls,
                               settings_for(n, tmp / f"job-{n}", args.period, sitemaps),
                               allowed_domains=servers[n].allowed_domains,
                               workdir=tmp / f"crawl-{n}-{r}", timeout=120)
            if result.returncode != 0:
                return result.output[-3000:]
            got = result.stats.get("downloader/response_count", 0)
            print(f"round {r + 1}/{rounds} {n:>10}: {got} responses "
                  f"in {time.monotonic() - started:.1f} s", flush=True)
            return None

        begin = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for r in range(rounds):
                time.sleep(max(0.0, begin + r * args.period - time.monotonic()))
                failures = [out for out in pool.map(crawl_round, names, [r] * len(names))
                            if out is not None]
                if failures:
                    print(failures[0], file=sys.stderr)
                    return 2
        end = time.monotonic()
    finally:
        for s in servers.values():
            s.stop()
    rows: dict[str, Any] = {}
    by_kind: dict[str, dict[str, Any]] = {}
    for n in names:
        entries = read_log(logs[n])
        first_done = min(e.end for e in entries if e.path.startswith("/p/"))
        # Measure from the end of the first round's first fetch to the end of the run.
        t0 = max(first_done, begin)
        rows[n] = measure(entries, truths[n], pages[n], t0, end)
        signal_fetches = [e for e in entries if e.path.startswith("/sitemap")
                          and e.start >= t0 - 1e-9]
        rows[n]["sitemap_fetches"] = len(signal_fetches)
        rows[n]["total_fetches"] = rows[n]["fetches"] + len(signal_fetches)
        rows[n]["bytes"] += sum(e.bytes for e in signal_fetches)
        by_kind[n] = {}
        for kind in KINDS:
            subset = {(h, p) for h, p in pages[n] if kind_of.get(h) == kind}
            if subset:
                row = measure(entries, truths[n], subset, t0, end)
                by_kind[n][kind] = row
    print()
    print(f"{'config':>11} {'freshness':>9} {'age s':>7} {'fetches':>7} {'200':>5} "
          f"{'304':>5} {'sitemaps':>8} {'bytes':>9}")
    for n, row in rows.items():
        print(f"{n:>11} {row['freshness']:9.3f} {row['age_s']:7.2f} {row['total_fetches']:7d} "
              f"{row['full_responses']:5d} {row['not_modified']:5d} "
              f"{row['sitemap_fetches']:8d} {row['bytes']:9d}")
    print(f"\n{'by host kind':>14} " + " ".join(f"{n:>21}" for n in names))
    for kind in KINDS:
        cells = []
        for n in names:
            row = by_kind[n].get(kind)
            cells.append("-".rjust(21) if row is None else
                         f"{row['freshness']:.3f} / {row['fetches']:4d} fetches".rjust(21))
        print(f"{kind:>14} " + " ".join(cells))
    ev = rows["everything"]
    for n in ("recrawl", "signals"):
        rc = rows[n]
        print(f"\n{n}: {rc['bytes'] / ev['bytes']:.2f} x the bytes and "
              f"{rc['total_fetches'] / ev['total_fetches']:.2f} x the fetches of re-crawling "
              f"everything, freshness {rc['freshness']:.3f} vs {ev['freshness']:.3f}")
    if args.quick:
        return 0
    results = {"generated": time.strftime("%Y-%m-%d %H:%M:%S"), "web": WEB,
               "rounds": rounds, "period": args.period,
               "rows": {n: {k: v for k, v in r.items() if k != "series"}
                        for n, r in rows.items()},
               "by_kind": {n: {kind: {k: v for k, v in row.items() if k != "series"}
                               for kind, row in kinds.items()}
                           for n, kinds in by_kind.items()}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"wrote {RESULTS}")
    if not args.no_plot:
        plot(rows, by_kind)
    return 0


def plot(rows: dict[str, Any], by_kind: dict[str, dict[str, Any]]) -> None:
    """Freshness over time: every host, and each kind of host, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("every host", rows)] + [
        (f"{kind} hosts", {n: by_kind[n][kind] for n in rows}) for kind in KINDS]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.2 * len(panels)), sharex=True)
    for ax, (title, series_of) in zip(axes, panels, strict=True):
        for n, row in series_of.items():
            xs = [x for x, _ in row["series"]]
            ys = [y for _, y in row["series"]]
            fetches = row.get("total_fetches", row["fetches"])
            ax.plot(xs, ys, label=f"{n} ({fetches} fetches)")
        ax.set_ylabel("freshness")
        ax.set_ylim(0, 1.02)
        ax.set_title(title, fontsize=10)
        ax.legend(loc="lower left", fontsize=8)
    axes[-1].set_xlabel("seconds since the first round")
    fig.suptitle("Repeated crawls of a changing test web")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {PLOT}")


if __name__ == "__main__":
    sys.exit(main())
