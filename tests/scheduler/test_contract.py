"""The scheduler's contract with Scrapy, on every frontier driver.

Modelled on Scrapy 2.19's own scheduler tests (tests/test_scheduler.py in its
sdist: the memory / on-disk / close-and-reopen variants, ``MockDownloader`` and
``crawler.engine = Mock(downloader=MockDownloader())``), but driving the
scheduler the add-on installs, through Scrapy's public interface only:
``load_object(settings["SCHEDULER"]).from_crawler(crawler)``, ``open``,
``enqueue_request``, ``next_request``, ``has_pending_requests``, ``len`` and
``close``. Every test runs on three drivers (see ``DRIVER_SETTINGS`` in
tests/contract_helpers.py, the one place that says how each is selected):

* ``memory``: no JOBDIR;
* ``sqlite``: JOBDIR;
* ``redis``: FRONTIER_BACKEND="redis" on the test redis-server.

Politeness rests are zero (FRONTIER_MIN_DELAY=0, FRONTIER_DELAY_FACTOR=0), so
a host is free again as soon as its fetch ended; fetch ends are simulated the
way Scrapy's downloader middleware chain reports them (the add-on's
FetchTimingMiddleware, then its spider middlewares: see ``Fetcher``). The Redis
scheduler hands out what its I/O thread claimed, so requests come out of
``drain``, which spins the reactor a few ms between empty ``next_request`` calls.

The last test crawls the loopback test web once per driver with real Scrapy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy import Request

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import run_crawl
from tests.contract_helpers import (
    ADDON,
    CONTRACT_DRIVERS,
    CONTRACT_SETTINGS,
    Driver,
    Run,
    driver_for,
    next_soon,
    sleep,
    spider_named,
    urls,
)

inline_callbacks = pytest_twisted.inlineCallbacks


@pytest.fixture(params=CONTRACT_DRIVERS)
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    return driver_for(request.param, tmp_path, request.getfixturevalue)


# Scrapy's tests/test_scheduler.py data.
_PRIORITIES = [
    ("http://foo.com/a", -2),
    ("http://foo.com/d", 1),
    ("http://foo.com/b", -1),
    ("http://foo.com/c", 0),
    ("http://foo.com/e", 2),
]

Gen = Generator[Any, Any, None]


# -- 1. Scrapy's Mock engine -----------------------------------------------------------------


@inline_callbacks
def test_full_cycle_under_scrapys_mock_engine(driver: Driver) -> Gen:
    """``crawler.engine = Mock(downloader=MockDownloader())``, as in Scrapy's own
    scheduler tests: every engine attribute is a Mock (``_slot.inprogress`` is not a
    set, the downloader has no middleware list), and the scheduler must cope."""
    run = Run(driver, engine="mock")
    requests = [Request(f"http://{h}.example/{i}") for h in "abc" for i in range(2)]
    try:
        yield run.open()
        assert len(run.scheduler) == 0
        run.enqueue(*requests)
        out = yield run.drain(timeout=5.0)
        assert sorted(urls(out)) == sorted(urls(requests))
        assert not run.scheduler.has_pending_requests()
        assert len(run.scheduler) == 0
    finally:
        yield run.close()


# -- 2. priority order within one host -------------------------------------------------------


@inline_callbacks
def test_higher_priority_first_within_a_host(driver: Driver) -> Gen:
    """Scrapy's test_dequeue_priorities: one host, so the order is the priority order."""
    run = Run(driver)
    try:
        yield run.open()
        run.enqueue(*[Request(url, priority=p) for url, p in _PRIORITIES])
        out = yield run.drain(expect=len(_PRIORITIES))
        assert [r.priority for r in out] == sorted((p for _, p in _PRIORITIES), reverse=True)
    finally:
        yield run.close()


