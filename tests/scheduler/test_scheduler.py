"""The Scrapy-facing scheduler, driven directly with a fake clock (no downloads)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider, signals
from scrapy.http import Response
from scrapy.settings import Settings
from scrapy.utils.conf import build_component_list
from scrapy.utils.test import get_crawler

from scrapy_frontier import Addon, FetchTimingMiddleware, FrontierScheduler
from scrapy_frontier.addon import (
    HOLD_MIDDLEWARE_PATH,
    MIDDLEWARE_PATH,
    ROBOTS_MIDDLEWARE_PATH,
    SCHEDULER_PATH,
)
from scrapy_frontier.core import FakeClock
from scrapy_frontier.errors import FrontierConfigError
from scrapy_frontier.hostkey import HostlessURL, host_key, url_host_key
from scrapy_frontier.meta import LEASE_META
from scrapy_frontier.settings import FrontierConfig


class _Spider(Spider):
    name = "t"


class _NextCall:
    def __init__(self) -> None:
        self.calls = 0

    def schedule(self, delay: float = 0) -> None:
        assert delay == 0
        self.calls += 1


def make_scheduler(
    settings: dict[str, Any] | None = None,
    *,
    middleware: bool = True,
    clock: FakeClock | None = None,
    dupefilter: Any = None,
) -> tuple[FrontierScheduler, FakeClock, Any]:
    """``dupefilter``: its class (default Scrapy's RFPDupeFilter)."""
    base = {"FRONTIER_MIN_DELAY": 0.0, "FRONTIER_SEED": 1}
    crawler = get_crawler(_Spider, {**base, **(settings or {})})
    clock = clock or FakeClock(100.0)
    config = FrontierConfig.from_settings(crawler.settings)
    from scrapy.dupefilters import RFPDupeFilter

    df = (dupefilter or RFPDupeFilter).from_crawler(crawler)
    sched = FrontierScheduler(crawler, config, df, clock=clock)
    mws = [FetchTimingMiddleware(crawler)] if middleware else []
    nextcall = _NextCall()
    crawler.engine = SimpleNamespace(
        downloader=SimpleNamespace(middleware=SimpleNamespace(middlewares=mws)),
        _slot=SimpleNamespace(nextcall=nextcall, inprogress=set(), scheduler=sched),
    )
    crawler.spider = _Spider.from_crawler(crawler)
    sched.open(crawler.spider)
    return sched, clock, crawler


def finish(sched: FrontierScheduler, clock: FakeClock, request: Request, seconds: float) -> None:
    sched.fetches.sent(request)
    clock.advance(seconds)
    sched.fetches.completed(request)


def test_one_request_per_host_until_finished_then_ten_times_fetch_time() -> None:
    sched, clock, _ = make_scheduler()
    for i in range(3):
        assert sched.enqueue_request(Request(f"http://a.example/{i}"))
    first = sched.next_request()
    assert first is not None and first.url == "http://a.example/0"
    assert sched.next_request() is None  # host busy
    assert sched.has_pending_requests()
    finish(sched, clock, first, 0.2)
    assert sched.next_request() is None  # resting 10 x 0.2 s
    clock.advance(1.99)
    assert sched.next_request() is None
    clock.advance(0.011)
    second = sched.next_request()
    assert second is not None and second.url == "http://a.example/1"


def test_duplicates_filtered_and_dont_filter_honoured() -> None:
    sched, _, crawler = make_scheduler()
    assert sched.enqueue_request(Request("http://a.example/x"))
    assert not sched.enqueue_request(Request("http://a.example/x"))
    assert sched.enqueue_request(Request("http://a.example/x", dont_filter=True))
    assert len(sched) == 2
    sched.publish_stats()
    assert crawler.stats.get_value("frontier/enqueued") == 2


def test_redirect_copy_loses_the_old_lease() -> None:
    sched, clock, _ = make_scheduler()
    sched.enqueue_request(Request("http://a.example/old"))
    req = sched.next_request()
    assert req is not None and LEASE_META in req.meta
    redirected = req.replace(url="http://b.example/new")  # meta is copied, like RedirectMiddleware
    finish(sched, clock, req, 0.01)
    assert sched.enqueue_request(redirected)
    assert LEASE_META not in redirected.meta
    again = sched.next_request()
    assert again is redirected
    assert again.meta[LEASE_META] != req.meta[LEASE_META]


def test_late_report_does_not_release_twice() -> None:
    sched, clock, crawler = make_scheduler({"FRONTIER_LEASE_TIMEOUT": 5})
    # An engine that cannot tell what it works on (as a Mock): only the timeout helps.
    crawler.engine._slot.inprogress = None
    for i in range(2):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    clock.advance(5.0)
    assert sched.next_request() is None  # lease expired now; host rests
    assert crawler.stats.get_value("frontier/lease_expired") == 1
    sched.fetches.completed(req)  # too late: ignored
    sched.publish_stats()
    assert crawler.stats.get_value("frontier/completed") is None


def test_engine_woken_at_next_contact_not_by_heartbeat() -> None:
    sched, clock, crawler = make_scheduler()
    sched.enqueue_request(Request("http://a.example/0"))
    sched.enqueue_request(Request("http://a.example/1"))
    req = sched.next_request()
    assert req is not None
    finish(sched, clock, req, 0.1)
    calls: list[tuple[float, Any]] = []

    class _Timer:
        def cancel(self) -> None:
            calls.append((-1, None))

    import scrapy_frontier.reactor.timer as mod

    original = mod.call_later
    mod.call_later = lambda delay, func: (calls.append((delay, func)), _Timer())[1]
    try:
        assert sched.next_request() is None
        assert len(calls) == 1
        delay, func = calls[0]
        assert delay == pytest.approx(1.0)
        assert sched.next_request() is None  # already armed for that time: no second timer
        assert len(calls) == 1
        clock.advance(delay)
        func()
        assert crawler.engine._slot.nextcall.calls == 1
        assert crawler.stats.get_value("frontier/engine_wakeups") == 1
        assert sched.next_request() is not None
        sched.close("finished")
    finally:
        mod.call_later = original


def test_close_cancels_timer_and_reports_left_over() -> None:
    sched, clock, crawler = make_scheduler()
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    finish(sched, clock, req, 1.0)
    assert sched.next_request() is None
    assert sched.waker.armed
    sched.close("shutdown")
    assert not sched.waker.armed
    assert crawler.stats.get_value("frontier/queued") == 2


def test_signals_fallback_when_middleware_missing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier"):
        sched, clock, crawler = make_scheduler(middleware=False)
    assert sched.fetches.timing.signals_only
    assert sum("scrapy_frontier.Addon" in r.getMessage() for r in caplog.records) == 1
    sched.enqueue_request(Request("http://a.example/0"))
    sched.enqueue_request(Request("http://a.example/1"))
    req = sched.next_request()
    assert req is not None
    # The request never reached the downloader (e.g. robots.txt IgnoreRequest):
    # the engine no longer tracks it, so the next pull reaps its lease.
    crawler.engine._slot.inprogress.clear()
    clock.advance(0.5)
    nxt = sched.next_request()
    assert nxt is not None and nxt.url == "http://a.example/1"


def test_signals_fallback_times_fetch_from_downloader_signals() -> None:
    sched, clock, crawler = make_scheduler(middleware=False)
    sched.enqueue_request(Request("http://a.example/0"))
    sched.enqueue_request(Request("http://a.example/1"))
    req = sched.next_request()
    assert req is not None
    crawler.engine._slot.inprogress.add(req)
    # As Scrapy's downloader sends them (each receiver takes only the arguments it names).
    send = crawler.signals.send_catch_log
    send(signals.request_reached_downloader, request=req, spider=crawler.spider)
    clock.advance(0.3)
    send(signals.request_left_downloader, request=req, spider=crawler.spider)
    assert sched.backend.frontier.next_contact("a.example") == pytest.approx(clock() + 3.0)
    # The response comes later: the lease is over, the host is not released twice.
    clock.advance(0.1)
    send(signals.response_received, response=Response(req.url, request=req), request=req,
         spider=crawler.spider)
    assert sched.backend.frontier.next_contact("a.example") == pytest.approx(clock() + 2.9)


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://Example.COM:81/", "example.com"),
        ("https://example.com/", "example.com"),
        ("http://[::1]:8080/a", "::1"),
        ("http://BÜCHER.de/x", "xn--bcher-kva.de"),
        ("data:,hello", "data:"),
        ("file:///etc/hostname", "file:"),
        ("about:blank", "about:"),
    ],
)
def test_host_keys(url: str, key: str) -> None:
    assert host_key(Request(url)) == key


