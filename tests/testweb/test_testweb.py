"""Tests of the loopback test web: graph, server, log and auditor."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from frontier_testweb import (
    AuditReport,
    HostSpec,
    LogEntry,
    ServerProcess,
    TestWebServer,
    WebSpec,
    audit,
    doc_tree_hosts,
    read_log,
    skewed_web,
    wide_web,
)
from frontier_testweb.spec import host_addresses

# -- helpers -----------------------------------------------------------------------------------


def bfs(spec: WebSpec) -> set[tuple[str, str]]:
    """Every generated (host, path) reachable from the hosts' roots by following edges()."""
    seen: set[tuple[int, str]] = set()
    queue = deque((i, spec.root_path(i)) for i in range(len(spec.hosts)))
    while queue:
        node = queue.popleft()
        if node in seen:
            continue
        seen.add(node)
        index, path = node
        if spec.hosts[index].doc_root is None:
            queue.extend(spec.edges(index, int(path.rsplit("/", 1)[1])))
    return {(spec.hosts[i].address, p) for i, p in seen if spec.hosts[i].doc_root is None}


def get(url: str, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes, float]:
    """(status, headers, body, client-side seconds) of a GET, 4xx/5xx included."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read(), time.monotonic() - started
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read(), time.monotonic() - started


def e(host: str, path: str, start: float, end: float, status: int = 200) -> LogEntry:
    return LogEntry(host=host, path=path, start=start, end=end, status=status)


# -- the graph ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [skewed_web(), skewed_web(hosts=7, largest=40, seed=9, cross_links=0), wide_web(hosts=50)],
    ids=["skewed", "skewed-nocross", "wide"],
)
def test_every_expected_page_is_reachable(spec: WebSpec) -> None:
    expected = spec.expected_paths()
    assert len(expected) == spec.total_pages()
    assert bfs(spec) == expected


def test_only_root_is_needed_per_host() -> None:
    # From /p/0 alone (no cross links) the same-host links reach every page of that host.
    spec = skewed_web(hosts=1, largest=123, cross_links=0)
    assert bfs(spec) == {("127.0.1.1", f"/p/{j}") for j in range(123)}


def test_links_are_deterministic_and_well_formed() -> None:
    spec = skewed_web(hosts=10, largest=60, seed=3)
    again = skewed_web(hosts=10, largest=60, seed=3)
    other = skewed_web(hosts=10, largest=60, seed=4)
    port_of = {a: 8000 for a in spec.addresses()}
    pages = [(i, j) for i, h in enumerate(spec.hosts) for j in range(h.pages)]
    assert [spec.links(i, j, port_of) for i, j in pages] == [
        again.links(i, j, port_of) for i, j in pages
    ]
    assert [spec.links(i, j) for i, j in pages] != [other.links(i, j) for i, j in pages]
    for i, j in pages:
        links = spec.links(i, j, port_of)
        cross = [u for u in links if u.startswith("http://")]
        assert len(cross) == spec.cross_links
        for url in cross:
            host, port_path = url[len("http://") :].split(":")
            assert host != spec.hosts[i].address and port_path == "8000/p/0"
        for path in (u for u in links if not u.startswith("http://")):
            assert path.startswith("/p/") and int(path[3:]) < spec.hosts[i].pages


def test_skewed_sizes_follow_zipf() -> None:
    spec = skewed_web(hosts=30, largest=150, zipf_s=1.0, latency=(0.005, 0.040), seed=1)
    sizes = [h.pages for h in spec.hosts]
    assert sizes[:6] == [150, 75, 50, 38, 30, 25]
    assert sizes == [max(1, round(150 / (i + 1))) for i in range(30)]
    steep = [h.pages for h in skewed_web(hosts=30, largest=150, zipf_s=2.0).hosts]
    assert steep[:4] == [150, 38, 17, 9] and steep[-1] == 1
    lats = [h.latency for h in spec.hosts]
    assert all(0.005 <= x <= 0.040 for x in lats)
    assert len(set(lats)) == 30  # drawn, not constant
    assert lats == [h.latency for h in skewed_web(seed=1).hosts]
    assert lats != [h.latency for h in skewed_web(seed=2).hosts]


def test_wide_web_shape_and_addresses() -> None:
    spec = wide_web()
    assert len(spec.hosts) == 300 and {h.pages for h in spec.hosts} == {8}
    addresses = spec.addresses()
    assert len(set(addresses)) == 300
    for a in addresses:
        octets = [int(x) for x in a.split(".")]
        assert octets[0] == 127 and octets[1] == 0 and octets[2] >= 1
        assert 0 < octets[3] < 255
    assert all(0.050 <= h.latency <= 0.150 for h in spec.hosts)
    assert host_addresses(3, "127.0.1.253") == ["127.0.1.253", "127.0.1.254", "127.0.2.1"]


def test_named_hosts_share_a_few_addresses() -> None:
    spec = skewed_web(hosts=12_000, largest=40, addresses=3)
    assert len(spec.hosts) == 12_000 and len(set(spec.addresses())) == 3
    assert [h.key for h in spec.hosts[:4]] == ["h0.web.test", "h1.web.test", "h2.web.test",
                                                "h3.web.test"]
    assert spec.hosts[3].address == spec.hosts[0].address != spec.hosts[1].address
    assert spec.allowed_domains() == ["web.test"]
    assert spec.url(5, "/p/0", {a: 8000 for a in spec.addresses()}) == (
        "http://h5.web.test:8000/p/0")
    assert ("h11999.web.test", "/p/0") in spec.expected_paths()
    # The same graph and sizes as the web of one address per host.
    plain = skewed_web(hosts=50, largest=40)
    named = skewed_web(hosts=50, largest=40, addresses=2)
    assert [h.pages for h in named.hosts] == [h.pages for h in plain.hosts]
    assert [named.edges(i, 0) for i in range(50)] == [plain.edges(i, 0) for i in range(50)]
    with pytest.raises(ValueError, match=r"0\.\.5000"):
        wide_web(hosts=5001)
    with pytest.raises(ValueError, match="one host only"):
        WebSpec(hosts=(HostSpec("127.0.1.1", 1, 0.0), HostSpec("127.0.1.1", 1, 0.0, name="a.test")),
                seed=1)


def test_named_hosts_are_served_by_host_header(tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    args = ["--shape", "wide", "--hosts", "5", "--pages", "2", "--latency", "0", "0",
            "--addresses", "2"]
    with ServerProcess(args, log_path=str(log_path)) as web:
        assert web.allowed_domains == ["web.test"]
        assert web.host_addresses["h4.web.test"] == web.host_addresses["h0.web.test"]
        port = web.info["port"]
        url = f"http://{web.host_addresses['h3.web.test']}:{port}/p/1"
        bodies = {}
        # h2 is on the other address, so this one does not serve it.
        for host, status in (("h3.web.test", 200), ("h2.web.test", 404), ("nope.test", 404)):
            request = urllib.request.Request(url, headers={"Host": f"{host}:{port}"})
            try:
                with urllib.request.urlopen(request, timeout=10) as r:
                    got, bodies[host] = r.status, r.read()
            except urllib.error.HTTPError as exc:
                got = exc.code
            assert got == status, host
        assert b"<title>Host h3.web.test page 1</title>" in bodies["h3.web.test"]
        entries = web.read_log()
    # Only a host of the address is logged, by its name.
    assert [(x.host, x.path, x.status, x.vhost) for x in entries] == [
        ("h3.web.test", "/p/1", 200, "h3.web.test")]


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0", "", "10.0.1.1", "::1", "localhost"])
def test_non_loopback_or_reserved_addresses_are_refused(address: str) -> None:
    with pytest.raises(ValueError):
        HostSpec(address=address, pages=1, latency=0.0)


def test_duplicate_addresses_are_refused() -> None:
    h = HostSpec("127.0.1.1", 1, 0.0)
    with pytest.raises(ValueError):
        WebSpec(hosts=(h, h), seed=1)


# -- the auditor -------------------------------------------------------------------------------

A, B = "127.0.1.1", "127.0.1.2"


def test_polite_log_passes() -> None:
    # d = 0.1 -> rest 1.0; next start at 1.1 + 1.0 exactly.
    log = [e(A, "/p/0", 0.0, 0.1), e(A, "/p/1", 1.1, 1.3), e(A, "/p/2", 3.3, 3.4)]
    r = audit(log, factor=10)
    assert (r.overlaps, r.short_gaps) == (0, 0)
    assert r.polite
    assert r.worst_gap_ratio == pytest.approx(1.0)


def test_overlap_is_detected() -> None:
    log = [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 0.5, 0.6), e(B, "/p/0", 0.2, 0.3)]
    r = audit(log, factor=0)
    assert r.overlaps == 1
    assert r.short_gaps == 1  # the overlapping request also comes too soon
    assert not r.polite
    # Nested request: ends before the first one does, and the next one still overlaps the first.
    log2 = [e(A, "/a", 0.0, 1.0), e(A, "/b", 0.1, 0.2), e(A, "/c", 0.5, 0.6)]
    assert audit(log2, factor=0).overlaps == 2


def test_back_to_back_is_not_an_overlap() -> None:
    log = [e(A, "/p/0", 0.0, 1.0), e(A, "/p/1", 1.0, 2.0)]
    r = audit(log, factor=0)
    assert (r.overlaps, r.short_gaps) == (0, 0)


def test_short_gap_is_detected() -> None:
    # d = 0.1 -> needs 1.0 of rest; 0.99 is short beyond the 2 ms tolerance.
    log = [e(A, "/p/0", 0.0, 0.1), e(A, "/p/1", 1.09, 1.2)]
    r = audit(log, factor=10)
    assert r.short_gaps == 1 and r.overlaps == 0
    assert r.worst_gap_ratio == pytest.approx(0.99)
    # Within tolerance: 0.999 of 1.0 passes.
    ok = [e(A, "/p/0", 0.0, 0.1), e(A, "/p/1", 1.099, 1.2)]
    assert audit(ok, factor=10).short_gaps == 0
    assert audit(ok, factor=10, tolerance=0.0).short_gaps == 1
    # Hosts are independent: B right after A is fine.
    mixed = [e(A, "/p/0", 0.0, 0.1), e(B, "/p/0", 0.1, 0.2)]
    assert audit(mixed, factor=10).short_gaps == 0


def test_clamps_are_honoured() -> None:
    # d = 0.01: factor gives 0.1, min_delay raises it to 0.5.
    log = [e(A, "/p/0", 0.0, 0.01), e(A, "/p/1", 0.31, 0.32)]
    assert audit(log, factor=10).short_gaps == 0
    assert audit(log, factor=10, min_delay=0.5).short_gaps == 1
    assert audit(log, factor=10, min_delay=0.3).short_gaps == 0
    # d = 2: factor gives 20, max_delay caps it at 3.
    slow = [e(A, "/p/0", 0.0, 2.0), e(A, "/p/1", 5.0, 6.0)]
    assert audit(slow, factor=10).short_gaps == 1
    assert audit(slow, factor=10, max_delay=3.0).short_gaps == 0
    assert audit(slow, factor=10, max_delay=3.5).short_gaps == 1


def test_robots_txt_is_left_out_unless_asked() -> None:
    log = [e(A, "/robots.txt", 0.0, 0.1), e(A, "/p/0", 0.1, 0.2)]
    r = audit(log, factor=10)
    assert r.requests == 1 and r.short_gaps == 0
    r = audit(log, factor=10, include_robots=True)
    assert r.requests == 2 and r.short_gaps == 1


def test_duplicates_and_coverage() -> None:
    expected = {(A, "/p/0"), (A, "/p/1"), (A, "/p/2"), (B, "/p/0")}
    log = [
        e(A, "/p/0", 0, 1),
        e(A, "/p/0", 20, 21),
        e(A, "/p/0", 40, 41),
        e(A, "/p/1", 60, 61),
        e(A, "/p/9", 80, 81, 404),
        e(A, "/p/9", 100, 101, 404),
        e(B, "/p/0", 0, 1, 500),  # an error is not coverage
    ]
    r = audit(log, expected=expected, factor=10)
    assert r.duplicates == 3
    assert r.missing == 2
    assert r.coverage == pytest.approx(0.5)
    assert r.errors == 3
    assert audit(log).coverage == 1.0 and audit(log).missing == 0


def test_bounds_are_exact_on_a_small_example() -> None:
    # Host A: durations 1, 2, 0.5 (in start order); host B: 0.25.
    log = [
        e(A, "/p/0", 0.0, 1.0),
        e(A, "/p/1", 11.0, 13.0),
        e(A, "/p/2", 33.0, 33.5),
        e(B, "/p/0", 5.0, 5.25),
    ]
    r = audit(log, factor=10, max_delay=15, concurrency=2)
    # sum(d) + clamp(10 * d) over all but the last: 3.5 + 10 + 15 (capped from 20).
    assert r.host_bound == pytest.approx(28.5)
    assert r.concurrency_bound == pytest.approx(3.75 / 2)
    assert r.makespan == pytest.approx(33.5)
    assert r.floor() == pytest.approx(28.5)
    assert r.floor(impolite_makespan=40.0) == pytest.approx(40.0)
    assert r.short_gaps == 0 and r.hosts == 2
    # The A gaps: 10 of 10 required, 20 of 15 required.
    assert r.worst_gap_ratio == pytest.approx(1.0)
    r = audit(log, factor=0, concurrency=1)
    assert r.host_bound == pytest.approx(3.5)
    assert r.concurrency_bound == pytest.approx(3.75)
    assert r.floor() == pytest.approx(3.75)


def test_empty_log_and_report_output() -> None:
    r = audit([], expected={(A, "/p/0")})
    assert (r.requests, r.makespan, r.coverage, r.missing) == (0, 0.0, 0.0, 1)
    assert math.isinf(r.worst_gap_ratio)
    d = r.as_dict()
    assert d["worst_gap_ratio"] is None
    json.dumps(d)  # JSON-safe
    assert isinstance(r, AuditReport) and "0 requests" in r.summary()
    with pytest.raises(ValueError):
        audit([], concurrency=0)


def test_read_log_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    good = [e(A, "/p/0", 1.0, 2.0), e(B, "/robots.txt", 1.5, 1.75, 404)]
    path.write_text("".join(x.to_json() + "\n" for x in good) + '{"host": "127.0.1.1", "pa')
    assert read_log(path) == good


# -- the server, in a child process ------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log_path = tmp_path_factory.mktemp("web") / "log.jsonl"
    robots = tmp_path_factory.mktemp("robots") / "robots.txt"
    robots.write_text("User-agent: *\nDisallow: /private\nCrawl-delay: 1\n")
    args = ["--shape", "skewed", "--hosts", "4", "--largest", "12", "--latency", "0.05", "0.08"]
    args += ["--seed", "5", "--robots-txt", str(robots)]
    with ServerProcess(args, log_path=str(log_path)) as web:
        yield web


def test_announcement(served: ServerProcess) -> None:
    spec = skewed_web(hosts=4, largest=12, latency=(0.05, 0.08), seed=5)
    assert served.expected == spec.expected_paths()
    assert served.allowed_domains == spec.addresses()
    port = served.info["port"]
    assert served.start_urls == [f"http://{a}:{port}/p/0" for a in spec.addresses()]
    assert served.info["pid"] == served.pid


def test_pages_are_served_with_latency_and_logged(served: ServerProcess) -> None:
    spec = skewed_web(hosts=4, largest=12, latency=(0.05, 0.08), seed=5)
    port_of = {a: served.info["port"] for a in spec.addresses()}
    for index, host in enumerate(spec.hosts):
        url = served.start_urls[index].replace("/p/0", f"/p/{host.pages - 1}")
        status, headers, body, elapsed = get(url)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert elapsed >= host.latency
        text = body.decode()
        assert f"<title>Host {host.address} page {host.pages - 1}</title>" in text
        for link in spec.links(index, host.pages - 1, port_of):
            assert f'href="{link}"' in text
    # The log line is written when the response is finished, before the client sees the end.
    entries = served.read_log()
    for host in spec.hosts:
        mine = [x for x in entries if x.host == host.address and x.path == f"/p/{host.pages - 1}"]
        assert len(mine) == 1 and mine[0].status == 200
        assert mine[0].end - mine[0].start >= host.latency


def test_unknown_paths_are_404(served: ServerProcess) -> None:
    root = served.start_urls[1]  # host 1 has 6 pages
    for path in ("/p/6", "/p/01", "/p/-1", "/p/", "/nope", "/p/1?x=1"):
        status, _, _, _ = get(root.replace("/p/0", path))
        assert status == 404, path
    logged = {(x.path, x.status) for x in served.read_log() if x.host == "127.0.1.2"}
    assert ("/p/01", 404) in logged and ("/p/1?x=1", 404) in logged


def test_robots_txt_is_served(served: ServerProcess) -> None:
    status, headers, body, _ = get(served.start_urls[0].replace("/p/0", "/robots.txt"))
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert body == b"User-agent: *\nDisallow: /private\nCrawl-delay: 1\n"


def test_overlap_through_real_server_is_audited(served: ServerProcess) -> None:
    # Two requests at once to host 3 must show up as an overlap in the server's own log.
    import threading

    url = served.start_urls[3]
    threads = [threading.Thread(target=get, args=(url,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    host3 = [x for x in served.read_log() if x.host == "127.0.1.4" and x.path == "/p/0"]
    assert len(host3) == 2
    assert audit(host3, factor=0).overlaps == 1


def test_default_robots_and_sigterm(tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    web = ServerProcess(["--shape", "wide", "--hosts", "2", "--pages", "3"], log_path=str(log_path))
    with web:
        status, _, body, _ = get(web.start_urls[1].replace("/p/0", "/robots.txt"))
        assert (status, body) == (200, b"User-agent: *\nDisallow:\n")
        assert web.expected == {(a, f"/p/{j}") for a in web.allowed_domains for j in range(3)}
    assert web.proc is not None and web.proc.returncode == 0
    assert [(x.path, x.status) for x in read_log(log_path)] == [("/robots.txt", 200)]


def test_three_hundred_hosts() -> None:
    with ServerProcess(["--shape", "wide", "--latency", "0", "0.001"]) as web:
        assert len(web.start_urls) == 300
        for url in (web.start_urls[0], web.start_urls[150], web.start_urls[-1]):
            assert get(url)[0] == 200


def test_cli_audit(tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    log_path.write_text(
        "".join(x.to_json() + "\n" for x in [e(A, "/p/0", 0.0, 0.1), e(A, "/p/1", 0.5, 0.6)])
    )
    expected = tmp_path / "announce.json"
    expected.write_text(json.dumps({"expected": [[A, "/p/0"], [A, "/p/1"], [A, "/p/2"]]}))
    cmd = [sys.executable, "-m", "frontier_testweb", "audit", str(log_path)]
    out = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["short_gaps"] == 1
    strict = subprocess.run(
        cmd + ["--strict", "--expected", str(expected)], capture_output=True, text=True, timeout=60
    )
    assert strict.returncode == 1 and "IMPOLITE" in strict.stdout and "1 missing" in strict.stdout
    lenient = subprocess.run(
        cmd + ["--strict", "--factor", "3"], capture_output=True, text=True, timeout=60
    )
    assert lenient.returncode == 0 and "POLITE" in lenient.stdout


# -- the server, in this process (inside pytest-twisted's running reactor) ---------------------


def _make_doc_tree(root: Path, outside: Path) -> None:
    (root / "sub").mkdir(parents=True)
    for i in range(5):
        (root / f"page{i}.html").write_text(f"<html><title>p{i}</title></html>")
    (root / "index.html").write_text('<html><a href="page0.html">0</a></html>')
    (root / "style.css").write_text("body {}")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "sub" / "index.html").write_text("<html>sub</html>")
    (root / "sub" / "a b.html").write_text("<html>space</html>")
    outside.write_text("secret")
    os.symlink(outside, root / "escape.html")


@pytest.mark.filterwarnings("ignore:Using readBody:DeprecationWarning")  # Twisted's own Agent
@pytest_twisted.inlineCallbacks
def test_in_process_generated_and_doc_hosts(tmp_path: Path) -> Any:
    from twisted.internet import reactor
    from twisted.web.client import Agent, readBody

    docs = tmp_path / "docs"
    _make_doc_tree(docs, tmp_path / "outside.html")
    doc_hosts = doc_tree_hosts(roots=[str(docs)], first_address="127.0.201.1", latency=0.02)
    assert len(doc_hosts) == 1 and doc_hosts[0].pages == 8 and doc_hosts[0].doc_root
    spec = skewed_web(hosts=2, largest=3, latency=(0.03, 0.03)).with_hosts(doc_hosts)
    server = TestWebServer(spec, log_path=str(tmp_path / "log.jsonl"))
    server.start()
    try:
        assert server.start_urls()[-1] == f"http://127.0.201.1:{server.port}/"
        assert server.expected() == {
            (a, f"/p/{j}") for a, n in (("127.0.1.1", 3), ("127.0.1.2", 2)) for j in range(n)
        }
        agent = Agent(reactor)
        base = f"http://127.0.201.1:{server.port}"
        cases = [
            (f"{base}/", 200, "text/html", b"page0.html"),
            (f"{base}/style.css", 200, "text/css", b"body {}"),
            (f"{base}/logo.png", 200, "image/png", b"\x89PNG"),
            (f"{base}/sub/", 200, "text/html", b"sub"),
            (f"{base}/sub/a%20b.html", 200, "text/html", b"space"),
            (f"{base}/escape.html", 404, None, None),
            (f"{base}/sub/../../outside.html", 404, None, None),
            (f"{base}/%2e%2e/outside.html", 404, None, None),
            (f"{base}/missing.html", 404, None, None),
            (server.start_urls()[0].replace("/p/0", "/p/2"), 200, "text/html", b"page 2"),
        ]
        for url, status, ctype, snippet in cases:
            started = time.monotonic()
            response = yield agent.request(b"GET", url.encode())
            body = yield readBody(response)
            assert response.code == status, url
            if ctype is not None:
                got = response.headers.getRawHeaders(b"content-type")[0].decode()
                assert got.startswith(ctype), url
                assert snippet in body, url
            assert time.monotonic() - started >= 0.02
        # Two at once to one host: the in-memory log shows the overlap.
        d1 = agent.request(b"GET", server.start_urls()[1].encode())
        d2 = agent.request(b"GET", server.start_urls()[1].encode())
        for d in (d1, d2):
            response = yield d
            yield readBody(response)
        assert audit([x for x in server.log if x.host == "127.0.1.2"]).overlaps == 1
    finally:
        yield server.stop()
    assert read_log(tmp_path / "log.jsonl") == server.log
    assert len(server.log) == len(cases) + 2


@pytest.mark.filterwarnings("ignore:Using readBody:DeprecationWarning")  # Twisted's own Agent
@pytest_twisted.inlineCallbacks
def test_in_process_listing_when_no_index(tmp_path: Path) -> Any:
    from twisted.internet import reactor
    from twisted.web.client import Agent, readBody

    docs = tmp_path / "docs"
    _make_doc_tree(docs, tmp_path / "outside.html")
    (docs / "index.html").unlink()
    spec = WebSpec(hosts=(HostSpec("127.0.201.2", 7, 0.0, doc_root=str(docs)),), seed=1)
    server = TestWebServer(spec)
    server.start()
    try:
        response = yield Agent(reactor).request(b"GET", server.start_urls()[0].encode())
        body = yield readBody(response)
    finally:
        yield server.stop()
    assert response.code == 200
    assert b'href="/page0.html"' in body and b'href="/sub/a%20b.html"' in body
    assert b"escape.html" not in body  # points outside the tree


def test_doc_tree_search_is_bounded() -> None:
    started = time.monotonic()
    hosts = doc_tree_hosts(max_hosts=2, time_budget=2.0)
    assert time.monotonic() - started < 10.0
    assert len(hosts) <= 2
    for h in hosts:
        assert h.doc_root is not None and os.path.isdir(h.doc_root) and h.pages >= 5
    assert len({h.doc_root for h in hosts}) == len(hosts)
    assert doc_tree_hosts(max_hosts=0) == []


def test_doc_trees_by_size_cap_or_named_in_order(tmp_path: Path) -> None:
    roots = []
    for name, files in (("small", 6), ("big", 12)):
        root = tmp_path / name
        root.mkdir()
        for i in range(files):
            (root / f"p{i}.html").write_text(f"<html><body>{i}</body></html>")
        roots.append(str(root))
    by_size = doc_tree_hosts(max_hosts=2, roots=roots)
    assert [h.pages for h in by_size] == [12, 6]  # the biggest first
    capped = doc_tree_hosts(max_hosts=2, roots=roots, max_pages=10)
    assert [h.pages for h in capped] == [6]  # the 12-page tree is over the cap
    named = doc_tree_hosts(max_hosts=2, roots=roots, keep_order=True)
    assert [h.pages for h in named] == [6, 12]
