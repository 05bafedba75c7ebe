"""Refresh policies under a fixed fetch budget: freshness, age, time to detect, waste.

A discrete-event simulation on a virtual clock (seconds) that drives the real
predictors of ``scrapy_frontier.core.refresh``. N pages change as Poisson processes
with gamma-distributed rates; every policy sees the same change times. A global
scheduler always fetches the page with the earliest due time, at most ``budget``
fetches per day (fetches at least ``1 / budget`` apart); a page due later waits.

    python benchmarks/bench_freshness.py             # N=3000, both scenarios
    python benchmarks/bench_freshness.py --quick     # smoke run, nothing written
    python benchmarks/bench_freshness.py --pages 1000 --revisit-days 15

Writes ``benchmarks/results/freshness.json`` and ``docs/_static/freshness.png``.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import platform
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrapy_frontier.core.clock import FakeClock
from scrapy_frontier.core.estimators import mean_freshness_even, optimal_allocation
from scrapy_frontier.core.refresh import (
    AutoSelector,
    EqualInterval,
    EstimatorOptimal,
    HalveDouble,
    NutchAdaptive,
    PageHistory,
    PoissonTarget,
    Predictor,
    RefreshConfig,
    Refresher,
    TimelyReturn,
    calibrate,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "freshness.json"
PLOT = HERE.parent / "docs" / "_static" / "freshness.png"

DAY = 86400.0
HOUR = 3600.0

#: Tianwang / CNNIC 2005 change statistics: fraction of pages that changed
#: within t days.
TIANWANG = [(7.0, 0.18), (30.0, 0.35), (91.0, 0.60), (182.0, 0.80)]


# -- scenarios ------------------------------------------------------------------


def gamma_changed_within(shape: float, scale: float, days: float) -> float:
    """P(a page with gamma(shape, scale) rate per day changes within ``days``)."""
    return 1.0 - (1.0 + scale * days) ** (-shape)


def fit_gamma(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Least-squares fit of gamma (shape, scale per day) to (days, fraction changed).

    A mixture of Poisson processes with gamma rates changes within t with
    probability 1 - (1 + scale t)^-shape. Grid search (shape 0.05..5 by 0.01,
    scale 10^-4..10^1 over 1,000 log steps), then a finer grid around the best.
    Returns (shape, scale, residual sum of squares).
    """

    def sse(k: float, th: float) -> float:
        return sum((gamma_changed_within(k, th, t) - p) ** 2 for t, p in points)

    best = (math.inf, 1.0, 1.0)
    for i in range(5, 501):
        k = i / 100
        for j in range(1000):
            th = 10 ** (-4 + 5 * j / 1000)
            e = sse(k, th)
            if e < best[0]:
                best = (e, k, th)
    _, k0, th0 = best
    for i in range(-50, 51):
        k = k0 * (1 + i / 1000)
        for j in range(-50, 51):
            th = th0 * (1 + j / 1000)
            e = sse(k, th)
            if e < best[0]:
                best = (e, k, th)
    e, k, th = best
    return k, th, e


@dataclass
class Scenario:
    name: str
    shape: float
    scale_per_day: float  # gamma scale of the rate, in changes per day
    note: str


def make_rates(sc: Scenario, n: int, seed: int) -> list[float]:
    """Rates per second."""
    rng = random.Random(seed)
    return [rng.gammavariate(sc.shape, sc.scale_per_day) / DAY for _ in range(n)]


def make_changes(rates: list[float], horizon: float, seed: int) -> list[list[float]]:
    """Each page's change times in (0, horizon], a Poisson process of its rate."""
    rng = random.Random(seed)
    out: list[list[float]] = []
    for rate in rates:
        times: list[float] = []
        t = 0.0
        if rate > 0:
            for _ in range(10_000_000):  # bounded: far more than rate * horizon
                t += rng.expovariate(rate)
                if t > horizon:
                    break
                times.append(t)
        out.append(times)
    return out


