"""cProfile one configuration of bench_scale.py in this process: enqueue, then dequeue.

    python benchmarks/profile_scale.py frontier-batched 200000 100000
    python benchmarks/profile_scale.py scrapy-jobdir 200000 1000 --top 40

Prints the rates (inflated by the profiler's overhead: compare shares, not rates)
and the functions with the most time of their own, for each phase.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import KINDS, _make_scheduler  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("n", type=int)
    parser.add_argument("hosts", type=int)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    from scrapy import Request

    jobdir = tempfile.mkdtemp(prefix="profile-scale-")
    try:
        crawler, _, scheduler = _make_scheduler(args.kind, jobdir)
        requests = [
            Request(f"http://h{k % args.hosts}.example/p/{k // args.hosts}")
            for k in range(args.n)
        ]
        profile = cProfile.Profile()
        t0 = time.perf_counter()
        profile.enable()
        for request in requests:
            scheduler.enqueue_request(request)
        profile.disable()
        print(f"enqueue: {args.n / (time.perf_counter() - t0):,.0f} URL/s under the profiler")
        del requests
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)

        frontier = args.kind.startswith("frontier")
        inprogress = crawler.engine._slot.inprogress
        profile = cProfile.Profile()
        got = 0
        t0 = time.perf_counter()
        profile.enable()
        while got < args.n:
            request = scheduler.next_request()
            if request is None:
                break
            got += 1
            if frontier:
                inprogress.add(request)
                scheduler.fetches.completed(request)
                inprogress.discard(request)
        profile.disable()
        print(f"dequeue: {got / (time.perf_counter() - t0):,.0f} URL/s under the profiler")
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
        scheduler.close("finished")
    finally:
        shutil.rmtree(jobdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
