"""Scale benchmark: millions of queued URLs through the SQLite frontier, in bounded memory.

Workload: N URLs (default 10,000,000) over H hosts (default 100,000), URL k is
``http://h{k % H}.example/p/{k // H}`` (hosts interleaved, as a crawl discovers
them). Nothing is downloaded and no network is contacted.

* **Phase 1, enqueue**: every URL becomes a real ``scrapy.Request`` (built in
  chunks of 10,000, untimed) and goes through ``scheduler.enqueue_request()``
  (timed). RSS (psutil) is sampled every N/10 URLs (every million at full size)
  with the enqueue rate of each block, to show that memory stays flat:
  O(active hosts + buffers), not O(queued URLs). At the end, the bytes on disk
  per URL: ``frontier.sqlite`` and ``seen.sqlite`` with their ``-wal``/``-shm``
  (each queued URL is a pickled ``Request.to_dict``).
* **Phase 2, dequeue**: ``next_request()`` until every URL came back, each
  reported finished at once with ``scheduler.fetches.completed(request)``;
  ``FRONTIER_DELAY_FACTOR=0`` and ``FRONTIER_MIN_DELAY=0``, so every host is
  ready at once. Dequeue/s and RSS, sampled like phase 1.

Configurations, each in its own fresh subprocess (``--configs``, comma-separated
``kind[:n[:hosts]]``):

* ``frontier-batched`` -- ``FrontierScheduler`` with ``JOBDIR`` in a temporary
  directory, ``DUPEFILTER_CLASS = FrontierDupeFilter`` (what the add-on sets) and
  ``FRONTIER_WRITE_THROUGH = False``: leases and acks are written with the
  queued URLs, every ``FRONTIER_FLUSH_INTERVAL`` (1 s) or 5,000 operations;
* ``frontier-wt`` -- the same with ``FRONTIER_WRITE_THROUGH = True`` (the
  default): one commit per lease and one per ack;
* ``scrapy-jobdir`` -- ``scrapy.core.scheduler.Scheduler`` with ``JOBDIR`` (disk
  queues under ``DownloaderAwarePriorityQueue``, default ``RFPDupeFilter``): the
  baseline. Its ``pop()`` scans every download slot and it keeps one open
  disk-queue file per host, so it runs over 1,000 hosts (Scrapy's scheduler
  benchmarks are usually run at that size), not 100,000.

Every loop is bounded by its count and by a time budget (``--budget`` for
enqueue, ``--dequeue-budget`` for dequeue, per configuration); a phase that runs
out of time stops and its numbers are marked PARTIAL (rates are then over the
URLs it did handle). The driver kills a worker that exceeds twice its budgets.

Usage::

    python benchmarks/bench_scale.py                   # full: 10M over 100k hosts
    python benchmarks/bench_scale.py --quick           # 200k over 2,000 hosts (smoke)
    python benchmarks/bench_scale.py --n 1000000       # estimate the full run first
    python benchmarks/bench_scale.py --configs frontier-wt:500000,scrapy-jobdir:200000:1000
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _fakes import FakeDownloader

KINDS = ("frontier-batched", "frontier-wt", "scrapy-jobdir")
FULL_N = 10_000_000
FULL_HOSTS = 100_000
QUICK_N = 200_000
QUICK_HOSTS = 2_000
WT_N = 1_000_000
BASE_N = 200_000
BASE_HOSTS = 1_000
CHUNK = 10_000
RESULT_PREFIX = "RESULT "
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = RESULTS / "scale.json"
DEFAULT_PLOT = Path(__file__).resolve().parent.parent / "docs" / "_static" / "scale.png"
MB = 1 << 20

#: Targets of the issue.
RSS_TARGET_MB = 500
TARGET_N = 10_000_000
ENQUEUE_RATIO = 2.0
DEQUEUE_RATIO = 4.0

#: next_request() returning None this many times in a row ends the dequeue loop
#: once nothing is pending; EMPTY_ABORT in a row ends it regardless.
EMPTY_DONE = 3
EMPTY_ABORT = 100_000


# -- the worker: one configuration, in its own process ---------------------------------------


def parse_spec(spec: str, n: int, hosts: int) -> tuple[str, int, int]:
    parts = spec.strip().split(":")
    kind = parts[0]
    if kind not in KINDS:
        raise ValueError(f"unknown configuration {kind!r}; choose from {KINDS}")
    if len(parts) > 3:
        raise ValueError(f"{spec!r}: expected kind[:n[:hosts]]")
    cn = int(parts[1]) if len(parts) > 1 and parts[1] else n
    ch = int(parts[2]) if len(parts) > 2 and parts[2] else hosts
    if cn < 1 or ch < 1:
        raise ValueError(f"{spec!r}: n and hosts must be >= 1")
    return kind, cn, ch


def label(kind: str, n: int, hosts: int) -> str:
    return f"{kind} {_short(n)}/{_short(hosts)}h"


def _short(x: int) -> str:
    if x >= 1_000_000 and x % 100_000 == 0:
        return f"{x / 1_000_000:g}M"
    if x >= 1_000 and x % 100 == 0:
        return f"{x / 1_000:g}k"
    return str(x)


def _settings(kind: str, jobdir: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"JOBDIR": jobdir, "LOG_ENABLED": False}
    if kind.startswith("frontier"):
        from scrapy_frontier.addon import ADDON_SETTINGS

        settings.update(ADDON_SETTINGS)  # SCHEDULER, DUPEFILTER_CLASS, ... as the add-on sets
        settings.update(
            {
                "FRONTIER_DELAY_FACTOR": 0,
                "FRONTIER_MIN_DELAY": 0,
                "FRONTIER_WRITE_THROUGH": kind == "frontier-wt",
            }
        )
    return settings


class _NextCall:
    """The engine's ``_slot.nextcall``: counts the frontier's wake-ups."""

    def __init__(self) -> None:
        self.scheduled = 0

    def schedule(self, delay: float = 0) -> None:
        self.scheduled += 1


def _make_scheduler(kind: str, jobdir: str) -> tuple[Any, Any, Any]:
    from scrapy import Spider
    from scrapy.utils.misc import build_from_crawler, load_object
    from scrapy.utils.test import get_crawler

    class ScaleSpider(Spider):
        name = "bench_scale"

    crawler = get_crawler(ScaleSpider, _settings(kind, jobdir))
    downloader_mws: list[Any] = []
    if kind.startswith("frontier"):
        from scrapy_frontier.downloadermiddlewares import FetchTimingMiddleware

        # Installed as the add-on does (no signal fallback).
        downloader_mws.append(FetchTimingMiddleware(crawler))
    engine = SimpleNamespace(downloader=FakeDownloader(downloader_mws))
    crawler.engine = engine  # type: ignore[assignment]
    spider = ScaleSpider.from_crawler(crawler)
    crawler.spider = spider
    scheduler = build_from_crawler(load_object(crawler.settings["SCHEDULER"]), crawler)
    # inprogress: the requests the engine holds, from next_request() until their
    # fetch has ended and been processed (see _dequeue_phase).
    engine._slot = SimpleNamespace(scheduler=scheduler, inprogress=set(), nextcall=_NextCall())
    scheduler.open(spider)
    return crawler, spider, scheduler


def _rss() -> int:
    import psutil

    gc.collect()
    return int(psutil.Process().memory_info().rss)


def _cpu() -> float:
    import psutil

    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


def _peak_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _disk(jobdir: str) -> dict[str, int]:
    """Bytes of every file under ``jobdir``, by path relative to it."""
    sizes: dict[str, int] = {}
    for root, _, files in os.walk(jobdir):
        for name in files:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                sizes[os.path.relpath(path, jobdir)] = os.path.getsize(path)
    return sizes


def _frontier_disk(sizes: dict[str, int], n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"files": {}}
    total = 0
    for base in ("frontier.sqlite", "seen.sqlite"):
        part = 0
        for suffix in ("", "-wal", "-shm"):
            size = sizes.get(base + suffix, 0)
            out["files"][base + suffix] = size
            part += size
        out[f"{base}_bytes_per_url"] = part / n if n else None
        total += part
    out["total_bytes"] = total
    out["bytes_per_url"] = total / n if n else None
    return out


def _scrapy_disk(sizes: dict[str, int], n: int) -> dict[str, Any]:
    queue = sum(v for k, v in sizes.items() if k.startswith("requests.queue"))
    seen = sizes.get("requests.seen", 0)
    total = sum(sizes.values())
    return {
        "files": {"requests.queue/*": queue, "requests.seen": seen},
        "file_count": len(sizes),
        "total_bytes": total,
        "bytes_per_url": total / n if n else None,
    }


def _pickled_request_bytes(spider: Any, hosts: int, n: int) -> float:
    """Mean size of a pickled ``Request.to_dict``, what the SQLite store keeps per URL."""
    import pickle

    from scrapy import Request

    ks = [n * i // 64 for i in range(64)]
    sizes = [
        len(
            pickle.dumps(
                Request(f"http://h{k % hosts}.example/p/{k // hosts}").to_dict(spider=spider),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
        )
        for k in ks
    ]
    return sum(sizes) / len(sizes)


def _log(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _enqueue_phase(scheduler: Any, n: int, hosts: int, step: int, budget: float) -> dict[str, Any]:
    from scrapy import Request

    enqueue = scheduler.enqueue_request
    samples: list[dict[str, Any]] = []
    accepted = done = 0
    t_enq = t_build = 0.0
    last_t = 0.0
    last_done = 0
    wall0 = time.perf_counter()
    cpu0 = _cpu()
    deadline = wall0 + budget
    partial = False
    error = None
    next_sample = step
    samples.append({"queued": 0, "rss_bytes": _rss()})
    while done < n:
        if time.perf_counter() > deadline:
            partial = True
            break
        stop = min(n, done + CHUNK, next_sample)
        t0 = time.perf_counter()
        chunk = [Request(f"http://h{k % hosts}.example/p/{k // hosts}") for k in range(done, stop)]
        t1 = time.perf_counter()
        try:
            for request in chunk:
                if enqueue(request):
                    accepted += 1
        except Exception as exc:  # e.g. Scrapy's disk queues out of file descriptors
            error = f"enqueue failed after {accepted:,} URLs: {type(exc).__name__}: {exc}"
            _log(error)
            partial = True
            t_enq += time.perf_counter() - t1
            done = accepted
            break
        t2 = time.perf_counter()
        del chunk
        t_build += t1 - t0
        t_enq += t2 - t1
        done = stop
        if done in (next_sample, n):
            rate = (done - last_done) / (t_enq - last_t) if t_enq > last_t else None
            sample: dict[str, Any] = {
                "queued": len(scheduler),
                "submitted": done,
                "rss_bytes": _rss(),
                "enqueue_seconds": t_enq,
                "block_enqueue_per_s": rate,
                "wall_seconds": time.perf_counter() - wall0,
                "loadavg_1m": os.getloadavg()[0],
            }
            samples.append(sample)
            _log(
                f"enqueued {done:,}: {rate or 0:,.0f}/s in this block, "
                f"RSS {sample['rss_bytes'] / MB:,.0f} MB, load {sample['loadavg_1m']:.2f}"
            )
            last_t, last_done = t_enq, done
            next_sample = min(n, next_sample + step)
    wall = time.perf_counter() - wall0
    return {
        "submitted": done,
        "accepted": accepted,
        "partial": partial,
        "error": error,
        "enqueue_seconds": t_enq,
        "build_seconds": t_build,
        "wall_seconds": wall,
        "cpu_share": (_cpu() - cpu0) / wall if wall else None,
        "enqueue_per_s": done / t_enq if t_enq else None,
        "build_per_s": done / t_build if t_build else None,
        "samples": samples,
    }


def _dequeue_phase(
    scheduler: Any, n: int, step: int, budget: float, frontier: bool
) -> dict[str, Any]:
    next_request = scheduler.next_request
    pending = scheduler.has_pending_requests
    finished = scheduler.fetches.completed if frontier else None
    inprogress = scheduler.crawler.engine._slot.inprogress if frontier else set()
    samples: list[dict[str, Any]] = []
    got = empty = empties = 0
    partial = False
    error = None
    t_deq = 0.0
    last_t = 0.0
    last_got = 0
    wall0 = time.perf_counter()
    cpu0 = _cpu()
    deadline = wall0 + budget
    next_sample = min(n, step)
    samples.append({"dequeued": 0, "queued": len(scheduler), "rss_bytes": _rss()})
    while got < n:
        if time.perf_counter() > deadline:
            partial = True
            break
        stop = min(next_sample, got + 1000)
        t0 = time.perf_counter()
        try:
            while got < stop:
                request = next_request()
                if request is None:
                    empty += 1
                    empties += 1
                    if empty >= EMPTY_ABORT or (empty >= EMPTY_DONE and not pending()):
                        break
                    continue
                empty = 0
                got += 1
                if finished is not None:
                    # As the engine does: the request is in progress from here until
                    # its response has been processed, right after the fetch ends.
                    inprogress.add(request)
                    finished(request)
                    inprogress.discard(request)
        except Exception as exc:
            error = f"dequeue failed after {got:,} URLs: {type(exc).__name__}: {exc}"
            _log(error)
            partial = True
        t_deq += time.perf_counter() - t0
        if got < stop:  # nothing more to take, or failed
            break
        if got == next_sample:
            rate = (got - last_got) / (t_deq - last_t) if t_deq > last_t else None
            sample: dict[str, Any] = {
                "dequeued": got,
                "queued": len(scheduler),
                "rss_bytes": _rss(),
                "dequeue_seconds": t_deq,
                "block_dequeue_per_s": rate,
                "wall_seconds": time.perf_counter() - wall0,
                "loadavg_1m": os.getloadavg()[0],
            }
            samples.append(sample)
            _log(
                f"dequeued {got:,}: {rate or 0:,.0f}/s in this block, "
                f"RSS {sample['rss_bytes'] / MB:,.0f} MB, load {sample['loadavg_1m']:.2f}"
            )
            last_t, last_got = t_deq, got
            next_sample = min(n, next_sample + step)
    wall = time.perf_counter() - wall0
    return {
        "dequeued": got,
        "target": n,
        "partial": partial,
        "error": error,
        "empty_next_request_calls": empties,
        "dequeue_seconds": t_deq,
        "wall_seconds": wall,
        "cpu_share": (_cpu() - cpu0) / wall if wall else None,
        "dequeue_per_s": got / t_deq if t_deq else None,
        "samples": samples,
    }


def run_worker(
    kind: str, n: int, hosts: int, budget: float, dequeue_budget: float, tmp: str | None
) -> dict[str, Any]:
    jobdir = tempfile.mkdtemp(prefix="bench-scale-", dir=tmp)
    frontier = kind.startswith("frontier")
    step = max(1, min(1_000_000, n // 10))
    result: dict[str, Any] = {
        "config": kind,
        "label": label(kind, n, hosts),
        "n": n,
        "hosts": hosts,
        "budget_seconds": {"enqueue": budget, "dequeue": dequeue_budget},
        "jobdir_filesystem": _filesystem(jobdir),
        "loadavg_start": os.getloadavg(),
        "errors": [],
    }
    try:
        crawler, spider, scheduler = _make_scheduler(kind, jobdir)
        result["scheduler"] = f"{type(scheduler).__module__}.{type(scheduler).__qualname__}"
        df = getattr(scheduler, "df", None)
        result["dupefilter"] = f"{type(df).__module__}.{type(df).__qualname__}"
        if frontier:
            cfg = scheduler.config
            result["frontier_config"] = {
                "write_through": cfg.write_through,
                "flush_interval": cfg.flush_interval,
                "back_queues": cfg.back_queues,
                "back_queues_max": cfg.back_queues_max,
                "front_queues": cfg.front_queues,
            }
        result["pickled_request_bytes"] = _pickled_request_bytes(spider, hosts, n)
        _log(f"{result['label']}: enqueue (budget {budget:.0f} s)")
        enq = _enqueue_phase(scheduler, n, hosts, step, budget)
        result["enqueue"] = enq
        queued = len(scheduler)
        result["queued_after_enqueue"] = queued
        result["rss_after_enqueue_bytes"] = enq["samples"][-1]["rss_bytes"]
        # Disk at the end of phase 1, after writing what the frontier still buffers
        # (< 5,000 operations and < 1 s of fingerprints; untimed).
        if frontier:
            for attr in ("_store", "_seen_store"):
                store = getattr(scheduler, attr, None)
                if store is not None:
                    store.flush()
            result["disk"] = _frontier_disk(_disk(jobdir), queued)
        else:
            df = scheduler.df
            if getattr(df, "file", None) is not None:
                df.file.flush()
            result["disk"] = _scrapy_disk(_disk(jobdir), queued)
        _log(
            f"{queued:,} queued; disk {result['disk']['total_bytes'] / MB:,.0f} MB = "
            f"{result['disk']['bytes_per_url'] or 0:,.0f} B/URL; "
            f"dequeue (budget {dequeue_budget:.0f} s)"
        )
        deq = _dequeue_phase(scheduler, queued, step, dequeue_budget, frontier)
        result["dequeue"] = deq
        result["rss_after_dequeue_bytes"] = deq["samples"][-1]["rss_bytes"]
        t0 = time.perf_counter()
        scheduler.close("finished")
        result["close_seconds"] = time.perf_counter() - t0
        if frontier:
            st = scheduler.backend.frontier.stats
            result["frontier_stats"] = {
                "popped": st.popped,
                "completed": st.completed,
                "activations": st.activations,
                "peak_active_back_queues": st.peak_active,
                "store_flushes": getattr(scheduler.backend.queue.store, "flushes", None),
                "engine_wakeups": crawler.engine._slot.nextcall.scheduled,
            }
        result["peak_rss_bytes"] = _peak_rss()
        result["loadavg_end"] = os.getloadavg()
        if enq["accepted"] != enq["submitted"] and not enq.get("error"):
            result["errors"].append(f"accepted {enq['accepted']} of {enq['submitted']}")
        if queued != enq["accepted"]:
            result["errors"].append(f"len(scheduler) {queued} != accepted {enq['accepted']}")
        for phase in (enq, deq):
            if phase.get("error"):
                result["errors"].append(phase["error"])
        if not deq["partial"] and deq["dequeued"] != queued:
            result["errors"].append(f"dequeued {deq['dequeued']} of {queued}")
        del crawler
        return result
    finally:
        shutil.rmtree(jobdir, ignore_errors=True)


def _filesystem(path: str) -> str | None:
    try:
        out = subprocess.run(
            ["df", "-T", path], capture_output=True, text=True, check=False, timeout=10
        ).stdout.splitlines()
        return " ".join(out[-1].split()[:2]) if len(out) > 1 else None
    except (OSError, subprocess.SubprocessError):
        return None


# -- the driver -------------------------------------------------------------------------------


def _spawn(spec: tuple[str, int, int], args: argparse.Namespace) -> dict[str, Any]:
    kind, n, hosts = spec
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        f"{kind}:{n}:{hosts}",
        "--budget",
        str(args.budget),
        "--dequeue-budget",
        str(args.dequeue_budget),
        *(["--tmp", args.tmp] if args.tmp else []),
    ]
    timeout = 2 * (args.budget + args.dequeue_budget) + 300
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # our own child, by its handle
        out, _ = proc.communicate()
        return {
            "config": kind,
            "label": label(kind, n, hosts),
            "n": n,
            "hosts": hosts,
            "errors": [f"worker killed after {timeout:.0f} s"],
        }
    for line in out.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = dict(json.loads(line[len(RESULT_PREFIX) :]))
            result["process_wall_seconds"] = time.perf_counter() - t0
            return result
    return {
        "config": kind,
        "label": label(kind, n, hosts),
        "n": n,
        "hosts": hosts,
        "errors": [f"worker exited {proc.returncode} without a result"],
    }


def default_specs(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    n, hosts = args.n, args.hosts
    specs = [
        ("frontier-batched", n, hosts),
        ("frontier-wt", min(n, args.wt_n), hosts),
        ("scrapy-jobdir", min(n, BASE_N), BASE_HOSTS),
    ]
    if n > BASE_N:
        specs.append(("scrapy-jobdir", min(n, 1_000_000), BASE_HOSTS))
        # The frontier on the baseline's own workload, for a like-for-like ratio.
        specs.append(("frontier-batched", BASE_N, BASE_HOSTS))
        specs.append(("frontier-wt", BASE_N, BASE_HOSTS))
    return specs


def _get(result: dict[str, Any], phase: str, key: str) -> Any:
    return (result.get(phase) or {}).get(key)


def _mb(value: Any) -> str:
    return "-" if value is None else f"{value / MB:,.0f}"


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _baseline(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Scrapy's JOBDIR scheduler at 200k requests, else its smallest run."""
    base = [r for r in results if r.get("config") == "scrapy-jobdir" and r.get("enqueue")]
    if not base:
        return None
    exact = [r for r in base if r["n"] == BASE_N and r["hosts"] == BASE_HOSTS]
    return exact[0] if exact else min(base, key=lambda r: r["n"])


