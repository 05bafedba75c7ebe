"""Hosts with c server workers, and the auditor's k connections per host."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from frontier_testweb import (
    HostSpec,
    LogEntry,
    ServerProcess,
    TestWebServer,
    WebSpec,
    audit,
    read_log,
    skewed_web,
)
from frontier_testweb.audit import Connections

A, B = "127.0.1.1", "127.0.1.2"
#: In-process servers of this file listen here (other test files use other 127.0.x ranges).
C1, C2 = "127.0.202.1", "127.0.202.2"


def e(host: str, path: str, start: float, end: float, status: int = 200) -> LogEntry:
    return LogEntry(host=host, path=path, start=start, end=end, status=status)


# -- the spec and the log ----------------------------------------------------------------------


def test_workers_are_validated_and_set_on_every_host() -> None:
    assert HostSpec(C1, 1, 0.0).workers is None
    assert HostSpec(C1, 1, 0.0, workers=1).workers == 1
    for bad in (0, -1):
        with pytest.raises(ValueError):
            HostSpec(C1, 1, 0.0, workers=bad)
    spec = skewed_web(hosts=3, largest=4)
    two = spec.with_workers(2)
    assert [h.workers for h in two.hosts] == [2, 2, 2]
    assert [h.address for h in two.hosts] == [h.address for h in spec.hosts]
    assert (two.seed, two.cross_links) == (spec.seed, spec.cross_links)
    assert two.with_workers(None) == spec


def test_log_entry_service_and_queueing_times() -> None:
    plain = e(A, "/p/0", 1.0, 1.5)
    assert plain.begin is None
    assert (plain.service_begin, plain.service, plain.queued) == (1.0, 0.5, 0.0)
    assert "begin" not in json.loads(plain.to_json())  # lines as hosts without workers wrote
    waited = LogEntry(A, "/p/0", 1.0, 1.75, 200, begin=1.25)
    assert waited.duration == pytest.approx(0.75)
    assert waited.service == pytest.approx(0.5) and waited.queued == pytest.approx(0.25)
    assert LogEntry.from_dict(json.loads(waited.to_json())) == waited
    assert LogEntry.from_dict(json.loads(plain.to_json())) == plain


# -- the auditor with k connections --------------------------------------------------------------

ONE: list[Connections] = [None, 1, {A: 1}, {}, lambda host: 1]

#: Logs of the single-connection tests: overlaps, nesting, short gaps, clamps, two hosts.
SINGLE_CASES = [
    [e(A, "/p/0", 0.0, 0.1), e(A, "/p/1", 1.1, 1.3), e(A, "/p/2", 3.3, 3.4)],
    [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 0.5, 0.6), e(B, "/p/0", 0.2, 0.3)],
    [e(A, "/a", 0.0, 1.0), e(A, "/b", 0.1, 0.2), e(A, "/c", 0.5, 0.6)],
    [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 1.0, 2.0)],
    [e(A, "/p/0", 0.0, 0.1), e(A, "/p/1", 1.09, 1.2)],
    [e(A, "/p/0", 0.0, 0.01), e(A, "/p/1", 0.31, 0.32)],
    [e(A, "/p/0", 0.0, 2.0), e(A, "/p/1", 5.0, 6.0), e(B, "/p/0", 5.0, 5.25)],
    [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 11.0, 13.0), e(A, "/p/2", 33.0, 33.5),
     e(B, "/p/0", 5.0, 5.25), e(B, "/p/1", 5.0, 5.0), e(B, "/p/2", 5.0, 6.0)],
]


@pytest.mark.parametrize("log", SINGLE_CASES)
@pytest.mark.parametrize("factor", [0.0, 10.0])
def test_one_connection_is_the_single_connection_audit(log: list[LogEntry], factor: float) -> None:
    default = audit(log, factor=factor, max_delay=15)
    for connections in ONE:
        again = audit(log, factor=factor, max_delay=15, connections=connections)
        assert again == default
    # The counts the single-connection rule gives, computed here from scratch.
    for host in {x.host for x in log}:
        mine = sorted((x for x in log if x.host == host), key=lambda x: (x.start, x.end))
        one = audit(mine, factor=factor, max_delay=15)
        overlaps = sum(
            1 for i, x in enumerate(mine) if any(p.end > x.start for p in mine[:i])
        )
        short = sum(
            1 for p, x in zip(mine, mine[1:], strict=False)
            if x.start - p.end < min(factor * p.duration, 15) - 0.002
        )
        assert (one.overlaps, one.short_gaps) == (overlaps, short)


def test_two_connections_polite_log_passes() -> None:
    # Two connections, each resting 10 x its fetch; the host has two in flight at once.
    log = [
        e(A, "/p/0", 0.0, 0.1),  # connection 1, rests until 1.1
        e(A, "/p/1", 0.05, 0.15),  # connection 2, rests until 1.15
        e(A, "/p/2", 1.1, 1.2),  # connection 1
        e(A, "/p/3", 1.15, 1.35),  # connection 2
    ]
    r = audit(log, factor=10, connections=2)
    assert (r.overlaps, r.short_gaps) == (0, 0) and r.polite
    assert r.max_in_flight == {A: 2} and r.most_in_flight == 2
    assert r.worst_gap_ratio == pytest.approx(1.0)
    # One connection cannot have sent this.
    one = audit(log, factor=10)
    assert one.overlaps == 2 and one.short_gaps == 3 and not one.polite
    assert one.max_in_flight == {A: 2}


def test_three_in_flight_on_two_connections_is_an_overlap() -> None:
    log = [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 0.1, 1.1), e(A, "/p/2", 0.2, 1.2)]
    r = audit(log, factor=0, connections=2)
    assert r.overlaps == 1 and r.max_in_flight == {A: 3} and not r.polite
    assert r.short_gaps == 1  # the third request also finds no connection free
    assert audit(log, factor=0, connections=3).polite
    # Back to back is not in flight together: the third starts as the first ends.
    chained = [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 0.1, 1.1), e(A, "/p/2", 1.0, 1.2)]
    r = audit(chained, factor=0, connections=2)
    assert (r.overlaps, r.short_gaps, r.max_in_flight[A]) == (0, 0, 2)


def test_short_gap_on_a_connection_is_detected() -> None:
    # Both connections fetch at once; a third request 0.4 s after they end, where each needs
    # 1.0 of rest: no connection is rested.
    log = [e(A, "/p/0", 0.0, 0.1), e(A, "/p/1", 0.0, 0.1), e(A, "/p/2", 0.5, 0.6)]
    r = audit(log, factor=10, connections=2)
    assert (r.overlaps, r.short_gaps) == (0, 1)
    assert r.worst_gap_ratio == pytest.approx(0.4)
    assert audit(log, factor=10, connections=3).polite  # a third, unused connection may go
    rested = [*log[:2], e(A, "/p/2", 1.1, 1.2)]
    assert audit(rested, factor=10, connections=2).polite


def test_the_connection_whose_rest_ends_first_takes_the_request() -> None:
    # Connection 1 ends first but rests 10 s; connection 2 ends later and rests 2 s. The third
    # request is polite on connection 2 only (the one that has been free longest is not rested).
    log = [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 0.9, 1.1), e(A, "/p/2", 3.1, 3.2)]
    r = audit(log, factor=10, connections=2)
    assert r.polite and r.worst_gap_ratio == pytest.approx(1.0)
    # Connection 2 now rests until 4.2, connection 1 still until 11.
    soon = audit([*log, e(A, "/p/3", 3.5, 3.6)], factor=10, connections=2)
    assert soon.short_gaps == 1 and soon.worst_gap_ratio == pytest.approx(0.3)
    assert audit([*log, e(A, "/p/3", 4.2, 4.3)], factor=10, connections=2).polite


def test_connections_per_host() -> None:
    log = [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 0.5, 1.5), e(B, "/p/0", 0.0, 1.0),
           e(B, "/p/1", 0.5, 1.5)]
    for connections in ({A: 2}, lambda host: 2 if host == A else 1):
        r = audit(log, factor=0, connections=connections)
        assert (r.overlaps, r.short_gaps) == (1, 1)  # B only
        assert r.max_in_flight == {A: 2, B: 2}
    assert audit(log, factor=0, connections=2).polite
    for bad in (0, {A: 0}, lambda host: -1):
        with pytest.raises(ValueError):
            audit(log, connections=bad)


def test_host_bound_shares_the_rests_among_connections() -> None:
    # Four fetches of 1 s, factor 1: two connections each fetch twice and rest once between.
    log = [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 0.0, 1.0), e(A, "/p/2", 2.0, 3.0),
           e(A, "/p/3", 2.0, 3.0)]
    r = audit(log, factor=1, connections=2, concurrency=4)
    assert r.polite
    assert r.host_bound == pytest.approx((4 * 1.0 + 2 * 1.0) / 2)
    assert r.makespan == pytest.approx(3.0)
    # More connections than requests: the longest fetch bounds the host.
    assert audit(log[:2], factor=1, connections=4).host_bound == pytest.approx(1.0)


def _polite_client_log(rng: random.Random, k: int, requests: int) -> list[LogEntry]:
    """A client of k connections that keeps the rule with its own times; the server's
    intervals lie inside the client's (sending and receiving take a while)."""
    ready = [0.0] * k
    log = []
    for i in range(requests):
        c = rng.randrange(k)
        sent = ready[c] + rng.choice([0.0, 0.0, rng.uniform(0, 0.3)])
        arrival = sent + rng.uniform(0, 0.01)
        end = arrival + rng.choice([0.0, rng.uniform(0, 0.2)])
        received = end + rng.uniform(0, 0.01)
        ready[c] = received + min(10 * (received - sent), 0.5)
        log.append(e(A, f"/p/{i}", arrival, end))
    return log


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_a_polite_client_always_passes(k: int) -> None:
    rng = random.Random(k)
    for _ in range(200):
        log = _polite_client_log(rng, k, rng.randrange(1, 40))
        rng.shuffle(log)  # the log's order is not the auditor's
        r = audit(log, factor=10, max_delay=0.5, connections=k, tolerance=0.0)
        assert (r.overlaps, r.short_gaps) == (0, 0), log
        assert 1 <= r.max_in_flight[A] <= k


