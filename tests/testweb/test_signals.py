"""The test web's sitemaps and feeds: truthful, liar, noisy, silent and stamped hosts, host
kinds by list (``--kinds``), and the test's small edits (``--edits``)."""

from __future__ import annotations

import gzip
import json
import time
import urllib.error
import urllib.request
from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from xml.etree import ElementTree

import pytest

from frontier_testweb import (
    ChangeOptions,
    ServerProcess,
    TestWebServer,
    edit_page,
    read_log,
    wide_web,
)
from frontier_testweb.__main__ import main
from frontier_testweb.signals import ALL_KINDS, FEED_ENTRIES, KINDS, host_kind, parse_kinds

SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
ATOM = "{http://www.w3.org/2005/Atom}"
# Four hosts (one of each kind), pages that change every 0.2 s on average.
WEB = ["--shape", "wide", "--hosts", "4", "--pages", "30", "--latency", "0.0", "0.0",
       "--signals", "--change-rate", "5", "--changing-fraction", "0.5", "--seed", "7"]


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:  # noqa: S310 - loopback only
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _when(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_each_kind_of_host_claims_what_it_is_meant_to() -> None:
    with ServerProcess(WEB) as web:
        hosts = web.info["hosts"]
        assert [h["signals"] for h in hosts] == list(KINDS)
        started_wall = float(web.info["started_wall"])
        time.sleep(1.5)  # let pages change: the truthful lastmods move past the start
        for i, host in enumerate(hosts):
            base = f"http://{host['address']}:{web.info['port']}"
            kind = host_kind(i)
            _, _, robots = _get(base + "/robots.txt")
            status, _, index = _get(base + "/sitemap.xml")
            if kind == "silent":
                assert b"Sitemap:" not in robots and status == 404
                assert _get(base + "/feed.atom")[0] == 404
                continue
            assert f"Sitemap: {base}/sitemap.xml".encode() in robots
            children = [e.findtext(f"{SM}loc") for e in ElementTree.fromstring(index)]
            assert children == [base + "/sitemap-1.xml.gz", base + "/sitemap-2.xml"]
            asked = time.time()
            urls = []
            for child in children:
                assert child is not None
                status, headers, body = _get(child)
                assert status == 200
                if child.endswith(".gz"):
                    assert headers["Content-Type"] == "application/gzip"
                    body = gzip.decompress(body)
                urls += [(u.findtext(f"{SM}loc"), u.findtext(f"{SM}lastmod"),
                          u.findtext(f"{SM}changefreq")) for u in ElementTree.fromstring(body)]
            assert [u[0] for u in urls] == [f"{base}/p/{j}" for j in range(30)]
            moved = 0
            for loc, lastmod, freq in urls:
                assert loc is not None and lastmod is not None
                claim = _when(lastmod)
                _, page_headers, _ = _get(loc)
                real = parsedate_to_datetime(page_headers["Last-Modified"]).timestamp()
                if kind == "truthful":
                    # The page's own Last-Modified, unless it changed between the two requests.
                    assert claim <= real and (claim == real or real >= asked - 1), (loc, claim)
                    moved += claim > int(started_wall)
                elif kind == "liar":
                    assert claim == int(started_wall) and freq == "never"
                else:
                    assert claim >= int(asked) - 1
            if kind == "truthful":
                assert moved > 0, "no truthful lastmod moved: the pages did not change"
            _, _, feed = _get(base + "/feed.atom")
            entries = ElementTree.fromstring(feed).findall(f"{ATOM}entry")
            assert len(entries) == FEED_ENTRIES
            updated = [_when(e.findtext(f"{ATOM}updated") or "") for e in entries]
            assert updated == sorted(updated, reverse=True)


def test_signals_are_off_unless_asked() -> None:
    with ServerProcess(WEB[:-7]) as web:
        host = web.info["hosts"][0]
        assert "signals" not in host
        base = f"http://{host['address']}:{web.info['port']}"
        assert _get(base + "/sitemap.xml")[0] == 404
        assert b"Sitemap:" not in _get(base + "/robots.txt")[2]


def test_an_index_may_name_sitemaps_of_other_hosts() -> None:
    with ServerProcess([*WEB, "--foreign-sitemap", "0", "1", "--foreign-sitemap", "0", "3"]) \
            as web:
        port = web.info["port"]
        bases = [f"http://{h['address']}:{port}" for h in web.info["hosts"]]
        status, _, index = _get(bases[0] + "/sitemap.xml")
        assert status == 200
        children = [e.findtext(f"{SM}loc") for e in ElementTree.fromstring(index)]
        assert children == [bases[0] + "/sitemap-1.xml.gz", bases[0] + "/sitemap-2.xml",
                            bases[1] + "/sitemap-2.xml", bases[3] + "/sitemap-2.xml"]
        # Only the naming host's index changes.
        _, _, other = _get(bases[1] + "/sitemap.xml")
        assert bases[0].encode() not in other and bases[3].encode() not in other


# -- host kinds by list (--kinds), stamped hosts and small edits (--edits) --------------------


def _post(url: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:  # noqa: S310 - loopback only
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _claims(base: str) -> dict[str, tuple[float, str]]:
    """Path -> (lastmod, changefreq) of every page in a host's two sitemaps."""
    out = {}
    for child in ("/sitemap-1.xml.gz", "/sitemap-2.xml"):
        status, _, body = _get(base + child)
        assert status == 200
        for u in ElementTree.fromstring(gzip.decompress(body) if child.endswith(".gz")
                                        else body):
            loc, lastmod = u.findtext(f"{SM}loc"), u.findtext(f"{SM}lastmod")
            assert loc is not None and lastmod is not None
            out[loc.removeprefix(base)] = (_when(lastmod), u.findtext(f"{SM}changefreq") or "")
    return out


def test_kinds_are_read_from_a_list() -> None:
    assert parse_kinds("truthful,stamped") == ("truthful", "stamped")
    assert parse_kinds(" liar , noisy,,liar ") == ("liar", "noisy", "liar")
    assert parse_kinds(",".join(ALL_KINDS)) == ALL_KINDS
    assert [host_kind(i, ("stamped", "liar")) for i in range(5)] == \
        ["stamped", "liar", "stamped", "liar", "stamped"]
    for bad, says in (("", "no host kind given"), (" , ", "no host kind given"),
                      ("truthful,bogus", "unknown host kind 'bogus'"),
                      ("Truthful", "unknown host kind 'Truthful'")):
        with pytest.raises(ValueError, match=says) as error:
            parse_kinds(bad)
        assert "the kinds are truthful, liar, noisy, silent, stamped" in str(error.value)


@pytest.mark.parametrize(("args", "says"), [
    (["--signals", "--kinds", "truthful,bogus"],
     "argument --kinds: unknown host kind 'bogus'; the kinds are truthful, liar, noisy, "
     "silent, stamped"),
    (["--signals", "--kinds", ""], "argument --kinds: no host kind given"),
    (["--kinds", "truthful"], "--kinds gives the hosts' kinds of --signals: add --signals"),
    (["--edits", "--change-rate", "1"], "--edits: pages change only by the test's edits"),
    (["--edits", "--changing-fraction", "0.5"], "--edits: pages change only by"),
    (["--edits", "--rate-shape", "2"], "--rate-shape would be ignored"),
])
def test_bad_kinds_and_edits_are_refused_with_the_reason(
        args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--shape", "wide", "--hosts", "2", "--pages", "2", *args])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ") and says in err.splitlines()[-1], err


def test_the_server_refuses_bad_kinds_and_a_change_rate_with_edits() -> None:
    spec = wide_web(hosts=2, pages=2)
    with pytest.raises(ValueError, match="unknown host kind 'bogus'"):
        TestWebServer(spec, signals=True, kinds=("truthful", "bogus"))
    with pytest.raises(ValueError, match="no host kind given"):
        TestWebServer(spec, signals=True, kinds=())
    with pytest.raises(ValueError, match="a change rate"):
        TestWebServer(spec, edits=True, changes=ChangeOptions(rate=1.0))
    assert TestWebServer(spec, edits=True).changes is not None  # edits need the model
    assert TestWebServer(spec, edits=True, changes=ChangeOptions(noisy_fraction=0.5)).edits


def test_edits_change_pages_and_the_claims_of_truthful_and_stamped_hosts(
        tmp_path: Path) -> None:
    """Three kinds on four hosts (the fourth is truthful again): a page changes only when
    the test edits it; a truthful or stamped host's lastmod is then the edit's time, a
    liar's stays at the start; a stamped page differs on every response and has no
    validators; edits are not logged."""
    log_path = tmp_path / "log.jsonl"
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "4", "--latency", "0", "0",
                "--seed", "3", "--signals", "--edits", "--kinds", "truthful,stamped,liar"]
    with ServerProcess(web_args, log_path=str(log_path)) as web:
        info = web.info
        assert [h["signals"] for h in info["hosts"]] == ["truthful", "stamped", "liar",
                                                          "truthful"]
        assert info["edits"] is True and info["changes"]["rate"] == 0.0
        started = int(float(info["started_wall"]))
        truthful, stamped, liar, _ = (f"http://{h['address']}:{info['port']}"
                                      for h in info["hosts"])
        # Before any edit: a page stays as it is (a 304 for its ETag), every claim is the start.
        status, headers, before = _get(truthful + "/p/1")
        assert status == 200 and "ETag" in headers and b"revision" not in before
        assert _get(truthful + "/p/1", {"If-None-Match": headers["ETag"]})[0] == 304
        for base in (truthful, stamped, liar):
            claims = _claims(base)
            assert sorted(claims) == [f"/p/{j}" for j in range(4)]
            assert {when for when, _ in claims.values()} == {started}
            assert {freq for _, freq in claims.values()} == \
                {"never" if base == liar else "hourly"}
        # A stamped page: new bytes on every response, no validators, so never a 304.
        first = _get(stamped + "/p/1")
        second = _get(stamped + "/p/1")
        for status, stamped_headers, _ in (first, second):
            assert status == 200 and "ETag" not in stamped_headers
            assert "Last-Modified" not in stamped_headers
        assert first[2] != second[2]
        assert _get(stamped + "/p/1", {"If-None-Match": "*"})[0] == 200
        # One edit of page 1 on each host.
        edits = {base: edit_page(base + "/p/1") for base in (truthful, stamped, liar)}
        for answer in edits.values():
            assert answer["edits"] == 1 and started <= answer["at"] <= time.time()
        assert edit_page(truthful + "/p/1")["edits"] == 2
        again = json.loads(_post(truthful + "/_edit/p/1")[1])
        assert again["edits"] == 3 and again["at"] >= edits[truthful]["at"]
        status, headers_after, after = _get(truthful + "/p/1")
        assert status == 200 and after != before and b"revision3" in after
        assert headers_after["ETag"] != headers["ETag"]
        assert parsedate_to_datetime(headers_after["Last-Modified"]).timestamp() == \
            int(again["at"])
        assert _get(truthful + "/p/1", {"If-None-Match": headers["ETag"]})[0] == 200
        assert _get(truthful + "/p/1", {"If-None-Match": headers_after["ETag"]})[0] == 304
        assert b"revision1" in _get(stamped + "/p/1")[2] and b"revision1" in _get(liar + "/p/1")[2]
        # The claims: the last edit's time on the truthful and stamped hosts, page 1 only.
        assert _claims(truthful)["/p/1"][0] == int(again["at"])
        assert _claims(stamped)["/p/1"][0] == int(edits[stamped]["at"])
        assert {_claims(base)["/p/0"][0] for base in (truthful, stamped)} == {started}
        assert {when for when, _ in _claims(liar).values()} == {started}
        # No such page, or no page path: 404, nothing edited.
        for path in ("/_edit/p/4", "/_edit/p/x", "/_edit/robots.txt", "/_edit/"):
            status, body = _post(truthful + path)
            assert status == 404 and json.loads(body) == {"error": "no such page"}, path
    entries = [(e.host, e.path, e.version) for e in read_log(log_path)]
    assert not [e for e in entries if e[1].startswith("/_edit")]
    address = truthful.removeprefix("http://").rsplit(":", 1)[0]
    assert [v for h, p, v in entries if (h, p) == (address, "/p/1")] == [0, 0, 3, 3, 3]
