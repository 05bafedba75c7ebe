"""RedisFrontier throughput, Redis commands per URL and bytes per queued URL.

A private redis-server on 127.0.0.1 (free port, no persistence). Everything is
bounded in time: each run lasts ``--seconds`` (default 2) or until the queue drains.

* **claims/s and completes/s** with 1, 2, 4, 8 worker processes, each running
  claim -> simulated fetch (sleep 0 or 20 ms) -> complete in a loop. The delay
  policy is 0 (no rest) so the frontier's own cost, not politeness, is measured;
  URLs spread over enough hosts that the one-lease-per-host rule never starves a
  worker. With 20 ms fetches the ideal is workers x 50/s.
* **commands per URL**: ``INFO commandstats`` deltas over push + claim + complete of
  M URLs (one process): client round trips (EVALSHA) and every command run, the
  ones inside the Lua scripts included.
* **bytes per queued URL**: ``used_memory`` delta / M for M queued URLs with
  ~70-byte items, waiting in front queues (few back queues) and in back queues
  (every host active); the overhead is the delta minus the item's own length.

    python benchmarks/bench_redis_claims.py             # full (about 1 minute)
    python benchmarks/bench_redis_claims.py --quick     # shorter runs, 1 and 2 workers

Writes ``benchmarks/results/redis_claims.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from scrapy_frontier.backends.redis.frontier import RedisFrontier  # noqa: E402
from scrapy_frontier.core import DelayPolicy  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PREFIX = "bench:frontier:"
NO_REST = DelayPolicy(factor=0.0, min_delay=0.0, max_delay=0.0)


def frontier(port: int, back_queues: int = 256) -> RedisFrontier:
    client = redis.Redis(host="127.0.0.1", port=port)
    return RedisFrontier(client, PREFIX, front_queues=8, back_queues=back_queues,
                         policy=NO_REST, lease_timeout=60.0)


def item(i: int) -> bytes:
    # About the size of a small serialized request.
    return b'{"url":"http://h%d.example/page/%08d","cb":"parse","p":0}' % (i % 997, i)


def fill(f: RedisFrontier, n: int, hosts: int) -> None:
    batch: list[tuple[str, int, bytes]] = []
    for i in range(n):
        batch.append((f"h{i % hosts}.example", 1 + (i * 7) % 8, item(i)))
        if len(batch) == 500:
            f.push_many(batch)
            batch = []
    if batch:
        f.push_many(batch)


def worker(port: int, fetch: float, seconds: float, start_at: float, out: Any) -> None:
    f = frontier(port)
    while time.time() < start_at:
        time.sleep(0.001)
    claims = completes = empty = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    for _ in range(10_000_000):
        if time.perf_counter() >= end:
            break
        lease = f.pop()
        if lease is None:
            empty += 1
            if f.idle():
                break
            time.sleep(0.001)
            continue
        claims += 1
        if fetch:
            time.sleep(fetch)
        if f.complete(lease, fetch) is not None:
            completes += 1
    out.put({"claims": claims, "completes": completes, "empty": empty,
             "elapsed": time.perf_counter() - t0})


def throughput(port: int, workers: int, fetch: float, seconds: float) -> dict[str, Any]:
    f = frontier(port)
    f.clear()
    # Enough URLs for the run, on enough hosts for every worker to find a free one.
    expect = workers * (50 if fetch else 20_000) * seconds * 1.5
    fill(f, int(min(max(expect, 2000), 120_000)), hosts=4000)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 1.0
    procs = [ctx.Process(target=worker, args=(port, fetch, seconds, start_at, out))
             for _ in range(workers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    elapsed = max(r["elapsed"] for r in results)
    claims = sum(r["claims"] for r in results)
    completes = sum(r["completes"] for r in results)
    return {
        "workers": workers, "fetch_ms": fetch * 1000, "seconds": elapsed,
        "claims": claims, "completes": completes,
        "claims_per_s": claims / elapsed, "completes_per_s": completes / elapsed,
        "ideal_per_s": workers / fetch if fetch else None,
        "empty_claims": sum(r["empty"] for r in results),
    }


def commandstats(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def commands_per_url(port: int, m: int) -> dict[str, Any]:
    f = frontier(port)
    f.clear()
    client = redis.Redis(host="127.0.0.1", port=port)
    # The INFO calls themselves are counted; subtract them.
    phases = {}
    s0 = commandstats(client)
    fill(f, m, hosts=500)
    s1 = commandstats(client)
    leases = []
    done = 0
    for _ in range(10 * m):
        if done == m:
            break
        lease = f.pop()
        if lease is not None:
            leases.append(lease)
        if lease is None or len(leases) >= 100:  # complete in batches: hosts come back
            for held in leases:
                f.complete(held, 0.0)
            done += len(leases)
            leases = []
    s2 = commandstats(client)
    for name, d in (("push (batches of 500)", delta(s0, s1)),
                    ("claim + complete", delta(s1, s2))):
        d.pop("info", None)
        round_trips = d.get("evalsha", 0) + d.get("eval", 0)
        phases[name] = {"round_trips_per_url": round_trips / m,
                        "commands_per_url": sum(d.values()) / m,
                        "inside_scripts_per_url": (sum(d.values()) - round_trips) / m,
                        "top": dict(sorted(d.items(), key=lambda kv: -kv[1])[:8])}
    assert f.idle()
    client.close()
    return phases


def bytes_per_url(port: int, m: int) -> dict[str, Any]:
    client = redis.Redis(host="127.0.0.1", port=port)
    mean_item = sum(len(item(i)) for i in range(m)) / m
    out: dict[str, Any] = {"mean_item_bytes": mean_item}
    for where, back_queues, hosts in (("front queues", 1, 1000), ("back queues", 1000, 1000)):
        f = frontier(port, back_queues=back_queues)
        f.clear()
        before = int(client.info("memory")["used_memory"])
        fill(f, m, hosts=hosts)
        after = int(client.info("memory")["used_memory"])
        per = (after - before) / m
        out[where] = {"bytes_per_url": per, "overhead_per_url": per - mean_item,
                      "active_hosts": f.active_back_queues, "front_len": f.front_len}
    f.clear()
    client.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    counts = [1, 2] if args.quick else [1, 2, 4, 8]
    with RedisServer() as server:
        runs = []
        for fetch in (0.0, 0.020):
            for workers in counts:
                r = throughput(server.port, workers, fetch, seconds)
                runs.append(r)
                print(f"  fetch {r['fetch_ms']:4.0f} ms, {workers} workers: "
                      f"{r['claims_per_s']:8.0f} claims/s {r['completes_per_s']:8.0f} completes/s",
                      flush=True)
        cmds = commands_per_url(server.port, 2000 if args.quick else 10_000)
        mem = bytes_per_url(server.port, 20_000 if args.quick else 100_000)
        version = server.client().info("server")["redis_version"]
    print(f"\nRedisFrontier on Redis {version}, loopback, 2 shared CPUs")
    print(f"{'fetch':>6} {'workers':>8} {'claims/s':>10} {'completes/s':>12} {'ideal/s':>8}")
    for r in runs:
        ideal = f"{r['ideal_per_s']:.0f}" if r["ideal_per_s"] else "-"
        print(f"{r['fetch_ms']:4.0f}ms {r['workers']:8d} {r['claims_per_s']:10.0f} "
              f"{r['completes_per_s']:12.0f} {ideal:>8}")
    print("\nRedis commands per URL")
    for name, p in cmds.items():
        print(f"  {name:24} round trips {p['round_trips_per_url']:.3f}, commands "
              f"{p['commands_per_url']:.1f} ({p['inside_scripts_per_url']:.1f} inside scripts)")
    print(f"\nBytes per queued URL (item {mem['mean_item_bytes']:.0f} bytes)")
    for where in ("front queues", "back queues"):
        m = mem[where]
        print(f"  in {where:13} {m['bytes_per_url']:6.1f} bytes, overhead "
              f"{m['overhead_per_url']:5.1f} (active hosts {m['active_hosts']})")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "redis_claims.json").write_text(json.dumps(
        {"redis_version": version, "quick": args.quick, "throughput": runs,
         "commands_per_url": cmds, "bytes_per_queued_url": mem}, indent=2) + "\n")


if __name__ == "__main__":
    main()
