"""The scheduler on its SQLite state: pause/resume, crash recovery, bad state."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request

from scrapy_frontier.backends.sqlite.backend import STATE_FILE
from scrapy_frontier.core import FakeClock
from scrapy_frontier.errors import StoreError
from tests.scheduler.test_scheduler import finish, make_scheduler


def job(tmp_path: Path) -> dict[str, str]:
    return {"JOBDIR": str(tmp_path / "job")}


def crash(sched) -> None:  # type: ignore[no-untyped-def]
    """Stop like kill -9: flush what a timer would have flushed, then drop everything."""
    store = sched.backend.queue.store
    store.flush()
    # kill -9: the connection is dropped, and the kernel drops the lock.
    store._state.close()
    if sched.history_feed.hooks is not None:  # the page history's buffer dies with the process
        sched.history_feed.hooks.recrawler.store._conn.close()
        sched.history_feed.hooks.recrawler.store._unlock()


def test_clean_close_and_reopen_restores_queue_and_rests(tmp_path: Path) -> None:
    sched, clock, _ = make_scheduler(job(tmp_path))
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}", priority=i))
    sched.enqueue_request(Request("http://b.example/0"))
    first = sched.next_request()
    assert first is not None and first.url == "http://a.example/2"
    finish(sched, clock, first, 0.5)  # a.example rests 5 s
    sched.close("shutdown")
    assert (tmp_path / "job" / STATE_FILE).exists()

    again, clock2, crawler2 = make_scheduler(job(tmp_path), clock=FakeClock(100.0))
    assert crawler2.stats.get_value("frontier/restored") == 3
    assert crawler2.stats.get_value("frontier/recovered_leases") == 0
    got = again.next_request()
    assert got is not None and got.url == "http://b.example/0"
    assert again.next_request() is None  # a.example is still resting after the restart
    clock2.advance(5.0)
    nxt = again.next_request()
    assert nxt is not None and nxt.url == "http://a.example/1"
    again.close("finished")


def test_crash_requeues_in_flight_and_rests_interrupted_hosts(tmp_path: Path) -> None:
    sched, clock, _ = make_scheduler(job(tmp_path))
    for i in range(4):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    first = sched.next_request()
    assert first is not None
    finish(sched, clock, first, 0.2)
    clock.advance(2.01)
    in_flight = sched.next_request()
    assert in_flight is not None
    crash(sched)

    clock2 = FakeClock(500.0)
    again, _, crawler2 = make_scheduler(job(tmp_path), clock=clock2)
    assert crawler2.stats.get_value("frontier/recovered_leases") == 1
    assert crawler2.stats.get_value("frontier/restored") == 3
    # The interrupted host rests as if its fetch had just ended (10 x 0.2 s).
    assert again.next_request() is None
    clock2.advance(2.01)
    req = again.next_request()
    assert req is not None and req.url == in_flight.url  # at-least-once: fetched again
    again.close("finished")


def test_fetched_page_is_kept_until_the_engine_is_done_with_it(tmp_path: Path) -> None:
    sched, clock, crawler = make_scheduler(job(tmp_path))
    inprogress = crawler.engine._slot.inprogress
    sched.enqueue_request(Request("http://a.example/page"))
    page = sched.next_request()
    assert page is not None
    inprogress.add(page)  # the engine tracks it until its callback output is queued
    sched.fetches.sent(page)
    clock.advance(0.1)
    sched.fetches.completed(page)
    assert sched.next_request() is None  # still in progress: not acknowledged
    crash(sched)  # before the spider's links were queued: the page must come back
    again, _, crawler2 = make_scheduler(job(tmp_path))
    assert crawler2.stats.get_value("frontier/recovered_leases") == 1
    again.close("finished")


def test_links_are_durable_before_the_page_is_forgotten(tmp_path: Path) -> None:
    sched, clock, crawler = make_scheduler(job(tmp_path))
    inprogress = crawler.engine._slot.inprogress
    sched.enqueue_request(Request("http://a.example/page"))
    page = sched.next_request()
    assert page is not None
    inprogress.add(page)
    sched.fetches.completed(page)
    sched.enqueue_request(Request("http://b.example/link"))  # yielded by the callback
    inprogress.discard(page)  # the engine is done with it
    link = sched.next_request()  # acknowledges the page, and writes it through
    assert link is not None and link.url == "http://b.example/link"
    crash(sched)
    again, _, crawler2 = make_scheduler(job(tmp_path))
    assert crawler2.stats.get_value("frontier/recovered_leases") == 1  # only the link
    assert crawler2.stats.get_value("frontier/restored") == 1
    again.close("finished")


def test_retry_is_queued_before_the_failed_request_is_forgotten(tmp_path: Path) -> None:
    sched, _, crawler = make_scheduler(job(tmp_path))
    inprogress = crawler.engine._slot.inprogress
    sched.enqueue_request(Request("http://a.example/flaky"))
    req = sched.next_request()
    assert req is not None
    inprogress.add(req)
    sched.fetches.completed(req)  # a download error; RetryMiddleware follows
    crash(sched)  # before the retry was queued: the URL must come back
    again, _, crawler2 = make_scheduler(job(tmp_path))
    assert crawler2.stats.get_value("frontier/recovered_leases") == 1
    again.close("finished")


def test_unserializable_request_is_kept_in_memory_and_counted(tmp_path: Path) -> None:
    sched, _, crawler = make_scheduler(job(tmp_path))
    assert sched.enqueue_request(Request("http://a.example/lambda", callback=lambda r: None))
    req = sched.next_request()
    assert req is not None and req.url == "http://a.example/lambda"
    sched.close("finished")
    assert crawler.stats.get_value("frontier/volatile") == 1


def test_corrupt_state_stops_the_crawl_naming_the_file(tmp_path: Path) -> None:
    state = tmp_path / "job" / STATE_FILE
    state.parent.mkdir(parents=True)
    state.write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreError, match="corrupt") as info:
        make_scheduler(job(tmp_path))
    assert str(state) in str(info.value)
    assert state.read_bytes() == b"garbage" * 1000


def test_another_programs_database_as_state_stops_the_crawl_unchanged(tmp_path: Path) -> None:
    state = tmp_path / "job" / STATE_FILE
    state.parent.mkdir(parents=True)
    db = sqlite3.connect(state)
    with db:
        db.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO users(name) VALUES ('ada')")
    db.close()
    before = state.read_bytes()
    with pytest.raises(StoreError, match="not a scrapy-frontier state file") as info:
        make_scheduler(job(tmp_path))
    assert str(state) in str(info.value)
    assert state.read_bytes() == before


def test_state_of_another_spider_is_refused(tmp_path: Path) -> None:
    sched, _, _ = make_scheduler(job(tmp_path))
    sched.close("finished")
    db = sqlite3.connect(tmp_path / "job" / STATE_FILE)
    with db:
        db.execute("UPDATE meta SET value = 'other' WHERE key = 'spider'")
    db.close()
    with pytest.raises(StoreError, match="belongs to spider 'other'"):
        make_scheduler(job(tmp_path))


@pytest.mark.parametrize("engine_api", ["close_spider_async", "close_spider"])
def test_write_failure_stops_the_crawl_and_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine_api: str
) -> None:
    """Stopped through Scrapy's engine, as Scrapy >= 2.14 has it or as Scrapy 2.13 does."""
    sched, _, crawler = make_scheduler(job(tmp_path))
    closed: list[str] = []

    async def close_spider_async(*, reason: str) -> None:
        closed.append(reason)

    def close_spider(spider: Any, reason: str = "cancelled") -> None:
        assert spider is crawler.spider
        closed.append(reason)

    if engine_api == "close_spider_async":
        crawler.engine.close_spider_async = close_spider_async
    else:
        crawler.engine.spider = crawler.spider
        crawler.engine.close_spider = close_spider
    store = sched.backend.queue.store
    store._state.db.execute("PRAGMA query_only = ON")  # every write now fails, like a full disk
    with caplog.at_level(logging.ERROR, logger="scrapy_frontier"):
        sched.enqueue_request(Request("http://a.example/0"))
        sched.enqueue_request(Request("http://a.example/1"))
        assert sched.next_request() is None
    assert closed == ["frontier_store_error"]
    assert crawler.stats.get_value("frontier/store/errors") >= 1
    assert any(str(tmp_path) in r.getMessage() for r in caplog.records)
    store._state.db.execute("PRAGMA query_only = OFF")  # space freed before the close
    sched.close("frontier_store_error")
    again, _, crawler2 = make_scheduler(job(tmp_path))
    assert crawler2.stats.get_value("frontier/restored") == 2
    again.close("finished")


