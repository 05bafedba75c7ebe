"""Real crawls of the test web that are paused, or killed with SIGKILL, and resumed."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl

pytestmark = pytest.mark.crawl

WEB = ["--shape", "skewed", "--hosts", "6", "--largest", "40", "--latency", "0.005", "0.02"]
IN_FLIGHT = re.compile(r"(\d+) requests were in flight when the crawl stopped")


def settings_for(tmp_path: Path, recrawl: str = "due") -> dict[str, object]:
    return {
        "ADDONS": FRONTIER_ADDON,
        "FRONTIER_MIN_DELAY": 0.0,
        "JOBDIR": str(tmp_path / "job"),
        "FRONTIER_RECRAWL": recrawl,
    }


@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_clean_pause_and_resume_loses_nothing_repeats_nothing(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "server.jsonl"
    with ServerProcess(WEB, log_path=str(log)) as web:
        first = run_crawl(web.start_urls, {**settings, "CLOSESPIDER_PAGECOUNT": 20},
                          workdir=tmp_path / "run1")
        assert first.returncode == 0, first.output[-3000:]
        assert first.stats["finish_reason"] == "closespider_pagecount"
        assert first.stats["frontier/queued"] > 0
        fetched_first = len(read_log(log))
        second = run_crawl(web.start_urls, settings, workdir=tmp_path / "run2")
        assert second.returncode == 0, second.output[-3000:]
    assert second.stats["frontier/restored"] >= first.stats["frontier/queued"]
    assert second.stats["frontier/recovered_leases"] == 0
    entries = read_log(log)
    assert fetched_first < len(entries)
    report = audit(entries, expected=web.expected, min_delay=0.0)
    assert report.coverage == 1.0, report.summary()
    assert report.duplicates == 0, report.summary()
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()


# Seed 1 on every leg; the others (10 s or more each) on the newest leg only. The page
# history ('due', the default) and no history ('off') must repeat as little.
@pytest.mark.parametrize(("seed", "recrawl"), [
    (1, "due"), pytest.param(2, "due", marks=pytest.mark.slow),
    pytest.param(3, "off", marks=pytest.mark.slow), pytest.param(1, "off", marks=pytest.mark.slow)])
def test_sigkill_at_random_points_loses_nothing(tmp_path: Path, seed: int, recrawl: str) -> None:
    rng = random.Random(seed)
    settings = settings_for(tmp_path, recrawl)
    log = tmp_path / "server.jsonl"
    in_flight_at_kills = 0
    kills = 0
    with ServerProcess(WEB, log_path=str(log)) as web:
        final = None
        for attempt in range(6):  # bounded: at most 2 kills, then run to the end
            kill_after = rng.uniform(1.5, 4.0) if attempt < 2 else None
            result = run_crawl(web.start_urls, settings, workdir=tmp_path / f"run{attempt}",
                               kill_after=kill_after, timeout=240)
            in_flight_at_kills += sum(int(n) for n in IN_FLIGHT.findall(result.output))
            if result.returncode == -9:
                kills += 1
                continue
            assert result.returncode == 0, result.output[-3000:]
            final = result
            break
        assert final is not None
    assert kills >= 1, "the crawl finished before any kill: make the web bigger"
    entries = read_log(log)
    report = audit(entries, expected=web.expected, min_delay=0.0)
    # Every URL discovered before a kill was eventually fetched.
    assert report.coverage == 1.0, (report.summary(), sorted(web.expected - {
        (e.host, e.path) for e in entries if e.status < 400})[:10])
    # Repeats are at most the fetches that were in flight at the kills.
    assert report.duplicates <= in_flight_at_kills, (report.summary(), in_flight_at_kills)
    # A restart does not burst a host: rests survive the kill.
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()


@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
@pytest.mark.parametrize("recrawl", ["due", "off"])
def test_a_full_disk_stops_the_crawl_promptly_and_a_rerun_loses_nothing(
        tmp_path: Path, recrawl: str) -> None:
    """JOBDIR fills up mid-crawl: the crawl stops cleanly at the first failed write; once
    there is room again, the same command resumes with full coverage, repeating no more
    than the requests that were in flight, with or without a page history."""
    settings = settings_for(tmp_path, recrawl)
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "8", "--pages", "60", "--latency", "0.005", "0.01",
                "--seed", "8"]
    with ServerProcess(web_args, log_path=str(log)) as web:
        full = run_crawl(web.start_urls, settings, workdir=tmp_path / "run1",
                         file_size_limit=48_000)
        assert full.returncode == 0, full.output[-3000:]
        assert full.stats["finish_reason"] == "frontier_store_error", full.stats
        errors = full.output.count(" ERROR: ")
        fetched_first = len(read_log(log))
        again = run_crawl(web.start_urls, settings, workdir=tmp_path / "run2")
        assert again.returncode == 0, again.output[-3000:]
    assert again.stats["finish_reason"] == "finished", again.output[-3000:]
    assert fetched_first < len(web.expected)  # the full disk did cut the first run short
    assert errors <= 10, full.output[-3000:]  # a clean stop, not a flood of write errors
    entries = read_log(log)
    report = audit(entries, expected=web.expected, min_delay=0.0)
    print(report.summary(), "in flight:", again.stats.get("frontier/recovered_leases"))
    assert report.coverage == 1.0, report.summary()
    # Repeats: the requests in flight at the stop, as README says.
    assert report.duplicates <= again.stats.get("frontier/recovered_leases", 0), \
        report.summary()
    assert report.overlaps == 0, report.summary()
