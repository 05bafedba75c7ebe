"""The spider styles of the tests, crawled twice on SQLite and Redis: what a recrawl costs.

For each style of tests/crawls/styles_spiders.py (CrawlSpider, SitemapSpider, XMLFeedSpider, a
plain spider with cb_kwargs, an errback and a form): run 1 on a fresh state, then the
site changes (4 pages changed, 2 removed), then run 2 on the same state. Printed per run:
requests the site answered 200, 304 and 404, items scraped, and spider errors; beside
them, Scrapy's own scheduler on the changed site in the same run (a full crawl).

    python benchmarks/bench_spider_styles.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.crawls.test_spider_styles import (  # noqa: E402
    STYLES,
    _build,
    _change,
    _crawl,
    _errors,
    _frontier,
)
from tests.redis_server import RedisServer  # noqa: E402
from tests.styles_site import StyleSite  # noqa: E402


def _row(label: str, site: StyleSite, before: int, items: list[Any], stats: dict[str, Any],
         output: str) -> str:
    statuses = Counter(status for _, _, status in site.requests()[before:])
    return (f"  {label:22} 200: {statuses[200]:3d}  304: {statuses[304]:3d}  "
            f"404: {statuses[404]:3d}  items: {len(items):3d}  "
            f"errors: {len(_errors(stats, output))}")


def main() -> None:
    with RedisServer() as redis_server:
        for style in STYLES:
            print(style)
            for backend in ("sqlite", "redis"):
                with tempfile.TemporaryDirectory() as tmp, StyleSite() as site:
                    work = Path(tmp)
                    settings = _frontier(backend, work, redis_server)
                    _build(site)
                    before = len(site.requests())
                    items, stats, output = _crawl(style, site, work / "run1", settings)
                    print(_row(f"{backend} run 1", site, before, items, stats, output))
                    _change(site)
                    time.sleep(1.3)  # every page falls due
                    before = len(site.requests())
                    items, stats, output = _crawl(style, site, work / "run2", settings)
                    print(_row(f"{backend} run 2", site, before, items, stats, output))
                    before = len(site.requests())
                    items, stats, output = _crawl(style, site, work / "scrapy", {})
                    print(_row("Scrapy, changed site", site, before, items, stats, output))


if __name__ == "__main__":
    main()
