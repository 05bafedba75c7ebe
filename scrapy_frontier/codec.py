"""How a queued ``scrapy.Request`` is stored in the SQLite state: bytes and back.

Every row starts with a format byte:

* ``0x01`` -- *compact*: a plain :class:`scrapy.Request` (not a subclass) as one
  pickled tuple of its attributes, callbacks as spider method names. About
  four times cheaper to write than ``Request.to_dict``, and it is read back
  without parsing the URL again when the URL is plain (see below);
* ``0x02`` -- *full*: pickled ``Request.to_dict(spider=...)``, for subclasses
  (``FormRequest``, ``JsonRequest``, your own) and anything the compact form
  does not cover; rebuilt by Scrapy's ``request_from_dict``.

* ``0x03`` -- *sealed*: a compact or full row behind a 16-byte tag, a keyed
  BLAKE2b of the row under the first key of ``FRONTIER_SIGNING_KEYS``
  (:class:`RowKeys`).

Any other first byte is refused with an :class:`UndecodableRow`: the row is
corrupt (another state version is refused when the file is opened), and guessing
would rebuild the wrong request. So is a row that does not unpickle. A callback
the spider no longer has is a plain :class:`StoreError`: the spider's code
changed, which concerns every row that names it, not one.

Whom a row is trusted by (:class:`RowTrust`, see docs/security.rst): a row is
unpickled in full (any class its meta holds) only if its tag verifies, or if its
store is inside the code's own boundary (a JOBDIR only its user can write). Any
other row is read by :class:`RestrictedUnpickler`, which builds plain types and the
classes of :data:`ALLOWED_GLOBALS` and nothing else, so no byte of it runs code;
with keys set, such a row is not read at all but set aside (:class:`UntrustedRow`).

Rebuilding a request normally runs ``Request.__init__``, which passes the URL
through ``w3lib.url.safe_url_string`` again -- most of the cost of a dequeue.
A stored URL is already the output of that function; when it is also *plain*
(:data:`scrapy_frontier.hostkey.PLAIN_URL`: only characters and a shape that
function leaves unchanged) the compact decoder fills the request's slots
directly, exactly as ``__init__`` would have.

Both halves of the compact form read and write ``Request``'s private slots, a
layout Scrapy has had since 2.15 (before, ``Request`` has no ``__slots__`` and
keeps ``headers``, ``cookies`` and ``flags`` as plain attributes). So each
codec, when it is made, probes this Scrapy's ``Request`` (see
:func:`compact_layout`): its slots must be exactly the ones named here, and a
bare and a fully set probe request must come back identical from the compact
form. If not, that codec writes plain requests in the full form
(``Request.to_dict``), and still reads compact rows a newer Scrapy wrote,
through ``Request(...)``. A
second check compares the filled request with ``Request(...)`` slot by slot; if
any value differs, the decoder uses ``Request(...)`` for every compact row.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import io
import logging
import pickle
import pickletools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from scrapy import Request, Spider
from scrapy.http.headers import Headers
from scrapy.utils.request import request_from_dict

from scrapy_frontier.errors import (
    MissingCallback,
    StoreError,
    UndecodableRow,
    Unserializable,
    UntrustedRow,
)
from scrapy_frontier.hostkey import PLAIN_URL

logger = logging.getLogger("scrapy_frontier.codec")

T = TypeVar("T")


@dataclass
class Codec(Generic[T]):
    """How a store turns its items into bytes and back."""

    encode: Callable[[T], bytes]
    decode: Callable[[bytes], T]


COMPACT = 0x01
FULL = 0x02
SEALED = 0x03
_COMPACT_TAG = bytes([COMPACT])
_FULL_TAG = bytes([FULL])
_SEALED_TAG = bytes([SEALED])
_PROTOCOL = 5
#: Bytes of a sealed row's tag (128 bits).
TAG_BYTES = 16
#: The shortest signing key accepted (characters).
MIN_KEY_LENGTH = 16

#: The globals an unsealed row may name: constructors of plain values whose work is
#: bounded by the bytes they are given, and which import nothing. Containers, strings,
#: bytes, numbers and sets have opcodes of their own and need none; ``bytes``, ``str``,
#: ``range`` or ``Fraction`` are left out because a few bytes of arguments make them
#: allocate gigabytes, spin, or import a codec.
ALLOWED_GLOBALS = frozenset({
    ("builtins", "complex"),
    *(("datetime", name) for name in ("date", "datetime", "time", "timedelta", "timezone")),
    ("decimal", "Decimal"),
    ("collections", "OrderedDict"),
    ("collections", "deque"),
    ("uuid", "UUID"),
})
#: String subclasses a row may name, read back as the plain type they subclass: lxml's
#: "smart strings", which Scrapy's link extractors put in meta (``link_text``).
PLAIN_SUBSTITUTES: dict[tuple[str, str], type] = {
    ("lxml.etree", "_ElementUnicodeResult"): str,
    ("lxml.etree", "_ElementStringResult"): bytes,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Builds plain values and the classes of :data:`ALLOWED_GLOBALS`; refuses any other
    global (a function or class a forged row would call) and persistent ids."""

    def find_class(self, module: str, name: str) -> Any:
        substitute = PLAIN_SUBSTITUTES.get((module, name))
        if substitute is not None:
            return substitute
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise UntrustedRow(
            f"it names {module}.{name}, which a row read without a verified seal may not hold "
            "(see FRONTIER_SIGNING_KEYS)")


