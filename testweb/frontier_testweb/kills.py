"""A crawl killed again and again at random moments, then run to its end.

Each kill is made by the crawl itself (``self_kill`` in :func:`~frontier_testweb.crawl.run_crawl`):
it writes down what was in flight, then SIGKILLs itself, so that what a kill may repeat is
known exactly. Used by the crash tests and by ``benchmarks/bench_kills.py``.
"""

from __future__ import annotations

import collections
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from frontier_testweb.crawl import CrawlResult, run_crawl
from frontier_testweb.log import LogEntry, read_log

Page = tuple[str, str]


def page_of(url: str) -> Page:
    """(host, path) as the server's log names a request."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.path + (f"?{parts.query}" if parts.query else "")


@dataclass
class KilledCrawl:
    """What a crawl killed ``kills`` times left behind."""

    kills: int
    final: CrawlResult | None
    entries: list[LogEntry]
    #: Pages in flight at the kills (a page in flight at two kills counts twice).
    in_flight: collections.Counter[Page] = field(default_factory=collections.Counter)
    #: Items of the feed by page; lines of the feed that are not valid JSON.
    items: collections.Counter[Page] = field(default_factory=collections.Counter)
    bad_lines: int = 0

    @property
    def pages(self) -> set[Page]:
        """Pages the server answered with 200 (each yields one item)."""
        return {(e.host, e.path) for e in self.entries if e.status == 200}

    @property
    def missing_items(self) -> set[Page]:
        return self.pages - set(self.items)

    @property
    def extra_items(self) -> dict[Page, int]:
        return {page: n - 1 for page, n in self.items.items() if n > 1}

    @property
    def extra_fetches(self) -> dict[Page, int]:
        fetches = collections.Counter((e.host, e.path) for e in self.entries)
        return {page: n - 1 for page, n in fetches.items() if n > 1}

    def beyond_in_flight(self, extra: dict[Page, int]) -> dict[Page, int]:
        """Pages repeated more often than they were in flight at a kill."""
        return {page: n for page, n in extra.items() if n > self.in_flight[page]}

    def summary(self) -> str:
        return (f"{self.kills} kills, {len(self.pages)} pages, {sum(self.items.values())} "
                f"items ({len(self.missing_items)} pages without one, {self.bad_lines} bad "
                f"lines), {sum(self.extra_items.values())} repeated items, "
                f"{sum(self.extra_fetches.values())} repeated fetches, "
                f"{sum(self.in_flight.values())} in flight at the kills")


def crawl_with_kills(start_urls: list[str], settings: dict[str, Any], log: Path, feed: Path,
                     workdir: Path, *, kills: int, seed: int,
                     window: tuple[float, float] = (0.3, 1.0),
                     timeout: float = 240.0, cwd: Path | None = None) -> KilledCrawl:
    """Crawl with an item per page into the JSON Lines ``feed`` (which ``settings``' FEEDS
    names), killing the crawl ``kills`` times, each a random time within ``window`` after
    the spider opened, then let it run to its end (bounded: a few runs more). ``cwd``: where
    the crawls run (``python -m`` imports from there first)."""
    rng = random.Random(seed)
    in_flight: collections.Counter[Page] = collections.Counter()
    done = 0
    final = None
    for attempt in range(kills + 3):
        report = workdir / f"kill{attempt}.json"
        self_kill = ({"after": rng.uniform(*window), "report": str(report)}
                     if done < kills else None)
        result = run_crawl(start_urls, settings, workdir=workdir / f"run{attempt}",
                           items=True, self_kill=self_kill, timeout=timeout, cwd=cwd)
        if result.returncode == -9 and report.exists():
            in_flight.update(page_of(url) for url in json.loads(report.read_text())["in_flight"])
            done += 1
            continue
        final = result
        break
    crawl = KilledCrawl(done, final, read_log(log), in_flight)
    for line in feed.read_bytes().splitlines() if feed.exists() else []:
        try:
            crawl.items[page_of(json.loads(line)["url"])] += 1
        except (ValueError, KeyError, TypeError):
            crawl.bad_lines += 1
    return crawl
