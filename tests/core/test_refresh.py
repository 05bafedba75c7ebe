"""Incremental recrawl core: estimators, allocation, predictors, history, simhash."""

from __future__ import annotations

import json
import math
import os
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scrapy_frontier.core import FakeClock
from scrapy_frontier.core.estimators import (
    bayes_rate,
    bias_reduced_rate,
    gamma_prior,
    last_modified_rate,
    mean_age_even,
    mean_freshness_even,
    mle_rate,
    naive_rate,
    optimal_allocation,
    optimal_frequency,
)
from scrapy_frontier.core.refresh import (
    DAY,
    HOUR,
    AutoSelector,
    EqualInterval,
    EstimatorOptimal,
    HalveDouble,
    NutchAdaptive,
    PageHistory,
    PoissonTarget,
    RefreshConfig,
    Refresher,
    TimelyReturn,
    estimate_rate,
)
from scrapy_frontier.core.simhash import hamming, is_change, simhash, simhash_reference

CONFIG = RefreshConfig(
    min_interval=HOUR, max_interval=30 * DAY, initial_interval=DAY, base_interval=2 * HOUR
)


def drive(predictor, flags, step=None, config=CONFIG):
    """Visit a page once, then once per flag, each visit exactly when due."""
    clock = FakeClock(1000.0)
    refresher = Refresher(predictor, config, clock)
    history = PageHistory()
    due = refresher.visited(history, False)
    intervals = [history.interval]
    for changed in flags:
        clock.now = due if step is None else clock.now + step
        due = refresher.visited(history, changed)
        assert due == pytest.approx(clock.now + history.interval)
        intervals.append(history.interval)
    return history, intervals


# -- estimators -----------------------------------------------------------------


class TestEstimators:
    def test_bias_reduced_formula_and_edges(self):
        assert bias_reduced_rate(10, 3, 2.0) == pytest.approx(-math.log(7.5 / 10.5) / 2.0)
        assert bias_reduced_rate(10, 0, 1.0) == 0.0
        assert bias_reduced_rate(10, 10, 1.0) == pytest.approx(math.log(21))
        with pytest.raises(ValueError):
            bias_reduced_rate(0, 0, 1.0)
        with pytest.raises(ValueError):
            bias_reduced_rate(5, 6, 1.0)
        with pytest.raises(ValueError):
            naive_rate(5, 1, 0.0)

    def test_bias_reduced_beats_naive_on_simulated_visits(self):
        rng = random.Random(4)
        rate, interval, n, trials = 0.8, 1.0, 30, 3000
        p = 1 - math.exp(-rate * interval)
        reduced, naive = [], []
        for _ in range(trials):
            x = sum(rng.random() < p for _ in range(n))
            reduced.append(bias_reduced_rate(n, x, interval))
            naive.append(naive_rate(n, x, interval))
        mean_reduced = sum(reduced) / trials
        mean_naive = sum(naive) / trials
        assert mean_reduced == pytest.approx(rate, rel=0.05)
        assert abs(mean_reduced - rate) < abs(mean_naive - rate)
        assert mean_naive < 0.75 * rate  # naive is badly biased low at rate * I = 0.8

    def test_mle_on_regular_visits_is_the_plain_mle(self):
        samples = [(2.0, True)] * 4 + [(2.0, False)] * 6
        assert mle_rate(samples) == pytest.approx(-math.log(6 / 10) / 2.0, rel=1e-9)
        # ... and lies on the same side of the bias-reduced estimate for any X < n.
        for x in range(1, 10):
            s = [(2.0, True)] * x + [(2.0, False)] * (10 - x)
            assert mle_rate(s) > bias_reduced_rate(10, x, 2.0)

    def test_mle_edge_cases(self):
        assert mle_rate([(1.0, False), (3.0, False)]) == 0.0
        assert mle_rate([(1.0, True), (3.0, True)]) == pytest.approx(math.log(5) / 2.0)
        with pytest.raises(ValueError):
            mle_rate([])
        with pytest.raises(ValueError):
            mle_rate([(0.0, True)])
        # Very long changed intervals (exp overflow territory) still solve.
        assert 0 < mle_rate([(1e6, True), (1.0, False)]) < 10

    def test_mle_irregular_recovers_the_rate(self):
        rng = random.Random(7)
        rate = 0.3
        samples = []
        for _ in range(4000):
            t = rng.uniform(0.5, 8.0)
            samples.append((t, rng.random() < 1 - math.exp(-rate * t)))
        assert mle_rate(samples) == pytest.approx(rate, rel=0.06)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(st.floats(1e-6, 1e7), st.booleans()), min_size=1, max_size=40))
    def test_mle_is_finite_and_solves_its_equation(self, samples):
        lam = mle_rate(samples)
        assert 0.0 <= lam < math.inf
        changed = [t for t, c in samples if c]
        unchanged = sum(t for t, c in samples if not c)
        if changed and unchanged:
            lhs = sum(t / math.expm1(lam * t) if lam * t < 700 else 0.0 for t in changed)
            assert lhs == pytest.approx(unchanged, rel=1e-6, abs=1e-9 * unchanged)

    def test_last_modified_estimator(self):
        assert last_modified_rate(10, 0, 5.0) == 0.0
        assert last_modified_rate(10, 10, 5.0) == pytest.approx(9 / 5.0)
        x, n = 3, 10
        expected = (x - 1 - x / (n * math.log(1 - x / n))) / 5.0
        assert last_modified_rate(n, x, 5.0) == pytest.approx(expected)
        with pytest.raises(ValueError):
            last_modified_rate(10, 2, 0.0)
        # On simulated visits with Last-Modified (time since the last change).
        rng = random.Random(11)
        rate, interval, n = 0.5, 1.0, 5000
        x, free = 0, 0.0
        for _ in range(n):
            first = rng.expovariate(rate)
            if first < interval:
                x += 1
                free += min(rng.expovariate(rate), interval - first)
            else:
                free += interval
        assert last_modified_rate(n, x, free) == pytest.approx(rate, rel=0.05)

    def test_estimate_rate_from_history(self):
        h = PageHistory()
        assert estimate_rate(h) is None
        for i, ch in enumerate([False, True, False, False, True]):
            h.record_visit(10.0 * i, ch)
        assert estimate_rate(h) == pytest.approx(mle_rate(h.samples()))
        h2 = PageHistory()
        h2.record_visit(0.0, False)
        h2.record_visit(10.0, True, last_modified=4.0)
        h2.record_visit(20.0, False)
        # n=2, X=1, T = (10 - 4) + 10 = 16
        assert estimate_rate(h2) == pytest.approx(last_modified_rate(2, 1, 16.0))


