"""Bytes per URL fingerprint in Redis: RedisSeenSet against scrapy-redis's dupefilter.

Both run in the same private redis-server (127.0.0.1, free port, no persistence):

* **scrapy-redis 0.9** ``RFPDupeFilter``: one SET of 40-hex-char SHA1 strings (its own
  ``request_fingerprint``), filled with SADD as ``request_seen`` does (pipelined here
  only to save time: the stored data is the same);
* **RedisSeenSet**: 64-bit fingerprints in bucketed integer SETs (intsets);
* for reference, the same fingerprints as 6-byte fields in bucketed HASHes (listpacks),
  the layout first considered.

Memory is ``used_memory`` delta / N and the sum of ``MEMORY USAGE`` over the keys.

    python benchmarks/bench_redis_memory.py            # N = 200,000
    python benchmarks/bench_redis_memory.py --n 20000  # quick
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scrapy import Request  # noqa: E402
from scrapy_redis.dupefilter import RFPDupeFilter  # noqa: E402

from scrapy_frontier.backends.redis.seen import RedisSeenSet  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def used(client) -> int:
    return int(client.info("memory")["used_memory"])


def key_bytes(client, pattern: str) -> int:
    total = 0
    for key in client.scan_iter(match=pattern, count=1000):
        total += int(client.memory_usage(key, samples=0) or 0)
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    args = ap.parse_args()
    n = args.n
    rng = random.Random(7)
    urls = [f"http://h{rng.randrange(5000)}.example/p/{i}?q={rng.getrandbits(32)}"
            for i in range(n)]
    rows = []
    with RedisServer() as server:
        client = server.client()
        # scrapy-redis
        dupefilter = RFPDupeFilter(client, "sr:dupefilter")
        t0 = time.perf_counter()
        hexes = [dupefilter.request_fingerprint(Request(u)) for u in urls]
        before = used(client)
        pipe = client.pipeline(transaction=False)
        for i, fp in enumerate(hexes):
            pipe.sadd("sr:dupefilter", fp)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        rows.append({
            "layout": "scrapy-redis SET of 40-hex SHA1",
            "used_memory_per_fp": (used(client) - before) / n,
            "memory_usage_per_fp": key_bytes(client, "sr:*") / n,
            "encoding": client.object("encoding", "sr:dupefilter").decode(),
            "seconds": time.perf_counter() - t0,
        })
        fps = [int(h[:16], 16) for h in hexes]
        # RedisSeenSet
        before = used(client)
        t0 = time.perf_counter()
        seen = RedisSeenSet(client, "sf:seen:", expected=n)
        new = seen.add_many(fps)
        rows.append({
            "layout": f"RedisSeenSet: {seen.buckets} intset buckets",
            "used_memory_per_fp": (used(client) - before) / n,
            "memory_usage_per_fp": key_bytes(client, "sf:seen:*") / n,
            "encoding": sorted({client.object("encoding", k).decode()
                                for k in client.scan_iter(match="sf:seen:[0-9a-f]*")}),
            "seconds": time.perf_counter() - t0,
            "new": sum(new),
        })
        # bucketed hashes with 6-byte fields (16 bucket bits + 48 bits in the field)
        before = used(client)
        t0 = time.perf_counter()
        bits = max(0, (max(1, n) // 128).bit_length())
        pipe = client.pipeline(transaction=False)
        for i, fp in enumerate(fps):
            bucket = fp >> (64 - bits)
            field = (fp & ((1 << (64 - bits)) - 1)).to_bytes((64 - bits + 7) // 8, "big")
            pipe.hsetnx(f"sh:{bucket:x}", field, b"")
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        rows.append({
            "layout": f"hash buckets ({1 << bits}), {(64 - bits + 7) // 8}-byte fields",
            "used_memory_per_fp": (used(client) - before) / n,
            "memory_usage_per_fp": key_bytes(client, "sh:*") / n,
            "encoding": sorted({client.object("encoding", k).decode()
                                for k in client.scan_iter(match="sh:*")}),
            "seconds": time.perf_counter() - t0,
        })
        version = client.info("server")["redis_version"]
        client.close()
    print(f"Bytes per fingerprint, N = {n:,}, Redis {version}")
    print(f"{'layout':45} {'used_memory/fp':>15} {'MEMORY USAGE/fp':>16}  encoding")
    for r in rows:
        print(f"{r['layout']:45} {r['used_memory_per_fp']:15.1f} "
              f"{r['memory_usage_per_fp']:16.1f}  {r['encoding']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "redis_memory.json").write_text(
        json.dumps({"n": n, "redis_version": version, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