@inline_callbacks
def test_fifo_within_equal_priority_on_a_host(driver: Driver) -> Gen:
    run = Run(driver)
    order = [("p0", 0), ("q0", 1), ("p1", 0), ("q1", 1), ("p2", 0), ("q2", 1)]
    try:
        yield run.open()
        run.enqueue(*[Request(f"http://foo.com/{n}", priority=p) for n, p in order])
        out = yield run.drain(expect=len(order))
        assert [u.rsplit("/", 1)[1] for u in urls(out)] == ["q0", "q1", "q2", "p0", "p1", "p2"]
    finally:
        yield run.close()


# -- 3. duplicate filtering -----------------------------------------------------------------


@inline_callbacks
def test_same_url_twice_is_fetched_once(driver: Driver) -> Gen:
    """And each refused copy is dropped the way Scrapy's engine drops it: either
    ``enqueue_request`` says False (the engine then sends request_dropped), or, where the
    seen test runs later (the shared seen set of Redis), the scheduler sends it."""
    from scrapy import signals

    run = Run(driver)
    url = "http://a.example/page"
    dropped: list[Request] = []
    try:
        yield run.open()
        run.crawler.signals.connect(lambda request, spider: dropped.append(request),
                                    signal=signals.request_dropped, weak=False)
        copies = [Request(url), Request(url)]
        accepted = run.enqueue(*copies)
        out = yield run.drain()
        assert urls(out) == [url]
        late = Request(url)
        accepted += run.enqueue(late)  # already fetched in this run
        out = yield run.drain()
        assert out == []
        refused = [r for r, ok in zip([*copies, late], accepted, strict=True) if not ok]
        assert len(refused) + len(dropped) == 2
        assert not set(map(id, refused)) & set(map(id, dropped))
    finally:
        yield run.close()


@inline_callbacks
def test_dont_filter_is_never_refused_within_a_run(driver: Driver) -> Gen:
    """Scrapy's contract: a dont_filter request skips the duplicate filter, so it is
    fetched however often it is enqueued -- with the default FRONTIER_RECRAWL ("due")
    too, also after the page was fetched (and recorded in the page history) in this run."""
    run = Run(driver)
    url = "http://a.example/page"
    try:
        yield run.open()
        run.enqueue(Request(url), Request(url, dont_filter=True))
        out = yield run.drain()
        assert urls(out) == [url, url]
        run.enqueue(Request(url, dont_filter=True), Request(url, dont_filter=True))
        out = yield run.drain()
        assert urls(out) == [url, url]
    finally:
        yield run.close()


@inline_callbacks
def test_base_dupefilter_turns_deduplication_off(driver: Driver) -> Gen:
    run = Run(driver, extra={"DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter"})
    url = "http://a.example/page"
    try:
        yield run.open()
        run.enqueue(Request(url), Request(url))
        out = yield run.drain()
        assert urls(out) == [url, url]
        run.enqueue(Request(url))
        out = yield run.drain()
        assert urls(out) == [url]
    finally:
        yield run.close()


# -- 4. priority boost meta -----------------------------------------------------------------


@inline_callbacks
def test_priority_boost_meta_goes_before_equal_priority(driver: Driver) -> Gen:
    run = Run(driver)
    try:
        yield run.open()
        run.enqueue(
            Request("http://a.example/plain0"),
            Request("http://a.example/plain1"),
            Request("http://a.example/boosted", meta={"frontier_priority_boost": 1}),
        )
        out = yield run.drain(expect=3)
        assert urls(out) == ["http://a.example/boosted", "http://a.example/plain0",
                             "http://a.example/plain1"]
    finally:
        yield run.close()


# -- 5. data: and file: URLs ------------------------------------------------------------------


@inline_callbacks
def test_data_and_file_urls_are_handed_out(driver: Driver, tmp_path: Path) -> Gen:
    page = tmp_path / "files" / "page.html"
    page.parent.mkdir()
    page.write_text("<html><body>a file</body></html>")
    requests = [Request("data:,one"), Request("data:,two"), Request(page.as_uri())]
    run = Run(driver)
    try:
        yield run.open()
        run.enqueue(*requests)
        out = yield run.drain()
        assert sorted(urls(out)) == sorted(urls(requests))
        assert not run.scheduler.has_pending_requests()
    finally:
        yield run.close()