# -- closed forms and the optimal allocation ------------------------------------


class TestAllocation:
    def test_worked_example(self):
        rates = [1.0, 2.0, 3.0, 4.0, 5.0]  # changes per day
        alloc = optimal_allocation(rates, 5.0)  # 5 fetches per day
        assert [round(f, 2) for f in alloc.frequencies] == [1.15, 1.36, 1.35, 1.14, 0.00]
        assert sum(alloc.frequencies) == pytest.approx(5.0, rel=1e-8)
        assert round(alloc.mean_freshness, 3) == 0.374
        uniform = sum(mean_freshness_even(r, 1.0) for r in rates) / 5
        proportional = sum(mean_freshness_even(r, r / 3.0) for r in rates) / 5
        assert round(uniform, 3) == 0.365
        assert round(proportional, 3) == 0.317
        assert alloc.mu * 5.0 >= 1.0 > alloc.mu * 4.0

    def test_optimal_frequency_edges(self):
        assert optimal_frequency(0.0, 0.3) == 0.0
        assert optimal_frequency(5.0, 0.2) == 0.0  # mu * rate >= 1
        assert optimal_frequency(1.0, 0.0) == math.inf
        # Satisfies its equation.
        f = optimal_frequency(2.0, 0.1)
        r = 2.0 / f
        assert 1 - (1 + r) * math.exp(-r) == pytest.approx(0.2, rel=1e-9)
        assert optimal_allocation([0.0, 0.0], 3.0).frequencies == [0.0, 0.0]

    @settings(max_examples=40, deadline=None)
    @given(
        st.lists(st.floats(0.01, 50.0), min_size=1, max_size=30),
        st.floats(0.1, 100.0),
    )
    # Found by Hypothesis: the root lay closer to mu = 1 / 25 than floats resolve in mu,
    # and the whole budget went to the slow page.
    @example([25.0, 25.0, 0.05], 2.0)
    @example([50.0, 0.01, 0.02], 0.1)  # the fastest page given up
    def test_optimal_beats_uniform_and_spends_the_budget(self, rates, budget):
        alloc = optimal_allocation(rates, budget)
        # mu is ill-conditioned when every page has rate / f >> 1: allow 1e-6.
        assert sum(alloc.frequencies) == pytest.approx(budget, rel=1e-6)
        uniform = sum(mean_freshness_even(r, budget / len(rates)) for r in rates) / len(rates)
        assert alloc.mean_freshness >= uniform * (1 - 1e-6)

    @pytest.mark.parametrize(("rate", "interval"), [(1.0, 1.0), (0.2, 3.0), (4.0, 0.5)])
    def test_closed_forms_match_monte_carlo(self, rate, interval):
        rng = random.Random(21)
        periods = 40_000
        fresh = age = 0.0
        for _ in range(periods):
            first = rng.expovariate(rate)
            if first < interval:
                fresh += first
                age += (interval - first) ** 2 / 2
            else:
                fresh += interval
        total = periods * interval
        assert fresh / total == pytest.approx(mean_freshness_even(rate, 1 / interval), rel=0.02)
        assert age / total == pytest.approx(mean_age_even(rate, interval), rel=0.03)

    def test_closed_form_edges(self):
        assert mean_freshness_even(0.0, 0.0) == 1.0
        assert mean_freshness_even(1.0, 0.0) == 0.0
        assert mean_age_even(0.0, 5.0) == 0.0
        assert mean_age_even(1.0, math.inf) == math.inf
        # The small-x series joins the closed form smoothly.
        assert mean_age_even(1e-3 * (1 - 1e-9), 1.0) == pytest.approx(
            mean_age_even(1e-3 * (1 + 1e-9), 1.0), rel=1e-6
        )


