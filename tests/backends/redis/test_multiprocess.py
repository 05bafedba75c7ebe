"""Three worker processes share one RedisFrontier; one is killed with SIGKILL mid-fetch.

Each worker logs, to its own file and flushed line by line, a ``claim`` record
before each simulated fetch and a ``done`` record after completing it, with
Redis server times. Afterwards: every pushed item was completed at least once
(or was the killed worker's last claim, completed just before the kill but not
logged), duplicates are at most the leases the killed worker held (one), no two
fetches of a host overlap, and each fetch of a host starts no earlier than the
next contact the previous completion set (the rest rule).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import redis

from scrapy_frontier.backends.redis.frontier import RedisFrontier
from scrapy_frontier.core import DelayPolicy
from tests.invariants import check_redis_frontier
from tests.redis_server import RedisServer

PREFIX = "mp:frontier:"
LEASE = 0.6
POLICY = DelayPolicy(factor=2.0, min_delay=0.01, max_delay=0.05)
EPS = 2e-6


def make(port: int) -> RedisFrontier:
    return RedisFrontier(redis.Redis(host="127.0.0.1", port=port), PREFIX, front_queues=3,
                         back_queues=4, back_queues_max=6, policy=POLICY, lease_timeout=LEASE)


def worker(port: int, log_path: str, fetch: float, run_for: float, go: Any,
           freeze_at: int = 0, frozen: Any = None) -> None:
    """Claim, log, "fetch" and complete until the frontier is idle.

    Waits for ``go`` first. With ``freeze_at`` N, the N-th claim is logged, ``frozen`` is
    set and the worker sleeps holding that lease until it is killed.
    """
    frontier = make(port)
    if not go.wait(60):
        raise SystemExit("never told to go")
    end = time.monotonic() + run_for
    claims = 0
    with open(log_path, "a", buffering=1) as log:
        while time.monotonic() < end:
            lease = frontier.pop()
            if lease is None:
                if frontier.idle():
                    return
                time.sleep(0.003)
                continue
            log.write(json.dumps({"ev": "claim", "host": lease.host, "item": lease.item.decode(),
                                  "start": lease.handed_at, "deadline": lease.deadline}) + "\n")
            claims += 1
            if claims == freeze_at:
                frozen.set()
                time.sleep(run_for)  # mid-fetch until the test kills this process
            time.sleep(fetch)
            done = frontier.complete(lease, fetch)
            if done is not None:
                log.write(json.dumps({"ev": "done", "host": lease.host,
                                      "item": lease.item.decode(), "start": lease.handed_at,
                                      "end": done.at, "next": done.next_contact}) + "\n")


def read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line cut by the kill
            out.append(json.loads(line))
    return out


def test_three_workers_one_killed(tmp_path: Path) -> None:
    with RedisServer() as server:
        frontier = make(server.port)
        items = {f"u{i}": f"h{i % 8}" for i in range(160)}
        frontier.push_many([(host, 1 + i % 3, item.encode())
                            for i, (item, host) in enumerate(items.items())])
        ctx = mp.get_context("spawn")
        logs = [tmp_path / f"w{i}.log" for i in range(3)]
        # Worker 0 works alone until its 11th claim, which it holds (frozen); then the
        # others start and worker 0 is killed holding that lease.
        alone, together, frozen = ctx.Event(), ctx.Event(), ctx.Event()
        procs = [ctx.Process(target=worker, args=(server.port, str(logs[0]), 0.005, 30.0,
                                                  alone, 11, frozen))]
        procs += [ctx.Process(target=worker, args=(server.port, str(logs[i]), 0.005, 30.0,
                                                   together)) for i in (1, 2)]
        for p in procs:
            p.start()
        try:
            victim = procs[0]
            alone.set()
            assert frozen.wait(60), "worker 0 never reached its 11th claim"
            together.set()
            assert victim.pid is not None
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(10)
            assert read(logs[0])[-1]["ev"] == "claim"
            for p in procs[1:]:
                p.join(40)
                assert p.exitcode == 0, f"worker exit code {p.exitcode}"
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join(5)
        assert frontier.idle()
        check_redis_frontier(frontier)

    records = [r for path in logs for r in read(path)]
    dones = [r for r in records if r["ev"] == "done"]
    victim_recs = read(logs[0])
    last_claim = [r for r in victim_recs if r["ev"] == "claim"][-1]
    victim_done = {r["item"] for r in victim_recs if r["ev"] == "done"}
    # Every item completed at least once; the only possible exception is the item the
    # killed worker claimed last, if it completed it but died before logging.
    completed = Counter(r["item"] for r in dones)
    missing = set(items) - set(completed)
    assert missing <= {last_claim["item"]}, f"lost items: {sorted(missing)}"
    duplicates = sum(n - 1 for n in completed.values())
    assert duplicates <= 1, f"{duplicates} duplicate completions"
    assert last_claim["item"] not in victim_done
    # Per host: fetches never overlap, and each starts after the previous one's rest.
    # The killed fetch occupies [start, deadline]: the host stays leased until expiry.
    spans: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for r in dones:
        spans[r["host"]].append((r["start"], r["end"], r["next"]))
    spans[last_claim["host"]].append(
        (last_claim["start"], last_claim["deadline"], last_claim["deadline"]))
    for host, fetches in spans.items():
        fetches.sort()
        for (s1, e1, next1), (s2, _e2, _n2) in zip(fetches, fetches[1:], strict=False):
            assert s2 >= e1 - EPS, f"{host}: fetch at {s2} overlaps one ending {e1}"
            assert s2 >= next1 - EPS, f"{host}: fetch at {s2} before its rest ended {next1}"
            assert s1 <= s2
    assert len(dones) >= len(items) - 1
