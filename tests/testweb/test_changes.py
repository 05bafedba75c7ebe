"""Tests of the test web's changing pages, noisy pages and conditional GETs."""

from __future__ import annotations

import math
import statistics
import time
import urllib.error
import urllib.request
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from frontier_testweb import (
    ChangeModel,
    ChangeOptions,
    GroundTruth,
    ServerProcess,
    TestWebServer,
    read_log,
    skewed_web,
    wide_web,
)
from frontier_testweb.changes import evaluate_conditional, render_dynamic_page
from scrapy_frontier.core.simhash import hamming, simhash

# -- the model, without a server ---------------------------------------------------------------


def test_versions_follow_a_poisson_process_at_the_configured_rate() -> None:
    model = ChangeModel(7, ChangeOptions(rate=3.0))
    pages = [(i, j) for i in range(4) for j in range(100)]
    counts = [model.version(i, j, 2.0) for i, j in pages]
    mean = statistics.fmean(counts)
    assert abs(mean - 6.0) < 0.6  # 400 pages of Poisson(6): sd of the mean 0.12
    assert 3.0 < statistics.variance(counts) < 12.0  # Poisson: variance = mean
    for i, j in pages[:20]:
        versions = [model.version(i, j, t / 10) for t in range(0, 31)]
        assert versions == sorted(versions) and versions[0] == 0
        times = model.change_times(i, j, 0.0, 3.0)
        assert len(times) == model.version(i, j, 3.0)
        assert all(0.0 < a < b <= 3.0 for a, b in zip([0.0001, *times], times, strict=False))
        assert model.change_times(i, j, 1.0, 2.0) == [x for x in times if 1.0 < x <= 2.0]
    # Deterministic by seed, whatever order the pages are asked in.
    again = ChangeModel(7, ChangeOptions(rate=3.0))
    assert [again.version(i, j, 2.0) for i, j in reversed(pages)] == counts[::-1]
    other = ChangeModel(8, ChangeOptions(rate=3.0))
    assert [other.version(i, j, 2.0) for i, j in pages] != counts


def test_changing_and_noisy_fractions_and_gamma_rates() -> None:
    opts = ChangeOptions(rate=2.0, changing_fraction=0.3, noisy_fraction=0.2)
    model = ChangeModel(1, opts)
    pages = [(i, j) for i in range(5) for j in range(200)]
    changing = [p for p in pages if model.is_changing(*p)]
    noisy = [p for p in pages if model.is_noisy(*p)]
    assert 0.25 < len(changing) / len(pages) < 0.35
    assert 0.15 < len(noisy) / len(pages) < 0.25
    still = [p for p in pages if not model.is_changing(*p)]
    assert all(model.version(i, j, 100.0) == 0 for i, j in still[:50])
    assert {model.page_rate(*p) for p in changing} == {2.0}
    # Gamma-distributed rates: mean RATE, variance RATE**2 / K.
    gamma = ChangeModel(1, ChangeOptions(rate=2.0, rate_shape=0.5))
    rates = [gamma.page_rate(*p) for p in pages]
    assert abs(statistics.fmean(rates) - 2.0) < 0.4
    assert 4.0 < statistics.variance(rates) < 12.0  # 8 expected
    fast = max(pages, key=lambda p: gamma.page_rate(*p))
    slow = min(pages, key=lambda p: gamma.page_rate(*p))
    assert gamma.version(*fast, 5.0) > gamma.version(*slow, 5.0)
    with pytest.raises(ValueError):
        ChangeOptions(rate=-1.0)
    with pytest.raises(ValueError):
        ChangeOptions(noisy_fraction=1.5)


