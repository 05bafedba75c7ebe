"""What site owners ask for, as arithmetic: Retry-After, back-off, robots.txt delays.

Pure functions; the scheduler's :mod:`scrapy_frontier.scheduler.site_rules`
applies them to responses, exceptions and parsed robots.txt files.
"""

from __future__ import annotations

import logging
import math
import re
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Any

logger = logging.getLogger("scrapy_frontier.site_rules")

# ASCII digits only: str.isdigit() also accepts superscripts and other scripts' digits,
# which float() then refuses. Any number of them: a huge delay is a delay (the caller
# clamps it to FRONTIER_MAX_RETRY_AFTER), not an unreadable header.
_DELAY_SECONDS = re.compile(r"[0-9]+")


def parse_retry_after(value: bytes | str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP date).

    ``now`` is the wall-clock time (``time.time()``) for dates. None if the
    header is missing or cannot be parsed (it is then treated as absent); a
    date in the past gives 0; too many digits for a float give ``math.inf``.
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if not text:
        return None
    if _DELAY_SECONDS.fullmatch(text):
        return float(text)
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:  # "-0000": UTC by RFC 5322
            when = when.replace(tzinfo=timezone.utc)
        wait = when.timestamp() - now
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None
    return max(0.0, wait) if math.isfinite(wait) else None


def backoff(base: float, cap: float, failures: int) -> float:
    """The rest after ``failures`` consecutive failures: base, doubling, capped."""
    # 2 ** 60 x any sensible base is far beyond any cap: no overflow.
    return min(cap, base * 2.0 ** min(max(failures, 1) - 1, 60))


def robots_delay(robotparser: Any, agent: str) -> float | None:
    """The longest of robots.txt Crawl-delay and Request-rate (as seconds per
    request) for ``agent``; None if neither is set or usable.

    Request-rate is read only from Protego (Scrapy's default parser), which
    exposes it; its optional time-of-day window is ignored (always applied).
    An infinite or huge delay is returned as ``math.inf``: the caller caps it.
    """
    delays: list[float] = []
    crawl_delay = getattr(robotparser, "crawl_delay", None)
    if crawl_delay is not None:
        try:
            value = crawl_delay(agent)
        except Exception:  # noqa: BLE001 -- a third-party parser must not stop the crawl
            logger.debug("crawl_delay() failed in %r", robotparser, exc_info=True)
            value = None
        seconds = _seconds(value)
        if seconds is not None:
            delays.append(seconds)
    request_rate = getattr(getattr(robotparser, "rp", None), "request_rate", None)
    if callable(request_rate):
        try:
            rate = request_rate(agent)
        except Exception:  # noqa: BLE001
            rate = None
        requests = getattr(rate, "requests", None)
        seconds = _seconds(getattr(rate, "seconds", None))
        if isinstance(requests, int) and requests > 0 and seconds is not None:
            delays.append(seconds / requests if math.isfinite(seconds) else math.inf)
    return max(delays) if delays else None


def _seconds(value: Any) -> float | None:
    """A non-negative number of seconds, ``inf`` for one too large for a float, else None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return math.inf  # an integer of hundreds of digits: "forever"
    except (TypeError, ValueError):
        return None
    if math.isnan(seconds) or seconds < 0:
        return None
    return seconds
