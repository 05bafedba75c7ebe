"""The test web's sitemaps and feeds: truthful, liar, noisy and silent hosts."""

from __future__ import annotations

import gzip
import time
import urllib.error
import urllib.request
from datetime import datetime
from email.utils import parsedate_to_datetime
from xml.etree import ElementTree

from frontier_testweb import ServerProcess
from frontier_testweb.signals import FEED_ENTRIES, KINDS, host_kind

SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
ATOM = "{http://www.w3.org/2005/Atom}"
# Four hosts (one of each kind), pages that change every 0.2 s on average.
WEB = ["--shape", "wide", "--hosts", "4", "--pages", "30", "--latency", "0.0", "0.0",
       "--signals", "--change-rate", "5", "--changing-fraction", "0.5", "--seed", "7"]


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback only
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
