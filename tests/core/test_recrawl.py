"""Incremental recrawl: the page history stores, the Recrawler on a fake clock,
the spider middleware's view of responses, and the scheduler's due gate and feed."""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse, Response

from scrapy_frontier.backends.sqlite.history import SQLiteHistoryStore
from scrapy_frontier.core import FakeClock
from scrapy_frontier.core.history import MemoryHistoryStore, PageRecord
from scrapy_frontier.core.recrawl import Recrawler, RecrawlSettings, Visit
from scrapy_frontier.core.recrawl_priority import HostRules, change_term, quality_term
from scrapy_frontier.core.refresh import DAY, RefreshConfig
from scrapy_frontier.core.simhash import SIMHASH_VERSION
from scrapy_frontier.errors import FrontierConfigError, HistoryStoreError
from scrapy_frontier.spidermiddlewares import RecrawlMiddleware, visit_of

WORDS = " ".join(f"word{i % 97} item{i % 13}" for i in range(600))


def record(fp: int, due: float, weight: float = 1.0, retired: str | None = None) -> PageRecord:
    r = PageRecord(fp=fp, url=f"http://a.example/{fp}", weight=weight, retired=retired)
    r.history.next_due = due
    return r


def _open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A history store of ``kind``; a second call opens the same one again (another worker,
    or the next run)."""
    if kind == "memory":
        return MemoryHistoryStore()
    if kind == "redis":
        from scrapy_frontier.backends.redis.history import RedisHistoryStore

        client = request.getfixturevalue("redis_client")
        return RedisHistoryStore(client, request.getfixturevalue("redis_prefix") + "history:")
    if kind == "redis-cluster":
        from scrapy_frontier.backends.redis.partitions import Layout, open_history

        prefix = request.getfixturevalue("redis_prefix")
        layout = Layout(prefix, prefix + "seen:", prefix + "history:", count=3, tagged=True)
        return open_history(request.getfixturevalue("redis_cluster").client(), layout)
    return SQLiteHistoryStore(tmp_path / "history.sqlite", batch_size=3)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    s = _open_store(request.param, request, tmp_path)
    yield s
    if isinstance(s, SQLiteHistoryStore):
        s.close()


# -- stores (one contract, both backends) -------------------------------------------------


def test_store_round_trip_and_due_order(store: Any) -> None:
    for fp, due in ((5, 30.0), (-7, 10.0), (9, 10.0), (2, 50.0)):
        store.put(record(fp, due))
    store.put(record(3, 5.0, retired="gone"))
    got = store.get(-7)
    assert got is not None and got.url == "http://a.example/-7" and got.next_due == 10.0
    assert store.get(12345) is None
    assert len(store) == 5
    assert store.next_due() == 10.0  # retired pages do not count
    first = store.due((float("-inf"), -(1 << 63)), 40.0, 2)
    assert [r.fp for r in first] == [-7, 9]
    rest = store.due((first[-1].next_due, first[-1].fp), 40.0, 10)
    assert [r.fp for r in rest] == [5]  # 2 is due after 40, 3 is retired


def test_store_evicts_lowest_weight_first(store: Any) -> None:
    for fp, w in ((1, 0.9), (2, 0.1), (3, 0.5), (4, 0.2)):
        store.put(record(fp, 1.0, weight=w))
    assert store.evict(2) == 2
    assert len(store) == 2
    assert store.get(2) is None and store.get(4) is None and store.get(1) is not None


def test_get_many_reads_what_get_reads(store: Any) -> None:
    # More than one query's worth (SQLite reads 500 per query), some still unsaved.
    for fp in range(-600, 600, 2):
        store.put(record(fp, 1000.0 + fp))
    store.flush()
    for fp in (1, 3):
        store.put(record(fp, 5.0))  # pending in the stores that batch their writes
    store.put(record(0, 7.0))  # an update of a saved record
    if hasattr(store, "take_due"):
        store.take_due(6.0, 1, hold_until=9999.0)  # a worker holds page 1
    wanted = list(range(-605, 605))
    found = store.get_many(wanted)
    one_by_one = {fp: r for fp in wanted if (r := store.get(fp)) is not None}
    assert sorted(found) == sorted(one_by_one) and len(found) == 602
    for fp, got in found.items():
        assert got.to_json() == one_by_one[fp].to_json()
        assert got.held_until == one_by_one[fp].held_until
    assert found[0].next_due == 7.0 and found[3].next_due == 5.0
    assert store.get_many([]) == {} and store.get_many([12345]) == {}


def full_record(fp: int, noise: int) -> PageRecord:
    """A record with every field away from its default, ``noise`` its noise state."""
    r = PageRecord(fp=fp, url=f"http://a.example/{fp}", callback="parse_item", depth=2,
                   etag=f'"e{fp}"', last_modified="Tue, 01 Dec 2026 10:00:00 GMT",
                   digest=f"{fp:016x}", simhash=(1 << 63) + fp, simhash_version=SIMHASH_VERSION,
                   size=4321, status=200, fetched_at=1000.5, inlinks=3, weight=0.75,
                   request=b"\x00kept request", hinted_change=2000.25, noise=noise)
    r.history.record_visit(900.0, False)
    r.history.record_visit(1000.5, True, 950.0)
    r.history.interval = 3600.0
    r.history.next_due = 5000.0 + fp
    return r


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis", "redis-cluster"])
def test_every_field_of_a_record_reads_back_on_every_store(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """What a visit writes in a page record (its noise state and its last hint too) is what
    every read path of every store gives back, in this process and in the next one."""
    from scrapy_frontier.core.change_evidence import NOISY_AFTER, STABLE

    noises = {1: STABLE, 2: 0, 3: 1, 4: NOISY_AFTER, 5: NOISY_AFTER + 2}
    written = {fp: full_record(fp, noise) for fp, noise in noises.items()}
    assert all(PageRecord.from_json(fp, r.to_json()) == r for fp, r in written.items())
    store = _open_store(kind, request, tmp_path)
    for record in written.values():
        store.put(record)
    store.flush()
    if isinstance(store, SQLiteHistoryStore):
        store.close()
    readers = [store] if kind == "memory" else [_open_store(kind, request, tmp_path)]
    for reader in readers:
        reads = {
            "get": {fp: reader.get(fp) for fp in written},
            "get_many": reader.get_many(list(written)),
            "due": {r.fp: r for r in reader.due((float("-inf"), -(1 << 63)), 1e9, 10)},
            "scan": {r.fp: r for r in reader.scan()},
        }
        claimed = reader.take_due(1e9, 10, hold_until=1e9)  # Redis: read by a Lua script
        if claimed is not None:
            for record in claimed:
                assert record.held_until == 1e9
                record.held_until = 0.0
            reads["take_due"] = {r.fp: r for r in claimed}
        for how, got in reads.items():
            assert got == written, how
            assert {fp: r.noise for fp, r in got.items() if r is not None} == noises, how
        if isinstance(reader, SQLiteHistoryStore):
            reader.close()


def damage(store: Any, fp: int, raw: str) -> None:
    """Overwrite one stored record with ``raw``, behind the store's back."""
    store.flush()
    if isinstance(store, SQLiteHistoryStore):
        db = sqlite3.connect(store.path)
        db.execute("UPDATE pages SET data = ? WHERE fp = ?", (raw, fp))
        db.commit()
        db.close()
    else:
        store.client.hset(store.key("pages"), fp, raw)


