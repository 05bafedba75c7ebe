"""The request codec of the SQLite state: every request shape comes back identical."""

from __future__ import annotations

import datetime
import decimal
import os
import pickle
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import FormRequest, Request, Spider
from scrapy.http import JsonRequest
from scrapy.http.headers import Headers
from scrapy.settings import Settings
from scrapy.utils.request import request_from_dict

from scrapy_frontier import codec as codec_module
from scrapy_frontier.backends.sqlite.files import exposed
from scrapy_frontier.backends.sqlite.queue import SQLiteStore
from scrapy_frontier.codec import COMPACT, FULL, RowKeys, RowTrust, request_codec, saved_url
from scrapy_frontier.errors import (
    FrontierConfigError,
    StoreError,
    UndecodableRow,
    Unserializable,
    UntrustedRow,
)
from scrapy_frontier.hostkey import PLAIN_URL
from scrapy_frontier.settings import signing_keys


class CodecSpider(Spider):
    name = "codec"

    def parse_page(self, response: Any) -> None:
        pass

    def on_error(self, failure: Any) -> None:
        pass

    alias = parse_page  # two names, one function: to_dict picks the first by name


class MyRequest(Request):
    pass


def same(a: Request, b: Request) -> None:
    """Identical for Scrapy: class, every attribute, and what to_dict makes of it."""
    assert type(a) is type(b)
    for attr in a.attributes:
        va, vb = getattr(a, attr), getattr(b, attr)
        assert va == vb, attr
        assert type(va) is type(vb), attr
    assert a.headers.encoding == b.headers.encoding
    spider = CodecSpider()
    assert a.to_dict(spider=spider) == b.to_dict(spider=spider)


def shapes(spider: CodecSpider) -> list[Request]:
    return [
        Request("http://h1.example/p/1"),
        Request("https://www.example.com/"),
        Request("http://a.example/p?b=2&a=1#frag"),
        Request("http://a.example/r\u00e9sum\u00e9 x", encoding="latin-1"),
        Request("http://b\u00fccher.example/x"),
        Request("http://[::1]:8080/a/../b"),
        Request("data:text/plain,hello"),
        Request("http://a.example/%7euser", meta={"verbatim_url": True}),
        Request(
            "http://a.example/post",
            method="post",
            headers={"X-A": ["1", "2"], "Accept": "text/html", b"Raw": b"v"},
            body="caf\u00e9",
            cookies={"session": "s1"},
            meta={"depth": 3, "nested": {"a": [1, 2.5, None, True]}, "t": (1, "x")},
            priority=-7,
            dont_filter=True,
            flags=["cached", "x"],
            cb_kwargs={"page": 2, "tags": ["a"]},
            callback=spider.parse_page,
            errback=spider.on_error,
        ),
        Request("http://a.example/c", cookies=[{"name": "n", "value": "v", "domain": "a"}]),
        Request("http://a.example/alias", callback=spider.alias),
        Request("http://a.example/e", body=b"\x00\xff", encoding="cp1252"),
        FormRequest("http://a.example/form", formdata={"q": "x y", "n": "1"}),
        FormRequest("http://a.example/form2", method="GET", formdata={"q": "z"}),
        JsonRequest("http://a.example/api", data={"k": [1, 2]}, dumps_kwargs={"indent": 1}),
        MyRequest("http://a.example/mine", meta={"m": 1}, callback=spider.parse_page),
    ]


#: Scrapy >= 2.15: Request keeps headers, cookies and flags in private slots, the layout
#: the compact form reads. Older Scrapy must get the full form (Request.to_dict).
SLOTTED = "_headers" in Request.__dict__.get("__slots__", ())


def expected_tag(request: Request, compact: bool) -> int:
    return COMPACT if compact and SLOTTED and type(request) is Request else FULL


