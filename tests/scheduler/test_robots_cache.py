"""The shell's robots.txt cache on an injected wall clock: what is kept, for how long, and
which requests it answers (no sleeping)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred, succeed

from scrapy_frontier.codec import RowKeys
from scrapy_frontier.core.robots_cache import RobotsRecord, encode
from scrapy_frontier.scheduler.robots_cache import RobotsCache, robots_origin

DAY = 86400.0


class Store:
    """A port's two robots.txt members over a dict, as the memory backend's."""

    def __init__(self) -> None:
        self.records: dict[str, bytes] = {}
        self.keeps: list[float] = []

    def robots_get(self, origin: str) -> Deferred[object]:
        return succeed(self.records.get(origin))

    def robots_put(self, origin: str, record: bytes, keep: float) -> None:
        self.records[origin] = record
        self.keeps.append(keep)


class Wall:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _cache(max_age: float = DAY, keys: RowKeys | None = None
           ) -> tuple[RobotsCache, Store, Wall, Any]:
    store, wall = Store(), Wall()
    stats = MemoryStatsCollector(get_crawler())
    cache = RobotsCache(store, stats, max_age, keys=keys, wall=wall)  # type: ignore[arg-type]
    return cache, store, wall, stats


def _lookup(cache: RobotsCache, origin: str) -> RobotsRecord | None:
    out: list[RobotsRecord | None] = []
    cache.lookup(origin).addCallback(out.append)
    return out[0]


def test_a_kept_answer_is_reused_until_its_age_reaches_the_setting() -> None:
    cache, store, wall, stats = _cache(max_age=DAY)
    assert cache.keep("http://a.example", 200, b"Disallow: /x")
    assert store.keeps == [DAY]
    wall.now += DAY - 1
    assert _lookup(cache, "http://a.example") == RobotsRecord(200, b"Disallow: /x",
                                                              wall.now - DAY + 1)
    wall.now += 1  # 24 hours after the fetch: fetched again
    assert _lookup(cache, "http://a.example") is None
    assert stats.get_value("frontier/robots/cached") == 1
    assert stats.get_value("frontier/robots/stored") == 1


@pytest.mark.parametrize(("status", "kept"), [
    (200, True), (404, True), (403, True), (429, False), (500, False), (503, False),
    (301, False)])
def test_rfc_9309s_definitive_answers_are_kept_and_unreachable_ones_are_not(
        status: int, kept: bool) -> None:
    cache, store, _, _ = _cache()
    assert cache.keep("http://a.example", status, b"<html>error</html>") is kept
    record = _lookup(cache, "http://a.example")
    if not kept:
        assert record is None and not store.records  # the next worker or run asks again
    elif status >= 400:
        assert record is not None and record.body == b""  # no rules: allow all
    else:
        assert record is not None and record.body == b"<html>error</html>"


def test_only_a_sites_robots_txt_has_an_origin() -> None:
    assert robots_origin("http://Example.COM:8080/robots.txt") == "http://example.com:8080"
    assert robots_origin("https://[::1]/robots.txt") == "https://[::1]"
    for url in ("http://example.com/robots.txt?x=1", "http://example.com/a/robots.txt",
                "ftp://example.com/robots.txt", "http://u:p@example.com/robots.txt",
                "http:///robots.txt", "http://[::1/robots.txt"):
        assert robots_origin(url) is None, url


def test_with_keys_records_are_sealed_and_a_forged_one_is_fetched_again(
        caplog: pytest.LogCaptureFixture) -> None:
    keys = RowKeys(["k" * 32])
    cache, store, wall, stats = _cache(keys=keys)
    assert cache.keep("http://a.example", 200, b"Disallow: /x")
    kept = store.records["http://a.example"]
    assert kept[:1] == b"\x03"
    assert _lookup(cache, "http://a.example") == RobotsRecord(200, b"Disallow: /x", wall.now)
    permissive = encode(RobotsRecord(200, b"User-agent: *\nAllow: /\n", wall.now))
    with caplog.at_level(logging.DEBUG, logger="scrapy_frontier.robots"):
        for forged in (permissive,  # unsealed
                       RowKeys(["o" * 32]).seal(b"http://a.example\n" + permissive),  # other key
                       kept):  # a.example's record, copied to b.example's key
            store.records["http://b.example"] = forged
            assert _lookup(cache, "http://b.example") is None
    assert stats.get_value("frontier/robots/cache_invalid") == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not sealed" in warnings[0].getMessage()
    # A cache without keys neither reads a sealed record nor writes one.
    plain, plain_store, _, plain_stats = _cache()
    plain_store.records["http://a.example"] = kept
    assert _lookup(plain, "http://a.example") is None
    assert plain_stats.get_value("frontier/robots/cache_invalid") == 1
    assert plain.keep("http://a.example", 404, b"")
    assert plain_store.records["http://a.example"].startswith(b"robots1 404 ")