def test_versions_change_text_but_not_links_and_noise_moves_few_bits() -> None:
    spec = skewed_web(hosts=4, largest=30, seed=3)
    port_of = {a: 8000 for a in spec.addresses()}
    noise_bits = []
    for i, h in enumerate(spec.hosts):
        for j in range(min(h.pages, 20)):
            v0 = render_dynamic_page(spec, i, j, port_of, 0).decode()
            v1 = render_dynamic_page(spec, i, j, port_of, 1).decode()
            assert v0 == render_dynamic_page(spec, i, j, port_of, 0).decode()
            assert v0 != v1 and len(v0.split()) > 1000
            for link in spec.links(i, j, port_of):
                assert f'href="{link}"' in v0 and f'href="{link}"' in v1
            assert hamming(simhash(v0), simhash(v1)) > 3  # a real change
            n1 = render_dynamic_page(spec, i, j, port_of, 0, "Generated for request 1")
            n2 = render_dynamic_page(spec, i, j, port_of, 0, "Generated for request 2")
            assert n1 != n2
            noise_bits.append(hamming(simhash(n1.decode()), simhash(n2.decode())))
    assert statistics.median(noise_bits) <= 2
    assert sum(b <= 3 for b in noise_bits) >= 0.9 * len(noise_bits)


def test_an_edit_replaces_one_word_and_moves_few_bits() -> None:
    """Edit k puts ``revisionk`` in place of one news word: the same links and length, a
    page of its own after each edit, and a simhash that moves a few bits (serve --edits)."""
    spec = skewed_web(hosts=4, largest=30, seed=3)
    port_of = {a: 8000 for a in spec.addresses()}
    edit_bits = []
    for i, h in enumerate(spec.hosts):
        for j in range(min(h.pages, 20)):
            pages = [render_dynamic_page(spec, i, j, port_of, 0, edits=k).decode()
                     for k in range(3)]
            assert pages[0] == render_dynamic_page(spec, i, j, port_of, 0).decode()
            assert pages[2] == render_dynamic_page(spec, i, j, port_of, 0, edits=2).decode()
            for k in (1, 2):
                assert f"revision{k}" in pages[k] and f"revision{k + 1}" not in pages[k]
                old, new = pages[k - 1].split(), pages[k].split()
                assert len(old) == len(new)
                assert sum(a != b for a, b in zip(old, new, strict=True)) == 1
                edit_bits.append(hamming(simhash(pages[k - 1]), simhash(pages[k])))
            for link in spec.links(i, j, port_of):
                assert all(f'href="{link}"' in page for page in pages)
    assert statistics.median(edit_bits) <= 2
    assert sum(b <= 3 for b in edit_bits) >= 0.9 * len(edit_bits)


def _date(wall: float) -> str:
    return formatdate(math.floor(wall), usegmt=True)


def test_conditional_rules() -> None:
    now = 1_700_000_100.5
    last = 1_700_000_050.7  # Last-Modified: ...050
    etag = '"abc"'
    ev = evaluate_conditional
    # If-None-Match: exact (weak comparison), lists, "*", and it wins over If-Modified-Since.
    assert ev('"abc"', None, etag, last, None, now)
    assert ev('"x", W/"abc"', None, etag, last, None, now)
    assert ev("*", None, None, last, None, now)
    assert not ev('"x"', _date(now), etag, last, None, now)
    assert not ev('"abc"', None, None, last, None, now)  # a noisy page has no ETag
    # If-Modified-Since.
    assert ev(None, _date(last), etag, last, 1_700_000_040.0, now)  # echoed Last-Modified
    assert ev(None, _date(last + 1), etag, last, 1_700_000_050.2, now)  # a later second
    assert not ev(None, _date(last - 1), etag, last, None, now)  # changed since
    # Two changes within second ...050: its date cannot tell them apart, so no 304.
    assert not ev(None, _date(last), etag, last, 1_700_000_050.2, now)
    assert not ev(None, _date(now + 5), etag, last, None, now)  # a date in the future
    assert not ev(None, "yesterday", etag, last, None, now)
    assert not ev(None, None, etag, last, None, now)


# -- a real server, in this process ------------------------------------------------------------


def _sleep(seconds: float) -> Any:
    from twisted.internet import reactor, task

    return task.deferLater(reactor, seconds, lambda: None)  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:Using readBody:DeprecationWarning")  # Twisted's own Agent
