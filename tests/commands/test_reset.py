"""``scrapy frontier reset --spider NAME`` deletes one Redis crawl's keys and nothing else;
scrapy-redis's switches that would delete a shared crawl at a worker's start or close are
refused at startup, naming the frontier's way."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from scrapy.settings import Settings

from scrapy_frontier.backends.redis.frontier import RedisFrontier
from scrapy_frontier.backends.redis.history import RedisHistoryStore
from scrapy_frontier.backends.redis.seen import RedisSeenSet
from scrapy_frontier.commands.reset import glob_literal
from scrapy_frontier.core.history import PageRecord
from scrapy_frontier.errors import FrontierConfigError
from scrapy_frontier.settings import refuse_scrapy_redis_switches
from tests.redis_server import RedisServer

SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]


def _crawl_keys(client: object, spider: str) -> RedisFrontier:
    """What a crawl of ``spider`` leaves in Redis: a queue, a seen set, a page history."""
    frontier = RedisFrontier(client, f"{spider}:frontier:")  # type: ignore[arg-type]
    frontier.push("a.example", 1, b"http://a.example/1")
    RedisSeenSet(client, f"{spider}:seen:", expected=1000).add_many([1, 2, 3])  # type: ignore[arg-type]
    history = RedisHistoryStore(client, f"{spider}:history:")
    history.put(PageRecord(fp=1, url="http://a.example/1"))
    history.flush()
    return frontier


def _reset(redis_server: RedisServer, spider: str, *extra: str,
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCRAPY, "frontier", "reset", "--spider", spider, *extra,
         "-s", "FRONTIER_BACKEND=redis", "-s", f"REDIS_URL={redis_server.url}"],
        capture_output=True, text=True, timeout=120, input=stdin, cwd="/tmp")


def _keys(client: object, pattern: str) -> set[bytes]:
    return set(client.scan_iter(match=pattern, count=1000))  # type: ignore[attr-defined]


def test_reset_deletes_one_crawls_keys_and_nothing_else(redis_server: RedisServer) -> None:
    client = redis_server.client()
    _crawl_keys(client, "rst1")
    _crawl_keys(client, "rst1x")  # another spider whose name starts the same way
    client.set("app:rst1:data", b"someone else's")
    before = _keys(client, "rst1:*")
    assert {k.split(b":")[1] for k in before} == {b"frontier", b"seen", b"history"}
    others = _keys(client, "rst1x:*") | {b"app:rst1:data"}

    refused = _reset(redis_server, "rst1")  # no terminal, no --yes: asks, cannot, refuses
    assert refused.returncode == 1 and "--yes" in refused.stderr, refused.stderr
    assert "Nothing was changed" in refused.stderr and _keys(client, "rst1:*") == before

    done = _reset(redis_server, "rst1", "--yes")
    assert done.returncode == 0, done.stderr
    assert f"deleted {len(before)} key(s)" in done.stdout
    assert _keys(client, "rst1:*") == set()
    assert _keys(client, "rst1x:*") | {b"app:rst1:data"} == others
    assert client.get("app:rst1:data") == b"someone else's"


def test_reset_refuses_a_crawl_that_is_running_and_one_that_is_not_there(
        redis_server: RedisServer) -> None:
    client = redis_server.client()
    frontier = _crawl_keys(client, "rst2")
    lease = frontier.pop()  # a worker is fetching
    assert lease is not None
    running = _reset(redis_server, "rst2", "--yes")
    assert running.returncode == 1 and "leased" in running.stderr, running.stderr
    assert _keys(client, "rst2:frontier:*")
    frontier.complete(lease, 0.0)
    assert _reset(redis_server, "rst2", "--yes").returncode == 0
    missing = _reset(redis_server, "rst-none", "--yes")
    assert missing.returncode == 1 and "no frontier under" in missing.stderr, missing.stderr
    # A lease whose worker died (past its deadline, no worker left to take it back) does
    # not hold the reset back.
    _crawl_keys(client, "rst3")
    dead = RedisFrontier(client, "rst3:frontier:", liveness=0.2)  # type: ignore[arg-type]
    assert dead.pop() is not None
    time.sleep(0.3)
    assert dead.in_flight == 1
    assert _reset(redis_server, "rst3", "--yes").returncode == 0


def test_a_spider_name_with_glob_characters_matches_only_itself() -> None:
    assert glob_literal("a*b?[c]\\:") == "a\\*b\\?\\[c\\]\\\\:"


@pytest.mark.parametrize(("settings", "refused"), [
    ({}, None),
    ({"SCHEDULER_PERSIST": True}, None),
    ({"SCHEDULER_FLUSH_ON_START": False}, None),
    ({"SCHEDULER_PERSIST": False}, "SCHEDULER_PERSIST = False"),
    ({"SCHEDULER_PERSIST": "False"}, "SCHEDULER_PERSIST = False"),
    ({"SCHEDULER_FLUSH_ON_START": True}, "SCHEDULER_FLUSH_ON_START = True"),
    ({"SCHEDULER_PERSIST": "maybe"}, "must be True or False"),
])
def test_scrapy_redis_switches_that_delete_a_shared_crawl_are_refused(
        settings: dict[str, object], refused: str | None) -> None:
    if refused is None:
        refuse_scrapy_redis_switches(Settings(settings))
        return
    with pytest.raises(FrontierConfigError, match=refused) as caught:
        refuse_scrapy_redis_switches(Settings(settings))
    if "must be" not in refused:
        assert "scrapy frontier reset --spider NAME" in str(caught.value)


def test_the_crawl_does_not_start_with_scrapy_redis_persist_false() -> None:
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.scheduler import FrontierScheduler

    crawler = get_crawler(settings_dict={"SCHEDULER_PERSIST": False})
    with pytest.raises(FrontierConfigError, match="SCHEDULER_PERSIST"):
        FrontierScheduler.from_crawler(crawler)
