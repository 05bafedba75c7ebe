"""A host of ``workers`` server workers and a FIFO queue, fetched by the connections that
``core/capacity.py`` gives it: a small discrete-event model for tests/core/test_capacity.py.

Each connection sends, waits for its answer, then rests ``DelayPolicy.delay`` of the fetch time
it saw (queueing at the server included), as the core frontier's connections do. The server
starts a fetch when one of its workers is free, else queues it; a fetch takes ``service``
seconds times a seeded jitter (uniform within ``+- jitter``, or log-normal of sigma ``tail``
when given: a long tail) and ``rtt`` is added to what the client sees. Every answer goes
to the probe with its concurrency (the host's fetches in flight at its send, itself included),
its overlap (how many of those were still in flight halfway through it, itself included)
and as strained while ``strained(now)`` (a server answering 429 or 503).

``together=True`` models the wiring the probe asks for: after a rise, the host's connections go
together once (each, once idle, waits for the others; they all go at the latest of their rest
ends, ``spacing`` apart, as the engine takes them one by one). ``together=False`` lets a new
connection go at once and the others keep their own phases.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from scrapy_frontier.core.capacity import Capacities, CapacityRule
from scrapy_frontier.core.politeness import DelayPolicy

HOST = "c.test"


@dataclass
class Conn:
    ready_at: float = 0.0
    busy: bool = False
    retire: bool = False
    token: int = 0  # a scheduled send is stale once the token moved on


@dataclass
class Sent:
    conn: Conn
    at: float
    concurrent: int
    service: float
    others: list[Sent]
    answered: float = float("inf")


@dataclass
class Run:
    """What a run saw: every answer (time, fetch seconds, concurrency) and every change of the
    host's connections (time, connections)."""

    end: float
    idle: float  # the mean fetch time of a fetch that never waits
    answers: list[tuple[float, float, int]] = field(default_factory=list)
    changes: list[tuple[float, int]] = field(default_factory=lambda: [(0.0, 1)])

    def connections_at(self, t: float) -> int:
        k = 1
        for at, n in self.changes:
            if at > t:
                break
            k = n
        return k

    def time_above(self, level: int, start: float = 0.0) -> float:
        """Seconds in [start, end) with more than ``level`` connections."""
        total = 0.0
        bounds = [*self.changes, (self.end, 0)]
        for (at, k), (nxt, _) in itertools.pairwise(bounds):
            lo, hi = max(at, start), min(nxt, self.end)
            if k > level and hi > lo:
                total += hi - lo
        return total

    def mean_connections(self, start: float) -> float:
        total = 0.0
        bounds = [*self.changes, (self.end, 0)]
        for (at, k), (nxt, _) in itertools.pairwise(bounds):
            lo, hi = max(at, start), min(nxt, self.end)
            if hi > lo:
                total += k * (hi - lo)
        return total / (self.end - start)

    def inflation(self, start: float = 0.0) -> float:
        """Mean fetch time of the answers after ``start`` over the idle fetch time, minus 1."""
        times = [f for t, f, _ in self.answers if t >= start]
        return sum(times) / len(times) / self.idle - 1.0

    def rate(self, start: float = 0.0) -> float:
        """Answers per second after ``start``."""
        return sum(1 for t, _, _ in self.answers if t >= start) / (self.end - start)

    def waited(self, start: float = 0.0, by: float = 0.5) -> int:
        """Answers after ``start`` that took more than ``(1 + by)`` x the idle time."""
        return sum(1 for t, f, _ in self.answers if t >= start and f > (1 + by) * self.idle)


