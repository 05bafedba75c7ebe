"""A crawl that stops on a frontier failure exits non-zero, so that cron and CI see it.

Scrapy exits 0 after any crawl that closed, whatever its finish reason. The frontier
tells the Scrapy command running the crawl to exit 1 when it stops the crawl (the finish
reasons ``frontier_store_error``, ``frontier_redis_error``, ``frontier_history_error``) or
cannot write its state at close. The case here is a real ``scrapy crawl``: rows queued in
a JOBDIR name a callback the spider no longer has.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

from scrapy.commands import ScrapyCommand
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from scrapy_frontier.errors import RedisFrontierGone, SeenStoreError
from scrapy_frontier.scheduler.engine import fail_command, running_command
from scrapy_frontier.scheduler.run_state import RunState
from tests.scheduler.scrapy_project import make_project, scrapy_crawl

#: Queues three pages with callback CALLBACK, then (with CLOSESPIDER_PAGECOUNT=1) stops.
SPIDER = '''
import scrapy

class Renamed(scrapy.Spider):
    name = "renamed"
    start_urls = ["data:,start"]

    def parse(self, response):
        for i in range(3):
            yield scrapy.Request(f"data:,page{i}", callback=self.CALLBACK)

    def CALLBACK(self, response):
        yield {"page": response.url}
'''


def _spider(project: Path, callback: str) -> None:
    (project / "proj" / "spiders" / "renamed.py").write_text(
        SPIDER.replace("CALLBACK", callback))


def test_a_crawl_stopped_by_a_store_error_exits_1(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", {})
    jobdir = f"JOBDIR={tmp_path / 'job'}"
    _spider(project, "parse_page")
    first = scrapy_crawl(project, "renamed", jobdir, "CLOSESPIDER_PAGECOUNT=1")
    assert first.returncode == 0, first.output[-3000:]
    assert "with 3 requests still queued" in first.output, first.output[-3000:]

    _spider(project, "parse_item")  # the callback renamed while its rows were queued
    failed = scrapy_crawl(project, "renamed", jobdir)
    assert failed.returncode == 1, failed.output[-3000:]
    assert failed.finish_reason == "frontier_store_error", failed.output[-3000:]
    assert len(failed.errors) == 1 and "'parse_page'" in failed.errors[0], failed.output[-3000:]
    assert "Traceback" not in failed.output

    _spider(project, "parse_page")  # the code put back: the rows were kept, and are fetched
    resumed = scrapy_crawl(project, "renamed", jobdir)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert resumed.finish_reason == "finished", resumed.output[-3000:]
    assert "'item_scraped_count': 3" in resumed.output, resumed.output[-3000:]


class _Command(ScrapyCommand):
    def short_desc(self) -> str:
        return "a command that asks for its exit code"

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        self.found = running_command()
        self.told = fail_command()


def test_the_exit_code_goes_to_the_command_on_the_stack() -> None:
    command = _Command()
    command.run([], argparse.Namespace())
    assert command.found is command and command.told is True
    assert command.exitcode == 1

    command.exitcode = 3  # a higher code the command set stays
    command.run([], argparse.Namespace())
    assert command.exitcode == 3


def test_without_a_command_nothing_is_told() -> None:
    assert running_command() is None
    assert fail_command() is False


def test_every_failure_of_the_run_tells_the_command() -> None:
    """Stopping on a state error, a driver's failure, a write that fails at close."""
    told: list[str] = []
    engine = SimpleNamespace(fail_command=lambda: told.append("exit 1") or True,
                             close_spider=lambda reason: told.append(reason))
    stats = MemoryStatsCollector(get_crawler())
    run = RunState(engine, stats)
    run.state_failed(SeenStoreError("seen.sqlite", "cannot be written", "Free some space."))
    run.state_failed(SeenStoreError("seen.sqlite", "cannot be written", "Again."))  # once
    assert told == ["exit 1", "frontier_store_error"]

    told.clear()
    RunState(engine, stats).fail("frontier_redis_error", RedisFrontierGone("keys gone"))
    assert told == ["exit 1", "frontier_redis_error"]

    told.clear()
    RunState(engine, stats).close_failed(SeenStoreError("seen.sqlite", "not written", "Retry."))
    assert told == ["exit 1"]
    assert stats.get_value("frontier/store/errors") == 3
