"""Reading sitemaps, sitemap indexes, RSS and Atom feeds into change hints."""

from __future__ import annotations

import gzip
import math
from datetime import datetime, timezone

import pytest

from frontier_testweb.signals import atom_feed, sitemap_index, urlset
from scrapy_frontier.core.signals import (
    CHANGEFREQ_SECONDS,
    DTD,
    GZIP_TOO_LARGE,
    MALFORMED,
    TOO_LARGE,
    inflate,
    parse_time,
    read_signals,
)

T = datetime(2026, 12, 1, 8, 30, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-12-01T08:30:00+00:00", T),
    ("2026-12-01T08:30:00Z", T),
    ("2026-12-01T09:30:00+01:00", T),
    ("2026-12-01T08:30Z", T),
    ("2026-12-01T08:30:00.123Z", T),
    ("2026-12-01", datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()),
    ("2026-12", datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()),
    ("Tue, 01 Dec 2026 08:30:00 GMT", T),
    ("Tue, 01 Dec 2026 09:30:00 +0100", T),
    ("yesterday", None), ("2026-13-01", None), ("", None), (None, None),
])
def test_dates_in_the_forms_sitemaps_and_feeds_use(text: str | None,
                                                   expected: float | None) -> None:
    assert parse_time(text) == expected


def test_a_sitemap_gives_each_url_its_lastmod_and_changefreq() -> None:
    body = urlset([("http://a.example/1", T, "hourly"), ("http://a.example/2", T + 60, "never")])
    for data in (body, gzip.compress(body)):
        signals = read_signals(data)
        assert signals.kind == "urlset" and not signals.truncated
        assert [(c.url, c.changed_at, c.changefreq) for c in signals.hints] == [
            ("http://a.example/1", T, 3600.0), ("http://a.example/2", T + 60, math.inf)]


def test_a_sitemap_index_names_its_sitemaps() -> None:
    signals = read_signals(sitemap_index([("http://a.example/s1.xml.gz", T)]))
    assert signals.kind == "sitemapindex" and not signals.hints
    assert [(s.url, s.changed_at) for s in signals.sitemaps] == [("http://a.example/s1.xml.gz",
                                                                   T)]


def test_feeds_rss_and_atom() -> None:
    atom = read_signals(atom_feed("http://a.example", [("http://a.example/1", T)]))
    assert atom.kind == "atom"
    assert [(c.url, c.changed_at) for c in atom.hints] == [("http://a.example/1", T)]
    rss = read_signals(
        b"<?xml version='1.0'?><rss version='2.0'><channel><title>t</title>"
        b"<item><title>x</title><link>http://a.example/2</link>"
        b"<pubDate>Tue, 01 Dec 2026 08:30:00 GMT</pubDate></item>"
        b"<item><link>mailto:someone</link></item></channel></rss>")
    assert rss.kind == "rss"
    assert [(c.url, c.changed_at) for c in rss.hints] == [("http://a.example/2", T)]


def test_a_lastmod_that_does_not_parse_is_no_claim_of_time() -> None:
    body = (b"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'><url>"
            b"<loc>http://a.example/1</loc><lastmod>soon</lastmod><changefreq>often"
            b"</changefreq></url></urlset>")
    [hint] = read_signals(body).hints
    assert hint.changed_at is None and hint.changefreq is None


def test_other_documents_and_garbage_claim_nothing() -> None:
    html = read_signals(b"<html><body>hi</body></html>")
    assert html.kind == "other" and html.refused is None  # XML, but not a signal
    for garbage in (b"not xml at all", b"\x1f\x8bnot gzip", b"<?xml version='1.0'?><urlset",
                    gzip.compress(b"not xml")):
        signals = read_signals(garbage)
        assert signals.hints == [] and signals.refused == MALFORMED, garbage
    cut = urlset([("http://a.example/1", T, "daily"), ("http://a.example/2", T, "daily")])
    half = read_signals(cut[: len(cut) - 40])
    assert half.truncated and [c.url for c in half.hints] == ["http://a.example/1"]


def test_a_document_type_declaration_is_refused() -> None:
    bomb = (b"<?xml version='1.0'?><!DOCTYPE u [<!ENTITY a 'aaaaaaaaaa'>"
            b"<!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;'>]>"
            b"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'><url>"
            b"<loc>http://a.example/&b;</loc></url></urlset>")
    signals = read_signals(bomb)
    assert signals.kind == "other" and not signals.hints and signals.refused == DTD


