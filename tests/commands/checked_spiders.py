"""Spiders whose seeds ``scrapy frontier seed`` checks: one kept to a few domains (the
command skips the URLs of others), one without a parse method of its own (a seed without
``--callback`` is refused), one of CrawlSpider (its rules take such a seed).

A module of its own: tests/commands/seed_spider.py is a project's only spider.
"""

from __future__ import annotations

from typing import Any

from scrapy.spiders import CrawlSpider, Spider

from tests.commands.seed_spider import SeededSpider


class ScopedSpider(SeededSpider):
    name = "scoped"
    allowed_domains = ["example.com", "127.0.3.1"]


class UnparsedSpider(Spider):
    name = "unparsed"

    def parse_article(self, response: Any) -> Any:
        yield {"url": response.url}


class RulesSpider(CrawlSpider):
    name = "rules"