@pytest_twisted.inlineCallbacks
def test_in_process_changes_validators_and_304(tmp_path: Path) -> Any:
    from twisted.internet import reactor
    from twisted.web.client import Agent, readBody
    from twisted.web.http_headers import Headers

    spec = skewed_web(hosts=3, largest=40, latency=(0.0, 0.0), seed=11)
    opts = ChangeOptions(rate=4.0, changing_fraction=0.5, noisy_fraction=0.3)
    server = TestWebServer(spec, log_path=str(tmp_path / "log.jsonl"), changes=opts)
    server.start()
    agent = Agent(reactor)

    def fetch(url: str, headers: dict[str, str] | None = None) -> Any:
        h = Headers({k.encode(): [v.encode()] for k, v in (headers or {}).items()})
        return agent.request(b"GET", url.encode(), h)

    @pytest_twisted.inlineCallbacks
    def get(url: str, headers: dict[str, str] | None = None) -> Any:
        response = yield fetch(url, headers)
        body = yield readBody(response)
        got = {k.decode().lower(): v[0].decode() for k, v in response.headers.getAllRawHeaders()}
        return response.code, got, body

    try:
        truth = server.ground_truth()
        address = spec.hosts[0].address
        base = f"http://{address}:{server.port}"
        paths = [f"/p/{j}" for j in range(spec.hosts[0].pages)]
        changing = [p for p in paths if truth.is_changing(address, p)]
        noisy = [p for p in paths if truth.is_noisy(address, p)]
        clean = [p for p in changing if not truth.is_noisy(address, p)]
        static = [p for p in paths if p not in changing and p not in noisy]
        assert clean and static and noisy

        # A static page: validators, 304 on If-None-Match and on If-Modified-Since.
        code, headers, body = yield get(base + static[0])
        assert code == 200 and headers["etag"].startswith('"') and "last-modified" in headers
        assert headers["last-modified"] == _date(server.started_wall or 0.0)
        code, h304, body304 = yield get(base + static[0], {"If-None-Match": headers["etag"]})
        assert (code, body304) == (304, b"") and h304["etag"] == headers["etag"]
        code, _, body304 = yield get(
            base + static[0], {"If-Modified-Since": headers["last-modified"]}
        )
        assert (code, body304) == (304, b"")
        code, _, again = yield get(base + static[0], {"If-None-Match": '"other"'})
        assert code == 200 and again == body

        # A changing page: same links, new text and ETag after its next change; no 304 then.
        page = clean[0]
        code, first_headers, first = yield get(base + page)
        first_version = server.log[-1].version
        assert code == 200 and first_version == truth.version(address, page, server.log[-1].start)
        code, _, _ = yield get(base + page, {"If-None-Match": first_headers["etag"]})
        # A change may land between the two requests: the log says which version was current.
        assert code == (304 if server.log[-1].version == first_version else 200)
        upcoming = truth.change_times(address, page, time.monotonic(), time.monotonic() + 30)
        assert upcoming  # rate 4/s: a change within 30 s is certain in practice
        yield _sleep(max(0.0, upcoming[0] - time.monotonic()) + 0.01)
        for cond in (
            {"If-None-Match": first_headers["etag"]},
            {"If-Modified-Since": first_headers["last-modified"]},
        ):
            code, headers, body = yield get(base + page, cond)
            assert code == 200 and body != first, cond
            assert server.log[-1].version > first_version and server.log[-1].conditional
        assert headers["etag"] != first_headers["etag"]
        port_of = server.port_of
        for link in spec.links(0, int(page[3:]), port_of):
            assert f'href="{link}"'.encode() in body and f'href="{link}"'.encode() in first
        expected = render_dynamic_page(spec, 0, int(page[3:]), port_of, server.log[-1].version)
        assert body == expected

        # Versions advance at about the rate (over all changing pages of host 0).
        t0 = time.monotonic()
        before = [truth.version(address, p, t0) for p in changing]
        yield _sleep(1.0)
        t1 = time.monotonic()
        after = [truth.version(address, p, t1) for p in changing]
        changes = sum(after) - sum(before)
        assert (
            0.4 * 4.0 * (t1 - t0) * len(changing) < changes < 2.5 * 4.0 * (t1 - t0) * len(changing)
        )

        # A noisy page: different bytes on every fetch, a few simhash bits, no ETag.
        bodies = []
        for _ in range(4):
            code, headers, body = yield get(base + noisy[0])
            assert code == 200 and "etag" not in headers and "last-modified" in headers
            bodies.append(body)
        assert len(set(bodies)) == 4
        if not truth.is_changing(address, noisy[0]):
            hashes = [simhash(b.decode()) for b in bodies]
            assert all(hamming(hashes[0], h) <= 3 for h in hashes[1:])
        code, _, _ = yield get(base + noisy[0], {"If-None-Match": '"x"'})
        assert code == 200
    finally:
        yield server.stop()

    log = read_log(tmp_path / "log.jsonl")
    assert log == server.log
    for entry in log:
        assert entry.version == truth.version(entry.host, entry.path, entry.start)
        if entry.status == 304:
            assert entry.bytes == 0 and entry.conditional
        else:
            assert entry.status == 200 and entry.bytes > 5000
    assert sum(e.conditional for e in log) == 7 and sum(e.status == 304 for e in log) >= 2


