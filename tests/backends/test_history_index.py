"""The page history's due order comes from an index (issue 13, item 7).

A continuous recrawl asks the history for its next due time on every empty
``next_request``: no history query may look at every record. Correctness is checked
against a brute-force store (the former sort-everything implementation); cost by
counting work -- Python bytecodes executed for the memory store, SQLite VM steps for
the SQLite store -- at two history sizes, never by wall-clock time.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import pytest

from scrapy_frontier.backends.sqlite.history import (
    DUE_QUERY,
    NEXT_DUE_QUERY,
    SQLiteHistoryStore,
)
from scrapy_frontier.core import FakeClock
from scrapy_frontier.core.history import MemoryHistoryStore, PageRecord, SortedKeys
from scrapy_frontier.core.recrawl import Recrawler, RecrawlSettings
from scrapy_frontier.core.refresh import DAY, RefreshConfig

T = TypeVar("T")
START = (-math.inf, -(1 << 63))


class BruteForceHistoryStore:
    """The reference: records as they were put, every query looks at all of them."""

    def __init__(self) -> None:
        self.records: dict[int, PageRecord] = {}

    def get(self, fp: int) -> PageRecord | None:
        r = self.records.get(fp)
        return None if r is None else PageRecord.from_json(fp, r.to_json())

    def put(self, record: PageRecord) -> None:
        self.records[record.fp] = PageRecord.from_json(record.fp, record.to_json())

    def due(self, after: tuple[float, int], until: float, limit: int) -> list[PageRecord]:
        keys = sorted(
            (r.eligible, fp) for fp, r in self.records.items()
            if r.retired is None and after < (r.eligible, fp) and r.eligible <= until
        )
        return [self.records[fp] for _, fp in keys[:limit]]

    def next_due(self) -> float | None:
        dues = [r.eligible for r in self.records.values() if r.retired is None]
        return min(dues) if dues else None

    def evict(self, keep: int) -> int:
        extra = len(self.records) - keep
        if extra <= 0:
            return 0
        victims = sorted(self.records.values(), key=lambda r: (r.weight, -r.fp))[:extra]
        for r in victims:
            del self.records[r.fp]
        return len(victims)

    def scan(self) -> Iterator[PageRecord]:
        return iter([r for r in self.records.values() if r.retired is None])

    def __len__(self) -> int:
        return len(self.records)


def make_record(fp: int, due: float, *, interval: float = 0.0, claimed: float = 0.0,
                weight: float = 1.0, retired: str | None = None) -> PageRecord:
    r = PageRecord(fp=fp, url=f"http://a.example/{fp}", weight=weight, retired=retired,
                   held_until=claimed)
    r.history.next_due = due
    r.history.interval = interval
    return r


def dump(records: list[PageRecord]) -> list[str]:
    return [f"{r.fp} {r.to_json()}" for r in records]


# -- correctness ---------------------------------------------------------------------------


def test_sorted_keys_match_a_sorted_list() -> None:
    rng = random.Random(7)
    keys = SortedKeys(load=3)
    ref: set[tuple[int, int]] = set()
    for _ in range(2000):
        key = (rng.randrange(40), rng.randrange(40))
        if key in ref and rng.random() < 0.5:
            keys.remove(key)
            ref.discard(key)
        elif key not in ref:
            keys.add(key)
            ref.add(key)
        ordered = sorted(ref)
        assert len(keys) == len(ref)
        assert keys.first() == (ordered[0] if ordered else None)
        probe = (rng.randrange(-1, 41), rng.randrange(-1, 41))
        assert list(keys.after(probe)) == [k for k in ordered if k > probe]
    with pytest.raises(KeyError):
        keys.remove((99, 99))


@pytest.mark.parametrize("seed", range(6))
def test_indexed_memory_store_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    store = MemoryHistoryStore()
    # Tiny chunks, so chunks split and empty out all the time.
    store._due = SortedKeys(load=2)
    store._weights = SortedKeys(load=2)
    ref = BruteForceHistoryStore()
    fps = [rng.randrange(-(1 << 63), 1 << 63) for _ in range(60)]
    fps += [-3, -2, -1, 0, 1, 2, 3]
    cursors: list[tuple[float, int]] = [START]

    def put(record: PageRecord) -> None:
        store.put(record)
        ref.put(record)

    for _ in range(1500):
        op = rng.random()
        fp = rng.choice(fps)
        known = ref.get(fp)
        if op < 0.30 or known is None:
            # A new page or a full rewrite; integer times make ties in eligible.
            put(make_record(
                fp, float(rng.randrange(50)), interval=float(rng.choice((0, 10, 20))),
                weight=rng.choice((0.1, 0.5, 1.0)),
                retired=rng.choice((None, None, None, "gone", "failures")),
            ))
        elif op < 0.45:
            # The due time moves earlier or later (a visit, a change, a failure).
            known.history.next_due = max(0.0, known.history.next_due + rng.choice((-7, -1, 1, 9)))
            put(known)
        elif op < 0.55:
            known.held_until = rng.choice((0.0, known.eligible + 5, float(rng.randrange(60))))
            put(known)
        elif op < 0.62:
            known.retired = "gone" if known.retired is None else None
            put(known)
        elif op < 0.67:
            known.weight = rng.choice((0.1, 0.5, 1.0, 2.0))
            put(known)
        elif op < 0.69:
            put(known)  # the same record again: the index must not hold it twice
        elif op < 0.85:
            after = rng.choice(cursors)
            if rng.random() < 0.3:
                after = (float(rng.randrange(-1, 60)), rng.choice(fps))
            until = rng.choice((math.inf, float(rng.randrange(60))))
            limit = rng.choice((0, 1, 2, 5, 100))
            got = store.due(after, until, limit)
            assert dump(got) == dump(ref.due(after, until, limit))
            if got:
                cursors.append((got[-1].eligible, got[-1].fp))
                # The Recrawler claims what it takes: a put while the index is being read.
                for r in got[: rng.randrange(len(got) + 1)]:
                    r.held_until = float(rng.randrange(60))
                    put(r)
        elif op < 0.95:
            assert store.next_due() == ref.next_due()
        else:
            keep = rng.randrange(len(ref) + 5)
            assert store.evict(keep) == ref.evict(keep)
        assert len(store) == len(ref)
    assert sorted(dump(list(store.scan()))) == sorted(dump(list(ref.scan())))
    for fp in fps:
        a, b = store.get(fp), ref.get(fp)
        assert (a is None and b is None) or (a is not None and b is not None
                                             and a.to_json() == b.to_json())
    assert dump(store.due(START, math.inf, 10**6)) == dump(ref.due(START, math.inf, 10**6))


# -- cost that does not grow with the history ---------------------------------------------


def bytecodes(fn: Callable[[], T]) -> tuple[int, T]:
    """How many Python bytecodes ``fn()`` executes (in every frame it opens)."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        result = fn()
    finally:
        sys.settrace(previous)
    return count, result


