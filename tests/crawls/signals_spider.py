"""A SitemapSpider as users write it, started from the test web's robots.txt files.

Run as ``python -m tests.crawls.signals_spider SETTINGS_JSON STATS_OUT ROBOTS_URL...``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from scrapy.crawler import CrawlerProcess
from scrapy.spiders import SitemapSpider


class SignalsSpider(SitemapSpider):
    name = "signals"

    def __init__(self, robots: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sitemap_urls = robots

    def parse(self, response: Any) -> Any:
        yield {"url": response.url}


def main(settings_json: str, out: str, *robots: str) -> int:
    process = CrawlerProcess(settings=json.loads(settings_json))
    crawler = process.create_crawler(SignalsSpider)
    process.crawl(crawler, robots=list(robots))
    process.start()
    Path(out).write_text(json.dumps(dict(crawler.stats.get_stats()), default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(*sys.argv[1:]))
