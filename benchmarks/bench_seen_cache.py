"""URL-seen cache: Broder, Najork and Wiener's (WWW 2003) experiment on this project's traces.

Two traces of URL-seen tests (64-bit fingerprints, in the order a crawler asks):

* **crawl** -- recorded from a real Scrapy crawl of the loopback test web with
  scrapy-frontier's add-on: every request the spider yields (every link it
  extracts, the start URLs too) goes through a recording subclass of
  ``FrontierDupeFilter`` that logs its fingerprint;
* **synthetic** -- a larger, seeded host-local Zipf trace (see
  :class:`SyntheticParams`): many hosts crawled at once, links mostly within a
  host with Zipf popularity, a share of cross-host links to popular hosts.

Each trace is replayed through every policy: the crawl's, from
``scrapy_frontier.core.seen`` (clock, lru, random), and the simulation's, from
``seen_policies.py`` (static, min, infinite), at cache sizes 2^8 .. 2^20, and
the hit rate (lookups answered by the cache) is tabulated and plotted. Then
the URL-seen test's speed (lookups/s) and memory (bytes per fingerprint) are
measured beside Scrapy's ``RFPDupeFilter``.

    python benchmarks/bench_seen_cache.py             # full: about 2-3 minutes on 2 cores
    python benchmarks/bench_seen_cache.py --quick     # small traces, no files written
    python benchmarks/bench_seen_cache.py --no-crawl  # synthetic trace only

Writes ``benchmarks/results/seen_cache.json`` and ``docs/_static/seen_cache.png``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import multiprocessing
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seen_policies import (
    POLICIES,
    InfiniteCache,
    MinCache,
    StaticCache,
    most_frequent,
    next_uses,
)

from scrapy_frontier.core.seen import (
    ClockCache,
    MemoryFingerprintStore,
    SeenSet,
    make_cache,
    simulate,
)
from scrapy_frontier.dupefilter import FrontierDupeFilter

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "seen_cache.json"
PLOT = HERE.parent / "docs" / "_static" / "seen_cache.png"

#: The recording dupefilter writes its trace to the file named by this setting.
TRACE_SETTING = "BENCH_SEEN_TRACE_PATH"
#: Bytes per fingerprint of Scrapy's own set (a Python set of 20-byte SHA1 digests),
#: the figure usually quoted for it.
SCRAPY_REFERENCE_BYTES = 123

CRAWL_WEB = ["--shape", "wide", "--hosts", "300", "--pages", "30",
             "--latency", "0.001", "0.005", "--seed", "1"]
QUICK_CRAWL_WEB = ["--shape", "wide", "--hosts", "60", "--pages", "20",
                   "--latency", "0.001", "0.005", "--seed", "1"]
CRAWL_SETTINGS: dict[str, Any] = {
    "ADDONS": {"scrapy_frontier.Addon": 0},
    "DUPEFILTER_CLASS": "bench_seen_cache.RecordingDupeFilter",
    "FRONTIER_MIN_DELAY": 0.0,
    "CONCURRENT_REQUESTS": 32,
    "LOG_LEVEL": "WARNING",
}

SIZES_LOG2 = list(range(8, 21))
#: Broder et al.'s headline size, simulated beside the powers of two.
HEADLINE_SIZE = 50_000


# -- the recording dupefilter (runs inside the crawl process) --------------------------------


class RecordingDupeFilter(FrontierDupeFilter):
    """A FrontierDupeFilter that also logs every fingerprint it is asked about."""

    trace_path: Path | None = None
    trace: array[int]

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecordingDupeFilter:
        df = super().from_crawler(crawler)
        assert isinstance(df, RecordingDupeFilter)
        df.trace_path = Path(crawler.settings[TRACE_SETTING])
        df.trace = array("q")
        return df

    def fingerprint_seen(self, fp: int) -> bool:
        # The scheduler asks here with the fingerprint it computed; request_seen() does too.
        self.trace.append(fp)
        return super().fingerprint_seen(fp)

    def close(self, reason: str) -> None:
        super().close(reason)
        if self.trace_path is not None:
            with open(self.trace_path, "wb") as f:
                self.trace.tofile(f)


def record_crawl_trace(web_args: list[str], workdir: Path) -> tuple[list[int], dict[str, Any]]:
    """Crawl the test web with the recording dupefilter; the trace and a summary."""
    from frontier_testweb import ServerProcess, audit, read_log
    from frontier_testweb.crawl import run_crawl

    trace_path = workdir / "trace.bin"
    log = workdir / "server.jsonl"
    settings = {**CRAWL_SETTINGS, TRACE_SETTING: str(trace_path)}
    with ServerProcess(web_args, log_path=str(log)) as web:
        # cwd=HERE: the crawl process imports this module by name for DUPEFILTER_CLASS.
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           timeout=900, workdir=workdir / "crawl", cwd=HERE)
    if result.returncode != 0 or not trace_path.exists():
        raise RuntimeError(f"crawl failed:\n{result.output[-3000:]}")
    report = audit(read_log(log), expected=web.expected, min_delay=0.0)
    trace = array("q")
    with open(trace_path, "rb") as f:
        trace.frombytes(f.read())
    summary = {
        "web": web_args,
        "pages": len(web.expected),
        "coverage": report.coverage,
        "duplicates": report.duplicates,
        "elapsed_s": round(result.elapsed, 1),
        "filtered": result.stats.get("dupefilter/filtered"),
    }
    return trace.tolist(), summary


# -- the synthetic trace ---------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticParams:
    """A host-local Zipf trace of URL-seen tests; every field is documented.

    The crawl keeps ``active_hosts`` hosts in progress at once (Mercator's back
    queues). Each step picks one of them uniformly and "fetches" one of its
    pages, which yields ``links_min..links_max`` links (uniform). A link stays
    on the same host with probability ``local``, to the page of Zipf rank r
    (exponent ``zipf_local``; rank 0 is the home page). Otherwise it goes to a
    host drawn by Zipf (``zipf_host``) over the whole ``universe`` of hosts, to
    that host's page of Zipf rank (``zipf_cross``, steep: mostly home pages).
    A host's size is ``min_pages`` x Pareto(``pareto_alpha``), capped at
    ``max_pages``; it stays active for as many fetches as it has pages, then
    the next host (in a seeded random order of the universe) takes its place.
    A URL (host h, page p) has fingerprint splitmix64(h << 32 | p).
    """

    lookups: int = 2_000_000
    active_hosts: int = 300
    universe: int = 200_000
    local: float = 0.85
    zipf_local: float = 1.0
    zipf_host: float = 1.0
    zipf_cross: float = 1.5
    links_min: int = 4
    links_max: int = 16
    min_pages: int = 20
    pareto_alpha: float = 1.2
    max_pages: int = 20_000
    seed: int = 1


_M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """A 64-bit mixer (as a signed int): turns (host, page) keys into fingerprint-like values."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    x ^= x >> 31
    return x - (1 << 64) if x >= 1 << 63 else x


