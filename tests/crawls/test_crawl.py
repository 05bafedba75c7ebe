"""Real Scrapy crawls of the loopback test web, audited from the server's own log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.audit import rest_report
from frontier_testweb.crawl import FRONTIER_ADDON, CrawlResult, run_crawl

pytestmark = pytest.mark.crawl

SKEWED = ["--shape", "skewed", "--hosts", "8", "--largest", "30", "--latency", "0.005", "0.02"]


def crawl_web(
    tmp_path: Path, web_args: list[str], settings: dict[str, Any], *, timeout: float = 240
) -> tuple[CrawlResult, Any, ServerProcess]:
    log = tmp_path / "server.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        result = run_crawl(
            web.start_urls,
            settings,
            allowed_domains=web.allowed_domains,
            timeout=timeout,
            workdir=tmp_path / "crawl",
        )
    assert result.returncode == 0, result.output[-3000:]
    report = audit(
        read_log(log),
        expected=web.expected,
        factor=settings.get("FRONTIER_DELAY_FACTOR", 10.0),
        min_delay=settings.get("FRONTIER_MIN_DELAY", 1.0),
        max_delay=settings.get("FRONTIER_MAX_DELAY", 60.0),
        concurrency=settings.get("CONCURRENT_REQUESTS", 16),
    )
    return result, report, web


@pytest.mark.slow  # about 3 minutes: it crawls the documentation trees found here too
def test_addon_crawl_is_polite_complete_and_without_duplicates(tmp_path: Path) -> None:
    # --docs adds up to two hosts serving real HTML documentation trees found on
    # this machine (none on a bare one): audited for politeness, not coverage.
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0}
    result, report, web = crawl_web(tmp_path, [*SKEWED, "--docs"], settings)
    assert report.overlaps == 0, report.summary()
    assert report.short_gaps == 0, report.summary()
    assert report.coverage == 1.0, report.summary()
    assert report.duplicates == 0, report.summary()
    stats = result.stats
    doc_fetches = sum(1 for e in read_log(tmp_path / "server.jsonl") if e.path != "/robots.txt"
                      and (e.host, e.path) not in web.expected)
    assert stats["frontier/dequeued"] == stats["frontier/completed"]
    assert stats["frontier/dequeued"] == len(web.expected) + doc_fetches
    assert stats.get("frontier/end_reports/signals") is None
    assert stats.get("frontier/lease_expired") is None
    assert stats["frontier/queued"] == 0


def test_scheduler_setting_alone_is_polite_and_warns_once(tmp_path: Path) -> None:
    settings = {"SCHEDULER": "scrapy_frontier.FrontierScheduler", "FRONTIER_MIN_DELAY": 0.0}
    result, report, web = crawl_web(tmp_path, SKEWED, settings)
    assert report.overlaps == 0, report.summary()
    assert report.short_gaps == 0, report.summary()
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert result.stats["frontier/end_reports/signals"] == 1
    assert result.output.count("ADDONS = {'scrapy_frontier.Addon': 0}") == 1
    assert result.stats.get("frontier/lease_expired") is None


def test_robots_txt_and_max_delay_clamp(tmp_path: Path) -> None:
    # robots.txt requests bypass the scheduler and must not release a host;
    # the 30 ms max delay caps the 10 x rule for the slower hosts.
    settings = {
        "ADDONS": FRONTIER_ADDON,
        "ROBOTSTXT_OBEY": True,
        "FRONTIER_MIN_DELAY": 0.0,
        "FRONTIER_MAX_DELAY": 0.03,
    }
    result, report, _ = crawl_web(tmp_path, SKEWED, settings)
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    assert report.coverage == 1.0, report.summary()
    assert result.stats["robotstxt/request_count"] >= 8
    assert result.stats.get("frontier/lease_expired") is None


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis"])
def test_robots_txt_sent_again_after_a_500_rests_like_any_page(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    # Every robots.txt answers 500 twice: RetryMiddleware sends it again at once unless the
    # frontier makes it wait, since robots.txt fetches never pass through the scheduler.
    web = ["--shape", "wide", "--hosts", "3", "--pages", "3", "--latency", "0.005", "0.01",
           "--robots-failures", "2"]
    settings: dict[str, Any] = {"ADDONS": FRONTIER_ADDON, "ROBOTSTXT_OBEY": True,
                                "FRONTIER_MIN_DELAY": 0.3, "RETRY_ENABLED": True,
                                "RETRY_TIMES": 2}
    if backend == "sqlite":
        settings["JOBDIR"] = str(tmp_path / "job")
    if backend == "redis":
        server = request.getfixturevalue("redis_server")
        settings.update(FRONTIER_BACKEND="redis", REDIS_URL=server.url,
                        FRONTIER_REDIS_KEY="robots:frontier:",
                        FRONTIER_REDIS_SEEN_KEY="robots:seen:",
                        FRONTIER_REDIS_HISTORY_KEY="robots:history:",
                        FRONTIER_REDIS_IDLE_GRACE=0.5)
    log = tmp_path / "server.jsonl"
    with ServerProcess(web, log_path=str(log)) as served:
        result = run_crawl(served.start_urls, settings, workdir=tmp_path / "crawl")
    assert result.returncode == 0, result.output[-3000:]
    entries = read_log(log)
    robots = [e for e in entries if e.path == "/robots.txt"]
    assert len(robots) == 9 and sorted(e.status for e in robots) == [200] * 3 + [500] * 6
    assert result.stats["frontier/robots/paced"] == 6
    report = audit(entries, expected=served.expected, min_delay=0.3, include_robots=True)
    assert report.coverage == 1.0, report.summary()
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()


def test_held_request_leaves_when_host_is_ready_not_at_heartbeat(tmp_path: Path) -> None:
    # One host, 1 s minimum rest. Scrapy's engine only re-polls a scheduler
    # that returned None on its 5 s heartbeat; the frontier's own timer must
    # release each request when its host is ready, long before that.
    web = ["--shape", "wide", "--hosts", "1", "--pages", "5", "--latency", "0.01", "0.01"]
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 1.0}
    log = tmp_path / "server.jsonl"
    with ServerProcess(web, log_path=str(log)) as served:
        result = run_crawl(served.start_urls, settings, workdir=tmp_path / "crawl")
    assert result.returncode == 0, result.output[-3000:]
    entries = sorted(read_log(log), key=lambda e: e.start)
    assert len(entries) == 5
    gaps = [b.start - a.end for a, b in zip(entries, entries[1:], strict=False)]
    assert all(gap >= 1.0 for gap in gaps), gaps  # polite
    # Released at the next contact time: each gap ends well before the engine's
    # next heartbeat could have fired (5 s after the previous poll).
    assert all(gap < 2.5 for gap in gaps), gaps
    assert result.stats["frontier/engine_wakeups"] >= 4
    assert result.stats["frontier/dispatch_lateness_ms/max"] < 1000


def test_wide_web_activates_back_queues_on_demand(tmp_path: Path) -> None:
    # 60 hosts but a back-queue floor of 4: hosts must be activated on demand
    # (bounded by FRONTIER_BACK_QUEUES_MAX) to keep the slots busy.
    web = ["--shape", "wide", "--hosts", "60", "--pages", "3", "--latency", "0.01", "0.03"]
    settings = {
        "ADDONS": FRONTIER_ADDON,
        "FRONTIER_MIN_DELAY": 0.0,
        "FRONTIER_BACK_QUEUES": 4,
        "FRONTIER_BACK_QUEUES_MAX": 40,
        "CONCURRENT_REQUESTS": 8,
    }
    result, report, _ = crawl_web(tmp_path, web, settings)
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    peak = result.stats["frontier/back_queues/peak"]
    assert 4 < peak <= 40


def test_control_scrapy_default_scheduler_is_seen_impolite(tmp_path: Path) -> None:
    # The same audit on Scrapy's own scheduler must find violations, or the
    # assertions above would prove nothing.
    settings = {"FRONTIER_MIN_DELAY": 0.0, "CONCURRENT_REQUESTS_PER_DOMAIN": 8}
    _, report, _ = crawl_web(tmp_path, SKEWED, settings)
    assert report.coverage == 1.0
    assert report.overlaps + report.short_gaps > 0, report.summary()


def test_redirects_and_retries_reenter_and_obey_their_hosts_politeness(tmp_path: Path) -> None:
    web_args = ["--shape", "wide", "--hosts", "3", "--pages", "6", "--latency", "0.01", "0.02"]
    settings = {
        "ADDONS": FRONTIER_ADDON,
        "FRONTIER_MIN_DELAY": 0.0,
        "RETRY_ENABLED": True,
        "RETRY_TIMES": 2,
        "RETRY_HTTP_CODES": [503],
    }
    log = tmp_path / "server.jsonl"
    with ServerProcess(web_args, log_path=str(log)) as web:
        roots = web.start_urls
        extra = [roots[0].replace("/p/0", "/redirect/4"), roots[1].replace("/p/0", "/flaky/1")]
        result = run_crawl(roots + extra, settings, allowed_domains=web.allowed_domains,
                           workdir=tmp_path / "crawl")
    assert result.returncode == 0, result.output[-3000:]
    entries = read_log(log)
    report = audit(entries, expected=web.expected, min_delay=0.0)
    # Every request, the 302 and the 503 included, kept its host's rest.
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    assert report.coverage == 1.0, report.summary()
    statuses = {(e.path, e.status) for e in entries}
    assert ("/redirect/4", 302) in statuses
    assert ("/flaky/1", 503) in statuses and ("/flaky/1", 200) in statuses
    assert result.stats["retry/count"] == 1
    assert result.stats.get("frontier/lease_expired") is None


def test_a_startup_error_is_one_clear_line_first(tmp_path: Path) -> None:
    result = run_crawl(["http://127.0.0.1:9/"], {"ADDONS": FRONTIER_ADDON,
                                                 "FRONTIER_FRONT_QUEUES": 0},
                       workdir=tmp_path / "crawl", timeout=60)
    errors = [line for line in result.output.splitlines() if " ERROR: " in line]
    assert errors, result.output[-2000:]
    assert "scrapy-frontier cannot start: FRONTIER_FRONT_QUEUES must be >= 1" in errors[0]
    assert result.output.index("cannot start") < result.output.find("Traceback") or (
        "Traceback" not in result.output)


@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_a_spider_that_blocks_the_reactor_gets_rests_its_pauses_do_not_inflate(
    tmp_path: Path,
) -> None:
    """A callback that blocks 300 ms on every 5th page. By default the rests follow the
    kernel's TCP times of the fetches (not 10 x the pause) and the crawl stays polite; the
    same crawl without them is the control. (FRONTIER_STALL_DISCOUNT, which only records the
    stalls, is checked in tests/scheduler/test_fetch_time.py.)"""
    import json

    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "15", "--latency", "0.02",
                "0.04", "--seed", "2"]
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0,
                "FRONTIER_DELAY_FACTOR": 10.0, "LOG_LEVEL": "WARNING"}
    variants: dict[str, dict[str, Any]] = {
        "tcp": {},
        "control": {"FRONTIER_TCP_TIMING": False},
    }
    outcome: dict[str, Any] = {}
    for name, extra in variants.items():
        log = tmp_path / f"server-{name}.jsonl"
        pauses_path = tmp_path / f"pauses-{name}.jsonl"
        with ServerProcess(web_args, log_path=str(log)) as web:
            result = run_crawl(web.start_urls, {**settings, **extra},
                               allowed_domains=web.allowed_domains, timeout=240,
                               workdir=tmp_path / f"crawl-{name}", pause_every=5,
                               pause_seconds=0.3, pause_log=pauses_path)
        assert result.returncode == 0, result.output[-3000:]
        entries = read_log(log)
        report = audit(entries, expected=web.expected, factor=10.0, min_delay=0.0)
        assert report.coverage == 1.0 and report.duplicates == 0
        assert report.overlaps == 0, report.summary()
        # Every variant keeps the hard rule: no fetch time is below the server's own.
        assert report.short_gaps == 0, report.summary()
        pauses = [tuple(json.loads(line)) for line in pauses_path.read_text().splitlines()]
        assert len(pauses) == len(web.expected) // 5
        rests = rest_report(entries, factor=10.0, pauses=pauses)  # type: ignore[arg-type]
        outcome[name] = (rests, result.stats)
    control, control_stats = outcome["control"]
    for name, (rests, stats) in outcome.items():
        print(f"{name}: inflated rests {rests.inflated}/{rests.rests}, worst excess "
              f"{rests.worst_excess:.3f} s, wasted {rests.wasted:.3f} s, TCP-timed "
              f"{stats.get('frontier/fetch/tcp_timed')}, stalls seen "
              f"{stats.get('frontier/reactor/stalls_seen')}")
    assert "frontier/fetch/tcp_timed" not in control_stats
    if sys.platform == "linux":
        # The socket of every answer is found under Scrapy's HTTP/1.1 handler (a frame
        # walk a Scrapy release could break): the kernel's stamps were read for nearly
        # every fetch (a page or two may share its socket with a closing connection).
        tcp_stats = outcome["tcp"][1]
        assert tcp_stats.get("frontier/fetch/tcp_read", 0) >= 0.9 * len(web.expected)
        assert "frontier/fetch/tcp_read" not in control_stats
    # Whatever this Scrapy does, the defaults inflate no more rests than the control.
    assert outcome["tcp"][0].inflated <= control.inflated
    # On Scrapy 2.13 the end of a read is mostly stamped before the callback's stall, so the
    # control may have no rest that a pause inflated; then there is nothing more to compare.
    if control.worst_excess > 0.3:
        # Timed by its reads, a fetch whose answer waited out a pause made its host rest
        # 10 x the pause (Scrapy 2.19 reads the answer after the callback's stall): the
        # kernel's times must have acted and made the rests shorter.
        rests, stats = outcome["tcp"]
        assert stats["frontier/fetch/tcp_timed"] > 0
        assert rests.worst_excess < control.worst_excess
        assert rests.wasted < control.wasted
        assert rests.inflated < control.inflated


def test_links_after_a_mailto_link_are_still_followed(tmp_path: Path) -> None:
    """Real documentation links mailto: before ordinary pages: the test spider must not
    lose a page's remaining links to the Request that refuses one."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(5):
        (docs / f"page{i}.html").write_text(f"<html><title>p{i}</title></html>")
    links = "".join(f'<a href="page{i}.html">{i}</a>' for i in range(5))
    (docs / "index.html").write_text(
        f'<html><a href="mailto:someone@example.org">mail</a>'
        f'<a href="javascript:void(0)">js</a>{links}</html>')
    web_args = ["--shape", "wide", "--hosts", "1", "--pages", "2", "--docs-root", str(docs)]
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0}
    result, report, _ = crawl_web(tmp_path, web_args, settings)
    fetched = {e.path for e in read_log(tmp_path / "server.jsonl")}
    assert {f"/page{i}.html" for i in range(5)} <= fetched, sorted(fetched)
    assert report.overlaps == 0 and report.duplicates == 0, report.summary()
    assert result.stats.get("spider_exceptions/ValueError") is None