def test_download_slot_meta_is_the_host_key() -> None:
    assert host_key(Request("http://a.example/", meta={"download_slot": "proxy-1"})) == "proxy-1"


def test_hostless_network_url_is_a_counted_rejection() -> None:
    with pytest.raises(HostlessURL):
        host_key(Request("http://:80/nohost"))
    sched, _, crawler = make_scheduler()
    assert not sched.enqueue_request(Request("http://:80/nohost"))
    assert crawler.stats.get_value("frontier/rejected/no_host") == 1
    assert not sched.has_pending_requests()


def test_priority_maps_to_levels_and_higher_goes_first_within_host() -> None:
    sched, clock, _ = make_scheduler()
    sched.enqueue_request(Request("http://a.example/low", priority=-2))
    first = sched.next_request()
    assert first is not None
    sched.enqueue_request(Request("http://a.example/normal"))
    sched.enqueue_request(Request("http://a.example/high", priority=3))
    finish(sched, clock, first, 0.0)
    nxt = sched.next_request()
    assert nxt is not None and nxt.url == "http://a.example/high"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FRONTIER_DELAY_FACTOR", -1),
        ("FRONTIER_FRONT_QUEUES", 0),
        ("FRONTIER_BACK_QUEUES", "many"),
        ("FRONTIER_PRIORITY_BIAS", 0.5),
        ("FRONTIER_MIN_DELAY", float("nan")),
        ("FRONTIER_FRONT_QUEUES", 1100),
        ("FRONTIER_PRIORITY_BIAS", 1e300),
        ("FRONTIER_REDIS_PREFETCH", "lots"),
        ("FRONTIER_REDIS_KEY", 5),
        ("FRONTIER_REDIS_KEY", "%(worker)s:frontier:"),
        ("FRONTIER_QUALITY", "no.such.module.quality"),
        ("FRONTIER_BACKEND", "cassandra"),
        ("FRONTIER_BACKEND", "sqlite"),  # without JOBDIR or FRONTIER_PATH
    ],
)
def test_bad_settings_give_clear_errors(name: str, value: Any) -> None:
    with pytest.raises(FrontierConfigError, match=name):
        FrontierConfig.from_settings(Settings({name: value}))