def test_frontier_path_setting_wins(tmp_path: Path) -> None:
    sched, _, _ = make_scheduler(
        {"FRONTIER_PATH": str(tmp_path / "fp"), "JOBDIR": str(tmp_path / "job")}
    )
    sched.enqueue_request(Request("http://a.example/0"))
    sched.close("shutdown")
    assert (tmp_path / "fp" / STATE_FILE).exists()
    assert not (tmp_path / "job" / STATE_FILE).exists()


def test_unserializable_requests_left_at_a_stop_do_not_block_the_resume(tmp_path: Path) -> None:
    sched, _, _ = make_scheduler(job(tmp_path))
    sched.enqueue_request(Request("http://a.example/lambda", callback=lambda r: None))
    sched.enqueue_request(Request("http://b.example/plain"))
    sched.close("shutdown")
    again, _, crawler2 = make_scheduler(job(tmp_path))
    assert crawler2.stats.get_value("frontier/volatile_lost") == 1
    assert crawler2.stats.get_value("frontier/restored") == 1
    req = again.next_request()
    assert req is not None and req.url == "http://b.example/plain"
    assert again.next_request() is None
    again.close("finished")


def test_a_kill_before_the_seen_set_is_written_queues_no_url_twice(tmp_path: Path) -> None:
    """The seen-set is written after the queue is synced (at the periodic flush): the
    fingerprints of URLs queued after its last write are put back at open, so the links
    of a page fetched again after a kill are not queued a second time."""
    from scrapy_frontier.dupefilter import FrontierDupeFilter

    settings = {**job(tmp_path), "FRONTIER_FLUSH_INTERVAL": 1.0}
    sched, clock, _ = make_scheduler(settings, dupefilter=FrontierDupeFilter)
    assert sched.enqueue_request(Request("http://a.example/0"))
    clock.advance(1.5)
    assert sched.enqueue_request(Request("http://a.example/1"))  # the periodic flush
    seen_store = sched.df.seen.store  # type: ignore[attr-defined]
    assert seen_store.covers is not None
    for i in range(2, 5):
        assert sched.enqueue_request(Request(f"http://a.example/{i}"))
    assert seen_store.pending == 3  # queued after the seen-set's last write
    crash(sched)
    seen_store._conn.close()  # its buffer dies with the process
    seen_store._unlock()

    again, _, crawler2 = make_scheduler(settings, dupefilter=FrontierDupeFilter)
    assert crawler2.stats.get_value("frontier/restored") == 5
    assert crawler2.stats.get_value("frontier/seen/caught_up") == 3
    for i in range(5):  # found again on a page fetched again: not queued twice
        assert not again.enqueue_request(Request(f"http://a.example/{i}"))
    assert again.enqueue_request(Request("http://a.example/new"))
    again.close("finished")


