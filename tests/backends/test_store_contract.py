"""One storage contract, one suite: every QueueStore backend must pass it.

The same Hypothesis state machine that checks the frontier's invariants on the
memory store runs here on SQLite with tiny windows and frequent flushes, so
paging to and from disk is exercised on every step.
"""

from __future__ import annotations

import pickle
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from scrapy_frontier.backends.sqlite.queue import SQLiteStore
from scrapy_frontier.codec import Codec
from scrapy_frontier.core import FakeClock, Frontier
from scrapy_frontier.core.store import MemoryQueueStore
from scrapy_frontier.errors import StoreError
from tests.core.test_seen import cut_short_checkpoint
from tests.core.test_statemachine import ConnectionsMachine, FrontierMachine
from tests.invariants import check_frontier

INT_CODEC: Codec[Any] = Codec(pickle.dumps, pickle.loads)


def sqlite_store(path: Path, levels: int = 4, **kwargs: Any) -> SQLiteStore[Any]:
    kwargs.setdefault("window", 3)
    kwargs.setdefault("flush_ops", 5)
    return SQLiteStore(path, levels=levels, spider="t", codec=INT_CODEC, **kwargs)


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[int], Any]]:
    stores: list[Any] = []

    def factory(levels: int = 4) -> Any:
        if request.param == "memory":
            store: Any = MemoryQueueStore(levels)
        else:
            store = sqlite_store(tmp_path / f"s{len(stores)}.sqlite", levels)
        stores.append(store)
        return store

    yield factory
    for store in stores:
        if isinstance(store, SQLiteStore):
            store.close()


def test_front_queues_are_fifo_per_level(make: Callable[[int], Any]) -> None:
    store = make(4)
    for i in range(10):
        store.front_append(1 + i % 2, f"h{i}", i)
    assert store.front_levels() == [1, 2]
    seen = []
    for level in (1, 2):
        for _ in range(5):
            host = store.front_head_host(level)
            store.back_open(host)
            assert store.front_to_back(level) == host
            _, item, token = store.back_lease(host)
            store.ack(token)
            store.back_close(host)
            seen.append(item)
    assert seen == [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]
    assert store.front_levels() == []


def test_back_queue_highest_level_first_fifo_within_and_paged(make: Callable[[int], Any]) -> None:
    store = make(4)
    store.back_open("a")
    order = [(1, "l1-a"), (3, "l3-a"), (1, "l1-b"), (2, "l2-a"), (3, "l3-b"), (1, "l1-c"),
             (2, "l2-b"), (4, "l4-a"), (1, "l1-d")]
    for level, item in order[:5]:
        store.back_append("a", level, item)
    first = store.back_lease("a")  # loads a window; later appends must still sort in
    assert first[:2] == (3, "l3-a")
    for level, item in order[5:]:
        store.back_append("a", level, item)
    assert store.back_len("a") == 8
    assert store.back_head_level("a") == 4
    got = []
    while store.back_len("a"):
        level, item, token = store.back_lease("a")
        store.ack(token)
        got.append(item)
    assert got == ["l4-a", "l3-b", "l2-a", "l2-b", "l1-a", "l1-b", "l1-c", "l1-d"]


def test_items_listing(make: Callable[[int], Any]) -> None:
    store = make(2)
    store.front_append(1, "x", "fx")
    store.back_open("a")
    store.back_append("a", 2, "a2")
    store.back_append("a", 1, "a1")
    assert list(store.front_items()) == [("x", 1, "fx")]
    assert list(store.back_items("a")) == [(2, "a2"), (1, "a1")]