def test_max_delay_below_min_delay_is_rejected() -> None:
    with pytest.raises(FrontierConfigError, match="FRONTIER_MAX_DELAY"):
        FrontierConfig.from_settings(Settings({"FRONTIER_MIN_DELAY": 5, "FRONTIER_MAX_DELAY": 1}))


def test_default_back_queue_bounds_follow_concurrency() -> None:
    config = FrontierConfig.from_settings(Settings({"CONCURRENT_REQUESTS": 16}))
    assert config.back_queues == 2 * 11 * 16  # 2 x (factor + 1) x concurrency
    assert config.back_queues_max == config.back_queues
    config = FrontierConfig.from_settings(
        Settings({"CONCURRENT_REQUESTS": 4, "FRONTIER_DELAY_FACTOR": 5, "FRONTIER_BACK_QUEUES": 9})
    )
    assert (config.back_queues, config.back_queues_max) == (9, 9)


def test_addon_sets_defaults_but_project_settings_win() -> None:
    settings = Settings()
    settings.set("CONCURRENT_REQUESTS_PER_DOMAIN", 4, "project")
    Addon().update_settings(settings)
    assert settings["SCHEDULER"] == SCHEDULER_PATH
    assert settings["DOWNLOADER_MIDDLEWARES"][MIDDLEWARE_PATH] == 950
    assert settings["AUTOTHROTTLE_ENABLED"] is False
    assert settings.getfloat("DOWNLOAD_DELAY") == 0
    assert settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 4