# -- 6. requests that cannot be serialized ------------------------------------------------------


@pytest.mark.parametrize("kind", ["lambda_callback", "lock_in_meta"])
@inline_callbacks
def test_unserializable_request_is_still_handed_out(driver: Driver, kind: str) -> Gen:
    """Scrapy keeps such requests in memory (test_unserializable_requests); so must
    every driver, the shared Redis one too (in the worker that enqueued them)."""
    lock = threading.Lock()

    def callback(response: Any) -> None:
        return None

    if kind == "lambda_callback":
        request = Request("http://a.example/odd", callback=lambda response: None)
    else:
        request = Request("http://a.example/odd", callback=callback, meta={"lock": lock})
    plain = Request("http://b.example/plain")
    run = Run(driver)
    try:
        yield run.open()
        run.enqueue(request, plain)
        out = yield run.drain()
        assert sorted(urls(out)) == ["http://a.example/odd", "http://b.example/plain"]
        odd = next(r for r in out if r.url == "http://a.example/odd")
        assert odd.callback is request.callback
        if kind == "lock_in_meta":
            assert odd.meta["lock"] is lock
    finally:
        yield run.close()


# -- 7. empty download_slot ------------------------------------------------------------------


@inline_callbacks
def test_empty_download_slot_is_accepted(driver: Driver) -> Gen:
    requests = [Request("http://a.example/x", meta={"download_slot": ""}),
                Request("http://b.example/y", meta={"download_slot": ""})]
    run = Run(driver)
    try:
        yield run.open()
        run.enqueue(*requests)
        out = yield run.drain()
        assert sorted(urls(out)) == sorted(urls(requests))
    finally:
        yield run.close()


@inline_callbacks
def test_a_download_slot_groups_hosts_but_never_splits_one(driver: Driver,
                                                          caplog: pytest.LogCaptureFixture,
                                                          ) -> Gen:
    """a.example comes with an empty slot, with none and with the group's slot: one key
    (its own name, where it was queued first); b.example joins the group."""
    requests = [Request("http://a.example/1", meta={"download_slot": ""}),
                Request("http://a.example/2"),
                Request("http://a.example/3", meta={"download_slot": "group"}),
                Request("http://b.example/1", meta={"download_slot": "group"}),
                Request("http://c.example/1", meta={"download_slot": "group"})]
    run = Run(driver)
    try:
        yield run.open()
        with caplog.at_level(logging.WARNING, "scrapy_frontier"):
            run.enqueue(*requests)
        out: list[Request] = []
        # Nothing is fetched: every host key hands out one request, then waits. Bounded:
        # the two keys answer within a few I/O rounds; the extra calls must add nothing.
        for _ in range(400):
            request = run.scheduler.next_request()
            if request is not None:
                out.append(request)
            elif len(out) >= 2:
                break
            else:
                yield sleep(0.005)
        for _ in range(20):
            request = run.scheduler.next_request()
            if request is not None:
                out.append(request)
            yield sleep(0.005)
        hosts = sorted(r.url.split("/")[2] for r in out)
        assert hosts.count("a.example") == 1 and len(hosts) == 2, hosts
        for request in out:
            run.fetcher.fetch(request)
        rest = yield run.drain(expect=len(requests) - 2, timeout=30.0)
        assert sorted(urls(out + rest)) == sorted(urls(requests))
    finally:
        yield run.close()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("an empty slot names no host" in m for m in messages) == 1, messages
    assert sum("'a.example' is queued under the key 'a.example'" in m for m in messages) == 1


# -- 8. len() and has_pending_requests() ---------------------------------------------------


