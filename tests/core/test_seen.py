"""The URL-seen test: cache policies, the SQLite store, the dupefilter, and one real crawl."""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.core.scheduler import Scheduler
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from benchmarks.seen_policies import (
    NEVER,
    POLICIES,
    InfiniteCache,
    MinCache,
    StaticCache,
    make_simulation_cache,
    next_uses,
)
from frontier_testweb.crawl import FRONTIER_ADDON
from scrapy_frontier import FrontierScheduler
from scrapy_frontier.backends.sqlite.seen import FORMAT, SQLiteFingerprintStore
from scrapy_frontier.core import seen as core_seen
from scrapy_frontier.core.clock import FakeClock
from scrapy_frontier.core.seen import (
    ClockCache,
    FingerprintCache,
    LRUCache,
    MemoryFingerprintStore,
    RandomCache,
    SeenSet,
    fingerprint64,
    make_cache,
    simulate,
)
from scrapy_frontier.dupefilter import PUBLISH_EVERY, STORE_NAME, FrontierDupeFilter
from scrapy_frontier.errors import FrontierConfigError, SeenStoreError
from scrapy_frontier.fingerprint import fast_fingerprint

DUPEFILTER = "scrapy_frontier.dupefilter.FrontierDupeFilter"

fps = st.integers(min_value=-(2**63), max_value=2**63 - 1)
small_traces = st.lists(st.integers(0, 5), max_size=14)


def replay(cache: FingerprintCache, trace: Sequence[int]) -> list[bool]:
    out = []
    for fp in trace:
        hit = cache.lookup(fp)
        if not hit:
            cache.insert(fp)
        out.append(hit)
    return out


# -- fingerprints ------------------------------------------------------------------------------


def test_fingerprint64_is_the_signed_first_eight_bytes() -> None:
    assert fingerprint64(bytes(8) + b"\xff" * 12) == 0
    assert fingerprint64(b"\x00" * 7 + b"\x01" + b"rest") == 1
    assert fingerprint64(b"\xff" * 20) == -1
    assert fingerprint64(b"\x80" + bytes(19)) == -(2**63)
    assert fingerprint64(b"\x7f" + b"\xff" * 7) == 2**63 - 1
    with pytest.raises(ValueError, match="8 bytes"):
        fingerprint64(b"short")


# -- policies ----------------------------------------------------------------------------------


