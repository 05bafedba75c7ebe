"""Crawl a bundled offline web of many loopback hosts, then audit politeness."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import scrapy
from scrapy import signals

from frontier_testweb import TestWebServer, audit, skewed_web


class DemoSpider(scrapy.Spider):
    """Starts the demo web on 127.0.x.y itself, so no network is needed."""

    name = "demo"

    def __init__(self, hosts: str = "12", largest: str = "40", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.web = TestWebServer(skewed_web(hosts=int(hosts), largest=int(largest), seed=7))

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> DemoSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.summarize, signal=signals.spider_closed)
        return spider

    async def start(self) -> AsyncIterator[scrapy.Request]:
        self.web.start()
        for url in self.web.start_urls():
            yield scrapy.Request(url)

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from response.follow_all(css="a", callback=self.parse)

    def summarize(self, spider: scrapy.Spider) -> None:
        settings = self.crawler.settings
        report = audit(
            self.web.log,
            expected=self.web.expected(),
            factor=settings.getfloat("FRONTIER_DELAY_FACTOR", 10.0),
            min_delay=settings.getfloat("FRONTIER_MIN_DELAY", 1.0),
            max_delay=settings.getfloat("FRONTIER_MAX_DELAY", 60.0),
            concurrency=settings.getint("CONCURRENT_REQUESTS"),
        )
        print("\n=== scrapy-frontier demo: politeness and coverage ===")
        print(report.summary())
        self.web.stop()
