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

A host of k connections (``connections``): the client has at most k requests to it in flight,
and each connection, after a fetch of duration d ending at e, sends its next request no earlier
than e + delay(d). Containment again: at most k client intervals are open at any moment, and
each server interval lies inside its client interval, so at most k server intervals are open at
once; only a request that arrives while k others are open counts as an overlap. On a host with
server workers the server's duration runs from arrival, queueing included, to the end: it is
still inside the client's, so the argument holds unchanged (and the client, which waits
through the queue too, rests longer for it).

The server does not see which client connection sent a request, so the gaps are judged by
feasibility: the host's requests, in start order, go to k virtual connections, each to the one
whose rest (end + delay(duration) of its last request) ends first, an unused connection first
of all. The request is polite if that rest ended by its start (up to ``tolerance``), and a
short gap otherwise. This never flags a polite client. By containment, the client's real
assignment of these requests to its connections, with the server's ends and durations, is
polite: each request starts after the rest of the one before it on its connection. Compare
the two assignments, request by request, by counting for every time t from the current start
on how many connections have rested by t. Before the first request both have k (all unused).
If the virtual count is at least the real one for every such t, then at the current request
(start s) the real connection that sends it has rested by s, so the virtual count at s is at
least 1 and the virtual connections have a rested one too; the earliest rest is among them.
Both assignments then replace a connection rested by s with the same new rest end, so every
count for t >= s changes by the same amount, and the next request starts no earlier than s.
Hence the virtual assignment finds a rested connection wherever the real one does: no short
gap. With k = 1 this is the single-connection rule above, each request against the one before.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from frontier_testweb.log import LogEntry

if TYPE_CHECKING:
    from scrapy_frontier.core.politeness import DelayPolicy

ROBOTS_PATH = "/robots.txt"

#: How many connections each host may use: one number for all, a mapping (hosts it leaves out
#: use one) or a function of the host (the log's host address, which is the frontier's host
#: key for the test web's IP URLs); None: one each.
Connections: TypeAlias = int | Mapping[str, int] | Callable[[str], int] | None


def _policy(factor: float, min_delay: float, max_delay: float) -> DelayPolicy:
    """The frontier's delay rule. Imported here: importing scrapy_frontier imports Scrapy,
    which the test web's server process (``python -m frontier_testweb serve``) never needs."""
    from scrapy_frontier.core.politeness import DelayPolicy

    return DelayPolicy(factor=factor, min_delay=min_delay, max_delay=max_delay)