def zipf_rank(u: float, n: int, s: float) -> int:
    """A rank in 0..n-1 with P(r) ~ (r + 1)^-s, by inverting the continuous CDF at ``u``."""
    if s == 1.0:
        r = int((n + 1) ** u) - 1
    else:
        a = 1.0 - s
        r = int((((n + 1) ** a - 1.0) * u + 1.0) ** (1.0 / a)) - 1
    return 0 if r < 0 else (n - 1 if r >= n else r)


def synthetic_keys(p: SyntheticParams) -> list[int]:
    """The trace as (host << 32 | page) keys; see :class:`SyntheticParams`."""
    rng = random.Random(p.seed)
    sizes = [min(p.max_pages, int(p.min_pages * rng.paretovariate(p.pareto_alpha)))
             for _ in range(p.universe)]
    order = list(range(p.universe))
    rng.shuffle(order)
    arrivals = 0
    active: list[int] = []
    budget: list[int] = []
    for _ in range(p.active_hosts):
        host = order[arrivals % p.universe]
        arrivals += 1
        active.append(host)
        budget.append(sizes[host])
    out: list[int] = []
    rand, randint, randrange = rng.random, rng.randint, rng.randrange
    while len(out) < p.lookups:
        i = randrange(p.active_hosts)
        host = active[i]
        for _ in range(randint(p.links_min, p.links_max)):
            if rand() < p.local:
                target, page = host, zipf_rank(rand(), sizes[host], p.zipf_local)
            else:
                target = zipf_rank(rand(), p.universe, p.zipf_host)
                page = zipf_rank(rand(), sizes[target], p.zipf_cross)
            out.append(target << 32 | page)
        budget[i] -= 1
        if budget[i] <= 0:
            host = order[arrivals % p.universe]
            arrivals += 1
            active[i] = host
            budget[i] = sizes[host]
    del out[p.lookups:]
    return out