# -- predictors -------------------------------------------------------------------


class TestPredictors:
    def test_halve_double(self):
        _, iv = drive(HalveDouble(CONFIG), [True, True, False, False, False])
        assert iv == pytest.approx([DAY, DAY / 2, DAY / 4, DAY / 2, DAY, 2 * DAY])

    def test_nutch(self):
        _, iv = drive(NutchAdaptive(CONFIG), [True, False])
        assert iv == pytest.approx([DAY, 0.8 * DAY, 0.8 * 1.4 * DAY])
        with pytest.raises(ValueError):
            NutchAdaptive(CONFIG, dec=1.0)

    def test_timely_return(self):
        _, iv = drive(TimelyReturn(CONFIG), [False, False, True, False])
        assert iv == pytest.approx([DAY, 2 * DAY, 4 * DAY, 2 * HOUR, 4 * HOUR])

    def test_equal_interval(self):
        clock = FakeClock(0.0)
        refresher = Refresher(EqualInterval(CONFIG, k=2, coefficient=0.5), CONFIG, clock)
        h = PageHistory()
        refresher.visited(h, False)
        clock.now = 1 * DAY
        refresher.visited(h, True)  # only one change time: halve/double fallback
        assert h.interval == pytest.approx(DAY / 2)
        clock.now = 4 * DAY
        refresher.visited(h, True, last_modified=3 * DAY)  # change times 1d, 3d
        assert h.change_times == [DAY, 3 * DAY]
        assert h.interval == pytest.approx(0.5 * 2 * DAY)
        clock.now = 9 * DAY
        refresher.visited(h, True)  # change times 1d, 3d, 9d -> mean 4d
        assert h.interval == pytest.approx(0.5 * 4 * DAY)
        clock.now = 10 * DAY
        refresher.visited(h, False)  # no new change: unchanged proposal
        assert h.interval == pytest.approx(0.5 * 4 * DAY)

    def test_poisson_target(self):
        h, iv = drive(PoissonTarget(CONFIG), [True, False, True, False], step=DAY)
        rate = mle_rate(h.samples())
        assert iv[-1] == pytest.approx(math.log(2) / rate)
        assert h.state("poisson")["rate"] == pytest.approx(rate)
        _, iv = drive(PoissonTarget(CONFIG), [False, False, False], step=DAY)
        assert iv == pytest.approx([DAY, 2 * DAY, 4 * DAY, 8 * DAY])  # growth capped at 2x
        _, iv = drive(PoissonTarget(CONFIG, max_growth=math.inf), [False], step=DAY)
        assert iv[-1] == CONFIG.max_interval  # never seen to change
        with pytest.raises(ValueError):
            PoissonTarget(CONFIG, max_growth=0.5)

    def test_estimator_optimal(self):
        p = EstimatorOptimal(CONFIG, mu=0.5 * DAY)
        rate = 1 / DAY
        assert p.interval_for(rate) == pytest.approx(1 / optimal_frequency(rate, p.mu))
        assert p.interval_for(3 / DAY) == CONFIG.max_interval  # mu * rate >= 1
        assert p.interval_for(0.0) == CONFIG.max_interval
        h, iv = drive(p, [True, False, False, True], step=DAY)
        wanted = p.interval_for(estimate_rate(h) or 0)
        assert iv[-1] == pytest.approx(min(wanted, 2 * iv[-2]))
        with pytest.raises(ValueError):
            p.set_mu(-1)
        # mu not set yet: keep the interval, but remember the rate for the allocation.
        h, iv = drive(EstimatorOptimal(CONFIG), [True, False], step=DAY)
        assert iv == [DAY, DAY, DAY] and h.state("estimator_optimal")["rate"] > 0

    @pytest.mark.parametrize("cls", [HalveDouble, NutchAdaptive, TimelyReturn, EqualInterval])
    def test_clamps(self, cls):
        _, iv = drive(cls(CONFIG), [True] * 40)
        assert min(iv) >= CONFIG.min_interval
        _, iv = drive(cls(CONFIG), [False] * 40)
        assert max(iv) <= CONFIG.max_interval
        if cls is not EqualInterval:
            assert iv[-1] == CONFIG.max_interval

    def test_failures(self):
        clock = FakeClock(0.0)
        refresher = Refresher(HalveDouble(CONFIG), CONFIG, clock)
        h = PageHistory()
        refresher.visited(h, False)
        clock.now = 10.0
        assert refresher.failed(h) == 10.0 + DAY
        assert refresher.failed(h) == 10.0 + DAY
        assert h.consecutive_failures == 2 and h.n_visits == 1
        clock.now = DAY
        refresher.visited(h, False)
        assert h.consecutive_failures == 0

    def test_config_validation(self):
        with pytest.raises(ValueError):
            RefreshConfig(min_interval=10.0, max_interval=5.0)
        with pytest.raises(ValueError):
            RefreshConfig(min_interval=0.0)
        assert CONFIG.clamp(math.nan) == CONFIG.max_interval

    @settings(max_examples=int(os.environ.get("REFRESH_EXAMPLES", 60)), deadline=None)
    @given(
        st.sampled_from(
            [
                "halve_double",
                "nutch",
                "timely_return",
                "equal_interval",
                "poisson",
                "estimator_optimal",
                "auto",
            ]
        ),
        st.lists(st.tuples(st.booleans(), st.floats(0.0, 60 * DAY)), max_size=40),
    )
    def test_intervals_always_within_clamps(self, name, steps):
        predictors = {
            "halve_double": HalveDouble(CONFIG),
            "nutch": NutchAdaptive(CONFIG),
            "timely_return": TimelyReturn(CONFIG),
            "equal_interval": EqualInterval(CONFIG),
            "poisson": PoissonTarget(CONFIG),
            "estimator_optimal": EstimatorOptimal(CONFIG, mu=DAY),
        }
        predictor = predictors.get(name) or AutoSelector(list(predictors.values()))
        clock = FakeClock(0.0)
        refresher = Refresher(predictor, CONFIG, clock)
        h = PageHistory()
        refresher.visited(h, False)
        for changed, wait in steps:
            clock.now += wait
            due = refresher.visited(h, changed)
            assert CONFIG.min_interval <= h.interval <= CONFIG.max_interval
            assert due == clock.now + h.interval
        PageHistory.from_dict(json.loads(json.dumps(h.to_dict())))


