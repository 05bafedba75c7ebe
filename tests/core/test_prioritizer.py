"""Priority levels and the front-queue choice (no Scrapy, no Twisted)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_frontier.core import FrontQueueChooser, PriorityMapper

# -- PriorityMapper ------------------------------------------------------------


class TestPriorityMapper:
    @pytest.mark.parametrize(
        ("priority", "level"),
        [
            (0, 4),  # the middle level
            (2, 6),  # Scrapy's redirect adjustment
            (-1, 3),  # Scrapy's retry adjustment
            (3, 7),
            (4, 8),
            (5, 8),
            (10**6, 8),
            (-2, 2),
            (-3, 1),
            (-4, 1),
            (-(10**6), 1),
        ],
    )
    def test_documented_mapping_for_eight_levels(self, priority, level):
        assert PriorityMapper(8).level(priority) == level

    def test_small_level_counts(self):
        one = PriorityMapper(1)
        assert {one.level(p) for p in range(-5, 6)} == {1}
        two = PriorityMapper(2)
        assert two.center == 1
        assert (two.level(-1), two.level(0), two.level(1), two.level(2)) == (1, 1, 2, 2)
        five = PriorityMapper(5)
        assert five.center == 3
        assert [five.level(p) for p in range(-3, 4)] == [1, 1, 2, 3, 4, 5, 5]

    @pytest.mark.parametrize("levels", [0, -1])
    def test_validation(self, levels):
        with pytest.raises(ValueError):
            PriorityMapper(levels)

    @given(levels=st.integers(1, 20), a=st.integers(-100, 100), b=st.integers(-100, 100))
    def test_monotone_and_in_range(self, levels, a, b):
        mapper = PriorityMapper(levels)
        la, lb = mapper.level(a), mapper.level(b)
        assert 1 <= la <= levels and 1 <= lb <= levels
        if a <= b:
            assert la <= lb
        # One unit of priority moves at most one level.
        if abs(a - b) == 1:
            assert abs(la - lb) <= 1


# -- FrontQueueChooser ---------------------------------------------------------


class _ScriptedRng:
    """Returns the given random() values in order."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


class TestFrontQueueChooser:
    def test_weights_are_powers_of_bias(self):
        chooser = FrontQueueChooser(5, 3.0, random.Random(0))
        assert chooser.weights == [1.0, 3.0, 9.0, 27.0, 81.0]

    def test_probabilities(self):
        chooser = FrontQueueChooser(4, 2.0, random.Random(0))
        probs = chooser.probabilities([0, 2, 3])
        assert probs == pytest.approx({0: 1 / 13, 2: 4 / 13, 3: 8 / 13})
        assert sum(probs.values()) == pytest.approx(1.0)

    def test_choice_follows_cumulative_weights(self):
        # Weights 1, 2, 4; among [0, 2] the total is 5: [0, 1) -> 0, [1, 5) -> 2.
        rng = _ScriptedRng([0.0, 0.19, 0.21, 0.99])
        chooser = FrontQueueChooser(3, 2.0, rng)  # type: ignore[arg-type]
        assert [chooser.choose([0, 2]) for _ in range(4)] == [0, 0, 2, 2]

    def test_single_queue_needs_no_draw(self):
        rng = _ScriptedRng([])  # would raise if consulted
        chooser = FrontQueueChooser(3, 2.0, rng)  # type: ignore[arg-type]
        assert chooser.choose([1]) == 1

    def test_only_non_empty_queues_are_chosen(self):
        chooser = FrontQueueChooser(6, 2.0, random.Random(7))
        for non_empty in ([0, 5], [1, 2, 4], [3], [0, 1, 2, 3, 4, 5]):
            picks = Counter(chooser.choose(non_empty) for _ in range(2000))
            assert set(picks) == set(non_empty)  # never outside, and all reachable

    def test_bias_one_is_uniform(self):
        chooser = FrontQueueChooser(4, 1.0, random.Random(3))
        assert chooser.probabilities([0, 1, 2, 3]) == pytest.approx(
            {0: 0.25, 1: 0.25, 2: 0.25, 3: 0.25}
        )
        n = 40_000
        picks = Counter(chooser.choose([0, 1, 2, 3]) for _ in range(n))
        for i in range(4):
            # 5 sigma of a binomial(n, 1/4)
            assert abs(picks[i] - n / 4) < 5 * (n * 0.25 * 0.75) ** 0.5

    def test_higher_level_preferred(self):
        chooser = FrontQueueChooser(2, 4.0, random.Random(11))
        picks = Counter(chooser.choose([0, 1]) for _ in range(10_000))
        assert picks[1] > 3 * picks[0] > 0

    @pytest.mark.parametrize("bias", [0.999, 0.5, 0.0, -2.0])
    def test_validation(self, bias):
        with pytest.raises(ValueError):
            FrontQueueChooser(3, bias, random.Random(0))

    def test_same_seed_same_choices(self):
        a = FrontQueueChooser(5, 2.0, random.Random(42))
        b = FrontQueueChooser(5, 2.0, random.Random(42))
        assert [a.choose([0, 2, 4]) for _ in range(200)] == [
            b.choose([0, 2, 4]) for _ in range(200)
        ]