# -- policies -------------------------------------------------------------------


class Policy:
    """Decides when each page is due. ``on_fetch`` returns the next due time."""

    name = "policy"
    realloc_every: float = 0.0

    def start(self, n: int, clock: FakeClock, rng: random.Random) -> list[float]:
        raise NotImplementedError

    def on_fetch(self, i: int, changed: bool, last_modified: float | None) -> float:
        raise NotImplementedError

    def realloc(self) -> None:
        """Called every ``realloc_every`` seconds of virtual time (if > 0)."""


class FixedFrequency(Policy):
    """Each page visited every 1/f_i; f_i = 0 means never."""

    def __init__(self, name: str, freqs: list[float]) -> None:
        self.name = name
        self.freqs = freqs
        self.clock: FakeClock | None = None

    def start(self, n: int, clock: FakeClock, rng: random.Random) -> list[float]:
        self.clock = clock
        return [rng.uniform(0.0, 1.0 / f) if f > 0 else math.inf for f in self.freqs]

    def on_fetch(self, i: int, changed: bool, last_modified: float | None) -> float:
        assert self.clock is not None
        f = self.freqs[i]
        return self.clock.now + 1.0 / f if f > 0 else math.inf


class PredictorPolicy(Policy):
    """Each page has a PageHistory; a Refresher with ``predictor`` sets its due time."""

    def __init__(self, name: str, predictor: Predictor, config: RefreshConfig) -> None:
        self.name = name
        self.predictor = predictor
        self.config = config
        self.histories: list[PageHistory] = []
        self.refresher: Refresher | None = None

    def start(self, n: int, clock: FakeClock, rng: random.Random) -> list[float]:
        self.refresher = Refresher(self.predictor, self.config, clock)
        self.histories = [PageHistory() for _ in range(n)]
        dues = []
        for h in self.histories:
            self.refresher.visited(h, False)  # the initial crawl at time 0
            h.next_due = rng.uniform(0.0, h.interval)  # staggered
            dues.append(h.next_due)
        return dues

    def on_fetch(self, i: int, changed: bool, last_modified: float | None) -> float:
        assert self.refresher is not None
        return self.refresher.visited(self.histories[i], changed, last_modified)


class EstimatorOptimalPolicy(PredictorPolicy):
    """Rates estimated online from each page's visits; ``mu`` re-solved periodically.

    Pages with no estimate yet (not revisited since the initial crawl) are counted
    at the uniform frequency; the rest of the budget goes to the optimal allocation
    over the estimated rates, whose ``mu`` the predictor then uses.
    """

    def __init__(
        self,
        config: RefreshConfig,
        budget: float,
        every: float,
        probe: int = 0,
        shrink: bool = True,
    ) -> None:
        self.opt = EstimatorOptimal(config, probe=probe)
        self.shrink = shrink
        super().__init__("estimator-optimal", self.opt, config)
        self.budget = budget
        self.realloc_every = every
        self.mu_history: list[float] = []

    def realloc(self) -> None:
        mu = calibrate(self.opt, lambda: self.histories, self.budget, shrink=self.shrink)
        if mu is not None:
            self.mu_history.append(mu)


# -- the simulation -------------------------------------------------------------


@dataclass
class Metrics:
    freshness: float
    age_days: float
    detect_days: float
    detections: int
    fetches: int
    wasted: int
    waste_fraction: float
    budget_fetches: float
    #: Pages not fetched once in the measured window.
    unvisited: int
    seconds: float

    def row(self) -> dict[str, Any]:
        return dict(self.__dict__)


