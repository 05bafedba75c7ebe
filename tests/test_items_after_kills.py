"""Nothing lost, counted as the user counts it: the items in the feed.

A JOBDIR crawl (or a Redis crawl) with a JSON Lines feed and an item pipeline that holds
each item for a few milliseconds is killed 20 times at random moments, then run to its end.
Each kill is made by the crawl itself (``self_kill`` in the harness): it writes down what
was in flight, then SIGKILLs itself, so the bound on repeats is known exactly.

Afterwards every page the server answered has its item in the feed, every line of the
feed is valid JSON, and every item or fetch that came twice was in flight at a kill.
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from tests.redis_server import RedisServer

pytestmark = pytest.mark.crawl

KILLS = 20
WEB = ["--shape", "wide", "--hosts", "12", "--pages", "40", "--latency", "0.005", "0.02",
       "--seed", "36"]


def _page(url: str) -> tuple[str, str]:
    """(host, path) as the server's log names a request."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.path + (f"?{parts.query}" if parts.query else "")


def _settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    feed = tmp_path / "items.jsonl"
    settings: dict[str, Any] = {
        "ADDONS": FRONTIER_ADDON,
        "FRONTIER_MIN_DELAY": 0.2,
        "FEEDS": {str(feed): {"format": "jsonlines"}},
    }
    if backend == "sqlite":
        settings["JOBDIR"] = str(tmp_path / "job")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        name = f"kills{random.randrange(1 << 30)}"
        settings.update({
            "FRONTIER_BACKEND": "redis", "REDIS_URL": server.url,
            "FRONTIER_REDIS_KEY": f"{name}:frontier:", "FRONTIER_REDIS_SEEN_KEY": f"{name}:seen:",
            "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history:",
            "FRONTIER_REDIS_IDLE_GRACE": 1.0,
            # A killed run's leases lapse this long after its last renewal: the next run
            # waits for them.
            "FRONTIER_REDIS_LIVENESS": 1.0,
        })
    return settings


@pytest.mark.slow  # a minute or more: the newest leg runs it, the oldest leg leaves it out
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_twenty_kills_lose_no_item_and_repeat_only_what_was_in_flight(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    rng = random.Random(36)
    settings = _settings(backend, tmp_path, request)
    log = tmp_path / "server.jsonl"
    in_flight: collections.Counter[tuple[str, str]] = collections.Counter()
    kills = 0
    with ServerProcess(WEB, log_path=str(log)) as web:
        final = None
        for attempt in range(KILLS + 3):  # bounded: the kills, then the run to the end
            report = tmp_path / f"kill{attempt}.json"
            self_kill = ({"after": rng.uniform(0.3, 1.2), "report": str(report)}
                         if kills < KILLS else None)
            result = run_crawl(web.start_urls, settings, workdir=tmp_path / f"run{attempt}",
                               items=True, self_kill=self_kill, timeout=240)
            if result.returncode == -9:
                assert report.exists(), result.output[-3000:]
                in_flight.update(_page(url) for url in json.loads(report.read_text())["in_flight"])
                kills += 1
                continue
            assert result.returncode == 0, result.output[-3000:]
            assert result.stats["finish_reason"] == "finished", result.output[-3000:]
            final = result
            break
        assert final is not None
    assert kills == KILLS, "the crawl finished before the last kill: make the web bigger"

    lines = (tmp_path / "items.jsonl").read_bytes().splitlines()
    items = [json.loads(line) for line in lines]  # every line is whole, valid JSON
    entries = read_log(log)
    pages = {(e.host, e.path) for e in entries if e.status == 200}
    got = collections.Counter(_page(item["url"]) for item in items)
    missing = pages - set(got)
    assert not missing, (len(missing), sorted(missing)[:10])
    # An item comes twice only if its page was in flight at a kill, and no more often
    # than that page was.
    extra_items = {url: n - 1 for url, n in got.items() if n > 1}
    too_many = {url: n for url, n in extra_items.items() if n > in_flight[url]}
    assert not too_many, (too_many, sum(in_flight.values()))
    fetches = collections.Counter((e.host, e.path) for e in entries)
    extra_fetches = {url: n - 1 for url, n in fetches.items() if n > 1}
    too_often = {url: n for url, n in extra_fetches.items() if n > in_flight[url]}
    assert not too_often, (too_often, sum(in_flight.values()))
    audited = audit(entries, expected=web.expected, min_delay=0.2)
    print(f"{backend}: {kills} kills, {len(pages)} pages, {len(items)} items, "
          f"{sum(extra_items.values())} repeated items, {sum(extra_fetches.values())} "
          f"repeated fetches, {sum(in_flight.values())} in flight at the kills; "
          f"{audited.summary()}")
    assert audited.coverage == 1.0, audited.summary()
    assert audited.overlaps == 0 and audited.short_gaps == 0, audited.summary()