@pytest.mark.parametrize("raw", ['{not json', '{"v": 99, "u": "http://a.example/6"}',
                                 '{"v":1,"u":"http://a.example/6","h":"x"}'])
def test_an_unreadable_record_is_set_aside_and_the_rest_read_on(
        store: Any, raw: str, caplog: pytest.LogCaptureFixture) -> None:
    if isinstance(store, MemoryHistoryStore):
        pytest.skip("the memory store holds only the records it wrote: none is unreadable")
    for fp in range(1, 9):
        store.put(record(fp, 10.0 + fp))
    damage(store, 6, raw)
    damage(store, 3, raw.replace("/6", "/3"))
    with caplog.at_level(logging.ERROR, "scrapy_frontier.history"):
        assert store.get(6) is None  # as if never fetched
        assert sorted(store.get_many([2, 3, 4])) == [2, 4]
        due = store.due((float("-inf"), -(1 << 63)), 100.0, 10)
        assert [r.fp for r in due] == [1, 2, 4, 5, 7, 8]
    assert store.quarantined == 2 and store.quarantine_size() == 2
    assert len(store) == 6 and store.next_due() == 11.0
    assert sorted(r.fp for r in store.scan()) == [1, 2, 4, 5, 7, 8]
    errors = [r.getMessage() for r in caplog.records]
    assert len(errors) == 2, errors
    assert "cannot be read" in errors[0] and "scrapy frontier quarantine" in errors[0]
    if "http://" in raw:
        assert "http://a.example/6" in errors[0]
    assert "fingerprint 6" in errors[0]
    # A good record written since is kept: only the bad version moves.
    store.put(record(3, 1.0))
    store.flush()
    assert store.get(3) is not None and store.quarantine_size() == 2


def test_a_record_found_bad_during_a_scan_is_set_aside_after_it(store: Any) -> None:
    if isinstance(store, MemoryHistoryStore):
        pytest.skip("the memory store holds only the records it wrote: none is unreadable")
    for fp in range(1, 2500):
        store.put(record(fp, 1.0))
    damage(store, 1200, "{not json")
    assert sum(1 for _ in store.scan()) == 2498
    assert store.quarantine_size() == 1 and store.get(1200) is None and len(store) == 2498


def test_claim_checks_add_up_across_flushes_and_reopens(store: Any, tmp_path: Path) -> None:
    assert store.load_trust() == {}
    store.add_trust("a.example", 1, 0)
    store.add_trust("a.example", 2, 1)
    store.add_trust("b.example", 0, 3)
    store.put(record(1, 1.0))
    store.flush()
    store.add_trust("a.example", 1, 0)
    store.flush()  # counts alone, no record
    assert store.load_trust() == {"a.example": (4, 1), "b.example": (0, 3)}
    if isinstance(store, SQLiteHistoryStore):
        store.close()
        again = SQLiteHistoryStore(store.path)
        assert again.load_trust() == {"a.example": (4, 1), "b.example": (0, 3)}
        again.close()


def test_sqlite_store_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    s = SQLiteHistoryStore(path)
    r = record(42, 7.0)
    r.etag = '"v1"'
    r.history.record_visit(1.0, False)
    s.put(r)
    s.close()
    again = SQLiteHistoryStore(path)
    got = again.get(42)
    assert got is not None and got.etag == '"v1"' and got.history.visits == [1.0]
    again.close()