def connections_of(connections: Connections) -> Callable[[str], int]:
    """``connections`` as a function of the host."""
    if connections is None:
        return lambda host: 1
    if isinstance(connections, int):
        every = connections
        return lambda host: every
    if isinstance(connections, Mapping):
        table = connections
        return lambda host: table.get(host, 1)
    return connections


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
    #: Host -> the most of its requests the server had open at once.
    max_in_flight: dict[str, int] = field(default_factory=dict)

    @property
    def most_in_flight(self) -> int:
        """The most requests one host had open at once (0 without requests)."""
        return max(self.max_in_flight.values(), default=0)

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
        d["most_in_flight"] = self.most_in_flight
        return d

    def summary(self) -> str:
        ratio = "n/a" if math.isinf(self.worst_gap_ratio) else f"{self.worst_gap_ratio:.3f}"
        verdict = "POLITE" if self.polite else "IMPOLITE"
        return (
            f"{verdict}: {self.requests} requests to {self.hosts} hosts, "
            f"{self.overlaps} overlaps, {self.short_gaps} short gaps "
            f"(worst gap ratio {ratio}), at most {self.most_in_flight} in flight at a host, "
            f"{self.errors} error responses\n"
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
    connections: Connections = None,
) -> AuditReport:
    """Audit a server log against the rule "next start >= previous end + clamp(factor x d)".

    ``d`` is the server-side duration of the previous request to the same host (see the module
    docstring for why that is conservative). robots.txt fetches are left out unless
    ``include_robots``: Scrapy fetches them outside the scheduler, so the frontier does not
    pace them. Coverage counts expected (host, path) pairs answered with a 2xx/3xx status.

    ``connections`` gives each host its k (see :data:`Connections`; default one each): a host
    may have k requests in flight, and the rule holds per connection, judged as the module
    docstring says.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    policy = _policy(factor, min_delay, max_delay)
    conns = connections_of(connections)
    used = [e for e in entries if include_robots or e.path != ROBOTS_PATH]

    by_host: dict[str, list[LogEntry]] = defaultdict(list)
    for e in used:
        by_host[e.host].append(e)

    overlaps = 0
    short_gaps = 0
    worst = math.inf
    host_bound = 0.0
    max_in_flight: dict[str, int] = {}
    for host, host_entries in by_host.items():
        k = conns(host)
        if k < 1:
            raise ValueError(f"connections must be >= 1, got {k} for {host}")
        host_entries.sort(key=lambda e: (e.start, e.end))
        flight = _in_flight(host_entries, k)
        overlaps += flight.overlaps
        max_in_flight[host] = flight.most
        gaps = _gaps(host_entries, k, policy, tolerance)
        short_gaps += gaps.short
        worst = min(worst, gaps.worst)
        host_bound = max(host_bound, gaps.span)

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
        max_in_flight=max_in_flight,
    )


@dataclass
class _InFlight:
    #: Requests that arrived while k others to the host were open.
    overlaps: int
    #: The most requests open at once.
    most: int


def _in_flight(entries: Sequence[LogEntry], k: int) -> _InFlight:
    """Sweep one host's requests (in (start, end) order) over time; a request that ends when
    another arrives does not overlap it."""
    open_ends: list[float] = []  # heap of the ends of the requests still open
    overlaps = most = 0
    for e in entries:
        while open_ends and open_ends[0] <= e.start:
            heapq.heappop(open_ends)
        if len(open_ends) >= k:
            overlaps += 1
        heapq.heappush(open_ends, e.end)
        most = max(most, len(open_ends))
    return _InFlight(overlaps, most)


@dataclass
class _Gaps:
    #: Requests that found no connection rested (less tolerance).
    short: int
    #: Smallest gap / required rest on the connection each request took; inf if none.
    worst: float
    #: The host's fetches and the rests between them, per connection (see :func:`_gaps`).
    span: float


def _gaps(entries: Sequence[LogEntry], k: int, policy: DelayPolicy, tolerance: float) -> _Gaps:
    """Give one host's requests (in (start, end) order) to k virtual connections, each to the
    one whose rest ends first, and judge each request's gap on it (module docstring).

    ``span``: the host's fetch times plus the rests after every request but the last of each
    connection, divided by k, and at least the longest fetch: no polite crawl over k
    connections fetches this host faster (with k = 1 it is the sum along the log's order).
    """
    # (rest end, connection, index of its last request or -1); an unused one rests until -inf.
    idle: list[tuple[float, int, int]] = [(-math.inf, c, -1) for c in range(k)]
    followed = [False] * len(entries)  # a later request on its connection waited out its rest
    short = 0
    worst = math.inf
    for i, e in enumerate(entries):
        _, c, last = heapq.heappop(idle)
        if last >= 0:
            prev = entries[last]
            followed[last] = True
            required = policy.delay(prev.duration)
            gap = e.start - prev.end
            if gap < required - tolerance:
                short += 1
            if required > 0:
                worst = min(worst, gap / required)
            elif gap < 0:
                worst = min(worst, 0.0)
        heapq.heappush(idle, (e.end + policy.delay(e.duration), c, i))
    span = 0.0
    longest = 0.0
    for e, rested in zip(entries, followed, strict=True):
        span += e.duration
        longest = max(longest, e.duration)
        if rested:
            span += policy.delay(e.duration)
    return _Gaps(short, worst, max(span / k, longest))


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
    policy = _policy(factor, min_delay, max_delay)
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
