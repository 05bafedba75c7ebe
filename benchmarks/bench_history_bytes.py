"""Bytes per page of history, with the kept request (recrawl replays it) and without.

Crawls the spider-style site (tests/styles_site.py) with each style of
tests/crawls/styles_spiders.py into a JOBDIR, then reads every record of ``history.sqlite``
and prints its JSON size as written, and as it would be without the kept request
(the ``"rq"`` key): the same records, measured in the same run.

    python benchmarks/bench_history_bytes.py
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.crawls.test_spider_styles import STYLES, _build, _crawl, _frontier  # noqa: E402
from tests.styles_site import StyleSite  # noqa: E402


def main() -> None:
    print(f"{'style':8} {'pages':>5} {'bytes/page with request':>24} {'without':>8} "
          f"{'ratio':>6}")
    for style in STYLES:
        with tempfile.TemporaryDirectory() as tmp, StyleSite() as site:
            _build(site)
            work = Path(tmp)
            _crawl(style, site, work / "run", _frontier("sqlite", work, None))
            conn = sqlite3.connect(work / "job" / "history.sqlite")
            rows = [r[0] for r in conn.execute("SELECT data FROM pages")]
            conn.close()
        with_rq = [len(r) for r in rows]
        without = []
        for r in rows:
            data = json.loads(r)
            data.pop("rq", None)
            without.append(len(json.dumps(data, separators=(",", ":"))))
        a, b = statistics.mean(with_rq), statistics.mean(without)
        print(f"{style:8} {len(rows):5d} {a:24.0f} {b:8.0f} {a / b:6.2f}")


if __name__ == "__main__":
    main()