def test_frontier_runs_the_same_on_every_store(make: Callable[[int], Any]) -> None:
    clock = FakeClock()
    frontier: Frontier[int] = Frontier(
        store=make(3), front_queues=3, back_queues=2, back_queues_max=3, clock=clock
    )
    for i in range(60):
        frontier.push(f"h{i % 7}", 1 + i % 3, i)
        check_frontier(frontier)
    done = []
    for _ in range(2000):
        lease = frontier.pop()
        if lease is None:
            wake = frontier.next_wakeup()
            assert wake is not None
            clock.now = max(clock.now, wake)
            continue
        clock.advance(0.01)
        frontier.complete(lease.ticket, 0.01)
        done.append(lease.item)
        check_frontier(frontier)
        if len(done) == 60:
            break
    assert sorted(done) == list(range(60))


# -- SQLite: durability and bad state -----------------------------------------------


def test_reopen_returns_leased_urls_and_keeps_rests(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    clock = FakeClock(50.0)
    store = sqlite_store(path)
    frontier: Frontier[int] = Frontier(store=store, front_queues=4, back_queues=1, clock=clock)
    for i in range(6):
        frontier.push("a", 2, i)
    frontier.push("b", 2, 100)  # waits in a front queue: back_queues=1
    done = frontier.pop()
    assert done is not None
    clock.advance(1.0)
    frontier.complete(done.ticket, 1.0)  # "a" now rests 10 s
    clock.advance(10.0)
    in_flight = frontier.pop()
    assert in_flight is not None and in_flight.item == 1
    store.flush()
    # kill -9 here: nothing else is written, the connection is just dropped (and the
    # kernel drops the lock).
    store._state.close()

    again = sqlite_store(path)
    hosts, rests = again.recover()
    assert again.counts.recovered_leases == 1
    assert hosts == {"a": 5}  # 4 queued + the one that was in flight
    assert set(rests) == {"a"}
    assert list(again.front_items()) == [("b", 2, 100)]
    again.adopt("a", hosts["a"])
    items = [item for _, item in again.back_items("a")]
    assert items == [1, 2, 3, 4, 5]
    again.close()


def test_unflushed_operations_are_lost_together(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = sqlite_store(path, flush_ops=1000)
    store.back_open("a")
    store.back_append("a", 1, "kept")
    store.flush()
    store.back_append("a", 1, "lost")
    _, _, token = store.back_lease("a")
    store.ack(token)  # ack of "kept" is not durable either: it follows in the same batch
    # kill -9: the connection is dropped, and the kernel drops the lock.
    store._state.close()
    again = sqlite_store(path)
    hosts, _ = again.recover()
    assert hosts == {"a": 1}
    again.adopt("a", 1)
    assert [item for _, item in again.back_items("a")] == ["kept"]
    again.close()


def test_corrupt_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="corrupt") as info:
        sqlite_store(path)
    assert str(path) in str(info.value)
    assert path.read_bytes().startswith(b"this is not a database")


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = sqlite_store(path, flush_ops=10_000)
    for i in range(3000):
        store.front_append(1, f"h{i}", "x" * 50)
    store.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError):
        sqlite_store(path).recover()