def test_report_output_with_connections() -> None:
    log = [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 0.1, 1.1), e(B, "/p/0", 0.0, 1.0)]
    r = audit(log, factor=0, connections=2)
    d = json.loads(json.dumps(r.as_dict()))
    assert d["max_in_flight"] == {A: 2, B: 1} and d["most_in_flight"] == 2
    assert d["polite"] is True
    assert "at most 2 in flight at a host" in r.summary()
    assert "at most 0 in flight" in audit([]).summary()


def test_cli_audit_with_connections(tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    log = [e(A, "/p/0", 0.0, 0.1), e(A, "/p/1", 0.05, 0.15)]
    log_path.write_text("".join(x.to_json() + "\n" for x in log))
    cmd = [sys.executable, "-m", "frontier_testweb", "audit", str(log_path), "--json"]
    one = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    two = subprocess.run(cmd + ["--connections", "2"], capture_output=True, text=True, timeout=60)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert json.loads(one.stdout)["overlaps"] == 1
    assert json.loads(two.stdout)["polite"] is True
    assert json.loads(two.stdout)["max_in_flight"] == {A: 2}


# -- hosts with workers, in this process (inside pytest-twisted's running reactor) --------------


def _agent() -> Any:
    from twisted.internet import reactor
    from twisted.web.client import Agent, HTTPConnectionPool

    # One connection per request: every request is in flight on its own connection.
    return Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False))