class Fixed:
    """A stub predictor that always proposes the same interval."""

    def __init__(self, name: str, interval: float) -> None:
        self.name = name
        self.interval = interval

    def next_interval(self, history: PageHistory, changed: bool, now: float) -> float:
        return self.interval


class TestAutoSelector:
    def test_follows_the_predictor_with_the_best_record(self):
        selector = AutoSelector([Fixed("slow", 2 * DAY), Fixed("fast", DAY / 2)])
        clock = FakeClock(0.0)
        refresher = Refresher(selector, CONFIG, clock)
        h = PageHistory()
        refresher.visited(h, False)
        clock.now = DAY
        refresher.visited(h, True)
        # No record yet: the tie goes to the first listed.
        assert h.state("auto")["pick"] == "slow" and h.interval == 2 * DAY
        for _ in range(3):  # changes every day: "fast" would have caught them
            clock.advance(DAY)
            refresher.visited(h, True)
        scores = h.state("auto")["scores"]
        assert scores["fast"] > 0 > scores["slow"]
        assert h.state("auto")["pick"] == "fast" and h.interval == DAY / 2
        for _ in range(8):  # then stops changing: "fast" wastes visits
            clock.advance(DAY)
            refresher.visited(h, False)
        assert h.state("auto")["pick"] == "slow"

    def test_validation(self):
        with pytest.raises(ValueError):
            AutoSelector([])
        with pytest.raises(ValueError):
            AutoSelector([Fixed("a", 1.0), Fixed("a", 2.0)])
        with pytest.raises(ValueError):
            AutoSelector([Fixed("auto", 1.0)])


