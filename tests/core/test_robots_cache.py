"""RFC 9309's rules for keeping a robots.txt answer, and the checks of a stored record."""

from __future__ import annotations

import pytest

from scrapy_frontier.codec import RowKeys
from scrapy_frontier.core.robots_cache import (
    MAX_AGE,
    MAX_BODY,
    STALE_LIMIT,
    RobotsRecord,
    check_origin,
    decode,
    definitive,
    encode,
    record_of,
    seal,
    stand_in,
    unreachable,
    unseal,
)

NOW = 1_700_000_000.0


@pytest.mark.parametrize(("status", "kept"), [
    (200, True), (203, True), (299, True),
    # 4xx but 429: "unavailable", allow all: kept (without a body).
    (400, True), (401, True), (403, True), (404, True), (410, True), (499, True),
    # Unreachable: disallow all while it lasts; never kept, asked again next time.
    (429, False), (500, False), (503, False), (599, False),
    # A redirect left unfollowed (too many hops, or redirects off) says nothing.
    (301, False), (302, False), (304, False), (100, False), (600, False),
])
def test_only_definitive_answers_are_kept(status: int, kept: bool) -> None:
    assert definitive(status) is kept
    record = record_of(status, b"User-agent: *\nDisallow: /\n", NOW)
    assert (record is not None) is kept


def test_a_2xx_keeps_its_body_up_to_500_kib_and_a_4xx_none() -> None:
    big = b"#" * (MAX_BODY + 10)
    record = record_of(200, big, NOW)
    assert record is not None and record.body == big[:MAX_BODY] and MAX_BODY == 500 * 1024
    gone = record_of(404, b"<html>Not found</html>", NOW)
    assert gone == RobotsRecord(404, b"", NOW)  # allow all, whatever the page says


def test_a_record_reads_back_as_written() -> None:
    for record in (RobotsRecord(200, b"User-agent: *\nDisallow: /a\n\xff\x00\n", NOW),
                   RobotsRecord(200, b"", NOW), RobotsRecord(410, b"", NOW + 0.125)):
        assert decode(encode(record), NOW) == record
    as_text = encode(RobotsRecord(200, b"Disallow: /x", NOW)).decode()  # decode_responses
    assert decode(as_text, NOW).body == b"Disallow: /x"


@pytest.mark.parametrize("raw", [
    None, 12, b"", b"robots1 200 1.0", b"robots2 200 1.0\nx", b"robots1 200\nx",
    b"robots1 x 1.0\n", b"robots1 200 nan\n", b"robots1 200 inf\n", b"robots1 500 1.0\n",
    b"robots1 429 1.0\n", b"robots1 302 1.0\n", b"robots1 404 1.0\nDisallow: /",
    b"robots1 200 1.0\n" + b"x" * (MAX_BODY + 1),
    b"robots1 200 %r\nx" % (NOW + 3600),  # from the future: would stay fresh too long
])
def test_anything_else_is_refused(raw: object) -> None:
    with pytest.raises(ValueError):
        decode(raw, NOW)


def test_a_record_is_fresh_for_its_max_age_by_the_clock_given() -> None:
    record = RobotsRecord(200, b"", NOW)
    assert record.fresh(NOW, MAX_AGE)
    assert record.fresh(NOW + MAX_AGE - 0.001, MAX_AGE)
    assert not record.fresh(NOW + MAX_AGE, MAX_AGE)
    assert not record.fresh(NOW + 61, 60.0)
    assert record.fresh(NOW - 10, MAX_AGE)  # another worker's clock a little ahead
    assert not record.fresh(NOW - 3600, MAX_AGE)


@pytest.mark.parametrize(("status", "unreached"), [
    (None, True), (500, True), (503, True), (599, True), (429, True),
    # Definitive answers, and redirects left unfollowed, are not "unreachable".
    (200, False), (404, False), (403, False), (408, False), (301, False), (100, False),
    (600, False),
])
def test_5xx_429_and_no_answer_say_the_file_is_unreachable(
        status: int | None, unreached: bool) -> None:
    assert unreachable(status) is unreached
    if status is not None:
        assert not (unreached and definitive(status))  # an unreachable answer is never kept


