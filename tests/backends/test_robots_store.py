"""The robots.txt store of every backend (``RobotsPort.robots_get`` / ``robots_put``):
one contract on memory, SQLite, Redis and a Redis Cluster, through a real scheduler and the
add-on's RobotsCacheMiddleware, as Scrapy's robots.txt middleware reaches it."""

from __future__ import annotations

import logging
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from twisted.internet.defer import Deferred, ensureDeferred

from scrapy_frontier.codec import RowKeys
from scrapy_frontier.core.robots_cache import STALE_LIMIT, RobotsRecord, encode, seal
from scrapy_frontier.downloadermiddlewares import RobotsCacheMiddleware
from scrapy_frontier.meta import ROBOTS_ORIGIN_META, ROBOTS_STALE_META
from scrapy_frontier.scheduler.robots_cache import Kept
from tests.contract_helpers import CONTRACT_DRIVERS, Driver, Run, driver_for

Gen = Generator[Any, Any, None]
ORIGIN = "http://example.com:8080"
ROBOTS = b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n"
KEY = "k" * 32


@pytest.fixture(params=CONTRACT_DRIVERS)
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    return driver_for(request.param, tmp_path, request.getfixturevalue)


def _robots_request(url: str = f"{ORIGIN}/robots.txt") -> Request:
    """As Scrapy's RobotsTxtMiddleware makes it."""
    return Request(url, priority=1000, meta={"dont_obey_robotstxt": True})


def _ask(mw: RobotsCacheMiddleware, request: Request) -> Deferred[Any]:
    out = mw.process_request(request)
    return ensureDeferred(out) if out is not None else Deferred.fromCoroutine(_none())


async def _none() -> None:
    return None


@pytest_twisted.inlineCallbacks
def test_a_fetched_robots_txt_answers_the_next_request_of_every_run(driver: Driver) -> Gen:
    run = Run(driver)
    yield run.open()
    try:
        controls = run.scheduler.backend.robots
        # Nothing kept yet: the request goes to the site.
        got = controls.robots_get(ORIGIN)
        if driver.backend == "redis":
            assert not got.called  # read on the I/O thread, never on the reactor
        assert (yield got) is None
        mw = RobotsCacheMiddleware(run.crawler)
        request = _robots_request()
        assert (yield _ask(mw, request)) is None
        assert request.meta[ROBOTS_ORIGIN_META] == ORIGIN
        mw.process_response(request, Response(request.url, status=200, body=ROBOTS,
                                              request=request))
        stats = run.crawler.stats
        assert stats.get_value("frontier/robots/stored") == 1
        again = _robots_request()
        answer = yield _ask(mw, again)
        assert isinstance(answer, Response)
        assert (answer.status, answer.body, answer.flags) == (200, ROBOTS, ["cached"])
        assert stats.get_value("frontier/robots/cached") == 1
        # A kept answer is not kept again; another origin has none.
        mw.process_response(again, answer)
        assert stats.get_value("frontier/robots/stored") == 1
        assert (yield controls.robots_get("https://example.com")) is None
    finally:
        yield run.close()
    if not driver.persistent:
        return
    # The next run (or another worker) finds it.
    later = Run(driver)
    yield later.open()
    try:
        answer = yield _ask(RobotsCacheMiddleware(later.crawler), _robots_request())
        assert isinstance(answer, Response) and answer.body == ROBOTS
    finally:
        yield later.close()


@pytest_twisted.inlineCallbacks
def test_a_record_replaces_the_one_before_and_a_bad_one_is_fetched_again(
        driver: Driver, caplog: pytest.LogCaptureFixture) -> Gen:
    run = Run(driver)
    yield run.open()
    try:
        controls = run.scheduler.backend.robots
        cache = run.scheduler.robots.cache
        now = cache.wall()
        controls.robots_put(ORIGIN, encode(RobotsRecord(200, b"old", now)), 60.0)
        controls.robots_put(ORIGIN, encode(RobotsRecord(404, b"", now)), 60.0)
        kept = yield cache.lookup(ORIGIN)
        assert kept == Kept(RobotsRecord(404, b"", now), fresh=True)
        with caplog.at_level(logging.DEBUG, logger="scrapy_frontier.robots"):
            for raw in (b"not a record", encode(RobotsRecord(200, b"x", now + 86400))):
                controls.robots_put(ORIGIN, raw, 60.0)
                assert (yield cache.lookup(ORIGIN)) is None
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "fetched again" in warnings[0].getMessage()
        assert run.crawler.stats.get_value("frontier/robots/cache_invalid") == 2
    finally:
        yield run.close()