def test_sqlite_store_refuses_foreign_damaged_and_locked_files(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.sqlite"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE t(x)")
    db.commit()
    db.close()
    with pytest.raises(HistoryStoreError, match="not a scrapy-frontier page history"):
        SQLiteHistoryStore(foreign)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 10)
    with pytest.raises(HistoryStoreError, match="not an SQLite database"):
        SQLiteHistoryStore(junk)
    path = tmp_path / "history.sqlite"
    s = SQLiteHistoryStore(path)
    s.put(record(1, 1.0))
    s.flush()
    with pytest.raises(HistoryStoreError, match="in use by another process"):
        SQLiteHistoryStore(path)
    s.close()
    # Version 1 is the only history version: any other is refused by name, unchanged.
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE frontier_meta SET value = 2 WHERE key = 'version'")
    db.close()
    before = path.read_bytes()
    with pytest.raises(HistoryStoreError, match=re.escape(
            f"{path}: was written in format version 2; this scrapy-frontier reads version 1")):
        SQLiteHistoryStore(path)
    assert path.read_bytes() == before


def test_redis_history_of_another_version_is_refused(redis_client: Any,
                                                      redis_prefix: str) -> None:
    from scrapy_frontier.backends.redis.history import RedisHistoryStore
    from scrapy_frontier.errors import RedisFrontierDataError

    prefix = redis_prefix + "history:"
    RedisHistoryStore(redis_client, prefix)
    assert redis_client.hget(prefix + "meta", "version") == b"1"
    redis_client.hset(prefix + "meta", "version", "2")
    with pytest.raises(RedisFrontierDataError, match=re.escape(
            f"'{prefix}meta' says format 'scrapy-frontier/redis-history' version '2'")):
        RedisHistoryStore(redis_client, prefix)
    assert redis_client.hget(prefix + "meta", "version") == b"2"


# -- the Recrawler on a fake clock ---------------------------------------------------------


def make_recrawler(**kwargs: Any) -> tuple[Recrawler, FakeClock]:
    clock = FakeClock(1_000_000.0)
    refresh = RefreshConfig(min_interval=60.0, max_interval=10 * DAY, initial_interval=DAY,
                            base_interval=DAY)
    settings = RecrawlSettings(refresh=refresh, predictor="timely_return", **kwargs)
    return Recrawler(settings, MemoryHistoryStore(), clock=clock), clock


def page(text: str, status: int = 200, etag: str | None = None) -> Visit:
    import hashlib

    return Visit(status=status, digest=hashlib.blake2b(text.encode()).hexdigest(), text=text,
                 size=len(text), etag=etag)


def test_first_visit_then_due_gate_and_feed_claims() -> None:
    rc, clock = make_recrawler()
    rec, changed = rc.visited(1, "http://a.example/1", page(WORDS, etag='"a"'))
    assert not changed and rec.next_due == clock.now + DAY
    # The start gate. Same run: a start request is never refused in one process
    # (Scrapy's dont_filter), but on a shared frontier another worker started it.
    assert rc.admit_start(1, True, shared=False)[0]
    assert not rc.admit_start(1, True, shared=True)[0]
    clock.advance(1)
    later = Recrawler(rc.settings, rc.store, clock=clock)  # a later run, before it is due
    assert later.admit_start(1, True, shared=False) == (False, rc.store.get(1))
    assert later.admit_start(2, False, shared=False) == (True, None)  # unknown page: new
    assert later.admit_start(2, True, shared=False) == (False, None)  # seen: queued already
    clock.advance(DAY)
    rc2 = Recrawler(rc.settings, rc.store, clock=clock)  # next run
    assert not rc2.exhausted
    due = rc2.take_due(10)
    assert [r.fp for r in due] == [1]
    assert rc2.take_due(10) == [] and rc2.exhausted  # handed out once
    # The feed claimed it: a start URL (dont_filter) for the same page is not let through.
    admitted, _ = rc2.admit_start(1, True, shared=False)
    assert not admitted
    assert rc2.counters["recrawl/fed"] == 1 and rc2.counters["recrawl/not_due"] == 1


def test_noise_is_not_a_change_but_a_real_edit_is() -> None:
    rc, clock = make_recrawler()
    rc.visited(1, "u", page(WORDS))
    clock.advance(DAY)
    _, changed = rc.visited(1, "u", page(WORDS + " generated 12345"))
    assert not changed  # digest differs, simhash within 3 bits
    clock.advance(DAY)
    rewritten = " ".join(f"other{i % 89} thing{i % 7}" for i in range(600))
    _, changed = rc.visited(1, "u", page(rewritten))
    assert changed
    assert rc.counters["recrawl/pages_unchanged"] == 1
    assert rc.counters["recrawl/pages_changed"] == 1
    exact, clock2 = make_recrawler(exact=True)
    exact.visited(1, "u", page(WORDS))
    clock2.advance(DAY)
    assert exact.visited(1, "u", page(WORDS + " generated 12345"))[1]


def test_timely_return_intervals_grow_while_unchanged_and_reset_on_change() -> None:
    rc, clock = make_recrawler()
    rc.visited(1, "u", page(WORDS))
    intervals = []
    for _ in range(3):
        clock.advance(DAY)
        rec, _ = rc.visited(1, "u", page(WORDS))
        intervals.append(rec.history.interval)
    assert intervals == [2 * DAY, 4 * DAY, 8 * DAY]
    clock.advance(DAY)
    rec, changed = rc.visited(1, "u", page("completely different text " * 50))
    assert changed and rec.history.interval == DAY


