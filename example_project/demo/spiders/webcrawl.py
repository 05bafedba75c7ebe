"""Crawl a test web served by another process: run several of these to share one frontier.

    python -m frontier_testweb serve --log web.jsonl > web.json &
    scrapy crawl webcrawl -a web=web.json

``web.json`` is the line ``serve`` prints: the start URLs and the host addresses
(the crawl stays on them). See the README's distributed section.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import scrapy


class WebCrawlSpider(scrapy.Spider):
    name = "webcrawl"

    def __init__(self, web: str = "web.json", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        path = Path(web)
        # The server writes the line after it starts listening: wait for it (bounded).
        import time

        for _ in range(100):
            if path.exists() and path.read_text().strip():
                break
            time.sleep(0.1)
        info = json.loads(path.read_text().splitlines()[0])
        # Scrapy's own start() turns these into dont_filter requests; several workers
        # on one Redis frontier still fetch each of them once.
        self.start_urls = info["start_urls"]
        self.allowed_domains = info["allowed_domains"]

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from response.follow_all(css="a", callback=self.parse)
