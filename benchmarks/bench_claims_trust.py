"""Sitemap claims judged over three runs of a web whose pages change by small edits.

A test web of ``--hosts`` x ``--pages`` (``serve --signals --edits``) whose hosts are, by host
number, truthful (true ``<lastmod>``), stamped (true ``<lastmod>``; each page carries a line
that differs on every response, and no validators), liar (``<lastmod>`` never moves) and noisy
(``<lastmod>`` always now); the counts are in ``KINDS``. Pages change only by the benchmark's
small edits (one word in about 1300: a 64-bit simhash moves a few bits, under
``FRONTIER_CHANGE_THRESHOLD``), so the recrawl sees no meaningful change, and a claim is right
only if judged by whether the page changed at all.

A ``SitemapSpider`` (started from each host's robots.txt) crawls it three times on one job
directory (``FRONTIER_RECRAWL_INITIAL`` a day, so a page comes back only when a claim makes it
due, or when every page is):

1. the first crawl;
2. ``--edit-share`` of each host's pages edited, then a run with ``FRONTIER_RECRAWL_ALL``:
   every page's verification visit, where every claim is checked;
3. another share edited, then a plain run: a page is fetched when its host's claim says it
   changed and the host is not distrusted.

Before each edit the benchmark waits until the edited pages' last fetch is
``CERTAINLY_MOVED`` seconds old (lastmod is written to the second, and a claim moves when it
is over a second past the visit). Per run: page fetches, changed pages and how many of them
were fetched, the ``frontier/signals/*`` checks, the hosts' trust by kind as the run left it
(the history's ``hint_trust`` table); after run 3, each host's trust. Then the issue's target:
the truthful hosts trusted by run 3 (as run 2 left them), and run 3 fetching at most the
changed pages plus 10 %.

    python benchmarks/bench_claims_trust.py            # 8 hosts x 50 pages
    python benchmarks/bench_claims_trust.py --quick    # 4 x 20, nothing written

Writes ``benchmarks/results/claims_trust.json`` (``--label`` names the row, e.g. before /
after a change).
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from frontier_testweb import ServerProcess, edit_page, read_log  # noqa: E402
from frontier_testweb.crawl import FRONTIER_ADDON  # noqa: E402
from frontier_testweb.log import LogEntry  # noqa: E402
from scrapy_frontier.core.hint_trust import HintTrust  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "claims_trust.json"
#: Host kinds, in host order.
KINDS = ("truthful", "truthful", "truthful", "stamped", "stamped", "stamped", "liar", "noisy")
QUICK_KINDS = ("truthful", "stamped", "liar", "noisy")
CERTAINLY_MOVED = 2.2


def settings(job: Path, *, everything: bool) -> dict[str, Any]:
    return {"ADDONS": FRONTIER_ADDON, "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False,
            "ROBOTSTXT_OBEY": False, "FRONTIER_MIN_DELAY": 0.0, "JOBDIR": str(job),
            "FRONTIER_RECRAWL_INITIAL": 86400.0, "FRONTIER_RECRAWL_MIN": 0.5,
            "FRONTIER_RECRAWL_ALL": everything}


def crawl(config: dict[str, Any], robots: list[str], out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    stats = out / "stats.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.crawls.signals_spider", json.dumps(config), str(stats),
         *robots], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError((proc.stdout + proc.stderr)[-3000:])
    result: dict[str, Any] = json.loads(stats.read_text())
    return result


def edit(pages: list[tuple[str, str]], log: list[LogEntry], port: int) -> None:
    """Edit ``pages`` once each, once their last fetch is CERTAINLY_MOVED seconds old."""
    last = max((e.end for e in log if (e.host, e.path) in set(pages)), default=0.0)
    time.sleep(max(0.0, last + CERTAINLY_MOVED - time.monotonic()))
    for host, path in pages:
        edit_page(f"http://{host}:{port}{path}")


def trust_counts(job: Path) -> dict[str, tuple[int, int]]:
    """The hosts' claim checks in the history (none before the first check)."""
    with sqlite3.connect(job / "history.sqlite") as db:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'hint_trust'").fetchone() is None:
            return {}
        return {host: (a, d) for host, a, d in
                db.execute("SELECT host, agreed, disagreed FROM hint_trust")}