def restricted_loads(data: bytes) -> Any:
    return RestrictedUnpickler(io.BytesIO(data)).load()


def _names_a_global(payload: bytes) -> bool:
    """False if a protocol-5 pickle names no global: it has no STACK_GLOBAL or EXT1/2/4
    opcode byte (one inside a string gives a false True: the caller then unpickles it
    restricted to be sure)."""
    return b"\x93" in payload or b"\x82" in payload or b"\x83" in payload or \
        b"\x84" in payload


class RowKeys:
    """The keyring of ``FRONTIER_SIGNING_KEYS``: the first key seals rows, every key
    verifies them, so a key can be rotated (three steps: docs/security.rst)."""

    def __init__(self, secrets: Sequence[str]) -> None:
        if not secrets:
            raise ValueError("a keyring needs at least one key")
        # BLAKE2b's own keyed mode is a MAC; the key is the secret's hash, of any length.
        self._keys = tuple(
            hashlib.blake2b(s.encode(), digest_size=32, person=b"frontier-rows").digest()
            for s in secrets)

    def __len__(self) -> int:
        return len(self._keys)

    @staticmethod
    def _tag(key: bytes, row: bytes) -> bytes:
        return hashlib.blake2b(row, key=key, digest_size=TAG_BYTES).digest()

    def seal(self, row: bytes) -> bytes:
        return _SEALED_TAG + self._tag(self._keys[0], row) + row

    def verified(self, data: bytes) -> bytes | None:
        """The row inside sealed ``data`` if its tag verifies under a key, else None."""
        tag, row = data[1:1 + TAG_BYTES], data[1 + TAG_BYTES:]
        for key in self._keys:
            if hmac.compare_digest(self._tag(key, row), tag):
                return row
        return None


