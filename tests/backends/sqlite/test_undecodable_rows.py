"""A queued row that cannot be rebuilt is set aside, and the rest of the JOBDIR is crawled."""

from __future__ import annotations

import logging
import pickle
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from scrapy import FormRequest, Request

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from scrapy_frontier.backends.sqlite.backend import STATE_FILE
from scrapy_frontier.backends.sqlite.queue import SQLiteStore
from scrapy_frontier.codec import COMPACT, FULL, request_codec, saved_url
from scrapy_frontier.core import FakeClock, Frontier
from scrapy_frontier.errors import StoreError
from tests.invariants import check_frontier
from tests.test_codec import CodecSpider


class Bad(Exception):
    """Pickles, but does not unpickle: __init__ wants two arguments, args holds one."""

    def __init__(self, a: object, b: object) -> None:
        super().__init__(a)


def open_store(path: Path) -> SQLiteStore[Any]:
    return SQLiteStore(
        path, levels=2, spider="codec", codec=request_codec(CodecSpider()), window=2, flush_ops=3
    )


def resume(path: Path) -> tuple[SQLiteStore[Any], Frontier[Any], FakeClock]:
    """Reopen the file as the sqlite backend does."""
    store = open_store(path)
    hosts, _ = store.recover()
    for host, size in hosts.items():
        store.adopt(host, size)
    clock = FakeClock(0.0)
    frontier: Frontier[Any] = Frontier(front_queues=2, back_queues=1, clock=clock, store=store)
    frontier.resume(store.front_count(), hosts)
    return store, frontier, clock


def drain(frontier: Frontier[Any], clock: FakeClock) -> list[str]:
    urls = []
    for _ in range(1000):
        lease = frontier.pop()
        check_frontier(frontier)  # after pop: resume() leaves the refill to the first pop
        if lease is None:
            if not len(frontier):
                break
            clock.advance(100.0)
            continue
        urls.append(lease.item.url)
        frontier.complete(lease.ticket, 0.01)
    check_frontier(frontier)
    return urls


def quarantined(path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT id, host, level, data, error, at FROM quarantine").fetchall()
    finally:
        db.close()


def test_meta_that_does_not_unpickle_is_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    store.back_open("a.example")
    urls = [f"http://a.example/{i}" for i in range(6)]
    for i, url in enumerate(urls):
        meta = {"error": Bad("x", "y")} if i == 2 else {}
        store.back_append("a.example", 1, Request(url, meta=meta))
    store.front_append(1, "b.example", Request("http://b.example/0"))
    store.close()

    store, frontier, clock = resume(path)
    with caplog.at_level(logging.ERROR, logger="scrapy_frontier.store"):
        got = drain(frontier, clock)
    store.close()
    assert sorted(got) == sorted([u for u in urls if u != urls[2]] + ["http://b.example/0"])
    assert store.undecodable == 1 and store.stats()["undecodable"] == 1
    [(row, host, level, data, error, at)] = quarantined(path)
    assert (host, level) == ("a.example", 1) and row == 3
    assert saved_url(data) == urls[2] and "TypeError" in error and at.endswith("Z")
    [record] = [r for r in caplog.records if "quarantine" in r.getMessage()]
    assert urls[2] in record.getMessage() and str(path) in record.getMessage()
    # Set aside for good: the next run has nothing of it left to trip on.
    store, frontier, clock = resume(path)
    assert len(frontier) == 0
    store.close()


@pytest.mark.parametrize("table", ["back", "front"])
def test_corrupt_row_is_set_aside_naming_its_row_and_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, table: str
) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    urls = [f"http://a.example/{i}" for i in range(5)]
    if table == "back":
        store.back_open("a.example")
        for url in urls:
            store.back_append("a.example", 2, Request(url))
    else:
        for url in urls:
            store.front_append(2, "a.example", Request(url))
    store.close()
    db = sqlite3.connect(path)
    with db:
        db.execute(f"UPDATE {table} SET data = x'00ff00ff' WHERE id = 4")
    db.close()

    store, frontier, clock = resume(path)
    with caplog.at_level(logging.ERROR, logger="scrapy_frontier.store"):
        got = drain(frontier, clock)
    store.close()
    assert got == [u for u in urls if u != urls[3]]
    assert store.undecodable == 1
    [(row, host, level, data, error, _)] = quarantined(path)
    assert (row, host, level, data) == (4, "a.example", 2, b"\x00\xff\x00\xff")
    assert "format byte 0" in error
    [record] = [r for r in caplog.records if "quarantine" in r.getMessage()]
    assert "row 4 (host 'a.example')" in record.getMessage()