def target(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's target, from the rows of the three runs."""
    truthful = runs[1]["trust_by_kind"].get("truthful", {})
    fetches, changed = runs[2]["page_fetches"], runs[2]["changed"]
    out = {"truthful_trusted_by_run_3": set(truthful) == {"trusted"},
           "run_3_fetches": fetches, "run_3_limit": round(1.1 * changed, 1)}
    out["met"] = out["truthful_trusted_by_run_3"] and fetches <= 1.1 * changed
    return out


def run(kinds: tuple[str, ...], pages: int, share: float, seed: int,
        tmp: Path) -> dict[str, Any]:
    web = ["--shape", "wide", "--hosts", str(len(kinds)), "--pages", str(pages),
           "--latency", "0.002", "0.005", "--cross-links", "0", "--seed", str(seed),
           "--signals", "--edits", "--kinds", ",".join(kinds)]
    rng = random.Random(seed)
    logfile = tmp / "server.jsonl"
    job = tmp / "job"
    runs: list[dict[str, Any]] = []
    with ServerProcess(web, log_path=str(logfile)) as server:
        hosts = [h["address"] for h in server.info["hosts"]]
        kind_of = dict(zip(hosts, kinds, strict=True))
        port = server.info["port"]
        robots = [f"http://{h}:{port}/robots.txt" for h in hosts]
        seen = 0
        edited: list[tuple[str, str]] = []
        for n in (1, 2, 3):
            if n > 1:
                edited = [(h, f"/p/{j}") for h in hosts
                          for j in sorted(rng.sample(range(pages), round(share * pages)))]
                edit(edited, read_log(logfile), port)
            stats = crawl(settings(job, everything=n == 2), robots, tmp / f"run{n}")
            entries = read_log(logfile)[seen:]
            seen += len(entries)
            fetched = [e for e in entries if e.path.startswith("/p/")]
            got = {(e.host, e.path) for e in fetched}
            row: dict[str, Any] = {"run": n, "page_fetches": len(fetched),
                                   "full": sum(e.status == 200 for e in fetched),
                                   "not_modified": sum(e.status == 304 for e in fetched),
                                   "changed": len(edited),
                                   "changed_fetched": len(set(edited) & got),
                                   "by_kind": {}}
            for kind in dict.fromkeys(kinds):
                mine = {h for h in hosts if kind_of[h] == kind}
                row["by_kind"][kind] = {
                    "fetches": sum(e.host in mine for e in fetched),
                    "changed": sum(h in mine for h, _ in edited),
                    "changed_fetched": sum(h in mine for h, _ in set(edited) & got)}
            for key in ("checked", "wrong", "hosts_trusted", "hosts_distrusted", "due",
                        "deferred", "ignored", "held", "released"):
                row[key] = int(stats.get(f"frontier/signals/{key}", 0))
            row["meaningful_changes"] = int(stats.get("frontier/recrawl/pages_changed", 0))
            trust = HintTrust(trust_counts(job))
            row["trust_by_kind"] = {kind: dict(Counter(trust.state(h) for h in hosts
                                                       if kind_of[h] == kind))
                                    for kind in dict.fromkeys(kinds)}
            runs.append(row)
    counts = trust_counts(job)
    trust = HintTrust(counts)
    hosts_out = [{"host": h, "kind": kind_of[h], "agreed": counts.get(h, (0, 0))[0],
                  "disagreed": counts.get(h, (0, 0))[1], "state": trust.state(h)}
                 for h in hosts]
    return {"runs": runs, "hosts": hosts_out,
            "states": dict(Counter(h["state"] for h in hosts_out)), "target": target(runs)}


def report(result: dict[str, Any]) -> None:
    for row in result["runs"]:
        kinds = "  ".join(f"{k} {v['fetches']} ({v['changed_fetched']}/{v['changed']})"
                          for k, v in row["by_kind"].items())
        print(f"run {row['run']}: {row['page_fetches']} page fetches ({row['full']} x 200, "
              f"{row['not_modified']} x 304), changed {row['changed']}, of them fetched "
              f"{row['changed_fetched']}; checks {row['checked']}, wrong {row['wrong']}; "
              f"meaningful changes seen {row['meaningful_changes']}")
        print(f"       by kind, fetches (changed fetched / changed): {kinds}")
        print(f"       trust by kind as the run left it: {row['trust_by_kind']}")
    for host in result["hosts"]:
        print(f"  {host['kind']:>9} {host['host']}: agreed {host['agreed']:3d}, disagreed "
              f"{host['disagreed']:3d} -> {host['state']}")
    print(f"hosts: {result['states']}")
    goal = result["target"]
    print(f"target {'met' if goal['met'] else 'NOT met'}: truthful hosts trusted by run 3: "
          f"{'yes' if goal['truthful_trusted_by_run_3'] else 'no'}; run 3 fetches "
          f"{goal['run_3_fetches']}, at most {goal['run_3_limit']} (changed + 10 %)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--edit-share", type=float, default=0.4)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--label", default="run")
    parser.add_argument("--quick", action="store_true", help="4 hosts x 20 pages, not written")
    args = parser.parse_args(argv)
    kinds = QUICK_KINDS if args.quick else KINDS
    pages = 20 if args.quick else args.pages
    with tempfile.TemporaryDirectory() as tmp:
        result = run(kinds, pages, args.edit_share, args.seed, Path(tmp))
    report(result)
    if not args.quick:
        data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        data[args.label] = {"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                            "kinds": list(kinds), "pages": pages,
                            "edit_share": args.edit_share, "seed": args.seed, **result}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(data, indent=2))
        print(f"wrote {RESULTS} ({args.label})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
