"""Front-queue priority for recrawls: change rate, quality and explicit rules.

The result is a Scrapy-style priority *adjustment* (added to ``Request.priority``
before it is mapped to a front queue), so it composes with what the spider asks.

* **change term** -- the share of a page's visits that saw a real change (as
  decided by digest + simhash, so a page that "changes" only by noise on every
  fetch has a share of 0 and is not promoted): +2 from one half, +1 from one
  fifth, else 0;
* **quality term** -- a quality in [0, 1] (depth, inlinks, or the user's own):
  +1 from 0.5, 0 from 0.2, else -1;
* **rules** -- per-host boosts (longest matching host suffix wins) and a
  per-request boost, added as given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def change_term(changes: int, intervals: int) -> int:
    """+2, +1 or 0 from the share of visit intervals that saw a change."""
    if intervals <= 0:
        return 0
    share = changes / intervals
    if share >= 0.5:
        return 2
    if share >= 0.2:
        return 1
    return 0


def quality_term(quality: float) -> int:
    if math.isnan(quality):
        return 0
    if quality >= 0.5:
        return 1
    if quality >= 0.2:
        return 0
    return -1


def depth_quality(depth: int) -> float:
    """1 for a start page, 1/2 one click away, 1/3 two clicks away..."""
    return 1.0 / (1 + max(0, depth))


def inlinks_quality(inlinks: int) -> float:
    """0 with no known inlinks, 1/2 with one, approaching 1 with many."""
    return 1.0 - 1.0 / (1 + max(0, inlinks))


class HostRules:
    """Priority boosts by host suffix: ``{"example.com": 2}`` boosts example.com and its
    subdomains; the longest matching suffix wins."""

    def __init__(self, rules: Mapping[str, int]) -> None:
        self.rules = {host.lower().strip("."): int(boost) for host, boost in rules.items()}

    def boost(self, host: str) -> int:
        if not self.rules:
            return 0
        host = host.lower()
        while True:
            value = self.rules.get(host)
            if value is not None:
                return value
            dot = host.find(".")
            if dot < 0:
                return 0
            host = host[dot + 1 :]