# -- history persistence --------------------------------------------------------


class TestHistory:
    def test_round_trip(self):
        selector = AutoSelector([HalveDouble(CONFIG), PoissonTarget(CONFIG)])
        clock = FakeClock(50.0)
        refresher = Refresher(selector, CONFIG, clock)
        h = PageHistory()
        refresher.visited(h, False)
        for i, ch in enumerate([True, False, True, True]):
            clock.advance(DAY * (i + 1))
            refresher.visited(h, ch, last_modified=clock.now - HOUR if ch else None)
        refresher.failed(h)
        data = json.loads(json.dumps(h.to_dict()))
        assert data["v"] == 1 and data["c"] == "01011"
        back = PageHistory.from_dict(data)
        assert back == h
        assert back.to_dict() == h.to_dict()

    def test_minimal_dict_is_compact(self):
        h = PageHistory()
        h.record_visit(1.0, False)
        assert set(h.to_dict()) == {"v", "t", "c", "ct", "iv", "due"}

    @pytest.mark.parametrize("version", [0, 2, "1", None])
    def test_refuses_unknown_versions(self, version):
        data = PageHistory().to_dict()
        data["v"] = version
        with pytest.raises(ValueError, match="unsupported page history version"):
            PageHistory.from_dict(data)
        del data["v"]
        with pytest.raises(ValueError, match="version"):
            PageHistory.from_dict(data)

    def test_rejects_inconsistent_dicts(self):
        h = PageHistory()
        h.record_visit(1.0, False)
        data = h.to_dict()
        data["c"] = "01"
        with pytest.raises(ValueError):
            PageHistory.from_dict(data)

    def test_bounded_and_ordered(self):
        h = PageHistory()
        for i in range(200):
            h.record_visit(float(i), i % 2 == 1)
        assert len(h.visits) == PageHistory.MAX_VISITS
        assert len(h.change_times) == PageHistory.MAX_CHANGES
        assert len(h.samples()) == PageHistory.MAX_VISITS - 1
        with pytest.raises(ValueError):
            h.record_visit(0.0, False)
        h.record_visit(199.0, True)  # same instant: allowed, skipped by samples()
        assert all(t > 0 for t, _ in h.samples())


# -- simhash ----------------------------------------------------------------------


def _text(rng: random.Random, words: int) -> list[str]:
    vocab = [
        "".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 9)))
        for _ in range(4000)
    ]
    return [rng.choice(vocab) for _ in range(words)]