def fingerprints_of(keys: Sequence[int]) -> list[int]:
    memo: dict[int, int] = {}
    out = []
    for k in keys:
        fp = memo.get(k)
        if fp is None:
            fp = memo[k] = splitmix64(k)
        out.append(fp)
    return out


# -- hit-rate simulation ---------------------------------------------------------------------

# Set in the parent before the worker pool forks, so workers share them copy-on-write.
_TRACES: dict[str, list[int]] = {}
_NEXT: dict[str, list[int]] = {}
_POPULAR: dict[str, list[int]] = {}
#: CPU seconds spent replaying each trace through each policy (all sizes).
SIM_SECONDS: dict[str, dict[str, float]] = {}


def _simulate_one(task: tuple[str, str, int]) -> tuple[str, str, int, int, float]:
    name, policy, size = task
    trace = _TRACES[name]
    started = time.perf_counter()
    cache: Any
    if policy == "min":
        cache = MinCache(size, trace, _NEXT[name])
    elif policy == "static":
        cache = StaticCache(size, _POPULAR[name][:size])
    elif policy == "infinite":
        cache = InfiniteCache()
    else:
        cache = make_cache(policy, size, rng=random.Random(1))
    hits = simulate(cache, trace)
    return name, policy, size, hits, time.perf_counter() - started


def run_simulations(traces: dict[str, list[int]], sizes: list[int],
                    workers: int) -> dict[str, dict[str, dict[int, float]]]:
    _TRACES.clear()
    _TRACES.update(traces)
    for name, trace in traces.items():
        _NEXT[name] = next_uses(trace)  # O(n), one reverse pass
        _POPULAR[name] = most_frequent(trace, max(sizes))
    distinct = {name: len(set(trace)) for name, trace in traces.items()}
    # A cache that holds every distinct URL never evicts: every policy scores
    # the infinite cache's rate there (compulsory misses only), no need to replay.
    tasks = [(name, policy, size) for name in traces for policy in POLICIES
             for size in (sizes if policy != "infinite" else sizes[:1])
             if policy == "infinite" or size < distinct[name]]
    # Longest first: MIN is the slowest policy, big caches the slowest sizes.
    tasks.sort(key=lambda t: (t[1] != "min", -t[2], -len(traces[t[0]])))
    rates: dict[str, dict[str, dict[int, float]]] = {
        name: {policy: {} for policy in POLICIES} for name in traces}
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            results = list(pool.map(_simulate_one, tasks))
    else:
        results = [_simulate_one(t) for t in tasks]
    for name, policy, size, hits, seconds in results:
        rates[name][policy][size] = hits / len(traces[name])
        spent = SIM_SECONDS.setdefault(name, {})
        spent[policy] = spent.get(policy, 0.0) + seconds
    for name in traces:
        value = rates[name]["infinite"][sizes[0]]
        for policy in POLICIES:
            for size in sizes:
                rates[name][policy].setdefault(size, value)
    _NEXT.clear()
    _POPULAR.clear()
    return rates


