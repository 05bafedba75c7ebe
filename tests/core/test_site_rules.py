"""Politeness the way site owners ask for it: robots.txt Crawl-delay, Retry-After,
back-off after failures and retiring hosts that keep failing.

Core rules on a fake clock, the scheduler driven directly, then real crawls of the
test web audited from the server's own log.
"""

from __future__ import annotations

import math
import random
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from twisted.internet.error import TCPTimedOutError

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from frontier_testweb.log import LogEntry
from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier
from scrapy_frontier.core.site_rules import parse_retry_after, robots_delay
from scrapy_frontier.errors import FrontierConfigError
from scrapy_frontier.meta import LEASE_META
from scrapy_frontier.scheduler.engine import ProtegoDelays, robots_view
from scrapy_frontier.settings import FrontierConfig
from tests.invariants import check_frontier
from tests.scheduler.test_scheduler import make_scheduler

NO_REST = DelayPolicy(factor=0.0, min_delay=0.0, max_delay=0.0)


def make(**kwargs: Any) -> tuple[Frontier[str], FakeClock]:
    clock = FakeClock(100.0)
    kwargs.setdefault("policy", NO_REST)
    kwargs.setdefault("rng", random.Random(7))
    return Frontier(clock=clock, **kwargs), clock


# -- core: per-host floor, rest_at_least, retire ----------------------------------------------


def test_min_rest_is_a_floor_under_the_policy_and_survives_forgetting() -> None:
    f, clock = make(policy=DelayPolicy(factor=10.0, min_delay=0.0, max_delay=60.0))
    f.set_min_rest("a", 2.0)
    f.push("a", 1, "a1")
    lease = f.pop()
    assert lease is not None
    f.complete(lease.ticket, 0.05)  # policy: 0.5 s; floor: 2 s
    assert f.next_contact("a") == pytest.approx(102.0)
    check_frontier(f)
    # The host is forgotten once its rest is over; the floor is not.
    clock.advance(5.0)
    assert f.pop() is None
    assert f.next_contact("a") is None
    f.push("a", 1, "a2")
    lease = f.pop()
    assert lease is not None and lease.item == "a2"
    f.complete(lease.ticket, 1.0)  # policy 10 s beats the 2 s floor
    assert f.next_contact("a") == pytest.approx(clock.now + 10.0)
    assert f.controls.min_rest("a") == 2.0
    f.set_min_rest("a", 0.0)
    assert f.controls.min_rest("a") == 0.0
    with pytest.raises(ValueError):
        f.set_min_rest("a", -1.0)


def test_rest_at_least_delays_the_next_contact_and_is_validated() -> None:
    f, clock = make()
    for i in range(3):
        f.push("a", 1, f"a{i}")
    lease = f.pop()
    assert lease is not None
    f.complete(lease.ticket, 0.0, rest_at_least=3.0)
    check_frontier(f)
    assert f.pop() is None
    assert f.next_wakeup() == pytest.approx(103.0)
    clock.advance(3.0)
    lease = f.pop()
    assert lease is not None
    with pytest.raises(ValueError):
        f.complete(lease.ticket, 0.0, rest_at_least=-1.0)
    # A normal completion afterwards uses the policy again.
    f.complete(lease.ticket, 0.0)
    assert f.next_contact("a") == pytest.approx(clock.now)


def test_retire_drops_back_queue_front_queue_and_later_pushes() -> None:
    # One back queue: b's URLs wait in the front queue while a is active.
    f, clock = make(back_queues=1)
    for i in range(4):
        f.push("a", 1, f"a{i}")
    for i in range(3):
        f.push("b", 1, f"b{i}")
    lease = f.pop()
    assert lease is not None and lease.host == "a"
    f.complete(lease.ticket, 0.0)
    dropped = f.retire("a")
    assert sorted(dropped) == ["a1", "a2", "a3"]
    assert f.is_retired("a")
    check_frontier(f)
    assert f.push("a", 1, "a-new") is False
    assert f.retire("a") == []  # idempotent
    items = []
    while True:
        lease = f.pop()
        if lease is None:
            break
        items.append(lease.item)
        f.complete(lease.ticket, 0.0)
        check_frontier(f)
    assert items == ["b0", "b1", "b2"]
    assert f.take_dropped() == []
    assert len(f) == 0
    assert f.stats.retired_hosts == 1
    assert f.stats.retired_items == 4  # 3 queued, 1 refused


