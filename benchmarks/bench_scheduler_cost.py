"""Benchmark b, "scheduler cost": what the frontier costs compared with Scrapy's scheduler.

Workload: N requests (default 200,000) spread over H hosts (default 1,000), URLs
``http://h{i}.example/p/{j}``. Nothing is downloaded and no network is contacted:
every Request is built before timing, then

* **enqueue**: ``scheduler.enqueue_request(r)`` for all N requests (timed), and
* **dequeue**: ``scheduler.next_request()`` until N requests came back (timed); a
  request the frontier hands out is reported finished at once with
  ``scheduler.fetches.completed(request)`` (its end-of-fetch hook), so with
  ``FRONTIER_DELAY_FACTOR=0`` and ``FRONTIER_MIN_DELAY=0`` no host ever rests.

Configurations, each run in its own fresh subprocess so that RSS is not shared:

* ``frontier``      -- ``scrapy_frontier.FrontierScheduler``
* ``scrapy``        -- ``scrapy.core.scheduler.Scheduler`` (DownloaderAwarePriorityQueue,
  memory queues): the baseline every ratio is computed against
* ``scrapy-jobdir`` -- the same with ``JOBDIR`` set to a temporary directory (disk queues)

All use Scrapy's default ``RFPDupeFilter`` (no request sets ``dont_filter``), the
realistic setting: every enqueue pays the same fingerprint, and the fingerprint
set is part of every configuration's memory.

``--preparsed`` fills ``urlparse_cached`` for every request before timing, which is
what Scrapy's default OffsiteMiddleware does on ``request_scheduled`` in a real
crawl. Scrapy's scheduler reuses that cache entry (and otherwise creates it, and is
charged for it); the frontier never reads it.

Usage::

    python benchmarks/bench_scheduler_cost.py                 # full size
    python benchmarks/bench_scheduler_cost.py --quick         # 20k requests (CI smoke)
    python benchmarks/bench_scheduler_cost.py --n 50000 --hosts 200 --repeat 3
    python benchmarks/bench_scheduler_cost.py --tracemalloc   # also bytes/request traced
    python benchmarks/bench_scheduler_cost.py --preparsed     # URLs parsed before, as in a crawl
    python benchmarks/bench_scheduler_cost.py --profile frontier   # cProfile one config
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _fakes import FakeDownloader

CONFIGS = ("frontier", "scrapy", "scrapy-jobdir")
BASELINE = "scrapy"
FULL_N = 200_000
QUICK_N = 20_000
DEFAULT_HOSTS = 1_000
RESULT_PREFIX = "RESULT "
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "scheduler_cost.json"

#: Targets from the issue: (metric, comparison, ratio vs Scrapy's default scheduler).
TARGETS = (
    ("enqueue_per_s", ">=", 1.0, "enqueue rate >= Scrapy's"),
    ("dequeue_per_s", ">=", 5.0, "dequeue rate >= 5x Scrapy's"),
    ("rss_bytes_per_request", "<=", 1.0, "RSS per queued request <= Scrapy's"),
)

#: The dequeue loop gives up after this many ``None`` in a row while requests are
#: still reported pending (a scheduler that never hands them out), and after
#: ``EMPTY_STREAK_DONE`` in a row once nothing is pending any more.
EMPTY_STREAK_ABORT = 100_000
EMPTY_STREAK_DONE = 3


# -- the worker: one configuration, in its own process --------------------------------------


def _settings(config: str, jobdir: str | None) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "FRONTIER_DELAY_FACTOR": 0,
        "FRONTIER_MIN_DELAY": 0,
        "LOG_ENABLED": False,
    }
    if config == "scrapy-jobdir":
        settings["JOBDIR"] = jobdir
    return settings


class _FakeEngine:
    """``crawler.engine`` with a downloader and no ``_slot`` (no engine loop to wake)."""

    def __init__(self, downloader: FakeDownloader) -> None:
        self.downloader = downloader


def _build_requests(n: int, hosts: int, order: str) -> list[Any]:
    from scrapy import Request

    if order == "interleaved":  # request k goes to host k % hosts, as a crawl discovers them
        return [Request(f"http://h{k % hosts}.example/p/{k // hosts}") for k in range(n)]
    per_host = -(-n // hosts)  # grouped: all of h0, then all of h1, ...
    return [Request(f"http://h{k // per_host}.example/p/{k % per_host}") for k in range(n)]


def _rss() -> int:
    import psutil

    gc.collect()
    return int(psutil.Process().memory_info().rss)


def _make_scheduler(config: str, jobdir: str | None) -> tuple[Any, Any]:
    from scrapy import Spider
    from scrapy.utils.misc import build_from_crawler, load_object
    from scrapy.utils.test import get_crawler

    class BenchSpider(Spider):
        name = "bench_scheduler_cost"

    crawler = get_crawler(BenchSpider, _settings(config, jobdir))
    middlewares: list[Any] = []
    if config == "frontier":
        from scrapy_frontier.downloadermiddlewares import FetchTimingMiddleware
        from scrapy_frontier.scheduler import FrontierScheduler

        middlewares.append(FetchTimingMiddleware(crawler))
        cls: Any = FrontierScheduler
    else:
        cls = load_object(crawler.settings["SCHEDULER"])
    crawler.engine = _FakeEngine(FakeDownloader(middlewares))  # type: ignore[assignment]
    spider = BenchSpider.from_crawler(crawler)
    crawler.spider = spider
    scheduler = build_from_crawler(cls, crawler)
    scheduler.open(spider)
    return crawler, scheduler


def _enqueue_all(scheduler: Any, requests: list[Any]) -> int:
    enqueue = scheduler.enqueue_request
    accepted = 0
    for request in requests:
        if enqueue(request):
            accepted += 1
    return accepted


def _dequeue_all(scheduler: Any, n: int) -> tuple[int, int]:
    """Take up to ``n`` requests, each sent and reported finished at once. Bounded."""
    next_request = scheduler.next_request
    pending = scheduler.has_pending_requests
    # Baseline trees older than the Fetches class call the hooks fetch_sent and
    # fetch_completed, and older than the glossary fetch_finished.
    fetches = getattr(scheduler, "fetches", None)
    finished = (fetches.completed if fetches is not None
                else getattr(scheduler, "fetch_completed", None)
                or getattr(scheduler, "fetch_finished", None))
    sent = fetches.sent if fetches is not None else getattr(scheduler, "fetch_sent", None)
    got = 0
    empty = 0
    empties = 0
    while got < n:
        request = next_request()
        if request is None:
            empty += 1
            empties += 1
            if empty >= EMPTY_STREAK_ABORT or (empty >= EMPTY_STREAK_DONE and not pending()):
                break
            continue
        empty = 0
        got += 1
        if finished is not None:
            if sent is not None:
                sent(request)  # a fetch that reached the downloader, as every real one
            finished(request)
    return got, empties


def _profile(label: str, func: Any, *args: Any) -> Any:
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    result = prof.runcall(func, *args)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(18)
    print(f"\n===== cProfile: {label} (sorted by tottime) =====", file=sys.stderr)
    print(out.getvalue(), file=sys.stderr)
    return result


def run_worker(
    config: str, n: int, hosts: int, order: str, mode: str, preparsed: bool = False
) -> dict[str, Any]:
    """Run one configuration and return its measurements. ``mode``: time, trace, profile.

    ``preparsed``: fill ``urlparse_cached`` for every request before timing, as
    Scrapy's default OffsiteMiddleware does on ``request_scheduled`` in a real crawl.
    """
    jobdir = tempfile.mkdtemp(prefix="bench-sched-jobdir-") if config == "scrapy-jobdir" else None
    try:
        crawler, scheduler = _make_scheduler(config, jobdir)
        requests = _build_requests(n, hosts, order)
        if preparsed:
            from scrapy.utils.httpobj import urlparse_cached

            for request in requests:
                urlparse_cached(request)
        result: dict[str, Any] = {
            "config": config,
            "n": n,
            "hosts": hosts,
            "order": order,
            "preparsed": preparsed,
            "code": _code_state(),
        }

        if mode == "trace":
            import tracemalloc

            gc.collect()
            tracemalloc.start(1)
            before = tracemalloc.take_snapshot()
            base, _ = tracemalloc.get_traced_memory()
            accepted = _enqueue_all(scheduler, requests)
            gc.collect()
            after_bytes, _ = tracemalloc.get_traced_memory()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            top = after.compare_to(before, "lineno")[:12]
            result["traced_bytes_per_request"] = (after_bytes - base) / n
            result["traced_top"] = [
                {"where": str(stat.traceback[0]), "bytes_per_request": stat.size_diff / n}
                for stat in top
            ]
            result["accepted"] = accepted
            return result

        rss_start = _rss()
        if mode == "profile":
            accepted = _profile(f"{config} enqueue", _enqueue_all, scheduler, requests)
        else:
            t0 = time.perf_counter()
            accepted = _enqueue_all(scheduler, requests)
            t_enqueue = time.perf_counter() - t0
        rss_enqueued = _rss()
        queued = len(scheduler)
        if mode == "profile":
            got, empties = _profile(f"{config} dequeue", _dequeue_all, scheduler, n)
        else:
            t0 = time.perf_counter()
            got, empties = _dequeue_all(scheduler, n)
            t_dequeue = time.perf_counter() - t0
        rss_end = _rss()
        left = len(scheduler)
        pending = scheduler.has_pending_requests()
        scheduler.close("finished")

        errors = []
        if accepted != n:
            errors.append(f"accepted {accepted} of {n} requests")
        if queued != n:
            errors.append(f"len(scheduler) was {queued} after enqueue, expected {n}")
        if got != n:
            errors.append(f"dequeued {got} of {n} requests")
        if left or pending:
            errors.append(f"{left} requests left (pending={pending}) after dequeue")
        result.update(
            {
                "accepted": accepted,
                "dequeued": got,
                "empty_next_request_calls": empties,
                "rss_start_bytes": rss_start,
                "rss_after_enqueue_bytes": rss_enqueued,
                "rss_after_dequeue_bytes": rss_end,
                "rss_bytes_per_request": (rss_enqueued - rss_start) / n,
                "errors": errors,
            }
        )
        if mode == "time":
            result.update(
                {
                    "enqueue_seconds": t_enqueue,
                    "dequeue_seconds": t_dequeue,
                    "enqueue_per_s": n / t_enqueue if t_enqueue else float("inf"),
                    "dequeue_per_s": got / t_dequeue if t_dequeue else float("inf"),
                }
            )
        if config == "frontier":
            st = scheduler.backend.frontier.stats
            result["frontier"] = {
                "activations": st.activations,
                "peak_active_back_queues": st.peak_active,
                "completed": st.completed,
            }
        del crawler
        return result
    finally:
        if jobdir is not None:
            shutil.rmtree(jobdir, ignore_errors=True)


# -- the driver: one subprocess per configuration ---------------------------------------------


def _spawn(config: str, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        config,
        "--mode",
        mode,
        "--n",
        str(args.n),
        "--hosts",
        str(args.hosts),
        "--order",
        args.order,
        *(["--preparsed"] if args.preparsed else []),
    ]
    stderr = None if mode == "profile" else subprocess.PIPE
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return dict(json.loads(line[len(RESULT_PREFIX) :]))
    tail = (proc.stderr or "")[-2000:]
    return {"config": config, "errors": [f"worker exited {proc.returncode}: {tail}"]}


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return value / base


def _fmt_num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}{unit}"
    return f"{value:,.1f}{unit}"


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _summarise(runs: dict[str, list[dict[str, Any]]], traced: dict[str, dict[str, Any]]) -> Any:
    metrics = ("enqueue_per_s", "dequeue_per_s", "rss_bytes_per_request")
    summary: dict[str, dict[str, Any]] = {}
    for config, config_runs in runs.items():
        row: dict[str, Any] = {m: _median(config_runs, m) for m in metrics}
        row["traced_bytes_per_request"] = traced.get(config, {}).get("traced_bytes_per_request")
        summary[config] = row
    base = summary.get(BASELINE, {})
    for row in summary.values():
        row["ratio_vs_scrapy"] = {
            m: _ratio(row[m], base.get(m)) for m in (*metrics, "traced_bytes_per_request")
        }
    return summary


def _check_targets(summary: dict[str, Any]) -> list[dict[str, Any]]:
    ratios = summary.get("frontier", {}).get("ratio_vs_scrapy", {})
    checks = []
    for metric, op, target, text in TARGETS:
        ratio = ratios.get(metric)
        met = None if ratio is None else (ratio >= target if op == ">=" else ratio <= target)
        checks.append(
            {
                "metric": metric,
                "op": op,
                "target_ratio": target,
                "ratio": ratio,
                "met": met,
                "description": text,
            }
        )
    return checks


def _print_table(summary: dict[str, Any], checks: list[dict[str, Any]], args: Any) -> None:
    configs = list(summary)
    print(
        f"\nScheduler cost: {args.n:,} requests over {args.hosts:,} hosts ({args.order}"
        f"{', preparsed' if args.preparsed else ''}), "
        f"median of {args.repeat} run(s), each configuration in its own process"
    )
    width = 16
    header = f"{'':<30}" + "".join(f"{c:>{width}}" for c in configs)
    print(header)
    print("-" * len(header))
    rows = [
        ("enqueue (req/s)", "enqueue_per_s", ""),
        ("dequeue+finish (req/s)", "dequeue_per_s", ""),
        ("RSS growth (B/request)", "rss_bytes_per_request", ""),
    ]
    if any(summary[c].get("traced_bytes_per_request") is not None for c in configs):
        rows.append(("tracemalloc (B/request)", "traced_bytes_per_request", ""))
    for label, key, unit in rows:
        values = "".join(f"{_fmt_num(summary[c][key], unit):>{width}}" for c in configs)
        print(f"{label:<30}{values}")
        print(
            f"{'  vs scrapy':<30}"
            + "".join(f"{_fmt_ratio(summary[c]['ratio_vs_scrapy'][key]):>{width}}" for c in configs)
        )
    print("\nTargets for the frontier (ratio vs Scrapy's default scheduler):")
    for check in checks:
        status = {True: "MET", False: "MISSED", None: "n/a"}[check["met"]]
        print(
            f"  {check['description']:<38} target {check['op']} {check['target_ratio']:.1f}x"
            f"  measured {_fmt_ratio(check['ratio']):>8}  {status}"
        )


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _code_state() -> dict[str, Any]:
    """Which scrapy_frontier was measured: its path, a hash of its sources, its git HEAD."""
    import hashlib

    import scrapy_frontier

    pkg = Path(scrapy_frontier.__file__).resolve().parent
    digest = hashlib.sha1()
    for path in sorted(pkg.rglob("*.py")):
        digest.update(str(path.relative_to(pkg)).encode())
        digest.update(path.read_bytes())
    return {
        "package": str(pkg),
        "source_sha1": digest.hexdigest()[:12],
        "commit": _git(pkg, "rev-parse", "HEAD"),
        "dirty": bool(_git(pkg, "status", "--porcelain", "--", ".")),
    }


def _versions() -> dict[str, str]:
    import scrapy

    versions = {"python": platform.python_version(), "scrapy": scrapy.__version__}
    try:
        import scrapy_frontier

        versions["scrapy_frontier"] = scrapy_frontier.__version__
    except ImportError:  # pragma: no cover
        pass
    return versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help=f"requests (default {FULL_N:,})")
    parser.add_argument("--hosts", type=int, default=DEFAULT_HOSTS, help="distinct hosts")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_N:,} requests (CI smoke)")
    parser.add_argument(
        "--order",
        choices=("interleaved", "grouped"),
        default="interleaved",
        help="interleaved: request k on host k %% hosts; grouped: host by host",
    )
    parser.add_argument(
        "--preparsed",
        action="store_true",
        help="fill urlparse_cached before timing, as the OffsiteMiddleware does in a crawl",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (median)")
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {CONFIGS}"
    )
    parser.add_argument(
        "--tracemalloc", action="store_true", help="extra run per config: traced bytes/request"
    )
    parser.add_argument("--profile", choices=CONFIGS, help="cProfile one configuration and exit")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--mode", choices=("time", "trace", "profile"), default="time", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.n is None:
        args.n = QUICK_N if args.quick else FULL_N
    if args.n < 1 or args.hosts < 1 or args.repeat < 1:
        parser.error("--n, --hosts and --repeat must be >= 1")

    if args.worker:
        result = run_worker(args.worker, args.n, args.hosts, args.order, args.mode, args.preparsed)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0

    if args.profile:
        result = _spawn(args.profile, args, "profile")
        print(json.dumps(result, indent=2))
        return 1 if result.get("errors") else 0

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configs {unknown}; choose from {CONFIGS}")
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    for round_no in range(args.repeat):
        for config in configs:
            print(
                f"[{round_no + 1}/{args.repeat}] {config}: {args.n:,} requests ...",
                file=sys.stderr,
                flush=True,
            )
            runs[config].append(_spawn(config, args, "time"))
    traced: dict[str, dict[str, Any]] = {}
    if args.tracemalloc:
        for config in configs:
            print(f"[tracemalloc] {config} ...", file=sys.stderr, flush=True)
            traced[config] = _spawn(config, args, "trace")

    code = _code_state()
    seen = [r.get("code") or {} for rs in runs.values() for r in rs] + [
        t.get("code") or {} for t in traced.values()
    ]
    # Scrapy's own configurations report no frontier source hash: leave them out.
    hashes = {h for c in seen if (h := c.get("source_sha1"))} | {code["source_sha1"]}
    if len(hashes) > 1:
        code["changed_during_run"] = sorted(h for h in hashes if h)
        print(
            f"WARNING: scrapy_frontier's sources changed during the run ({sorted(hashes)}); "
            "the runs did not all measure the same code.",
            file=sys.stderr,
        )
    errors = {c: e for c, r in runs.items() for run in r if (e := run.get("errors"))} | {
        c: e for c, t in traced.items() if (e := t.get("errors"))
    }
    summary = _summarise(runs, traced)
    checks = _check_targets(summary)
    _print_table(summary, checks, args)
    for config, errs in errors.items():
        print(f"ERROR in {config}: {errs}", file=sys.stderr)

    payload = {
        "benchmark": "scheduler_cost",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "code": code,
        "versions": _versions(),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
        },
        "params": {
            "n": args.n,
            "hosts": args.hosts,
            "order": args.order,
            "preparsed": args.preparsed,
            "repeat": args.repeat,
            "quick": args.quick,
            "dupefilter": "scrapy.dupefilters.RFPDupeFilter (default), dont_filter=False",
            "settings": _settings("frontier", None),
        },
        "summary": summary,
        "targets": checks,
        "runs": runs,
        "tracemalloc": traced,
        "errors": errors,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nResults written to {args.out}")
    if errors:
        return 2
    if args.check and any(c["met"] is False for c in checks):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
