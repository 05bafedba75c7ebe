"""Fetch times as the server saw them: the stall log, the estimator, and the scheduler's use."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request

from scrapy_frontier.core import FakeClock
from scrapy_frontier.core.fetch_time import FetchTimeEstimator, StallLog
from scrapy_frontier.scheduler.stalls import BEAT, MIN_STALL, StallMeter
from tests.test_scheduler import make_scheduler


def test_stall_log_overlap() -> None:
    log = StallLog(keep=3)
    log.add(1.0, 1.5)
    log.add(2.0, 2.1)
    log.add(3.0, 3.0)  # empty: ignored
    assert len(log) == 2 and log.count == 2 and log.worst == pytest.approx(0.5)
    assert log.overlap(0.0, 0.9) == 0.0
    assert log.overlap(1.2, 2.05) == pytest.approx(0.3 + 0.05)
    assert log.overlap(0.0, 10.0) == pytest.approx(0.6)
    assert log.overlap(1.5, 2.0) == 0.0
    # Held: only the stalls that ended close before the read (within the slack) count.
    assert log.held(0.0, 2.12, 0.05) == pytest.approx(0.1)  # 2.0-2.1 held the read at 2.12
    assert log.held(0.0, 2.5, 0.05) == 0.0  # a read long after both: nothing held it
    assert log.held(1.2, 1.4, 0.05) == pytest.approx(0.2)  # read during a stall's span
    for i in range(3):
        log.add(10.0 + i, 10.5 + i)
    assert log.overlap(0.0, 5.0) == 0.0  # the oldest spans were dropped (keep=3)


def test_estimator_clean_fetches_are_never_changed() -> None:
    est = FetchTimeEstimator()
    for seconds in (0.02, 0.5, 0.0):
        assert est.estimate("h", seconds, 0.0) == seconds
    assert est.recent_typical("h") == 0.02 and est.stalled == 0


def test_estimator_discounts_a_stall_down_to_recent_clean_times_only() -> None:
    est = FetchTimeEstimator(window=3)  # margin 1.5
    # No clean fetch yet: nothing to go by, the measured time stands.
    assert est.estimate("h", 0.314, 0.3) == pytest.approx(0.314)
    for seconds in (0.014, 0.012, 0.016):
        est.estimate("h", seconds, 0.0)
    # A 14 ms fetch read after a 300 ms pause: rests by 1.5 x the typical recent fetch.
    assert est.estimate("h", 0.314, 0.3) == pytest.approx(0.021)
    # Never below the part of the fetch no stall held.
    assert est.estimate("h", 0.35, 0.3) == pytest.approx(0.05)
    # Never above what was measured.
    assert est.estimate("h", 0.010, 0.008) == pytest.approx(0.010)
    # A stall longer than the fetch (clamped) discounts to the recent time.
    assert est.estimate("h", 0.2, 5.0) == pytest.approx(0.021)
    assert est.stalled == 5 and est.discounted == 3
    assert est.seconds_discounted == pytest.approx((0.314 - 0.021) + 0.3 + (0.2 - 0.021))
    # Another host's history does not count.
    assert est.estimate("other", 0.314, 0.3) == pytest.approx(0.314)
    # One slow clean fetch (a new connection, a busy loop) does not set the floor.
    est.estimate("h", 0.2, 0.0)
    assert est.estimate("h", 0.314, 0.3) == pytest.approx(1.5 * 0.016)
    # The window: only the last 3 clean fetches.
    for seconds in (0.001, 0.001, 0.001):
        est.estimate("h", seconds, 0.0)
    assert est.recent_typical("h") == pytest.approx(0.001)


def test_estimator_keeps_a_bounded_number_of_hosts() -> None:
    est = FetchTimeEstimator(max_hosts=2)
    est.estimate("a", 0.1, 0.0)
    est.estimate("b", 0.1, 0.0)
    est.estimate("a", 0.2, 0.0)  # a heard from again: b is now the oldest
    est.estimate("c", 0.1, 0.0)
    assert est.recent_typical("b") is None
    assert est.recent_typical("a") == 0.2 and est.recent_typical("c") == 0.1
    with pytest.raises(ValueError):
        FetchTimeEstimator(window=0)
    with pytest.raises(ValueError):
        FetchTimeEstimator(margin=0.5)


def test_stall_meter_records_late_beats_from_when_they_were_due() -> None:
    clock = FakeClock(50.0)
    meter = StallMeter(clock)
    meter.start()
    clock.advance(BEAT + MIN_STALL / 2)  # late by less than MIN_STALL: jitter
    meter._beat()
    assert meter.log.count == 0
    due = clock() + BEAT
    clock.advance(BEAT + 0.3)
    meter._beat()
    assert meter.log.count == 1
    assert meter.log.overlap(0.0, 1e9) == pytest.approx(0.3)
    assert meter.log.overlap(due, due + 0.3) == pytest.approx(0.3)
    meter.stop()
    clock.advance(10.0)
    meter._beat()  # a beat already queued when stopped records nothing
    assert meter.log.count == 1


def test_stall_meter_leaves_congestion_out_and_records_nothing_it_cannot_tell(
    tmp_path: Path,
) -> None:
    # The kernel's counters, as /proc/thread-self/schedstat gives them: CPU time, time
    # waited for a CPU (nanoseconds), time slices.
    schedstat = tmp_path / "schedstat"
    schedstat.write_text("1000 0 1\n")
    clock = FakeClock(50.0)
    meter = StallMeter(clock, schedstat=str(schedstat))
    meter.start()
    assert meter.knows_causes
    clock.advance(BEAT + 0.3)
    schedstat.write_text("2000 200000000 2\n")  # waited 200 ms of the 300 ms stall
    meter._beat()
    assert meter.congested == 1 and meter.log.count == 0
    clock.advance(BEAT + 0.3)
    schedstat.write_text("3000 201000000 3\n")  # waited 1 ms: its own pause
    meter._beat()
    assert meter.congested == 1 and meter.log.count == 1
    meter.stop()
    if sys.platform == "linux":
        real = StallMeter(clock)
        real.start()
        assert real.knows_causes
        real.stop()
    blind = StallMeter(clock, schedstat=str(tmp_path / "missing"))
    blind.start()
    assert not blind.knows_causes
    blind.stalled(1.0, 1.3, cpu_wait=0.0)
    assert blind.log.count == 0 and blind.congested == 0
    blind.stop()


def test_stall_meter_without_an_event_loop_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scrapy_frontier.scheduler import stalls

    def no_loop(delay: float, func: Any) -> Any:
        raise RuntimeError("is_asyncio_available() called without an installed reactor")

    monkeypatch.setattr(stalls, "call_later", no_loop)
    meter = StallMeter(FakeClock(1.0))
    meter.start()  # a scheduler opened by hand, outside a crawl: no error
    assert meter.log.count == 0
    meter.stop()


def _rest_after(sched: Any, clock: FakeClock, request: Request) -> float:
    """Seconds until the host's next request is handed out (0.01 s steps)."""
    waited = 0.0
    while sched.next_request() is None:
        clock.advance(0.01)
        waited += 0.01
        assert waited < 60
    return waited


