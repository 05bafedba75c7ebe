"""Statistical tests of the priority bias, and a seeded stress test of the Frontier.

scipy is not a dependency: the chi-square critical value comes from the
Wilson-Hilferty approximation, which is conservative at the tiny significance
level used here. Every test is seeded, so the outcome is deterministic; the
tolerance only has to be sound for the seed, and tight enough to catch a wrong
bias (checked by ``test_chi_square_rejects_a_wrong_bias``).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from statistics import NormalDist

import pytest

from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier, FrontQueueChooser
from tests.invariants import check_frontier

ALPHA = 1e-6
NO_REST = DelayPolicy(factor=0.0, min_delay=0.0, max_delay=0.0)


def chi_square_critical(df: int, alpha: float = ALPHA) -> float:
    """Upper ``alpha`` quantile of chi-square(df), Wilson-Hilferty approximation."""
    z = NormalDist().inv_cdf(1.0 - alpha)
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(counts: Counter, expected: dict[int, float]) -> float:
    n = sum(counts.values())
    assert set(counts) <= set(expected), "a category outside the expected support"
    return sum((counts[k] - n * p) ** 2 / (n * p) for k, p in expected.items())


def expected_shares(bias: float, non_empty: list[int]) -> dict[int, float]:
    """bias ** i / sum, for 0-based indexes i (levels i + 1)."""
    total = sum(bias**i for i in non_empty)
    return {i: bias**i / total for i in non_empty}


def within_binomial(k: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(k - n * p) <= sigmas * math.sqrt(n * p * (1.0 - p))


def test_critical_values_are_sane():
    # Known upper 1e-6 quantiles: df=1 -> 23.93, df=4 -> 33.38, df=7 -> 40.52.
    # Wilson-Hilferty overestimates slightly for few degrees of freedom (conservative).
    for df, exact in [(1, 23.93), (4, 33.38), (7, 40.52)]:
        approx = chi_square_critical(df)
        assert exact <= approx <= exact * 1.2


# -- the chooser on its own ---------------------------------------------------------


@pytest.mark.parametrize(
    ("levels", "bias", "non_empty", "seed"),
    [
        (5, 2.0, [0, 1, 2, 3, 4], 1),
        (5, 2.0, [1, 3], 2),
        (8, 2.0, [0, 3, 7], 3),
        (8, 2.0, list(range(8)), 4),
        (4, 3.0, [0, 1, 2, 3], 5),
        (3, 1.5, [0, 2], 6),
        (4, 1.0, [0, 1, 2, 3], 7),
    ],
)
def test_chooser_frequencies_match_bias(levels, bias, non_empty, seed):
    chooser = FrontQueueChooser(levels, bias, random.Random(seed))
    n = 60_000
    counts = Counter(chooser.choose(non_empty) for _ in range(n))
    expected = expected_shares(bias, non_empty)
    assert set(counts) == set(non_empty)
    stat = chi_square(counts, expected)
    assert stat < chi_square_critical(len(non_empty) - 1), (stat, counts, expected)
    for i, p in expected.items():
        assert within_binomial(counts[i], n, p), (i, counts[i], n * p)


def test_chi_square_rejects_a_wrong_bias():
    """The tolerance is tight enough to notice a bias off by 10%."""
    non_empty = [0, 1, 2, 3, 4]
    chooser = FrontQueueChooser(5, 2.0, random.Random(1))
    n = 60_000
    counts = Counter(chooser.choose(non_empty) for _ in range(n))
    critical = chi_square_critical(len(non_empty) - 1)
    assert chi_square(counts, expected_shares(2.0, non_empty)) < critical
    assert chi_square(counts, expected_shares(1.8, non_empty)) > critical
    assert chi_square(counts, expected_shares(2.2, non_empty)) > critical
    assert chi_square(counts, expected_shares(1.0, non_empty)) > critical


# -- end to end through the Frontier ------------------------------------------------


def serve_one_url_hosts(per_level: dict[int, int], bias: float, seed: int) -> list[int]:
    """Push one URL per host at the given levels (interleaved), serve everything
    with one back queue, and return the level of each URL in the order served."""
    levels = max(per_level)
    frontier: Frontier[int] = Frontier(
        front_queues=levels,
        priority_bias=bias,
        back_queues=1,
        back_queues_max=1,
        policy=NO_REST,
        clock=FakeClock(),
        rng=random.Random(seed),
    )
    remaining = dict(per_level)
    serial = 0
    while any(remaining.values()):
        for level in sorted(remaining):
            if remaining[level]:
                remaining[level] -= 1
                frontier.push(f"host{serial}", level, serial)
                serial += 1
    served = []
    while True:
        lease = frontier.pop()
        if lease is None:
            break
        assert lease.host == f"host{lease.item}"
        served.append(lease.level)
        assert frontier.pop() is None  # one back queue: one host at a time
        frontier.complete(lease.ticket, 0.0)
    check_frontier(frontier)
    assert len(frontier) == 0
    assert frontier.stats.activations == serial
    return served


@pytest.mark.parametrize(("bias", "seed"), [(2.0, 11), (3.0, 12), (4.0, 13)])
def test_two_levels_served_in_bias_ratio_and_low_never_starved(bias, seed):
    per_level = {1: 3000, 2: 3000}
    served = serve_one_url_hosts(per_level, bias, seed)
    # The first host is activated by the first push, before any choice is made.
    assert served[0] == 1
    choices = served[1:]

    # A prefix where both levels are certainly still non-empty.
    m = 2000
    prefix = choices[:m]
    high = prefix.count(2)
    low = prefix.count(1)
    assert high < per_level[2] and low + 1 < per_level[1]  # both were non-empty
    p_high = bias / (bias + 1.0)
    assert within_binomial(high, m, p_high), (high, m * p_high)
    assert bias * 0.85 < high / low < bias * 1.15

    # Not starved: the low level is served early and regularly.
    assert 1 in choices[:60]
    longest_high_run = max(len(run) for run in "".join(map(str, prefix)).split("1"))
    assert longest_high_run < 20 * bias

    # Everything is served; once level 2 runs dry only level 1 is left.
    assert Counter(served) == Counter({1: 3000, 2: 3000})
    last_high = len(served) - 1 - served[::-1].index(2)
    assert set(served[last_high + 1 :]) <= {1}


def test_three_levels_multinomial():
    per_level = {1: 4000, 2: 4000, 3: 4000}
    bias = 2.0
    served = serve_one_url_hosts(per_level, bias, seed=21)[1:]
    m = 3000  # level 3 gets ~4/7 of these: all three stay non-empty
    prefix = Counter(served[:m])
    assert all(prefix[level] < per_level[level] - 1 for level in per_level)
    expected = {i + 1: p for i, p in expected_shares(bias, [0, 1, 2]).items()}
    assert chi_square(prefix, expected) < chi_square_critical(2)
    assert Counter(served) + Counter({1: 1}) == Counter(per_level)


def test_bias_one_serves_levels_evenly():
    served = serve_one_url_hosts({1: 2000, 2: 2000}, 1.0, seed=31)[1:]
    prefix = served[:1500]
    assert within_binomial(prefix.count(2), len(prefix), 0.5)


# -- seeded stress ------------------------------------------------------------------


def run_stress(seed: int, steps: int = 20_000) -> Frontier[int]:
    rng = random.Random(seed)
    clock = FakeClock(rng.choice([0.0, 1e6]))
    back = rng.randint(1, 8)
    factor = rng.choice([0.0, 1.0, 10.0])
    min_delay = rng.choice([0.0, 0.5, 2.0])
    policy = DelayPolicy(factor=factor, min_delay=min_delay, max_delay=min_delay + 10.0)
    frontier: Frontier[int] = Frontier(
        front_queues=rng.randint(1, 8),
        priority_bias=rng.choice([1.0, 2.0, 3.0]),
        back_queues=back,
        back_queues_max=back + rng.randint(0, 8),
        policy=policy,
        lease_timeout=rng.choice([5.0, 30.0]),
        clock=clock,
        rng=random.Random(seed + 1000),
    )
    hosts = [f"h{i}" for i in range(rng.choice([5, 40, 200]))]
    pushed: dict[int, str] = {}
    popped: set[int] = set()
    leases: dict[int, object] = {}
    busy: set[str] = set()
    rest_until: dict[str, float] = {}
    finished: list[int] = []

    def take(lease) -> None:
        assert lease.item not in popped
        assert lease.host == pushed[lease.item]
        assert lease.host not in busy
        assert clock.now >= rest_until.get(lease.host, -math.inf)
        popped.add(lease.item)
        busy.add(lease.host)
        leases[lease.ticket] = lease

    def release(lease, fetch: float) -> None:
        busy.discard(lease.host)
        rest_until[lease.host] = clock.now + policy.delay(fetch)
        finished.append(lease.ticket)

    ops = ["push"] * 35 + ["pop"] * 30 + ["complete"] * 20 + ["advance"] * 10
    ops += ["expire"] * 3 + ["stale"] * 2
    for step in range(steps):
        op = rng.choice(ops)
        if op == "push":
            item = len(pushed)
            host = rng.choice(hosts)
            pushed[item] = host
            frontier.push(host, rng.randint(1, frontier.levels), item)
        elif op == "pop":
            lease = frontier.pop()
            if lease is not None:
                take(lease)
        elif op == "complete" and leases:
            ticket = rng.choice(list(leases))
            lease = leases.pop(ticket)
            fetch = rng.expovariate(2.0)
            assert frontier.complete(ticket, fetch) is lease
            release(lease, fetch)
        elif op == "advance":
            clock.advance(rng.choice([0.0, rng.random(), 3 * rng.random()]))
        elif op == "expire":
            for lease in frontier.expire_leases():
                assert leases.pop(lease.ticket) is lease
                release(lease, clock.now - lease.handed_at)
        elif op == "stale" and finished:
            assert frontier.complete(rng.choice(finished), 0.1) is None
        assert frontier.in_flight == len(leases)
        if step % 100 == 0:
            check_frontier(frontier)

    check_frontier(frontier)
    queued = Counter(item for _, _, item in frontier.iter_queued())
    assert max(queued.values(), default=1) == 1
    assert set(queued).isdisjoint(popped)
    assert set(queued) | popped == set(pushed)

    # Drain: every pushed item is eventually handed out.
    for _ in range(len(pushed) + 10):
        for ticket in list(leases):
            lease = leases.pop(ticket)
            frontier.complete(ticket, 0.05)
            release(lease, 0.05)
        if len(popped) == len(pushed):
            break
        wake = frontier.next_wakeup()
        assert wake is not None
        clock.now = max(clock.now, wake)
        while (lease := frontier.pop()) is not None:
            take(lease)
    check_frontier(frontier)
    assert popped == set(pushed)
    assert len(frontier) == 0 and frontier.in_flight == 0
    assert frontier.stats.pushed == frontier.stats.popped == len(pushed)
    return frontier


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_seeded_stress(seed):
    frontier = run_stress(seed)
    stats = frontier.stats
    assert stats.popped > 1000  # the run did real work
    assert stats.completed + stats.expired == stats.popped
    assert stats.activations == stats.releases
    assert stats.peak_active <= frontier.back_queues_max
