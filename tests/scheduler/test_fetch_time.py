"""Fetch times as the server saw them: the rule, the stall log, and the scheduler's use."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request

from scrapy_frontier.core import FakeClock
from scrapy_frontier.core.fetch_time import StallLog, fetch_seconds
from scrapy_frontier.reactor.stalls import BEAT, MIN_STALL, StallMeter
from tests.scheduler.test_scheduler import make_scheduler


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
    assert log.recent(1.6, 2.05) == [(2.0, 2.1)]
    for i in range(3):
        log.add(10.0 + i, 10.5 + i)
    assert log.overlap(0.0, 5.0) == 0.0  # the oldest spans were dropped (keep=3)


def test_the_fetch_ends_where_the_complete_answer_is_known_to_have_come_in() -> None:
    # Nothing known but the report: the whole measure.
    assert fetch_seconds(10.0, 10.314) == pytest.approx(0.314)
    # The last bytes came in at 10.014 and waited 300 ms unread: left out.
    assert fetch_seconds(10.0, 10.314, 10.014) == pytest.approx(0.014)
    # A "complete" moment after the report is not believed: the report is the end.
    assert fetch_seconds(10.0, 10.314, 10.5) == pytest.approx(0.314)
    # Never negative: a report or an arrival before the start took no time.
    assert fetch_seconds(10.0, 9.9) == 0.0
    assert fetch_seconds(10.0, 10.3, 9.9) == 0.0


def test_the_slow_server_of_issue_36_is_timed_whole() -> None:
    """The server took 9.16 s; a 4.8 s stall of the crawler ended as the answer was read,
    4.8 s that were the server's own. The stall log knows the stall; the rule does not take
    it off: without the kernel's stamp the fetch runs to its report, with it to the arrival
    of the last bytes, both at least 9.16 s."""
    sent, server_in, server_out = 100.0, 100.001, 109.161
    arrival, read = 109.1612, 109.17
    log = StallLog()
    log.add(read - 4.8 - 0.005, read - 0.005)
    assert log.overlap(sent, read) == pytest.approx(4.8)  # the stall that held the read
    server = server_out - server_in
    assert fetch_seconds(sent, read) >= server
    assert fetch_seconds(sent, read, arrival) >= server
    assert fetch_seconds(sent, read, arrival) == pytest.approx(arrival - sent)


def _timeline(rng: Any) -> dict[str, Any]:
    """One fetch on a made-up timeline: the server's time, when its answer's last bytes came
    in, the crawler's stalls, when it read them and when it learnt the fetch ended. Half the
    time a stall covers the server's end (the case of issue 36), at a random point in it."""
    sent = rng.uniform(0.0, 100.0)
    server_in = sent + rng.uniform(0.0, 0.01)
    server = rng.choice([rng.uniform(0.0, 0.05), rng.uniform(0.0, 2.0), rng.uniform(0.0, 20.0)])
    server_out = server_in + server
    arrival = server_out + rng.uniform(0.0, 0.005)
    stalls: list[tuple[float, float]] = []
    if rng.random() < 0.5:  # a stall over the server's end: it began before or after the send
        a = server_out - rng.uniform(0.0, 1.2) * (server_out - sent + 0.01)
        stalls.append((a, arrival + rng.uniform(0.0, 5.0)))
    for _ in range(rng.randrange(3)):  # other stalls, anywhere
        a = sent + rng.uniform(-1.0, server + 2.0)
        stalls.append((a, a + rng.uniform(0.0, 3.0)))
    stalls.sort()
    # The loop reads when it is not stalled, then reports after its work (more stalls).
    read = arrival + rng.uniform(0.0, 0.002)
    for a, b in stalls:
        if a <= read < b:
            read = b + rng.uniform(0.0, 0.002)
    reported = read + rng.uniform(0.0, 0.05)
    for a, b in stalls:
        if a <= reported < b:
            reported = b + rng.uniform(0.0, 0.002)
    return {"sent": sent, "server_in": server_in, "server": server, "server_out": server_out,
            "arrival": arrival, "read": read, "reported": reported, "stalls": stalls}


@pytest.mark.parametrize("known", ["nothing", "the read", "the arrival"])
def test_no_timeline_gives_a_fetch_time_below_the_servers(known: str) -> None:
    """The property the README promises, over 20,000 made-up timelines: whatever stalls
    came, and whatever the crawler knows of the answer's end (nothing but the report, the
    read of its last bytes, or the kernel's arrival stamp of them), the fetch time is never
    below the server's own, and a rest of ten times it from the end the scheduler is given
    keeps the rule (next contact >= server's end + 10 x server's time)."""
    import random

    rng = random.Random(36)
    factor = 10.0
    for _ in range(20_000):
        t = _timeline(rng)
        log = StallLog()
        for a, b in t["stalls"]:
            log.add(a, b)
        complete_at = {"nothing": None, "the read": t["read"], "the arrival": t["arrival"]}[known]
        # The kernel's send is between the crawler's start and the server's receipt.
        start = t["sent"] if known == "nothing" else rng.uniform(t["sent"], t["server_in"])
        seconds = fetch_seconds(start, t["reported"], complete_at)
        assert seconds >= t["server"], t
        rest_from = t["reported"] if complete_at is None else complete_at
        assert rest_from + factor * seconds >= t["server_out"] + factor * t["server"], t
        # And the time left out is only the answer's wait after it was complete.
        assert t["reported"] - start - seconds <= t["reported"] - t["arrival"] + 1e-9


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
    from scrapy_frontier.reactor import stalls

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