def _main_run(results: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    runs = [r for r in results if r.get("config") == kind and r.get("enqueue")]
    return max(runs, key=lambda r: r["n"]) if runs else None


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if a is not None and b else None


def check_targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    base = _baseline(results)
    base_enq = _get(base, "enqueue", "enqueue_per_s") if base else None
    base_deq = _get(base, "dequeue", "dequeue_per_s") if base else None
    big = _main_run(results, "frontier-batched") or _main_run(results, "frontier-wt")
    if big is not None:
        queued = big.get("queued_after_enqueue", 0)
        rss = max(s["rss_bytes"] for s in big["enqueue"]["samples"])
        checks.append(
            {
                "target": f"RSS <= {RSS_TARGET_MB} MB with {TARGET_N:,} URLs queued",
                "run": big["label"],
                "value": f"max {rss / MB:,.0f} MB with {queued:,} queued",
                "met": rss <= RSS_TARGET_MB * MB,
                "at_full_size": queued >= TARGET_N and not big["enqueue"]["partial"],
            }
        )
    for kind in ("frontier-batched", "frontier-wt"):
        run = _main_run(results, kind)
        if run is None or base is None:
            continue
        for phase, key, target in (
            ("enqueue", "enqueue_per_s", ENQUEUE_RATIO),
            ("dequeue", "dequeue_per_s", DEQUEUE_RATIO),
        ):
            if (
                phase == "enqueue"
                and kind == "frontier-wt"
                and _main_run(results, "frontier-batched")
            ):
                continue  # the write mode does not change enqueue; checked once
            ratio = _ratio(_get(run, phase, key), _get(base, phase, key))
            checks.append(
                {
                    "target": f"{phase} >= {target:g}x Scrapy JOBDIR ({base['label']})",
                    "run": run["label"],
                    "value": None if ratio is None else f"{ratio:.2f}x",
                    "ratio": ratio,
                    "met": None if ratio is None else ratio >= target,
                    "partial": bool(_get(run, phase, "partial")),
                }
            )
    del base_enq, base_deq
    return checks


def print_table(results: list[dict[str, Any]], checks: list[dict[str, Any]]) -> None:
    base = _baseline(results)
    cols = [r for r in results if r.get("enqueue")]
    width = 27
    print(
        "\nScale benchmark (each column its own process; ratios vs "
        f"{base['label'] if base else 'no baseline'})"
    )
    header = f"{'':<34}" + "".join(f"{r['label']:>{width}}" for r in cols)
    print(header)
    print("-" * len(header))

    def row(name: str, values: list[str]) -> None:
        print(f"{name:<34}" + "".join(f"{v:>{width}}" for v in values))

    def flag(r: dict[str, Any], phase: str) -> str:
        return " PARTIAL" if _get(r, phase, "partial") else ""

    row("URLs queued", [f"{r.get('queued_after_enqueue', 0):,}{flag(r, 'enqueue')}" for r in cols])
    row("enqueue (URL/s)", [_num(_get(r, "enqueue", "enqueue_per_s")) for r in cols])
    if base:
        be = _get(base, "enqueue", "enqueue_per_s")
        row(
            "  vs Scrapy JOBDIR",
            [_fmt_ratio(_get(r, "enqueue", "enqueue_per_s"), be) for r in cols],
        )
    row(
        "  Request() build (URL/s, untimed)",
        [_num(_get(r, "enqueue", "build_per_s")) for r in cols],
    )
    row(
        "dequeue+finish (URL/s)",
        [_num(_get(r, "dequeue", "dequeue_per_s")) + flag(r, "dequeue") for r in cols],
    )
    if base:
        bd = _get(base, "dequeue", "dequeue_per_s")
        row(
            "  vs Scrapy JOBDIR",
            [_fmt_ratio(_get(r, "dequeue", "dequeue_per_s"), bd) for r in cols],
        )
    row("URLs dequeued", [_num(_get(r, "dequeue", "dequeued")) for r in cols])
    row("RSS start (MB)", [_mb(r["enqueue"]["samples"][0]["rss_bytes"]) for r in cols])
    row("RSS after enqueue (MB)", [_mb(r.get("rss_after_enqueue_bytes")) for r in cols])
    row("RSS after dequeue (MB)", [_mb(r.get("rss_after_dequeue_bytes")) for r in cols])
    row("peak RSS (MB)", [_mb(r.get("peak_rss_bytes")) for r in cols])
    row(
        "disk after enqueue (B/URL)",
        [_num((r.get("disk") or {}).get("bytes_per_url")) for r in cols],
    )
    row(
        "  frontier.sqlite+wal (B/URL)",
        [_num((r.get("disk") or {}).get("frontier.sqlite_bytes_per_url")) for r in cols],
    )
    row(
        "  seen.sqlite+wal (B/URL)",
        [_num((r.get("disk") or {}).get("seen.sqlite_bytes_per_url")) for r in cols],
    )
    row("pickled Request.to_dict (B)", [_num(r.get("pickled_request_bytes")) for r in cols])
    row("CPU share enqueue/dequeue", [_cpu_shares(r) for r in cols])
    row("process wall (s)", [_num(r.get("process_wall_seconds")) for r in cols])

    for r in cols:
        samples = r["enqueue"]["samples"][1:]
        if len(samples) < 2:
            continue
        print(f"\n{r['label']}: RSS and enqueue rate by URLs queued")
        for s in samples:
            print(
                f"  {s['queued']:>12,} queued  RSS {s['rss_bytes'] / MB:7,.0f} MB  "
                f"{s['block_enqueue_per_s'] or 0:9,.0f} URL/s  load {s['loadavg_1m']:.2f}"
            )
        dsamples = (r.get("dequeue") or {}).get("samples", [])[1:]
        if dsamples:
            print(f"{r['label']}: RSS and dequeue rate by URLs dequeued")
            for s in dsamples:
                print(
                    f"  {s['dequeued']:>12,} dequeued  RSS {s['rss_bytes'] / MB:7,.0f} MB  "
                    f"{s['block_dequeue_per_s'] or 0:9,.0f} URL/s  load {s['loadavg_1m']:.2f}"
                )

    print("\nTargets")
    for c in checks:
        state = {True: "MET", False: "MISSED", None: "n/a"}[c["met"]]
        notes = []
        if c.get("at_full_size") is False:
            notes.append("NOT at full size")
        if c.get("partial"):
            notes.append("PARTIAL run")
        note = f" ({', '.join(notes)})" if notes else ""
        print(f"  {state:<7} {c['target']}: {c['run']} -> {c['value']}{note}")


def _cpu_shares(r: dict[str, Any]) -> str:
    enq = _get(r, "enqueue", "cpu_share") or 0.0
    deq = _get(r, "dequeue", "cpu_share") or 0.0
    return f"{enq:.2f}/{deq:.2f}"


def _fmt_ratio(value: Any, base: Any) -> str:
    r = _ratio(value, base)
    return "-" if r is None else f"{r:.2f}x"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """RSS against URLs queued (phase 1) and dequeued (phase 2), log x, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
    for r in results:
        if not r.get("enqueue"):
            continue
        style = "-" if r["config"].startswith("frontier") else "--"
        name = r["label"] + (" (dequeue PARTIAL)" if _get(r, "dequeue", "partial") else "")
        for ax, phase, key in ((ax1, "enqueue", "queued"), (ax2, "dequeue", "dequeued")):
            points = [s for s in (r.get(phase) or {}).get("samples", []) if s.get(key)]
            if points:
                (line,) = ax.plot(
                    [s[key] for s in points],
                    [s["rss_bytes"] / MB for s in points],
                    style,
                    marker="o",
                    ms=3,
                    label=name,
                )
                line.set_dashes((4, 2) if style == "--" else ())
    for ax in (ax1, ax2):
        ax.axhline(RSS_TARGET_MB, color="grey", lw=0.8, ls=":")
        ax.text(
            0.01,
            RSS_TARGET_MB,
            f"target {RSS_TARGET_MB} MB",
            transform=ax.get_yaxis_transform(),
            va="bottom",
            fontsize=7,
            color="grey",
        )
        ax.set_xscale("log")
        ax.set_ylim(0, RSS_TARGET_MB * 1.15)
        ax.grid(alpha=0.3, which="both")
    ax1.set_ylabel("RSS (MB)")
    ax1.set_xlabel("URLs queued")
    ax1.set_title("Phase 1: enqueue_request()", fontsize=10)
    ax2.set_xlabel("URLs dequeued")
    ax2.set_title("Phase 2: next_request() + fetch_completed()", fontsize=10)
    ax1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, 0.86), handlelength=3.5)
    fig.suptitle(
        "Process RSS: scrapy-frontier's SQLite state (solid) vs Scrapy's JOBDIR scheduler (dashed)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _code_state() -> dict[str, Any]:
    import hashlib

    import scrapy_frontier

    pkg = Path(scrapy_frontier.__file__).resolve().parent
    digest = hashlib.sha1()
    for path in sorted(pkg.rglob("*.py")):
        digest.update(path.read_bytes())

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", *a], cwd=pkg, capture_output=True, text=True, check=False
        ).stdout.strip()

    return {
        "package": str(pkg),
        "source_sha1": digest.hexdigest()[:12],
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--", ".")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help=f"URLs (default {FULL_N:,})")
    parser.add_argument("--hosts", type=int, default=None, help=f"hosts (default {FULL_HOSTS:,})")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_N:,} URLs over {QUICK_HOSTS:,} hosts (smoke run)",
    )
    parser.add_argument(
        "--wt-n",
        type=int,
        default=WT_N,
        help=f"URLs for frontier-wt in the default set (default {WT_N:,})",
    )
    parser.add_argument(
        "--configs", default=None, help=f"comma-separated kind[:n[:hosts]], kinds {KINDS}"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=780.0,
        help="seconds of enqueue per configuration before it stops (PARTIAL)",
    )
    parser.add_argument(
        "--dequeue-budget",
        type=float,
        default=180.0,
        help="seconds of dequeue per configuration before it stops (PARTIAL)",
    )
    parser.add_argument("--tmp", default=None, help="directory for the JOBDIRs (local disk)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--replot", action="store_true", help="only redraw the table and plot from --out"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n is None:
        args.n = QUICK_N if args.quick else FULL_N
    if args.hosts is None:
        args.hosts = QUICK_HOSTS if args.quick else FULL_HOSTS
    if min(args.n, args.hosts, args.budget, args.dequeue_budget) <= 0:
        parser.error("--n, --hosts and the budgets must be positive")

    if args.worker:
        kind, n, hosts = parse_spec(args.worker, args.n, args.hosts)
        result = run_worker(kind, n, hosts, args.budget, args.dequeue_budget, args.tmp)
        result["code"] = _code_state()
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0

    if args.replot:
        saved = json.loads(args.out.read_text())
        print_table(saved["runs"], saved["targets"])
        plot(saved["runs"], args.plot)
        print(f"\nPlot redrawn from {args.out} into {args.plot}")
        return 0

    try:
        specs = (
            [parse_spec(s, args.n, args.hosts) for s in args.configs.split(",") if s.strip()]
            if args.configs
            else default_specs(args)
        )
    except ValueError as exc:
        parser.error(str(exc))
    started = _dt.datetime.now(_dt.timezone.utc)
    load_start = os.getloadavg()
    results: list[dict[str, Any]] = []
    for i, spec in enumerate(specs, 1):
        print(f"[{i}/{len(specs)}] {label(*spec)}", file=sys.stderr, flush=True)
        results.append(_spawn(spec, args))
    checks = check_targets(results)
    print_table(results, checks)
    errors = {r["label"]: r["errors"] for r in results if r.get("errors")}
    for name, errs in errors.items():
        print(f"ERROR in {name}: {errs}", file=sys.stderr)
    hashes: set[str] = {h for r in results if (h := (r.get("code") or {}).get("source_sha1"))}
    if len(hashes) > 1:
        print(f"WARNING: scrapy_frontier changed during the run: {sorted(hashes)}", file=sys.stderr)
    if args.no_write:
        return 2 if errors else 0
    import scrapy

    payload = {
        "benchmark": "scale",
        "created": started.isoformat(timespec="seconds"),
        "total_seconds": (_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(),
        "code": _code_state(),
        "code_hashes_seen": sorted(hashes),
        "versions": {"python": platform.python_version(), "scrapy": scrapy.__version__},
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "note": "shared machine: other jobs ran at the same time; see each run's "
            "loadavg and cpu_share (CPU seconds / wall seconds of the phase)",
        },
        "params": {
            "n": args.n,
            "hosts": args.hosts,
            "quick": args.quick,
            "budget_seconds": {"enqueue": args.budget, "dequeue": args.dequeue_budget},
            "configs": [f"{k}:{n}:{h}" for k, n, h in specs],
            "urls": "http://h{k % hosts}.example/p/{k // hosts}, k = 0..n-1",
            "chunk": CHUNK,
        },
        "targets": checks,
        "runs": results,
        "errors": errors,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    plot(results, args.plot)
    print(f"\nResults written to {args.out} and {args.plot}")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