def test_304_counts_bytes_saved_and_keeps_validators() -> None:
    rc, clock = make_recrawler()
    rc.visited(1, "u", page(WORDS, etag='"v1"'))
    clock.advance(DAY)
    rec = rc.not_modified(1, "u", Visit(status=304))
    assert rec.etag == '"v1"' and rec.history.n_visits == 2
    assert rc.counters["recrawl/not_modified"] == 1
    assert rc.counters["recrawl/bytes_saved"] == len(WORDS)


def test_gone_and_repeated_failures_retire_a_page() -> None:
    rc, clock = make_recrawler(retire_after=3)
    rc.visited(1, "u1", page(WORDS))
    rec = rc.failed(1, "u1", Visit(status=410))
    assert rec.retired == "gone"
    for _ in range(2):
        rec = rc.failed(2, "u2", Visit(status=503))
        assert rec.retired is None
    rec = rc.failed(2, "u2", None)  # a download error counts too
    assert rec.retired == "failures"
    assert rc.admit_start(1, True, shared=False)[0] is False  # retired pages: never
    assert rc.admit_start(2, True, shared=False)[0] is False
    assert rc.counters["history/retired/gone"] == 1
    assert rc.counters["history/retired/failures"] == 1
    assert rc.counters["recrawl/filtered_retired"] == 2


def test_history_cap_evicts_lowest_quality() -> None:
    rc, _ = make_recrawler(max_pages=100)
    for fp in range(150):
        rc.visited(fp, f"u{fp}", Visit(status=200, digest=str(fp), depth=fp % 5))
    rc.close()
    assert len(rc.store) == 100
    assert rc.counters["history/evicted"] == 50
    # Deep pages (low depth quality) went first.
    depths = [r.depth for r in rc.store._records.values()]
    assert max(depths) <= 4 and depths.count(0) == 30


def test_priority_from_change_share_quality_and_rules() -> None:
    assert change_term(0, 0) == 0 and change_term(1, 2) == 2 and change_term(1, 4) == 1
    assert change_term(0, 10) == 0  # a noisy page never seen to change is not promoted
    assert quality_term(1.0) == 1 and quality_term(0.25) == 0 and quality_term(0.1) == -1
    rules = HostRules({"example.com": 2, "ads.example.com": -3})
    assert rules.boost("www.example.com") == 2
    assert rules.boost("x.ads.example.com") == -3
    assert rules.boost("example.org") == 0
    rc, clock = make_recrawler()
    rc.visited(1, "u", page(WORDS))
    for i in range(3):
        clock.advance(DAY)
        rc.visited(1, "u", page(f"version {i} " + " ".join(f"v{i}w{j}" for j in range(300))))
    rec = rc.store.get(1)
    assert rec is not None
    assert rc.priority(rec) == 2 + 1  # changes every visit, depth 0


def lazy_page(text: str, calls: list[str]) -> Visit:
    """A visit whose text is made on demand, recording each time it is made."""
    visit = page(text)
    visit.text = None

    def make() -> str:
        calls.append(text)
        return text

    visit.text_source = make
    return visit


def test_text_and_simhash_only_when_a_decision_needs_them() -> None:
    rc, clock = make_recrawler()
    calls: list[str] = []
    rc.visited(1, "u", lazy_page(WORDS, calls))
    assert calls == [WORDS]  # a new page: its simhash is kept for the next visit
    first = rc.store.get(1)
    assert first is not None and first.simhash is not None
    clock.advance(DAY)
    rec, changed = rc.visited(1, "u", lazy_page(WORDS, calls))
    assert not changed and calls == [WORDS]  # same bytes: the stored simhash stands
    assert rec.simhash == first.simhash and rc.counters["recrawl/simhash_reused"] == 1
    clock.advance(DAY)
    noisy = WORDS + " generated 12345"
    _, changed = rc.visited(1, "u", lazy_page(noisy, calls))
    assert not changed and calls == [WORDS, noisy]  # new bytes: hashed, noise only
    assert rc.counters["recrawl/simhash_computed"] == 2
    # Exact mode: the digest decides alone, no text is ever made.
    exact, clock2 = make_recrawler(exact=True)
    exact_calls: list[str] = []
    exact.visited(1, "u", lazy_page(WORDS, exact_calls))
    clock2.advance(DAY)
    assert exact.visited(1, "u", lazy_page(noisy, exact_calls))[1]
    assert exact_calls == []


def test_a_simhash_of_another_version_is_not_compared() -> None:
    rc, clock = make_recrawler()
    rc.visited(1, "u", page(WORDS))
    stored = rc.store.get(1)
    assert stored is not None and stored.simhash_version == SIMHASH_VERSION == 1
    # A record whose simhash another function made (as a later release would store it).
    sv = f',"sv":{SIMHASH_VERSION}'
    assert sv in stored.to_json()
    other_json = stored.to_json().replace(sv, f',"sv":{SIMHASH_VERSION + 1}')
    other = PageRecord.from_json(1, other_json)
    assert other.simhash == stored.simhash and other.simhash_version == SIMHASH_VERSION + 1
    rc.store.put(other)
    clock.advance(DAY)
    # Same bytes: no change, whatever the simhash version.
    rec, changed = rc.visited(1, "u", page(WORDS))
    assert not changed and rec.simhash_version == SIMHASH_VERSION
    rc.store.put(PageRecord.from_json(1, other_json))
    clock.advance(DAY)
    # New bytes and a simhash that cannot be compared: the digest decides (a change),
    # and the new simhash is stored for next time.
    rec, changed = rc.visited(1, "u", page(WORDS + " generated 12345"))
    assert changed and rec.simhash_version == SIMHASH_VERSION
    clock.advance(DAY)
    assert not rc.visited(1, "u", page(WORDS + " generated 67890"))[1]
    # A simhash without its version is a damaged record, not a guess.
    with pytest.raises(ValueError, match="damaged.*sv"):
        PageRecord.from_json(1, stored.to_json().replace(sv, ""))


