"""Incremental recrawl: per-page change history and refresh-interval predictors.

After each visit to a page the crawler knows whether the page changed since the
previous visit (see :mod:`scrapy_frontier.core.simhash` for deciding that) and,
sometimes, its ``Last-Modified`` time. A :class:`Refresher` records that in the
page's :class:`PageHistory` and asks a :class:`Predictor` for the next interval;
the page is due again at ``visit time + interval``.

Predictors (all clamp to ``[min_interval, max_interval]`` of a
:class:`RefreshConfig`; times in seconds):

* :class:`HalveDouble` (Risvik et al. 2002): changed -> x0.5, unchanged -> x2;
* :class:`EqualInterval`: mean of the last ``k`` intervals between observed
  changes, times a coefficient;
* :class:`TimelyReturn`: unchanged -> x2, changed -> back to a base interval;
* :class:`NutchAdaptive` (Nutch's AdaptiveFetchSchedule): changed -> x(1 - 0.2),
  unchanged -> x(1 + 0.4);
* :class:`PoissonTarget`: estimate the page's change rate, come back when the
  chance that it changed reaches a target probability;
* :class:`EstimatorOptimal`: estimate the rate, visit at the freshness-optimal
  frequency for a global multiplier ``mu`` (see
  :func:`~scrapy_frontier.core.estimators.optimal_allocation`);
* :class:`AutoSelector`: runs several predictors side by side on each page and
  follows the one with the best record on that page.

Every predictor keeps its own state in ``history.predictor_state[name]`` (plain
JSON-able values), so one history can be scored against several predictors and
all of it is persisted with the history.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from scrapy_frontier.core.clock import Clock
from scrapy_frontier.core.estimators import (
    bayes_rate,
    gamma_prior,
    last_modified_rate,
    mle_rate,
    optimal_allocation,
    optimal_frequency,
)

__all__ = [
    "HISTORY_VERSION",
    "AutoSelector",
    "EqualInterval",
    "EstimatorOptimal",
    "HalveDouble",
    "NutchAdaptive",
    "PageHistory",
    "PoissonTarget",
    "Predictor",
    "Refresher",
    "RefreshConfig",
    "TimelyReturn",
    "calibrate",
    "estimate_rate",
]

#: Version of the dict written by :meth:`PageHistory.to_dict`.
HISTORY_VERSION = 1

HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class RefreshConfig:
    """Bounds and starting points shared by all predictors (seconds)."""

    min_interval: float = HOUR
    max_interval: float = 180 * DAY
    #: Interval after the first visit, before anything is known about the page.
    initial_interval: float = DAY
    #: Where :class:`TimelyReturn` goes back to after a change.
    base_interval: float = DAY

    def __post_init__(self) -> None:
        for name in ("min_interval", "max_interval", "initial_interval", "base_interval"):
            value = getattr(self, name)
            if math.isnan(value) or value <= 0 or math.isinf(value):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if self.max_interval < self.min_interval:
            raise ValueError(
                f"max_interval ({self.max_interval}) must be >= min_interval ({self.min_interval})"
            )

    def clamp(self, interval: float) -> float:
        if math.isnan(interval):
            return self.max_interval
        return min(self.max_interval, max(self.min_interval, interval))


# -- per-page history ---------------------------------------------------------


@dataclass
class PageHistory:
    """What the predictors know about one page.

    ``visits[i]`` is the time of a successful visit, ``changed[i]`` whether it saw
    a change since ``visits[i-1]`` (``changed[0]`` is always False: a first fetch
    has nothing to compare with), ``last_modified[i]`` the page's Last-Modified
    time at that visit if it sent one. Only the last :attr:`MAX_VISITS` visits and
    :attr:`MAX_CHANGES` change times are kept.
    """

    MAX_VISITS: ClassVar[int] = 64
    MAX_CHANGES: ClassVar[int] = 16

    visits: list[float] = field(default_factory=list)
    changed: list[bool] = field(default_factory=list)
    last_modified: list[float | None] = field(default_factory=list)
    #: Observed change times: the Last-Modified time if sent, else the visit time.
    change_times: list[float] = field(default_factory=list)
    consecutive_failures: int = 0
    #: The interval in force (the one used to set :attr:`next_due`).
    interval: float = 0.0
    next_due: float = 0.0
    predictor_state: dict[str, dict[str, Any]] = field(default_factory=dict)

    # -- recording --------------------------------------------------------
    def record_visit(self, now: float, changed: bool, last_modified: float | None = None) -> None:
        """Append a successful visit (and reset the failure count)."""
        if self.visits and now < self.visits[-1]:
            raise ValueError(f"visit at {now} is before the previous one at {self.visits[-1]}")
        first = not self.visits
        changed = bool(changed) and not first
        self.visits.append(now)
        self.changed.append(changed)
        self.last_modified.append(last_modified)
        if changed:
            when = now
            if last_modified is not None and self.visits[-2] < last_modified <= now:
                when = last_modified
            self.change_times.append(when)
        del self.visits[: -self.MAX_VISITS]
        del self.changed[: -self.MAX_VISITS]
        del self.last_modified[: -self.MAX_VISITS]
        del self.change_times[: -self.MAX_CHANGES]
        self.consecutive_failures = 0

    def record_failure(self) -> None:
        self.consecutive_failures += 1

    # -- views ------------------------------------------------------------
    @property
    def n_visits(self) -> int:
        return len(self.visits)

    def samples(self) -> list[tuple[float, bool]]:
        """``(time since previous visit, changed)`` for each visit but the first.

        Zero-length intervals (two visits at the same instant) are skipped.
        """
        v, c = self.visits, self.changed
        return [(v[i] - v[i - 1], c[i]) for i in range(1, len(v)) if v[i] > v[i - 1]]

    def state(self, name: str) -> dict[str, Any]:
        """The mutable state dict of predictor ``name`` (created empty)."""
        return self.predictor_state.setdefault(name, {})

    # -- persistence ------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A compact JSON-able dict (``"v"`` is :data:`HISTORY_VERSION`)."""
        out: dict[str, Any] = {
            "v": HISTORY_VERSION,
            "t": list(self.visits),
            "c": "".join("1" if c else "0" for c in self.changed),
            "ct": list(self.change_times),
            "iv": self.interval,
            "due": self.next_due,
        }
        if any(lm is not None for lm in self.last_modified):
            out["lm"] = list(self.last_modified)
        if self.consecutive_failures:
            out["f"] = self.consecutive_failures
        if self.predictor_state:
            out["ps"] = {k: dict(v) for k, v in self.predictor_state.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PageHistory:
        """Inverse of :meth:`to_dict`; unknown versions are a ``ValueError``."""
        version = data.get("v") if isinstance(data, dict) else None
        if version != HISTORY_VERSION:
            raise ValueError(
                f"unsupported page history version {version!r} "
                f"(this scrapy-frontier reads version {HISTORY_VERSION})"
            )
        visits = [float(t) for t in data["t"]]
        flags = data["c"]
        if len(flags) != len(visits) or set(flags) - {"0", "1"}:
            raise ValueError("page history: 'c' must be one 0/1 flag per visit")
        lms = data.get("lm")
        if lms is None:
            lms = [None] * len(visits)
        if len(lms) != len(visits):
            raise ValueError("page history: 'lm' must have one entry per visit")
        return cls(
            visits=visits,
            changed=[f == "1" for f in flags],
            last_modified=[None if x is None else float(x) for x in lms],
            change_times=[float(t) for t in data.get("ct", [])],
            consecutive_failures=int(data.get("f", 0)),
            interval=float(data.get("iv", 0.0)),
            next_due=float(data.get("due", 0.0)),
            predictor_state={k: dict(v) for k, v in data.get("ps", {}).items()},
        )


def estimate_rate(
    history: PageHistory, prior: tuple[float, float] | None = None
) -> float | None:
    """The page's change rate (per second) from its own visits, or None if unknown.

    With a gamma ``prior`` (shape, rate per second), the estimate is
    :func:`~scrapy_frontier.core.estimators.bayes_rate`, shrunk toward the prior
    mean. Otherwise :func:`~scrapy_frontier.core.estimators.last_modified_rate`
    when every visit that saw a change also reported a usable Last-Modified time,
    else :func:`~scrapy_frontier.core.estimators.mle_rate` on the visit intervals.
    None when there is no interval yet (fewer than two visits).
    """
    samples = history.samples()
    if not samples:
        return None
    if prior is not None:
        return bayes_rate(samples, prior[0], prior[1])
    v, c, lm = history.visits, history.changed, history.last_modified
    free_time = 0.0
    usable = True
    for i in range(1, len(v)):
        if v[i] <= v[i - 1]:
            continue
        if c[i]:
            m = lm[i]
            if m is None or not v[i - 1] < m <= v[i]:
                usable = False
                break
            free_time += v[i] - m
        else:
            free_time += v[i] - v[i - 1]
    changes = sum(1 for _, ch in samples if ch)
    if usable and changes and free_time > 0:
        return last_modified_rate(len(samples), changes, free_time)
    return mle_rate(samples)


# -- predictors ---------------------------------------------------------------


class Predictor(Protocol):
    """Proposes the interval until the next visit of a page.

    :meth:`next_interval` is called right after a visit at ``now`` was recorded in
    ``history`` (so ``history.visits[-1] == now`` and ``changed`` repeats
    ``history.changed[-1]``). It may read and update ``history.state(self.name)``
    and returns an interval already clamped by its config. It is never called for
    a page's first visit (:class:`Refresher` uses ``initial_interval`` then).
    """

    name: str

    def next_interval(self, history: PageHistory, changed: bool, now: float) -> float: ...


class _Multiplicative:
    """Shared code for rules of the form ``interval *= factor(changed)``."""

    name = "multiplicative"
    on_change = 1.0
    on_same = 1.0

    def __init__(self, config: RefreshConfig) -> None:
        self.config = config

    def previous(self, history: PageHistory) -> float:
        """This predictor's last proposal for the page (its own, not the one in force)."""
        state = history.state(self.name)
        return float(state.get("iv") or history.interval or self.config.initial_interval)

    def propose(self, history: PageHistory, changed: bool) -> float:
        return self.previous(history) * (self.on_change if changed else self.on_same)

    def next_interval(self, history: PageHistory, changed: bool, now: float) -> float:
        interval = self.config.clamp(self.propose(history, changed))
        history.state(self.name)["iv"] = interval
        return interval


class HalveDouble(_Multiplicative):
    """Risvik's adaptive ("neighbour") method: changed -> half, unchanged -> double.

    It settles where half the visits see a change, i.e. an interval of about
    ``ln 2 / lambda``: visits proportional to the change rate.
    """

    name = "halve_double"
    on_change = 0.5
    on_same = 2.0


class NutchAdaptive(_Multiplicative):
    """Nutch's AdaptiveFetchSchedule: changed -> x(1 - dec), unchanged -> x(1 + inc).

    With the defaults (0.2, 0.4) it settles where about 60% of visits see a change.
    """

    name = "nutch"

    def __init__(self, config: RefreshConfig, inc: float = 0.4, dec: float = 0.2) -> None:
        super().__init__(config)
        if not 0 <= dec < 1 or inc < 0:
            raise ValueError(f"need 0 <= dec < 1 and inc >= 0, got dec={dec}, inc={inc}")
        self.on_change = 1.0 - dec
        self.on_same = 1.0 + inc


class TimelyReturn(_Multiplicative):
    """Double while unchanged; on a change go straight back to ``base_interval``."""

    name = "timely_return"
    on_same = 2.0

    def propose(self, history: PageHistory, changed: bool) -> float:
        if changed:
            return self.config.base_interval
        return self.previous(history) * self.on_same


class EqualInterval(_Multiplicative):
    """Mean of the last ``k`` intervals between observed changes, times ``coefficient``.

    Change times are the Last-Modified times when the server sends them, else the
    visit times that saw the change. Until two change times are known the page
    follows the halve/double rule.
    """

    name = "equal_interval"
    on_change = 0.5
    on_same = 2.0

    def __init__(self, config: RefreshConfig, k: int = 3, coefficient: float = 1.0) -> None:
        super().__init__(config)
        if k < 1 or not coefficient > 0:
            raise ValueError(f"need k >= 1 and coefficient > 0, got k={k}, {coefficient}")
        self.k = k
        self.coefficient = coefficient

    def propose(self, history: PageHistory, changed: bool) -> float:
        times = history.change_times[-(self.k + 1) :]
        if len(times) < 2:
            return super().propose(history, changed)
        return self.coefficient * (times[-1] - times[0]) / (len(times) - 1)


def _check_growth(max_growth: float) -> float:
    if math.isnan(max_growth) or max_growth < 1:
        raise ValueError(f"max_growth must be >= 1 (or inf), got {max_growth}")
    return max_growth


class PoissonTarget(_Multiplicative):
    """Come back when the page has changed with probability ``p`` (default 0.5).

    With the estimated rate ``lambda`` (:func:`estimate_rate`) the interval is
    ``-ln(1 - p) / lambda``; a page never seen to change heads for
    ``max_interval``. Few visits give wild estimates (one unchanged visit gives a
    rate of 0), so the interval may grow at most ``max_growth`` times per visit
    (``math.inf`` to disable). Before the first interval is known it keeps the
    initial interval.
    """

    name = "poisson"

    def __init__(self, config: RefreshConfig, p: float = 0.5, max_growth: float = 2.0) -> None:
        super().__init__(config)
        if not 0 < p < 1:
            raise ValueError(f"p must be in (0, 1), got {p}")
        self.p = p
        self.max_growth = _check_growth(max_growth)

    def propose(self, history: PageHistory, changed: bool) -> float:
        rate = estimate_rate(history)
        previous = self.previous(history)
        if rate is None:
            return previous
        history.state(self.name)["rate"] = rate
        wanted = -math.log1p(-self.p) / rate if rate > 0 else math.inf
        return min(wanted, previous * self.max_growth)


class EstimatorOptimal(_Multiplicative):
    """Interval ``1 / f`` with ``f`` the freshness-optimal frequency for rate and ``mu``.

    ``mu`` is global: the scheduler sets it (:meth:`set_mu`) from
    :func:`~scrapy_frontier.core.estimators.optimal_allocation` over all pages'
    estimated rates (kept in ``state["rate"]``) and its fetch budget. ``f = 0``
    (the page changes too often to be kept fresh, or never changes) gives
    ``max_interval``. Until ``mu`` is set (it starts at 0, which would mean an
    unlimited budget) pages keep their previous interval, and so do pages with no
    rate estimate yet;
    as in :class:`PoissonTarget` the interval grows at most ``max_growth`` times
    per visit.

    *Probing.* A page that changed at every one of its last ``probe`` visits only
    tells us that its rate is high compared with the visit interval: the estimate
    is then little more than a lower bound. If even that lower bound gives
    ``f = 0`` the page is left at ``max_interval`` (its true rate is higher still);
    otherwise the interval is halved (at least) so that the next visits measure
    the rate. ``probe=0`` (the default) turns this off: in the simulation of
    ``benchmarks/bench_freshness.py`` probing cut waste a little but lost freshness.
    """

    name = "estimator_optimal"

    def __init__(
        self, config: RefreshConfig, mu: float = 0.0, max_growth: float = 2.0, probe: int = 0
    ) -> None:
        super().__init__(config)
        self.mu = 0.0
        self.set_mu(mu)
        self.max_growth = _check_growth(max_growth)
        if probe < 0:
            raise ValueError(f"probe must be >= 0, got {probe}")
        self.probe = probe
        self.prior: tuple[float, float] | None = None

    def set_mu(self, mu: float) -> None:
        if math.isnan(mu) or mu < 0:
            raise ValueError(f"mu must be >= 0, got {mu}")
        self.mu = mu

    def set_prior(self, prior: tuple[float, float] | None) -> None:
        """Shrink rate estimates toward this gamma prior (see :func:`estimate_rate`)."""
        if prior is not None and not (prior[0] > 0 and prior[1] > 0):
            raise ValueError(f"prior shape and rate must be > 0, got {prior}")
        self.prior = prior

    def interval_for(self, rate: float) -> float:
        """The clamped interval of a page of estimated ``rate`` under the current ``mu``."""
        f = optimal_frequency(rate, self.mu)
        return self.config.clamp(1.0 / f if f > 0 else math.inf)

    def propose(self, history: PageHistory, changed: bool) -> float:
        rate = estimate_rate(history, self.prior)
        previous = self.previous(history)
        if rate is None or self.mu <= 0:
            if rate is not None:
                history.state(self.name)["rate"] = rate
            return previous
        history.state(self.name)["rate"] = rate
        interval = min(self.interval_for(rate), previous * self.max_growth)
        if self.probe:
            recent = history.changed[1:][-self.probe :]
            censored = len(recent) == self.probe and all(recent)
            if censored and optimal_frequency(rate, self.mu) > 0:
                interval = min(interval, previous / 2.0)
        return interval


def calibrate(
    opt: EstimatorOptimal,
    histories: Callable[[], Iterable[PageHistory]],
    budget: float,
    *,
    shrink: bool = True,
) -> float | None:
    """Set ``opt``'s ``mu`` (and gamma prior) for ``budget`` visits per second over pages.

    ``histories()`` yields every page's history; it is called once or twice (the
    histories are streamed, only one rate per page is kept in memory).

    Empirical Bayes: with ``shrink``, a gamma prior is fitted to the plain rate
    estimates of pages visited more than three times, and every page's estimate is
    shrunk toward it. Pages with no estimate yet (one visit) are counted at the
    uniform frequency; the rest of the budget goes to the freshness-optimal
    allocation over the estimated rates. Returns the new ``mu``, or None when no
    page has a positive rate yet (``mu`` is then left as it was).
    """
    if shrink:
        plain = [
            r for h in histories() if len(h.visits) > 3 and (r := estimate_rate(h)) is not None
        ]
        opt.set_prior(gamma_prior(plain))
    known: list[float] = []
    pages = 0
    for h in histories():
        pages += 1
        rate = estimate_rate(h, opt.prior)
        if rate is not None:
            known.append(rate)
    if not known or not any(r > 0 for r in known):
        return None
    share = budget * len(known) / pages
    alloc = optimal_allocation(known, share, mu_hint=opt.mu or None, rel_tol=1e-4)
    opt.set_mu(alloc.mu)
    return alloc.mu


class AutoSelector:
    """Runs several predictors on each page and follows the one with the best record.

    Every predictor keeps proposing intervals for the page from its own state, as
    if it alone were in charge. At each visit, each predictor's previous proposal
    ``d = previous visit + its interval`` is scored against what the visit saw:

    * the page changed: +1 if ``d <= now`` (it would have come at least as early,
      so it would not have detected the change later than we did), else -1 (late);
    * the page had not changed: +1 if ``d >= now`` (it would not have come back
      before now, when there was still nothing new), else -1 (a wasted visit).

    Scores decay geometrically (``score = decay * score + outcome``) so that a page
    whose behaviour changes can switch predictor. The interval used is that of the
    best-scoring predictor; ties go to the earliest in ``predictors`` (so list the
    preferred default first). Scores and the current pick live in
    ``history.state("auto")``.
    """

    name = "auto"

    def __init__(self, predictors: Sequence[Predictor], decay: float = 0.9) -> None:
        if not predictors:
            raise ValueError("AutoSelector needs at least one predictor")
        names = [p.name for p in predictors]
        if len(set(names)) != len(names) or self.name in names:
            raise ValueError(f"predictor names must be distinct and not 'auto': {names}")
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.predictors = list(predictors)
        self.decay = decay

    def next_interval(self, history: PageHistory, changed: bool, now: float) -> float:
        state = history.state(self.name)
        scores: dict[str, float] = state.setdefault("scores", {})
        proposals: dict[str, float] = state.setdefault("iv", {})
        previous_visit = history.visits[-2] if len(history.visits) >= 2 else now
        chosen: tuple[float, int, float] | None = None
        for index, predictor in enumerate(self.predictors):
            name = predictor.name
            if name in proposals:
                due = previous_visit + proposals[name]
                good = due <= now if changed else due >= now
                scores[name] = self.decay * scores.get(name, 0.0) + (1.0 if good else -1.0)
            interval = predictor.next_interval(history, changed, now)
            proposals[name] = interval
            key = (-scores.get(name, 0.0), index, interval)
            if chosen is None or key < chosen:
                chosen = key
        assert chosen is not None
        state["pick"] = self.predictors[chosen[1]].name
        return chosen[2]


# -- the glue the scheduler calls ---------------------------------------------


class Refresher:
    """Records visits in page histories and sets their next due time.

    ``clock`` is the injected clock; every method uses ``clock()`` as "now".
    """

    def __init__(
        self, predictor: Predictor, config: RefreshConfig | None = None, clock: Clock | None = None
    ) -> None:
        self.predictor = predictor
        self.config = config or RefreshConfig()
        self.clock: Clock = clock or time.time

    def visited(
        self, history: PageHistory, changed: bool, last_modified: float | None = None,
        first_interval: float | None = None,
    ) -> float:
        """Record a successful visit now; return the page's next due time.

        ``first_interval``: the interval after a first visit when shorter than the initial
        one (a sitemap's changefreq for the page: it may bring the page back sooner, never
        later, as changefreq is often wrong); clamped like any interval."""
        now = self.clock()
        first = not history.visits
        history.record_visit(now, changed, last_modified)
        if first:
            initial = self.config.initial_interval
            interval = self.config.clamp(initial if first_interval is None
                                         else min(initial, first_interval))
        else:
            interval = self.predictor.next_interval(history, history.changed[-1], now)
        history.interval = interval
        history.next_due = now + interval
        return history.next_due

    def failed(self, history: PageHistory) -> float:
        """Record a failed visit now: the interval is kept, the page is due again after it.

        Failures are counted in ``history.consecutive_failures`` (reset by the next
        success) for the store's eviction policy; they teach the predictors nothing.
        """
        now = self.clock()
        history.record_failure()
        interval = self.config.clamp(history.interval or self.config.initial_interval)
        history.next_due = now + interval
        return history.next_due
