"""Front-queue levels: which level a URL enters, and which level is served next."""

from __future__ import annotations

import random
from collections.abc import Sequence


class PriorityMapper:
    """Maps Scrapy's ``Request.priority`` (higher = sooner) onto levels 1..F.

    Priority 0 lands on the middle level ``(F + 1) // 2``; each unit of
    priority moves one level, and priorities beyond the ends are clamped.
    With the default F = 8: priority 0 -> level 4, Scrapy's redirect
    adjustment (+2) -> 6, its retry adjustment (-1) -> 3, and anything
    >= 4 -> 8 (the highest), anything <= -3 -> 1 (the lowest).
    """

    def __init__(self, levels: int) -> None:
        if levels < 1:
            raise ValueError(f"need at least one front queue, got {levels}")
        self.levels = levels
        self.center = (levels + 1) // 2

    def level(self, priority: int) -> int:
        # Comparisons, not min/max calls: this runs once per request.
        level = self.center + (priority if type(priority) is int else int(priority))
        if level < 1:
            return 1
        return self.levels if level > self.levels else level


class FrontQueueChooser:
    """Biased random choice among the non-empty front queues.

    Level ``i`` (1..F) has weight ``bias ** (i - 1)``: with bias 2 each level
    is twice as likely to be served as the one below it. Every non-empty
    queue keeps a non-zero chance, so nothing starves; bias 1 is uniform.
    """

    def __init__(self, levels: int, bias: float, rng: random.Random) -> None:
        if not bias >= 1.0:  # also refuses NaN
            raise ValueError(f"priority bias must be >= 1, got {bias}")
        self.rng = rng
        self.weights = [bias ** (i) for i in range(levels)]

    def choose(self, non_empty: Sequence[int]) -> int:
        """Pick one index (0-based) among ``non_empty`` indexes."""
        if len(non_empty) == 1:
            return non_empty[0]
        total = 0.0
        for i in non_empty:
            total += self.weights[i]
        x = self.rng.random() * total
        for i in non_empty:
            x -= self.weights[i]
            if x < 0:
                return i
        return non_empty[-1]

    def probabilities(self, non_empty: Sequence[int]) -> dict[int, float]:
        total = sum(self.weights[i] for i in non_empty)
        return {i: self.weights[i] / total for i in non_empty}
