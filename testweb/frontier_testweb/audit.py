"""Check a crawl's politeness and completeness from the server's request log.

Why the server-side log is a conservative judge of a client-side rule: the client times a fetch
from sending the request to receiving the whole response, and that interval contains the
server's own [arrival, response handed over] interval. So the client's duration d_c is at least
the server's d_s. A polite client sets the host's next contact to client_end + delay(d_c); since
delay (clamp of factor x d) never decreases with d and client_end >= server_end, the next
request reaches the server no earlier than server_end + delay(d_s). Hence a polite client always
satisfies the rule checked here (up to ``tolerance`` for clock-reading jitter), and a log that
breaks it proves a real politeness violation. The same containment argument shows that one
request at a time per host at the client means no overlapping intervals at the server.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from frontier_testweb.log import LogEntry
from scrapy_frontier.core.politeness import DelayPolicy

ROBOTS_PATH = "/robots.txt"


@dataclass
class AuditReport:
    requests: int
    #: Requests that reached a host while an earlier request to it was still open.
    overlaps: int
    #: Consecutive requests to a host separated by less than the required rest (minus tolerance).
    short_gaps: int
    #: Smallest actual/required gap ratio; >= 1.0 when polite, inf when nothing was constrained.
    worst_gap_ratio: float
    coverage: float
    missing: int
    duplicates: int
    makespan: float
    #: No polite crawl of these fetches can finish faster than the slowest host allows ...
    host_bound: float
    #: ... nor faster than the downloads fit through ``concurrency`` slots.
    concurrency_bound: float
    hosts: int = 0
    errors: int = 0

    def floor(self, impolite_makespan: float | None = None) -> float:
        """The best makespan any crawl of this log's fetches could reach under the same rules."""
        return max(self.host_bound, self.concurrency_bound, impolite_makespan or 0.0)

    @property
    def polite(self) -> bool:
        return self.overlaps == 0 and self.short_gaps == 0

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = asdict(self)
        # JSON has no infinity; None reads as "no constrained gap seen".
        if math.isinf(self.worst_gap_ratio):
            d["worst_gap_ratio"] = None
        d["floor"] = self.floor()
        d["polite"] = self.polite
        return d

    def summary(self) -> str:
        ratio = "n/a" if math.isinf(self.worst_gap_ratio) else f"{self.worst_gap_ratio:.3f}"
        verdict = "POLITE" if self.polite else "IMPOLITE"
        return (
            f"{verdict}: {self.requests} requests to {self.hosts} hosts, "
            f"{self.overlaps} overlaps, {self.short_gaps} short gaps "
            f"(worst gap ratio {ratio}), {self.errors} error responses\n"
            f"coverage {self.coverage:.4f} ({self.missing} missing, "
            f"{self.duplicates} duplicates); makespan {self.makespan:.3f}s, "
            f"floor {self.floor():.3f}s (host {self.host_bound:.3f}s, "
            f"concurrency {self.concurrency_bound:.3f}s)"
        )