@pytest.mark.parametrize("compact", [True, False], ids=["probed", "forced-to_dict"])
@pytest.mark.parametrize("index", range(len(shapes(CodecSpider()))))
def test_every_request_shape_round_trips(index: int, compact: bool) -> None:
    spider = CodecSpider()
    codec = request_codec(spider, compact=compact)
    request = shapes(spider)[index]
    data = codec.encode(request)
    assert data[0] == expected_tag(request, compact)
    back = codec.decode(data)
    same(back, request)
    # And as Scrapy's own to_dict round trip rebuilds it.
    same(back, request_from_dict(request.to_dict(spider=spider), spider=spider))
    assert back.callback == request.callback and back.errback == request.errback


def test_the_compact_form_is_used_exactly_where_request_has_its_slots() -> None:
    codec = request_codec(CodecSpider())
    data = codec.encode(Request("http://h1.example/p/1"))
    full = pickle.dumps(Request("http://h1.example/p/1").to_dict(), protocol=5)
    if SLOTTED:  # the newest Scrapy must not lose the fast path to a too strict probe
        assert data[0] == COMPACT
        assert len(data) < 100
        assert len(data) < len(full)
    else:
        assert data[0] == FULL


def compact_row(request: Request, callback: str | None = None) -> bytes:
    """A compact row as a Scrapy with the slotted layout writes it (the documented tuple)."""
    return bytes([COMPACT]) + pickle.dumps((
        request.url, callback, None, request.method, dict(request.headers) or None,
        request.body, request.cookies or None, dict(request.meta) or None, request.encoding,
        request.priority, request.dont_filter, list(request.flags) or None,
        dict(request.cb_kwargs) or None,
    ), protocol=5)


@pytest.mark.parametrize("compact", [True, False], ids=["probed", "forced-to_dict"])
def test_compact_rows_are_read_by_a_codec_that_does_not_write_them(compact: bool) -> None:
    """A JOBDIR written on a newer Scrapy resumes on an older one (and the other way)."""
    spider = CodecSpider()
    codec = request_codec(spider, compact=compact)
    for request in (
        Request("http://h1.example/p/1"),
        Request("http://a.example/r\u00e9sum\u00e9 x", encoding="latin-1"),
        Request("http://a.example/post", method="POST", headers={"X-A": ["1", "2"]},
                body=b"b", cookies={"c": "v"}, meta={"m": [1]}, priority=4,
                dont_filter=True, flags=["f"], cb_kwargs={"k": 1},
                callback=spider.parse_page),
    ):
        name = "parse_page" if request.callback else None
        same(codec.decode(compact_row(request, name)), request)


def test_an_unknown_request_layout_is_saved_with_to_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_module, "_KNOWN_SLOTS", codec_module._KNOWN_SLOTS | {"_new"})
    codec = request_codec(CodecSpider())
    request = Request("http://h1.example/p/1", meta={"a": 1})
    data = codec.encode(request)
    assert data[0] == FULL
    same(codec.decode(data), request)


def test_a_fill_that_differs_from_init_falls_back_to_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class OtherHeaders(Headers):
        pass

    monkeypatch.setattr(codec_module, "Headers", OtherHeaders)  # fill now builds the wrong type
    codec = request_codec(CodecSpider())
    request = Request("http://h1.example/p/1", headers={"X-A": "1"})
    back = codec.decode(codec.encode(request))
    assert type(back.headers) is Headers
    same(back, request)


@given(
    path=st.text(alphabet="abcAZ09-._~/%?#=& \u00e9", max_size=12),
    method=st.sampled_from(["GET", "POST", "put"]),
    body=st.binary(max_size=8),
    priority=st.integers(-(2**40), 2**40),
    meta=st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3),
    dont_filter=st.booleans(),
    headers=st.dictionaries(
        st.sampled_from(["X-A", "Accept", "x-b"]), st.text("abc", max_size=3), max_size=2
    ),
    compact=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_random_requests_round_trip(
    path: str, method: str, body: bytes, priority: int, meta: dict[str, Any],
    dont_filter: bool, headers: dict[str, str], compact: bool,
) -> None:
    spider = CodecSpider()
    codec = request_codec(spider, compact=compact)
    try:
        request = Request(
            f"http://h.example/{path}", method=method, body=body, priority=priority,
            meta=meta, dont_filter=dont_filter, headers=headers,
        )
    except ValueError:
        return
    same(codec.decode(codec.encode(request)), request)