def simulate(
    policy: Policy,
    changes: list[list[float]],
    budget: float,
    horizon: float,
    warmup: float,
    seed: int,
    last_modified_header: bool = False,
) -> Metrics:
    """Run one policy. ``budget`` in fetches per second; times in seconds.

    Copies are all fresh at time 0. Measures over ``[warmup, horizon]``:
    freshness (time- and page-averaged), age (time since the first change the
    copy has not seen), mean delay from a change's first unseen occurrence to the
    fetch that sees it, and fetches that found no change.
    """
    started = time.perf_counter()
    n = len(changes)
    clock = FakeClock(0.0)
    rng = random.Random(seed)
    dues = policy.start(n, clock, rng)
    heap = [(d, i) for i, d in enumerate(dues) if d < math.inf]
    heapq.heapify(heap)
    last_fetch = [0.0] * n
    window = horizon - warmup
    stale = age = 0.0
    delays: list[float] = []
    fetches = wasted = 0
    gap = 1.0 / budget
    t_prev = -gap
    next_realloc = policy.realloc_every if policy.realloc_every > 0 else math.inf

    def account(first_change: float, until: float) -> tuple[float, float]:
        """Stale time and integral of age over [first_change, until] in the window."""
        a = max(first_change, warmup)
        b = min(until, horizon)
        if b <= a:
            return 0.0, 0.0
        return b - a, ((b - first_change) ** 2 - (a - first_change) ** 2) / 2.0

    max_steps = int(budget * horizon) + n + 10
    for _ in range(max_steps):
        if not heap:
            break
        due, i = heapq.heappop(heap)
        t = max(t_prev + gap, due)
        if t > horizon:
            break
        while next_realloc <= t:
            clock.now = next_realloc
            policy.realloc()
            next_realloc += policy.realloc_every
        clock.now = t
        t_prev = t
        ch = changes[i]
        k = bisect.bisect_right(ch, last_fetch[i])
        changed = k < len(ch) and ch[k] <= t
        last_modified = None
        if changed:
            first = ch[k]
            last_modified = ch[bisect.bisect_right(ch, t) - 1]
            s, a = account(first, t)
            stale += s
            age += a
            if t >= warmup:
                delays.append(t - first)
        if t >= warmup:
            fetches += 1
            if not changed:
                wasted += 1
        last_fetch[i] = t
        # By default the simulated server sends no Last-Modified: the predictors
        # see only "changed or not".
        nxt = policy.on_fetch(i, changed, last_modified if last_modified_header else None)
        if nxt < math.inf:
            heapq.heappush(heap, (nxt, i))
    for i in range(n):  # changes still unseen at the end
        ch = changes[i]
        k = bisect.bisect_right(ch, last_fetch[i])
        if k < len(ch):
            s, a = account(ch[k], horizon)
            stale += s
            age += a
    return Metrics(
        freshness=1.0 - stale / (n * window),
        age_days=age / (n * window) / DAY,
        detect_days=(sum(delays) / len(delays) / DAY) if delays else math.nan,
        detections=len(delays),
        fetches=fetches,
        wasted=wasted,
        waste_fraction=wasted / fetches if fetches else math.nan,
        budget_fetches=budget * window,
        unvisited=sum(1 for t in last_fetch if t < warmup),
        seconds=time.perf_counter() - started,
    )


def make_policies(
    rates: list[float],
    budget: float,
    config: RefreshConfig,
    realloc_every: float,
    probe: int,
    shrink: bool,
) -> list[Callable[[], Policy]]:
    """Factories, so every run starts from fresh state."""
    n = len(rates)
    total = sum(rates)
    uniform = [budget / n] * n
    proportional = [budget * r / total for r in rates]
    oracle = optimal_allocation(rates, budget).frequencies

    def auto() -> Policy:
        selector = AutoSelector(
            [
                PoissonTarget(config),
                NutchAdaptive(config),
                HalveDouble(config),
                EqualInterval(config),
                TimelyReturn(config),
            ]
        )
        return PredictorPolicy("auto-selector", selector, config)

    return [
        lambda: FixedFrequency("oracle-optimal", oracle),
        lambda: EstimatorOptimalPolicy(config, budget, realloc_every, probe, shrink),
        lambda: FixedFrequency("uniform", uniform),
        lambda: FixedFrequency("proportional", proportional),
        lambda: PredictorPolicy("halve/double", HalveDouble(config), config),
        lambda: PredictorPolicy("nutch", NutchAdaptive(config), config),
        lambda: PredictorPolicy("equal-interval", EqualInterval(config), config),
        lambda: PredictorPolicy("timely-return", TimelyReturn(config), config),
        lambda: PredictorPolicy("poisson-target", PoissonTarget(config), config),
        auto,
    ]


