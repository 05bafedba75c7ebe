"""Recording a sitemap's claims in the page history: records read one by one, or together.

A history of ``--pages`` known pages (one host, fetched once) on SQLite and on a private
redis-server (127.0.0.1, free port, no persistence). One sitemap's worth of claims (every
page, its lastmod an hour before its visit, so nothing is written back) is recorded as the
crawl records them, 500 at a time:

* ``one by one`` -- ``Recrawler.claim`` for each: one read of its record (a query on SQLite,
  a round trip on Redis);
* ``together`` -- ``Recrawler.hint_many`` for each slice: one read for the slice.

Both run in the same process, on the same history, several times each, alternating; the
table gives the median seconds and claims per second. On Redis the reads run in the worker's
I/O thread, where they hold up its next round (pushes, claims, completions) until they end.

    python benchmarks/bench_signal_claims.py             # 50,000 claims (a full sitemap)
    python benchmarks/bench_signal_claims.py --quick     # 5,000

Writes ``benchmarks/results/signal_claims.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scrapy_frontier.backends.redis.history import RedisHistoryStore  # noqa: E402
from scrapy_frontier.backends.sqlite.history import SQLiteHistoryStore  # noqa: E402
from scrapy_frontier.core import FakeClock  # noqa: E402
from scrapy_frontier.core.recrawl import PageHint, Recrawler, RecrawlSettings, Visit  # noqa: E402
from scrapy_frontier.core.refresh import DAY, RefreshConfig  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "signal_claims.json"
SLICE = 500
TEXT = " ".join(f"word{i}" for i in range(200))


def recrawler(store: Any) -> tuple[Recrawler, FakeClock]:
    clock = FakeClock(1_000_000.0)
    refresh = RefreshConfig(min_interval=60.0, max_interval=10 * DAY, initial_interval=DAY,
                            base_interval=DAY)
    return Recrawler(RecrawlSettings(refresh=refresh), store, clock=clock), clock


def fill(rc: Recrawler, pages: int) -> list[PageHint]:
    visit = Visit(status=200, digest=hashlib.blake2b(TEXT.encode()).hexdigest(), text=TEXT,
                  size=len(TEXT))
    for fp in range(pages):
        rc.visited(fp, f"http://a.example/{fp}", visit)
    rc.store.flush()
    # Wall-clock claim times an hour before the visits (the fake clock is the visits' time).
    before = rc.clock() - 3600.0
    return [(fp, f"http://a.example/{fp}", before, None) for fp in range(pages)]


def timed(rc: Recrawler, claims: list[PageHint], together: bool) -> float:
    started = time.perf_counter()
    for start in range(0, len(claims), SLICE):
        part = claims[start:start + SLICE]
        if together:
            rc.hint_many(part)
        else:
            for claim in part:
                rc.hint(*claim)
    rc.store.flush()
    return time.perf_counter() - started


def measure(name: str, store: Any, pages: int, repeats: int) -> dict[str, Any]:
    rc, _ = recrawler(store)
    claims = fill(rc, pages)
    times: dict[str, list[float]] = {"one by one": [], "together": []}
    for _ in range(repeats):
        for way in times:
            times[way].append(timed(rc, claims, way == "together"))
    row = {way: {"seconds": statistics.median(t), "claims_per_s": pages / statistics.median(t)}
           for way, t in times.items()}
    row["speedup"] = row["one by one"]["seconds"] / row["together"]["seconds"]
    print(f"{name:>7}: one by one {row['one by one']['seconds']:7.3f} s "
          f"({row['one by one']['claims_per_s']:9,.0f}/s)   together "
          f"{row['together']['seconds']:7.3f} s ({row['together']['claims_per_s']:9,.0f}/s)"
          f"   {row['speedup']:.1f}x", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5,000 claims, nothing written")
    args = parser.parse_args(argv)
    pages = 5_000 if args.quick else args.pages
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SQLiteHistoryStore(Path(tmp) / "history.sqlite")
        try:
            rows["sqlite"] = measure("SQLite", sqlite, pages, args.repeats)
        finally:
            sqlite.close()
        server = RedisServer().start()
        try:
            rows["redis"] = measure("Redis", RedisHistoryStore(server.client(), "bench:h:"),
                                    pages, args.repeats)
        finally:
            server.stop()
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                                       "pages": pages, "slice": SLICE, "rows": rows},
                                      indent=2))
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