# -- the spider middleware's view of responses ---------------------------------------------


def test_visit_of_html_response_extracts_validators_and_visible_text() -> None:
    body = (b"<html><head><script>var x = 1;</script><style>p{}</style></head>"
            b"<body><p>Hello &amp; welcome</p></body></html>")
    request = Request("http://a.example/", meta={"depth": 2})
    response = HtmlResponse(
        "http://a.example/", body=body, request=request,
        headers={"ETag": '"x1"', "Last-Modified": "Sun, 29 Nov 2026 10:00:00 GMT"},
    )
    visit = visit_of(response, request)
    assert visit.etag == '"x1"' and visit.last_modified.startswith("Sun, 29 Nov")
    # The text is made only when the recrawler asks for it.
    assert visit.text is None and visit.text_source is not None
    text = visit.text_source()
    assert text is not None and "Hello & welcome" in text
    assert "var x" not in text and visit.depth == 2 and visit.size == len(body)
    binary = Response("http://a.example/f.bin", body=b"\x00\x01", request=request)
    binary_visit = visit_of(binary, request)
    assert binary_visit.text is None and binary_visit.text_source is not None
    assert binary_visit.text_source() is None


def test_middleware_takes_a_304_past_httperror_to_no_callback_unless_asked() -> None:
    """A 304 is recorded and announced, then goes through Scrapy's HttpErrorMiddleware (no
    HttpError, so no errback) to a callback that returns nothing, or to the spider's own
    callback with FRONTIER_RECRAWL_PASS_304; either way with the spider's request back on it."""
    import inspect
    from types import SimpleNamespace

    from scrapy import Spider
    from scrapy.spidermiddlewares.httperror import HttpErrorMiddleware
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.signals import page_unchanged

    seen: list[int] = []
    announced: list[tuple[Request, Response, Spider]] = []
    parsed: list[tuple[Response, Request | None, dict[str, Any]]] = []
    rc, _ = make_recrawler()

    class FakeHistoryFeed:  # the middleware looks for a frontier scheduler's history side
        recrawler = rc
        traps = None  # FRONTIER_TRAPS off

        def page_visited(self, request: Request, visit: Any) -> None:
            seen.append(visit.status)

        def signals_received(self, *args: Any, **kwargs: Any) -> None: ...

    class FakeScheduler:
        history_feed = FakeHistoryFeed()

        def publish_stats(self) -> None: ...

    class PageSpider(Spider):
        name = "pages"

        def page(self, response: Response, **kwargs: Any) -> list[str]:
            parsed.append((response, response.request, kwargs))
            return ["parsed"]

        def failed(self, failure: Any) -> None:
            raise AssertionError("no errback for an unchanged page")

    crawler = get_crawler(PageSpider)
    spider = PageSpider()
    crawler.spider = spider
    crawler.engine = SimpleNamespace(scheduler=FakeScheduler())  # type: ignore[assignment]
    crawler.signals.connect(lambda **kw: announced.append(
        (kw["request"], kw["response"], kw["spider"])), signal=page_unchanged, weak=False)
    mw = RecrawlMiddleware(crawler)
    httperror = HttpErrorMiddleware.from_crawler(crawler)
    # Scrapy < 2.14 requires the spider argument, later versions deprecate it.
    wants_spider = inspect.signature(httperror.process_spider_input).parameters[
        "spider"].default is inspect.Parameter.empty

    def deliver(request: Request) -> tuple[Response, Any]:
        """Through both middlewares to the callback, as Scrapy's scraper calls it."""
        response = Response("http://a.example/", status=304, request=request)
        mw.process_spider_input(response)
        if wants_spider:
            httperror.process_spider_input(response, spider)
        else:
            httperror.process_spider_input(response)
        assert response.request is not None and response.request is not request
        callback = response.request.callback
        assert callback is not None
        output = callback(response, **response.request.cb_kwargs)
        assert response.request is request and "handle_httpstatus_all" not in request.meta
        return response, output

    request = Request("http://a.example/", callback=spider.page, errback=spider.failed,
                      cb_kwargs={"n": 1}, meta={"depth": 2})
    response, output = deliver(request)
    assert list(output) == [] and parsed == []
    assert announced == [(request, response, spider)]

    rc.settings.pass_304 = True
    response, output = deliver(request)
    assert output == ["parsed"] and parsed == [(response, request, {"n": 1})]
    assert len(announced) == 2 and seen == [304, 304]

    # A 200 is left alone: the spider's own request and callback.
    ok = HtmlResponse("http://a.example/", body=b"<p>x</p>", request=request)
    mw.process_spider_input(ok)
    assert ok.request is request and len(announced) == 2 and seen == [304, 304, 200]


# -- the scheduler: due gate, feed and conditional GET across runs --------------------------