def _sleep(seconds: float) -> Any:
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    return deferLater(reactor, seconds, lambda: None)


def _fetch(agent: Any, url: str) -> Any:
    from twisted.web.client import readBody

    d = agent.request(b"GET", url.encode())
    d.addCallback(lambda response: readBody(response).addCallback(lambda _: response.code))
    return d


def _server(workers: int | None, latency: float) -> TestWebServer:
    spec = WebSpec(hosts=(HostSpec(C1, 4, latency, workers=workers),
                          HostSpec(C2, 4, latency)), seed=1, cross_links=0)
    server = TestWebServer(spec)
    server.start()
    return server


def _url(server: TestWebServer, address: str, page: int) -> str:
    return f"http://{address}:{server.port_of[address]}/p/{page}"


@pytest.mark.filterwarnings("ignore:Using readBody:DeprecationWarning")
@pytest_twisted.inlineCallbacks
def test_the_c_plus_first_request_waits_for_a_worker() -> Any:
    latency = 0.2
    server = _server(workers=2, latency=latency)
    try:
        agent = _agent()
        # Three at once to the host of two workers, three at once to the host without.
        fetches = [_fetch(agent, _url(server, C1, i)) for i in range(3)]
        fetches += [_fetch(agent, _url(server, C2, i)) for i in range(3)]
        for d in fetches:
            code = yield d
            assert code == 200
    finally:
        yield server.stop()
    queued = sorted((x for x in server.log if x.host == C1), key=lambda x: x.start)
    assert len(queued) == 3 and all(x.begin is not None for x in queued)
    first, second, third = queued
    for x in (first, second):
        assert x.queued < latency / 2  # served on arrival
    # The third begins only once one of the first two has ended, and is then served in full.
    assert third.service_begin >= min(first.end, second.end)
    assert third.queued >= latency / 2
    assert all(x.service >= latency for x in queued)
    assert third.duration >= latency + third.queued - 1e-9
    r = audit(queued, factor=0, connections=2)
    assert r.max_in_flight[C1] == 3 and r.overlaps == 1  # arrival to end: three in flight
    # Without workers nothing waits and the log is as before.
    plain = [x for x in server.log if x.host == C2]
    assert len(plain) == 3 and all(x.begin is None and x.queued == 0.0 for x in plain)
    assert all(x.duration >= latency for x in plain)