@pytest.mark.parametrize("listed", [
    "scrapy_frontier.FetchTimingMiddleware", FetchTimingMiddleware, MIDDLEWARE_PATH])
def test_addon_keeps_a_middleware_the_project_lists_by_any_path(listed: Any) -> None:
    settings = Settings()
    settings.set("DOWNLOADER_MIDDLEWARES", {listed: 500, "no.such.Middleware": 10}, "project")
    settings.set("SPIDER_MIDDLEWARES", {"scrapy_frontier.RecrawlMiddleware": None}, "project")
    Addon().update_settings(settings)
    assert dict(settings["DOWNLOADER_MIDDLEWARES"]) == {listed: 500, "no.such.Middleware": 10}
    # Turned off by the project (None): not added back under its own path.
    assert dict(settings["SPIDER_MIDDLEWARES"]) == {"scrapy_frontier.RecrawlMiddleware": None}


@pytest.mark.parametrize(("obey", "project", "at"), [
    (False, {}, None),  # no robots.txt step: nothing added
    (True, {}, 100.5),  # just after RobotsTxtMiddleware (100), well before HttpAuth (300)
    (True, {"my.Early": 100.2, "my.Late": 543}, 100.1),  # before the project's next one
    (True, {ROBOTS_MIDDLEWARE_PATH: 200}, 200.5),  # moved by the project
    (True, {ROBOTS_MIDDLEWARE_PATH: None}, None),  # turned off
])
def test_addon_puts_the_robots_hold_just_after_the_robots_txt_step(
        obey: bool, project: dict[str, Any], at: float | None) -> None:
    settings = Settings()
    settings.set("ROBOTSTXT_OBEY", obey, "project")
    settings.set("DOWNLOADER_MIDDLEWARES", project, "project")
    Addon().update_settings(settings)
    assert settings["DOWNLOADER_MIDDLEWARES"].get(HOLD_MIDDLEWARE_PATH) == at
    if at is not None:
        chain = build_component_list(settings.getwithbase("DOWNLOADER_MIDDLEWARES"))
        robots = chain.index(ROBOTS_MIDDLEWARE_PATH)
        assert chain[robots + 1] == HOLD_MIDDLEWARE_PATH