def _run(tmp_path: Path, **settings: Any) -> Any:
    from tests.scheduler.test_scheduler import make_scheduler

    base = {"JOBDIR": str(tmp_path / "job"), "FRONTIER_RECRAWL_MIN": 0.05,
            "FRONTIER_RECRAWL_INITIAL": 0.3, "FRONTIER_RECRAWL_PREDICTOR": "timely_return"}
    sched, clock, crawler = make_scheduler({**base, **settings})
    return sched, clock, crawler


def _drain(sched: Any, clock: Any) -> list[Request]:
    out = []
    for _ in range(20):
        request = sched.next_request()
        if request is None:
            clock.advance(5.0)
            if not sched.has_pending_requests():
                break
            continue
        out.append(request)
        sched.fetches.sent(request)
        sched.fetches.completed(request)
    return out


#: How Scrapy 2.13+ marks start requests (StartSpiderMiddleware).
START = {"is_start_request": True}


def test_second_run_recrawls_only_due_pages_conditionally(tmp_path: Path) -> None:
    import time

    sched, clock, crawler = _run(tmp_path)
    sched.enqueue_request(Request("http://a.example/", dont_filter=True, meta=START))
    sched.enqueue_request(Request("http://b.example/x"))
    for request in _drain(sched, clock):
        sched.history_feed.page_visited(request, Visit(status=200, digest=request.url, etag='"e1"',
                                          last_modified="Sun, 29 Nov 2026 10:00:00 GMT"))
    sched.close("finished")
    assert crawler.stats.get_value("frontier/recrawl/pages_new") == 2

    # Right away nothing is due: the start URL (dont_filter) is filtered, nothing is fed.
    sched, clock, crawler = _run(tmp_path)
    assert not sched.has_pending_requests()
    assert not sched.enqueue_request(Request("http://a.example/", dont_filter=True, meta=START))
    assert sched.next_request() is None
    sched.close("finished")
    assert crawler.stats.get_value("frontier/recrawl/not_due") == 1

    time.sleep(0.35)
    sched, clock, crawler = _run(tmp_path)
    assert sched.has_pending_requests()
    fetched = _drain(sched, clock)
    assert sorted(r.url for r in fetched) == ["http://a.example/", "http://b.example/x"]
    for request in fetched:
        assert request.meta["frontier_recrawl"] is True and request.dont_filter
        assert request.headers[b"If-None-Match"] == b'"e1"'
        assert request.headers[b"If-Modified-Since"].startswith(b"Sun, 29 Nov")
    # Fed pages are claimed: the start URL does not fetch its page a second time.
    assert not sched.enqueue_request(Request("http://a.example/", dont_filter=True, meta=START))
    for request in fetched:
        sched.history_feed.page_visited(request, Visit(status=304))
    sched.close("finished")
    stats = crawler.stats
    assert stats.get_value("frontier/recrawl/fed") == 2
    assert stats.get_value("frontier/recrawl/conditional") == 2
    assert stats.get_value("frontier/recrawl/not_modified") == 2


def test_recrawl_off_keeps_scrapy_semantics(tmp_path: Path) -> None:
    sched, clock, _ = _run(tmp_path, FRONTIER_RECRAWL="off")
    assert sched.history_feed.hooks is None
    sched.enqueue_request(Request("http://a.example/", dont_filter=True))
    assert len(_drain(sched, clock)) == 1
    sched.close("finished")
    assert not (tmp_path / "job" / "history.sqlite").exists()


def test_priority_rules_and_meta_boost_pick_the_front_queue(tmp_path: Path) -> None:
    sched, _, _ = _run(tmp_path, FRONTIER_RECRAWL="off",
                       FRONTIER_PRIORITY_RULES={"vip.example": 3})
    sched.enqueue_request(Request("http://plain.example/"))
    sched.enqueue_request(Request("http://www.vip.example/"))
    sched.enqueue_request(Request("http://boosted.example/", meta={"frontier_priority_boost": 2}))
    levels = {host: level for host, level, _ in sched.backend.frontier.iter_queued()}
    base = sched.admission.mapper.level(0)
    assert levels["plain.example"] == base
    assert levels["www.vip.example"] == base + 3
    assert levels["boosted.example"] == base + 2
    sched.close("finished")


def test_frontier_sitemaps_takes_robots_urls_or_lists() -> None:
    from scrapy.settings import Settings

    from scrapy_frontier.settings import FrontierConfig

    def parsed(value: Any) -> tuple[str, ...]:
        return FrontierConfig.from_settings(Settings({"FRONTIER_SITEMAPS": value})).sitemaps.urls

    assert parsed(None) == parsed("off") == ()
    assert parsed("robots") == ("robots",)
    assert parsed('["robots", "http://a.example/s.xml"]') == ("robots", "http://a.example/s.xml")
    assert parsed("robots,http://a.example/s.xml") == ("robots", "http://a.example/s.xml")
    assert parsed(["https://a.example/feed.atom"]) == ("https://a.example/feed.atom",)


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("FRONTIER_RECRAWL", "sometimes", "FRONTIER_RECRAWL must be one of"),
        ("FRONTIER_RECRAWL_PREDICTOR", "magic", "FRONTIER_RECRAWL_PREDICTOR must be one of"),
        ("FRONTIER_RECRAWL_MIN", -1, "FRONTIER_RECRAWL_MIN must be >="),
        ("FRONTIER_PRIORITY_RULES", "not a dict", "FRONTIER_PRIORITY_RULES must map"),
        ("FRONTIER_PRIORITY_RULES", {"a.example": 1.7}, "boosts must be whole numbers"),
        ("FRONTIER_PRIORITY_RULES", {"a.example": True}, "boosts must be whole numbers"),
        ("FRONTIER_SITEMAPS", "ftp://a.example/s.xml", "neither 'robots' nor an http"),
        ("FRONTIER_SITEMAPS", 5, "FRONTIER_SITEMAPS must be 'robots'"),
        ("FRONTIER_HISTORY_MAX_PAGES", -5, "FRONTIER_HISTORY_MAX_PAGES must be >="),
        ("FRONTIER_QUALITY", 3, "FRONTIER_QUALITY must be"),
    ],
)
def test_recrawl_settings_are_validated(name: str, value: Any, match: str) -> None:
    from scrapy.settings import Settings

    from scrapy_frontier.errors import FrontierConfigError
    from scrapy_frontier.settings import FrontierConfig

    with pytest.raises(FrontierConfigError, match=match):
        FrontierConfig.from_settings(Settings({name: value}))


