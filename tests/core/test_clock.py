"""The fake clock the core tests run on."""

from __future__ import annotations

import pytest

from scrapy_frontier.core import FakeClock

# -- FakeClock -----------------------------------------------------------------


class TestFakeClock:
    def test_starts_where_told(self):
        assert FakeClock()() == 0.0
        assert FakeClock(12.5)() == 12.5

    def test_advance(self):
        clock = FakeClock(10.0)
        assert clock.advance(2.5) == 12.5
        assert clock() == 12.5
        assert clock.advance(0) == 12.5
        assert clock.now == 12.5

    def test_cannot_go_backwards(self):
        clock = FakeClock(5.0)
        with pytest.raises(ValueError):
            clock.advance(-0.001)
        assert clock() == 5.0