@inline_callbacks
def test_a_hosts_rest_holds_its_next_request(driver: Driver) -> Gen:
    """Each request of one host comes out only after the rest that followed the fetch
    before it (FRONTIER_MIN_DELAY here). On Redis, a round that finds no host ready
    claims the one ready within a fraction of a second ahead of its time: the worker
    must hold it until then."""
    rest = 0.15
    run = Run(driver, extra={"FRONTIER_MIN_DELAY": rest})
    requests = [Request(f"http://rest.example/{i}") for i in range(4)]
    gaps: list[float] = []
    try:
        yield run.open()
        run.enqueue(*requests)
        # From one handout to the next: the fetch in between ends at once (the rest counts
        # from its end, which the simulated fetch reports before the page's visit is kept).
        handed: float | None = None
        for _ in range(len(requests)):
            request = yield next_soon(run.scheduler)
            assert request is not None, f"{len(gaps)} gaps, then nothing came out"
            now = time.monotonic()
            if handed is not None:
                gaps.append(now - handed)
            handed = now
            run.fetcher.fetch(request)
        assert min(gaps) >= rest - 0.002, gaps
        if driver.backend == "redis":  # the rest outlasts no round: claims went ahead
            stats = run.crawler.stats.get_stats()
            assert stats.get("frontier/redis/claimed_ahead", 0) >= 1, (gaps, stats)
    finally:
        yield run.close()


@inline_callbacks
def test_requests_robots_txt_forbids_cost_their_host_no_rest(driver: Driver) -> Gen:
    """Nothing reached the host, so nothing rests: after a page and its rest, three URLs
    that robots.txt forbids come out one after another, and the host's next allowed URL
    comes right after them, not three rests later (any rest would be 2 s). Each is counted
    in frontier/unsent."""
    rest = 2.0
    run = Run(driver, extra={"FRONTIER_MIN_DELAY": rest})
    pages = ["/first", "/private/1", "/private/2", "/private/3", "/allowed"]
    requests = [Request(f"http://robots.example{path}") for path in pages]
    try:
        yield run.open()
        run.enqueue(*requests)
        handed: list[tuple[str, float]] = []
        for _ in pages:
            request = yield next_soon(run.scheduler)
            assert request is not None, f"after {handed}, nothing came out"
            handed.append((request.url, time.monotonic()))
            if "/private/" in request.url:
                run.fetcher.forbid(request)
            else:
                run.fetcher.fetch(request)
        assert [url for url, _ in handed] == [r.url for r in requests]
        # One rest in all, after /first: the rest of the way took less than one more rest.
        assert handed[1][1] - handed[0][1] >= rest - 0.002, handed
        assert handed[4][1] - handed[1][1] < rest, handed
        run.scheduler.publish_stats()
        assert run.crawler.stats.get_value("frontier/unsent") == 3
    finally:
        yield run.close()


@inline_callbacks
def test_len_and_pending_count_requests_waiting_locally(driver: Driver) -> Gen:
    """Scrapy's test_length, checked at once after enqueue_request (for Redis: before any
    I/O round landed) and again once everything came out."""
    run = Run(driver)
    requests = [Request("http://a.example/0"), Request("http://a.example/1"),
                Request("http://b.example/0")]
    try:
        yield run.open()
        sched = run.scheduler
        assert len(sched) == 0
        run.enqueue(*requests)
        assert sched.has_pending_requests()
        assert len(sched) == len(requests)
        out = yield run.drain()
        assert sorted(urls(out)) == sorted(urls(requests))
        assert len(sched) == 0
        assert not sched.has_pending_requests()
    finally:
        yield run.close()


@inline_callbacks
def test_scrapys_scheduler_stats(driver: Driver) -> Gen:
    """Dashboards built on Scrapy's scheduler read ``scheduler/enqueued``,
    ``scheduler/dequeued`` and where the requests were kept; a refused duplicate counts
    in neither."""
    run = Run(driver)
    requests = [Request(f"http://{h}.example/{i}") for h in "ab" for i in range(3)]
    try:
        yield run.open()
        accepted = run.enqueue(*requests, Request("http://a.example/0"))
        out = yield run.drain(expect=len(requests))
        assert len(out) == len(requests)
        run.scheduler.publish_stats()
        stats = run.crawler.stats.get_stats()
        assert stats["scheduler/enqueued"] == len(requests) == sum(accepted[:-1])
        assert stats["scheduler/dequeued"] == len(requests)
        where = {"memory": "scheduler/enqueued/memory", "sqlite": "scheduler/enqueued/disk",
                 "redis": "scheduler/enqueued/redis"}[driver.backend]
        assert stats[where] == len(requests)
        others = {k for k in stats if k.startswith("scheduler/enqueued/")} - {where}
        assert not {k for k in others if stats[k]}, others
    finally:
        yield run.close()


