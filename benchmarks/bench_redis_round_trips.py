"""What a real multi-worker crawl costs Redis per fetched page: script calls, commands and
server time, from ``INFO commandstats``.

``--workers`` (default 2) crawler processes (the test web's crawl harness, an ordinary
link-following spider) crawl a loopback test web of 60 hosts through one private
redis-server (127.0.0.1, no persistence). ``INFO commandstats`` is read before the workers
start and after the last one exits; the deltas are divided by the pages the server log
shows fetched. Commands run inside the Lua scripts count, as Redis counts them; so do
every worker's census, heartbeat, seen-set and page-history traffic.

With ``--baseline TREE`` the same crawl runs with another checkout of scrapy-frontier
(imported ahead of this one through PYTHONPATH), in the same run, interleaved:

    git worktree add /tmp/base <commit>
    python benchmarks/bench_redis_round_trips.py --baseline /tmp/base --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
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
from frontier_testweb.crawl import BASE_SETTINGS, FRONTIER_ADDON  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = HERE / "results" / "redis_round_trips.json"
#: ``hosts``: few pages per worker-second, bound by the hosts' rests (the issue's crawl:
#: 60 hosts); ``busy``: many hosts, so each worker keeps all its download slots full.
WEBS = {
    "hosts": ["--shape", "wide", "--hosts", "60", "--pages", "5", "--latency", "0.005",
              "0.040", "--seed", "2"],
    "busy": ["--shape", "wide", "--hosts", "400", "--pages", "3", "--latency", "0.005",
             "0.040", "--seed", "2"],
}
SCRIPTS = ("evalsha", "eval")


def commandstats(client: Any) -> dict[str, tuple[int, int]]:
    """Command -> (calls, server microseconds)."""
    raw = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for name, v in raw.items()}


def one_round(web_args: list[str], tree: str | None, redis_server: RedisServer, key: str,
              workers: int, tmp: Path) -> dict[str, Any]:
    env = dict(os.environ)
    # The workers run in tmp: ``python -m`` puts the working directory first on sys.path,
    # ahead of PYTHONPATH, and this repository's root holds scrapy_frontier.
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    log = tmp / "server.jsonl"
    client = redis_server.client()
    with ServerProcess(web_args, log_path=str(log)) as web:
        settings = {**BASE_SETTINGS, "ADDONS": FRONTIER_ADDON, "FRONTIER_BACKEND": "redis",
                    "REDIS_URL": redis_server.url, "FRONTIER_REDIS_KEY": f"{key}:frontier:",
                    "FRONTIER_REDIS_SEEN_KEY": f"{key}:seen:",
                    "FRONTIER_REDIS_HISTORY_KEY": f"{key}:history:",
                    "FRONTIER_MIN_DELAY": 0.0, "LOG_LEVEL": "WARNING"}
        spec = tmp / "crawl.json"
        spec.write_text(json.dumps({"start_urls": web.start_urls,
                                    "allowed_domains": web.allowed_domains,
                                    "settings": settings}))
        before = commandstats(client)
        procs = [subprocess.Popen(
            [sys.executable, "-m", "frontier_testweb.crawl", str(spec),
             str(tmp / f"worker{i}.json")], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL) for i in range(workers)]
        codes = [p.wait(timeout=600) for p in procs]
        after = commandstats(client)
        expected = web.expected
    entries = read_log(log)
    report = audit(entries, expected=expected, min_delay=0.0)
    pages = len(entries)
    delta = {name: (after[name][0] - before.get(name, (0, 0))[0],
                    after[name][1] - before.get(name, (0, 0))[1]) for name in after}
    delta = {name: d for name, d in delta.items() if d[0] and name != "info"}
    calls = sum(c for c, _ in delta.values())
    usec = sum(u for _, u in delta.values())
    scripts = sum(delta.get(name, (0, 0))[0] for name in SCRIPTS)
    # Round trips: every command the clients sent, counting a script as one (its inner
    # commands are counted by Redis inside the script's time); pipelines are not split.
    top = sorted(delta.items(), key=lambda kv: -kv[1][0])[:12]
    return {"codes": codes, "pages": pages, "coverage": report.coverage,
            "overlaps": report.overlaps, "short_gaps": report.short_gaps,
            "scripts_per_page": scripts / pages, "commands_per_page": calls / pages,
            "server_us_per_page": usec / pages, "makespan": report.makespan,
            "top": {name: round(c / pages, 2) for name, (c, _) in top}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--baseline", help="another scrapy-frontier checkout, for the baseline")
    parser.add_argument("--web", choices=sorted(WEBS), action="append",
                        help="which webs (default: both)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    webs = args.web or list(WEBS)
    trees: dict[str, str | None] = {"this tree": None}
    if args.baseline:
        trees = {"baseline": args.baseline, **trees}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {web: {} for web in webs}
    with RedisServer() as redis_server:
        for r in range(args.repeat):
            for web in webs:
                for name, tree in trees.items():
                    tmp = Path(tempfile.mkdtemp(prefix="bench-round-trips-"))
                    row = one_round(WEBS[web], tree, redis_server,
                                    f"rt{r}{web}{name.replace(' ', '')}", args.workers, tmp)
                    runs[web].setdefault(name, []).append(row)
                    print(f"[{web}, {name}, round {r + 1}] {row['pages']} pages: "
                          f"{row['scripts_per_page']:.2f} scripts, "
                          f"{row['commands_per_page']:.1f} commands, "
                          f"{row['server_us_per_page']:.0f} us per page, makespan "
                          f"{row['makespan']:.1f} s; coverage {row['coverage']:.3f}, overlaps "
                          f"{row['overlaps']}, short gaps {row['short_gaps']}; top {row['top']}",
                          flush=True)
    print()
    print(f"{'web':>6} {'code':>10} {'pages':>6} {'scripts/page':>13} {'commands/page':>14} "
          f"{'server us/page':>15} {'makespan':>9}")
    summary: dict[str, Any] = {}
    for web, by_code in runs.items():
        for name, rows in by_code.items():
            med = {k: statistics.median(row[k] for row in rows)
                   for k in ("pages", "scripts_per_page", "commands_per_page",
                             "server_us_per_page", "makespan")}
            summary[f"{web}/{name}"] = med
            print(f"{web:>6} {name:>10} {med['pages']:6.0f} {med['scripts_per_page']:13.2f} "
                  f"{med['commands_per_page']:14.1f} {med['server_us_per_page']:15.0f} "
                  f"{med['makespan']:8.1f}s")
    if not args.no_write:
        RESULTS.write_text(json.dumps({"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                                       "webs": {w: WEBS[w] for w in webs},
                                       "workers": args.workers,
                                       "summary": summary, "runs": runs}, indent=2))
        print(f"wrote {RESULTS}")
    bad = [r for by_code in runs.values() for rows in by_code.values() for r in rows
           if r["coverage"] < 1.0 or r["overlaps"] or r["short_gaps"] or any(r["codes"])]
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
