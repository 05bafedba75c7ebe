"""The rest after a fetch (core/politeness.py), as pure functions: the core frontier uses
``rest_after_fetch`` whole; the Redis frontier sends ``rest_before_floors`` to its scripts,
which raise it to the floors kept in Redis."""

from __future__ import annotations

import itertools
import math

from scrapy_frontier.core.politeness import DelayPolicy, rest_after_fetch, rest_before_floors


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
