"""The spiders people write, for the spider-style tests; run with ``python -m
tests.crawls.styles_spiders STYLE SITE SETTINGS_JSON STATS_OUT``.

Every item names the page it came from (``source``) and the page's version, and carries
what the callback received (``cb_kwargs``, meta), so that two crawls compare item by item.
Items go through a pipeline and into a JSON-lines feed (``FEEDS``, as ``-o`` sets it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule, SitemapSpider, XMLFeedSpider


def version_of(response: Any) -> str | None:
    return response.css("#v::text").get()


class StampPipeline:
    """A pipeline, as projects have: it marks each item it saw."""

    def process_item(self, item: dict[str, Any], spider: Any = None) -> dict[str, Any]:
        item["piped"] = True
        return item


class RulesSpider(CrawlSpider):
    """Several rules: a callback, follow, process_links and process_request."""

    name = "rules"
    rules = (
        Rule(LinkExtractor(allow=r"/articles/"), callback="parse_article", follow=True,
             process_request="tag_request"),
        Rule(LinkExtractor(allow=r"/sections/"), follow=True, process_links="drop_private"),
    )

    def drop_private(self, links: list[Any]) -> list[Any]:
        return [link for link in links if "private" not in link.url]

    def tag_request(self, request: Any, response: Any) -> Any:
        return request.replace(meta={**request.meta, "tag": "article"})

    def parse_article(self, response: Any) -> Any:
        yield {"source": response.url, "version": version_of(response),
               "rule": response.meta.get("rule"), "tag": response.meta.get("tag"),
               "link_text": response.meta.get("link_text")}


class MapSpider(SitemapSpider):
    """A sitemap index (one gzip sitemap), rules by path, sitemap_follow."""

    name = "map"
    sitemap_follow = [r"/sitemap-"]
    sitemap_rules = [(r"/articles/", "parse_article"), (r"/sections/", "parse_section")]

    def parse_article(self, response: Any) -> Any:
        yield {"source": response.url, "version": version_of(response), "kind": "article"}

    def parse_section(self, response: Any) -> Any:
        yield {"source": response.url, "version": version_of(response), "kind": "section"}


class FeedSpider(XMLFeedSpider):
    """An RSS feed: one item per <item>, then each linked article."""

    name = "feed"
    iterator = "xml"
    itertag = "item"

    def parse_node(self, response: Any, node: Any) -> Any:
        link = node.xpath("link/text()").get()
        yield {"source": response.url, "title": node.xpath("title/text()").get()}
        yield scrapy.Request(link, callback=self.parse_article,
                             cb_kwargs={"title": node.xpath("title/text()").get()})

    def parse_article(self, response: Any, title: str) -> Any:
        yield {"source": response.url, "version": version_of(response), "title": title}


class PlainSpider(scrapy.Spider):
    """cb_kwargs, a meta chain, an errback, follow_all, a FormRequest POST,
    Request.replace, an async callback and an async start()."""

    name = "plain"

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.site}/", callback=self.parse_home,
                             cb_kwargs={"section": "home"}, meta={"chain": ["start"]})

    def parse_home(self, response: Any, section: str) -> Any:
        yield {"source": response.url, "version": version_of(response), "section": section}
        yield from response.follow_all(css="a.item", callback=self.parse_item,
                                       errback=self.failed, cb_kwargs={"section": "linked"},
                                       meta={"chain": [*response.meta["chain"], "home"]})
        yield scrapy.FormRequest(f"{self.site}/search", formdata={"q": "frontier"},
                                 callback=self.parse_search)

    async def parse_item(self, response: Any, section: str) -> Any:
        yield {"source": response.url, "version": version_of(response), "section": section,
               "chain": response.meta["chain"]}
        more = response.css("a.more::attr(href)").get()
        if more:
            yield response.request.replace(
                url=response.urljoin(more), cb_kwargs={"section": "more"},
                meta={**response.meta, "chain": [*response.meta["chain"], "item"]})

    def parse_search(self, response: Any) -> Any:
        yield {"source": response.url, "result": response.css("#result::text").get()}

    def failed(self, failure: Any) -> Any:
        request = failure.request
        yield {"source": request.url, "error": type(failure.value).__name__,
               "section": request.cb_kwargs.get("section")}


SPIDERS = {cls.name: cls for cls in (RulesSpider, MapSpider, FeedSpider, PlainSpider)}


def main(style: str, site: str, settings_json: str, out: str) -> int:
    cls: Any = SPIDERS[style]
    settings = json.loads(settings_json)
    settings.setdefault("ITEM_PIPELINES", {"tests.crawls.styles_spiders.StampPipeline": 300})
    process = CrawlerProcess(settings=settings)
    crawler = process.create_crawler(cls)
    kwargs: dict[str, Any] = {"site": site}
    if style in ("rules",):
        kwargs["start_urls"] = [f"{site}/"]
    elif style == "map":
        kwargs["sitemap_urls"] = [f"{site}/sitemap.xml"]
    elif style == "feed":
        kwargs["start_urls"] = [f"{site}/feed.rss"]
    process.crawl(crawler, **kwargs)
    process.start()
    Path(out).write_text(json.dumps(dict(crawler.stats.get_stats()), default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(*sys.argv[1:5]))