def test_retired_host_urls_in_front_queues_are_dropped_when_they_surface() -> None:
    f, _ = make(back_queues=1)
    f.push("b", 1, "b0")  # b takes the only back queue
    f.push("b", 1, "b1")
    f.push("a", 1, "a0")  # front queue
    f.push("a", 2, "a1")
    assert f.retire("a") == []
    check_frontier(f)
    items = []
    while (lease := f.pop()) is not None:
        items.append(lease.item)
        f.complete(lease.ticket, 0.0)
        check_frontier(f)
    assert items == ["b0", "b1"]
    assert sorted(f.take_dropped()) == [("a", "a0"), ("a", "a1")]
    assert len(f) == 0 and f.stats.retired_items == 2


def test_retire_while_a_fetch_is_in_flight() -> None:
    f, _ = make(back_queues=2)
    for i in range(3):
        f.push("a", 1, f"a{i}")
    lease = f.pop()
    assert lease is not None
    assert f.retire("a") == ["a1", "a2"]
    check_frontier(f)
    assert f.push("a", 1, "x") is False
    f.complete(lease.ticket, 0.0)
    check_frontier(f)
    assert f.active_back_queues == 0 and len(f) == 0


def test_retire_unknown_host_refuses_its_pushes() -> None:
    f, _ = make()
    assert f.retire("never-seen") == []
    assert f.push("never-seen", 1, "x") is False
    assert f.push("other", 1, "y") is True
    check_frontier(f)


# -- scheduler: Retry-After, back-off, retirement, Crawl-delay ----------------------------------


def test_parse_retry_after_seconds_and_dates() -> None:
    now = 1_000_000_000.0
    assert parse_retry_after(b"120", now) == 120.0
    assert parse_retry_after(" 0 ", now) == 0.0
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now) == pytest.approx(30.0)
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now) == 0.0
    for bad in (None, b"", b"soon", b"-5", b"1.5e3x"):
        assert parse_retry_after(bad, now) is None
    # Huge is huge, not absent: the scheduler clamps it.
    assert parse_retry_after(b"99999999999999999999", now) == 1e20
    assert parse_retry_after(b"9" * 400, now) == math.inf


def test_a_twenty_digit_retry_after_is_clamped_not_ignored() -> None:
    sched, clock, crawler = make_scheduler({"FRONTIER_MAX_RETRY_AFTER": 100})
    for i in range(2):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    _respond(sched, clock, 503, {"Retry-After": "99999999999999999999"})
    assert sched.backend.frontier.next_contact("a.example") == pytest.approx(clock.now + 100.0)
    assert crawler.stats.get_value("frontier/retry_after/clamped") == 1


def _respond(sched: Any, clock: FakeClock, status: int, headers: dict[str, str] | None = None,
             *, exception: BaseException | None = None) -> Request:
    request = sched.next_request()
    assert request is not None
    sched.fetches.sent(request)
    response = None if exception else Response(request.url, status=status, headers=headers)
    sched.fetches.completed(request, response=response, exception=exception)
    return request