@pytest.mark.parametrize("record_stalls", [True, False])
def test_a_stall_that_held_the_read_is_not_taken_off(
    record_stalls: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    """Without the kernel's times nothing says when the answer came in: a stall that held
    the read may have been the server still sending (issue 36), so the fetch runs to its
    report, with FRONTIER_STALL_DISCOUNT (which now only records stalls, and says so) or
    without it."""
    sched, clock, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10,
                                      "FRONTIER_STALL_DISCOUNT": record_stalls})
    assert ("no longer shortens fetch times" in caplog.text) is record_stalls
    for i in range(3):
        sched.enqueue_request(Request(f"http://b.example/{i}"))
    req = sched.next_request()
    assert req is not None
    sched.fetches.sent(req)
    clock.advance(0.02)
    sched.fetches.completed(req)  # a clean 20 ms fetch first (the former rule's history)
    while (req := sched.next_request()) is None:
        clock.advance(0.01)
    # The read waited 300 ms behind a stall the scheduler saw.
    sched.fetches.sent(req)
    clock.advance(0.01)
    sched.fetches.timing.stalls.log.add(clock(), clock() + 0.3)
    clock.advance(0.304)
    sched.fetches.completed(req)
    assert _rest_after(sched, clock, req) == pytest.approx(3.14, abs=0.015)


def test_a_stall_in_the_middle_of_a_fetch_is_not_discounted() -> None:
    sched, clock, _ = make_scheduler({"FRONTIER_DELAY_FACTOR": 10})
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    req = sched.next_request()
    assert req is not None
    sched.fetches.sent(req)
    clock.advance(0.02)
    sched.fetches.completed(req)
    while (req := sched.next_request()) is None:
        clock.advance(0.01)
    # The server works 400 ms; the loop stalls 100 ms early on; the answer is read on time.
    sched.fetches.sent(req)
    sched.fetches.timing.stalls.log.add(clock() + 0.05, clock() + 0.15)
    clock.advance(0.4)
    sched.fetches.completed(req)
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
    sched.fetches.sent(req)
    clock.advance(0.1)
    req.meta["download_latency"] = 0.05  # measured 50 ms before this handler runs
    sched.fetches._headers_received({}, None, req, None)
    sched.fetches.completed(req)
    assert _rest_after(sched, clock, req) == pytest.approx(1.0, abs=0.015)



SLOW_SECONDS = 0.25


@pytest.mark.crawl
@pytest.mark.parametrize("timing", ["stall-discount", "tcp"])
def test_a_slow_answer_sent_while_the_spider_blocks_is_timed_whole(
    tmp_path: Path, timing: str,
) -> None:
    """Issue 36: a server that took 9.16 s, its answer sent while a callback blocked the
    reactor, rested 0.47 x the rule: the stall was subtracted from the fetch though the
    server was still working through most of it. Here ``/slow`` takes the server 250 ms;
    100 ms in, the callback of another page blocks the reactor until the answer was sent
    whole, and 200 ms more (tests/scheduler/slow_answer_site.py: the two sides wait for each other).
    The fetch time must not be below the server's own, and the host's next request must
    come 10 x that after the answer ended."""
    import json
    import re
    import subprocess

    from frontier_testweb.crawl import FRONTIER_ADDON
    from tests.scheduler.slow_answer_site import SlowAnswerSite

    factor = 10.0
    variant = ({"FRONTIER_TCP_TIMING": False, "FRONTIER_STALL_DISCOUNT": True}
               if timing == "stall-discount" else {})
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0,
                "FRONTIER_DELAY_FACTOR": factor, "LOG_LEVEL": "DEBUG",
                "ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False,
                "COOKIES_ENABLED": False, "RETRY_ENABLED": False, **variant}
    with SlowAnswerSite(tmp_path, slow=SLOW_SECONDS, lead=0.1) as site:
        done = subprocess.run(
            [sys.executable, "-m", "tests.scheduler.slow_answer_site", json.dumps(settings),
             str(tmp_path), site.url(0, "/fast"), site.url(1, "/trigger")],
            capture_output=True, text=True, timeout=120)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-3000:]
        slow, after = site.served("/slow"), site.served("/after")
    block_start, block_end = json.loads((tmp_path / "block.json").read_text())
    # The stall began while the server was working and lasted past the answer's end.
    assert slow.received < block_start < slow.sending < slow.ended < block_end
    took = [float(t) for t in re.findall(
        rf"host '{re.escape(slow.host)}': fetch took ([0-9.]+) s", output)]
    assert len(took) == 3, output[-3000:]  # /fast, /slow, /after: one at a time
    gap = after.received - slow.sending
    print(f"{timing}: server {slow.seconds:.4f} s ({slow.ended - slow.received:.4f} s to its "
          f"write's return), fetch time {took[1]:.4f} s ({took[1] / slow.seconds:.2f} of it), "
          f"gap {gap:.3f} s ({gap / (factor * slow.seconds):.2f} of the rule), stall "
          f"{block_start - slow.received:.3f}-{block_end - slow.received:.3f} s into it")
    tolerance = 0.0005  # the clocks' granularity and the crawler's conversions of them
    assert took[1] >= slow.seconds - tolerance
    assert gap >= factor * slow.seconds - tolerance
