"""Pause and resume through JOBDIR, and the errors for state that cannot be used."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import pytest
from scrapy import Request

from scrapy_frontier import jobdir
from scrapy_frontier.jobdir import FrontierStateError
from scrapy_frontier.testweb import ServerProcess, audit, read_log
from scrapy_frontier.testweb.crawl import FRONTIER_ADDON, run_crawl
from tests.test_scheduler import finish, make_scheduler


def test_close_saves_queue_in_flight_and_rests_then_open_restores(tmp_path: Path) -> None:
    job = str(tmp_path / "job")
    sched, clock, _ = make_scheduler({"JOBDIR": job})
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.example/{i}", priority=i))
    sched.enqueue_request(Request("http://b.example/0"))
    first = sched.next_request()
    second = sched.next_request()
    assert first is not None and second is not None
    finish(sched, clock, first, 0.5)  # a.example now rests 5 s
    sched.close("shutdown")  # second is still in flight: saved too
    assert jobdir.state_path(job).exists()
    assert sched.crawler.stats.get_value("frontier/saved") == 3

    again, clock2, crawler2 = make_scheduler({"JOBDIR": job})
    assert crawler2.stats.get_value("frontier/restored") == 3
    assert len(again) == 3
    urls = set()
    while True:
        req = again.next_request()
        if req is None:
            break
        urls.add(req.url)
    # a.example's rest survived the restart: only b.example's request is ready.
    assert urls == {second.url}
    clock2.advance(5.0)
    nxt = again.next_request()
    assert nxt is not None and nxt.url.startswith("http://a.example/")


def test_unserializable_request_is_reported_not_silently_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = str(tmp_path / "job")
    sched, _, crawler = make_scheduler({"JOBDIR": job})
    sched.enqueue_request(Request("http://a.example/ok"))
    sched.enqueue_request(Request("http://a.example/lambda", callback=lambda r: None))
    with caplog.at_level(logging.ERROR, logger="scrapy_frontier"):
        sched.close("shutdown")
    assert crawler.stats.get_value("frontier/saved") == 1
    assert crawler.stats.get_value("frontier/unserializable") == 1
    assert any("http://a.example/lambda" in r.getMessage() for r in caplog.records)


def test_corrupt_state_is_a_clear_error_naming_the_file(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    path = jobdir.state_path(str(job))
    path.write_bytes(b"\x80\x05garbage")
    with pytest.raises(FrontierStateError, match="corrupt or truncated") as info:
        make_scheduler({"JOBDIR": str(job)})
    assert str(path) in str(info.value)
    assert path.read_bytes() == b"\x80\x05garbage"  # never a silent reset


def test_truncated_state_is_detected(tmp_path: Path) -> None:
    job = str(tmp_path / "job")
    sched, _, _ = make_scheduler({"JOBDIR": job})
    for i in range(50):
        sched.enqueue_request(Request(f"http://a.example/{i}"))
    sched.close("shutdown")
    path = jobdir.state_path(job)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(FrontierStateError, match="truncated"):
        make_scheduler({"JOBDIR": job})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"format": "other"}, "not a scrapy-frontier queue file"),
        (
            {"format": jobdir.FORMAT, "version": 99, "spider": "t", "requests": [], "rests": {}},
            "incompatible",
        ),
        (
            {"format": jobdir.FORMAT, "version": 1, "spider": "x", "requests": [], "rests": {}},
            "belongs to spider 'x'",
        ),
    ],
)
def test_foreign_states_are_refused(tmp_path: Path, payload: dict, message: str) -> None:
    job = tmp_path / "job"
    job.mkdir()
    jobdir.state_path(str(job)).write_bytes(pickle.dumps(payload))
    with pytest.raises(FrontierStateError, match=message):
        make_scheduler({"JOBDIR": str(job)})


def test_save_failure_is_reported_with_every_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = str(tmp_path / "job")
    sched, _, crawler = make_scheduler({"JOBDIR": job})
    # A directory where the state file should go makes the save fail, as root too.
    jobdir.state_path(job).mkdir()
    sched.enqueue_request(Request("http://a.example/0"))
    sched.enqueue_request(Request("http://b.example/0"))
    with caplog.at_level(logging.ERROR, logger="scrapy_frontier"):
        sched.close("shutdown")
    assert crawler.stats.get_value("frontier/save_failed") == 2
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "could not save" in text and "http://b.example/0" in text


@pytest.mark.crawl
def test_clean_pause_and_resume_loses_nothing_repeats_nothing(tmp_path: Path) -> None:
    web_args = ["--shape", "skewed", "--hosts", "6", "--largest", "25",
                "--latency", "0.005", "0.02"]
    settings = {
        "ADDONS": FRONTIER_ADDON,
        "FRONTIER_MIN_DELAY": 0.0,
        "JOBDIR": str(tmp_path / "job"),
    }
    log = tmp_path / "server.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        first = run_crawl(web.start_urls, {**settings, "CLOSESPIDER_PAGECOUNT": 15},
                          workdir=tmp_path / "run1")
        assert first.returncode == 0, first.output[-3000:]
        assert first.stats["finish_reason"] == "closespider_pagecount"
        assert first.stats["frontier/saved"] > 0
        fetched_first = len(read_log(log))
        second = run_crawl(web.start_urls, settings, workdir=tmp_path / "run2")
        assert second.returncode == 0, second.output[-3000:]
    assert second.stats["frontier/restored"] == first.stats["frontier/saved"]
    entries = read_log(log)
    assert fetched_first < len(entries)
    report = audit(entries, expected=web.expected, min_delay=0.0)
    assert report.coverage == 1.0, report.summary()
    assert report.duplicates == 0, report.summary()
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