def test_retry_after_blocks_the_host_and_is_clamped() -> None:
    sched, clock, crawler = make_scheduler({"FRONTIER_MAX_RETRY_AFTER": 100})
    for i in range(4):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    _respond(sched, clock, 429, {"Retry-After": "30"})
    assert sched.backend.frontier.next_contact("a.example") == pytest.approx(130.0)
    assert sched.next_request() is None
    clock.now = 130.0
    _respond(sched, clock, 503, {"Retry-After": "7200"})
    assert sched.backend.frontier.next_contact("a.example") == pytest.approx(230.0)
    clock.now = 230.0
    _respond(sched, clock, 503, {"Retry-After": formatdate(time.time() + 20, usegmt=True)})
    nxt = sched.backend.frontier.next_contact("a.example")
    assert nxt is not None
    wait = nxt - 230.0
    assert 18.0 < wait <= 20.0
    stats = crawler.stats
    assert stats.get_value("frontier/retry_after/honoured") == 3
    assert stats.get_value("frontier/retry_after/clamped") == 1


def test_backoff_doubles_is_capped_and_resets_on_success() -> None:
    settings = {"FRONTIER_BACKOFF_BASE": 1.0, "FRONTIER_BACKOFF_MAX": 5.0,
                "FRONTIER_RETIRE_AFTER": 0}
    sched, clock, crawler = make_scheduler(settings)
    for i in range(8):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    rests = []
    outcomes: list[tuple[int, BaseException | None]] = [
        (500, None), (502, None), (0, TCPTimedOutError()), (429, None), (503, None),
        (200, None), (500, None), (0, IgnoreRequest()),
    ]
    for status, exc in outcomes:
        _respond(sched, clock, status, exception=exc)
        nxt = sched.backend.frontier.next_contact("a.example")
        rests.append(round((nxt if nxt is not None else clock.now) - clock.now, 6))
        clock.advance(10.0)
    # IgnoreRequest neither fails nor resets.
    assert rests == [1.0, 2.0, 4.0, 5.0, 5.0, 0.0, 1.0, 0.0]
    assert sched.fetches.rules._failures == {"a.example": 1}
    assert crawler.stats.get_value("frontier/backoff/count") == 6


def test_host_retired_after_consecutive_failures_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = {"FRONTIER_BACKOFF_BASE": 0.5, "FRONTIER_RETIRE_AFTER": 3}
    sched, clock, crawler = make_scheduler(settings)
    for i in range(15):
        sched.enqueue_request(Request(f"http://down.example/{i}"))
    sched.enqueue_request(Request("http://up.example/0"))
    seen = 0
    while seen < 3:
        request = sched.next_request()
        if request is None:
            clock.advance(1.0)
            continue
        sched.fetches.sent(request)
        if "up.example" in request.url:
            sched.fetches.completed(request, response=Response(request.url, status=200))
            continue
        seen += 1
        sched.fetches.completed(request, response=Response(request.url, status=503))
    assert sched.backend.frontier.is_retired("down.example")
    assert not sched.enqueue_request(Request("http://down.example/new"))
    sched.close("finished")
    stats = crawler.stats
    assert stats.get_value("frontier/retired_hosts") == 1
    assert stats.get_value("frontier/retired_requests") == 13  # 12 queued + 1 refused
    assert stats.get_value("frontier/retired_requests/refused") == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    retired = [m for m in warnings if "Retired host 'down.example'" in m]
    assert len(retired) == 1 and "dropped 12 queued requests" in retired[0]
    assert "and 2 more" in retired[0]
    assert len(sched.backend.frontier) == 0


class _Parser:
    def __init__(self, delay: float | None) -> None:
        self.delay = delay
        self.asked: list[str] = []

    def crawl_delay(self, agent: str) -> float | None:
        self.asked.append(agent)
        return self.delay


ROBOTS_BODIES = {
    2.0: b"User-agent: *\nCrawl-delay: 2\n",
    60.0: b"User-agent: ua-x\nCrawl-delay: 60\n\nUser-agent: *\nDisallow:\n",
    None: b"User-agent: *\nDisallow: /private\n",
}