def audit(
    entries: Sequence[LogEntry],
    *,
    expected: set[tuple[str, str]] | None = None,
    factor: float = 10.0,
    min_delay: float = 0.0,
    max_delay: float = 60.0,
    concurrency: int = 16,
    tolerance: float = 0.002,
    include_robots: bool = False,
) -> AuditReport:
    """Audit a server log against the rule "next start >= previous end + clamp(factor x d)".

    ``d`` is the server-side duration of the previous request to the same host (see the module
    docstring for why that is conservative). robots.txt fetches are left out unless
    ``include_robots``: Scrapy fetches them outside the scheduler, so the frontier does not
    pace them. Coverage counts expected (host, path) pairs answered with a 2xx/3xx status.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    policy = DelayPolicy(factor=factor, min_delay=min_delay, max_delay=max_delay)
    used = [e for e in entries if include_robots or e.path != ROBOTS_PATH]

    by_host: dict[str, list[LogEntry]] = defaultdict(list)
    for e in used:
        by_host[e.host].append(e)

    overlaps = 0
    short_gaps = 0
    worst = math.inf
    host_bound = 0.0
    for host_entries in by_host.values():
        host_entries.sort(key=lambda e: (e.start, e.end))
        open_until = -math.inf
        span = 0.0
        for i, e in enumerate(host_entries):
            if e.start < open_until:
                overlaps += 1
            open_until = max(open_until, e.end)
            span += e.duration
            if i + 1 < len(host_entries):
                span += policy.delay(e.duration)
            if i == 0:
                continue
            prev = host_entries[i - 1]
            required = policy.delay(prev.duration)
            gap = e.start - prev.end
            if gap < required - tolerance:
                short_gaps += 1
            if required > 0:
                worst = min(worst, gap / required)
            elif gap < 0:
                worst = min(worst, 0.0)
        host_bound = max(host_bound, span)

    counts = Counter((e.host, e.path) for e in used)
    duplicates = sum(c - 1 for c in counts.values())
    if expected is None:
        coverage, missing = 1.0, 0
    else:
        fetched = {(e.host, e.path) for e in used if 200 <= e.status < 400}
        got = len(expected & fetched)
        missing = len(expected) - got
        coverage = got / len(expected) if expected else 1.0

    makespan = max(e.end for e in used) - min(e.start for e in used) if used else 0.0
    return AuditReport(
        requests=len(used),
        overlaps=overlaps,
        short_gaps=short_gaps,
        worst_gap_ratio=worst,
        coverage=coverage,
        missing=missing,
        duplicates=duplicates,
        makespan=makespan,
        host_bound=host_bound,
        concurrency_bound=sum(e.duration for e in used) / concurrency,
        hosts=len(by_host),
        errors=sum(1 for e in used if e.status >= 400),
    )


@dataclass
class RestReport:
    """How the rests a crawl gave compare with what the server's own fetch times required."""

    #: Consecutive requests to one host (each gap between them is a rest).
    rests: int
    #: Rests longer than ``ratio`` x the required rest plus the crawler's own pauses within.
    inflated: int
    #: Host-seconds the inflated rests waited beyond that bound.
    wasted: float
    #: Median of gap / required rest, over rests with a required rest > 0.
    median_ratio: float
    #: The largest excess of a rest over its bound (seconds; <= 0 when none is inflated).
    worst_excess: float = -math.inf

    @property
    def inflated_share(self) -> float:
        return self.inflated / self.rests if self.rests else 0.0

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = asdict(self)
        d["inflated_share"] = self.inflated_share
        return d


def _overlap(spans: Sequence[tuple[float, float]], start: float, end: float) -> float:
    total = 0.0
    for a, b in spans:
        lo, hi = max(a, start), min(b, end)
        if hi > lo:
            total += hi - lo
    return total


def rest_report(
    entries: Sequence[LogEntry],
    *,
    factor: float = 10.0,
    min_delay: float = 0.0,
    max_delay: float = 60.0,
    pauses: Sequence[tuple[float, float]] = (),
    ratio: float = 2.0,
    include_robots: bool = False,
) -> RestReport:
    """Count rests inflated beyond ``ratio`` x what the server's time required, plus pauses.

    The required rest after a request is ``clamp(factor x server duration)``; the crawler's
    own pauses (``pauses``: (start, end) intervals on the same monotonic clock, e.g. a
    callback that blocked) that fall inside a gap are allowed on top: nothing can be sent
    while the crawler is blocked.
    """
    policy = DelayPolicy(factor=factor, min_delay=min_delay, max_delay=max_delay)
    spans = sorted(pauses)
    by_host: dict[str, list[LogEntry]] = defaultdict(list)
    for e in entries:
        if include_robots or e.path != ROBOTS_PATH:
            by_host[e.host].append(e)
    rests = inflated = 0
    wasted = 0.0
    worst = -math.inf
    ratios: list[float] = []
    for host_entries in by_host.values():
        host_entries.sort(key=lambda e: (e.start, e.end))
        for prev, nxt in zip(host_entries, host_entries[1:], strict=False):
            rests += 1
            required = policy.delay(prev.duration)
            gap = nxt.start - prev.end
            if required > 0:
                ratios.append(gap / required)
            bound = ratio * required + _overlap(spans, prev.end, nxt.start)
            worst = max(worst, gap - bound)
            if gap > bound:
                inflated += 1
                wasted += gap - bound
    ratios.sort()
    median = ratios[len(ratios) // 2] if ratios else math.nan
    return RestReport(rests=rests, inflated=inflated, wasted=wasted, median_ratio=median,
                      worst_excess=worst)
