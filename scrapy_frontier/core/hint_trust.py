"""How far each host's change hints (sitemap lastmod, feed updated) can be believed.

The counts are kept with the page history (``HistoryStore.add_trust``), so a host found out
in one run stays found out in the next, and on Redis every worker adds to the same counts.

A hint is checked whenever a fetch of a page whose site made one finds out whether the page
really changed since the visit before: the hint said "changed" (its time is past the
previous visit) or "not changed", and the fetch found a change (digest or simhash) or none.
A check counts only when the hint or the fetch says "changed": a hint that did not move on a
page that did not change tells nothing, and on pages that seldom change a liar (whose hints
never move) would otherwise agree most of the time. So a confirmed change is an agreement, a
change the hint missed (a liar) or a change it made up (a noisy host) a disagreement. A
host's score is its share of checks that agreed, with a prior of ``PRIOR`` agreements and as
many disagreements, so that a few lucky checks do not make a host trusted.

``trusted``: the hints decide (a page whose hint did not move waits for its verification
visit). ``distrusted``: the hints are ignored, and the host's pages are recrawled on their
fetch-based schedule as if it published nothing. In between (too few checks): a hint that
moved makes the page due (which also checks it), one that did not move changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

PRIOR = 1.0
#: Checks a host needs before its hints decide anything alone.
MIN_CHECKS = 3
#: Scores at or above this are trusted; at or below DISTRUST, distrusted.
TRUST = 0.8
DISTRUST = 0.5


@dataclass(slots=True)
class HostHints:
    agreed: int = 0
    disagreed: int = 0

    @property
    def checks(self) -> int:
        return self.agreed + self.disagreed

    @property
    def score(self) -> float:
        return (self.agreed + PRIOR) / (self.checks + 2 * PRIOR)


class HintTrust:
    """Per-host agreement between hinted and found changes (in memory, for one run)."""

    __slots__ = ("hosts", "counts")

    def __init__(self, known: dict[str, tuple[int, int]] | None = None) -> None:
        """``known``: (agreed, disagreed) per host from earlier runs."""
        self.hosts: dict[str, HostHints] = {
            host: HostHints(agreed, disagreed) for host, (agreed, disagreed)
            in (known or {}).items()}
        #: Hosts in each state, kept up to date by :meth:`check` (for the stats).
        self.counts = {"trusted": 0, "distrusted": 0, "unknown": 0}
        for host in self.hosts:
            self.counts[self.state(host)] += 1

    def check(self, host: str, hinted_changed: bool, found_changed: bool) -> bool | None:
        """Record one check; return whether the hint agreed with the fetch, or None when
        neither said "changed" (not counted)."""
        if not hinted_changed and not found_changed:
            return None
        entry = self.hosts.get(host)
        if entry is None:
            entry = self.hosts[host] = HostHints()
            self.counts["unknown"] += 1
        before = self.state(host)
        agreed = hinted_changed == found_changed
        if agreed:
            entry.agreed += 1
        else:
            entry.disagreed += 1
        after = self.state(host)
        if after != before:
            self.counts[before] -= 1
            self.counts[after] += 1
        return agreed

    def state(self, host: str) -> str:
        """``trusted``, ``distrusted`` or ``unknown``."""
        entry = self.hosts.get(host)
        if entry is None or entry.checks < MIN_CHECKS:
            return "unknown"
        if entry.score >= TRUST:
            return "trusted"
        if entry.score <= DISTRUST:
            return "distrusted"
        return "unknown"