@pytest.fixture(params=["signal", "responses"])
def robots_source(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the scheduler learns of parsed robots.txt files, whatever this Scrapy has:
    Scrapy's robots_parsed signal (>= 2.18), or the robots.txt responses (before)."""
    from scrapy import signals

    if request.param == "signal" and not hasattr(signals, "robots_parsed"):
        monkeypatch.setattr(signals, "robots_parsed", object(), raising=False)
    if request.param == "responses":
        monkeypatch.delattr(signals, "robots_parsed", raising=False)
    return str(request.param)


def _announce_robots(crawler: Any, source: str, host: str, delay: float | None) -> _Parser | None:
    """Tell the crawl that ``host``'s robots.txt was parsed, as this source does."""
    from scrapy import signals
    from scrapy.http import TextResponse

    url = f"http://{host}/robots.txt"
    send = crawler.signals.send_catch_log
    if source == "signal":
        parser = _Parser(delay)
        send(signals.robots_parsed, robotparser=parser, request=Request(f"http://{host}/page"))
        return parser
    robots = Request(url, meta={"dont_obey_robotstxt": True})
    send(signals.response_received, request=robots, spider=crawler.spider,
         response=TextResponse(url, body=ROBOTS_BODIES[delay], request=robots))
    return None


def test_crawl_delay_from_parsed_robots_txt(caplog: pytest.LogCaptureFixture,
                                            robots_source: str) -> None:
    settings = {"FRONTIER_MAX_CRAWL_DELAY": 10, "USER_AGENT": "ua-x", "ROBOTSTXT_OBEY": True}
    sched, clock, crawler = make_scheduler(settings)
    plain = _announce_robots(crawler, robots_source, "slow.example", 2.0)
    _announce_robots(crawler, robots_source, "slower.example", 60.0)
    _announce_robots(crawler, robots_source, "free.example", None)
    if plain is not None:
        assert plain.asked == ["ua-x"]
    assert sched.backend.frontier.controls.min_rest("slow.example") == 2.0
    assert sched.backend.frontier.controls.min_rest("slower.example") == 10.0  # capped, not skipped
    assert sched.backend.frontier.controls.min_rest("free.example") == 0.0
    stats = crawler.stats
    assert stats.get_value("frontier/crawl_delay/hosts") == 2
    assert stats.get_value("frontier/crawl_delay/capped") == 1
    assert sum("FRONTIER_MAX_CRAWL_DELAY" in r.getMessage() for r in caplog.records) == 1
    for i in range(2):
        sched.enqueue_request(Request(f"http://slow.example/{i}"))
    _respond(sched, clock, 200)
    assert sched.backend.frontier.next_contact("slow.example") == pytest.approx(clock.now + 2.0)


def test_only_the_robots_txt_middleware_fetches_are_read(robots_source: str) -> None:
    """Without the robots_parsed signal: a page named robots.txt that the spider asked
    for itself, or any robots.txt when ROBOTSTXT_OBEY is off, sets no Crawl-delay."""
    from scrapy import signals
    from scrapy.http import TextResponse

    for obey, meta in ((True, {}), (False, {"dont_obey_robotstxt": True})):
        sched, _, crawler = make_scheduler({"ROBOTSTXT_OBEY": obey})
        url = "http://own.example/robots.txt"
        request = Request(url, meta=meta)
        crawler.signals.send_catch_log(
            signals.response_received, request=request, spider=crawler.spider,
            response=TextResponse(url, body=ROBOTS_BODIES[2.0], request=request))
        assert sched.backend.frontier.controls.min_rest("own.example") == 0.0


def test_a_robot_parser_without_crawl_delay_is_read_through_protego(robots_source: str) -> None:
    """Scrapy < 2.18: ProtegoRobotParser has no crawl_delay(), only its Protego parse."""
    from types import SimpleNamespace

    from protego import Protego
    from scrapy import signals

    sched, _, crawler = make_scheduler({"ROBOTSTXT_OBEY": True})
    if robots_source == "signal":
        old_style = SimpleNamespace(rp=Protego.parse("User-agent: *\nRequest-rate: 1/4\n"))
        crawler.signals.send_catch_log(signals.robots_parsed, robotparser=old_style,
                                       request=Request("http://rate.example/"))
        assert sched.backend.frontier.controls.min_rest("rate.example") == 4.0
    assert robots_delay(robots_view(SimpleNamespace(rp=Protego.parse(
        "User-agent: *\nCrawl-delay: 1.5\n"))), "b") == 1.5


class _ProjectMiddleware:
    """A project's downloader middleware (its module is not Scrapy's)."""


def _robots_fetched_during(sched: Any, clock: FakeClock) -> Request:
    """Two pages of a.example queued; the first handed out, and robots.txt fetched while it
    holds the lease (the robots middleware's download), 0.1 s long: the host rests 1 s."""
    from scrapy_frontier.meta import ROBOTS_START_META

    for i in range(2):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    first = sched.next_request()
    assert first is not None
    robots = Request("http://a.example/robots.txt", meta={"dont_obey_robotstxt": True})
    robots.meta[ROBOTS_START_META] = clock()
    clock.advance(0.1)
    sched.robots.fetched(robots, 0.1)  # rest 1 s from now
    return first


def test_robots_txt_fetch_counts_as_a_contact() -> None:
    """The request that triggered robots.txt goes back to wait for the host's rest, from
    the robots.txt step: no middleware after it has seen the request."""
    sched, clock, crawler = make_scheduler({"FRONTIER_DELAY_FACTOR": 10.0})
    from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware

    from scrapy_frontier.downloadermiddlewares import FetchTimingMiddleware, RobotsHoldMiddleware

    hold, timing = RobotsHoldMiddleware(crawler), FetchTimingMiddleware(crawler)
    # Scrapy's own middlewares before the robots.txt step: the request may be held there.
    crawler.engine.downloader.middleware.middlewares[:] = [
        OffsiteMiddleware(crawler), hold, timing]
    first = _robots_fetched_during(sched, clock)
    again = hold.process_request(first)
    assert isinstance(again, Request) and again.url == first.url and again.dont_filter
    assert sched.enqueue_request(again)  # the engine queues what the middleware returned
    assert sched.next_request() is None
    assert sched.backend.frontier.next_contact("a.example") == pytest.approx(clock.now + 1.0)
    clock.advance(1.0)
    nxt = sched.next_request()
    assert nxt is not None
    assert hold.process_request(nxt) is None  # rest kept: sent as is
    assert timing.process_request(nxt) is None
    assert crawler.stats.get_value("frontier/robots/held") == 1
    assert crawler.stats.get_value("frontier/robots/held_in_place") is None
    assert crawler.stats.get_value("frontier/robots/fetches") == 1


def test_a_robots_txt_attempt_is_timed_once_though_a_kept_answer_stands_in_for_its_error(
        ) -> None:
    """RobotsCacheMiddleware answers a failed robots.txt fetch with the copy it kept: the
    response passes the timing middleware after the error did, and is no second contact."""
    from scrapy_frontier.downloadermiddlewares import FetchTimingMiddleware

    sched, clock, crawler = make_scheduler()
    timing = FetchTimingMiddleware(crawler)
    robots = Request("http://a.example/robots.txt", meta={"dont_obey_robotstxt": True})
    assert timing.process_request(robots) is None
    clock.advance(0.1)
    timing.process_exception(robots, TCPTimedOutError())
    timing.process_response(robots, Response(robots.url, body=b"Disallow: /x",
                                             flags=["cached", "stale"]))
    assert crawler.stats.get_value("frontier/robots/fetches") == 1
    retry = robots.copy()  # RetryMiddleware's copy after the error: timed anew
    clock.advance(3600.0)  # past the rest owed after the first attempt
    assert timing.process_request(retry) is None
    timing.process_response(retry, Response(retry.url, status=503))
    assert crawler.stats.get_value("frontier/robots/fetches") == 2


def test_robots_txt_wait_in_place_after_a_project_middleware() -> None:
    """A project middleware sees requests before the robots.txt step: queued again, the
    request would pass it twice, so it waits in the timing middleware instead."""
    from twisted.internet.defer import Deferred

    from scrapy_frontier.downloadermiddlewares import FetchTimingMiddleware, RobotsHoldMiddleware

    sched, clock, crawler = make_scheduler({"FRONTIER_DELAY_FACTOR": 10.0})
    hold, timing = RobotsHoldMiddleware(crawler), FetchTimingMiddleware(crawler)
    crawler.engine.downloader.middleware.middlewares[:] = [_ProjectMiddleware(), hold, timing]
    first = _robots_fetched_during(sched, clock)
    assert hold.process_request(first) is None and hold.holds is False
    waiting = timing.process_request(first)
    assert isinstance(waiting, Deferred) and not waiting.called
    fetch = sched.fetches.inflight.get(first.meta[LEASE_META])
    assert fetch is not None and fetch.sent_at is None  # not sent yet: timed once it is
    waiting.addErrback(lambda _: None)
    waiting.cancel()  # no reactor runs here
    assert crawler.stats.get_value("frontier/robots/held") == 1
    assert crawler.stats.get_value("frontier/robots/held_in_place") == 1
    assert sched.next_request() is None  # the host is still leased


@pytest.mark.parametrize("parse", ["scrapy", "frontier"])
def test_robots_delay_reads_protego_request_rate(parse: str) -> None:
    """Through Scrapy's ProtegoRobotParser (as the signal hands it), or parsed here."""
    from scrapy.robotstxt import ProtegoRobotParser

    def parser(body: bytes) -> Any:
        if parse == "frontier":
            return ProtegoDelays.parse(body)
        return robots_view(ProtegoRobotParser(body, None))

    assert robots_delay(parser(b"User-agent: *\nCrawl-delay: 2\nRequest-rate: 1/5\n"),
                        "bot") == 5.0
    assert robots_delay(parser(b"User-agent: *\nCrawl-delay: 3\n"), "b") == 3.0
    assert robots_delay(parser(b"User-agent: *\nDisallow:\n"), "b") is None


@pytest.mark.parametrize(
    ("name", "value"),
    [("FRONTIER_MAX_CRAWL_DELAY", -1), ("FRONTIER_MAX_RETRY_AFTER", "x"),
     ("FRONTIER_BACKOFF_BASE", -1), ("FRONTIER_RETIRE_AFTER", 1.5)],
)
def test_new_settings_are_validated(name: str, value: Any) -> None:
    from scrapy.settings import Settings

    with pytest.raises(FrontierConfigError, match=name):
        FrontierConfig.from_settings(Settings({name: value}))
    with pytest.raises(FrontierConfigError, match="FRONTIER_BACKOFF_MAX"):
        FrontierConfig.from_settings(
            Settings({"FRONTIER_BACKOFF_BASE": 10, "FRONTIER_BACKOFF_MAX": 5})
        )


# -- real crawls of the test web -----------------------------------------------------------------


def _host_entries(entries: list[LogEntry], host: str) -> list[LogEntry]:
    return sorted((e for e in entries if e.host == host and e.path != "/robots.txt"),
                  key=lambda e: e.start)


def _gaps(entries: list[LogEntry]) -> list[float]:
    return [b.start - a.end for a, b in zip(entries, entries[1:], strict=False)]


def _crawl(
    tmp_path: Path,
    web_args: list[str],
    settings: dict[str, Any],
    extra_paths: list[tuple[int, str]] | None = None,
) -> tuple[Any, list[LogEntry], ServerProcess]:
    log = tmp_path / "server.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        roots = web.start_urls
        extra = [roots[i].replace("/p/0", path) for i, path in extra_paths or []]
        result = run_crawl(roots + extra, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl")
    assert result.returncode == 0, result.output[-3000:]
    return result, read_log(log), web


@pytest.mark.crawl
def test_crawl_delay_from_robots_txt_is_kept_and_capped(tmp_path: Path) -> None:
    web_args = ["--shape", "wide", "--hosts", "3", "--pages", "5", "--latency", "0.005", "0.01",
                "--crawl-delay", "0", "0.3", "--crawl-delay", "1", "0.6"]
    settings = {"ADDONS": FRONTIER_ADDON, "ROBOTSTXT_OBEY": True, "FRONTIER_MIN_DELAY": 0.0,
                "FRONTIER_MAX_CRAWL_DELAY": 0.4}
    result, entries, web = _crawl(tmp_path, web_args, settings)
    report = audit(entries, expected=web.expected, min_delay=0.0)
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    hosts = [h["address"] for h in web.info["hosts"]]
    delayed = _gaps(_host_entries(entries, hosts[0]))
    capped = _gaps(_host_entries(entries, hosts[1]))
    free = _gaps(_host_entries(entries, hosts[2]))
    print("crawl-delay 0.3 gaps", [round(g, 3) for g in delayed])
    print("crawl-delay 0.6 capped at 0.4 gaps", [round(g, 3) for g in capped])
    print("no crawl-delay gaps", [round(g, 3) for g in free])
    assert len(delayed) == 4 and min(delayed) >= 0.3, delayed
    assert len(capped) == 4 and min(capped) >= 0.4, capped
    assert min(free) < 0.3, free  # the control host is not slowed down
    # robots.txt is a contact like any other: the first page waits the host's
    # rest after it (10 x its fetch time, or the Crawl-delay).
    with_robots = audit(entries, include_robots=True, min_delay=0.0)
    assert with_robots.overlaps == 0 and with_robots.short_gaps == 0, with_robots.summary()
    for host, wanted in ((hosts[0], 0.3), (hosts[1], 0.4)):
        seq = sorted((e for e in entries if e.host == host), key=lambda e: e.start)
        assert seq[0].path == "/robots.txt"
        print(f"{host}: first page {seq[1].start - seq[0].end:.3f} s after robots.txt")
        assert seq[1].start - seq[0].end >= wanted
    stats = result.stats
    assert stats["frontier/robots/fetches"] == 3
    assert stats["frontier/robots/held"] == 3
    assert stats["frontier/crawl_delay/hosts"] == 2
    assert stats["frontier/crawl_delay/capped"] == 1
    assert result.output.count("FRONTIER_MAX_CRAWL_DELAY") == 1


@pytest.mark.crawl
def test_retry_after_429_and_503_block_the_host_until_then(tmp_path: Path) -> None:
    web_args = ["--shape", "wide", "--hosts", "3", "--pages", "4", "--latency", "0.005", "0.01",
                "--cross-links", "0"]
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0, "RETRY_ENABLED": True,
                "RETRY_TIMES": 2, "RETRY_HTTP_CODES": [429, 503]}
    result, entries, web = _crawl(tmp_path, web_args, settings,
                                  [(0, "/ratelimit/1"), (1, "/unavailable/1")])
    report = audit(entries, expected=web.expected, min_delay=0.0)
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    assert report.coverage == 1.0, report.summary()
    hosts = [h["address"] for h in web.info["hosts"]]
    for host, path, status in ((hosts[0], "/ratelimit/1", 429),
                               (hosts[1], "/unavailable/1", 503)):
        seq = _host_entries(entries, host)
        i = next(k for k, e in enumerate(seq) if e.path == path)
        assert seq[i].status == status
        assert i + 1 < len(seq), "nothing requested after the Retry-After"
        gap = seq[i + 1].start - seq[i].end
        print(f"{status} Retry-After: next request to the host after {gap:.3f} s")
        assert gap >= 1.0, gap  # "1" for 429; an HTTP date 1-2 s ahead for 503
        assert [e.status for e in seq if e.path == path] == [status, 200]
    assert result.stats["frontier/retry_after/honoured"] == 2
    assert result.stats.get("frontier/retired_hosts") is None


@pytest.mark.crawl
def test_a_garbage_retry_after_is_treated_as_absent_in_a_crawl(tmp_path: Path) -> None:
    """A 429 whose Retry-After cannot be parsed: the usual back-off, the response is not
    lost, the host's lease is released and the rest of its pages are crawled."""
    web_args = ["--shape", "wide", "--hosts", "2", "--pages", "5", "--latency", "0.005", "0.01",
                "--cross-links", "0"]
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0, "RETRY_ENABLED": True,
                "RETRY_TIMES": 2, "RETRY_HTTP_CODES": [429], "FRONTIER_BACKOFF_BASE": 0.3}
    result, entries, web = _crawl(tmp_path, web_args, settings, [(0, "/garbage-retry-after/1")])
    report = audit(entries, expected=web.expected, min_delay=0.0)
    assert report.coverage == 1.0 and report.overlaps == 0, report.summary()
    host = web.info["hosts"][0]["address"]
    seq = _host_entries(entries, host)
    assert [e.status for e in seq if e.path == "/garbage-retry-after/1"] == [429, 200]
    i = next(k for k, e in enumerate(seq) if e.status == 429)
    assert seq[i + 1].start - seq[i].end >= 0.3  # backed off as for any 429
    stats = result.stats
    assert stats.get("frontier/retry_after/honoured") is None
    assert stats["frontier/backoff/count"] == 1
    assert stats.get("frontier/lease_expired") is None
    assert "Traceback" not in result.output, result.output[-3000:]