def test_a_url_fetched_before_the_seen_set_is_written_is_not_fetched_again(
        tmp_path: Path) -> None:
    """A page fetched and acknowledged before the seen-set's first write, then a kill: the
    restart puts its fingerprint back (from the ``done`` rows), so that ``start()`` or a
    page fetched again finding it does not fetch it a second time."""
    from scrapy_frontier.dupefilter import FrontierDupeFilter

    settings = {**job(tmp_path), "FRONTIER_FLUSH_INTERVAL": 60.0}
    sched, _, _ = make_scheduler(settings, dupefilter=FrontierDupeFilter)
    assert sched.enqueue_request(Request("http://a.example/first"))  # the periodic flush
    seen_store = sched.df.seen.store  # type: ignore[attr-defined]
    assert seen_store.covers == 1 and seen_store.pending == 0
    assert sched.enqueue_request(Request("http://b.example/start"))
    assert [r.url for r in (sched.next_request(), sched.next_request()) if r is not None] == [
        "http://a.example/first", "http://b.example/start"]
    # The start page's fetch ends, and its link is queued.
    sched.fetches.completed(next(f.request for f in sched.fetches.inflight._out.values()
                              if f.request.url.endswith("/start")))
    assert sched.enqueue_request(Request("http://b.example/link"))
    link = sched.next_request()  # the start page is acknowledged; the link is in flight
    assert link is not None and link.url == "http://b.example/link"
    assert seen_store.covers == 1 and seen_store.pending == 2  # not written since
    done = sched.backend.queue.store._state.db.execute("SELECT COUNT(*) FROM done").fetchone()[0]
    assert done == 1
    crash(sched)
    seen_store._conn.close()  # its buffer dies with the process
    seen_store._unlock()

    again, clock2, crawler2 = make_scheduler(settings, dupefilter=FrontierDupeFilter)
    assert crawler2.stats.get_value("frontier/restored") == 2  # first and link, in flight
    assert crawler2.stats.get_value("frontier/seen/caught_up") == 2  # start and link
    assert not again.enqueue_request(Request("http://b.example/start"))  # start() again
    assert not again.enqueue_request(Request("http://b.example/link"))
    for _ in range(2):
        request = again.next_request()
        assert request is not None and not request.url.endswith("/start")
        again.fetches.completed(request)
    assert again.next_request() is None
    # The next periodic flush writes the seen-set: the acknowledged rows are purged, and
    # stay purged when nothing more is queued.
    for _ in range(2):
        clock2.advance(61.0)
        assert again.next_request() is None
        db = again.backend.queue.store._state.db
        assert db.execute("SELECT COUNT(*) FROM done").fetchone()[0] == 0
    again.close("finished")
