"""Feed exports across a kill and a resume: every line valid, no item missing, one CSV header,
and a warning for the feeds that cannot be kept valid (real crawls of the test web)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, CrawlResult, run_crawl
from frontier_testweb.kills import page_of

pytestmark = pytest.mark.crawl

WEB = ["--shape", "wide", "--hosts", "4", "--pages", "15", "--latency", "0.005", "0.01",
       "--seed", "7"]


def _settings(tmp_path: Path, feed: Path, fmt: str, **extra: Any) -> dict[str, Any]:
    return {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.1, "JOBDIR": str(tmp_path / "job"),
            "FEEDS": {str(feed): {"format": fmt, **extra}}}


def _pages(log: Path) -> set[tuple[str, str]]:
    return {(e.host, e.path) for e in read_log(log) if e.status == 200}


def _killed_then_resumed(tmp_path: Path, feed: Path, fmt: str, *,
                         after_kill: Callable[[], None]) -> tuple[CrawlResult, Path]:
    """A crawl with a feed, killed once, ``after_kill`` run, then the same crawl to its end:
    (the second run, the server's log)."""
    settings = _settings(tmp_path, feed, fmt)
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        first = run_crawl(web.start_urls, settings, workdir=tmp_path / "run1", items=True,
                          self_kill={"after": 0.8, "report": str(tmp_path / "kill.json")})
        assert first.returncode == -9, first.output[-3000:]
        assert feed.exists() and feed.stat().st_size > 0  # the first run's items are there
        after_kill()
        second = run_crawl(web.start_urls, settings, workdir=tmp_path / "run2", items=True)
    assert second.returncode == 0, second.output[-3000:]
    return second, log


def test_a_line_cut_off_by_a_kill_is_moved_aside_and_the_feed_stays_valid(
        tmp_path: Path) -> None:
    feed = tmp_path / "items.jsonl"
    # The kill came as the exporter's buffer was being written out: half an item.
    cut = b'{"url": "http://127.0.0.9/p/1", "sta'

    def cut_off() -> None:
        with feed.open("ab") as f:
            f.write(cut)

    second, log = _killed_then_resumed(tmp_path, feed, "jsonlines", after_kill=cut_off)
    assert "ended in a line cut off by a kill" in second.output
    aside = list(tmp_path.glob("items.jsonl.cut-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == cut
    items = [json.loads(line) for line in feed.read_bytes().splitlines()]
    assert {page_of(item["url"]) for item in items} == _pages(log)


def test_a_resumed_csv_feed_has_one_header_and_every_page(tmp_path: Path) -> None:
    feed = tmp_path / "items.csv"
    _, log = _killed_then_resumed(tmp_path, feed, "csv", after_kill=lambda: None)
    rows = list(csv.reader(feed.read_text().splitlines()))
    assert rows[0] == ["url", "status", "links"]
    assert rows.count(rows[0]) == 1
    assert {page_of(row[0]) for row in rows[1:]} == _pages(log)


@pytest.mark.parametrize(("fmt", "options", "warning"), [
    ("json", {}, "a kill leaves it unterminated"),
    ("jsonlines", {"overwrite": True}, "is overwritten at each run"),
    ("jsonlines", {"postprocessing": ["scrapy.extensions.postprocessing.GzipPlugin"]},
     "is written only when it closes"),
])
def test_feeds_a_kill_would_spoil_are_named_at_start(
        tmp_path: Path, fmt: str, options: dict[str, Any], warning: str) -> None:
    feed = tmp_path / "items.out"
    with ServerProcess(["--shape", "wide", "--hosts", "1", "--pages", "2"]) as web:
        resumable = run_crawl(web.start_urls, _settings(tmp_path, feed, fmt, **options),
                              workdir=tmp_path / "run1", items=True)
        settings = _settings(tmp_path, feed, fmt, **options)
        del settings["JOBDIR"]  # memory: nothing is resumed, nothing to warn about
        memory = run_crawl(web.start_urls, settings, workdir=tmp_path / "run2", items=True)
    assert resumable.returncode == 0 and memory.returncode == 0, resumable.output[-3000:]
    assert warning in resumable.output
    assert warning not in memory.output
