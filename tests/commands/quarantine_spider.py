"""A spider whose meta pickles in every run but unpickles only once it is fixed.

Run as ``python -m tests.commands.quarantine_spider SITE SETTINGS_JSON STATS_OUT`` with
``FRAGILE_FIXED=1`` in the environment for the fixed spider. Pages /p/3 and /p/7 are
requested with a :class:`Fragile` value in their meta; every page yields an item
with the value it got back.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess

FRAGILE_PAGES = (3, 7)


def rebuild(value: str) -> Fragile:
    if os.environ.get("FRAGILE_FIXED") != "1":
        raise ValueError("this release of the spider cannot rebuild Fragile values")
    return Fragile(value)


class Fragile:
    def __init__(self, value: str) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuild, (self.value,)


class QuarantineSpider(scrapy.Spider):
    name = "quarantine"

    def __init__(self, site: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [f"{site}/"]

    def parse(self, response: Any) -> Any:
        tag = response.meta.get("tag")
        yield {"url": response.url, "tag": tag.value if tag is not None else None}
        for href in response.css("a::attr(href)").getall():
            n = int(href.rsplit("/", 1)[1])
            meta = {"tag": Fragile(f"v{n}")} if n in FRAGILE_PAGES else {}
            yield response.follow(href, meta=meta)


def main(site: str, settings_json: str, out: str) -> int:
    process = CrawlerProcess(settings=json.loads(settings_json))
    crawler = process.create_crawler(QuarantineSpider)
    process.crawl(crawler, site=site)
    process.start()
    Path(out).write_text(json.dumps(dict(crawler.stats.get_stats()), default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(*sys.argv[1:4]))