_ENTITY = b'<!DOCTYPE urlset [<!ENTITY e "http://a.example/expanded">]>'
_USES_IT = (b"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'><url>"
            b"<loc>&e;</loc></url></urlset>")


@pytest.mark.parametrize("body", [
    b"<?xml version='1.0'?>" + _ENTITY + _USES_IT,
    # Past the first 64 KB, and in UTF-16: no byte search finds these declarations.
    b"<?xml version='1.0'?><!--" + b"x" * 70_000 + b"-->" + _ENTITY + _USES_IT,
    ("<?xml version='1.0' encoding='UTF-16'?>" + (_ENTITY + _USES_IT).decode()
     ).encode("utf-16"),
    gzip.compress(b"<?xml version='1.0'?>" + _ENTITY + _USES_IT),
    # An external DTD and an external entity: refused before either could be fetched.
    b"<?xml version='1.0'?><!DOCTYPE urlset SYSTEM 'http://127.0.0.1:9/evil.dtd'>" + _USES_IT,
    b"<?xml version='1.0'?><!DOCTYPE urlset [<!ENTITY e SYSTEM 'file:///etc/passwd'>]>"
    + _USES_IT,
], ids=["internal", "late", "utf16", "gzip", "external-dtd", "external-entity"])
def test_an_entity_is_never_expanded(body: bytes) -> None:
    signals = read_signals(body)
    assert signals.refused == DTD and signals.hints == [] and signals.kind == "other"


def test_a_billion_laughs_is_refused_at_once() -> None:
    laughs = [b'<!ENTITY l0 "ha">'] + [
        f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">'.encode() for i in range(1, 10)]
    body = (b"<?xml version='1.0'?><!DOCTYPE urlset [" + b"".join(laughs) + b"]>"
            b"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'><url>"
            b"<loc>http://a.example/&l9;</loc></url></urlset>")
    assert read_signals(body).refused == DTD


def _gzip_bomb(inflated: int) -> bytes:
    """gzip of ``inflated`` zero bytes (whole MiB), as members of a MiB each: a few KB."""
    member = gzip.compress(bytes(1 << 20), mtime=0)
    return member * (inflated >> 20)


def test_a_gzip_bomb_is_refused_having_inflated_no_more_than_the_limit() -> None:
    bomb = _gzip_bomb(1 << 30)  # 1 GiB of zeros
    assert len(bomb) < 2 << 20
    assert read_signals(bomb).refused == GZIP_TOO_LARGE
    # Valid XML, then whitespace to a GiB: the same, not a parse error.
    head = gzip.compress(b"<?xml version='1.0'?><urlset xmlns="
                         b"'http://www.sitemaps.org/schemas/sitemap/0.9'>", mtime=0)
    spaces = gzip.compress(b" " * (1 << 20), mtime=0)
    assert read_signals(head + spaces * 1024).refused == GZIP_TOO_LARGE
    assert inflate(_gzip_bomb(8 << 20), max_bytes=(4 << 20)) == GZIP_TOO_LARGE
    assert inflate(_gzip_bomb(4 << 20), max_bytes=(4 << 20)) == bytes(4 << 20)


def test_a_sitemap_larger_than_the_protocol_allows_is_refused() -> None:
    body = urlset([(f"http://a.example/{i}", T, "daily") for i in range(120)])
    assert read_signals(body, max_bytes=len(body)).refused is None
    assert read_signals(body, max_bytes=len(body) - 1).refused == TOO_LARGE
    assert read_signals(gzip.compress(body), max_bytes=len(body) - 1).refused == GZIP_TOO_LARGE


def test_the_protocols_limits_stop_the_reading() -> None:
    many = urlset([(f"http://a.example/{i}", T, "daily") for i in range(120)])
    signals = read_signals(many, max_urls=100)
    assert signals.truncated and len(signals.hints) == 100 and signals.refused is None
    assert set(CHANGEFREQ_SECONDS) == {"always", "hourly", "daily", "weekly", "monthly",
                                       "yearly", "never"}


def test_a_document_of_empty_elements_is_cut_after_its_element_budget() -> None:
    from scrapy_frontier.core.signals import ELEMENTS_PER_URL

    body = (b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + b"<a/>" * (ELEMENTS_PER_URL * 10 + 50)
            + b"<url><loc>http://a.example/late</loc></url></urlset>")
    signals = read_signals(body, max_urls=10)
    assert signals.truncated and signals.hints == []
