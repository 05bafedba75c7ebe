"""The spiders people write, crawled twice, on every backend, beside Scrapy's scheduler.

Styles (tests/crawls/styles_spiders.py): a CrawlSpider with several rules, a SitemapSpider on a
sitemap index, an XMLFeedSpider on an RSS feed, and a plain spider with cb_kwargs, a
meta chain, an errback, follow_all, a FormRequest POST, Request.replace, an async
callback and an async start(). Items go through a pipeline into a JSON-lines feed.

Run 1, on every backend: the same items, as a set, as Scrapy's own scheduler gives.
Run 2 (SQLite and Redis keep the history between runs): some pages changed, some were
removed (404), the rest did not change. No spider error; the items of the changed and
removed pages equal what Scrapy's scheduler gives for them on the changed site (so
callbacks got the same cb_kwargs and meta as in run 1); the unchanged pages answer 304,
counted in stats and not logged one by one.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.redis_server import RedisServer
from tests.styles_site import StyleSite

ROOT = Path(__file__).resolve().parents[2]
STYLES = ("rules", "map", "feed", "plain")
_names = itertools.count()


def _article(n: int, version: int) -> str:
    return (f"<html><body><h1>Article {n}</h1><span id='v'>a{n}v{version}</span>"
            "<a href='/'>home</a></body></html>")


def _build(site: StyleSite) -> None:
    """Version 1 of the site."""
    base = site.base
    articles = "".join(f"<a href='/articles/{n}'>article {n}</a>" for n in range(1, 5))
    site.put("/", "<html><body><span id='v'>home1</span>"
             "<a class='item' href='/items/1'>i1</a><a class='item' href='/items/2'>i2</a>"
             "<a class='item' href='/items/3'>i3</a>"
             "<a class='item' href='/items/missing'>gone</a>"
             "<a href='/sections/a'>s</a><a href='/sections/b'>s</a>"
             f"<a href='/sections/private'>s</a>{articles}</body></html>")
    for n in (1, 2, 3):
        more = "<a class='more' href='/items/3-more'>more</a>" if n == 3 else ""
        site.put(f"/items/{n}", f"<html><body><span id='v'>i{n}v1</span>{more}</body></html>")
    site.put("/items/3-more", "<html><body><span id='v'>i3mv1</span></body></html>")
    site.put("/sections/a", "<html><body><span id='v'>sa1</span>"
             "<a href='/articles/1'>article 1</a><a href='/articles/2'>article 2</a>"
             "</body></html>")
    site.put("/sections/b", "<html><body><span id='v'>sb1</span>"
             "<a href='/articles/3'>article 3</a><a href='/articles/4'>article 4</a>"
             "</body></html>")
    site.put("/sections/private", "<html><body><a href='/articles/9'>article 9</a>"
             "</body></html>")
    for n in (1, 2, 3, 4, 9):
        site.put(f"/articles/{n}", _article(n, 1))
    xml = "application/xml"
    site.put("/sitemap.xml", "<?xml version='1.0'?><sitemapindex "
             "xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
             f"<sitemap><loc>{base}/sitemap-articles.xml.gz</loc></sitemap>"
             f"<sitemap><loc>{base}/sitemap-sections.xml</loc></sitemap></sitemapindex>", xml)
    locs = "".join(f"<url><loc>{base}/articles/{n}</loc></url>" for n in range(1, 5))
    urlset = "<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
    site.put("/sitemap-articles.xml.gz", f"<?xml version='1.0'?>{urlset}{locs}</urlset>",
             "application/gzip")
    site.put("/sitemap-sections.xml", f"<?xml version='1.0'?>{urlset}"
             f"<url><loc>{base}/sections/a</loc></url>"
             f"<url><loc>{base}/sections/b</loc></url></urlset>", xml)
    items = "".join(f"<item><title>Article {n}</title><link>{base}/articles/{n}</link></item>"
                    for n in range(1, 4))
    site.put("/feed.rss", f"<?xml version='1.0'?><rss version='2.0'><channel>"
             f"<title>news</title>{items}</channel></rss>", "application/rss+xml")


#: Run 2: these pages change, these are removed; everything else stays the same.
CHANGED = ("/articles/1", "/items/1", "/items/3-more", "/sections/b")
REMOVED = ("/articles/2", "/items/2")


def _change(site: StyleSite) -> None:
    site.put("/articles/1", _article(1, 2))
    site.put("/items/1", "<html><body><span id='v'>i1v2</span></body></html>")
    site.put("/items/3-more", "<html><body><span id='v'>i3mv2</span></body></html>")
    site.put("/sections/b", "<html><body><span id='v'>sb2</span>"
             "<a href='/articles/3'>article 3</a><a href='/articles/4'>article 4</a>"
             "</body></html>")
    for path in REMOVED:
        site.remove(path)


def _crawl(style: str, site: StyleSite, workdir: Path, settings: dict[str, Any]
           ) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    workdir.mkdir(parents=True, exist_ok=True)
    items = workdir / "items.jsonl"
    items.unlink(missing_ok=True)
    stats = workdir / "stats.json"
    full = {"LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
            "FEEDS": {str(items): {"format": "jsonlines"}}, **settings}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.crawls.styles_spiders", style, site.base, json.dumps(full),
         str(stats)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    lines = items.read_text().splitlines() if items.exists() else []
    return [json.loads(line) for line in lines], json.loads(stats.read_text()), output


def _frontier(backend: str, workdir: Path, redis_server: RedisServer | None
              ) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "ADDONS": {"scrapy_frontier.Addon": 0}, "FRONTIER_BACKEND": backend,
        "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_RECRAWL_MIN": 0.2,
        "FRONTIER_RECRAWL_INITIAL": 1.0, "FRONTIER_RECRAWL_MAX": 600.0}
    if backend == "sqlite":
        settings["JOBDIR"] = str(workdir / "job")
    if backend == "redis":
        assert redis_server is not None
        name = f"style{next(_names)}"
        settings.update({"REDIS_URL": redis_server.url,
                         "FRONTIER_REDIS_KEY": f"{name}:frontier:",
                         "FRONTIER_REDIS_SEEN_KEY": f"{name}:seen:",
                         "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history:",
                         "FRONTIER_REDIS_IDLE_GRACE": 0.5})
    return settings


def _bag(items: list[dict[str, Any]], sources: set[str] | None = None) -> Counter[str]:
    return Counter(json.dumps(i, sort_keys=True) for i in items
                   if sources is None or i["source"] in sources)


def _errors(stats: dict[str, Any], output: str) -> list[str]:
    found = [k for k in stats if k.startswith("spider_exceptions")]
    found += [line for line in output.splitlines() if "Traceback" in line or "] ERROR:" in line]
    return found


@pytest.mark.crawl
@pytest.mark.parametrize("style", STYLES)
def test_run_one_gives_scrapys_items_on_every_backend(style: str, tmp_path: Path,
                                                      redis_server: RedisServer) -> None:
    with StyleSite() as site:
        _build(site)
        baseline, _, _ = _crawl(style, site, tmp_path / "scrapy", {})
        assert baseline, "the baseline crawl scraped nothing"
        for backend in ("memory", "sqlite", "redis"):
            items, stats, output = _crawl(style, site, tmp_path / backend,
                                          _frontier(backend, tmp_path / backend, redis_server))
            assert _errors(stats, output) == [], output[-3000:]
            assert stats["frontier/backend"] == backend
            assert _bag(items) == _bag(baseline), backend


@pytest.mark.crawl
# On the oldest versions SQLite runs the replay (the same codec as Redis's); the newest leg
# runs both.
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.slow)])
@pytest.mark.parametrize("style", STYLES)
def test_run_two_replays_the_spiders_requests(style: str, backend: str, tmp_path: Path,
                                              redis_server: RedisServer) -> None:
    settings = _frontier(backend, tmp_path, redis_server)
    with StyleSite() as site:
        _build(site)
        first, _, output = _crawl(style, site, tmp_path / "run1", settings)
        assert first and _errors({}, output) == [], output[-3000:]
        fetched_once = {path for _, path, status in site.requests() if status == 200}
        _change(site)
        time.sleep(1.3)  # every page falls due (1 s after its visit)
        before = len(site.requests())
        second, stats, output = _crawl(style, site, tmp_path / "run2", settings)
        run2 = site.requests()[before:]
        expected, _, _ = _crawl(style, site, tmp_path / "scrapy", {})
    assert _errors(stats, output) == [], output[-3000:]
    base = site.base
    touched = {base + p for p in CHANGED + REMOVED if p in fetched_once}
    assert touched, "the style reached none of the changed pages"
    # The changed and removed pages give Scrapy's items, cb_kwargs and meta included.
    assert _bag(second, touched) == _bag(expected, touched)
    # Unchanged pages answered 304, counted, and not logged one by one.
    not_modified = [path for method, path, status in run2 if status == 304]
    assert not_modified, run2
    assert stats["frontier/recrawl/not_modified"] == len(not_modified)
    assert "Ignoring response <304" not in output
    # Nothing unsafe was repeated: the form POST is not recrawled.
    assert not any(method == "POST" for method, _, _ in run2)