def test_addon_warns_when_project_replaces_the_scheduler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings()
    settings.set("SCHEDULER", "scrapy.core.scheduler.Scheduler", "project")
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier"):
        Addon().update_settings(settings)
    assert settings["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"
    assert any("not used" in r.getMessage() for r in caplog.records)


def test_stacked_delays_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier"):
        FrontierScheduler.from_crawler(
            get_crawler(_Spider, {"DOWNLOAD_DELAY": 2, "AUTOTHROTTLE_ENABLED": True})
        )
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "DOWNLOAD_DELAY" in messages and "AUTOTHROTTLE_ENABLED" in messages


def test_timing_middleware_reports_only_frontier_requests() -> None:
    sched, clock, crawler = make_scheduler()
    mw = FetchTimingMiddleware(crawler)
    robots = Request("http://a.example/robots.txt")  # bypasses the scheduler
    mw.process_request(robots)
    assert LEASE_META not in robots.meta
    sched.enqueue_request(Request("http://a.example/0"))
    sched.enqueue_request(Request("http://a.example/1"))
    req = sched.next_request()
    assert req is not None
    fetch = sched.fetches.inflight.get(req.meta[LEASE_META])
    assert fetch is not None and fetch.sent_at is None
    mw.process_request(req)
    assert fetch.sent_at == clock()
    mw.process_exception(robots, RuntimeError("x"))
    assert sched.backend.frontier.host_busy("a.example")
    mw.process_exception(req, RuntimeError("boom"))
    assert not sched.backend.frontier.host_busy("a.example")


def test_request_coming_back_releases_its_lease() -> None:
    # A middleware below 950 may replace a request in process_request: the
    # copy comes back through enqueue_request and the original never reaches
    # the timing middleware. Its host must not stay blocked until the lease
    # times out.
    sched, clock, crawler = make_scheduler()
    sched.enqueue_request(Request("http://a.example/0"))
    sched.enqueue_request(Request("http://a.example/1"))
    req = sched.next_request()
    assert req is not None and sched.backend.frontier.host_busy("a.example")
    swapped = req.replace(url="http://a.example/0?swapped", dont_filter=True)
    assert sched.enqueue_request(swapped)
    assert not sched.backend.frontier.host_busy("a.example")
    sched.publish_stats()
    assert crawler.stats.get_value("frontier/completed") == 1


@settings(max_examples=400, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "ftp", "s3"]),
    user=st.sampled_from(["", "u@", "u:p@", "a%40b@"]),
    host=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.\-_]{0,20}", fullmatch=True)
    | st.sampled_from(["[::1]", "[2001:db8::7]", "127.0.1.5", "xn--bcher-kva.de", "a..b"]),
    port=st.sampled_from(["", ":80", ":8080", ":"]),
    rest=st.sampled_from(["", "/", "/p/1", "?q=1", "#frag", "/a:b@c", "/?x=[1]"]),
)
def test_fast_host_key_agrees_with_urllib(
    scheme: str, user: str, host: str, port: str, rest: str
) -> None:
    from urllib.parse import urlsplit

    url = f"{scheme}://{user}{host}{port}{rest}"
    expected = urlsplit(url).hostname
    if expected:
        assert url_host_key(url) == expected
    else:
        with pytest.raises(HostlessURL):
            url_host_key(url)


def test_ip_politeness_is_refused_on_redis_at_startup() -> None:
    from scrapy.settings import Settings

    with pytest.raises(FrontierConfigError, match="FRONTIER_IP_POLITENESS.*redis"):
        FrontierConfig.from_settings(
            Settings({"FRONTIER_BACKEND": "redis", "FRONTIER_IP_POLITENESS": True}))


def test_backend_names(tmp_path: Any) -> None:
    from scrapy.settings import Settings

    def backend(**kw: Any) -> str:
        return FrontierConfig.from_settings(Settings(kw)).backend

    assert backend() == "memory"
    assert backend(JOBDIR=str(tmp_path)) == "sqlite"
    with pytest.raises(FrontierConfigError, match="'memory', 'sqlite', 'redis'"):
        backend(FRONTIER_BACKEND="embedded")  # a name that 0.1.0 never released
    assert backend(FRONTIER_BACKEND="Redis") == "redis"
    assert backend(FRONTIER_BACKEND="my.pkg.Driver") == "my.pkg.Driver"


def test_a_non_integer_priority_boost_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sched, _, crawler = make_scheduler()
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier"):
        assert sched.enqueue_request(Request("http://a.example/", meta={
            "frontier_priority_boost": "x"}))
        assert sched.enqueue_request(Request("http://a.example/2", meta={
            "frontier_priority_boost": None}))
    assert crawler.stats.get_value("frontier/rejected/bad_boost") == 2
    assert sum("frontier_priority_boost" in r.getMessage() for r in caplog.records) == 1
    assert sched.next_request() is not None