def analytic(rates: list[float], budget: float) -> dict[str, float]:
    """Closed-form freshness of the fixed-frequency policies (evenly spaced visits)."""
    n = len(rates)
    total = sum(rates)
    return {
        "uniform": sum(mean_freshness_even(r, budget / n) for r in rates) / n,
        "proportional": sum(mean_freshness_even(r, budget * r / total) for r in rates) / n,
        "oracle-optimal": optimal_allocation(rates, budget).mean_freshness,
    }


# -- output ---------------------------------------------------------------------


def print_table(name: str, rows: dict[str, Metrics], closed: dict[str, float]) -> None:
    print(f"\n== scenario {name} ==")
    head = (
        f"{'policy':<18} {'fresh':>6} {'closed':>6} {'age d':>7} {'detect d':>8} "
        f"{'fetches':>8} {'wasted':>7} {'waste%':>6} {'used%':>6} {'unvis':>5}"
    )
    print(head)
    print("-" * len(head))
    for pol, m in rows.items():
        c = f"{closed[pol]:.3f}" if pol in closed else ""
        print(
            f"{pol:<18} {m.freshness:6.3f} {c:>6} {m.age_days:7.2f} {m.detect_days:8.2f} "
            f"{m.fetches:8d} {m.wasted:7d} {100 * m.waste_fraction:5.1f}% "
            f"{100 * m.fetches / m.budget_fetches:5.1f}% {m.unvisited:5d}"
        )


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = [
        ("freshness", "time-averaged freshness (higher is better)"),
        ("age_days", "time-averaged age, days (lower is better)"),
        ("detect_days", "mean time to detect a change, days (lower is better)"),
        ("waste_fraction", "fraction of fetches wasted on unchanged pages"),
    ]
    scenarios = list(results["scenarios"])
    policies = list(results["scenarios"][scenarios[0]]["policies"])
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    width = 0.8 / len(scenarios)
    for ax, (key, title) in zip(axes.flat, measures, strict=True):
        for s_index, sc in enumerate(scenarios):
            vals = [results["scenarios"][sc]["policies"][p][key] for p in policies]
            xs = [i + (s_index - (len(scenarios) - 1) / 2) * width for i in range(len(policies))]
            ax.bar(xs, vals, width, label=sc)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(len(policies)))
        ax.set_xticklabels(policies, rotation=40, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    p = results["params"]
    fig.suptitle(
        f"Refresh policies, N={p['pages']} pages, budget {p['budget_per_day']:.0f} fetches/day, "
        f"{p['horizon_days']:.0f} days (measured after {p['warmup_days']:.0f})",
        fontsize=11,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=3000)
    ap.add_argument(
        "--revisit-days",
        type=float,
        default=30.0,
        help="budget = pages / REVISIT_DAYS fetches per day (default 30: a visit a month)",
    )
    ap.add_argument("--budget", type=float, help="fetches per day (overrides --revisit-days)")
    ap.add_argument("--days", type=float, default=540.0, help="simulated days")
    ap.add_argument("--warmup", type=float, default=180.0, help="days not measured")
    ap.add_argument("--realloc-days", type=float, default=7.0, help="estimator-optimal mu refresh")
    ap.add_argument(
        "--probe", type=int, default=0, help="estimator-optimal probing (0: off; EstimatorOptimal)"
    )
    ap.add_argument(
        "--no-shrink",
        action="store_true",
        help="estimator-optimal: plain MLE rates, no empirical-Bayes gamma prior",
    )
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--scenario", choices=["gamma", "skewed", "both"], default="both")
    ap.add_argument(
        "--last-modified",
        action="store_true",
        help="the server sends Last-Modified (the estimators then use it)",
    )
    ap.add_argument("--quick", action="store_true", help="300 pages, 180 days; writes nothing")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--plot", type=Path, default=PLOT)
    args = ap.parse_args(argv)
    if args.quick:
        args.pages, args.days, args.warmup = 300, 180.0, 60.0
    if not 0 <= args.warmup < args.days:
        ap.error("need 0 <= --warmup < --days")

    shape, scale, sse = fit_gamma(TIANWANG)
    fitted = {str(t): round(gamma_changed_within(shape, scale, t), 4) for t, _ in TIANWANG}
    print(
        f"Tianwang fit: rate ~ gamma(shape={shape:.3f}, scale={scale:.5f}/day), "
        f"mean {shape * scale:.4f} changes/day; SSE {sse:.5f}"
    )
    for t, p in TIANWANG:
        print(f"  changed within {t:>5.0f} d: data {p:.2f}  fit {fitted[str(t)]:.3f}")
    scenarios = {
        "gamma": Scenario("gamma", 1.0, 0.1, "exponential rates, mean one change per 10 days"),
        "skewed": Scenario("skewed", shape, scale, "gamma fitted to the Tianwang change data"),
    }
    chosen = list(scenarios) if args.scenario == "both" else [args.scenario]

    per_day = args.budget if args.budget else args.pages / args.revisit_days
    budget = per_day / DAY
    horizon, warmup = args.days * DAY, args.warmup * DAY
    config = RefreshConfig(
        min_interval=HOUR,
        max_interval=180 * DAY,
        initial_interval=args.pages / per_day * DAY,
        base_interval=DAY,
    )
    results: dict[str, Any] = {
        "params": {
            "pages": args.pages,
            "budget_per_day": per_day,
            "horizon_days": args.days,
            "warmup_days": args.warmup,
            "realloc_days": args.realloc_days,
            "probe": args.probe,
            "shrink": not args.no_shrink,
            "seed": args.seed,
            "config_seconds": {
                "min_interval": config.min_interval,
                "max_interval": config.max_interval,
                "initial_interval": config.initial_interval,
                "base_interval": config.base_interval,
            },
            "last_modified": args.last_modified,
        },
        "tianwang_fit": {
            "shape": shape,
            "scale_per_day": scale,
            "mean_rate_per_day": shape * scale,
            "sse": sse,
            "data": {str(t): p for t, p in TIANWANG},
            "fitted": fitted,
        },
        "scenarios": {},
        "python": sys.version.split()[0],
        "machine": platform.machine(),
    }
    for name in chosen:
        sc = scenarios[name]
        seed = args.seed + 1000 * list(scenarios).index(name)  # same pages with --scenario
        rates = make_rates(sc, args.pages, seed)
        changes = make_changes(rates, horizon, seed + 1)
        closed = analytic(rates, budget)
        rows: dict[str, Metrics] = {}
        factories = make_policies(
            rates, budget, config, args.realloc_days * DAY, args.probe, not args.no_shrink
        )
        for factory in factories:
            policy = factory()
            rows[policy.name] = simulate(
                policy, changes, budget, horizon, warmup, seed + 2, args.last_modified
            )
            print(f"  {name}: {policy.name} done in {rows[policy.name].seconds:.1f} s", flush=True)
        print_table(name, rows, closed)
        results["scenarios"][name] = {
            "shape": sc.shape,
            "scale_per_day": sc.scale_per_day,
            "note": sc.note,
            "mean_rate_per_day": sum(rates) / len(rates) * DAY,
            "changes": sum(len(c) for c in changes),
            "closed_form_freshness": closed,
            "policies": {k: v.row() for k, v in rows.items()},
        }
    if args.quick:
        print("\n--quick: nothing written")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    print(f"\nwrote {args.out}")
    if len(chosen) > 0:
        plot(results, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