def test_a_kept_copy_stands_in_for_an_unreachable_answer_for_30_days() -> None:
    kept = RobotsRecord(200, b"User-agent: *\nDisallow: /private\n", NOW)
    assert STALE_LIMIT == 30 * 86400.0
    for status in (500, 503, 429, None):
        assert stand_in(kept, status, NOW + MAX_AGE + 1) is kept  # stale: it answers
    assert stand_in(kept, 503, NOW + STALE_LIMIT - 0.001) is kept
    assert stand_in(kept, 503, NOW + STALE_LIMIT) is None  # 30 days: Scrapy's way
    assert stand_in(kept, 503, NOW - 3600) is None  # fetched in the future: never
    assert stand_in(None, 503, NOW + MAX_AGE) is None  # nothing kept: Scrapy's way
    gone = RobotsRecord(404, b"", NOW)
    assert stand_in(gone, None, NOW + MAX_AGE) is gone  # a kept "allow all" stands in too
    # A definitive answer (or an unfollowed redirect) stands: it is the site's rules now.
    for status in (200, 404, 403, 301):
        assert stand_in(kept, status, NOW + MAX_AGE + 1) is None
    assert kept.may_stand_in(NOW + 10 * 86400) and not kept.fresh(NOW + 10 * 86400, MAX_AGE)


def test_origins_are_scheme_host_and_port_only() -> None:
    assert check_origin("http://example.com:8080") == "http://example.com:8080"
    assert check_origin("https://[::1]:443") == "https://[::1]:443"
    for bad in ("ftp://example.com", "http://example.com/robots.txt", "example.com",
                "http://exa mple.com", "http://x\n", "http://" + "a" * 3000):
        with pytest.raises(ValueError):
            check_origin(bad)


KEYS = RowKeys(["k" * 32])
ORIGIN = "http://a.example"


def test_a_sealed_record_reads_back_for_its_origin_only_with_a_key_that_verifies() -> None:
    stored = encode(RobotsRecord(200, b"Disallow: /x", NOW))
    sealed = seal(KEYS, ORIGIN, stored)
    assert sealed[:1] == b"\x03"
    assert unseal(KEYS, ORIGIN, sealed) == stored
    assert unseal(KEYS, ORIGIN, sealed.decode("utf-8", "surrogateescape")) == stored
    rotated = RowKeys(["n" * 32, "k" * 32])  # a new key first, the old one still listed
    assert unseal(rotated, ORIGIN, sealed) == stored
    assert unseal(None, ORIGIN, stored) == stored  # no keys: read as it is, then checked


@pytest.mark.parametrize(("keys", "raw", "why"), [
    # With keys: a record without a seal, as a client without the key writes it.
    (KEYS, encode(RobotsRecord(200, b"Allow: /", NOW)), "not sealed"),
    # Sealed with a key not listed, or damaged, or cut short.
    (KEYS, seal(RowKeys(["o" * 32]), ORIGIN, b"robots1 200 1.0\nAllow: /"), "matches no key"),
    (KEYS, seal(KEYS, ORIGIN, b"robots1 200 1.0\nDisallow: /")[:-1] + b"!", "matches no key"),
    (KEYS, b"\x03", "matches no key"),
    # Another site's record, copied to this site's key.
    (KEYS, seal(KEYS, "http://b.example", b"robots1 200 1.0\nAllow: /"), "another site"),
    (KEYS, seal(KEYS, ORIGIN + ":80", b"robots1 200 1.0\nAllow: /"), "another site"),
    (KEYS, KEYS.seal(b"robots1 200 1.0\nAllow: /"), "another site"),
    (KEYS, 12, "not bytes"),
    # Without keys a sealed record is not read (it cannot be verified).
    (None, seal(KEYS, ORIGIN, b"robots1 200 1.0\n"), "FRONTIER_SIGNING_KEYS is not set"),
])
def test_a_record_that_is_not_sealed_for_its_origin_is_refused(
        keys: RowKeys | None, raw: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        unseal(keys, ORIGIN, raw)