def filled(store: Any, n: int) -> Any:
    """``n`` pages due over the next days, one in ten retired; nothing due at 0."""
    rng = random.Random(n)
    for i in range(n):
        store.put(make_record(rng.randrange(1 << 62), DAY + rng.random() * 10 * DAY,
                              interval=DAY, retired="gone" if i % 10 == 0 else None))
    return store


def memory_costs(store: Any) -> dict[str, int]:
    middle = store.due(START, math.inf, len(store) // 2)[-1]
    cursor = (middle.eligible, middle.fp)
    costs = {
        "next_due": bytecodes(store.next_due)[0],
        "due_nothing": bytecodes(lambda: store.due(START, 0.0, 500))[0],
        "due_after_cursor_10": bytecodes(lambda: store.due(cursor, math.inf, 10))[0],
    }
    record = store.due(cursor, math.inf, 1)[0]
    record.held_until = 20 * DAY
    costs["put"] = bytecodes(lambda: store.put(record))[0]
    return costs


def test_brute_force_cost_grows_so_the_counter_sees_a_scan() -> None:
    small = memory_costs(filled(BruteForceHistoryStore(), 1_000))
    large = memory_costs(filled(BruteForceHistoryStore(), 20_000))
    assert large["next_due"] > 10 * small["next_due"]
    assert large["due_nothing"] > 10 * small["due_nothing"]


@pytest.fixture(scope="module")
def large_memory_store() -> MemoryHistoryStore:
    """100k pages (built once: the tests below leave nothing due at time 0)."""
    store: MemoryHistoryStore = filled(MemoryHistoryStore(), 100_000)
    return store


def test_memory_store_queries_cost_the_same_at_1k_and_100k_pages(
    large_memory_store: MemoryHistoryStore,
) -> None:
    small = memory_costs(filled(MemoryHistoryStore(), 1_000))
    large = memory_costs(large_memory_store)
    for name, cost in large.items():
        # Bisecting is C code: the Python work per query is constant, give or take a chunk.
        assert cost <= small[name] + 50, (name, small, large)
    assert large["next_due"] < 50
    assert large["due_nothing"] < 100


def test_continuous_recrawler_with_nothing_due_costs_the_same_at_1k_and_100k_pages(
    large_memory_store: MemoryHistoryStore,
) -> None:
    """What every empty ``next_request`` runs: take_due (nothing due) and next_due."""

    def costs(store: MemoryHistoryStore) -> tuple[int, int]:
        clock = FakeClock(0.0)
        refresh = RefreshConfig(min_interval=60.0, max_interval=10 * DAY,
                                initial_interval=DAY, base_interval=DAY)
        settings = RecrawlSettings(mode="continuous", refresh=refresh)
        rc = Recrawler(settings, store, clock=clock)
        assert rc.take_due(500) == []
        take, _ = bytecodes(lambda: rc.take_due(500))
        nxt, due = bytecodes(rc.next_due)
        assert due is not None and due > 0.0
        return take, nxt

    small, large = costs(filled(MemoryHistoryStore(), 1_000)), costs(large_memory_store)
    assert large[0] <= small[0] + 50 and large[1] <= small[1] + 50, (small, large)


def plan(store: SQLiteHistoryStore, query: str, args: tuple[Any, ...]) -> list[str]:
    return [row[3] for row in store._conn.execute("EXPLAIN QUERY PLAN " + query, args)]


def vm_steps(store: SQLiteHistoryStore, fn: Callable[[], T]) -> tuple[int, T]:
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    store._conn.set_progress_handler(tick, 1)
    try:
        result = fn()
    finally:
        store._conn.set_progress_handler(None, 1)
    return steps, result


def sqlite_store(path: Path, n: int) -> SQLiteHistoryStore:
    store = SQLiteHistoryStore(path)
    rng = random.Random(n)
    data = make_record(1, 0.0).to_json()
    rows = [(rng.randrange(1 << 62), 1000.0 + rng.random() * 10 * DAY, 1.0,
             1 if i % 10 == 0 else 0, data) for i in range(n)]
    conn = store._conn  # autocommit: one transaction for the bulk load
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?, ?)", sorted(rows))
    conn.execute("COMMIT")
    return store