# -- throughput ------------------------------------------------------------------------------


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def core_throughput(trace: list[int], workdir: Path, repeat: int = 3) -> dict[str, Any]:
    """Lookups/s of the bare seen-tests on fingerprints computed beforehand (median of runs)."""
    import statistics

    from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore

    n = len(trace)
    digests = {fp: hashlib.sha1(fp.to_bytes(8, "big", signed=True)).digest() for fp in set(trace)}
    trace20 = [digests[fp] for fp in trace]
    runs: dict[str, list[float]] = {"scrapy-set": [], "clock+memory": [], "clock+sqlite": []}
    out: dict[str, Any] = {"lookups": n, "repeat": repeat}
    for i in range(repeat):
        # What RFPDupeFilter.request_seen does once it has the fingerprint.
        scrapy_set: set[bytes] = set()

        def scrapy_seen(fp: bytes, s: set[bytes] = scrapy_set) -> bool:
            if fp in s:
                return True
            s.add(fp)
            return False

        def run_scrapy() -> None:
            for fp in trace20:
                scrapy_seen(fp)

        mem = SeenSet(ClockCache(1 << 16), MemoryFingerprintStore())

        def run_memory(seen: SeenSet = mem) -> None:
            for fp in trace:
                seen.seen(fp)

        disk = SeenSet(ClockCache(1 << 16), SQLiteFingerprintStore(workdir / f"core-{i}.sqlite"))

        def run_disk(seen: SeenSet = disk) -> None:
            for fp in trace:
                seen.seen(fp)
            seen.close()

        runs["scrapy-set"].append(n / _timed(run_scrapy))
        runs["clock+memory"].append(n / _timed(run_memory))
        runs["clock+sqlite"].append(n / _timed(run_disk))
        out["clock_hit_rate"] = disk.hit_rate
        out["clock_store_hits"] = disk.store_hits
    for name, values in runs.items():
        out[name] = statistics.median(values)
    out["runs"] = runs
    return out


def dupefilter_throughput(keys: list[int], workdir: Path, repeat: int = 5) -> dict[str, Any]:
    """request_seen/s through the Scrapy dupefilters, fingerprinting included.

    Each configuration runs ``repeat`` times, in rotating order, after one
    untimed warm-up each; the median is reported.
    """
    import statistics

    import scrapy.utils.request as scrapy_request
    from scrapy import Request, Spider
    from scrapy.dupefilters import RFPDupeFilter
    from scrapy.utils.test import get_crawler

    class _Spider(Spider):
        name = "bench"

    urls = [f"http://h{k >> 32}.example/p/{k & 0xFFFFFFFF}" for k in keys]
    # Every extracted link is a new Request object, as in a crawl.
    requests = [Request(u) for u in urls]
    rfp = "scrapy.dupefilters.RFPDupeFilter"
    ours = "scrapy_frontier.dupefilter.FrontierDupeFilter"
    configs: dict[str, tuple[Any, bool]] = {
        "scrapy RFPDupeFilter": (RFPDupeFilter, False),
        "scrapy RFPDupeFilter + JOBDIR": (RFPDupeFilter, True),
        "FrontierDupeFilter": (FrontierDupeFilter, False),
        "FrontierDupeFilter + JOBDIR": (FrontierDupeFilter, True),
    }
    runs: dict[str, list[float]] = {name: [] for name in configs}
    counter = 0

    def one(name: str, reqs: list[Request]) -> float:
        nonlocal counter
        cls, jobdir = configs[name]
        settings: dict[str, Any] = {"DUPEFILTER_CLASS": rfp if cls is RFPDupeFilter else ours}
        if jobdir:
            counter += 1
            settings["JOBDIR"] = str(workdir / f"job-{counter}")
        df = cls.from_crawler(get_crawler(_Spider, settings))
        # Scrapy caches a fingerprint per Request object: start cold.
        cache = getattr(scrapy_request, "_fingerprint_cache", None)
        if cache is not None:
            cache.clear()
        else:  # pragma: no cover - another Scrapy version
            reqs = [r.replace() for r in reqs]
        seen = df.request_seen
        return _timed(lambda: ([seen(r) for r in reqs], df.close("finished")))

    names = list(configs)
    for name in names:
        one(name, requests[:2000])  # warm-up
    for i in range(repeat):
        for name in names[i % len(names):] + names[:i % len(names)]:
            runs[name].append(len(requests) / one(name, requests))
    out: dict[str, Any] = {"lookups": len(urls), "repeat": repeat}
    for name, rates in runs.items():
        out[name] = statistics.median(rates)
    out["runs"] = runs
    return out


# -- memory (each probe in a fresh process) --------------------------------------------------


