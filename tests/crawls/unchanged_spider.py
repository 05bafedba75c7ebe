"""A spider with an errback on every request, as users write them, for the recrawl tests.

It records what each of its hooks saw: the errback's calls, the callback's responses, and the
pages ``scrapy_frontier.signals.page_unchanged`` announced.

Run as ``python -m tests.crawls.unchanged_spider SETTINGS_JSON OUT START_URL...``; OUT gets the
crawl's stats and those records as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess

from scrapy_frontier import signals as frontier_signals


class ErrbackSpider(scrapy.Spider):
    name = "errbacks"

    def __init__(self, urls: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls
        self.failures: list[list[str]] = []
        self.parsed: list[list[Any]] = []
        self.unchanged: list[str] = []

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> ErrbackSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.page_unchanged, signal=frontier_signals.page_unchanged)
        return spider

    async def start(self) -> Any:
        for url in self.urls:
            yield scrapy.Request(url, errback=self.failed)

    def parse(self, response: Any) -> Any:
        self.parsed.append([response.url, response.status])
        if response.status != 200:
            return
        for href in response.css("a::attr(href)").getall():
            yield scrapy.Request(response.urljoin(href), errback=self.failed)

    def failed(self, failure: Any) -> None:
        self.failures.append([failure.request.url, type(failure.value).__name__])

    def page_unchanged(self, request: Any, response: Any, spider: Any) -> None:
        assert spider is self and response.status == 304 and request.url == response.url
        self.unchanged.append(request.url)


def main(settings_json: str, out: str, *urls: str) -> int:
    process = CrawlerProcess(settings=json.loads(settings_json))
    crawler = process.create_crawler(ErrbackSpider)
    process.crawl(crawler, urls=list(urls))
    process.start()
    spider = crawler.spider
    assert isinstance(spider, ErrbackSpider)
    Path(out).write_text(json.dumps({
        "stats": dict(crawler.stats.get_stats()),  # type: ignore[union-attr]
        "failures": spider.failures, "parsed": spider.parsed, "unchanged": spider.unchanged,
    }, default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(*sys.argv[1:]))
