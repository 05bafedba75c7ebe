"""The test web's trap hosts (``serve --trap HOST:KIND``): endless URLs, little new content."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from frontier_testweb import ServerProcess, read_log
from frontier_testweb.traps import SESSION_PAGES, TRAP_KINDS, trap_page

HREF = re.compile(r'href="([^"]+)"')


def links(body: bytes) -> list[str]:
    return HREF.findall(body.decode())


def test_the_calendar_links_to_its_month_and_the_next_and_previous_days_forever() -> None:
    body = trap_page("calendar", 3, "/cal/2026/5/17")
    hrefs = links(body)
    assert "/cal/2026/5/18" in hrefs and "/cal/2026/5/16" in hrefs
    assert "/cal/2026/6/17" in hrefs and "/cal/2027/5/17" in hrefs
    assert sum(h.startswith("/cal/2026/5/") for h in hrefs) >= 31
    assert b"Sunday 17 May 2026" in body
    far = trap_page("calendar", 3, "/cal/9999/12/31")  # the end of dates holds
    assert b"9999" in far
    assert trap_page("calendar", 3, "/p/0") == trap_page("calendar", 3, "/cal/2026/1/1")


def test_the_session_trap_gives_every_link_a_fresh_id_and_keeps_the_text() -> None:
    one = trap_page("session", 4, "/news", "sid=a")
    two = trap_page("session", 4, "/news", "sid=b")
    ids = [re.search(r"sid=(\w+)", h) for h in links(one) + links(two) if "sid=" in h]
    assert len(ids) == 2 * len(SESSION_PAGES)
    assert len({m.group(1) for m in ids if m}) == len(ids)  # no id twice
    assert HREF.sub("", one.decode()) == HREF.sub("", two.decode())  # same text
    assert trap_page("session", 4, "/faq", "sid=a") != one


def test_the_counter_pages_differ_only_in_their_counter() -> None:
    a, b = trap_page("counter", 5, "/counter/7"), trap_page("counter", 5, "/counter/8")
    assert "/counter/8" in links(a) and "/counter/10" in links(a)
    assert b"7 visits" in a and b"8 visits" in b
    assert re.sub(rb"\d+", b"N", a) == re.sub(rb"\d+", b"N", b)


def test_an_unknown_trap_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="calendar"):
        trap_page("maze", 1, "/")
    assert TRAP_KINDS == ("calendar", "session", "counter")


def test_a_served_trap_host_is_left_out_of_the_expected_pages(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    args = ["--shape", "wide", "--hosts", "3", "--pages", "4", "--latency", "0", "0",
            "--trap", "1:counter"]
    with ServerProcess(args, log_path=str(log)) as web:
        trap = web.allowed_domains[1]
        assert {h for h, _ in web.expected} == {web.allowed_domains[0], web.allowed_domains[2]}
        url = web.start_urls[1].replace("/p/0", "/counter/41")
        with urllib.request.urlopen(url, timeout=10) as r:
            body = r.read()
    assert b"41 visits" in body
    assert [e.path for e in read_log(log) if e.host == trap] == ["/counter/41"]
