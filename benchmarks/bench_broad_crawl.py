"""Broad crawl: thousands of hosts, robots.txt obeyed, high concurrency -- the frontier's
three backends beside Scrapy's own scheduler and AutoThrottle, in one run.

The test web (one process) serves ``--hosts`` hosts (default 10,000) as named virtual hosts,
``h0.web.test``, ``h1.web.test``, ..., spread over ``--addresses`` loopback addresses (default
8) and found by the Host header; the crawl resolves the names with
``frontier_testweb.resolver.AliasResolver`` (10 ms per lookup). Host *i* has
``max(1, round(largest / (i + 1)))`` pages (Zipf, ``--largest``, default 200), answered in
5-40 ms; every page links to its two tree children, two random pages of its host and the roots
of two random other hosts. Every host serves robots.txt (allowing everything), and the server
closes a connection idle for 15 s (a keep-alive timeout between Apache's 5 s and nginx's 75 s).

Every configuration starts from every host's root, follows every link, obeys robots.txt, does
not retry, at ``--concurrency`` requests in flight (default 128):

* ``frontier-memory`` -- the add-on, memory backend (rests of 10 x the fetch time);
* ``frontier-sqlite`` -- the same with a ``JOBDIR`` (SQLite frontier and page history);
* ``frontier-redis-2`` -- two worker processes sharing one redis-server on 127.0.0.1
  (``FRONTIER_BACKEND = "redis"``), each at half the concurrency;
* ``scrapy-per-domain`` -- Scrapy's scheduler, ``CONCURRENT_REQUESTS_PER_DOMAIN = 1``,
  ``DOWNLOAD_DELAY = 0``;
* ``autothrottle`` -- the same with AutoThrottle (target concurrency 0.1: about 10 x the
  latency between requests to a host, as the frontier's rule);
* ``scrapy-dapq`` (not run by default) -- ``scrapy-per-domain`` with
  ``DownloaderAwarePriorityQueue``, which Scrapy's broad-crawl page recommends.

Reported per configuration (``docs/benchmarks.rst``, *Broad crawl*, says exactly how):

* wall time: the crawl process's start to its exit (the slower worker's, for two), and the
  makespan in the server's log;
* CPU per page: the crawl processes' own user + system seconds (``getrusage`` in the crawl
  process as it ends, less what it had used before the crawler was made: the interpreter's
  start and Scrapy's imports), over the pages the server answered them (robots.txt left out),
  and the redis-server's CPU beside it;
* the frontier's share of that CPU, from one more crawl of each frontier configuration under
  cProfile (every thread timed by its own CPU clock): the own time (``tottime``) of the
  functions in ``scrapy_frontier/`` over the total own time, and the same with the C functions
  they call directly (SQLite, heapq, ...) counted as theirs;
* peak RSS of each crawl process (``ru_maxrss``), of the test web and of redis-server;
* overlaps and short gaps from the server's log, per host name, against the frontier's rule
  (next request >= previous end + 10 x its duration), robots.txt left out; coverage.

    python benchmarks/bench_broad_crawl.py --quick --plot          # smoke: 300 hosts
    python benchmarks/bench_broad_crawl.py --hosts 5000 --plot     # the goal's size
    python benchmarks/bench_broad_crawl.py --hosts 10000 --concurrency 256 \\
        --configs frontier-memory scrapy-per-domain --no-profile

The goal (issue 40): at 5,000 hosts the frontier's CPU per page is at most 0.8 x
``scrapy-per-domain``'s, with no overlap and no short gap.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from scrapy.settings import default_settings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import scrapy_frontier  # noqa: E402
from frontier_testweb import ServerProcess, audit, read_log  # noqa: E402
from frontier_testweb.crawl import FRONTIER_ADDON, CrawlResult, run_crawl  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = HERE / "results" / "broad_crawl.json"
PLOT = HERE.parent / "docs" / "_static" / "broad_crawl.png"
PACKAGE = os.path.realpath(Path(scrapy_frontier.__file__).parent) + os.sep

#: The resolver setting this Scrapy reads: TWISTED_DNS_RESOLVER from 2.15, DNS_RESOLVER before.
RESOLVER_SETTING = ("TWISTED_DNS_RESOLVER" if hasattr(default_settings, "TWISTED_DNS_RESOLVER")
                    else "DNS_RESOLVER")
FACTOR = 10.0
IDLE_TIMEOUT = 15.0
QUICK_HOSTS = 300
QUICK_LARGEST = 50

FRONTIER = {"ADDONS": FRONTIER_ADDON, "FRONTIER_DELAY_FACTOR": FACTOR, "FRONTIER_MIN_DELAY": 0.0}
SCRAPY = {"CONCURRENT_REQUESTS_PER_DOMAIN": 1, "DOWNLOAD_DELAY": 0}


@dataclass(frozen=True)
class Config:
    settings: dict[str, Any]
    workers: int = 1
    jobdir: bool = False
    redis: bool = False

    @property
    def frontier(self) -> bool:
        return "ADDONS" in self.settings


CONFIGS: dict[str, Config] = {
    "frontier-memory": Config(FRONTIER),
    "frontier-sqlite": Config(FRONTIER, jobdir=True),
    "frontier-redis-2": Config({**FRONTIER, "FRONTIER_BACKEND": "redis"}, workers=2, redis=True),
    "scrapy-per-domain": Config(SCRAPY),
    "autothrottle": Config({
        **SCRAPY,
        "AUTOTHROTTLE_ENABLED": True,
        "AUTOTHROTTLE_TARGET_CONCURRENCY": 0.1,
        # Scrapy's 5 s default start delay would only measure the ramp-down.
        "AUTOTHROTTLE_START_DELAY": 0.1,
        "AUTOTHROTTLE_MAX_DELAY": 60,
    }),
    "scrapy-dapq": Config({
        **SCRAPY,
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
    }),
}
DEFAULT_CONFIGS = ["frontier-memory", "frontier-sqlite", "frontier-redis-2",
                   "scrapy-per-domain", "autothrottle"]
BASELINE = "scrapy-per-domain"


def web_args(hosts: int, largest: int, addresses: int, max_seconds: float) -> list[str]:
    return ["--shape", "skewed", "--hosts", str(hosts), "--largest", str(largest),
            "--zipf-s", "1.0", "--latency", "0.005", "0.040", "--seed", "1",
            "--cross-links", "2", "--addresses", str(addresses),
            "--idle-timeout", str(IDLE_TIMEOUT), "--max-seconds", str(int(max_seconds))]


@dataclass
class Run:
    """What one crawl (all its workers) measured."""

    results: list[CrawlResult]
    web_cpu_s: float
    web_peak_rss_mb: float
    redis_cpu_s: float | None = None
    redis_peak_rss_mb: float | None = None
    profiles: list[Path] = field(default_factory=list)


def _peak_rss_mb(proc: psutil.Process) -> float:
    """VmHWM (the process's peak resident set) from /proc, in MB."""
    with open(f"/proc/{proc.pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def crawl(config: Config, web: ServerProcess, concurrency: int, timeout: float, tmp: Path,
          profile: bool) -> Run:
    """Crawl the running test web with ``config``'s workers, side by side."""
    with ExitStack() as stack:
        settings: dict[str, Any] = {
            "LOG_LEVEL": "WARNING",
            "ROBOTSTXT_OBEY": True,
            "CONCURRENT_REQUESTS": max(1, concurrency // config.workers),
            RESOLVER_SETTING: "frontier_testweb.resolver.AliasResolver",
            "TESTWEB_HOST_ADDRESSES": web.host_addresses,
            **config.settings,
        }
        redis_proc = None
        if config.redis:
            server = stack.enter_context(RedisServer())
            assert server.proc is not None
            redis_proc = psutil.Process(server.proc.pid)
            settings["REDIS_URL"] = server.url
        if config.jobdir:
            settings["JOBDIR"] = str(tmp / "job")
        profiles = [tmp / f"worker{i}.prof" for i in range(config.workers)] if profile else []

        def one(i: int) -> CrawlResult:
            return run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                             timeout=timeout, workdir=tmp / f"worker{i}",
                             profile=profiles[i] if profile else None)

        with ThreadPoolExecutor(max_workers=config.workers) as pool:
            results = list(pool.map(one, range(config.workers)))
        web_proc = psutil.Process(web.pid)
        run = Run(results, _cpu_s(web_proc), _peak_rss_mb(web_proc), profiles=profiles)
        if redis_proc is not None:
            run.redis_cpu_s = _cpu_s(redis_proc)
            run.redis_peak_rss_mb = _peak_rss_mb(redis_proc)
    for result in results:
        if result.returncode != 0 or "harness/cpu_s" not in result.stats:
            raise RuntimeError(f"crawl failed (exit {result.returncode}, "
                               f"{result.elapsed:.0f} s):\n{result.output[-3000:]}")
    return run


def frontier_share(paths: Sequence[Path]) -> dict[str, Any]:
    """The frontier's share of the profiled CPU, from the workers' merged profiles.

    ``own``: the own time (``tottime``) of every function whose file is in ``scrapy_frontier/``;
    ``with_c``: that, plus the own time of C functions (``~`` in pstats: SQLite's execute,
    heapq, dict methods...) when called directly from those functions (the per-caller time
    pstats keeps). Both over the total own time of every function.
    """
    stats = pstats.Stats(*(str(p) for p in paths))
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = own = c_calls = 0.0
    by_function: dict[str, float] = {}
    for (filename, line, name), (_, _, tt, _, callers) in table.items():
        total += tt
        if os.path.realpath(filename).startswith(PACKAGE):
            own += tt
            where = f"{os.path.relpath(os.path.realpath(filename), PACKAGE)}:{line}({name})"
            by_function[where] = by_function.get(where, 0.0) + tt
        elif filename == "~":
            c_calls += sum(entry[2] for caller, entry in callers.items()
                           if os.path.realpath(caller[0]).startswith(PACKAGE))
    top = sorted(by_function.items(), key=lambda kv: -kv[1])[:12]
    return {
        "total_s": total,
        "own_s": own,
        "own_share": own / total if total else 0.0,
        "with_c_s": own + c_calls,
        "with_c_share": (own + c_calls) / total if total else 0.0,
        "top": [[where, round(seconds, 4)] for where, seconds in top],
    }


def measure(name: str, hosts: int, largest: int, addresses: int, concurrency: int,
            timeout: float, profile: bool) -> dict[str, Any]:
    """One configuration's crawl of a fresh test web, audited; with ``profile``, only the
    frontier's share of the profiled CPU (and the profiled crawl's wall time).

    Raises RuntimeError when a crawl process failed or was killed at ``timeout``."""
    config = CONFIGS[name]
    with tempfile.TemporaryDirectory(prefix=f"bench-broad-{name}-") as tmp_name:
        tmp = Path(tmp_name)
        log = tmp / "server.jsonl"
        args = web_args(hosts, largest, addresses, timeout + 120)
        with ServerProcess(args, log_path=str(log), startup_timeout=300) as web:
            run = crawl(config, web, concurrency, timeout, tmp, profile)
            expected = web.expected
        wall = max(r.elapsed for r in run.results)
        if profile:
            return {"wall_s": wall, **frontier_share(run.profiles)}
        entries = read_log(log)
    report = audit(entries, expected=expected, factor=FACTOR, min_delay=0.0,
                   concurrency=concurrency)
    stats = [r.stats for r in run.results]
    startup = sum(float(s["harness/startup_cpu_s"]) for s in stats)
    cpu = sum(float(s["harness/cpu_s"]) for s in stats) - startup
    pages = report.requests
    robots = sum(1 for e in entries if e.path == "/robots.txt")
    return {
        "workers": config.workers,
        "wall_s": wall,
        "makespan_s": report.makespan,
        "pages": pages,
        "robots": robots,
        "hosts_seen": report.hosts,
        "coverage": report.coverage,
        "missing": report.missing,
        "duplicates": report.duplicates,
        "errors": report.errors,
        "overlaps": report.overlaps,
        "short_gaps": report.short_gaps,
        "most_in_flight": report.most_in_flight,
        "host_bound_s": report.host_bound,
        "concurrency_bound_s": report.concurrency_bound,
        "crawler_cpu_s": cpu,
        "startup_cpu_s": startup,
        "cpu_ms_per_page": 1000 * cpu / pages if pages else 0.0,
        "cpu_ms_per_request": 1000 * cpu / (pages + robots) if pages + robots else 0.0,
        "peak_rss_mb": [int(s["harness/maxrss_kb"]) / 1024 for s in stats],
        "web_cpu_s": run.web_cpu_s,
        "web_peak_rss_mb": run.web_peak_rss_mb,
        "redis_cpu_s": run.redis_cpu_s,
        "redis_peak_rss_mb": run.redis_peak_rss_mb,
        "finish_reasons": [s.get("finish_reason") for s in stats],
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000,
                        help="hosts of the test web (default %(default)s; up to 200,000)")
    parser.add_argument("--largest", type=int, default=200,
                        help="pages of the largest host (default %(default)s)")
    parser.add_argument("--addresses", type=int, default=8,
                        help="loopback addresses the hosts share (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=128,
                        help="CONCURRENT_REQUESTS, split between the Redis workers "
                             "(default %(default)s)")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=DEFAULT_CONFIGS,
                        metavar="NAME", help=f"configurations to run, in this order "
                        f"(default: {' '.join(DEFAULT_CONFIGS)}; also: scrapy-dapq)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke size: {QUICK_HOSTS} hosts, largest {QUICK_LARGEST} pages")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds each crawl may take before it is killed (default "
                             "%(default)s)")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the profiled crawl of each frontier configuration")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="results JSON (default benchmarks/results/broad_crawl.json)")
    parser.add_argument("--plot", action="store_true",
                        help="draw the results into docs/_static/broad_crawl.png")
    args = parser.parse_args(argv)
    if args.quick:
        args.hosts, args.largest = QUICK_HOSTS, QUICK_LARGEST
    if not 2 <= args.hosts <= 200_000 or args.largest < 1 or args.addresses < 1:
        parser.error("--hosts must be in 2..200000, --largest and --addresses >= 1")
    if args.concurrency < 2:
        parser.error("--concurrency must be >= 2 (the Redis workers split it)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, Any] = {
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "quick": args.quick,
        "hosts": args.hosts,
        "largest": args.largest,
        "addresses": args.addresses,
        "concurrency": args.concurrency,
        "web": web_args(args.hosts, args.largest, args.addresses, args.timeout + 120),
        "cpus": os.cpu_count(),
        "rows": {},
    }
    rows: dict[str, dict[str, Any]] = results["rows"]
    failed: dict[str, str] = results.setdefault("failed", {})
    size = (args.hosts, args.largest, args.addresses, args.concurrency, args.timeout)
    for name in args.configs:
        print(f"[{name}] {args.hosts} hosts at concurrency {args.concurrency} ...",
              file=sys.stderr, flush=True)
        try:
            rows[name] = measure(name, *size, profile=False)
        except RuntimeError as exc:  # a crawl that failed or ran out of time: the others go on
            failed[name] = str(exc)[-2000:]
            print(f"  FAILED: {failed[name]}", file=sys.stderr, flush=True)
            continue
        print(f"  {rows[name]['wall_s']:.1f} s, {rows[name]['cpu_ms_per_page']:.2f} ms "
              f"CPU/page", file=sys.stderr, flush=True)
    for name in [n for n in rows if CONFIGS[n].frontier and not args.no_profile]:
        print(f"[{name}] under cProfile ...", file=sys.stderr, flush=True)
        try:
            rows[name]["profile"] = measure(name, *size, profile=True)
        except RuntimeError as exc:
            failed[f"{name} (profiled)"] = str(exc)[-2000:]
    base = rows.get(BASELINE)
    for row in rows.values():
        row["cpu_x_scrapy"] = (row["cpu_ms_per_page"] / base["cpu_ms_per_page"]
                               if base and base["cpu_ms_per_page"] else None)
        if "profile" in row:
            row["frontier_ms_per_page"] = row["cpu_ms_per_page"] * row["profile"]["own_share"]
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    if args.plot:
        plot(results)
    return 0