def test_host_whose_every_row_is_unreadable_gives_up_its_back_queue(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    store.back_open("a.example")
    for i in range(3):
        store.back_append("a.example", 1, Request(f"http://a.example/{i}", meta={"e": Bad(1, 2)}))
    for i in range(3):
        store.front_append(1, "b.example", Request(f"http://b.example/{i}"))
    store.close()

    store, frontier, clock = resume(path)
    assert drain(frontier, clock) == [f"http://b.example/{i}" for i in range(3)]
    assert frontier.active_back_queues == 0 and len(frontier) == 0
    store.close()
    assert store.undecodable == 3 and len(quarantined(path)) == 3


def test_row_written_in_this_run_is_set_aside_too(tmp_path: Path) -> None:
    """The bad row never reached the file's back table: it goes to quarantine only."""
    store = open_store(tmp_path / "f.sqlite")
    frontier: Frontier[Any] = Frontier(front_queues=2, clock=FakeClock(0.0), store=store)
    for i in range(4):
        frontier.push("a.example", 1, Request(f"http://a.example/{i}", meta={"e": Bad(1, 2)}
                                              if i == 1 else {}))
    clock = frontier.clock
    assert isinstance(clock, FakeClock)
    assert drain(frontier, clock) == [f"http://a.example/{i}" for i in (0, 2, 3)]
    store.close()
    assert store.undecodable == 1 and [r[0] for r in quarantined(store.path)] == [2]
    db = sqlite3.connect(store.path)
    assert db.execute("SELECT COUNT(*) FROM back").fetchone()[0] == 0
    db.close()


def test_retired_host_with_unreadable_rows_is_dropped_cleanly(tmp_path: Path) -> None:
    store = open_store(tmp_path / "f.sqlite")
    frontier: Frontier[Any] = Frontier(front_queues=2, clock=FakeClock(0.0), store=store)
    frontier.push("a.example", 1, Request("http://a.example/0"))
    frontier.push("a.example", 1, Request("http://a.example/1", meta={"e": Bad(1, 2)}))
    frontier.push("a.example", 1, Request("http://a.example/2"))
    dropped = frontier.retire("a.example")
    assert [r.url for r in dropped] == ["http://a.example/0", "http://a.example/2"]
    check_frontier(frontier)
    assert store.undecodable == 1
    store.close()


def test_removed_callback_still_stops_and_leaves_the_row_in_place(tmp_path: Path) -> None:
    """A renamed callback concerns every row naming it: restoring the code must resume them."""
    path = tmp_path / "f.sqlite"
    spider = CodecSpider()
    store = open_store(path)
    store.back_open("a.example")
    store.back_append("a.example", 1, FormRequest("http://a.example/", callback=spider.on_error))
    store.close()
    db = sqlite3.connect(path)
    data = db.execute("SELECT data FROM back").fetchone()[0]
    fields = pickle.loads(data[1:])
    fields["callback"] = "gone_away"
    with db:
        db.execute("UPDATE back SET data = ?", (bytes([FULL]) + pickle.dumps(fields),))
    db.close()
    store, frontier, _ = resume(path)
    with pytest.raises(StoreError, match="'gone_away'.*spider's code changed"):
        frontier.pop()
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM back").fetchone()[0] == 1
    db.close()


def test_saved_url_reads_through_values_that_do_not_unpickle() -> None:
    codec = request_codec(CodecSpider())
    url = "http://a.example/p?q=1"
    assert saved_url(codec.encode(Request(url, meta={"e": Bad(1, 2)}))) == url
    assert saved_url(codec.encode(FormRequest(url, meta={"e": Bad(1, 2)}))) == url
    assert saved_url(b"\x00\xff") is None
    assert saved_url(bytes([COMPACT]) + pickle.dumps(("not a url",))) is None


WEB = ["--shape", "skewed", "--hosts", "4", "--largest", "20", "--latency", "0.002", "0.01",
       "--seed", "3"]


@pytest.mark.crawl
def test_crawl_resumes_past_a_corrupt_row(tmp_path: Path) -> None:
    settings: dict[str, object] = {
        "ADDONS": FRONTIER_ADDON,
        "FRONTIER_MIN_DELAY": 0.0,
        "JOBDIR": str(tmp_path / "job"),
    }
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        first = run_crawl(web.start_urls, {**settings, "CLOSESPIDER_PAGECOUNT": 8},
                          workdir=tmp_path / "run1")
        assert first.returncode == 0, first.output[-3000:]
        assert first.stats["frontier/queued"] > 0
        # Corrupt a queued leaf page (no tree children), so that only it goes missing.
        pages: dict[str, int] = {}
        for host, _ in web.expected:
            pages[host] = pages.get(host, 0) + 1
        state = tmp_path / "job" / STATE_FILE
        db = sqlite3.connect(state)
        rows = [
            (table, row, data)
            for table in ("front", "back")
            for row, data in db.execute(f"SELECT id, data FROM {table}")
        ]
        victim = None
        for table, row, data in rows:
            url = saved_url(data)  # a compact or (Scrapy < 2.15) a full row
            assert url is not None, data
            parts = urlsplit(url)
            host, path = str(parts.hostname), parts.path
            if path.startswith("/p/") and 2 * int(path[3:]) + 1 >= pages[host]:
                victim = (table, row, data, url, host, path)
                break
        assert victim is not None, "no queued leaf page: change the web or the page count"
        table, row, data, url, host, path = victim
        with db:  # truncated: unpickling fails, the URL still shows
            db.execute(f"UPDATE {table} SET data = ? WHERE id = ?", (data[:-4], row))
        db.close()

        second = run_crawl(web.start_urls, settings, workdir=tmp_path / "run2")
        assert second.returncode == 0, second.output[-3000:]
    assert second.stats["finish_reason"] == "finished", second.output[-3000:]
    assert second.stats["frontier/store/undecodable"] == 1
    assert f"the queued request {url} cannot be rebuilt" in second.output
    assert "scrapy frontier quarantine --requeue" in second.output
    entries = read_log(log)
    fetched = {(e.host, e.path) for e in entries if e.status < 400}
    assert web.expected - fetched == {(host, path)}
    report = audit(entries, expected=web.expected, min_delay=0.0)
    assert report.missing == 1, report.summary()
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    [quarantined_row] = quarantined(state)
    assert quarantined_row[0] == row and quarantined_row[3] == data[:-4]
