"""Nothing lost, counted as the user counts it: the items in the feed.

A JOBDIR crawl (or a Redis, or Redis Cluster, crawl) with a JSON Lines feed and an item
pipeline that holds each item for a few milliseconds is killed 20 times at random moments,
then run to its end (:func:`frontier_testweb.kills.crawl_with_kills`). Each kill is made by
the crawl itself: it writes down what was in flight, then SIGKILLs itself, so the bound on
repeats is known.

Afterwards every page the server answered has its item in the feed, every line of the
feed is valid JSON, and every item or fetch that came twice was in flight at a kill.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, audit
from frontier_testweb.crawl import FRONTIER_ADDON
from frontier_testweb.kills import crawl_with_kills
from tests.redis_cluster import RedisClusterServers
from tests.redis_server import RedisServer

pytestmark = pytest.mark.crawl

KILLS = 20
WEB = ["--shape", "wide", "--hosts", "12", "--pages", "80", "--latency", "0.005", "0.02",
       "--seed", "36"]
_names = itertools.count()


def _settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest,
              recrawl: str) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "ADDONS": FRONTIER_ADDON,
        "FRONTIER_MIN_DELAY": 0.2,
        "FRONTIER_RECRAWL": recrawl,
        "FEEDS": {str(tmp_path / "items.jsonl"): {"format": "jsonlines"}},
    }
    if backend == "sqlite":
        settings["JOBDIR"] = str(tmp_path / "job")
    else:
        cluster = backend == "cluster"
        server: RedisServer | RedisClusterServers = request.getfixturevalue(
            "redis_cluster" if cluster else "redis_server")
        name = f"kills{next(_names)}{recrawl}"
        settings.update({
            "FRONTIER_BACKEND": "redis", "REDIS_URL": server.url,
            "FRONTIER_REDIS_KEY": f"{name}:frontier:",
            "FRONTIER_REDIS_IDLE_GRACE": 1.0,
            # A killed run's leases lapse this long after its last renewal: the next run
            # waits for them.
            "FRONTIER_REDIS_LIVENESS": 1.0,
        })
        if cluster:  # three partitions, each with its own seen set and history
            settings.update({"FRONTIER_REDIS_CLUSTER": True, "FRONTIER_REDIS_PARTITIONS": 3})
        else:
            settings.update({"FRONTIER_REDIS_SEEN_KEY": f"{name}:seen:",
                             "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history:"})
    return settings


@pytest.mark.slow  # a minute or more: the newest leg runs it, the oldest leg leaves it out
@pytest.mark.parametrize(("backend", "recrawl"),
                         [("sqlite", "due"), ("sqlite", "off"), ("redis", "due"),
                          ("cluster", "due")])
def test_twenty_kills_lose_no_item_and_repeat_only_what_was_in_flight(
        backend: str, recrawl: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    settings = _settings(backend, tmp_path, request, recrawl)
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        crawl = crawl_with_kills(web.start_urls, settings, log, tmp_path / "items.jsonl",
                                 tmp_path, kills=KILLS, seed=36)
    final = crawl.final
    assert final is not None and final.returncode == 0, None if final is None else \
        final.output[-3000:]
    assert final.stats["finish_reason"] == "finished", final.output[-3000:]
    assert crawl.kills == KILLS, "the crawl finished before the last kill: make the web bigger"
    print(f"{backend}, recrawl {recrawl}: {crawl.summary()}")
    assert crawl.bad_lines == 0, crawl.summary()  # every line is whole, valid JSON
    assert not crawl.missing_items, sorted(crawl.missing_items)[:10]
    # An item or a fetch comes twice only if its page was in flight at a kill, and no
    # more often than that page was.
    assert not crawl.beyond_in_flight(crawl.extra_items), crawl.summary()
    assert not crawl.beyond_in_flight(crawl.extra_fetches), crawl.summary()
    audited = audit(crawl.entries, expected=web.expected, min_delay=0.2)
    assert audited.coverage == 1.0, audited.summary()
    assert audited.overlaps == 0 and audited.short_gaps == 0, audited.summary()