def _probe(kind: str, n: int, workdir: str) -> dict[str, Any]:
    import psutil

    proc = psutil.Process()
    rng = random.Random(1)
    gc.collect()
    before = proc.memory_info().rss
    out: dict[str, Any] = {"kind": kind, "n": n}
    keep: Any
    if kind == "scrapy-set":
        # RFPDupeFilter's set: one 20-byte SHA1 digest object per URL, owned by the set.
        keep = set()
        for i in range(n):
            keep.add(hashlib.sha1(i.to_bytes(8, "big")).digest())
    elif kind == "clock-cache":
        keep = ClockCache(n)
        # One past full: the first eviction builds the ring that a cache in use holds.
        for _ in range(n + 1):
            keep.insert(rng.getrandbits(63))
    elif kind == "seenset-sqlite":
        from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore

        path = Path(workdir) / "probe.sqlite"
        keep = SeenSet(ClockCache(1 << 16), SQLiteFingerprintStore(path))
        for _ in range(n):
            keep.seen(rng.getrandbits(63))
        keep.store.flush()  # type: ignore[attr-defined]
        out["sqlite_rows"] = len(keep.store)
    else:
        raise ValueError(kind)
    gc.collect()
    out["rss_delta"] = proc.memory_info().rss - before
    out["bytes_per_item"] = out["rss_delta"] / n
    if kind == "seenset-sqlite":
        keep.close()
        size = path.stat().st_size
        out["file_bytes"] = size
        out["file_bytes_per_fp"] = size / n
    return out