def test_recrawl_max_below_min_is_refused() -> None:
    from scrapy.settings import Settings

    from scrapy_frontier.errors import FrontierConfigError
    from scrapy_frontier.settings import FrontierConfig

    with pytest.raises(FrontierConfigError, match="FRONTIER_RECRAWL_MAX"):
        FrontierConfig.from_settings(
            Settings({"FRONTIER_RECRAWL_MIN": 100, "FRONTIER_RECRAWL_MAX": 10}))


def test_estimator_optimal_spreads_a_budget_over_estimated_rates() -> None:
    import random

    rng = random.Random(5)
    clock = FakeClock(0.0)
    refresh = RefreshConfig(min_interval=600.0, max_interval=60 * DAY, initial_interval=DAY,
                            base_interval=DAY)
    store = MemoryHistoryStore()
    # Day-long visits to 40 pages: the first half changes at almost every visit,
    # the second half almost never.
    for fp in range(40):
        r = PageRecord(fp=fp, url=f"u{fp}")
        for day in range(8):
            changed = day > 0 and (rng.random() < (0.9 if fp < 20 else 0.05))
            r.history.record_visit(day * DAY, changed)
        r.history.interval = DAY
        r.history.next_due = 8 * DAY
        store.put(r)
    clock.now = 8 * DAY
    settings = RecrawlSettings(refresh=refresh, predictor="estimator_optimal", budget=40.0)
    rc = Recrawler(settings, store, clock=clock)
    from scrapy_frontier.core.estimators import optimal_frequency
    from scrapy_frontier.core.refresh import EstimatorOptimal, estimate_rate

    opt = rc.predictor
    assert isinstance(opt, EstimatorOptimal) and opt.mu > 0 and opt.prior is not None
    assert rc.counters["recrawl/mu"] == opt.mu
    # The solved mu spends the budget: the pages' optimal frequencies add up to 40 a day.
    rates = [estimate_rate(r.history, opt.prior) for r in store.scan()]
    total = sum(optimal_frequency(r, opt.mu) for r in rates if r is not None) * DAY
    assert total == pytest.approx(40.0, rel=0.01)
    # A visit now sets the interval the allocation gives that page (within the clamps).
    slow, _ = rc.visited(30, "u30", Visit(status=200, digest="same"))
    assert refresh.min_interval <= slow.history.interval <= refresh.max_interval
    assert slow.history.interval == pytest.approx(
        min(opt.interval_for(estimate_rate(slow.history, opt.prior)), 2 * DAY))


def test_estimator_optimal_needs_a_budget() -> None:
    from scrapy.settings import Settings

    from scrapy_frontier.errors import FrontierConfigError
    from scrapy_frontier.settings import FrontierConfig

    with pytest.raises(FrontierConfigError, match="FRONTIER_RECRAWL_BUDGET"):
        FrontierConfig.from_settings(Settings({"FRONTIER_RECRAWL_PREDICTOR": "estimator_optimal"}))
    config = FrontierConfig.from_settings(Settings({
        "FRONTIER_RECRAWL_PREDICTOR": "estimator_optimal", "FRONTIER_RECRAWL_BUDGET": 1000}))
    assert config.recrawl.budget == 1000.0


def test_redis_history_claims_due_pages_once_across_workers(redis_client: Any,
                                                          redis_prefix: str) -> None:
    from scrapy_frontier.backends.redis.history import RedisHistoryStore

    prefix = redis_prefix + "history:"
    first = RedisHistoryStore(redis_client, prefix)
    for fp in range(10):
        first.put(record(fp, 100.0 + fp))
    first.flush()
    second = RedisHistoryStore(redis_client, prefix)  # another worker
    a = first.take_due(105.0, 4, 1000.0)
    b = second.take_due(105.0, 10, 1000.0)
    assert [r.fp for r in a] == [0, 1, 2, 3]
    assert [r.fp for r in b] == [4, 5]  # never the same page twice
    assert second.take_due(105.0, 10, 1000.0) == []
    # A claimed page reads as not eligible before the hold ends (the due gate's view).
    got = second.get(1)
    assert got is not None and got.eligible == 1000.0


