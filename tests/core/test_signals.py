"""Reading sitemaps, sitemap indexes, RSS and Atom feeds into change hints."""

from __future__ import annotations

import gzip
import math
from datetime import datetime, timezone

import pytest

from frontier_testweb.signals import atom_feed, sitemap_index, urlset
from scrapy_frontier.core.signals import CHANGEFREQ_SECONDS, parse_time, read_signals

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
    assert read_signals(b"<html><body>hi</body></html>").kind == "other"
    assert read_signals(b"not xml at all").hints == []
    assert read_signals(b"\x1f\x8bnot gzip").hints == []
    cut = urlset([("http://a.example/1", T, "daily"), ("http://a.example/2", T, "daily")])
    half = read_signals(cut[: len(cut) - 40])
    assert half.truncated and [c.url for c in half.hints] == ["http://a.example/1"]


def test_a_document_type_declaration_is_refused() -> None:
    bomb = (b"<?xml version='1.0'?><!DOCTYPE u [<!ENTITY a 'aaaaaaaaaa'>"
            b"<!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;'>]>"
            b"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'><url>"
            b"<loc>http://a.example/&b;</loc></url></urlset>")
    signals = read_signals(bomb)
    assert signals.kind == "other" and not signals.hints


def test_the_protocols_limits_stop_the_reading() -> None:
    many = urlset([(f"http://a.example/{i}", T, "daily") for i in range(120)])
    signals = read_signals(many, max_urls=100)
    assert signals.truncated and len(signals.hints) == 100
    assert read_signals(many, max_bytes=2000).truncated
    assert set(CHANGEFREQ_SECONDS) == {"always", "hourly", "daily", "weekly", "monthly",
                                       "yearly", "never"}