# -- 9. close and reopen ---------------------------------------------------------------------


@inline_callbacks
def test_close_and_reopen_on_the_same_state(driver: Driver) -> Gen:
    """Scrapy's on-disk variant (reopen = True): what was queued but not handed out
    comes out after a reopen on the same JOBDIR / Redis keys; memory starts empty.
    Three full cycles in one process: none may find the state "in use"."""
    requests = [Request(f"http://{h}.example/{i}") for h in "ab" for i in range(2)]
    first = Run(driver)
    try:
        yield first.open()
        first.enqueue(*requests)
        out = yield first.drain(expect=1)
        assert len(out) == 1
    finally:
        yield first.close()
    fetched = out[0].url
    left = sorted(u for u in urls(requests) if u != fetched)

    second = Run(driver)
    try:
        yield second.open()
        second.enqueue(Request(fetched))  # fetched in the first run
        out = yield second.drain()
        if driver.persistent:
            assert sorted(urls(out)) == left
        else:
            assert urls(out) == [fetched]
        assert len(second.scheduler) == 0
        assert not second.scheduler.has_pending_requests()
    finally:
        yield second.close()

    third = Run(driver)
    try:
        yield third.open()
        third.enqueue(Request("http://c.example/new"))
        out = yield third.drain()
        assert urls(out) == ["http://c.example/new"]
    finally:
        yield third.close()


# -- 10. start requests and the page history ----------------------------------------------------


def _start_request(url: str) -> Request:
    # What Scrapy 2.19's StartSpiderMiddleware sets on requests from Spider.start().
    return Request(url, dont_filter=True, meta={"is_start_request": True})


@inline_callbacks
def test_start_request_for_a_page_fetched_this_run(driver: Driver) -> Gen:
    """In one process a start request is never refused within a run (Scrapy's
    dont_filter contract). On a shared frontier a start request whose page this crawl
    already fetched is not fetched again: it is how N workers of one spider fetch each
    start URL once (the shared seen set cannot tell which worker fetched the page)."""
    run = Run(driver)
    url = "http://a.example/start"
    try:
        yield run.open()
        run.enqueue(Request(url))
        out = yield run.drain()
        assert urls(out) == [url]
        run.enqueue(_start_request(url))
        out = yield run.drain()
        assert urls(out) == ([] if driver.backend == "redis" else [url])
    finally:
        yield run.close()


@inline_callbacks
def test_a_start_url_listed_twice_is_fetched_twice(driver: Driver) -> Gen:
    """Scrapy's test_start_dupes: dont_filter start requests are all fetched (on a shared
    frontier too: a second worker listing them would add nothing, see the crawl tests)."""
    run = Run(driver)
    url = "http://a.example/twice"
    try:
        yield run.open()
        run.enqueue(_start_request(url), _start_request(url), _start_request(url))
        out = yield run.drain()
        assert urls(out) == [url] * 3
    finally:
        yield run.close()


@inline_callbacks
def test_start_request_not_due_is_skipped_in_a_later_run(driver: Driver) -> Gen:
    """Second run on persistent state, default recrawl: a start request for a page the
    first run fetched, not due yet, is not handed out; an ordinary dont_filter request
    for such a page is. Memory keeps no history: both are handed out."""
    start_url, other_url = "http://a.example/start", "http://a.example/other"
    first = Run(driver)
    try:
        yield first.open()
        first.enqueue(Request(start_url), Request(other_url))
        out = yield first.drain()
        assert sorted(urls(out)) == sorted([start_url, other_url])
    finally:
        yield first.close()

    second = Run(driver)
    try:
        yield second.open()
        second.enqueue(_start_request(start_url), Request(other_url, dont_filter=True))
        out = yield second.drain()
        if driver.persistent:
            assert urls(out) == [other_url]
        else:
            assert sorted(urls(out)) == sorted([start_url, other_url])
    finally:
        yield second.close()