def test_plain_urls_are_unchanged_by_safe_url_string() -> None:
    for url in ("http://h1.example/p/1", "https://a-b.example.org/x.y/z~_-/", "http://a.b/"):
        assert PLAIN_URL.fullmatch(url)
        assert Request(url).url == url
    # Dot segments, and hosts whose last label is a number, which WHATWG parsing reads as IPv4.
    for url in ("http://a.example/./b", "http://a.example/a/../b", "http://0/", "http://1.2.3/",
                "http://a.0x1f/", "http://a.0x/", "http://a.09/", "http://127.0.0.1/"):
        assert not PLAIN_URL.fullmatch(url), url
    assert PLAIN_URL.fullmatch("http://a.0xg/") and PLAIN_URL.fullmatch("http://0a.example/")


@given(
    scheme=st.sampled_from(["http", "https"]),
    labels=st.lists(st.text("az09x-", min_size=1, max_size=6), min_size=1, max_size=3),
    segments=st.lists(st.text("aZ09._~-", max_size=5), max_size=4),
    slash=st.booleans(),
    encoding=st.sampled_from(["utf-8", "latin-1", "cp1252"]),
    compact=st.booleans(),
)
@settings(max_examples=1000, deadline=None)
def test_every_plain_url_is_a_fixed_point_of_request(
    scheme: str, labels: list[str], segments: list[str], slash: bool, encoding: str,
    compact: bool,
) -> None:
    url = f"{scheme}://{'.'.join(labels)}/{'/'.join(segments)}{'/' if slash else ''}"
    if not PLAIN_URL.fullmatch(url):
        return
    request = Request(url, encoding=encoding)
    assert request.url == url
    codec = request_codec(CodecSpider(), compact=compact)
    same(codec.decode(codec.encode(request)), request_from_dict(request.to_dict()))


def test_unknown_format_byte_is_refused_clearly() -> None:
    codec = request_codec(CodecSpider())
    with pytest.raises(StoreError, match="format byte 7.*newer release"):
        codec.decode(b"\x07whatever")
    # A bare pickled Request.to_dict (no format byte) is not a row of this format either.
    spider = CodecSpider()
    bare = pickle.dumps(Request("http://a.example/").to_dict(spider=spider), protocol=5)
    with pytest.raises(UndecodableRow, match=f"format byte {bare[0]}"):
        request_codec(spider).decode(bare)


def test_callbacks_that_are_not_spider_methods_are_unserializable() -> None:
    codec = request_codec(CodecSpider())
    with pytest.raises(Unserializable):
        codec.encode(Request("http://a.example/", callback=lambda r: None))
    with pytest.raises(Unserializable):
        codec.encode(FormRequest("http://a.example/", callback=lambda r: None))


@pytest.mark.parametrize("compact", [True, False], ids=["probed", "forced-to_dict"])
def test_callback_names_set_after_construction_are_kept(compact: bool) -> None:
    spider = CodecSpider()
    codec = request_codec(spider, compact=compact)
    request = Request("http://a.example/")
    request.callback = "parse_page"  # type: ignore[assignment]
    back = codec.decode(codec.encode(request))
    assert back.callback == spider.parse_page


def test_removed_callback_names_the_file(tmp_path: Path) -> None:
    spider = CodecSpider()
    path = tmp_path / "f.sqlite"
    store: SQLiteStore[Any] = SQLiteStore(
        path, levels=2, spider="codec", codec=request_codec(spider)
    )
    store.back_open("a.example")
    store.back_append("a.example", 1, Request("http://a.example/", callback=spider.on_error))
    store.close()
    db = sqlite3.connect(path)
    with db:  # the row as a compact one naming a callback the spider no longer has
        db.execute("UPDATE back SET data = ?", (compact_row(Request("http://a.example/"), "gone"),))
    db.close()
    store = SQLiteStore(path, levels=2, spider="codec", codec=request_codec(spider))
    hosts, _ = store.recover()
    store.adopt("a.example", hosts["a.example"])
    with pytest.raises(StoreError, match=f"{path}, row 1: .*'gone'"):
        store.back_lease("a.example")
    store.close()