def test_sqlite_due_queries_search_the_due_index(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path / "history.sqlite", 100)
    for query, args in ((DUE_QUERY, (5.0, 7, 100.0, 10)), (NEXT_DUE_QUERY, ())):
        details = plan(store, query, args)
        assert details and all(
            d.startswith("SEARCH pages USING") and "INDEX pages_due" in d for d in details
        ), details
        assert not any("SCAN" in d or "TEMP B-TREE" in d for d in details), details
    # The cursor bounds the search, not just a filter on it.
    assert "(eligible,fp)>(?,?)" in plan(store, DUE_QUERY, (5.0, 7, 100.0, 10))[0]
    store.close()


def test_sqlite_due_queries_cost_the_same_at_1k_and_100k_pages(tmp_path: Path) -> None:
    def costs(n: int) -> dict[str, int]:
        store = sqlite_store(tmp_path / f"h{n}.sqlite", n)
        eligible, fp = store._conn.execute(
            "SELECT eligible, fp FROM pages WHERE retired = 0 ORDER BY eligible, fp "
            "LIMIT 1 OFFSET ?", (n // 3,)).fetchone()
        cursor = (eligible, fp)
        out = {
            "next_due": vm_steps(store, store.next_due)[0],
            "due_nothing": vm_steps(store, lambda: store.due(START, 0.0, 500))[0],
            "due_after_cursor_10": vm_steps(store, lambda: store.due(cursor, math.inf, 10))[0],
        }
        got = [r.fp for r in store.due(cursor, math.inf, 10)]
        rows = store._conn.execute(
            "SELECT eligible, fp FROM pages WHERE retired = 0 AND eligible >= ? "
            "ORDER BY eligible, fp", (eligible,)).fetchall()
        assert got == [row[1] for row in rows if tuple(row) > cursor][:10]
        store.close()
        return out

    small, large = costs(1_000), costs(100_000)
    for name, cost in large.items():
        # A B-tree seek: a few more steps for one more level, never a step per row.
        assert cost <= 2 * small[name] + 20, (name, small, large)