@inline_callbacks
def test_due_pages_of_a_later_run_come_out_on_the_schedulers_own_wake_ups(
        driver: Driver) -> Gen:
    """A recrawl's first requests are the pages due in the history. The engine here asks
    for requests only when the scheduler wakes it (never on its own 5 s heartbeat): each
    due page must come out all the same (on Redis the due pages arrive with a later I/O
    round, after the first ask found none)."""
    if not driver.persistent:
        pytest.skip("memory keeps no page history")
    pages = [f"http://due.example/{i}" for i in range(3)]
    extra = {"FRONTIER_RECRAWL_INITIAL": 0.2, "FRONTIER_RECRAWL_MIN": 0.1}
    first = Run(driver, extra=extra)
    try:
        yield first.open()
        first.enqueue(*[Request(url) for url in pages])
        out = yield first.drain(expect=len(pages))
        assert sorted(urls(out)) == sorted(pages)
    finally:
        yield first.close()
    yield sleep(0.3)  # every page falls due
    second = Run(driver, extra=extra)
    wakes = second.crawler.engine._slot.nextcall
    got: list[Request] = []
    try:
        yield second.open()
        seen_wakes = -1
        deadline = time.monotonic() + 15.0
        while len(got) < len(pages) and time.monotonic() < deadline:
            if wakes.calls == seen_wakes:
                yield sleep(0.005)
                continue
            seen_wakes = wakes.calls
            request = second.scheduler.next_request()
            while request is not None:
                got.append(request)
                second.fetcher.fetch(request)
                request = second.scheduler.next_request()
        assert sorted(urls(got)) == sorted(pages), (urls(got), wakes.calls)
    finally:
        yield second.close()


# -- 11. two spiders on one state -----------------------------------------------------------


@inline_callbacks
def test_another_spiders_state_is_refused_by_name(driver: Driver) -> Gen:
    """One JOBDIR / FRONTIER_REDIS_KEY belongs to one spider: another spider's open
    fails with an error naming both. (Memory shares nothing: both open.)"""
    first = Run(driver, spidercls=spider_named("contract_alpha"))
    try:
        yield first.open()
        first.enqueue(Request("http://a.example/x"))
        out = yield first.drain()
        assert urls(out) == ["http://a.example/x"]
    finally:
        yield first.close()

    second = Run(driver, spidercls=spider_named("contract_beta"))
    error: BaseException | None = None
    try:
        try:
            yield second.open()
        except Exception as exc:  # noqa: BLE001 - inspected below
            error = exc
    finally:
        yield second.close()
    if driver.persistent:
        assert error is not None, "another spider's state was opened without an error"
        message = str(error)
        assert "contract_alpha" in message and "contract_beta" in message, message
    else:
        assert error is None, error


# -- 12. a real crawl per driver ----------------------------------------------------------


