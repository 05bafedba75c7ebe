"""A spider that lists no start URL: it crawls only what ``scrapy frontier seed`` loaded.

Run as ``python -m tests.commands.seed_spider SETTINGS_JSON STATS_OUT``. Each page yields
one item naming the callback that got it; no link is followed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess


class SeededSpider(scrapy.Spider):
    name = "seeded"

    async def start(self) -> AsyncIterator[Any]:
        return
        yield  # an async generator that yields nothing

    def parse(self, response: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "callback": "parse"}

    def parse_item(self, response: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "callback": "parse_item"}


def main(settings_json: str, out: str) -> int:
    process = CrawlerProcess(settings=json.loads(settings_json))
    crawler = process.create_crawler(SeededSpider)
    process.crawl(crawler)
    process.start()
    Path(out).write_text(json.dumps(dict(crawler.stats.get_stats()), default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(*sys.argv[1:3]))