@dataclass(frozen=True)
class RowTrust:
    """Who a store's rows are trusted by: ``keys`` (FRONTIER_SIGNING_KEYS, or None) and
    whether the store itself is inside the code's boundary (``private``: a JOBDIR only
    the crawl's user can write; never a shared Redis)."""

    keys: RowKeys | None = None
    private: bool = False

    @classmethod
    def of(cls, secrets: Sequence[str], *, private: bool) -> RowTrust:
        return cls(RowKeys(secrets) if secrets else None, private)

    @property
    def checks(self) -> bool:
        """A store outside the code's boundary has its rows checked when read; a private
        one's rows are read in full, sealed or not."""
        return not self.private

    def opened(self, data: bytes) -> tuple[bytes, bool]:
        """(the compact or full row inside ``data``, whether it may be unpickled in full).
        Raises :class:`UntrustedRow` for a row that must not be read at all."""
        if data[:1] == _SEALED_TAG:
            if len(data) <= 1 + TAG_BYTES:
                raise UntrustedRow("it is a sealed row too short to hold a tag")
            if self.keys is None:
                return data[1 + TAG_BYTES:], self.private
            row = self.keys.verified(data)
            if row is None and self.private:
                return data[1 + TAG_BYTES:], True  # the store is trusted without its seal
            if row is None:
                raise UntrustedRow(
                    "its tag matches no key of FRONTIER_SIGNING_KEYS: it was forged, damaged, "
                    "or sealed with a key no longer listed")
            return row, True
        if self.keys is not None and not self.private:
            raise UntrustedRow(
                "it is not sealed, and every row of a crawl with FRONTIER_SIGNING_KEYS is: "
                "a client without the key wrote it")
        return data, self.private

    def check_record(self, url: str, kept: bytes | None) -> str | None:
        """Why a page record read from this store is refused, or None: its kept request
        fails :meth:`check`, or (with keys, in a shared store) names another URL than the
        record's. A record that keeps no request (its fetch failed, or its request could not
        be kept) has nothing to verify: see docs/security.rst."""
        if not url.startswith(WEB_SCHEMES):
            return f"its URL {url[:80]!r} is not http(s)"
        if kept is None:
            return None
        refused = self.check(kept)
        if refused is None and self.keys is not None and not self.private \
                and saved_url(kept) != url:
            refused = "its URL is not the one its sealed request names"
        return refused

    def check(self, data: bytes) -> str | None:
        """Why ``data`` would not be read as a trusted row, or None: the seal, then (for a
        row read restricted) every global its pickle names. Needs no spider; runs no code."""
        try:
            row, full = self.opened(data)
            if not full and row[:1] == _COMPACT_TAG:
                plain_fields(restricted_loads(row[1:]))
            elif not full and row[:1] == _FULL_TAG:
                value = restricted_loads(row[1:])
                if not isinstance(value, dict):
                    raise UntrustedRow("it is not a request's dict")
                request_class(value.get("_class"))
                web_url(value.get("url"))
        except UntrustedRow as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 -- any failure is a refusal, named
            return f"{type(exc).__name__}: {exc}"
        return None


_NONE = type(None)
#: The schemes a row or record read without a verified seal may name.
WEB_SCHEMES = ("http://", "https://")
#: The types of a compact row's fields (Request's slots), checked on a row read without a
#: verified seal: the fast decoder sets the slots without Request.__init__'s checks.
_FIELD_TYPES: tuple[tuple[type, ...], ...] = (
    (str,), (str, _NONE), (str, _NONE), (str,), (dict, _NONE), (bytes,),
    (dict, list, _NONE), (dict, _NONE), (str,), (int,), (bool,), (list, _NONE), (dict, _NONE))
#: Names a row may not give as a callback: scrapy.Spider's own members, but parse.
_SPIDER_MEMBERS = frozenset(dir(Spider)) - {"parse"}


def plain_fields(fields: Any) -> tuple[Any, ...]:
    """A compact row's fields, if each has its slot's type; else :class:`UntrustedRow`."""
    if type(fields) is not tuple or len(fields) != len(_FIELD_TYPES):
        raise UntrustedRow("its fields are not a compact request's")
    if not all(map(isinstance, fields, _FIELD_TYPES)):
        i = next(i for i, types in enumerate(_FIELD_TYPES) if not isinstance(fields[i], types))
        raise UntrustedRow(f"its field {i} is a {type(fields[i]).__name__}")
    web_url(fields[0])
    return fields


def web_url(url: Any) -> None:
    """Refuses (:class:`UntrustedRow`) a URL of an untrusted row that is not http(s): a
    ``file://`` or ``s3://`` request would read what the spider never asked for."""
    if not isinstance(url, str) or not url.startswith(WEB_SCHEMES):
        raise UntrustedRow(f"its URL {str(url)[:80]!r} is not http(s)")


