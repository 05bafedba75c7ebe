"""Whom a stored request is trusted by (codec.RowTrust): sealed rows, restricted reading.

A row from a shared store is unpickled in full only if its seal verifies under a key of
FRONTIER_SIGNING_KEYS; without keys it is read by the restricted unpickler, which builds
plain values and runs no code a row names. A private store (a JOBDIR only its user can
write) is read in full, as Scrapy reads its own disk queues.
"""

from __future__ import annotations

import datetime
import decimal
import os
import pickle
import uuid
from pathlib import Path
from typing import Any

import pytest
from scrapy import FormRequest, Request, Spider
from scrapy.settings import Settings

from scrapy_frontier.backends.sqlite.files import exposed
from scrapy_frontier.codec import RowKeys, RowTrust, request_codec, saved_url
from scrapy_frontier.errors import FrontierConfigError, Unserializable, UntrustedRow
from scrapy_frontier.settings import signing_keys

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


def test_a_callback_name_must_be_a_method_name() -> None:
    row = b"\x01" + pickle.dumps(("http://a.example/", "__class__", None, "GET", None, b"",
                                   None, None, "utf-8", 0, False, None, None), protocol=5)
    with pytest.raises(UntrustedRow, match="not a method name"):
        codec(SHARED).decode(row)


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