# -- the command line --------------------------------------------------------------------------


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_cli_options_announcement_and_ground_truth(tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    args = ["--shape", "wide", "--hosts", "2", "--pages", "6", "--latency", "0", "0", "--seed"]
    args += ["4", "--change-rate", "5", "--rate-shape", "2", "--noisy-fraction", "0.5"]
    with ServerProcess(args, log_path=str(log_path)) as web:
        info = web.info
        assert info["changes"] == {
            "rate": 5.0,
            "changing_fraction": 1.0,
            "rate_shape": 2.0,
            "noisy_fraction": 0.5,
        }
        assert info["seed"] == 4 and info["started"] <= time.monotonic()
        truth = GroundTruth.from_announcement(info)
        for url in web.start_urls:
            for _ in range(3):
                status, headers, _ = _get(url)
                assert status == 200 and "Last-Modified" in headers
                time.sleep(0.1)
        status, _, body = _get(web.start_urls[0].replace("/p/0", "/robots.txt"))
    entries = read_log(log_path)
    pages = [e for e in entries if e.path == "/p/0"]
    assert len(pages) == 6
    assert all(e.version == truth.version(e.host, e.path, e.start) for e in pages)
    assert all(e.bytes > 5000 and not e.conditional for e in pages)
    assert [e.version for e in entries if e.path == "/robots.txt"] == [-1]
    assert truth.version("127.0.1.1", "/robots.txt", time.monotonic()) == -1
    assert truth.version("127.0.1.1", "/p/6", time.monotonic()) == -1


def test_without_options_pages_and_headers_are_unchanged(tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    args = ["--shape", "wide", "--hosts", "1", "--pages", "3", "--latency", "0", "0"]
    with ServerProcess(args, log_path=str(log_path)) as web:
        assert web.info["changes"] is None and "started" in web.info
        status, headers, body = _get(web.start_urls[0], {"If-None-Match": "*"})
        # Edits only with --edits: a POST is refused, the page stays as it is.
        edit = urllib.request.Request(web.start_urls[0].replace("/p/0", "/_edit/p/0"),
                                      data=b"", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(edit, timeout=10)
        assert refused.value.code == 405
    spec = wide_web(hosts=1, pages=3, latency=(0.0, 0.0))
    assert status == 200 and "ETag" not in headers and "Last-Modified" not in headers
    assert body == spec.render_page(0, 0, {spec.hosts[0].address: web.info["port"]})
    entry, posted = read_log(log_path)
    assert (entry.version, entry.bytes, entry.conditional) == (0, len(body), True)
    assert (posted.path, posted.status) == ("/_edit/p/0", 405)
