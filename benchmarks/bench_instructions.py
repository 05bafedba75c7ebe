"""Scheduler cost in machine instructions: a comparison that machine noise cannot move.

On a shared machine, the wall-clock rates of ``bench_scheduler_cost.py`` move by 10-40 %
between runs, which hides a change of a few percent. This counts the instructions that
the frontier's ``enqueue_request`` and ``next_request`` + ``fetch_finished`` execute per
request, with valgrind's cachegrind (``apt-get install valgrind``): the same workload
as ``bench_scheduler_cost.py`` (N requests over H hosts, nothing downloaded), run three
times in fresh processes, stopping after setup, after enqueue and after dequeue; the
differences divided by N are the per-request costs.

``--base DIR`` runs the same workload against another checkout of the package (for
example ``git worktree add /tmp/base <commit>``), side by side: the code before and
after a change, in one run.

``--backend sqlite`` gives the frontier a fresh JOBDIR in each process, so that its
queue lives in SQLite (the default, ``memory``, runs it without one), with write-through
commits and no periodic flush (``FRONTIER_FLUSH_INTERVAL``): how many periodic flushes a
run gets depends on how long it takes under valgrind.

Usage::

    python benchmarks/bench_instructions.py --n 20000
    python benchmarks/bench_instructions.py --n 20000 --base /tmp/base
    python benchmarks/bench_instructions.py --n 20000 --base /tmp/base --backend sqlite
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Run under valgrind: build the scheduler, then stop after the given phase.
_PHASE_SCRIPT = """
import sys
phase, n, hosts = (int(a) for a in sys.argv[1:4])
backend = sys.argv[4]
sys.argv = sys.argv[:1]
import bench_scheduler_cost as b
if backend == "sqlite":
    import tempfile
    from scrapy.utils.reactor import install_reactor
    # The JOBDIR's control file polls on a timer, which needs a reactor (not running).
    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
    jobdir = tempfile.mkdtemp(prefix="bench-instructions-")
    settings = b._settings
    # No periodic flush: how many a run gets depends on its duration under valgrind, not
    # on its requests. Write-through still commits every lease and acknowledgement.
    b._settings = lambda config, _: {**settings(config, None), "JOBDIR": jobdir,
                                     "FRONTIER_FLUSH_INTERVAL": 1e9}
# The kernel timing's probe is skipped alike in every checkout (before 0.2 it polled for up
# to 0.1 s, whose instructions varied from process to process): timing is on, as on Linux.
import scrapy_frontier.scheduler.tcp_timing as tcp_timing
tcp_timing._probed, tcp_timing._tick, tcp_timing._supported = True, 0.004, True
crawler, scheduler = b._make_scheduler("frontier", None)
requests = b._build_requests(n, hosts, "interleaved")
if phase >= 1:
    b._enqueue_all(scheduler, requests)
if phase >= 2:
    b._dequeue_all(scheduler, n)
"""

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _instructions(root: Path, phase: int, n: int, hosts: int, backend: str) -> int:
    env = dict(os.environ)
    # One hash seed for every process: string hashing otherwise changes dict and set
    # layouts, and with them the instructions, from one process to the next.
    env["PYTHONHASHSEED"] = "0"
    # numpy's OpenBLAS starts worker threads that spin while idle, and valgrind counts
    # their instructions too: a few percent that change from one process to the next.
    env["OPENBLAS_NUM_THREADS"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "benchmarks")])
    proc = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, "-c", _PHASE_SCRIPT, str(phase), str(n), str(hosts), backend],
        cwd=root / "benchmarks", env=env, capture_output=True, text=True, timeout=3600,
    )
    match = _REFS.search(proc.stderr)
    if proc.returncode != 0 or match is None:
        raise SystemExit(f"valgrind run failed for {root} (phase {phase}):\n{proc.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def per_request(root: Path, n: int, hosts: int, backend: str = "memory") -> tuple[float, float]:
    """(enqueue, dequeue + finish) instructions per request for the checkout at ``root``."""
    setup, enqueued, dequeued = (_instructions(root, phase, n, hosts, backend)
                                 for phase in (0, 1, 2))
    return (enqueued - setup) / n, (dequeued - enqueued) / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="requests (default 20,000)")
    parser.add_argument("--hosts", type=int, default=1_000, help="distinct hosts")
    parser.add_argument("--base", type=Path, help="another checkout to compare against")
    parser.add_argument("--backend", choices=("memory", "sqlite"), default="memory",
                        help="where the frontier keeps its queue (sqlite: a fresh JOBDIR)")
    args = parser.parse_args(argv)
    if args.n < 1 or args.hosts < 1:
        parser.error("--n and --hosts must be >= 1")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    roots = {"this checkout": ROOT}
    if args.base is not None:
        if not (args.base / "scrapy_frontier").is_dir():
            parser.error(f"--base {args.base} holds no scrapy_frontier package")
        roots = {f"base ({args.base})": args.base.resolve(), **roots}
    results = {label: per_request(root, args.n, args.hosts, args.backend)
               for label, root in roots.items()}
    print(f"Instructions per request, {args.n:,} requests over {args.hosts:,} hosts "
          f"(valgrind cachegrind; the frontier with Scrapy's default dupe filter, "
          f"{args.backend} backend)")
    width = max(len(label) for label in results)
    print(f"{'':<{width}}  {'enqueue':>12}  {'dequeue+finish':>15}")
    for label, (enq, deq) in results.items():
        print(f"{label:<{width}}  {enq:>12,.0f}  {deq:>15,.0f}")
    if args.base is not None:
        (b_enq, b_deq), (m_enq, m_deq) = results.values()
        print(f"{'change':<{width}}  {100 * (m_enq / b_enq - 1):>+11.1f}%  "
              f"{100 * (m_deq / b_deq - 1):>+14.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