def memory_probe(kind: str, n: int, workdir: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--probe", kind, str(n), str(workdir)]
    line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
    return dict(json.loads(line.splitlines()[-1]))


# -- report ----------------------------------------------------------------------------------

SHOWN_LOG2 = (8, 10, 12, 14, 16, 18, 20)


def print_rates(name: str, rates: dict[str, dict[int, float]], info: str) -> None:
    print(f"\n== {name} trace: {info}")
    print(f"{'policy':<10}" + "".join(f"{'2^' + str(k):>8}" for k in SHOWN_LOG2))
    for policy in POLICIES:
        row = rates[policy]
        print(f"{policy:<10}" + "".join(
            f"{row[1 << k]:>8.3f}" if (1 << k) in row else f"{'':>8}" for k in SHOWN_LOG2))


def checks(rates: dict[str, dict[int, float]], sizes: list[int]) -> dict[str, Any]:
    """The paper's qualitative claims, checked on one trace."""
    eps = 0.005
    get = rates.get
    ordering = all(
        get("min", {})[s] + eps >= get("lru", {})[s] >= get("random", {})[s] - eps
        and get("min", {})[s] + eps >= get("clock", {})[s] >= get("random", {})[s] - eps
        for s in sizes)
    lru_clock = max(abs(rates["lru"][s] - rates["clock"][s]) for s in sizes)
    static_worst = [f"2^{s.bit_length() - 1}" for s in sizes
                    if rates["static"][s] < min(rates[p][s] for p in ("clock", "lru", "random"))]
    lru = [rates["lru"][s] for s in sizes]
    gains = [b - a for a, b in zip(lru, lru[1:], strict=False)]
    knee = sizes[gains.index(max(gains)) + 1]
    after16 = [s for s in sizes if s >= 1 << 16]
    return {
        "min>=lru,clock>=random (all sizes, 0.005 slack)": ordering,
        "max |lru - clock|": round(lru_clock, 4),
        "static worst of the four real policies at": ", ".join(static_worst) or "no size",
        "largest lru gain per doubling ends at": f"2^{knee.bit_length() - 1}",
        "lru gain after 2^16": round(rates["lru"][after16[-1]] - rates["lru"][after16[0]], 4)
        if after16 else None,
    }


def plot(results: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib not installed: no plot")
        return
    names = list(results["traces"])
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.3), squeeze=False)
    styles = {"min": ("black", "--"), "infinite": ("gray", ":"), "lru": ("tab:blue", "-"),
              "clock": ("tab:orange", "-"), "random": ("tab:green", "-"),
              "static": ("tab:red", "-")}
    for ax, name in zip(axes[0], names, strict=False):
        trace = results["traces"][name]
        for policy in POLICIES:
            row = trace["hit_rate"][policy]
            xs = sorted(int(s) for s in row)
            color, ls = styles[policy]
            ax.plot([math.log2(x) for x in xs], [row[str(x)] for x in xs],
                    color=color, ls=ls, marker="o" if policy not in ("min", "infinite") else None,
                    ms=3, label=policy)
        ax.set_title(f"{name} trace ({trace['lookups']:,} lookups, "
                     f"{trace['distinct']:,} URLs)")
        ax.set_xlabel("log2(cache entries)")
        ax.set_ylabel("hit rate")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle("URL-seen cache hit rate by policy (after Broder, Najork and Wiener 2003)")
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {PLOT}")


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small traces and sizes, nothing written (smoke run)")
    parser.add_argument("--no-crawl", action="store_true", help="skip the recorded crawl trace")
    parser.add_argument("--lookups", type=int, help="synthetic trace length")
    parser.add_argument("--active-hosts", type=int, help="synthetic: hosts crawled at once")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--probe", nargs=3, metavar=("KIND", "N", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        kind, n, workdir = args.probe
        print(json.dumps(_probe(kind, int(n), workdir)))
        return 0

    started = time.monotonic()
    params = SyntheticParams()
    if args.quick:
        params = SyntheticParams(lookups=300_000)
    if args.lookups:
        params = SyntheticParams(**{**asdict(params), "lookups": args.lookups})
    if args.active_hosts:
        params = SyntheticParams(**{**asdict(params), "active_hosts": args.active_hosts})
    sizes = [1 << k for k in (range(8, 17) if args.quick else SIZES_LOG2)]

    results: dict[str, Any] = {
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "quick": args.quick,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "synthetic_params": asdict(params),
        "traces": {},
    }
    traces: dict[str, list[int]] = {}
    infos: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-seen-") as tmp:
        workdir = Path(tmp)
        if not args.no_crawl:
            print("recording the crawl trace ...", file=sys.stderr, flush=True)
            web = QUICK_CRAWL_WEB if args.quick else CRAWL_WEB
            traces["crawl"], crawl_summary = record_crawl_trace(web, workdir)
            results["crawl"] = crawl_summary
            infos["crawl"] = (f"test web {' '.join(web)}; crawl {crawl_summary['elapsed_s']} s, "
                              f"coverage {crawl_summary['coverage']:.3f}")
        print(f"generating the synthetic trace ({params.lookups:,} lookups) ...",
              file=sys.stderr, flush=True)
        t0 = time.monotonic()
        keys = synthetic_keys(params)
        traces["synthetic"] = fingerprints_of(keys)
        gen_s = time.monotonic() - t0
        infos["synthetic"] = (f"{params.active_hosts} active hosts, local {params.local}, "
                              f"generated in {gen_s:.1f} s")

        print(f"simulating {len(POLICIES)} policies x {len(sizes)} sizes ...",
              file=sys.stderr, flush=True)
        t0 = time.monotonic()
        all_sizes = sorted({*sizes, HEADLINE_SIZE}) if not args.quick else sizes
        rates = run_simulations(traces, all_sizes, args.workers)
        sim_s = time.monotonic() - t0
        for name, trace in traces.items():
            distinct = len(set(trace))
            shown = {p: {s: r for s, r in rates[name][p].items() if s in sizes}
                     for p in POLICIES}
            print_rates(name, shown, f"{len(trace):,} lookups, {distinct:,} distinct URLs "
                        f"(compulsory-miss bound {1 - distinct / len(trace):.3f}); {infos[name]}")
            check = checks(shown, sizes)
            if HEADLINE_SIZE in rates[name]["lru"]:
                check[f"hit rate at {HEADLINE_SIZE:,} entries (lru/clock)"] = (
                    round(rates[name]["lru"][HEADLINE_SIZE], 3),
                    round(rates[name]["clock"][HEADLINE_SIZE], 3))
            for key, value in check.items():
                print(f"  {key}: {value}")
            results["traces"][name] = {
                "lookups": len(trace), "distinct": distinct,
                "simulation_cpu_s": {p: round(v, 1) for p, v in SIM_SECONDS[name].items()},
                "hit_rate": {p: {str(s): round(r, 5) for s, r in sorted(rates[name][p].items())}
                             for p in POLICIES},
                "checks": check,
            }
        print(f"(simulations: {sim_s:.1f} s on {args.workers} worker(s))")

        if not args.quick:
            print("\nknee vs active hosts (lru, 1,000,000-lookup synthetic traces):",
                  file=sys.stderr, flush=True)
            knee_rows = {}
            print(f"\n{'active':<8}" + "".join(f"{'2^' + str(k):>8}" for k in (10, 12, 14, 16, 18)))
            for active in (100, 300, 1000):
                p = SyntheticParams(**{**asdict(params), "lookups": 1_000_000,
                                       "active_hosts": active})
                trace = fingerprints_of(synthetic_keys(p))
                row = {}
                for k in (10, 12, 14, 16, 18):
                    row[1 << k] = simulate(make_cache("lru", 1 << k), trace) / len(trace)
                knee_rows[active] = row
                print(f"{active:<8}"
                      + "".join(f"{row[1 << k]:>8.3f}" for k in (10, 12, 14, 16, 18)))
            results["knee_vs_active_hosts"] = {
                str(a): {str(s): round(r, 4) for s, r in row.items()}
                for a, row in knee_rows.items()}

        print("\nmeasuring throughput ...", file=sys.stderr, flush=True)
        core_n = min(len(traces["synthetic"]), 300_000 if args.quick else 1_000_000)
        core = core_throughput(traces["synthetic"][:core_n], workdir)
        df_n = 20_000 if args.quick else 100_000
        dfs = dupefilter_throughput(keys[:df_n], workdir)
        results["throughput"] = {"core": core, "dupefilter": dfs}
        print(f"\n== throughput: bare seen-test, {core['lookups']:,} lookups of the synthetic "
              f"trace (fingerprints precomputed; median of {core['repeat']}; CLOCK 2^16 hit "
              f"rate {core['clock_hit_rate']:.3f})")
        base = core["scrapy-set"]
        for name in ("scrapy-set", "clock+memory", "clock+sqlite"):
            print(f"  {name:<32}{core[name]:>12,.0f} lookups/s  {core[name] / base:>5.2f}x")
        print(f"== throughput: request_seen(), {dfs['lookups']:,} Requests of the synthetic "
              f"trace (fingerprinting included; median of {dfs['repeat']})")
        base = dfs["scrapy RFPDupeFilter"]
        for name, value in dfs.items():
            if name not in ("lookups", "repeat", "runs"):
                print(f"  {name:<32}{value:>12,.0f} lookups/s  {value / base:>5.2f}x")

        print("\nmeasuring memory ...", file=sys.stderr, flush=True)
        n_mem = 200_000 if args.quick else 1_000_000
        mem = {
            "scrapy-set": memory_probe("scrapy-set", n_mem, workdir),
            "clock-cache": memory_probe("clock-cache", 1 << 16, workdir),
            "seenset-sqlite": memory_probe("seenset-sqlite", n_mem, workdir),
        }
        results["memory"] = mem
        print(f"\n== memory ({n_mem:,} distinct fingerprints; RSS growth in a fresh process)")
        print(f"  scrapy RFPDupeFilter set:      {mem['scrapy-set']['bytes_per_item']:>7.1f} "
              f"B/URL RSS (usually quoted: ~{SCRAPY_REFERENCE_BYTES})")
        print(f"  CLOCK cache, 2^16 entries:     {mem['clock-cache']['bytes_per_item']:>7.1f} "
              f"B/entry RSS = {mem['clock-cache']['rss_delta'] / 2**20:.1f} MiB, fixed")
        sq = mem["seenset-sqlite"]
        print(f"  CLOCK 2^16 + SQLite store:     {sq['bytes_per_item']:>7.1f} B/URL RSS "
              f"(= {sq['rss_delta'] / 2**20:.1f} MiB, nearly all fixed: the cache and SQLite's "
              f"page cache), {sq['file_bytes_per_fp']:.1f} B/URL on disk "
              f"({sq['file_bytes'] / 2**20:.1f} MiB)")

    results["elapsed_s"] = round(time.monotonic() - started, 1)
    print(f"\ntotal {results['elapsed_s']} s")
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2, default=str))
        print(f"wrote {RESULTS}")
        if not args.no_plot:
            plot(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