def test_memory_backend_writes_nothing_even_with_jobdir(tmp_path: Any) -> None:
    sched, _, _ = make_scheduler({"FRONTIER_BACKEND": "memory", "JOBDIR": str(tmp_path)})
    sched.enqueue_request(Request("http://a.example/"))
    assert sched.next_request() is not None
    sched.close("finished")
    assert sched.backend.name == "memory"
    # (Scrapy's own RFPDupeFilter, used here, keeps JOBDIR/requests.seen.)
    assert not list(tmp_path.glob("*.sqlite*"))


def test_a_lease_the_engine_dropped_without_a_reported_end_is_released() -> None:
    """A download handler that returns something that is not a Response: the engine
    drops the request, nothing reports the fetch's end (Scrapy's
    test_download_wrong_type hung on Redis for that)."""
    sched, clock, crawler = make_scheduler()
    for i in range(2):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    inprogress = crawler.engine._slot.inprogress
    inprogress.add(req)
    clock.advance(2.0)
    assert sched.next_request() is None  # the engine still works on it: the host is busy
    inprogress.discard(req)
    clock.advance(1.0)
    nxt = sched.next_request()  # released (no fetch time seen: FRONTIER_MIN_DELAY=0 here)
    assert nxt is not None and nxt.url == "http://a.example/1"
    assert crawler.stats.get_value("frontier/lease_expired") is None


