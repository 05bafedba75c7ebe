"""How long a host rests after a fetch."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The defaults of FRONTIER_DELAY_FACTOR, FRONTIER_MIN_DELAY and FRONTIER_MAX_DELAY.
DEFAULT_FACTOR = 10.0
DEFAULT_MIN_DELAY = 1.0
DEFAULT_MAX_DELAY = 60.0


@dataclass(frozen=True, slots=True)
class DelayPolicy:
    """Next contact = end of fetch + clamp(factor x fetch time, min_delay, max_delay).

    Mercator's rule of thumb is factor 10: a host is then busy with us at most
    about 1/11 of the time, however fast or slow it answers.
    """

    factor: float = DEFAULT_FACTOR
    min_delay: float = DEFAULT_MIN_DELAY
    max_delay: float = DEFAULT_MAX_DELAY

    def __post_init__(self) -> None:
        for name in ("factor", "min_delay", "max_delay"):
            if math.isnan(getattr(self, name)):
                raise ValueError(f"{name} must be a number, got NaN")
        if self.factor < 0:
            raise ValueError(f"delay factor must be >= 0, got {self.factor}")
        if self.min_delay < 0:
            raise ValueError(f"min delay must be >= 0, got {self.min_delay}")
        if self.max_delay < self.min_delay:
            raise ValueError(
                f"max delay ({self.max_delay}) must be >= min delay ({self.min_delay})"
            )

    def delay(self, fetch_seconds: float) -> float:
        """The rest a host gets after a fetch that took ``fetch_seconds``."""
        # Comparisons, not min/max calls: this runs once per fetch. A NaN fetch time
        # counts as 0, and a NaN product (0 x inf) as the minimum.
        wanted = self.factor * fetch_seconds if fetch_seconds > 0.0 else 0.0
        if not wanted >= self.min_delay:
            return self.min_delay
        return self.max_delay if wanted > self.max_delay else wanted

    def next_contact(self, finished_at: float, fetch_seconds: float) -> float:
        return finished_at + self.delay(fetch_seconds)


def rest_after_fetch(delay: float, ended_ago: float, min_rest: float, at_least: float,
                     operator_delay: float) -> float:
    """The rest a host gets after a fetch, counted from now.

    ``delay`` is the policy's rest (:meth:`DelayPolicy.delay`), which counts from the
    answer's end, ``ended_ago`` seconds back (never a negative rest); the host's floors
    then raise it: its robots.txt minimum rest, the rest the outcome asks for (Retry-After,
    back-off) and an operator's ``scrapy frontier delay``. Every floor is a maximum, so
    the floors may be applied in any order, or some later (see :func:`rest_before_floors`).
    """
    rest = delay
    if ended_ago > 0.0:  # (NaN is not > 0)
        rest = rest - ended_ago if rest > ended_ago else 0.0
    if min_rest > rest:
        rest = min_rest
    if at_least > rest:
        rest = at_least
    if operator_delay > rest:
        rest = operator_delay
    return rest


def rest_before_floors(policy: DelayPolicy, fetch_seconds: float, ended_ago: float = 0.0,
                       at_least: float = 0.0) -> float:
    """:func:`rest_after_fetch` without the host's stored floors (robots.txt's minimum rest,
    an operator's delay): what the Redis frontier computes for a completion and sends its
    scripts, which raise it to those floors, kept in Redis for every worker
    (``max(rest, floors)`` is then the whole of :func:`rest_after_fetch`)."""
    return rest_after_fetch(policy.delay(fetch_seconds), ended_ago, 0.0, at_least, 0.0)


#: The fields a crawl's state keeps of its delay rule, so that ``scrapy frontier hosts`` shows
#: the rests the crawl gives, not those of the command's own settings.
_SAVED_FIELDS = (("delay_factor", "factor"), ("min_delay", "min_delay"),
                 ("max_delay", "max_delay"))


def saved_delay_rule(policy: DelayPolicy) -> dict[str, str]:
    return {key: repr(float(getattr(policy, name))) for key, name in _SAVED_FIELDS}


def delay_rule_from(saved: dict[str, str], default: DelayPolicy) -> DelayPolicy:
    """The rule a state saved with :func:`saved_delay_rule`; ``default`` where it saved none
    (a store opened outside a crawl, or a crawl stopped before it saved it) or something
    unreadable."""
    try:
        values = {name: float(saved[key]) for key, name in _SAVED_FIELDS}
        return DelayPolicy(**values)
    except (KeyError, ValueError):
        return default