# -- row trust (codec.RowTrust) ---------------------------------------------------------
# Whom a stored request is trusted by (codec.RowTrust): sealed rows, restricted reading.
#
# A row from a shared store is unpickled in full only if its seal verifies under a key of
# FRONTIER_SIGNING_KEYS; without keys it is read by the restricted unpickler, which builds
# plain values and runs no code a row names. A private store (a JOBDIR only its user can
# write) is read in full, as Scrapy reads its own disk queues.

KEY, OTHER = "k" * 32, "another-key-0123456789"


class TrustSpider(Spider):
    name = "trust"

    def parse(self, response: Any) -> None:
        pass


class Custom:
    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Custom) and other.value == self.value


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {self.marker}",)


def codec(trust: RowTrust) -> Any:
    return request_codec(TrustSpider(), trust=trust)


def forged(marker: Path, tag: bytes = b"\x01") -> bytes:
    return tag + pickle.dumps(Payload(marker), protocol=5)


SHARED = RowTrust()
SEALED = RowTrust.of([KEY], private=False)
PRIVATE = RowTrust(private=True)


@pytest.mark.parametrize("trust", [SHARED, SEALED, PRIVATE], ids=["shared", "sealed", "private"])
@pytest.mark.parametrize("tag", [b"\x01", b"\x02"])
def test_a_forged_pickle_runs_no_code_where_rows_are_checked(
        trust: RowTrust, tag: bytes, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    data = forged(marker, tag)
    if trust is PRIVATE:
        # A private store is the code's own boundary: its rows are read in full.
        with pytest.raises(Exception):  # noqa: B017 -- os.system's int is no request
            codec(trust).decode(data)
        assert marker.exists()
        return
    with pytest.raises(UntrustedRow):
        codec(trust).decode(data)
    assert trust.check(data) is not None
    assert not marker.exists()


def test_sealed_rows_round_trip_and_a_changed_byte_is_refused() -> None:
    c = codec(SEALED)
    spider = TrustSpider()
    request = Request("http://a.example/x", callback=spider.parse, meta={"obj": Custom(3)})
    data = c.encode(request)
    assert data[:1] == b"\x03"
    back = c.decode(data)
    assert back.url == request.url and back.meta["obj"] == Custom(3)
    assert saved_url(data) == "http://a.example/x"
    for i in (1, 5, len(data) - 1):
        bad = bytearray(data)
        bad[i] ^= 1
        with pytest.raises(UntrustedRow, match="matches no key"):
            c.decode(bytes(bad))


def test_a_keyring_rotates_the_key_without_losing_rows() -> None:
    old = request_codec(TrustSpider(), trust=RowTrust.of([OTHER], private=False))
    data = old.encode(Request("http://a.example/"))
    rotated = request_codec(TrustSpider(), trust=RowTrust.of([KEY, OTHER], private=False))
    assert rotated.decode(data).url == "http://a.example/"
    assert rotated.encode(Request("http://a.example/"))[1:17] != data[1:17]  # sealed by KEY
    dropped = request_codec(TrustSpider(), trust=RowTrust.of([KEY], private=False))
    with pytest.raises(UntrustedRow):
        dropped.decode(data)


def test_with_keys_an_unsealed_row_of_a_shared_store_is_refused_unread() -> None:
    plain = codec(SHARED).encode(Request("http://a.example/"))
    with pytest.raises(UntrustedRow, match="not sealed"):
        codec(SEALED).decode(plain)
    # A private store's own unsealed rows stay readable when keys are added.
    assert codec(RowTrust.of([KEY], private=True)).decode(plain).url == "http://a.example/"


def test_plain_values_in_meta_need_no_key() -> None:
    meta = {"when": datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.timezone.utc),
            "day": datetime.date(2026, 1, 2), "price": decimal.Decimal("1.10"),
            "id": uuid.UUID(int=7), "tags": {"a", "b"}, "frozen": frozenset({1}),
            "nested": [{"x": (1, 2.5, None, True, b"\x93\x82")}], "c": complex(1, 2)}
    c = codec(SHARED)
    back = c.decode(c.encode(Request("http://a.example/", meta=meta)))
    assert back.meta == meta