def callback_name(spider: Any, name: Any) -> None:
    """Refuses (:class:`UntrustedRow`) a callback name an untrusted row gives that is not
    one of the spider's own methods: a dunder, or a member of scrapy.Spider (``from_crawler``
    and the like) but ``parse``. A name the spider lacks is left to MissingCallback."""
    if not isinstance(name, str) or name.startswith("__") or name in _SPIDER_MEMBERS:
        raise UntrustedRow(f"its callback {name!r} is not one of the spider's methods")
    found = inspect.getattr_static(spider, name, None)
    if found is not None and not inspect.isfunction(found):
        raise UntrustedRow(f"its callback {name!r} is not one of the spider's methods")


def request_class(path: Any) -> type[Request]:
    """The Request subclass a full row names, if its module is already imported: an
    unsealed row must not make the worker import a module (importing runs its code)."""
    if path is None:
        return Request
    module, _, name = str(path).rpartition(".")
    # vars(), not getattr(): a module's __getattr__ (PEP 562) may import.
    found = vars(sys.modules[module]).get(name) if module in sys.modules else None
    if isinstance(found, type) and issubclass(found, Request):
        return found
    raise UntrustedRow(f"it names the class {path!r}, which is not a Request subclass "
                       "already imported")

#: The slots the compact decoder sets, in Request.__init__'s terms.
_KNOWN_SLOTS = frozenset(
    {
        "_body",
        "_cb_kwargs",
        "_cookies",
        "_encoding",
        "_flags",
        "_headers",
        "_meta",
        "_url",
        "callback",
        "dont_filter",
        "errback",
        "method",
        "priority",
    }
)


