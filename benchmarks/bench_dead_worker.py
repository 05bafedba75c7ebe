"""README's distributed example, one worker killed: how soon its hosts come back, and how
soon the survivors stop.

Three ``scrapy crawl webcrawl`` processes of the example project share one frontier in a
private redis-server (127.0.0.1, no persistence) over a loopback test web (README's:
skewed, 20 hosts, largest 40 pages). ``--kill-at`` seconds after they start, the third is
killed with SIGKILL, as README's ``sleep 6; kill -9 %4`` does, but only once it holds a lease:
a worker holds one only while it fetches (or just before), so a kill at a fixed time mostly
finds it holding nothing, and measures nothing. The benchmark stops it (SIGSTOP), reads the
leases twice 0.5 s apart (the others' fetches end within that), and kills it if some were
held both times; otherwise it lets it go on (SIGCONT) and tries again 1 s later (after 20
tries, it is killed holding nothing).
Configurations, in one run:

* ``heartbeat`` -- this tree with its defaults (leases lapse FRONTIER_REDIS_LIVENESS = 5 s
  after the dead worker's last heartbeat);
* ``liveness-3`` -- the same with a 3 s window;
* ``lease-timeout-30`` -- this tree with the heartbeat off, and the settings README's example
  needed before it (DOWNLOAD_TIMEOUT = 20, FRONTIER_LEASE_TIMEOUT = 30);
* ``cluster-p3`` (with ``--cluster``) -- this tree with its defaults on a private Redis Cluster
  of three masters (loopback), three partitions;
* ``baseline`` (with ``--baseline TREE``) -- another checkout of scrapy-frontier (say an earlier
  commit: ``git worktree add /tmp/base <commit>``) with those same settings, imported ahead of
  this one through PYTHONPATH.

Reported per configuration (median of ``--repeat`` rounds, interleaved): the makespan and
the floor from the server log's audit (the largest host's polite bound), their ratio,
the leases the victim held when killed, repeats against the leases the survivors took back,
and the time from the last fetch to the last worker's exit.

    python benchmarks/bench_dead_worker.py --repeat 3 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from frontier_testweb import ServerProcess, audit, read_log  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = HERE / "results" / "dead_worker.json"
WEB = ["--shape", "skewed", "--hosts", "20", "--largest", "40"]
OLD_README = {"DOWNLOAD_TIMEOUT": 20, "FRONTIER_LEASE_TIMEOUT": 30}


#: The settings that put a crawl on the cluster, three partitions.
CLUSTER = {"FRONTIER_REDIS_CLUSTER": True, "FRONTIER_REDIS_PARTITIONS": 3}


def configs(baseline: str | None, cluster: bool,
            ) -> dict[str, tuple[dict[str, Any], str | None]]:
    out: dict[str, tuple[dict[str, Any], str | None]] = {
        "heartbeat": ({}, None),
        "liveness-3": ({"FRONTIER_REDIS_LIVENESS": 3}, None),
        "lease-timeout-30": ({**OLD_README, "FRONTIER_REDIS_LIVENESS": 0}, None),
    }
    if cluster:
        out["cluster-p3"] = (dict(CLUSTER), None)
    if baseline:
        out["baseline"] = (dict(OLD_README), baseline)
    return out


def one_round(settings: dict[str, Any], tree: str | None, redis_url: str, key: str,
              kill_at: float, timeout: float, tmp: Path) -> dict[str, Any]:
    log = tmp / "web.jsonl"
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    with ServerProcess(WEB, log_path=str(log)) as web:
        web_file = tmp / "web.json"
        web_file.write_text(json.dumps(web.info) + "\n")
        spec = {"FRONTIER_BACKEND": "redis", "REDIS_URL": redis_url, "FRONTIER_MIN_DELAY": 0,
                "FRONTIER_REDIS_KEY": f"{key}:frontier:", "FRONTIER_REDIS_SEEN_KEY": f"{key}:seen:",
                "FRONTIER_REDIS_HISTORY_KEY": f"{key}:history:", "LOG_LEVEL": "INFO",
                **settings}
        if "FRONTIER_REDIS_CLUSTER" in settings:  # partitioned: the seen set is per partition
            del spec["FRONTIER_REDIS_SEEN_KEY"]
        args = [a for name, value in spec.items() for a in ("-s", f"{name}={value}")]
        started = time.monotonic()
        procs = [subprocess.Popen(
            [sys.executable, "-m", "scrapy", "crawl", "webcrawl", "-a", f"web={web_file}",
             *args, "-s", f"LOG_FILE={tmp / f'worker{i}.log'}"],
            cwd=ROOT / "example_project", env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL) for i in range(3)]
        ended: dict[int, float] = {}
        killed = False
        held: set[tuple[str, int]] = set()
        # Opened at the first try, once the workers have opened the crawl: opening it
        # first would write its meta key with this process's defaults.
        frontier: Any = None
        next_try = started + kill_at
        tries = 0
        while len(ended) < 3:
            now = time.monotonic()
            if not killed and now >= next_try and procs[2].poll() is None:
                tries += 1
                if frontier is None:
                    frontier = _frontier(redis_url, key, "FRONTIER_REDIS_CLUSTER" in settings)
                held = _stopped_holding(frontier, procs[2])
                if held or tries == 20:
                    procs[2].send_signal(signal.SIGKILL)
                    killed = True
                else:
                    next_try = time.monotonic() + 1.0
            for i, p in enumerate(procs):
                if i not in ended and p.poll() is not None:
                    ended[i] = time.monotonic()
            if now - started > timeout:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"the crawl did not end within {timeout:.0f} s")
            time.sleep(0.01)
        codes = [p.returncode for p in procs]
        expected = web.expected
    entries = read_log(log)
    report = audit(entries, expected=expected, min_delay=0.0)
    pages = collections.Counter(host for host, _ in expected)
    largest = max(pages, key=pages.__getitem__)
    last_fetch = max(e.end for e in entries)
    survivors = [i for i in range(3) if codes[i] == 0]
    reclaimed = 0
    for i in survivors:
        text = (tmp / f"worker{i}.log").read_text(errors="replace")
        marker = "'frontier/leases/reclaimed': "
        at = text.rfind(marker)
        if at >= 0:
            reclaimed += int(text[at + len(marker):].split(",", 1)[0].split("}", 1)[0])
    return {
        "codes": codes, "killed_early": codes[2] == -signal.SIGKILL, "held": len(held),
        "tries": tries,
        "held_largest": largest in {host for host, _ in held},
        "makespan": report.makespan, "floor": report.floor(),
        "ratio": report.makespan / report.floor(), "duplicates": report.duplicates,
        "reclaimed": reclaimed, "coverage": report.coverage, "overlaps": report.overlaps,
        "short_gaps": report.short_gaps,
        "exit_after_last_fetch": max(ended[i] for i in survivors) - last_fetch,
    }


def _frontier(redis_url: str, key: str, cluster: bool) -> Any:
    """The crawl's frontier, to read its leases (3 partitions on the cluster)."""
    import redis
    from redis.cluster import RedisCluster

    from scrapy_frontier.backends.redis.partitions import Layout, open_frontier

    client = RedisCluster.from_url(redis_url) if cluster else redis.Redis.from_url(redis_url)
    layout = Layout(f"{key}:frontier:", f"{key}:seen:", f"{key}:history:",
                    count=3 if cluster else 1, tagged=cluster)
    return open_frontier(client, layout)