def test_file_cut_short_by_a_checkpoint_is_replayed_from_its_wal(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    cut_short_checkpoint(path, (
        "import pickle\n"
        "from scrapy_frontier.backends.sqlite.queue import SQLiteStore\n"
        "from scrapy_frontier.codec import Codec\n"
        "store = SQLiteStore(sys.argv[1], levels=4, spider='t',\n"
        "                    codec=Codec(pickle.dumps, pickle.loads))\n"
        "for i in range(3000):\n"
        "    store.front_append(1 + i % 4, f'h{i}', i)\n"
        "store.flush()\n"
        "conn = store._state.db\n"
    ))
    store = sqlite_store(path)
    store.recover()
    assert store.front_count() == 3000
    assert sorted(item for _, _, item in store.front_items()) == list(range(3000))
    store.close()


def _foreign_database(path: Path) -> tuple[bytes, int]:
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO users(name) VALUES ('ada')")
    db.close()
    return path.read_bytes(), path.stat().st_mtime_ns


def test_foreign_sqlite_database_is_refused_unchanged(tmp_path: Path) -> None:
    # Issue 13: it was adopted, the schema written into it, the queue taken as empty.
    path = tmp_path / "f.sqlite"
    before, mtime = _foreign_database(path)
    with pytest.raises(StoreError, match=r"not a scrapy-frontier state file \(tables: users\)"
                       r".*move it, or point FRONTIER_PATH / JOBDIR elsewhere") as info:
        sqlite_store(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.sqlite"]


def test_foreign_meta_table_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('format', 'someone/else')")
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="holds format 'someone/else'"):
        sqlite_store(path)
    assert path.read_bytes() == before


def test_empty_sqlite_database_gets_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    sqlite3.connect(path).execute("PRAGMA user_version = 7").connection.close()
    assert path.stat().st_size > 0
    store = sqlite_store(path)
    store.front_append(1, "h", 1)
    store.close()
    again = sqlite_store(path)
    again.recover()
    assert again.front_count() == 1
    again.close()


def test_foreign_spider_and_version_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    sqlite_store(path).close()
    with pytest.raises(StoreError, match="belongs to spider 't'"):
        SQLiteStore(path, levels=4, spider="other", codec=INT_CODEC)
    # Version 1 is the only state version; any other is refused by name, the file unchanged.
    for version in ("2", "0", "99"):
        db = sqlite3.connect(path)
        with db:
            db.execute("UPDATE meta SET value = ? WHERE key = 'version'", (version,))
        db.close()
        before = path.read_bytes()
        with pytest.raises(StoreError, match=re.escape(
                f"{path} was written by an incompatible scrapy-frontier (state version "
                f"{version}, this version reads 1)")):
            sqlite_store(path)
        assert path.read_bytes() == before


def test_a_file_in_use_by_another_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    first = sqlite_store(path)
    first.front_append(1, "h", 1)
    first.flush()
    with pytest.raises(StoreError, match="in use by another process"):
        sqlite_store(path)
    first.close()
    again = sqlite_store(path)  # free again once closed
    assert again.front_count() == 1
    again.close()


def test_front_levels_beyond_setting_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = sqlite_store(path, levels=8)
    store.front_append(8, "h", 1)
    store.close()
    with pytest.raises(StoreError, match="FRONTIER_FRONT_QUEUES"):
        sqlite_store(path, levels=4)


def test_unserializable_items_stay_in_memory_and_are_counted(tmp_path: Path) -> None:
    def encode(item: Any) -> bytes:
        from scrapy_frontier.errors import Unserializable

        if callable(item):
            raise Unserializable(repr(item))
        return pickle.dumps(item)

    store: SQLiteStore[Any] = SQLiteStore(
        tmp_path / "f.sqlite", levels=2, spider="t", codec=Codec(encode, pickle.loads), window=2
    )
    def fn(x: int) -> int:
        return x

    store.back_open("a")
    store.back_append("a", 1, fn)
    store.back_append("a", 1, "plain")
    assert store.counts.volatile == 1
    _, item, _ = store.back_lease("a")
    assert item is fn
    store.close()


class SQLiteFrontierMachine(FrontierMachine):
    """The core state machine, on SQLite with a 2-row window and flushes every 3 ops."""

    def make_store(self, levels: int) -> SQLiteStore[Any]:
        self._dir = tempfile.mkdtemp(prefix="frontier-sm-")
        self._store = SQLiteStore(
            Path(self._dir) / "f.sqlite", levels=levels, spider="t", codec=INT_CODEC,
            window=2, flush_ops=3,
        )
        return self._store

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            store = getattr(self, "_store", None)
            if store is not None:
                # The run really went through the disk, not only the windows.
                assert store.counts.flushes > 0 or len(self.pushed) < 3
                store.close()
                shutil.rmtree(self._dir, ignore_errors=True)


SQLiteFrontierMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=60, deadline=None
)
TestSQLiteFrontierStateMachine = SQLiteFrontierMachine.TestCase