def test_a_lease_whose_fetch_still_runs_is_extended_not_released(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """FRONTIER_LEASE_TIMEOUT below the fetch time must not let a second fetch overlap."""
    sched, clock, crawler = make_scheduler({"FRONTIER_LEASE_TIMEOUT": 5})
    for i in range(2):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    crawler.engine._slot.inprogress.add(req)  # still downloading
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier"):
        for _ in range(3):
            clock.advance(5.0)
            assert sched.next_request() is None  # the host stays busy
    assert crawler.stats.get_value("frontier/lease_extended") == 3
    assert crawler.stats.get_value("frontier/lease_expired") is None
    assert sum("FRONTIER_LEASE_TIMEOUT" in r.getMessage() for r in caplog.records) == 1
    finish(sched, clock, req, 0.1)
    crawler.engine._slot.inprogress.discard(req)
    clock.advance(1.0)
    nxt = sched.next_request()
    assert nxt is not None and nxt.url == "http://a.example/1"


def test_scrapys_own_queue_settings_are_said_to_be_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from scrapy.utils.test import get_crawler

    lifo = "scrapy.squeues.LifoMemoryQueue"
    crawler = get_crawler(_Spider, {"ADDONS": {"scrapy_frontier.Addon": 0},
                                    "SCHEDULER_START_MEMORY_QUEUE": lifo})
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier"):
        FrontierScheduler.from_crawler(crawler)
    messages = [r.getMessage() for r in caplog.records]
    assert any("SCHEDULER_START_MEMORY_QUEUE: ignored" in m for m in messages), messages
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier"):
        FrontierScheduler.from_crawler(get_crawler(_Spider, {}))
    assert not any("ignored by scrapy-frontier" in r.getMessage() for r in caplog.records)


def test_a_scheduler_driven_by_hand_without_a_reactor(tmp_path: Any) -> None:
    """Benchmarks and tools drive the scheduler with no reactor installed: the timers it
    starts at open (progress line, stall meter) must not stop it there."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        from scrapy import Request, Spider
        from scrapy.utils.test import get_crawler
        from scrapy_frontier.scheduler import FrontierScheduler

        class S(Spider):
            name = "s"

        settings = {"FRONTIER_MIN_DELAY": 0, "FRONTIER_DELAY_FACTOR": 0,
                    "FRONTIER_PROGRESS_INTERVAL": 1}
        try:
            crawler = get_crawler(S, settings)
        except RuntimeError:
            # Scrapy 2.13's get_crawler needs an installed reactor: installed, never run.
            from scrapy.utils.reactor import install_reactor
            install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
            crawler = get_crawler(S, settings)
        crawler.spider = S.from_crawler(crawler)
        scheduler = FrontierScheduler.from_crawler(crawler)
        scheduler.open(crawler.spider)
        for i in range(3):
            assert scheduler.enqueue_request(Request(f"http://h{i}.example/"))
        got = [scheduler.next_request() for _ in range(3)]
        assert all(r is not None for r in got), got
        for r in got:
            scheduler.fetches.completed(r)
        scheduler.close("finished")
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-3000:]


def test_a_misspelled_setting_is_named_with_the_nearest_one(
        caplog: pytest.LogCaptureFixture) -> None:
    crawler = get_crawler(settings_dict={"FRONTIER_MIN_DELEY": 5, "FRONTIER_NO_SUCH": 1,
                                         "FRONTIER_MIN_DELAY": 0.5})
    with caplog.at_level(logging.WARNING, logger="scrapy_frontier"):
        FrontierScheduler.from_crawler(crawler)
    warned = [r.getMessage() for r in caplog.records if "not a scrapy-frontier setting" in
              r.getMessage()]
    assert warned == [
        "FRONTIER_MIN_DELEY is not a scrapy-frontier setting and is ignored: did you mean "
        "FRONTIER_MIN_DELAY?",
        "FRONTIER_NO_SUCH is not a scrapy-frontier setting and is ignored "
        "(see docs/settings.rst)"]


def test_slot_keys_bind_each_hostname_to_its_first_key() -> None:
    from scrapy_frontier.scheduler.slots import SlotKeys

    slots = SlotKeys()
    key = slots.key
    # No slot met yet: the hostname, as Scrapy's downloader has it.
    assert key(Request("http://A.example:81/")) == "a.example"
    # A slot groups hosts met with it first...
    assert key(Request("http://b.example/", meta={"download_slot": "group"})) == "group"
    assert key(Request("http://c.example/", meta={"download_slot": "group"})) == "group"
    # ...and keeps them, with no slot, another slot or an empty one.
    assert key(Request("http://b.example/x")) == "group"
    assert key(Request("http://b.example/y", meta={"download_slot": "other"})) == "group"
    assert key(Request("http://c.example/z", meta={"download_slot": ""})) == "group"
    # A host queued under its own name stays there.
    assert key(Request("http://a.example/x", meta={"download_slot": "group"})) == "a.example"
    # An empty slot names no host: the hostname.
    assert key(Request("http://d.example/", meta={"download_slot": " "})) == "d.example"
    assert key(Request("http://d.example/2", meta={"download_slot": "group"})) == "d.example"
    with pytest.raises(HostlessURL):
        key(Request("http://e.example/", meta={"download_slot": "a\0b"}))
    # A look-up for a request that is not queued (robots.txt) binds nothing.
    assert key(Request("http://z.example/robots.txt"), remember=False) == "z.example"
    assert key(Request("http://z.example/", meta={"download_slot": "group"})) == "group"
    assert key(Request("http://z.example/robots.txt"), remember=False) == "group"


@pytest.mark.parametrize(("extra", "warned"), [({}, True),
                                               ({"FRONTIER_HISTORY_MAX_PAGES": 5000}, False)])
def test_continuous_recrawl_in_memory_says_its_history_grows_without_a_cap(
        extra: dict[str, Any], warned: bool, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "scrapy_frontier"):
        sched, _, _ = make_scheduler({"FRONTIER_RECRAWL": "continuous", **extra})
    sched.close("finished")
    said = [r.getMessage() for r in caplog.records if "kept in memory" in r.getMessage()]
    assert bool(said) is warned, said
    if warned:
        assert "FRONTIER_HISTORY_MAX_PAGES" in said[0] and "JOBDIR" in said[0]