def test_redis_history_refuses_foreign_keys(redis_client: Any, redis_prefix: str) -> None:
    from scrapy_frontier.backends.redis.history import RedisHistoryStore
    from scrapy_frontier.errors import RedisFrontierDataError

    prefix = redis_prefix + "history:"
    redis_client.set(prefix + "meta", "something else")
    with pytest.raises(RedisFrontierDataError, match="not the page history"):
        RedisHistoryStore(redis_client, prefix)


def _committed(job: Path) -> tuple[int, int]:
    """(queued or leased rows in frontier.sqlite, records in history.sqlite), as a process
    that opens the files after a kill -9 reads them: committed writes only."""
    import sqlite3

    queue = sqlite3.connect(job / "frontier.sqlite")
    rows = queue.execute("SELECT (SELECT COUNT(*) FROM front) + (SELECT COUNT(*) FROM back)"
                         ).fetchone()[0]
    queue.close()
    history = sqlite3.connect(job / "history.sqlite")
    records = history.execute("SELECT COUNT(*) FROM pages").fetchone()[0]
    history.close()
    return rows, records


def test_a_kill_after_a_fetch_keeps_its_visit_or_its_request(tmp_path: Path) -> None:
    """The engine is done with a fetched page and the URL is acknowledged: at every moment
    after, a kill -9 finds either the page's visit in the history or the request still in
    the queue (fetched again), never neither."""
    sched, clock, _ = _run(tmp_path, FRONTIER_FLUSH_INTERVAL=0.5)
    job = tmp_path / "job"
    sched.enqueue_request(Request("http://a.example/"))
    request = sched.next_request()
    assert request is not None
    sched.fetches.sent(request)
    sched.fetches.completed(request)
    sched.history_feed.page_visited(request, Visit(status=200, digest="d"))
    sched.fetches.leases.acknowledge()  # the engine is done with the request
    moments = []
    for _ in range(4):
        sched.next_request()  # the scheduler's own writes happen here
        moments.append(_committed(job))
        clock.advance(0.4)
    assert all(rows >= 1 or records == 1 for rows, records in moments), moments
    assert moments[-1] == (0, 1), moments  # in the end: no request, one visit


def test_recrawl_all_refetches_every_page_once_then_the_next_run_waits(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    sched, clock, _ = _run(tmp_path, FRONTIER_RECRAWL_INITIAL=3600.0,
                           FRONTIER_RECRAWL_MIN=3600.0)
    sched.enqueue_request(Request("http://a.example/", dont_filter=True, meta=START))
    sched.enqueue_request(Request("http://b.example/x"))
    for request in _drain(sched, clock):
        sched.history_feed.page_visited(request, Visit(status=200, digest=request.url))
    sched.close("finished")

    # Nothing is due for an hour; FRONTIER_RECRAWL_ALL takes both pages, each once.
    with caplog.at_level(logging.INFO, logger="scrapy_frontier"):
        sched, clock, crawler = _run(tmp_path, FRONTIER_RECRAWL_ALL=True,
                                     FRONTIER_RECRAWL_INITIAL=3600.0,
                                     FRONTIER_RECRAWL_MIN=3600.0)
    assert any("FRONTIER_RECRAWL_ALL takes every one" in r.getMessage() for r in caplog.records)
    assert sched.enqueue_request(Request("http://a.example/", dont_filter=True, meta=START))
    fetched = _drain(sched, clock)
    assert sorted(r.url for r in fetched) == ["http://a.example/", "http://b.example/x"]
    for request in fetched:
        sched.history_feed.page_visited(request, Visit(status=200, digest=request.url))
    # Fetched once in this run: the feed does not hand them out again.
    clock.advance(10.0)
    assert _drain(sched, clock) == []
    sched.close("finished")

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="scrapy_frontier"):
        sched, clock, crawler = _run(tmp_path, FRONTIER_RECRAWL_INITIAL=3600.0,
                                     FRONTIER_RECRAWL_MIN=3600.0)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Page history")]
    assert lines and lines[0].startswith("Page history: 2 pages known, 0 due now; the next one "
                                         "comes due in"), lines
    assert not sched.enqueue_request(Request("http://a.example/", dont_filter=True, meta=START))
    assert _drain(sched, clock) == []
    sched.close("finished")


def test_recrawl_all_is_refused_on_redis() -> None:
    from scrapy.settings import Settings

    from scrapy_frontier.settings import FrontierConfig

    with pytest.raises(FrontierConfigError, match="FRONTIER_RECRAWL_ALL is not supported"):
        FrontierConfig.from_settings(Settings({"FRONTIER_BACKEND": "redis",
                                               "FRONTIER_RECRAWL_ALL": True}))


def test_a_record_put_while_the_redis_history_flushes_is_kept(redis_client: Any,
                                                               redis_prefix: str) -> None:
    """The reactor thread may put a record while the I/O thread's flush is writing: the
    record waits for the next flush instead of being cleared unwritten."""
    from scrapy_frontier.backends.redis.history import RedisHistoryStore

    store = RedisHistoryStore(redis_client, redis_prefix + "history:")
    store.put(record(1, 100.0))
    guard = store.guard

    def meanwhile(doing: str, fn: Any) -> Any:
        if doing.startswith("writing"):
            store.put(record(2, 200.0))  # as if from the other thread, mid-write
        return guard(doing, fn)

    store.guard = meanwhile  # type: ignore[method-assign]
    store.flush()
    store.guard = guard  # type: ignore[method-assign]
    assert store.unsaved() == 1
    store.flush()
    assert sorted(int(fp) for fp in redis_client.hkeys(redis_prefix + "history:pages")) == [1, 2]
