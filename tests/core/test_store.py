"""The memory store's back queue: highest level first, FIFO within a level."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scrapy_frontier.core.store import BackQueue

# -- BackQueue -------------------------------------------------------------------


class TestBackQueue:
    def test_highest_level_first_fifo_within_level(self):
        queue: BackQueue[str] = BackQueue()
        assert len(queue) == 0 and not queue
        for level, item in [(1, "x1"), (3, "y1"), (2, "w1"), (3, "y2"), (1, "x2")]:
            queue.append(level, item)
        assert len(queue) == 5 and queue
        assert list(queue.items()) == [(3, "y1"), (3, "y2"), (2, "w1"), (1, "x1"), (1, "x2")]
        assert [queue.popleft() for _ in range(3)] == [(3, "y1"), (3, "y2"), (2, "w1")]
        queue.append(3, "y3")
        queue.append(1, "x3")
        assert [queue.popleft() for _ in range(4)] == [(3, "y3"), (1, "x1"), (1, "x2"), (1, "x3")]
        assert len(queue) == 0 and not queue
        assert list(queue.items()) == []

    @given(st.lists(st.tuples(st.booleans(), st.integers(1, 5)), max_size=60))
    def test_matches_a_sorted_model(self, ops):
        queue: BackQueue[int] = BackQueue()
        model: list[tuple[int, int]] = []  # (level, serial)
        for serial, (is_pop, level) in enumerate(ops):
            if is_pop and model:
                best = max(model, key=lambda entry: (entry[0], -entry[1]))
                model.remove(best)
                assert queue.popleft() == best
            else:
                queue.append(level, serial)
                model.append((level, serial))
            assert len(queue) == len(model)
            expected = sorted(model, key=lambda entry: (-entry[0], entry[1]))
            assert list(queue.items()) == expected
