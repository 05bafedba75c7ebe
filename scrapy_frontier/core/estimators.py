"""Change-rate estimators and the freshness-optimal refresh allocation.

A page is modelled as changing by a Poisson process of rate ``lambda`` (changes per
second). A crawler only sees, at each visit, *whether* the page changed since the
previous visit (and sometimes a ``Last-Modified`` time), never how many times. The
estimators here are those of Cho and Garcia-Molina, "Estimating frequency of change"
(ACM TOIT, 2003); the allocation is the freshness-optimal one of Cho and
Garcia-Molina, "Effective page refresh policies for web crawlers" (ACM TODS, 2003).

Definitions used throughout (times in seconds, rates per second):

* *freshness* of a stored copy at time ``t``: 1 if it equals the live page, else 0;
* *age* at time ``t``: 0 while the copy is fresh, else ``t`` minus the time of the
  first change the copy has not seen.

Pure functions only: no clock, no randomness.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "Allocation",
    "bayes_rate",
    "bias_reduced_rate",
    "gamma_prior",
    "last_modified_rate",
    "mean_age_even",
    "mean_freshness_even",
    "mle_rate",
    "naive_rate",
    "optimal_allocation",
    "optimal_frequency",
]

_MAX_ITER = 200


# -- change-rate estimators ---------------------------------------------------


def _check_counts(n: int, changes: int) -> None:
    if n <= 0:
        raise ValueError(f"need at least one visit interval, got n={n}")
    if not 0 <= changes <= n:
        raise ValueError(f"changes must be in [0, n={n}], got {changes}")


def naive_rate(n: int, changes: int, interval: float) -> float:
    """``X / (n I)``: biased low, since a visit that saw a change cannot say how many."""
    _check_counts(n, changes)
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    return changes / (n * interval)


def bias_reduced_rate(n: int, changes: int, interval: float) -> float:
    """Cho and Garcia-Molina's estimator for ``n`` visits every ``interval`` seconds.

    ``lambda = -ln((n - X + 0.5) / (n + 0.5)) / I`` where ``X`` visits saw a change.
    The 0.5 terms remove most of the bias of the plain MLE ``-ln((n - X) / n) / I``
    and keep it finite when every visit saw a change (``X = n`` gives
    ``ln(2n + 1) / I``). ``X = 0`` gives 0.
    """
    _check_counts(n, changes)
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    return -math.log((n - changes + 0.5) / (n + 0.5)) / interval


def _changed_term(lam: float, t: float) -> tuple[float, float]:
    """``t / (e^{lam t} - 1)`` and its derivative in ``lam``, overflow-safe."""
    x = lam * t
    if x > 700.0:
        e = math.exp(-x)
        return t * e, -t * t * e
    if x < 1e-6:  # series: t / (e^x - 1) = (1/lam)(1 - x/2 + x^2/12 - ...)
        return (1.0 - x / 2.0 + x * x / 12.0) / lam, -(1.0 - x * x / 12.0) / (lam * lam)
    em1 = math.expm1(x)
    return t / em1, -t * t * (em1 + 1.0) / (em1 * em1)


def mle_rate(samples: Iterable[tuple[float, bool]]) -> float:
    """Maximum-likelihood rate from visits at irregular intervals.

    ``samples`` are ``(t, changed)``: the time since the previous visit and whether
    this visit saw a change. The MLE solves

        sum over changed t_i / (exp(lambda t_i) - 1) = sum over unchanged t_j

    whose left side falls from +inf to 0 as ``lambda`` grows, so the root is unique.
    It is found by Newton's method kept inside a bracket (bisection in log-space
    when a Newton step leaves it), to a relative precision of 1e-10.

    Edge cases, returned explicitly rather than by the solver:

    * no samples: ``ValueError``;
    * no visit saw a change: 0.0 (the MLE; the page has shown no change);
    * every visit saw a change: the MLE is infinite. We return
      ``ln(2n + 1) / mean(t)``, the bias-reduced estimate for ``n`` regular visits
      that all saw a change, at the mean interval: a finite lower bound that keeps
      growing with each further changed visit.
    """
    changed_t: list[float] = []
    unchanged_sum = 0.0
    total_t = 0.0
    n = 0
    for t, changed in samples:
        if not t > 0 or math.isinf(t):
            raise ValueError(f"visit intervals must be finite and > 0, got {t}")
        n += 1
        total_t += t
        if changed:
            changed_t.append(t)
        else:
            unchanged_sum += t
    if n == 0:
        raise ValueError("need at least one visit interval")
    if not changed_t:
        return 0.0
    if unchanged_sum == 0.0:
        return math.log(2 * n + 1) / (total_t / n)

    x = len(changed_t)
    start = -math.log((n - x + 0.5) / (n + 0.5)) / (total_t / n)
    return _solve_rate(changed_t, unchanged_sum, 0.0, start)


def _solve_rate(changed_t: list[float], const: float, a: float, lam: float) -> float:
    """Root of ``a / lam + sum t_i / (exp(lam t_i) - 1) = const`` (falling in ``lam``).

    Newton's method inside a bracket, bisecting in log-space when a step leaves
    it; ``lam`` is the starting point. Needs ``const > 0`` and ``a > 0`` or a
    changed interval, so that a root exists.
    """

    def g(lam: float) -> tuple[float, float]:
        value = a / lam - const
        slope = -a / (lam * lam)
        for t in changed_t:
            v, d = _changed_term(lam, t)
            value += v
            slope += d
        return value, slope

    lo, hi = lam, lam
    for _ in range(_MAX_ITER):
        if g(lo)[0] > 0 or lo < 1e-290:
            break
        lo /= 4.0
    for _ in range(_MAX_ITER):
        if g(hi)[0] < 0:
            break
        hi *= 4.0
    for _ in range(_MAX_ITER):
        value, slope = g(lam)
        if value == 0.0:
            return lam
        if value > 0:
            lo = lam
        else:
            hi = lam
        step_ok = slope < 0
        new = lam - value / slope if step_ok else lam
        if not (step_ok and lo < new < hi):
            new = math.sqrt(lo * hi)
        if abs(new - lam) <= 1e-10 * new or hi - lo <= 1e-12 * hi:
            return new
        lam = new
    return lam


def bayes_rate(samples: Iterable[tuple[float, bool]], shape: float, rate: float) -> float:
    """Rate estimate shrunk toward a gamma prior (``shape``, ``rate``: mean shape/rate).

    Returns the mode of the posterior under a ``Gamma(shape + 1, rate)`` prior,
    i.e. the root of

        shape / lambda + sum over changed t_i / (exp(lambda t_i) - 1)
            = rate + sum over unchanged t_j

    When no visit saw a change this is exactly the posterior mean under
    ``Gamma(shape, rate)``, ``shape / (rate + sum t)``; otherwise it is close to it.
    Unlike :func:`mle_rate` it is finite and > 0 in every case, and with few
    visits it stays near the prior mean (pages of a site, or the whole crawl,
    make a natural prior: fit it to their estimates). With no samples it returns
    the prior mean.
    """
    if not shape > 0 or not rate > 0:
        raise ValueError(f"prior shape and rate must be > 0, got {shape}, {rate}")
    changed_t: list[float] = []
    unchanged_sum = 0.0
    for t, changed in samples:
        if not t > 0 or math.isinf(t):
            raise ValueError(f"visit intervals must be finite and > 0, got {t}")
        if changed:
            changed_t.append(t)
        else:
            unchanged_sum += t
    const = rate + unchanged_sum
    if not changed_t:
        return shape / const
    return _solve_rate(changed_t, const, shape, shape / rate)


def gamma_prior(rates: Sequence[float]) -> tuple[float, float] | None:
    """A gamma prior (shape, rate) with the mean and variance of ``rates``.

    Method of moments: ``shape = m^2 / v``, ``rate = m / v``. Noisy per-page
    estimates inflate ``v``, which only makes the prior weaker. None when there
    are fewer than two rates or they have no spread or a zero mean.
    """
    if len(rates) < 2:
        return None
    m = sum(rates) / len(rates)
    v = sum((r - m) ** 2 for r in rates) / (len(rates) - 1)
    if not m > 0 or not v > 0:
        return None
    return m * m / v, m / v


def last_modified_rate(n: int, changes: int, total_time: float) -> float:
    """Estimator when each changed visit also reports its ``Last-Modified`` time.

    ``lambda = (X - 1 - X / (n ln(1 - X / n))) / T`` for ``n`` visits of which ``X``
    saw a change, where ``T`` is the observed change-free time: for a visit that saw
    a change, the time from its Last-Modified to the visit; for one that did not,
    the whole interval since the previous visit.

    Edge cases: ``X = 0`` is the limit, 0.0 (``X / (n ln(1 - X/n)) -> -1``);
    ``X = n`` is the limit ``(n - 1) / T`` (the log is -inf). ``T <= 0`` with
    ``X > 0`` is a ``ValueError`` (no change-free time observed at all).
    """
    _check_counts(n, changes)
    if changes == 0:
        return 0.0
    if not total_time > 0:
        raise ValueError(f"total change-free time must be > 0, got {total_time}")
    if changes == n:
        return (n - 1) / total_time
    x = float(changes)
    return (x - 1.0 - x / (n * math.log1p(-x / n))) / total_time


# -- closed forms for evenly spaced visits ------------------------------------


def mean_freshness_even(rate: float, frequency: float) -> float:
    """Time-averaged freshness of a page of ``rate`` visited every ``1/frequency``.

    ``(1 - e^{-r}) / r`` with ``r = rate / frequency``; 1 if the page never changes,
    0 if it changes but is never visited.
    """
    if rate < 0 or frequency < 0:
        raise ValueError("rate and frequency must be >= 0")
    if rate == 0:
        return 1.0
    if frequency == 0:
        return 0.0
    r = rate / frequency
    return -math.expm1(-r) / r


def mean_age_even(rate: float, interval: float) -> float:
    """Time-averaged age of a page of ``rate`` visited every ``interval`` seconds.

    At ``s`` seconds after a visit the expected age is
    ``integral_0^s (s - x) lambda e^{-lambda x} dx = s - (1 - e^{-lambda s}) / lambda``;
    averaged over ``s`` in ``[0, I]``:
    ``I/2 - 1/lambda + (1 - e^{-lambda I}) / (lambda^2 I)``.
    A series is used when ``lambda I`` is small (the closed form cancels).
    """
    if rate < 0 or interval < 0:
        raise ValueError("rate and interval must be >= 0")
    if math.isinf(interval):
        return math.inf if rate > 0 else 0.0
    x = rate * interval
    if x == 0:
        return 0.0
    if x < 1e-3:
        return interval * (x / 6.0 - x * x / 24.0 + x**3 / 120.0)
    return interval * (0.5 - 1.0 / x - math.expm1(-x) / (x * x))


# -- freshness-optimal allocation ---------------------------------------------


def _solve_r(y: float) -> float:
    """The ``r > 0`` with ``1 - (1 + r) e^{-r} = y``, for ``0 < y < 1``.

    Rewritten as ``h(r) = ln(1 + r) - r = ln(1 - y)``: ``h`` is concave and falling,
    so Newton's method started to the right of the root converges monotonically.
    """
    return _solve_r_log(math.log1p(-y))


def _solve_r_log(c: float) -> float:
    """The ``r > 0`` with ``ln(1 + r) - r = c``, for ``c < 0`` (see :func:`_solve_r`).

    Taking ``c = ln(1 - y)`` itself keeps the precision that ``1 - y`` loses when ``y``
    is within float rounding of 1 (a page changing far faster than it is visited).
    """
    a = -c
    r = a + math.sqrt(2.0 * a) + 1e-300
    for _ in range(_MAX_ITER):
        if math.log1p(r) - r <= c:
            break
        r *= 2.0
    for _ in range(_MAX_ITER):
        h = math.log1p(r) - r - c
        new = r - h / (-r / (1.0 + r))
        if new >= r or r - new <= 1e-13 * r:
            return min(new, r) if new > 0 else r
        r = new
    return r


def optimal_frequency(rate: float, mu: float) -> float:
    """Freshness-optimal visit frequency of one page, given the multiplier ``mu``.

    Solves ``1 - (1 + r) e^{-r} = mu * rate`` for ``r = rate / f``; ``f = 0`` when
    ``mu * rate >= 1`` (the page changes too often to be worth visiting) and when
    ``rate == 0`` (it never changes, so it is always fresh).
    """
    if rate < 0 or mu < 0:
        raise ValueError("rate and mu must be >= 0")
    if rate == 0:
        return 0.0
    y = mu * rate
    if y >= 1.0:
        return 0.0
    if y == 0.0:
        return math.inf
    return rate / _solve_r(y)


@dataclass(frozen=True, slots=True)
class Allocation:
    """The result of :func:`optimal_allocation`."""

    mu: float
    frequencies: list[float]
    #: Mean over pages of :func:`mean_freshness_even` under these frequencies.
    mean_freshness: float


def optimal_allocation(
    rates: Sequence[float], budget: float, *, mu_hint: float | None = None, rel_tol: float = 1e-9
) -> Allocation:
    """Split ``budget`` visits per second over pages to maximise mean freshness.

    Each page gets :func:`optimal_frequency` for one common ``mu``, found by
    bisection (in log-space) so that the frequencies sum to ``budget`` within
    ``rel_tol`` (then rescaled to sum to it exactly, a correction that only
    matters when every page changes much faster than it can be visited). The sum
    falls continuously from +inf to 0 as ``mu`` grows to ``1 / min(rate)``, so
    the root exists whenever some rate is > 0; pages with ``mu >= 1 / rate`` get
    nothing. ``mu_hint`` (a previous ``mu``) only narrows the first bracket.
    """
    if budget <= 0:
        raise ValueError(f"budget must be > 0, got {budget}")
    if any(r < 0 or math.isnan(r) for r in rates):
        raise ValueError("rates must be >= 0")
    positive = [r for r in rates if r > 0]
    if not positive:
        return Allocation(0.0, [0.0] * len(rates), 1.0)

    # Bisect on how far the fastest page is from being given up, s = -ln(1 - mu * r_max),
    # not on mu: near mu = 1 / r_max the fast pages' frequencies fall only like 1 / s, so
    # the root can lie closer to it than floats can say in mu (then every visit went to
    # the slow pages). Every page's ln(1 - mu * r) is computed from s without rounding.
    # A budget too small for every page gives the fastest ones up (mu >= 1 / rate): while
    # the slower pages alone take the whole budget at the fastest one's limit, drop it.
    pool = positive
    while True:
        fastest = max(pool)
        slower = [r for r in pool if r < fastest]
        if not slower or sum(r / _solve_r_log(math.log1p(-r / fastest))
                             for r in slower) < budget:
            break
        pool = slower

    def log_complement(rate: float, s: float) -> float:
        return math.log((fastest - rate) / fastest + math.exp(-s) * rate / fastest)

    def frequency(rate: float, s: float) -> float:
        if rate > fastest:
            return 0.0  # given up
        c = -s if rate == fastest else log_complement(rate, s)
        return rate / _solve_r_log(c) if c < 0 else math.inf

    def total(s: float) -> float:  # grows as s falls (mu falls)
        return sum(frequency(r, s) for r in pool)

    start = 1.0
    if mu_hint and 0 < mu_hint < 1.0 / fastest:
        start = -math.log1p(-mu_hint * fastest)
    lo = hi = start  # total(lo) >= budget >= total(hi)
    for _ in range(_MAX_ITER):
        if total(lo) >= budget or lo < 1e-300:
            break
        hi = lo
        lo /= 4.0
    for _ in range(_MAX_ITER):
        if total(hi) <= budget or hi > 1e300:
            break
        lo = hi
        hi *= 4.0
    s = math.sqrt(lo * hi)
    for _ in range(_MAX_ITER):
        s = math.sqrt(lo * hi)
        spent_s = total(s)
        if abs(spent_s - budget) <= rel_tol * budget or hi - lo <= 1e-15 * hi:
            break
        if spent_s > budget:
            lo = s
        else:
            hi = s
    mu = -math.expm1(-s) / fastest
    freqs = [frequency(r, s) if r > 0 else 0.0 for r in rates]
    # When every page has rate / f >> 1, the sum is so steep in mu that float
    # precision leaves it ~1e-5 off: rescale so the budget is spent exactly.
    spent = sum(freqs)
    if spent > 0 and math.isfinite(spent):
        freqs = [f * budget / spent for f in freqs]
    pairs = zip(rates, freqs, strict=True)
    fresh = sum(mean_freshness_even(r, f) for r, f in pairs) / len(rates)
    return Allocation(mu, freqs, fresh)