def request_codec(spider: Any, *, compact: bool = True,
                  trust: RowTrust | None = None) -> Codec[Any]:
    """The codec of queued requests; callbacks must be methods of ``spider``.

    Plain requests are written in the compact form if this Scrapy's ``Request``
    passes :func:`compact_layout`. ``compact=False`` writes every request in
    the full form, as on a Scrapy that fails it (tests run that path on any
    Scrapy with it). ``trust`` says how rows are sealed and read (default: no
    keys, a private store, as in a JOBDIR only its user writes).
    """
    trust = RowTrust(private=True) if trust is None else trust
    keys = trust.keys
    names: dict[Any, str] = {}  # callback function -> spider method name

    def method_name(func: Any) -> str | None:
        if func is None or isinstance(func, str):
            return func  # a name set after construction: to_dict keeps it as it is
        key = getattr(func, "__func__", None)
        if key is not None:
            name = names.get(key)
            if name is not None:
                return name
            # As Request.to_dict: the first spider method (by name) with this function.
            for name, member in inspect.getmembers(spider, predicate=inspect.ismethod):
                if member.__func__ is key:
                    names[key] = name
                    return name
        raise ValueError(f"Function {func} is not an instance method in: {spider}")

    def encode_full(request: Any) -> bytes:
        try:
            return _FULL_TAG + pickle.dumps(request.to_dict(spider=spider), protocol=_PROTOCOL)
        except Exception as exc:  # ValueError for lambdas, PicklingError and others for meta
            raise Unserializable(f"{request}: {exc}") from exc

    def readable(request: Any, row: bytes) -> bytes:
        """``row`` as stored: sealed with keys; else, in a shared store, only if the
        restricted unpickler can read it back (a meta of other classes needs keys)."""
        if keys is not None:
            return keys.seal(row)
        if not trust.private and not request.url.startswith(WEB_SCHEMES):
            raise Unserializable(
                f"{request}: only http(s) requests are kept in a shared store without "
                "FRONTIER_SIGNING_KEYS (a forged row must not read a file)")
        if not trust.private and _names_a_global(row):
            try:
                restricted_loads(row[1:])
            except Exception as exc:  # noqa: BLE001 -- the reason is the message
                raise Unserializable(
                    f"{request}: {exc}. Set FRONTIER_SIGNING_KEYS to keep such requests in a "
                    "shared store") from None
        return row

    def compact_fields(request: Any) -> tuple[Any, ...]:
        """The compact form's fields, read from the slots (no lazy default is built)."""
        headers = request._headers
        return (
            request._url,
            method_name(request.callback),
            method_name(request.errback),
            request.method,
            dict(headers) if headers else None,
            request._body,
            request._cookies or None,
            request._meta or None,
            request._encoding,
            request.priority,
            request.dont_filter,
            request._flags or None,
            request._cb_kwargs or None,
        )

    def encode_compact(request: Any) -> bytes:
        if type(request) is not Request:
            return encode_full(request)
        try:
            return _COMPACT_TAG + pickle.dumps(compact_fields(request), protocol=_PROTOCOL)
        except Exception as exc:
            raise Unserializable(f"{request}: {exc}") from exc

    def callback(name: str | None) -> Any:
        if name is None:
            return None
        try:
            return getattr(spider, name)
        except AttributeError:
            raise MissingCallback(f"Method {name!r} not found in: {spider}") from None

    def from_dict(d: dict[str, Any], full: bool) -> Any:
        if not full:
            request_class(d.get("_class"))  # no import for an untrusted row
            web_url(d.get("url"))
        # Checked first so that a missing method is told apart from a corrupt row.
        for key in ("callback", "errback"):
            name = d.get(key)
            if not full and name is not None:
                callback_name(spider, name)
            if isinstance(name, str):
                callback(name)
        return request_from_dict(d, spider=spider)

    def construct(fields: tuple[Any, ...]) -> Request:
        """A compact row through ``Request(...)``: right on every Scrapy."""
        (url, cb, eb, method, headers, body, cookies, meta, encoding, priority, dont_filter,
         flags, cb_kwargs) = fields
        return Request(
            url, callback=callback(cb), method=method, headers=headers, body=body,
            cookies=cookies, meta=meta, encoding=encoding, priority=priority,
            dont_filter=dont_filter, errback=callback(eb), flags=flags, cb_kwargs=cb_kwargs,
        )

    new = Request.__new__
    plain = PLAIN_URL.fullmatch

    def fill(fields: tuple[Any, ...]) -> Request:
        """What Request.__init__ does, minus safe_url_string on a plain URL."""
        (url, cb, eb, method, headers, body, cookies, meta, encoding, priority, dont_filter,
         flags, cb_kwargs) = fields
        request = new(Request)
        request._encoding = encoding
        request.method = method
        request._meta = meta
        request._url = url
        request._body = body
        request.priority = priority
        request.callback = None if cb is None else callback(cb)
        request.errback = None if eb is None else callback(eb)
        request._cookies = cookies
        request._headers = Headers(headers, encoding=encoding) if headers else None
        request.dont_filter = dont_filter
        request._cb_kwargs = cb_kwargs
        request._flags = flags
        return request

    compact = compact and compact_layout(compact_fields, construct)
    fast = compact and _fill_matches_init(fill, construct, compact_fields)
    encode_row = encode_compact if compact else encode_full

    def encode(request: Any) -> bytes:
        return readable(request, encode_row(request))

    allowed: set[str] = set()  # callback names of untrusted rows already checked

    def decode_compact(row: bytes, full: bool) -> Request:
        if full:
            fields = pickle.loads(row[1:])
        else:
            fields = plain_fields(restricted_loads(row[1:]))
            for name in fields[1:3]:
                if name is not None and name not in allowed:
                    callback_name(spider, name)
                    allowed.add(name)
        if fast and plain(fields[0]):
            return fill(fields)
        return construct(fields)

    def decode(data: bytes) -> Any:
        row, full = trust.opened(data)  # UntrustedRow: set aside by the store
        tag = row[0] if row else None
        try:
            if tag == COMPACT:
                return decode_compact(row, full)
            if tag == FULL:
                return from_dict((pickle.loads if full else restricted_loads)(row[1:]), full)
        except UntrustedRow:
            raise
        except MissingCallback as exc:
            raise StoreError(
                f"cannot rebuild a saved request ({exc}). Was the spider's code changed (a "
                "callback renamed or removed)? Restore it, or start with a new JOBDIR."
            ) from exc
        except Exception as exc:
            raise UndecodableRow(
                f"cannot rebuild a saved request ({type(exc).__name__}: {exc}): its bytes are "
                "corrupt, or its meta holds a value that pickles but does not unpickle"
            ) from exc
        raise UndecodableRow(
            f"a saved request has format byte {tag!r}, which this scrapy-frontier does not "
            "know: the row is corrupt, or a newer release wrote it"
        )

    return Codec(encode, decode)