def _stopped_holding(frontier: Any, victim: subprocess.Popen[bytes]) -> set[tuple[str, int]]:
    """Stop ``victim``; the leases held across two reads 0.5 s apart are its own (the other
    workers' fetches end sooner). Empty: it held none, and goes on."""
    victim.send_signal(signal.SIGSTOP)
    time.sleep(0.5)
    first = {(lease.host, lease.ticket) for lease in frontier.leases()}
    time.sleep(0.5)
    held = first & {(lease.host, lease.ticket) for lease in frontier.leases()}
    if not held:
        victim.send_signal(signal.SIGCONT)
    return held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--kill-at", type=float, default=6.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--baseline", help="another scrapy-frontier checkout, for the baseline")
    parser.add_argument("--cluster", action="store_true",
                        help="also on a three-master Redis Cluster, three partitions")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        redis_server = stack.enter_context(RedisServer())
        cluster_url = ""
        if args.cluster:
            from tests.redis_cluster import RedisClusterServers

            cluster_url = stack.enter_context(RedisClusterServers(masters=3)).url
        for r in range(args.repeat):
            for name, (settings, tree) in configs(args.baseline, args.cluster).items():
                tmp = Path(tempfile.mkdtemp(prefix=f"bench-dead-{name}-"))
                url = cluster_url if "FRONTIER_REDIS_CLUSTER" in settings else redis_server.url
                row = one_round(settings, tree, url, f"dead{r}{name}",
                                args.kill_at, args.timeout, tmp)
                runs.setdefault(name, []).append(row)
                largest = " (the largest host's among them)" if row["held_largest"] else ""
                print(f"[{name} round {r + 1}] makespan {row['makespan']:.1f} s, floor "
                      f"{row['floor']:.1f} s, x{row['ratio']:.2f}, killed holding "
                      f"{row['held']} lease(s){largest}, {row['duplicates']} repeats, "
                      f"{row['reclaimed']} reclaimed, overlaps {row['overlaps']}, short gaps "
                      f"{row['short_gaps']}, coverage {row['coverage']:.3f}, last exit "
                      f"{row['exit_after_last_fetch']:.2f} s after the last fetch", flush=True)
    print()
    print(f"{'configuration':>18} {'makespan':>9} {'floor':>6} {'x floor':>8} {'held':>8} "
          f"{'repeats':>8} {'reclaimed':>9} {'exit after last fetch':>22}")
    summary = {}
    for name, rows in runs.items():
        med = {k: statistics.median(row[k] for row in rows)
               for k in ("makespan", "floor", "ratio", "exit_after_last_fetch")}
        summary[name] = {**med, "duplicates": [r["duplicates"] for r in rows],
                         "reclaimed": [r["reclaimed"] for r in rows],
                         "held": [r["held"] for r in rows],
                         "ratios": [round(r["ratio"], 3) for r in rows]}
        print(f"{name:>18} {med['makespan']:8.1f}s {med['floor']:5.1f}s {med['ratio']:8.2f} "
              f"{str(summary[name]['held']):>8} "
              f"{str(summary[name]['duplicates']):>8} {str(summary[name]['reclaimed']):>9} "
              f"{med['exit_after_last_fetch']:21.2f}s")
    if not args.no_write:
        RESULTS.write_text(json.dumps({"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                                       "web": WEB, "kill_at": args.kill_at,
                                       "summary": summary, "runs": runs}, indent=2))
        print(f"wrote {RESULTS}")
    bad = [r for rows in runs.values() for r in rows
           if r["coverage"] < 1.0 or r["overlaps"] or r["short_gaps"]]
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