def print_table(results: dict[str, Any]) -> None:
    rows = results["rows"]
    print(f"\n== broad crawl: {results['hosts']} hosts (largest {results['largest']} pages) on "
          f"{results['addresses']} addresses, concurrency {results['concurrency']}, "
          f"robots.txt obeyed" + (" [smoke run]" if results["quick"] else ""))
    if rows:
        first = next(iter(rows.values()))
        print(f"host bound (the largest host's polite schedule, from the first crawl's log): "
              f"{first['host_bound_s']:.1f} s; concurrency bound "
              f"{first['concurrency_bound_s']:.1f} s")
    print(f"{'configuration':<19}{'pages':>8}{'robots':>7}{'cover':>7}{'overl.':>7}"
          f"{'short':>7}{'wall s':>8}{'makesp.':>8}{'CPU s':>8}{'ms/page':>8}{'x scrapy':>9}"
          f"{'frontier':>9}{'+C':>7}{'RSS MB':>12}{'redis':>7}")
    for name, row in rows.items():
        prof = row.get("profile")
        own = f"{100 * prof['own_share']:.1f}%" if prof else "-"
        with_c = f"{100 * prof['with_c_share']:.1f}%" if prof else "-"
        ratio = f"{row['cpu_x_scrapy']:.2f}" if row.get("cpu_x_scrapy") is not None else "-"
        rss = "+".join(f"{m:.0f}" for m in row["peak_rss_mb"])
        redis = f"{row['redis_cpu_s']:.1f}s" if row.get("redis_cpu_s") is not None else "-"
        print(f"{name:<19}{row['pages']:>8}{row['robots']:>7}{row['coverage']:>7.3f}"
              f"{row['overlaps']:>7}{row['short_gaps']:>7}{row['wall_s']:>8.1f}"
              f"{row['makespan_s']:>8.1f}{row['crawler_cpu_s']:>8.1f}"
              f"{row['cpu_ms_per_page']:>8.2f}{ratio:>9}{own:>9}{with_c:>7}{rss:>12}{redis:>7}")
    base = rows.get(BASELINE)
    for name, error in results["failed"].items():
        print(f"{name}: FAILED ({error.splitlines()[0] if error else ''})")
    for name, row in rows.items():
        if "profile" in row and base:
            met = (row["cpu_x_scrapy"] <= 0.8 and row["overlaps"] == 0
                   and row["short_gaps"] == 0)
            print(f"goal ({name}: CPU/page <= 0.8 x {BASELINE}, 0 violations): "
                  f"{'MET' if met else 'MISSED'} ({row['cpu_x_scrapy']:.2f})")


