"""The request codec of the SQLite state: every request shape comes back identical."""

from __future__ import annotations

import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import FormRequest, Request, Spider
from scrapy.http import JsonRequest
from scrapy.http.headers import Headers
from scrapy.utils.request import request_from_dict

from scrapy_frontier import codec as codec_module
from scrapy_frontier.backends.sqlite.queue import SQLiteStore
from scrapy_frontier.codec import COMPACT, FULL, request_codec
from scrapy_frontier.errors import StoreError, UndecodableRow, Unserializable
from scrapy_frontier.hostkey import PLAIN_URL


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


@given(
    scheme=st.sampled_from(["http", "https"]),
    labels=st.lists(st.text("az09-", min_size=1, max_size=6), min_size=1, max_size=3),
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