@pytest.mark.crawl
def test_crawl_is_complete_without_duplicates_and_polite(driver: Driver, tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "10", "--latency", "0.005",
                "0.01", "--seed", "21"]
    # The default 10 x fetch-time rest (no minimum), so that short gaps mean something.
    settings = {"ADDONS": ADDON, "FRONTIER_MIN_DELAY": 0.0, **driver.settings}
    with ServerProcess(web_args, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl", timeout=60)
    assert result.returncode == 0, result.output[-3000:]
    report = audit(read_log(log), expected=web.expected, min_delay=0.0, factor=10.0)
    assert len(web.expected) == 40
    assert report.coverage == 1.0, report.summary()
    assert report.duplicates == 0, report.summary()
    assert report.overlaps == 0, report.summary()
    assert report.short_gaps == 0, report.summary()
    assert result.stats.get("finish_reason") == "finished", result.stats


@inline_callbacks
def test_the_queue_forgets_a_fetched_page_only_after_its_visit_is_kept(
        driver: Driver, monkeypatch: pytest.MonkeyPatch) -> Gen:
    """A kill -9 at any moment after a fetch finds the page's visit in the history, or its
    request still queued (fetched again): the moment the queue forgets the request (SQLite:
    the commit that deletes its row; Redis: the completion script) comes after the history
    holds the visit."""
    if not driver.persistent:
        pytest.skip("memory: nothing outlives the run")
    forgotten: list[bool] = []  # for each moment: was the visit kept by then?
    if driver.backend == "redis":
        from scrapy_frontier.backends.redis.frontier import RedisFrontier
        from scrapy_frontier.backends.redis.partitions import Layout

        run_round = RedisFrontier.round
        count = driver.settings.get("FRONTIER_REDIS_PARTITIONS", 1)
        history = Layout("", "", driver.settings["FRONTIER_REDIS_HISTORY_KEY"], count=count,
                         tagged=driver.name == "redis-cluster")

        def checked(self: Any, pushes: Any, finished: Any, want: int, **kw: Any) -> Any:
            finished = list(finished)
            for done in finished:  # each completion: the lease's page, kept by then?
                fp = int.from_bytes(done.lease.item[:8], "big", signed=True)
                key = history.history_prefix(fp % count) + "pages"
                forgotten.append(bool(self.client.hexists(key, fp)))
            return run_round(self, pushes, finished, want, **kw)

        monkeypatch.setattr(RedisFrontier, "round", checked)
    else:
        import sqlite3

        from scrapy_frontier.backends.sqlite.queue import SQLiteStore

        flush = SQLiteStore.flush
        acked = [0]  # fetched rows deleted so far, each one page's visit

        def committed(self: Any) -> Any:
            if self._writes.acks:
                acked[0] += len(self._writes.acks)
                history = sqlite3.connect(driver.state_dir / "history.sqlite")
                kept = history.execute("SELECT COUNT(*) FROM pages").fetchone()[0]
                history.close()
                forgotten.append(kept >= acked[0])
            return flush(self)

        monkeypatch.setattr(SQLiteStore, "flush", committed)
    run = Run(driver)
    try:
        yield run.open()
        run.enqueue(*(Request(f"http://h{i}.example/p") for i in range(4)))
        out = yield run.drain()
        assert len(out) == 4
    finally:
        yield run.close()
    assert forgotten and all(forgotten), forgotten


# -- 6. A start() that raises, in Scrapy's engine ---------------------------------------------


@inline_callbacks
def test_requests_yielded_before_a_start_error_are_still_crawled(
        driver: Driver, caplog: pytest.LogCaptureFixture) -> Gen:
    """Scrapy's tests/test_engine_loop.py::test_start_error, on the frontier: a spider
    whose start() yields ``data:,a`` and then raises still fetches ``data:,a``, and the
    crawl finishes with reason ``start_error``."""
    from scrapy import signals
    from scrapy.spiders import Spider
    from scrapy.utils.test import get_crawler

    class StartErrorSpider(Spider):
        name = f"start_error_{driver.name}"

        async def start(self) -> Any:
            yield Request("data:,a")
            raise ValueError

        def parse(self, response: Any) -> None:
            return None

    reached: list[str] = []
    errors: list[Any] = []
    settings = {**CONTRACT_SETTINGS, **driver.settings, "TWISTED_REACTOR": None,
                "LOG_LEVEL": "WARNING", "FRONTIER_REDIS_IDLE_GRACE": 0}
    crawler = get_crawler(StartErrorSpider, settings_dict=settings)
    crawler.signals.connect(lambda request, spider: reached.append(request.url),
                            signals.request_reached_downloader, weak=False)
    crawler.signals.connect(lambda failure, response, spider: errors.append(failure),
                            signals.spider_error, weak=False)
    with caplog.at_level(logging.ERROR, logger="scrapy.core.engine"):
        yield crawler.crawl()
    assert crawler.stats.get_value("frontier/backend") == driver.backend
    assert reached == ["data:,a"]
    # Scrapy >= 2.14 sends spider_error and finishes with "start_error"; 2.13 logs it.
    logged = [r for r in caplog.records if "start" in r.getMessage() and r.exc_info
              and isinstance(r.exc_info[1], ValueError)]
    assert len(errors) + len(logged) >= 1
    assert all(isinstance(failure.value, ValueError) for failure in errors)
    if errors:
        assert crawler.stats.get_value("finish_reason") == "start_error"


@inline_callbacks
def test_a_start_request_still_on_its_way_to_redis_when_start_fails_is_crawled(
        driver: Driver, monkeypatch: pytest.MonkeyPatch) -> Gen:
    """The same spider, with the moment that could lose the request made to happen on Redis:
    start() yields only once a round has found the whole crawl idle, and the round that
    carries the push of ``data:,a`` waits until the engine, start() failed and nothing
    fetched, has asked whether anything is pending. The frontier must say yes (not "idle", as
    the last round that landed said), then fetch the request once its round lands."""
    from scrapy import signals
    from scrapy.spiders import Spider
    from scrapy.utils.defer import maybe_deferred_to_future
    from scrapy.utils.test import get_crawler
    from twisted.internet.defer import Deferred

    from scrapy_frontier.backends.redis.driver import RedisDriver
    from scrapy_frontier.scheduler import FrontierScheduler

    if driver.backend != "redis":
        pytest.skip("no I/O round: the push is queued before enqueue_request returns")

    idle: Deferred[None] = Deferred()  # a round found the crawl idle
    failed = threading.Event()  # start() raised
    asked = threading.Event()  # ... and then the engine asked has_pending_requests()
    answers: list[tuple[bool, bool]] = []  # (fetched by then, the answer)
    reached: list[str] = []
    run_round, round_done = RedisDriver._run_round, RedisDriver._round_done

    def held(self: Any, rnd: Any) -> Any:  # in the I/O thread
        if rnd.pushes:
            assert asked.wait(30.0), "the engine never asked for pending requests"
        return run_round(self, rnd)

    def landed(self: Any, answer: Any) -> None:
        round_done(self, answer)
        if self.view.idle_since is not None and not idle.called:
            idle.callback(None)

    monkeypatch.setattr(RedisDriver, "_run_round", held)
    monkeypatch.setattr(RedisDriver, "_round_done", landed)
    has_pending = FrontierScheduler.has_pending_requests

    def pending(self: Any) -> bool:
        answer = has_pending(self)
        if failed.is_set() and not asked.is_set():
            answers.append((bool(reached), answer))
            asked.set()
        return answer

    monkeypatch.setattr(FrontierScheduler, "has_pending_requests", pending)

    class StartErrorSpider(Spider):
        name = f"start_error_held_{driver.name}"

        async def start(self) -> Any:
            await maybe_deferred_to_future(idle)
            yield Request("data:,a")
            failed.set()
            raise ValueError

        def parse(self, response: Any) -> None:
            return None

    # No grace, and no progress line (its census would keep the crawl open a round longer).
    # Sealed rows: a data: URL is kept in Redis only with keys (docs/security.rst).
    settings = {**CONTRACT_SETTINGS, **driver.settings, "TWISTED_REACTOR": None,
                "LOG_LEVEL": "WARNING", "FRONTIER_REDIS_IDLE_GRACE": 0,
                "FRONTIER_PROGRESS_INTERVAL": 0,
                "FRONTIER_SIGNING_KEYS": "a-signing-key-of-the-contract-tests"}
    crawler = get_crawler(StartErrorSpider, settings_dict=settings)
    crawler.signals.connect(lambda request, spider: reached.append(request.url),
                            signals.request_reached_downloader, weak=False)
    try:
        yield crawler.crawl()
    finally:
        asked.set()  # never leave the I/O thread waiting
    assert crawler.stats.get_value("frontier/backend") == driver.backend
    # The engine asked while the request was still in the held round: pending.
    assert answers == [(False, True)]
    assert reached == ["data:,a"]