@given(trace=st.lists(st.integers(0, 40), max_size=200), cap=st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_every_bounded_policy_respects_its_capacity(trace: list[int], cap: int) -> None:
    for policy in ("clock", "lru", "random", "static", "min"):
        cache = make_simulation_cache(policy, cap, rng=random.Random(3), trace=trace)
        for fp in trace:
            if not cache.lookup(fp):
                cache.insert(fp)
            assert len(cache) <= cap, policy
        assert cache.hits + cache.misses == len(trace)


class _FifoCache(FingerprintCache):
    """First in, first out: a policy written against the base's one hook."""

    __slots__ = ()

    def _make_room(self, fp: int) -> None:
        del self._entries[next(iter(self._entries))]


def test_a_policy_supplies_only_its_eviction_and_the_base_does_the_rest() -> None:
    cache = _FifoCache(2)
    assert replay(cache, [1, 2, 1, 3, 1, 2]) == [False, False, True, False, False, False]
    assert list(cache) == [1, 2] and len(cache) == 2 and 1 in cache and 3 not in cache
    assert (cache.hits, cache.misses, cache.lookups, cache.capacity) == (1, 5, 6, 2)
    assert cache.hit_rate == pytest.approx(1 / 6)
    cache.insert(2)  # already cached: nothing is evicted
    assert list(cache) == [1, 2]
    full = FingerprintCache(1)
    full.insert(1)
    with pytest.raises(NotImplementedError, match="never evicts"):
        full.insert(2)
    # The crawl's policies keep the base's storage and counts, and override no more than
    # their eviction (LRU also has its own lookup, which keeps its order).
    shared = {"__len__", "__contains__", "__iter__", "capacity", "insert", "hits", "misses"}
    for cls in (ClockCache, LRUCache, RandomCache):
        assert not shared & vars(cls).keys(), cls
        assert "_make_room" in vars(cls), cls
    assert [cls for cls in (ClockCache, LRUCache, RandomCache) if "lookup" in vars(cls)] == [
        LRUCache]


def test_clock_gives_a_referenced_entry_a_second_chance() -> None:
    cache = ClockCache(3)
    replay(cache, [1, 2, 3])  # every new entry starts referenced
    assert all(cache.referenced(fp) for fp in (1, 2, 3))
    replay(cache, [4])  # full sweep clears all bits, then evicts the entry under the hand
    assert set(cache) == {4, 2, 3}
    assert [cache.referenced(fp) for fp in (4, 2, 3)] == [True, False, False]
    assert cache.lookup(2)  # 2 earns its second chance
    replay(cache, [5])  # the hand passes 2 (clearing it) and evicts 3
    assert set(cache) == {4, 2, 5}
    assert not cache.referenced(2)


def test_clock_is_only_an_approximation_of_lru() -> None:
    # After 4 evicts 1, use 3 then 2: LRU evicts 4 (least recent), while CLOCK's
    # hand clears every bit and comes back to 2, the most recently used.
    clock, lru = ClockCache(3), LRUCache(3)
    for cache in (clock, lru):
        replay(cache, [1, 2, 3, 4, 3, 2, 5])
    assert lru.order() == [3, 2, 5]
    assert set(clock) == {4, 3, 5}


def test_lru_keeps_recency_order_and_evicts_the_oldest() -> None:
    cache = LRUCache(3)
    assert replay(cache, [1, 2, 3, 1]) == [False, False, False, True]
    assert cache.order() == [2, 3, 1]
    replay(cache, [4])
    assert cache.order() == [3, 1, 4]
    assert not cache.lookup(2) and cache.lookup(3)
    assert cache.order() == [1, 4, 3]
    assert (cache.hits, cache.misses) == (2, 5)


def test_random_replacement_is_deterministic_for_a_seed() -> None:
    gen = random.Random(7)
    trace = [gen.randrange(300) for _ in range(3000)]
    a, b, c = (RandomCache(32, random.Random(seed)) for seed in (1, 1, 2))
    answers = replay(a, trace)
    assert replay(b, trace) == answers
    assert list(a) == list(b)
    assert replay(c, trace) != answers
    assert len(a) == 32 and 0 < a.hits < len(trace)


def test_static_cache_holds_only_its_fixed_set_and_misses_first_references() -> None:
    trace = [5, 1, 5, 2, 5, 1, 3, 1, 5, 4, 4]
    cache = make_simulation_cache("static", 2, trace=trace)
    assert isinstance(cache, StaticCache)
    assert cache.reserved == {5, 1}  # the two most frequent
    hits = replay(cache, trace)
    assert hits == [False, False, True, False, True, True, False, True, True, False, False]
    counts = Counter(trace)
    assert cache.hits == sum(counts[fp] - 1 for fp in (5, 1))
    assert StaticCache(2, [9, 8, 7]).reserved == {9, 8}


def test_next_uses_matches_a_naive_scan() -> None:
    gen = random.Random(1)
    trace = [gen.randrange(20) for _ in range(500)]
    expected = []
    for t, fp in enumerate(trace):
        later = [u for u in range(t + 1, len(trace)) if trace[u] == fp]
        expected.append(later[0] if later else NEVER)
    assert next_uses(trace) == expected


@functools.cache
def _best(trace: tuple[int, ...], cap: int, t: int, cache: frozenset[int]) -> int:
    """Most hits achievable on trace[t:] from ``cache``, by exhaustive search."""
    if t == len(trace):
        return 0
    fp = trace[t]
    if fp in cache:
        return 1 + _best(trace, cap, t + 1, cache)
    options = [_best(trace, cap, t + 1, cache)]  # do not cache it
    if len(cache) < cap:
        options.append(_best(trace, cap, t + 1, cache | {fp}))
    else:
        options.extend(_best(trace, cap, t + 1, (cache - {v}) | {fp}) for v in cache)
    return max(options)


@given(trace=small_traces, cap=st.integers(1, 3))
@settings(max_examples=150, deadline=None)
def test_min_is_optimal_against_exhaustive_search_and_every_policy(
    trace: list[int], cap: int
) -> None:
    cache = MinCache(cap, trace)
    replay(cache, trace)
    assert cache.hits == _best(tuple(trace), cap, 0, frozenset())
    for policy in ("clock", "lru", "random", "static"):
        other = make_simulation_cache(policy, cap, rng=random.Random(0), trace=trace)
        replay(other, trace)
        assert other.hits <= cache.hits, policy
    infinite = InfiniteCache()
    replay(infinite, trace)
    assert cache.hits <= infinite.hits


def test_min_on_the_textbook_reference_string() -> None:
    # The classic OPT example with 3 frames has 9 faults under demand paging,
    # which must load the second 7. A URL cache need not keep a fingerprint: 7 is
    # never tested again, so MIN leaves it out and keeps 0 and 1: 8 misses.
    trace = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1]
    cache = MinCache(3, trace)
    replay(cache, trace)
    assert cache.misses == 8 == len(trace) - _best(tuple(trace), 3, 0, frozenset())
    lru = LRUCache(3)
    replay(lru, trace)
    assert lru.misses == 12  # the textbook's LRU count