@pytest.mark.crawl
def test_failing_host_backs_off_then_is_retired_without_affecting_others(
    tmp_path: Path,
) -> None:
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "5", "--latency", "0.005", "0.01",
                "--cross-links", "0", "--failing-host", "3"]
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0,
                "FRONTIER_BACKOFF_BASE": 0.2, "FRONTIER_RETIRE_AFTER": 3}
    extra = [(3, f"/p/{i}") for i in range(1, 8)]
    result, entries, web = _crawl(tmp_path, web_args, settings, extra)
    hosts = [h["address"] for h in web.info["hosts"]]
    failing = _host_entries(entries, hosts[3])
    gaps = _gaps(failing)
    print("failing host gaps", [round(g, 3) for g in gaps])
    assert [e.status for e in failing] == [503, 503, 503]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps
    others = [e for e in entries if e.host != hosts[3]]
    expected = {(h, p) for h, p in web.expected if h != hosts[3]}
    report = audit(others, expected=expected, min_delay=0.0)
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    stats = result.stats
    assert stats["frontier/retired_hosts"] == 1
    assert stats["frontier/retired_requests"] == 5  # 8 URLs, 3 fetched
    assert stats["frontier/backoff/count"] == 3
    assert stats["frontier/queued"] == 0
    assert stats.get("frontier/retired_requests/refused") is None
    assert stats["frontier/enqueued"] == stats["frontier/dequeued"] + 5
    assert "Retired host" in result.output and "dropped" in result.output


@pytest.mark.parametrize(
    "value", [b"\xb2", "\u00b2\u00b3", b"1e9", b"-5", b"\xff\xfe", b"Mon, 99 Foo"])
def test_garbage_retry_after_is_treated_as_absent(value: bytes | str) -> None:
    assert parse_retry_after(value, time.time()) is None


def test_infinite_and_huge_robots_delays_are_capped_not_ignored() -> None:
    from types import SimpleNamespace

    rate = SimpleNamespace(requests=1, seconds=int("9" * 400))
    parser = SimpleNamespace(crawl_delay=lambda agent: float("inf"),
                             rp=SimpleNamespace(request_rate=lambda agent: rate))
    assert robots_delay(parser, "*") == float("inf")
    sched, _, _ = make_scheduler({"FRONTIER_MAX_CRAWL_DELAY": 7.0})
    sched._on_robots_parsed(parser, Request("http://slow.example/robots.txt"))
    assert sched.backend.frontier.controls.min_rest("slow.example") == 7.0