def test_a_class_outside_the_plain_values_is_unserializable_without_keys() -> None:
    request = Request("http://a.example/", meta={"obj": Custom(1)})
    with pytest.raises(Unserializable, match="Custom.*FRONTIER_SIGNING_KEYS"):
        codec(SHARED).encode(request)
    assert codec(PRIVATE).decode(codec(PRIVATE).encode(request)).meta["obj"] == Custom(1)


def test_request_subclasses_round_trip_but_a_forged_class_path_imports_nothing() -> None:
    c = codec(SHARED)
    form = FormRequest("http://a.example/f", formdata={"a": "1"})
    assert type(c.decode(c.encode(form))) is FormRequest
    row = pickle.dumps({"url": "http://a.example/", "_class": "antigravity.Request"},
                       protocol=5)
    import sys
    assert "antigravity" not in sys.modules
    with pytest.raises(UntrustedRow, match="antigravity"):
        c.decode(b"\x02" + row)
    assert "antigravity" not in sys.modules


def forged_fields_row(*, callback: Any = None, meta: Any = None, priority: Any = 0) -> bytes:
    return b"\x01" + pickle.dumps(("http://a.example/", callback, None, "GET", None, b"",
                                   None, meta, "utf-8", priority, False, None, None),
                                  protocol=5)


@pytest.mark.parametrize("name", ["__class__", "_set_crawler", "from_crawler",
                                  "update_settings", "name", 5])
def test_a_callback_name_must_be_one_of_the_spiders_methods(name: Any) -> None:
    with pytest.raises(UntrustedRow, match="not one of the spider's methods|field 1 is"):
        codec(SHARED).decode(forged_fields_row(callback=name))
    assert codec(SHARED).decode(forged_fields_row(callback="parse")).callback.__name__ == "parse"


@pytest.mark.parametrize("fields", [{"meta": ["not", "a", "dict"]}, {"priority": "high"}])
def test_a_compact_row_of_wrong_field_types_is_refused_not_handed_out(
        fields: dict[str, Any]) -> None:
    with pytest.raises(UntrustedRow, match="field"):
        codec(SHARED).decode(forged_fields_row(**fields))