class TestSimhash:
    def test_identical_small_edit_and_different(self):
        rng = random.Random(3)
        words = _text(rng, 5000)
        base = simhash(" ".join(words))
        assert hamming(base, simhash(" ".join(words))) == 0
        for _ in range(10):
            edited = list(words)
            edited[rng.randrange(len(edited))] = "changed"
            assert hamming(base, simhash(" ".join(edited))) <= 3
        other = simhash(" ".join(_text(random.Random(4), 5000)))
        assert hamming(base, other) > 12

    def test_stable_across_processes(self):
        # BLAKE2b, not the salted hash(): a fixed text has a fixed simhash.
        assert simhash("the quick brown fox jumps over the lazy dog") == simhash(
            "The quick, brown fox -- jumps over the LAZY dog!"
        )
        assert simhash("") == 0
        assert simhash("one") == simhash("ONE")
        assert 0 < simhash("the quick brown fox") < 2**64
        with pytest.raises(ValueError):
            simhash("x", shingle=0)

    def test_vectorised_matches_the_reference(self):
        rng = random.Random(11)
        texts = ["", "one", "two words", "the quick brown fox", "x x x x x",
                 "Grüße aus Köln, naïve café — ünïcödé 東京 テスト",
                 " ".join(_text(rng, 3000))]
        texts += [" ".join(_text(random.Random(seed), rng.randint(1, 60))) for seed in range(30)]
        for text in texts:
            for shingle in (1, 2, 3, 5):
                assert simhash(text, shingle) == simhash_reference(text, shingle), (text, shingle)

    def test_a_100kb_page_matches_the_reference(self):
        # Its speed is measured in benchmarks, never asserted here (noisy machines).
        text = " ".join(_text(random.Random(5), 17_000))
        assert len(text) > 100_000
        assert simhash(text) == simhash_reference(text)

    def test_hamming(self):
        assert hamming(0, 0) == 0
        assert hamming(0, 2**64 - 1) == 64
        assert hamming(0b1011, 0b0001) == 2

    def test_is_change(self):
        assert not is_change(None, b"x")  # first visit
        assert not is_change(b"a", b"a", 1, 2**40)
        assert is_change(b"a", b"b")  # no simhash: digest decides
        assert not is_change(b"a", b"b", 0b0, 0b111)  # 3 bits: same page
        assert is_change(b"a", b"b", 0b0, 0b1111)
        assert is_change(b"a", b"b", 0, 0, exact=True)
        assert not is_change(b"a", b"b", 0, 0b1, threshold=1)


class TestShrinkageAndProbing:
    def test_bayes_rate(self):
        # No change seen: exactly the posterior mean shape / (rate + sum t).
        assert bayes_rate([(2.0, False), (3.0, False)], 2.0, 5.0) == pytest.approx(2 / 10)
        assert bayes_rate([], 2.0, 5.0) == pytest.approx(0.4)  # the prior mean
        # All changed: finite, unlike the MLE.
        assert 0 < bayes_rate([(1.0, True)] * 5, 1.0, 1.0) < math.inf
        # Many samples: the prior washes out, back to the MLE.
        rng = random.Random(9)
        samples = [(1.0, rng.random() < 1 - math.exp(-0.7)) for _ in range(3000)]
        assert bayes_rate(samples, 2.0, 20.0) == pytest.approx(mle_rate(samples), rel=0.01)
        # Few samples: between the MLE and the prior mean.
        few = [(1.0, True), (1.0, False)]
        assert 0.1 < bayes_rate(few, 1.0, 10.0) < mle_rate(few)
        with pytest.raises(ValueError):
            bayes_rate(few, 0.0, 1.0)

    def test_gamma_prior(self):
        rng = random.Random(2)
        rates = [rng.gammavariate(2.0, 0.5) for _ in range(20_000)]
        shape, rate = gamma_prior(rates) or (0.0, 0.0)
        assert shape == pytest.approx(2.0, rel=0.05)
        assert rate == pytest.approx(2.0, rel=0.05)
        assert gamma_prior([1.0]) is None
        assert gamma_prior([1.0, 1.0]) is None

    def test_estimator_optimal_uses_the_prior(self):
        p = EstimatorOptimal(CONFIG, mu=DAY, max_growth=math.inf)
        h, _ = drive(p, [False], step=DAY)
        assert h.interval == CONFIG.max_interval  # MLE 0: never changes
        p.set_prior((1.0, 10 * DAY))  # mean one change per 10 days
        h, _ = drive(p, [False], step=DAY)
        assert h.state(p.name)["rate"] == pytest.approx(1 / (11 * DAY))
        assert h.interval < CONFIG.max_interval
        with pytest.raises(ValueError):
            p.set_prior((0.0, 1.0))

    def test_probing_halves_while_every_visit_changes(self):
        p = EstimatorOptimal(CONFIG, mu=0.01 * DAY, probe=2, max_growth=math.inf)
        _, iv = drive(p, [True, True, True], step=DAY)
        assert iv[2] <= iv[1] / 2
        assert iv[3] <= max(iv[2] / 2, CONFIG.min_interval)
        # If even the lower bound says "too fast to keep fresh", no probing.
        p = EstimatorOptimal(CONFIG, mu=100 * DAY, probe=2)
        _, iv = drive(p, [True, True, True], step=DAY)
        assert iv[-1] == 2 * iv[-2] or iv[-1] == CONFIG.max_interval
        with pytest.raises(ValueError):
            EstimatorOptimal(CONFIG, probe=-1)