class SQLiteConnectionsMachine(SQLiteFrontierMachine, ConnectionsMachine):
    """The state machine of hosts with several connections, on SQLite."""


SQLiteConnectionsMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=60, deadline=None
)
TestSQLiteConnectionsStateMachine = SQLiteConnectionsMachine.TestCase


def test_a_flush_is_one_transaction(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path / "f.sqlite", flush_ops=10_000)
    commits = []
    store._state.db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    store.back_open("a")
    for i in range(50):
        store.back_append("a", 1, i)
        store.front_append(1, f"h{i}", i)
    store.flush()
    assert commits == ["COMMIT"]  # not one per row
    store.close()


def test_sqlite_memory_is_capped_in_bytes_not_only_rows(tmp_path: Path) -> None:
    """12,000 requests with 20 KB of meta each (issue 13): the windows and the pending
    writes hold about window_bytes per queue and flush_bytes in all, not 256 rows each."""
    from scrapy_frontier.codec import Codec
    from scrapy_frontier.core import DelayPolicy, FakeClock, Frontier

    def held(window_bytes: int) -> tuple[int, int]:
        store: SQLiteStore[bytes] = SQLiteStore(
            tmp_path / f"big{window_bytes}.sqlite", levels=4, spider="t",
            codec=Codec(bytes, bytes), window_bytes=window_bytes)
        frontier: Frontier[bytes] = Frontier(front_queues=4, back_queues=20, clock=FakeClock(),
                                             policy=DelayPolicy(0, 0, 0), store=store)
        peak = 0
        for i in range(12_000):
            frontier.push(f"h{i % 40}", 1 + i % 4, i.to_bytes(4, "big") + b"x" * 20_000)
            if i % 500 == 0:
                peak = max(peak, store.memory_bytes)
        for _ in range(200):  # hand some out: windows refill from disk
            lease = frontier.pop()
            assert lease is not None
            frontier.complete(lease.ticket, 0.0)
            peak = max(peak, store.memory_bytes)
        check_frontier(frontier)
        store.close()
        return peak, len(frontier) + 200

    capped, queued = held(64 * 1024)
    assert queued == 12_000
    queues = 4 + 20  # front levels + active hosts
    assert capped <= queues * (64 * 1024 + 20_100) + 8 * 1024 * 1024 + 20_100, capped
    uncapped, _ = held(1 << 40)  # rows only, as before: 256 rows per window
    print(f"request data held in RAM: {capped:,} B capped, {uncapped:,} B by rows only")
    assert uncapped > 4 * capped, (uncapped, capped)


def _blank_database(path: Path) -> None:
    """An SQLite file with a header and no table: created, its first commit lost."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t(x)")
    db.execute("DROP TABLE t")
    db.close()
    assert path.stat().st_size > 0


@pytest.mark.parametrize("kind", ["queue", "seen", "history"])
def test_a_file_without_tables_gets_the_schema(kind: str, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Issue 25: a file system error right after the frontier created seen.sqlite left
    it with no table, and every later run called it another program's file."""
    from scrapy_frontier.backends.sqlite.history import SQLiteHistoryStore
    from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore

    path = tmp_path / f"{kind}.sqlite"
    _blank_database(path)
    caplog.set_level("INFO", logger="scrapy_frontier")
    if kind == "queue":
        store = sqlite_store(path)
        store.close()
        again = sqlite_store(path)
        assert again.front_count() == 0
        again.close()
    elif kind == "seen":
        with SQLiteFingerprintStore(path) as seen:
            seen.add(7)
        with SQLiteFingerprintStore(path) as seen:
            assert seen.contains(7)
    else:
        SQLiteHistoryStore(path).close()
        SQLiteHistoryStore(path).close()
        assert "holds no tables" in caplog.text