class Reducing:
    """Pickles as a call of ``func`` with ``args``: what a forged row may ask for."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.func, self.args


@pytest.mark.parametrize("value", [
    Reducing(bytes, 10**12),  # a terabyte from a few bytes
    Reducing(str, b"x", "idna"),  # str(bytes, codec) imports encodings.idna
    Reducing(list, Reducing(range, 10**12)),
    Reducing(__import__("fractions").Fraction, "1e1000000000"),
])
def test_no_allowed_constructor_amplifies_a_few_bytes(value: Any) -> None:
    row = b"\x01" + pickle.dumps(("http://a.example/", None, None, "GET", None, b"", None,
                                   {"v": value}, "utf-8", 0, False, None, None), protocol=5)
    assert len(row) < 200
    with pytest.raises(UntrustedRow, match="may not hold"):
        codec(SHARED).decode(row)


def test_a_class_path_is_looked_up_without_a_modules_getattr() -> None:
    import sys

    sys.modules.pop("concurrent.futures.process", None)
    import concurrent.futures  # noqa: F401 -- its __getattr__ imports .process lazily
    row = b"\x02" + pickle.dumps({"url": "http://a.example/",
                                   "_class": "concurrent.futures.ProcessPoolExecutor"},
                                  protocol=5)
    with pytest.raises(UntrustedRow, match="not a Request subclass"):
        codec(SHARED).decode(row)
    assert "concurrent.futures.process" not in sys.modules


def test_a_private_store_reads_a_row_sealed_with_a_dropped_key() -> None:
    data = request_codec(TrustSpider(), trust=RowTrust.of([OTHER], private=False)).encode(
        Request("http://a.example/"))
    assert codec(RowTrust.of([KEY], private=True)).decode(data).url == "http://a.example/"


def test_signing_keys_come_from_the_setting_or_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRONTIER_SIGNING_KEYS", raising=False)
    assert signing_keys(Settings()) == ()
    assert signing_keys(Settings({"FRONTIER_SIGNING_KEYS": [KEY, OTHER]})) == (KEY, OTHER)
    monkeypatch.setenv("FRONTIER_SIGNING_KEYS", f"{KEY}, {OTHER}")
    assert signing_keys(Settings()) == (KEY, OTHER)
    with pytest.raises(FrontierConfigError, match="key 2 of 2 has 5 characters"):
        signing_keys(Settings({"FRONTIER_SIGNING_KEYS": [KEY, "short"]}))
    with pytest.raises(FrontierConfigError, match="list of strings"):
        signing_keys(Settings({"FRONTIER_SIGNING_KEYS": [1]}))


def test_the_keys_are_never_in_the_config_repr() -> None:
    from scrapy_frontier.settings import FrontierConfig

    config = FrontierConfig.from_settings(Settings({"FRONTIER_SIGNING_KEYS": [KEY]}))
    assert config.signing_keys == (KEY,)
    assert KEY not in repr(config)


def test_a_directory_others_may_write_is_exposed(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    (tmp_path / "frontier.sqlite").write_bytes(b"")
    assert exposed(tmp_path, ("frontier.sqlite", "history.sqlite")) is None
    os.chmod(tmp_path / "frontier.sqlite", 0o666)
    assert "may be written by others" in str(exposed(tmp_path, ("frontier.sqlite",)))
    os.chmod(tmp_path / "frontier.sqlite", 0o600)
    os.chmod(tmp_path, 0o770)
    assert "may be written by others (mode 770)" in str(exposed(tmp_path, ()))


def test_a_sealed_row_too_short_for_its_tag_is_refused() -> None:
    with pytest.raises(UntrustedRow, match="too short"):
        codec(SEALED).decode(b"\x03abc")
    assert RowKeys([KEY]).verified(b"\x03" + b"\0" * 16 + b"\x01") is None


def test_a_record_is_checked_by_its_url_and_its_kept_request() -> None:
    sealed = request_codec(TrustSpider(), trust=SEALED).encode(Request("http://a.example/x"))
    assert SEALED.check_record("http://a.example/x", sealed) is None
    assert "not the one its sealed request names" in str(
        SEALED.check_record("http://b.example/", sealed))
    assert "is not http(s)" in str(SEALED.check_record("file:///etc/passwd", None))
    assert "is not http(s)" in str(SHARED.check_record("file:///etc/passwd", None))
    assert SHARED.check_record("http://a.example/x", None) is None  # nothing to verify
    assert "may not hold" in str(SHARED.check_record("http://a.example/x", forged(Path("m"))))


def test_link_text_of_a_link_extractor_is_read_back_as_a_plain_string() -> None:
    from scrapy.http import HtmlResponse
    from scrapy.linkextractors import LinkExtractor

    page = HtmlResponse("http://a.example/", encoding="utf-8",
                        body=b"<html><body><a href='/x'>article 3</a></body></html>")
    [link] = LinkExtractor().extract_links(page)
    assert type(link.text) is not str  # lxml's smart string, a str subclass
    c = codec(SHARED)
    back = c.decode(c.encode(Request(link.url, meta={"link_text": link.text})))
    assert back.meta["link_text"] == "article 3" and type(back.meta["link_text"]) is str


def test_only_web_requests_are_kept_unsealed_in_a_shared_store() -> None:
    for url in ("data:,a", "file:///etc/passwd"):
        with pytest.raises(Unserializable, match="only http"):
            codec(SHARED).encode(Request(url))
        assert codec(SEALED).decode(codec(SEALED).encode(Request(url))).url == url