@pytest.mark.filterwarnings("ignore:Using readBody:DeprecationWarning")
@pytest_twisted.inlineCallbacks
def test_one_worker_serves_in_arrival_order() -> Any:
    latency = 0.1
    server = _server(workers=1, latency=latency)
    try:
        agent = _agent()
        fetches = []
        for i in range(4):
            fetches.append(_fetch(agent, _url(server, C1, i)))
            yield _sleep(0.02)  # arrivals 20 ms apart, all while the first is in service
        for d in fetches:
            code = yield d
            assert code == 200
    finally:
        yield server.stop()
    by_arrival = sorted(server.log, key=lambda x: x.start)
    assert [x.path for x in by_arrival] == [f"/p/{i}" for i in range(4)]
    for prev, nxt in zip(by_arrival, by_arrival[1:], strict=False):
        assert nxt.service_begin >= prev.end  # one at a time, first come first served
        assert nxt.service_begin - prev.end < latency / 2  # and without idling in between
    assert audit(server.log, factor=0).max_in_flight == {C1: 4}


@pytest.mark.filterwarnings("ignore:Using readBody:DeprecationWarning")
@pytest_twisted.inlineCallbacks
def test_a_client_that_leaves_gives_up_its_place_or_its_worker() -> Any:
    latency = 0.3
    server = _server(workers=1, latency=latency)
    try:
        agent = _agent()
        served = _fetch(agent, _url(server, C1, 0))
        yield _sleep(0.02)
        leaving = _fetch(agent, _url(server, C1, 1))
        yield _sleep(0.02)
        waiting = _fetch(agent, _url(server, C1, 2))
        yield _sleep(0.05)
        leaving.cancel()  # while it waits for the worker
        leaving.addErrback(lambda failure: None)
        code = yield served
        assert code == 200
        code = yield waiting
        assert code == 200
        # Leaving in service frees the worker for the next one at once.
        cut = _fetch(agent, _url(server, C1, 3))
        yield _sleep(0.02)
        after = _fetch(agent, _url(server, C1, 0))
        yield _sleep(0.05)
        cut.cancel()
        cut.addErrback(lambda failure: None)
        code = yield after
        assert code == 200
        # Every worker was given back: the next request is served on arrival.
        from twisted.internet import reactor

        code = yield _fetch(agent, _url(server, C1, 2)).addTimeout(5, reactor)
        assert code == 200
    finally:
        yield server.stop()
    log = {x.path: x for x in server.log}
    gone = log["/p/1"]
    assert gone.status == 499 and gone.begin is not None and gone.service == 0.0
    assert gone.end < log["/p/0"].end  # logged when it left, never served
    assert log["/p/2"].service_begin - log["/p/0"].end < latency / 2  # /p/1 did not hold it
    cut_entry = log["/p/3"]
    assert cut_entry.status == 499 and 0.0 < cut_entry.service < latency
    again = [x for x in server.log if x.path == "/p/0"][-1]
    assert again.service_begin >= cut_entry.end
    assert again.service_begin - cut_entry.end < latency / 2
    last = max(server.log, key=lambda x: x.start)
    assert last.path == "/p/2" and last.status == 200 and last.queued < latency / 2


# -- hosts with workers, in a child process ------------------------------------------------------


def test_serve_with_workers(tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    args = ["--shape", "wide", "--hosts", "2", "--pages", "3", "--latency", "0.2", "0.2",
            "--workers", "1"]
    with ServerProcess(args, log_path=str(log_path)) as web:
        assert [h["workers"] for h in web.info["hosts"]] == [1, 1]
        url = web.start_urls[0]
        errors: list[BaseException] = []

        def get() -> None:
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    response.read()
            except BaseException as exc:  # noqa: BLE001 (reported by the test thread)
                errors.append(exc)

        threads = [threading.Thread(target=get) for _ in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.02)
        for t in threads:
            t.join(timeout=10)
        assert not errors
    entries = sorted(read_log(log_path), key=lambda x: x.start)
    assert len(entries) == 2 and all(x.begin is not None for x in entries)
    assert entries[1].service_begin >= entries[0].end
    assert entries[1].queued >= 0.1
    plain = ServerProcess(["--shape", "wide", "--hosts", "1", "--pages", "1"])
    with plain:
        assert "workers" not in plain.info["hosts"][0]