def test_min_refuses_to_be_driven_off_its_trace() -> None:
    cache = MinCache(2, [1, 2, 3])
    assert not cache.lookup(1)
    with pytest.raises(ValueError, match="must follow a missed lookup"):
        cache.insert(9)
    cache.insert(1)
    with pytest.raises(ValueError, match="can only replay its trace"):
        cache.lookup(3)
    cache.lookup(2)
    cache.lookup(3)
    with pytest.raises(ValueError, match="has ended"):
        cache.lookup(1)


@given(trace=st.lists(st.integers(0, 50), max_size=300))
@settings(max_examples=40, deadline=None)
def test_infinite_cache_has_only_compulsory_misses(trace: list[int]) -> None:
    cache = InfiniteCache()
    assert simulate(cache, trace) == len(trace) - len(set(trace))
    assert cache.misses == len(set(trace))
    assert cache.capacity is None


def test_make_cache_knows_the_crawl_policies_and_only_those() -> None:
    kinds = {"clock": ClockCache, "lru": LRUCache, "random": RandomCache}
    assert set(core_seen.POLICIES) == set(kinds)
    for name, cls in kinds.items():
        cache = make_cache(name.upper(), 16)
        assert isinstance(cache, cls) and cache.capacity == 16
    for name in ("static", "min", "infinite", "fifo"):
        with pytest.raises(ValueError, match="unknown cache policy"):
            make_cache(name, 16)
    with pytest.raises(ValueError, match="capacity"):
        make_cache("clock", 0)


def test_the_simulation_policies_live_beside_the_benchmark_and_need_what_they_know() -> None:
    assert set(POLICIES) == {"clock", "lru", "random", "static", "min", "infinite"}
    assert type(make_simulation_cache("lru", 16)) is LRUCache
    with pytest.raises(ValueError, match="whole future"):
        make_simulation_cache("min", 16)
    cache = make_simulation_cache("infinite", 16)
    assert isinstance(cache, InfiniteCache) and cache.capacity is None
    with pytest.raises(ValueError, match="popular="):
        make_simulation_cache("static", 16)
    with pytest.raises(ValueError, match="unknown cache policy"):
        make_simulation_cache("fifo", 16)


# -- SeenSet -----------------------------------------------------------------------------------


@given(
    trace=st.lists(st.one_of(st.integers(0, 30), fps), max_size=250),
    cap=st.integers(1, 8),
    policy=st.sampled_from(POLICIES),
)
@settings(max_examples=120, deadline=None)
def test_seen_set_answers_exactly_like_a_python_set(
    trace: list[int], cap: int, policy: str
) -> None:
    cache = make_simulation_cache(policy, cap, rng=random.Random(5), trace=trace)
    seen = SeenSet(cache, MemoryFingerprintStore())
    model: set[int] = set()
    for fp in trace:
        assert seen.seen(fp) == (fp in model), (policy, fp)
        model.add(fp)
    assert len(seen) == len(model)
    assert seen.hits + seen.misses == len(trace)
    # Every miss either found the fingerprint in the store or was new.
    assert seen.misses == seen.store_hits + len(model)


@given(trace=st.lists(st.integers(-(2**63), -(2**63) + 40) | fps, max_size=120),
       policy=st.sampled_from(("clock", "lru", "random")))
