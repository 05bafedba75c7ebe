"""Claims on one Redis and on a Redis Cluster: claims/s, round trips, server µs and bytes.

Worker processes claim and complete URLs as fast as they can (0 ms fetches, no rest:
the frontier's own cost is measured), for ``--seconds``, in four configurations:

* ``per-url``: one Redis, one script call to claim and one to complete each URL
  (``pop``/``complete``), as the frontier did before batched rounds;
* ``rounds``: one Redis, one script call per round, which completes the last batch and
  claims the next (``round``, ``--batch`` URLs);
* ``rounds-p3``: one Redis, three partitions;
* ``cluster-p3``/``cluster-p6``: a three-master Redis Cluster on loopback, three or six
  partitions.

Per configuration: claims/s (all workers), script calls (round trips) and Redis server µs
per claimed URL (``INFO commandstats`` over every node), and claims/s per node. Then the
memory: bytes per queued URL (``used_memory`` delta over ``--urls`` queued URLs of ~70-byte
items), as URLs per GB, per node of the cluster.

``FRONTIER_BENCH_CODE=/path/to/tree`` runs another checkout's scrapy_frontier (the
baseline of the same run; its frontier has no ``round`` then, so only ``per-url`` runs).

    python benchmarks/bench_redis_partitions.py            # about 1 minute
    python benchmarks/bench_redis_partitions.py --quick

Writes ``benchmarks/results/redis_partitions.json`` (not with FRONTIER_BENCH_CODE).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

_CODE = os.environ.get("FRONTIER_BENCH_CODE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if _CODE:
    sys.path.insert(0, _CODE)

import redis  # noqa: E402

from scrapy_frontier.core import DelayPolicy  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NO_REST = DelayPolicy(factor=0.0, min_delay=0.0, max_delay=0.0)
HOSTS = 4000


def item(i: int) -> bytes:
    return b'{"url":"http://h%d.example/page/%08d","cb":"parse","p":0}' % (i % 997, i)


def open_any(ports: list[int], cluster: bool, partitions: int, prefix: str) -> Any:
    """The frontier under test: a plain RedisFrontier, or the partitioned one."""
    if cluster:
        from redis.cluster import RedisCluster
        client: Any = RedisCluster(host="127.0.0.1", port=ports[0])
    else:
        client = redis.Redis(host="127.0.0.1", port=ports[0])
    kw: dict[str, Any] = {"front_queues": 8, "back_queues": 256, "policy": NO_REST,
                          "lease_timeout": 60.0}
    try:
        from scrapy_frontier.backends.redis.partitions import Layout, open_frontier
    except ImportError:  # the baseline: one frontier, no partitions
        from scrapy_frontier.backends.redis.frontier import RedisFrontier
        return RedisFrontier(client, prefix, **kw)
    layout = Layout(prefix, prefix + "seen:", prefix + "history:", count=partitions,
                    tagged=cluster or partitions > 1)
    return open_frontier(client, layout, **kw)


def worker(ports: list[int], cluster: bool, partitions: int, prefix: str, mode: str,
           batch: int, seconds: float, start_at: float, out: Any) -> None:
    f = open_any(ports, cluster, partitions, prefix)
    while time.time() < start_at:
        time.sleep(0.001)
    claims = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    if mode == "per-url":
        for _ in range(10_000_000):
            if time.perf_counter() >= end:
                break
            lease = f.pop()
            if lease is None:
                time.sleep(0.001)
                continue
            claims += 1
            f.complete(lease, 0.0)
    else:
        from scrapy_frontier.backends.redis.frontier import Finished

        finished: list[Any] = []
        for _ in range(10_000_000):
            if time.perf_counter() >= end:
                break
            reply = f.round([], finished, batch)
            claims += len(reply.leases)
            finished = [Finished(lease, 0.0) for lease in reply.leases]
            if not reply.leases:
                time.sleep(0.001)
        if finished:
            f.round([], finished, 0)
    out.put({"claims": claims, "elapsed": time.perf_counter() - t0})


def node_stats(ports: list[int]) -> list[dict[str, Any]]:
    out = []
    for port in ports:
        with redis.Redis(host="127.0.0.1", port=port) as c:
            stats = c.info("commandstats")
            out.append({k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
                        for k, v in stats.items()})
    return out


def fill(f: Any, n: int) -> None:
    batch = []
    for i in range(n):
        batch.append((f"h{i % HOSTS}.example", 1 + (i * 7) % 8, item(i)))
        if len(batch) == 500:
            f.push_many(batch)
            batch = []
    if batch:
        f.push_many(batch)


def run(ports: list[int], cluster: bool, partitions: int, mode: str, workers: int,
        batch: int, seconds: float, tag: str) -> dict[str, Any]:
    prefix = f"bench{tag}:frontier:"
    f = open_any(ports, cluster, partitions, prefix)
    f.clear()
    fill(f, int(min(max(workers * 20_000 * seconds, 2000), 150_000)))
    before = node_stats(ports)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start_at = time.time() + 1.5
    procs = [ctx.Process(target=worker, args=(ports, cluster, partitions, prefix, mode, batch,
                                              seconds, start_at, q)) for _ in range(workers)]
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 90) for _ in procs]
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    after = node_stats(ports)
    claims = sum(r["claims"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    per_node = []
    scripts = usec = 0
    for b, a in zip(before, after, strict=True):
        d = {k: (a[k][0] - b.get(k, (0, 0))[0], a[k][1] - b.get(k, (0, 0))[1]) for k in a}
        d.pop("info", None)
        node_scripts = d.get("evalsha", (0, 0))[0] + d.get("eval", (0, 0))[0]
        node_usec = sum(u for _, u in d.values())
        scripts += node_scripts
        usec += node_usec
        per_node.append({"scripts": node_scripts, "usec": node_usec})
    f.clear()
    return {"mode": mode, "cluster": cluster, "partitions": partitions, "workers": workers,
            "batch": batch if mode != "per-url" else 1, "seconds": elapsed, "claims": claims,
            "claims_per_s": claims / elapsed,
            "claims_per_s_per_node": claims / elapsed / len(ports),
            "round_trips_per_url": scripts / max(1, claims),
            "server_us_per_url": usec / max(1, claims), "nodes": per_node}


def memory(ports: list[int], cluster: bool, partitions: int, urls: int) -> dict[str, Any]:
    f = open_any(ports, cluster, partitions, "benchmem:frontier:")
    f.clear()
    used = []
    for port in ports:
        with redis.Redis(host="127.0.0.1", port=port) as c:
            used.append(int(c.info("memory")["used_memory"]))
    fill(f, urls)
    grew = []
    for port, u in zip(ports, used, strict=True):
        with redis.Redis(host="127.0.0.1", port=port) as c:
            grew.append(int(c.info("memory")["used_memory"]) - u)
    f.clear()
    per_url = sum(grew) / urls
    return {"cluster": cluster, "partitions": partitions, "urls": urls,
            "bytes_per_url": per_url, "urls_per_gb": 1e9 / per_url,
            "share_per_node": [g / max(1, sum(grew)) for g in grew]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--urls", type=int, default=200_000)
    args = ap.parse_args()
    seconds = 1.5 if args.quick else args.seconds
    baseline = bool(_CODE)
    rows: list[dict[str, Any]] = []
    mem: list[dict[str, Any]] = []
    with RedisServer() as server:
        single = [server.port]
        modes = [("per-url", 1)] if baseline else [("per-url", 1), ("rounds", 1),
                                                   ("rounds", 3)]
        for mode, p in modes:
            rows.append(run(single, False, p, mode, args.workers, args.batch, seconds,
                            f"{mode}{p}"))
            print(_line(rows[-1]), flush=True)
        mem.append(memory(single, False, 1, args.urls // (4 if args.quick else 1)))
    if not baseline:
        from tests.redis_cluster import RedisClusterServers

        with RedisClusterServers(masters=3) as cluster:
            ports = [node.port for node in cluster.nodes]
            for p in (3, 6):
                rows.append(run(ports, True, p, "rounds", args.workers, args.batch, seconds,
                                f"c{p}"))
                print(_line(rows[-1]), flush=True)
            mem.append(memory(ports, True, 6, args.urls // (4 if args.quick else 1)))
    for m in mem:
        print(f"memory {'cluster' if m['cluster'] else 'one Redis'} P={m['partitions']}: "
              f"{m['bytes_per_url']:.0f} B/URL = {m['urls_per_gb'] / 1e6:.1f} M URLs/GB; "
              f"share per node {[round(s, 2) for s in m['share_per_node']]}")
    if not baseline:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "redis_partitions.json").write_text(json.dumps(
            {"claims": rows, "memory": mem, "workers": args.workers, "batch": args.batch,
             "seconds": seconds}, indent=2))


def _line(r: dict[str, Any]) -> str:
    where = f"cluster(3) P={r['partitions']}" if r["cluster"] else f"one Redis P={r['partitions']}"
    return (f"{r['mode']:8} {where:18} {r['claims_per_s']:8.0f} claims/s "
            f"({r['claims_per_s_per_node']:.0f}/node)  {r['round_trips_per_url']:.3f} "
            f"round trips/URL  {r['server_us_per_url']:.1f} server µs/URL")


if __name__ == "__main__":
    main()
