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
from scrapy_frontier.core.robots_cache import STALE_LIMIT, RobotsRecord, encode
from scrapy_frontier.scheduler.robots_cache import Kept, RobotsCache, robots_origin

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


def _kept(cache: RobotsCache, origin: str) -> Kept | None:
    out: list[Kept | None] = []
    cache.lookup(origin).addCallback(out.append)
    return out[0]


def _lookup(cache: RobotsCache, origin: str) -> RobotsRecord | None:
    """The fresh record: the one that answers without a fetch."""
    kept = _kept(cache, origin)
    return kept.record if kept is not None and kept.fresh else None


def test_a_kept_answer_is_reused_until_its_age_reaches_the_setting() -> None:
    cache, store, wall, stats = _cache(max_age=DAY)
    assert cache.keep("http://a.example", 200, b"Disallow: /x")
    assert store.keeps == [STALE_LIMIT]  # the store keeps it 30 days, for stand_in
    wall.now += DAY - 1
    assert _lookup(cache, "http://a.example") == RobotsRecord(200, b"Disallow: /x",
                                                              wall.now - DAY + 1)
    wall.now += 1  # 24 hours after the fetch: fetched again
    assert _lookup(cache, "http://a.example") is None
    assert stats.get_value("frontier/robots/cached") == 1
    assert stats.get_value("frontier/robots/stored") == 1


def test_a_stale_answer_stands_in_only_for_an_unreachable_one_for_30_days(
        caplog: pytest.LogCaptureFixture) -> None:
    cache, store, wall, stats = _cache(max_age=3600.0)
    fetched = wall.now
    assert cache.keep("http://a.example", 200, b"Disallow: /x")
    record = RobotsRecord(200, b"Disallow: /x", fetched)
    wall.now += 3600.0  # no longer fresh: the site is asked, the record goes along
    assert _kept(cache, "http://a.example") == Kept(record, fresh=False)
    with caplog.at_level(logging.INFO, logger="scrapy_frontier.robots"):
        for status in (503, 429, None):
            assert cache.stand_in("http://a.example", record, status) == record
    assert stats.get_value("frontier/robots/stale_used") == 3
    assert "unreachable (status 503)" in caplog.records[0].getMessage()
    assert "1.0 hours ago" in caplog.records[0].getMessage()
    # The site's rules, or nothing kept: the answer stands (Scrapy's way).
    assert cache.stand_in("http://a.example", record, 200) is None
    assert cache.stand_in("http://a.example", record, 404) is None
    assert cache.stand_in("http://a.example", None, 503) is None
    # An unreachable answer is not kept: the record before stays for the next worker.
    assert not cache.keep("http://a.example", 503, b"<html>down</html>")
    assert store.records["http://a.example"] == encode(record)
    wall.now = fetched + STALE_LIMIT - 1
    kept = _kept(cache, "http://a.example")
    assert kept is not None and not kept.fresh
    assert cache.stand_in("http://a.example", kept.record, 503) == record
    wall.now = fetched + STALE_LIMIT  # 30 days: not even for an unreachable file
    assert _kept(cache, "http://a.example") is None
    assert cache.stand_in("http://a.example", record, 503) is None
    assert stats.get_value("frontier/robots/stale_used") == 4
    assert stats.get_value("frontier/robots/cached") is None


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