def saved_url(data: bytes) -> str | None:
    """The URL of a saved request that cannot be rebuilt, if its bytes still show it.

    Reads the pickle's opcodes without running them, so a value that fails to
    unpickle does not hide the URL: the first string of a compact row, the value
    after the ``"url"`` key of a full row. None for a row of an unknown format byte.
    """
    if data[:1] == _SEALED_TAG:
        data = data[1 + TAG_BYTES:]
    tag = data[:1]
    if tag not in (_COMPACT_TAG, _FULL_TAG):
        return None
    compact = tag == _COMPACT_TAG
    body = memoryview(data)[1:]
    previous = None
    try:
        for op, arg, _ in pickletools.genops(bytes(body)):
            if not isinstance(arg, str) or "UNICODE" not in op.name:
                continue
            if compact or previous == "url":
                # A stored URL is safe_url_string's output: printable, no spaces. Anything
                # else is a forged row's text, which a log line must not carry.
                return arg if "://" in arg and arg.isprintable() and " " not in arg else None
            previous = arg
    except Exception:  # noqa: BLE001 -- corrupt bytes: no URL to show
        return None
    return None


def _request_slots() -> set[str]:
    return {
        name
        for cls in Request.__mro__
        for name in cls.__dict__.get("__slots__", ())
        if name != "__weakref__"
    }


def _probe_request() -> Request:
    """A request with every attribute set away from its default."""
    return Request(
        "http://probe.example/a/b",
        method="POST",
        headers={"X-A": ["1", "2"], "Accept": "text/html"},
        body=b"body",
        cookies={"c": "v"},
        meta={"k": [1, 2]},
        encoding="latin-1",
        priority=-3,
        dont_filter=True,
        flags=["f"],
        cb_kwargs={"x": 1},
    )


def compact_layout(
    fields_of: Callable[[Any], tuple[Any, ...]],
    construct: Callable[[tuple[Any, ...]], Request],
) -> bool:
    """True if this Scrapy's ``Request`` has the slots the compact form reads, and
    a bare and a fully set probe come back from it exactly as ``to_dict`` has them."""
    slots = _request_slots()
    if slots != _KNOWN_SLOTS:
        logger.debug("Request slots %s: saving requests with Request.to_dict", sorted(slots))
        return False
    try:
        for probe in (Request("http://probe.example/"), _probe_request()):
            if construct(fields_of(probe)).to_dict() != probe.to_dict():
                logger.debug("Request layout check: %r differs; saving with to_dict", probe)
                return False
    except Exception:  # noqa: BLE001 -- any surprise means: use to_dict
        logger.debug("Request layout check failed: saving with to_dict", exc_info=True)
        return False
    return True


def _fill_matches_init(
    fill: Callable[[tuple[Any, ...]], Request],
    construct: Callable[[tuple[Any, ...]], Request],
    fields_of: Callable[[Any], tuple[Any, ...]],
) -> bool:
    """True if ``fill`` builds the same request as ``Request(...)`` on this Scrapy."""
    slots = _request_slots()
    try:
        fields = fields_of(_probe_request())
        filled, built = fill(fields), construct(fields)
        for name in sorted(slots):
            a, b = getattr(filled, name), getattr(built, name)
            if a != b or type(a) is not type(b):
                logger.debug("Request.%s differs when filled: rebuilding with Request()", name)
                return False
    except Exception:  # noqa: BLE001 -- any surprise means: use the constructor
        logger.debug("Request fill check failed: rebuilding with Request()", exc_info=True)
        return False
    return True