@settings(max_examples=25, deadline=None)
def test_seen_set_over_sqlite_answers_exactly_like_a_python_set(
    tmp_path_factory: pytest.TempPathFactory, trace: list[int], policy: str
) -> None:
    path = tmp_path_factory.mktemp("seen") / "seen.sqlite"
    seen = SeenSet(make_cache(policy, 4, rng=random.Random(1)),
                   SQLiteFingerprintStore(path, batch_size=7))
    model: set[int] = set()
    for fp in trace[: len(trace) // 2]:
        assert seen.seen(fp) == (fp in model)
        model.add(fp)
    seen.close()
    # Reopened: a cold cache, the same answers.
    seen = SeenSet(make_cache(policy, 4, rng=random.Random(1)),
                   SQLiteFingerprintStore(path, batch_size=7))
    for fp in trace[len(trace) // 2:]:
        assert seen.seen(fp) == (fp in model)
        model.add(fp)
    assert len(seen) == len(model)
    seen.close()


def test_seen_set_counts_and_hit_rate() -> None:
    seen = SeenSet(LRUCache(2))
    assert seen.hit_rate == 0.0
    answers = [seen.seen(fp) for fp in [1, 2, 1, 3, 2, 1, 1]]
    assert answers == [False, False, True, False, True, True, True]
    # 1,2 miss; 1 hit; 3 miss (evicts 2); 2 miss, found in store (evicts 1);
    # 1 miss, found in store; 1 hit.
    assert (seen.hits, seen.misses, seen.store_hits) == (2, 5, 2)
    assert seen.hit_rate == pytest.approx(2 / 7)


# -- SQLite store ------------------------------------------------------------------------------


def test_sqlite_store_persists_batches_and_sees_its_buffer(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    store = SQLiteFingerprintStore(path, batch_size=10)
    extremes = [-(2**63), 2**63 - 1, 0, -1]
    store.add_many(extremes)
    assert store.pending == 4 and all(store.contains(fp) for fp in extremes)
    store.add_many(range(1000, 1010))  # reaches the batch size: flushed
    assert store.pending == 4  # 14 added, 10 flushed... the buffer holds the rest
    assert len(store) == 14
    with pytest.raises(ValueError, match="64-bit"):
        store.add(2**63)
    store.close()
    store.close()  # idempotent
    with pytest.raises(SeenStoreError, match="is closed"):
        store.contains(5)
    assert not path.with_name("seen.sqlite-wal").exists() or (
        path.with_name("seen.sqlite-wal").stat().st_size == 0
    )
    with SQLiteFingerprintStore(path) as again:
        assert len(again) == 14
        assert all(again.contains(fp) for fp in [*extremes, *range(1000, 1010)])
        assert not again.contains(999)
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM frontier_meta"))
    assert meta == {"format": FORMAT, "version": 1, "count": 14}
    assert conn.execute("SELECT count(*) FROM seen").fetchone() == (14,)
    conn.close()


def test_sqlite_store_flushes_a_waiting_buffer_after_its_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SQLiteFingerprintStore(tmp_path / "seen.sqlite", batch_size=1000,
                                   flush_interval=2.0, clock=clock)
    store.add(1)
    clock.advance(1.5)
    store.add(2)
    assert store.pending == 2
    clock.advance(0.5)  # the oldest has waited 2 s
    store.add(3)
    assert store.pending == 0 and len(store) == 3
    store.close()


def test_sqlite_store_keeps_committed_batches_when_the_process_dies(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    script = (
        "import os, sys\n"
        "from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore\n"
        "store = SQLiteFingerprintStore(sys.argv[1], batch_size=100)\n"
        "store.add_many(range(250))\n"
        "os._exit(0)  # no close: two batches committed, 50 buffered and lost\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)
    with SQLiteFingerprintStore(path) as store:
        assert len(store) == 200
        assert store.contains(199) and not store.contains(200)


def test_sqlite_store_is_held_exclusively(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    store = SQLiteFingerprintStore(path)
    with pytest.raises(SeenStoreError, match="in use by another process"):
        SQLiteFingerprintStore(path)
    store.close()
    SQLiteFingerprintStore(path).close()


def _unchanged_after_error(path: Path, match: str) -> SeenStoreError:
    before = path.read_bytes()
    with pytest.raises(SeenStoreError, match=match) as info:
        SQLiteFingerprintStore(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before  # never silently reset
    return info.value


def test_garbage_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    path.write_bytes(os.urandom(5000))
    _unchanged_after_error(path, "not an SQLite database")


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE photos(id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    _unchanged_after_error(path, "not a scrapy-frontier seen-set.*photos")


def test_other_format_and_newer_version_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    SQLiteFingerprintStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE frontier_meta SET value = 99 WHERE key = 'version'")
    conn.commit()
    conn.close()
    error = _unchanged_after_error(path, "format version 99")
    assert "reads version 1" in str(error)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE frontier_meta SET value = 'someone/else' WHERE key = 'format'")
    conn.commit()
    conn.close()
    _unchanged_after_error(path, "holds format 'someone/else'")


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    gen = random.Random(1)
    with SQLiteFingerprintStore(path, batch_size=1000) as store:
        store.add_many(gen.getrandbits(63) for _ in range(20000))
        assert len(store) == 20000
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    # (The test's own directory name contains "truncated": match the message's words.)
    _unchanged_after_error(path, r"is truncated \(\d+ bytes, its header says \d+\)")


#: Run after a script that leaves its store's connection in ``conn`` with rows in the
#: WAL: a checkpoint fails part-way, as on a full disk (RLIMIT_FSIZE makes writes past
#: the file's size fail), after writing page 1; then the process dies without closing.
#: The main file is left shorter than its header says, the -wal holds the rest.
CHECKPOINT_CUT_SHORT = """
import resource, signal, sqlite3
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = max(os.path.getsize(sys.argv[1]), 4096)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
except sqlite3.Error:
    os._exit(0)  # no close: closing would checkpoint again
sys.exit("the checkpoint was not cut short")
"""


def cut_short_checkpoint(path: Path, script: str) -> None:
    """Run ``script`` + :data:`CHECKPOINT_CUT_SHORT` on ``path``; check the state it leaves."""
    subprocess.run([sys.executable, "-c", "import os, sys\n" + script + CHECKPOINT_CUT_SHORT,
                    str(path)], check=True, timeout=120)
    header = path.read_bytes()[:100]
    page_size, pages = int.from_bytes(header[16:18], "big"), int.from_bytes(header[28:32], "big")
    assert path.stat().st_size < pages * page_size
    assert Path(f"{path}-wal").stat().st_size > 0


def test_file_cut_short_by_a_checkpoint_is_replayed_from_its_wal(tmp_path: Path) -> None:
    # Issue 13: after a full disk every rerun was refused as "truncated", though the
    # -wal held the missing pages and SQLite replays it on open.
    path = tmp_path / "seen.sqlite"
    cut_short_checkpoint(path, (
        "from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore\n"
        "store = SQLiteFingerprintStore(sys.argv[1], batch_size=1000)\n"
        "store.add_many(range(0, 40000 * 7919, 7919))\n"
        "store.flush()\n"
        "conn = store._conn\n"
    ))
    with SQLiteFingerprintStore(path) as store:
        assert len(store) == 40000
        assert all(store.contains(fp) for fp in range(0, 40000 * 7919, 7919))
        assert not store.contains(1)
    with SQLiteFingerprintStore(path) as store:  # and checkpointed whole at close
        assert len(store) == 40000 and store.contains(7919 * 39999)


def test_truncated_file_is_refused_with_an_empty_wal(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    with SQLiteFingerprintStore(path, batch_size=1000) as store:
        store.add_many(range(20000))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    Path(f"{path}-wal").write_bytes(b"")  # an empty -wal holds no missing pages
    _unchanged_after_error(path, r"is truncated \(\d+ bytes, its header says \d+\)")


def test_corrupt_pages_are_reported_on_use(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    with SQLiteFingerprintStore(path, batch_size=1000) as store:
        store.add_many(range(20000))
    data = bytearray(path.read_bytes())
    page = 4096
    data[3 * page: len(data)] = os.urandom(len(data) - 3 * page)  # same size, pages scrambled
    path.write_bytes(bytes(data))
    with pytest.raises(SeenStoreError, match=re.escape(str(path))) as info:
        store = SQLiteFingerprintStore(path)
        for fp in range(0, 20000, 97):
            store.contains(fp)
    assert "it is corrupt" in str(info.value) and "Restore it from a backup" in str(info.value)


def test_read_only_directory_check_runs_even_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root writes anywhere, so a real read-only directory cannot be made here:
    # pretend the permission check says no.
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    with pytest.raises(SeenStoreError, match="is not writable.*Make it writable"):
        SQLiteFingerprintStore(tmp_path / "seen.sqlite")
    assert not (tmp_path / "seen.sqlite").exists()


def test_an_io_error_in_a_read_only_place_is_reported_as_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JOBDIR on a read-only filesystem: SQLite says "disk I/O error" (or "unable to
    open"); the message must say read-only. (As root, pretend the permission check says
    no: root writes anywhere but on a read-only mount.)"""
    import sqlite3

    from scrapy_frontier.backends.sqlite.files import SQLiteFile

    path = tmp_path / "seen.sqlite"
    file = SQLiteFile(path, SeenStoreError, fmt="x", version=1, what="seen-set")
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    for text in ("disk I/O error", "unable to open database file"):
        error = file.classify(sqlite3.OperationalError(text), "opening it", "nothing is lost")
        assert "read-only" in str(error) and "writable" in str(error), error
    monkeypatch.undo()
    error = file.classify(sqlite3.OperationalError("disk I/O error"), "opening it", "-")
    assert "read-only" not in str(error)  # a writable place: some other I/O trouble


def test_missing_directory_or_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SeenStoreError, match="does not exist"):
        SQLiteFingerprintStore(tmp_path / "nowhere" / "seen.sqlite")
    (tmp_path / "dir.sqlite").mkdir()
    with pytest.raises(SeenStoreError, match="not a regular file"):
        SQLiteFingerprintStore(tmp_path / "dir.sqlite")


def test_full_disk_is_a_clear_error_and_keeps_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    store = SQLiteFingerprintStore(path, batch_size=500)
    store.add_many(range(500))  # one committed batch
    # Cap the file at its current size: the next batch needs a new page.
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(SeenStoreError, match="disk is full") as info:
        store.add_many(range(10_000, 12_000))
    assert "Free some space" in str(info.value)
    assert "Free at least 48 MB more" in str(info.value)
    store._pending.clear()
    store.close()
    with SQLiteFingerprintStore(path) as again:
        assert len(again) == 500 and again.contains(499)


# -- the dupefilter ----------------------------------------------------------------------------


class _Spider(Spider):
    name = "seen"


def make_filter(settings: dict[str, Any] | None = None) -> tuple[FrontierDupeFilter, Any]:
    crawler = get_crawler(_Spider, {"DUPEFILTER_CLASS": DUPEFILTER, **(settings or {})})
    return FrontierDupeFilter.from_crawler(crawler), crawler


def test_dupefilter_filters_duplicates_and_publishes_stats_at_close() -> None:
    df, crawler = make_filter()
    urls = [f"http://h{i % 3}.example/p/{i % 7}" for i in range(100)]
    answers = [df.request_seen(Request(u)) for u in urls]
    assert answers.count(False) == len(set(urls))
    for u, seen in zip(urls, answers, strict=True):
        if seen:
            df.log(Request(u), None)
    assert crawler.stats.get_value("frontier/seen/hits") is None  # nothing per request
    df.close("finished")
    stats = crawler.stats
    assert stats.get_value("frontier/seen/hits") + stats.get_value("frontier/seen/misses") == 100
    assert stats.get_value("dupefilter/filtered") == 100 - len(set(urls))
    assert 0 < stats.get_value("frontier/seen/hit_rate") <= 1
    assert df.path is None and isinstance(df.seen.store, MemoryFingerprintStore)
    assert isinstance(df.seen.cache, ClockCache) and df.seen.cache.capacity == 2**16


class CountingStats(MemoryStatsCollector):
    """Counts inc_value calls per key."""

    def __init__(self, crawler: Any) -> None:
        super().__init__(crawler)
        self.calls: Counter[str] = Counter()

    def inc_value(self, key: str, count: int = 1, start: int = 0, spider: Any = None) -> None:
        self.calls[key] += 1
        super().inc_value(key, count, start)


def test_dupefilter_stats_are_batched_not_per_request() -> None:
    df, crawler = make_filter({"STATS_CLASS": f"{__name__}.CountingStats"})
    stats = crawler.stats
    assert isinstance(stats, CountingStats)
    n = 3 * PUBLISH_EVERY + 10
    for i in range(n):
        df.request_seen(Request(f"http://a.example/{i % 500}"))
    assert stats.calls["frontier/seen/hits"] == 3
    assert stats.get_value("frontier/seen/hits") + stats.get_value(
        "frontier/seen/misses") == 3 * PUBLISH_EVERY
    df.close("finished")
    assert stats.calls["frontier/seen/hits"] == 4
    assert stats.get_value("frontier/seen/misses") == 500
    assert stats.get_value("frontier/seen/hits") == n - 500


def test_dont_filter_is_the_schedulers_business_not_the_dupefilters() -> None:
    crawler = get_crawler(_Spider, {
        "DUPEFILTER_CLASS": DUPEFILTER,
        # Scrapy's default queue needs a running engine; this one does not.
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",
    })
    scheduler = Scheduler.from_crawler(crawler)
    assert isinstance(scheduler.df, FrontierDupeFilter)
    spider = _Spider.from_crawler(crawler)
    scheduler.open(spider)
    assert scheduler.enqueue_request(Request("http://a.example/x"))
    assert not scheduler.enqueue_request(Request("http://a.example/x"))
    assert scheduler.enqueue_request(Request("http://a.example/x", dont_filter=True))
    assert scheduler.enqueue_request(Request("http://a.example/x", dont_filter=True))
    assert scheduler.df.seen.lookups == 2  # dont_filter requests never reached it
    assert len(scheduler) == 3
    scheduler.close("finished")
    assert crawler.stats.get_value("dupefilter/filtered") == 1


def test_the_frontier_scheduler_builds_it_from_dupefilter_class() -> None:
    crawler = get_crawler(_Spider, {"DUPEFILTER_CLASS": DUPEFILTER, "ADDONS": FRONTIER_ADDON})
    scheduler = FrontierScheduler.from_crawler(crawler)
    assert isinstance(scheduler.df, FrontierDupeFilter)
    scheduler.df.close("finished")


def test_dupefilter_persists_across_runs_in_jobdir(tmp_path: Path) -> None:
    job = tmp_path / "job"
    first, _ = make_filter({"JOBDIR": str(job)})
    assert first.path == job / STORE_NAME
    for i in range(50):
        assert not first.request_seen(Request(f"http://a.example/{i}"))
    first.close("shutdown")
    second, crawler = make_filter({"JOBDIR": str(job), "FRONTIER_SEEN_CACHE_SIZE": 8})
    assert len(second.seen) == 50
    assert all(second.request_seen(Request(f"http://a.example/{i}")) for i in range(50))
    assert not second.request_seen(Request("http://a.example/new"))
    second.close("finished")
    # A cold cache: the store answered.
    assert crawler.stats.get_value("frontier/seen/store_hits") == 50
    third, _ = make_filter({"JOBDIR": str(job)})
    assert len(third.seen) == 51
    third.close("finished")


def test_frontier_path_wins_over_jobdir(tmp_path: Path) -> None:
    df, _ = make_filter({"JOBDIR": str(tmp_path / "job"), "FRONTIER_PATH": str(tmp_path / "f")})
    df.request_seen(Request("http://a.example/"))
    df.close("finished")
    assert (tmp_path / "f" / STORE_NAME).exists()
    assert not (tmp_path / "job" / STORE_NAME).exists()


class QueryBlindFingerprinter:
    """Ignores the query string: ?a=1 and ?a=2 are the same page."""

    def fingerprint(self, request: Request) -> bytes:
        return request.url.split("?")[0].encode()


def test_custom_request_fingerprinter_is_respected() -> None:
    path = f"{__name__}.QueryBlindFingerprinter"
    df, _ = make_filter({"REQUEST_FINGERPRINTER_CLASS": path})
    assert not df.request_seen(Request("http://a.example/p?a=1"))
    assert df.request_seen(Request("http://a.example/p?a=2"))
    # Its fingerprints are raw URLs, not digests: they share their first 8 bytes
    # ("http://a") and must still not collide.
    assert not df.request_seen(Request("http://a.example/q"))
    df.close("finished")
    default, _ = make_filter()
    assert not default.request_seen(Request("http://a.example/p?a=1"))
    assert not default.request_seen(Request("http://a.example/p?a=2"))


_URL_PARTS = {
    "scheme": ["http", "https", "HTTP", "ftp", "file"],
    "host": ["h1.example", "Example.COM", "a-b.c", "xn--bcher-kva.example", "xn--zz.example",
             "1.2.3.4", "a..b", "a.", "-a.b", "a-.b", "www.exa_mple.org", "ex.com:80",
             "ex.com:8080", "u:p@ex.com", "[::1]", "[::0:1]", "b\u00fccher.example", "",
             "0", "1.2.3", "a.0x1f", "a.0x", "a.0xg", "a.09"],
    "path": ["", "/", "/p/1", "/a/b/", "/a//b", "/./a", "/a/../b", "/a/.", "/.well-known/x",
             "/a.b/c~d_e-f", "/%7Euser", "/%41", "/a%2fb", "/r\u00e9sum\u00e9", "/a b", "/a;p",
             "/a:b", "/a@b", "/a!b", "/a$b", "/a'b", "/a(b)", "/a*b", "/a+b", "/a,b",
             "/a=b", "/A/B", "/\"x", "/a\\b", "/{a}", "/a|b", "/a^b", "/a`b"],
    "tail": ["", "?", "?a=1", "?b=2&a=1", "#frag", "#", "?a#b"],
}


@given(
    st.sampled_from(_URL_PARTS["scheme"]),
    st.sampled_from(_URL_PARTS["host"]),
    st.lists(st.sampled_from(_URL_PARTS["path"]), max_size=3),
    st.sampled_from(_URL_PARTS["tail"]),
    st.sampled_from(["GET", "get", "POST", "HEAD"]),
    st.sampled_from([None, b"", b"x"]),
    st.booleans(),
)
@settings(max_examples=3000, deadline=None)
def test_fast_fingerprint_is_scrapys_fingerprint(
    scheme: str, host: str, path: list[str], tail: str, method: str, body: bytes | None,
    verbatim: bool,
) -> None:
    from scrapy.utils.request import fingerprint

    url = f"{scheme}://{host}{''.join(path)}{tail}"
    try:
        request = Request(url, method=method, body=body, meta={"verbatim_url": verbatim})
    except (ValueError, UnicodeError):
        return
    fast = fast_fingerprint(request)
    if fast is not None:
        assert fast == fingerprint(request), request.url
        assert fast == fingerprint(request, keep_fragments=True)


def test_fast_fingerprint_covers_plain_urls() -> None:
    for url in ("http://h1.example/p/3", "https://www.example.com/", "http://a.b/c/d/",
                "https://x-y.example.org/a.b/c~d_e-f.html"):
        assert fast_fingerprint(Request(url)) is not None, url
    for url in ("http://a.example/p?a=1", "http://a.example/a b", "http://a.example/#f",
                "http://a.example:8080/", "http://a.example/%41", "http://10.0.0.1/"):
        assert fast_fingerprint(Request(url)) is None, url
    assert fast_fingerprint(Request("http://a.example/", method="POST")) is None
    assert fast_fingerprint(Request("http://a.example/", body=b"x")) is None


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"FRONTIER_SEEN_CACHE_SIZE": 0}, "FRONTIER_SEEN_CACHE_SIZE must be >= 1"),
        ({"FRONTIER_SEEN_CACHE_SIZE": "lots"}, "FRONTIER_SEEN_CACHE_SIZE must be an integer"),
        ({"FRONTIER_SEEN_CACHE_SIZE": 2.5}, "FRONTIER_SEEN_CACHE_SIZE must be an integer"),
        ({"FRONTIER_SEEN_CACHE_POLICY": "min"}, "simulation-only"),
        ({"FRONTIER_SEEN_CACHE_POLICY": "static"}, "simulation-only"),
        ({"FRONTIER_SEEN_CACHE_POLICY": "fifo"}, "must be one of clock, lru, random"),
        ({"FRONTIER_SEED": "x", "FRONTIER_SEEN_CACHE_POLICY": "random"}, "FRONTIER_SEED"),
    ],
)
def test_bad_settings_are_clear_config_errors(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(FrontierConfigError, match=match):
        make_filter(settings)


def test_settings_choose_the_cache() -> None:
    df, _ = make_filter({"FRONTIER_SEEN_CACHE_SIZE": "1024", "FRONTIER_SEEN_CACHE_POLICY": "LRU"})
    assert isinstance(df.seen.cache, LRUCache) and df.seen.cache.capacity == 1024
    df, _ = make_filter({"FRONTIER_SEEN_CACHE_POLICY": "random", "FRONTIER_SEED": 3})
    assert isinstance(df.seen.cache, RandomCache)


def test_dupefilter_log_follows_dupefilter_debug(caplog: pytest.LogCaptureFixture) -> None:
    for debug, expected in ((False, 1), (True, 3)):
        df, _ = make_filter({"DUPEFILTER_DEBUG": debug})
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="scrapy_frontier.dupefilter"):
            for _ in range(3):
                df.log(Request("http://a.example/"), None)
        messages = [m for m in (r.getMessage() for r in caplog.records)
                    if "Filtered duplicate" in m]
        assert len(messages) == expected
        assert df.filtered == 3


def test_a_corrupt_jobdir_store_stops_the_crawl_with_the_file_named(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / STORE_NAME).write_bytes(b"not a database at all" * 10)
    with pytest.raises(SeenStoreError, match=re.escape(str(job / STORE_NAME))):
        make_filter({"JOBDIR": str(job)})


# -- a real crawl ------------------------------------------------------------------------------


@pytest.mark.crawl
def test_real_crawl_with_the_dupefilter_is_complete_without_duplicates(tmp_path: Path) -> None:
    from frontier_testweb import ServerProcess, audit, read_log
    from frontier_testweb.crawl import run_crawl

    web_args = ["--shape", "skewed", "--hosts", "8", "--largest", "30",
                "--latency", "0.002", "0.01"]
    job = tmp_path / "job"
    settings = {
        "ADDONS": FRONTIER_ADDON,
        "DUPEFILTER_CLASS": DUPEFILTER,
        "FRONTIER_MIN_DELAY": 0.0,
        "FRONTIER_SEEN_CACHE_SIZE": 16,  # smaller than the web: the store answers too
        "JOBDIR": str(job),
    }
    log = tmp_path / "server.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, settings, allowed_domains=web.allowed_domains,
                           timeout=240, workdir=tmp_path / "crawl")
    assert result.returncode == 0, result.output[-3000:]
    report = audit(read_log(log), expected=web.expected, min_delay=0.0)
    assert report.coverage == 1.0, report.summary()
    assert report.duplicates == 0, report.summary()
    stats = result.stats
    lookups = stats["frontier/seen/hits"] + stats["frontier/seen/misses"]
    assert stats["dupefilter/filtered"] == lookups - len(web.expected)
    assert stats["frontier/seen/store_hits"] > 0
    with SQLiteFingerprintStore(job / STORE_NAME) as store:
        assert len(store) == len(web.expected)