class HostModel:
    def __init__(self, workers: int | Callable[[float], int], *, cap: int = 8,
                 service: float = 0.25, jitter: float = 0.03, tail: float = 0.0,
                 rtt: float = 0.002,
                 policy: DelayPolicy | None = None, together: bool = True,
                 spacing: float = 0.001, rule: CapacityRule | None = None,
                 strained: Callable[[float], bool] = lambda _t: False, seed: int = 0) -> None:
        self.workers = workers if callable(workers) else (lambda _t, w=workers: w)
        self.service, self.jitter, self.tail, self.rtt = service, jitter, tail, rtt
        self.policy = policy or DelayPolicy()
        self.together, self.spacing = together, spacing
        self.strained = strained
        self.probe = Capacities(lambda _host: cap, rule)
        self.random = random.Random(seed)
        self.now = 0.0
        self._events: list[tuple[float, int, str, object]] = []
        self._seq = itertools.count()
        self.conns = [Conn()]
        self.gathering = False
        self.in_flight = 0
        self.flying: list[Sent] = []
        self.busy_workers = 0
        self.queue: deque[Sent] = deque()

    def _at(self, t: float, kind: str, data: object) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, data))

    def run(self, seconds: float) -> Run:
        out = Run(end=seconds, idle=self.service + self.rtt)
        self._schedule(self.conns[0])
        while self._events and self._events[0][0] < seconds:
            self.now, _, kind, data = heapq.heappop(self._events)
            if kind == "send":
                conn, token = data  # type: ignore[misc]
                if token == conn.token and not conn.busy and not conn.retire:
                    self._send(conn)
            elif kind == "arrive":
                self._arrive(data)  # type: ignore[arg-type]
            elif kind == "served":
                self._served()
            elif kind == "answer":
                self._answer(data, out)  # type: ignore[arg-type]
        return out

    def _send(self, conn: Conn) -> None:
        conn.busy = True
        self.in_flight += 1
        if self.tail:
            service = self.service * math.exp(self.random.gauss(0.0, self.tail))
        else:
            service = self.service * self.random.uniform(1 - self.jitter, 1 + self.jitter)
        others = [s for s in self.flying]
        sent = Sent(conn, self.now, self.in_flight, service, others)
        self.flying.append(sent)
        self._at(self.now + self.rtt / 2, "arrive", sent)

    def _arrive(self, sent: Sent) -> None:
        if self.busy_workers < self.workers(self.now):
            self._start(sent)
        else:
            self.queue.append(sent)

    def _start(self, sent: Sent) -> None:
        self.busy_workers += 1
        self._at(self.now + sent.service, "served", None)
        # FIFO and the service drawn at the send: the answer leaves when this fetch's own
        # service ends.
        self._at(self.now + sent.service + self.rtt / 2, "answer", sent)

    def _served(self) -> None:
        self.busy_workers -= 1
        if self.queue and self.busy_workers < self.workers(self.now):
            self._start(self.queue.popleft())

    def _answer(self, sent: Sent, out: Run) -> None:
        conn = sent.conn
        fetch = self.now - sent.at
        out.answers.append((self.now, fetch, sent.concurrent))
        conn.busy = False
        self.in_flight -= 1
        self.flying.remove(sent)
        sent.answered = self.now
        halfway = (sent.at + self.now) / 2
        overlapped = 1 + sum(1 for s in sent.others if s.answered > halfway)
        conn.ready_at = self.now + self.policy.delay(fetch)
        before = len([c for c in self.conns if not c.retire])
        change = self.probe.observe(HOST, fetch, concurrent=sent.concurrent,
                                    overlapped=overlapped,
                                    strained=self.strained(self.now),
                                    now=self.now)
        if conn.retire:
            self.conns.remove(conn)
        gathered = False
        if change is not None:
            out.changes.append((self.now, change))
            gathered = change > before and self.together
            self._resize(change, rise=change > before)
        if conn in self.conns and not gathered:
            self._schedule(conn)

    def _resize(self, k: int, *, rise: bool) -> None:
        live = [c for c in self.conns if not c.retire]
        for _ in range(k - len(live)):
            self.conns.append(Conn(ready_at=self.now))
        for c in sorted(live, key=lambda c: c.busy)[:max(0, len(live) - k)]:
            if c.busy:
                c.retire = True
            else:
                c.token += 1
                self.conns.remove(c)
        if rise and self.together:
            self.gathering = True
            for c in self.conns:
                c.token += 1
            self._release()
        elif rise:
            for c in self.conns:
                if not c.busy and c.ready_at == self.now:
                    self._schedule(c)

    def _schedule(self, conn: Conn) -> None:
        if self.gathering:
            self._release()
            return
        conn.token += 1
        self._at(max(conn.ready_at, self.now), "send", (conn, conn.token))

    def _release(self) -> None:
        """Gathering: once every connection is idle, all go at the latest rest end."""
        if any(c.busy for c in self.conns):
            return
        self.gathering = False
        start = max([self.now, *(c.ready_at for c in self.conns)])
        for i, c in enumerate(self.conns):
            c.token += 1
            self._at(start + i * self.spacing, "send", (c, c.token))