@pytest_twisted.inlineCallbacks
def test_a_stale_answer_stands_in_while_the_robots_txt_is_unreachable(driver: Driver) -> Gen:
    """RFC 9309: a copy past FRONTIER_ROBOTS_CACHE (here 2 days old) is not used while the
    site answers, but stands in for a 5xx or no answer; such answers are never kept."""
    run = Run(driver)
    yield run.open()
    try:
        controls = run.scheduler.backend.robots
        mw = RobotsCacheMiddleware(run.crawler)
        stats = run.crawler.stats
        # Nothing kept: the 503 goes to Scrapy's middleware as it is, and is not kept.
        request = _robots_request()
        yield _ask(mw, request)
        down = Response(request.url, status=503, body=b"<html>down</html>", request=request)
        assert mw.process_response(request, down) is down
        assert mw.process_exception(request, TimeoutError()) is None
        assert (yield controls.robots_get(ORIGIN)) is None
        old = RobotsRecord(200, ROBOTS, run.scheduler.robots.cache.wall() - 2 * 86400)
        controls.robots_put(ORIGIN, encode(old), STALE_LIMIT)
        for n, outcome in enumerate((503, TimeoutError("no answer")), start=1):
            request = _robots_request()
            assert (yield _ask(mw, request)) is None  # stale: the site is asked
            assert request.meta[ROBOTS_STALE_META] == old
            if isinstance(outcome, int):
                answer = mw.process_response(request, Response(
                    request.url, status=outcome, body=b"<html>down</html>", request=request))
            else:
                answer = mw.process_exception(request, outcome)
            assert isinstance(answer, Response)
            assert (answer.status, answer.body, answer.flags) == (200, ROBOTS,
                                                                  ["cached", "stale"])
            assert stats.get_value("frontier/robots/stale_used") == n
            mw.process_response(request, answer)  # passes the chain again: kept once only
        ignored = _robots_request()
        yield _ask(mw, ignored)
        assert mw.process_exception(ignored, IgnoreRequest()) is None  # the project's choice
        assert stats.get_value("frontier/robots/stored") is None
        assert stats.get_value("frontier/robots/cached") is None
        assert (yield run.scheduler.robots.cache.lookup(ORIGIN)) == Kept(old, fresh=False)
        # The site's answer, when it has one, replaces the copy; a 404 is no rules.
        request = _robots_request()
        yield _ask(mw, request)
        answer = mw.process_response(request, Response(request.url, status=404,
                                                       request=request))
        assert answer.flags == [] and stats.get_value("frontier/robots/stored") == 1
        kept = yield run.scheduler.robots.cache.lookup(ORIGIN)
        assert kept is not None and kept.fresh and kept.record.status == 404
    finally:
        yield run.close()


@pytest_twisted.inlineCallbacks
def test_the_cache_off_answers_nothing_and_keeps_nothing(driver: Driver) -> Gen:
    run = Run(driver, extra={"FRONTIER_ROBOTS_CACHE": 0})
    yield run.open()
    try:
        assert run.scheduler.robots.cache is None
        mw = RobotsCacheMiddleware(run.crawler)
        request = _robots_request()
        assert mw.process_request(request) is None
        mw.process_response(request, Response(request.url, body=ROBOTS, request=request))
        assert (yield run.scheduler.backend.robots.robots_get(ORIGIN)) is None
    finally:
        yield run.close()


@pytest_twisted.inlineCallbacks
def test_with_keys_a_forged_record_is_fetched_again_and_the_sites_answer_kept_sealed(
        driver: Driver, caplog: pytest.LogCaptureFixture) -> Gen:
    """Whoever can write the store (Redis) may plant a permissive robots.txt: with
    FRONTIER_SIGNING_KEYS it is not used, and the site is asked."""
    run = Run(driver, extra={"FRONTIER_SIGNING_KEYS": [KEY]})
    yield run.open()
    try:
        controls = run.scheduler.backend.robots
        now = run.scheduler.robots.cache.wall()
        allow_all = encode(RobotsRecord(200, b"User-agent: *\nAllow: /\n", now))
        forged = (
            allow_all,  # unsealed, as a client without the key writes it
            seal(RowKeys(["o" * 32]), ORIGIN, allow_all),  # sealed with another key
            seal(RowKeys([KEY]), "https://example.org", allow_all),  # another site's, copied
        )
        mw = RobotsCacheMiddleware(run.crawler)
        with caplog.at_level(logging.DEBUG, logger="scrapy_frontier.robots"):
            for raw in forged:
                controls.robots_put(ORIGIN, raw, 60.0)
                request = _robots_request()
                assert (yield _ask(mw, request)) is None  # fetched from the site
        stats = run.crawler.stats
        assert stats.get_value("frontier/robots/cache_invalid") == 3
        assert stats.get_value("frontier/robots/cached") is None
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "not sealed" in warnings[0].getMessage()
        # The site's answer replaces the forged record, sealed, and answers next time.
        mw.process_response(request, Response(request.url, status=200, body=ROBOTS,
                                              request=request))
        kept = yield controls.robots_get(ORIGIN)
        assert bytes(kept)[:1] == b"\x03"
        answer = yield _ask(mw, _robots_request())
        assert isinstance(answer, Response) and answer.body == ROBOTS
    finally:
        yield run.close()
