"""Per-IP politeness on real crawls: several host names on one loopback address.

A resolver override maps a1/a2/a3.test to the first test-web address and b1.test to
the second. With FRONTIER_IP_POLITENESS the server's log, grouped by address, must show
one request at a time and the full rest after each; without it (the control crawl) the
three names on one address are crawled side by side and the auditor must see it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import default_settings

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from frontier_testweb.log import LogEntry
from scrapy_frontier.reactor.resolve import HostResolver, ip_literal
from scrapy_frontier.settings import FrontierConfig

NAMES_A = ["a1.test", "a2.test", "a3.test"]
NAMES_B = ["b1.test"]
RESOLVER = "frontier_testweb.resolver.AliasResolver"
#: The resolver setting this Scrapy reads: TWISTED_DNS_RESOLVER from 2.15, DNS_RESOLVER before
#: (later Scrapy still read it, with a deprecation warning).
RESOLVER_SETTING = ("TWISTED_DNS_RESOLVER" if hasattr(default_settings, "TWISTED_DNS_RESOLVER")
                    else "DNS_RESOLVER")


def test_ip_literal() -> None:
    assert ip_literal("127.0.0.1") == "127.0.0.1"
    assert ip_literal("[::1]") == "::1"
    assert ip_literal("example.com") is None


def test_setting_is_read_and_validated() -> None:
    from scrapy.settings import Settings

    assert FrontierConfig.from_settings(Settings()).ip_politeness is False
    config = FrontierConfig.from_settings(Settings({"FRONTIER_IP_POLITENESS": True}))
    assert config.ip_politeness is True


def test_resolver_answers_literals_and_pseudo_hosts_at_once() -> None:
    seen: list[tuple[str, str, bool]] = []
    resolver = HostResolver(lambda *a: seen.append(a), timeout=1.0, reactor=object())
    resolver.resolve("127.0.0.5", "127.0.0.5")
    resolver.resolve("data:", "data:")
    assert seen == [("127.0.0.5", "127.0.0.5", True), ("data:", "data:", True)]
    assert resolver.lookups == 0


def _crawl(tmp_path: Path, ip_politeness: bool) -> tuple[Any, list[LogEntry], ServerProcess]:
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "2", "--pages", "6",
                "--latency", "0.02", "0.03", "--cross-links", "0"]
    with ServerProcess(web_args, log_path=str(log)) as web:
        hosts = web.info["hosts"]
        aliases = {name: hosts[0]["address"] for name in NAMES_A}
        aliases.update({name: hosts[1]["address"] for name in NAMES_B})
        # Each address's own port, from its root URL (http://ADDRESS:PORT/p/0).
        ports = [url.split(":")[2].split("/")[0] for url in web.start_urls]
        starts = [f"http://{name}:{ports[0]}/p/0" for name in NAMES_A]
        starts += [f"http://{name}:{ports[1]}/p/0" for name in NAMES_B]
        settings = {
            "ADDONS": FRONTIER_ADDON,
            "FRONTIER_MIN_DELAY": 0.0,
            "FRONTIER_IP_POLITENESS": ip_politeness,
            RESOLVER_SETTING: RESOLVER,
            "TESTWEB_HOST_ADDRESSES": aliases,
        }
        result = run_crawl(starts, settings, allowed_domains=NAMES_A + NAMES_B,
                           workdir=tmp_path / "crawl")
    assert result.returncode == 0, result.output[-3000:]
    return result, read_log(log), web


def _by_name(entries: list[LogEntry]) -> list[LogEntry]:
    return [dataclasses.replace(e, host=e.vhost) for e in entries]


@pytest.mark.crawl
def test_names_on_one_ip_share_one_connection_and_rest(tmp_path: Path) -> None:
    result, entries, web = _crawl(tmp_path, ip_politeness=True)
    assert {e.vhost for e in entries} == set(NAMES_A + NAMES_B)
    paths = {path for _, path in web.expected}
    expected = {(name, path) for name in NAMES_A + NAMES_B for path in paths
                if path.startswith("/p/")}
    # Per name: every page once, with the per-host rule kept.
    per_name = audit(_by_name(entries), expected=expected, min_delay=0.0)
    assert per_name.coverage == 1.0 and per_name.duplicates == 0, per_name.summary()
    assert per_name.polite, per_name.summary()
    # Per address: the three names on the first address never overlap and each
    # request waits the full rest after the previous one to that address.
    per_ip = audit(entries, min_delay=0.0)
    print("per address:", per_ip.summary())
    assert per_ip.overlaps == 0 and per_ip.short_gaps == 0, per_ip.summary()
    stats = result.stats
    assert stats["frontier/ip/lookups"] == 4
    assert stats["frontier/ip/lookup_failures"] == 0
    assert stats["frontier/ip/group_waits"] > 0
    # The second address was not held back by the first: its makespan is far shorter.
    first, second = (h["address"] for h in web.info["hosts"])
    span = {addr: max(e.end for e in entries if e.host == addr)
            - min(e.start for e in entries if e.host == addr) for addr in (first, second)}
    print("makespan per address", span)
    assert span[second] < span[first] / 2


@pytest.mark.crawl
def test_without_ip_politeness_names_on_one_ip_run_side_by_side(tmp_path: Path) -> None:
    result, entries, _ = _crawl(tmp_path, ip_politeness=False)
    per_name = audit(_by_name(entries), min_delay=0.0)
    assert per_name.polite, per_name.summary()  # each name alone is still polite
    per_ip = audit(entries, min_delay=0.0)
    print("per address (control):", per_ip.summary())
    assert per_ip.short_gaps > 0, per_ip.summary()
    assert "frontier/ip/lookups" not in result.stats


class _FakeReactor:
    """Answers lookups from a table, at once (like a DNS cache hit) or later."""

    def __init__(self, table: dict[str, str], deferred: bool = False) -> None:
        self.table = table
        self.asked: list[str] = []
        self.deferred = deferred
        self.waiting: list[tuple[Any, str]] = []

    def resolve(self, name: str, timeout: Any = ()) -> Any:
        from twisted.internet import defer

        self.asked.append(name)
        if not self.deferred:
            return defer.succeed(self.table[name])
        d: Any = defer.Deferred()
        self.waiting.append((d, self.table[name]))
        return d


def _scheduler_with(table: dict[str, str], deferred: bool = False) -> tuple[Any, Any, _FakeReactor]:
    from tests.scheduler.test_scheduler import make_scheduler

    sched, clock, _ = make_scheduler({"FRONTIER_IP_POLITENESS": True})
    reactor = _FakeReactor(table, deferred)
    assert sched.backend.ip_groups is not None
    sched.backend.ip_groups.resolver = HostResolver(sched.backend.ip_groups.on_group, timeout=1.0,
                                          reactor=reactor)
    return sched, clock, reactor


def test_scheduler_holds_the_second_host_on_an_ip_and_resolves_slot_hostnames() -> None:
    from scrapy import Request

    from tests.scheduler.test_scheduler import finish

    table = {"b.example": "10.0.0.1", "c.example": "10.0.0.1", "d.example": "10.0.0.2",
             "e.example": "10.0.0.3"}
    sched, clock, reactor = _scheduler_with(table)
    for host in ("b", "c", "d"):
        sched.enqueue_request(Request(f"http://{host}.example/1"))
    sched.enqueue_request(Request("http://e.example/1", meta={"download_slot": "proxy-7"}))
    out = [sched.next_request() for _ in range(4)]
    got = sorted(r.url for r in out if r is not None)
    # One of b/c (same IP), plus d and the slot's request: three, never both b and c.
    assert len(got) == 3, got
    assert not {"http://b.example/1", "http://c.example/1"} <= set(got)
    assert sorted(reactor.asked) == ["b.example", "c.example", "d.example", "e.example"]
    assert sched.backend.frontier.groups.group_of("proxy-7") == "10.0.0.3"
    first_bc = next(r for r in out if r is not None and r.url[7] in "bc")
    finish(sched, clock, first_bc, 0.1)  # the IP rests 1 s
    assert sched.next_request() is None
    clock.advance(1.0)
    other = sched.next_request()
    assert other is not None and other.url != first_bc.url and other.url[7] in "bc"


def test_a_late_dns_answer_wakes_the_engine() -> None:
    from scrapy import Request

    sched, _, reactor = _scheduler_with({"b.example": "10.0.0.1"}, deferred=True)
    sched.enqueue_request(Request("http://b.example/1"))
    assert sched.next_request() is None  # waiting for DNS
    assert sched.crawler.stats.get_value("frontier/engine_wakeups") is None
    d, address = reactor.waiting.pop()
    d.callback(address)
    assert sched.crawler.stats.get_value("frontier/engine_wakeups") == 1
    request = sched.next_request()
    assert request is not None and request.url == "http://b.example/1"


def test_ip_groups_are_looked_up_again_after_a_restart(tmp_path: Any) -> None:
    from scrapy import Request

    from tests.backends.sqlite.test_persistence import crash
    from tests.scheduler.test_scheduler import make_scheduler

    settings = {"FRONTIER_IP_POLITENESS": True, "JOBDIR": str(tmp_path / "job")}
    table = {"b.example": "10.0.0.1", "c.example": "10.0.0.1"}
    sched, _, _ = make_scheduler(settings)
    sched.backend.ip_groups.resolver = HostResolver(sched.backend.ip_groups.on_group, timeout=1.0,
                                          reactor=_FakeReactor(table))
    for host in ("b", "c"):
        for i in range(2):
            sched.enqueue_request(Request(f"http://{host}.example/{i}"))
    first = sched.next_request()
    assert first is not None and sched.next_request() is None  # same IP: one at a time
    crash(sched)
    again, _, _ = make_scheduler(settings)
    reactor = _FakeReactor(table)
    groups = again.backend.ip_groups
    groups.resolver = HostResolver(groups.on_group, timeout=1.0, reactor=reactor)
    out = [again.next_request() for _ in range(3)]
    got = [r for r in out if r is not None]
    # The interrupted host rests; the other host of the IP goes, alone.
    assert len(got) == 1 and reactor.asked
    again.close("finished")