def test_scheduler_discounts_its_own_stalls() -> None:
    sched2, clock2, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10,
                                                "FRONTIER_STALL_DISCOUNT": True})
    for i in range(4):
        sched2.enqueue_request(Request(f"http://b.example/{i}"))
    req = sched2.next_request()
    assert req is not None
    sched2.fetch_sent(req)
    clock2.advance(0.02)
    sched2.fetch_finished(req)  # clean 20 ms: the host's recent time
    while (req := sched2.next_request()) is None:
        clock2.advance(0.01)
    # A fetch whose answer waited 300 ms unread in a stall the scheduler saw.
    sched2.fetch_sent(req)
    clock2.advance(0.01)
    sched2.timing.stalls.log.add(clock2(), clock2() + 0.3)
    clock2.advance(0.304)
    sched2.fetch_finished(req)
    # Rest by 1.5 x 20 ms (the recent clean time), not by 314 ms.
    waited = 0.0
    while sched2.next_request() is None:
        clock2.advance(0.01)
        waited += 0.01
    assert waited == pytest.approx(0.3, abs=0.015)
    sched2.publish_stats()
    stats = sched2.stats
    assert stats.get_value("frontier/fetch/stalled") == 1
    assert stats.get_value("frontier/fetch/discounted") == 1


def test_stall_discount_can_be_turned_off() -> None:
    sched, clock, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10,
                                      "FRONTIER_STALL_DISCOUNT": False})
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    sched.fetch_sent(req)
    clock.advance(0.02)
    sched.fetch_finished(req)
    while (req := sched.next_request()) is None:
        clock.advance(0.01)
    sched.fetch_sent(req)
    sched.timing.stalls.log.add(clock(), clock() + 0.3)
    clock.advance(0.31)
    sched.fetch_finished(req)
    waited = 0.0
    while sched.next_request() is None:
        clock.advance(0.01)
        waited += 0.01
    assert waited == pytest.approx(3.1, abs=0.015)


def test_a_stall_in_the_middle_of_a_fetch_is_not_discounted() -> None:
    sched, clock, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10})
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    sched.fetch_sent(req)
    clock.advance(0.02)
    sched.fetch_finished(req)
    while (req := sched.next_request()) is None:
        clock.advance(0.01)
    # The server works 400 ms; the loop stalls 100 ms early on; the answer is read on time.
    sched.fetch_sent(req)
    sched.timing.stalls.log.add(clock() + 0.05, clock() + 0.15)
    clock.advance(0.4)
    sched.fetch_finished(req)
    waited = 0.0
    while sched.next_request() is None:
        clock.advance(0.01)
        waited += 0.01
    assert waited == pytest.approx(4.0, abs=0.015)


def test_the_start_is_never_moved_after_the_send() -> None:
    """Scrapy's ``download_latency`` runs from its handler's start to when the headers came
    in; the scheduler's headers_received handler runs later, after whatever else the loop
    had to do (a busy machine). ``now - download_latency`` is then later than the request
    went out, so it must not become the fetch's start: the fetch below took 100 ms from its
    send, and rests 1 s, not the 500 ms that start would give."""
    sched, clock, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10})
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    sched.fetch_sent(req)
    clock.advance(0.1)
    req.meta["download_latency"] = 0.05  # measured 50 ms before this handler runs
    sched._on_headers_received({}, None, req, None)
    sched.fetch_finished(req)
    assert _rest_after(sched, clock, req) == pytest.approx(1.0, abs=0.015)

