"""What robots.txt and operators ask of single hosts: rests of at least so long after each
fetch, and blocks.

:class:`HostControls` holds the wishes; the frontier applies them when it releases a host
and when a block starts or ends (it owns the heaps a block moves a host in).
"""

from __future__ import annotations

import math


def _set_rest(rests: dict[str, float], host: str, seconds: float, what: str) -> None:
    """``rests[host] = seconds``; 0 removes it."""
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{what} must be >= 0, got {seconds}")
    if seconds:
        rests[host] = seconds
    else:
        rests.pop(host, None)


class HostControls:
    def __init__(self) -> None:
        #: robots.txt's Crawl-delay: the least rest after any fetch of a host. Remembered
        #: when the frontier forgets the host's state, so it holds for the whole crawl.
        self.min_rests: dict[str, float] = {}
        #: An operator's least rest after any fetch of a host (``scrapy frontier delay``).
        self.delays: dict[str, float] = {}
        #: Blocked host -> (block end, the rest end it would have had without the block),
        #: clock times; an end of inf blocks until unblocked.
        self.blocks: dict[str, tuple[float, float]] = {}

    def set_min_rest(self, host: str, seconds: float) -> None:
        _set_rest(self.min_rests, host, seconds, "minimum rest")

    def min_rest(self, host: str) -> float:
        return self.min_rests.get(host, 0.0)

    def set_delay(self, host: str, seconds: float) -> None:
        """An operator's minimum rest after every fetch of ``host`` (0 removes it)."""
        _set_rest(self.delays, host, seconds, "a delay")

    def delay_of(self, host: str) -> float:
        return self.delays.get(host, 0.0)

    def block(self, host: str, until: float, rest_end: float) -> float:
        """Block ``host`` until ``until``; ``rest_end``: its next contact now. Returns the
        next contact the block gives it."""
        if math.isnan(until):
            raise ValueError("a block must end at a time, or at inf")
        old = self.blocks.get(host)
        if old is not None:
            rest_end = old[1]  # the rest it would have had without any block
        self.blocks[host] = (until, rest_end)
        return max(rest_end, until)

    def unblock(self, host: str) -> float | None:
        """End ``host``'s block: the rest end it would have had without it (None: it was
        not blocked)."""
        entry = self.blocks.pop(host, None)
        return None if entry is None else entry[1]

    def blocked_until(self, host: str, now: float) -> float | None:
        """The end of ``host``'s block (inf for none), if it is blocked at ``now``."""
        entry = self.blocks.get(host)
        return None if entry is None or entry[0] <= now else entry[0]

    def blocked(self, now: float) -> int:
        """Hosts blocked at ``now``."""
        return sum(1 for until, _ in self.blocks.values() if until > now)

    def after_completion(self, host: str, next_contact: float, now: float) -> float:
        """The next contact of ``host``, released at ``now`` to rest until ``next_contact``:
        a block still running holds it until the later of its end and the rest (the rest
        is kept beside it, for an unblock); an ended block is forgotten."""
        block = self.blocks.get(host)
        if block is None:
            return next_contact
        if block[0] > now:
            self.blocks[host] = (block[0], next_contact)
            return max(block[0], next_contact)
        del self.blocks[host]
        return next_contact
