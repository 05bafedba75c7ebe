"""The rest after a fetch (core/politeness.py): the delay policy, and the pure functions of
the rest: the core frontier uses ``rest_after_fetch`` whole; the Redis frontier sends
``rest_before_floors`` to its scripts, which raise it to the floors kept in Redis."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_frontier.core import DelayPolicy
from scrapy_frontier.core.politeness import rest_after_fetch, rest_before_floors

# -- DelayPolicy ---------------------------------------------------------------


class TestDelayPolicy:
    def test_defaults_are_mercator_factor_ten(self):
        policy = DelayPolicy()
        assert (policy.factor, policy.min_delay, policy.max_delay) == (10.0, 1.0, 60.0)
        assert DelayPolicy(min_delay=0.0).delay(0.25) == pytest.approx(2.5)
        assert policy.delay(0.25) == pytest.approx(2.5)

    @pytest.mark.parametrize(
        ("fetch", "expected"),
        [
            (1.5, 7.5),  # inside the band: factor x fetch
            (0.6, 3.0),  # exactly the lower bound
            (0.1, 3.0),  # clamped up to min
            (0.0, 3.0),
            (-4.0, 3.0),  # a negative duration counts as zero
            (6.0, 30.0),  # exactly the upper bound
            (100.0, 30.0),  # clamped down to max
        ],
    )
    def test_clamping(self, fetch, expected):
        policy = DelayPolicy(factor=5.0, min_delay=3.0, max_delay=30.0)
        assert policy.delay(fetch) == pytest.approx(expected)

    def test_next_contact_is_finish_plus_delay(self):
        policy = DelayPolicy(factor=5.0, min_delay=3.0, max_delay=30.0)
        assert policy.next_contact(1000.0, 2.0) == pytest.approx(1010.0)
        assert policy.next_contact(1000.0, 0.0) == pytest.approx(1003.0)
        assert policy.next_contact(1000.0, 50.0) == pytest.approx(1030.0)

    def test_negative_fetch_never_shortens_the_rest(self):
        policy = DelayPolicy(factor=10.0, min_delay=0.0, max_delay=60.0)
        assert policy.delay(-1.0) == 0.0
        assert policy.next_contact(50.0, -3.0) == 50.0

    def test_factor_zero_gives_min(self):
        policy = DelayPolicy(factor=0.0, min_delay=1.5, max_delay=9.0)
        assert policy.delay(1000.0) == 1.5

    def test_min_equal_max_is_fixed_delay(self):
        policy = DelayPolicy(factor=10.0, min_delay=5.0, max_delay=5.0)
        assert {policy.delay(x) for x in (0.0, 0.1, 0.5, 3.0)} == {5.0}

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"factor": -0.1},
            {"min_delay": -1.0},
            {"min_delay": 5.0, "max_delay": 4.9},
            {"max_delay": -1.0},
        ],
    )
    def test_validation(self, kwargs):
        with pytest.raises(ValueError):
            DelayPolicy(**kwargs)

    def test_frozen(self):
        policy = DelayPolicy()
        with pytest.raises(dataclasses.FrozenInstanceError):
            policy.factor = 1.0  # type: ignore[misc]

    @given(
        factor=st.floats(0, 100),
        lo=st.floats(0, 100),
        span=st.floats(0, 100),
        fetch=st.floats(-10, 1e4),
    )
    def test_delay_always_within_bounds(self, factor, lo, span, fetch):
        policy = DelayPolicy(factor=factor, min_delay=lo, max_delay=lo + span)
        delay = policy.delay(fetch)
        assert policy.min_delay <= delay <= policy.max_delay
        wanted = factor * max(0.0, fetch)
        if policy.min_delay <= wanted <= policy.max_delay:
            assert delay == wanted


def test_nan_parameters_are_refused() -> None:
    import math

    from scrapy_frontier.core import DelayPolicy, FrontQueueChooser

    for kwargs in ({"factor": math.nan}, {"min_delay": math.nan}, {"max_delay": math.nan}):
        with pytest.raises(ValueError, match="NaN"):
            DelayPolicy(**kwargs)
    with pytest.raises(ValueError, match="bias"):
        FrontQueueChooser(3, math.nan, random.Random(0))


# -- the rest after a fetch ----------------------------------------------------


def test_the_rest_counts_from_the_answers_end_and_never_goes_negative() -> None:
    assert rest_after_fetch(5.0, 0.0, 0.0, 0.0, 0.0) == 5.0
    assert rest_after_fetch(5.0, 2.0, 0.0, 0.0, 0.0) == 3.0
    assert rest_after_fetch(5.0, 50.0, 0.0, 0.0, 0.0) == 0.0
    # A NaN or negative time since the end counts as none.
    assert rest_after_fetch(5.0, math.nan, 0.0, 0.0, 0.0) == 5.0
    assert rest_after_fetch(5.0, -3.0, 0.0, 0.0, 0.0) == 5.0


def test_each_floor_raises_the_rest_and_counts_from_now() -> None:
    # robots.txt's minimum rest, the outcome's (Retry-After, back-off), the operator's.
    assert rest_after_fetch(1.0, 0.5, 4.0, 0.0, 0.0) == 4.0
    assert rest_after_fetch(1.0, 0.5, 0.0, 6.0, 0.0) == 6.0
    assert rest_after_fetch(1.0, 0.5, 0.0, 0.0, 9.0) == 9.0
    assert rest_after_fetch(10.0, 1.0, 4.0, 6.0, 8.0) == 9.0
    assert rest_after_fetch(1.0, 0.0, 2.0, math.inf, 3.0) == math.inf


def test_the_floors_are_maxima_so_the_stored_ones_may_come_last() -> None:
    """What the Redis frontier relies on: max(rest_before_floors, stored floors) is the
    whole rule, on a grid of every argument."""
    policy = DelayPolicy(2.0, 0.5, 30.0)
    values = [0.0, 0.3, 1.0, 4.0, 100.0]
    for fetch, ago, min_rest, at_least, operator in itertools.product(values, repeat=5):
        sent = rest_before_floors(policy, fetch, ago, at_least)
        assert max(sent, min_rest, operator) == rest_after_fetch(
            policy.delay(fetch), ago, min_rest, at_least, operator)


def test_rest_before_floors_is_the_policys_delay_by_default() -> None:
    policy = DelayPolicy(10.0, 1.0, 60.0)
    assert rest_before_floors(policy, 0.2) == 2.0
    assert rest_before_floors(policy, 0.01) == 1.0
    assert rest_before_floors(policy, 100.0) == 60.0
    assert rest_before_floors(policy, 0.2, ended_ago=0.5) == 1.5
    assert rest_before_floors(policy, 0.2, at_least=7.0) == 7.0