def plot(results: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib not installed: no plot")
        return
    rows = results["rows"]
    names = list(rows)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (wall_ax, cpu_ax), (rss_ax, bad_ax) = axes
    frontier = ["tab:blue" if CONFIGS[n].frontier else "tab:gray" for n in names]
    wall_ax.bar(names, [rows[n]["wall_s"] for n in names], color=frontier)
    wall_ax.axhline(rows[names[0]]["host_bound_s"], color="black", lw=0.8, ls="--",
                    label="host bound (the largest host, polite)")
    wall_ax.set_ylabel("wall time (s)")
    wall_ax.legend(fontsize=8)
    cpu = [rows[n]["cpu_ms_per_page"] for n in names]
    own = [rows[n].get("frontier_ms_per_page", 0.0) for n in names]
    cpu_ax.bar(names, cpu, color=frontier, label="crawl process")
    cpu_ax.bar(names, own, color="tab:orange", label="scrapy_frontier's own (profiled share)")
    cpu_ax.set_ylabel("CPU ms per page")
    cpu_ax.legend(fontsize=8)
    bottom = [0.0] * len(names)
    for worker in range(max(len(rows[n]["peak_rss_mb"]) for n in names)):
        part = [rows[n]["peak_rss_mb"][worker] if worker < len(rows[n]["peak_rss_mb"]) else 0.0
                for n in names]
        rss_ax.bar(names, part, bottom=bottom, color=frontier, edgecolor="white",
                   hatch="//" if worker else "")
        bottom = [b + p for b, p in zip(bottom, part, strict=True)]
    rss_ax.set_ylabel("peak RSS per crawl process (MB)")
    overlaps = [rows[n]["overlaps"] for n in names]
    short = [rows[n]["short_gaps"] for n in names]
    bad_ax.bar(names, overlaps, color="tab:red", label="overlaps")
    bad_ax.bar(names, short, bottom=overlaps, color="salmon", label="short gaps")
    bad_ax.set_ylabel("violations in the server's log")
    bad_ax.legend(fontsize=8)
    for ax in axes.flat:
        ax.tick_params(axis="x", labelrotation=25, labelsize=8)
    title = (f"Broad crawl: {results['hosts']:,} hosts, concurrency {results['concurrency']}, "
             f"robots.txt obeyed")
    if results["quick"]:
        title += " (smoke run)"
    fig.suptitle(title)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=100)
    plt.close(fig)
    print(f"wrote {PLOT}")


if __name__ == "__main__":
    sys.exit(main())
