"""How a queued ``scrapy.Request`` is stored in the SQLite state: bytes and back.

Every row starts with a format byte:

* ``0x01`` -- *compact*: a plain :class:`scrapy.Request` (not a subclass) as one
  pickled tuple of its attributes, callbacks as spider method names. About
  four times cheaper to write than ``Request.to_dict``, and it is read back
  without parsing the URL again when the URL is plain (see below);
* ``0x02`` -- *full*: pickled ``Request.to_dict(spider=...)``, for subclasses
  (``FormRequest``, ``JsonRequest``, your own) and anything the compact form
  does not cover; rebuilt by Scrapy's ``request_from_dict``.

Any other first byte is refused with an :class:`UndecodableRow`: the row is
corrupt (another state version is refused when the file is opened), and guessing
would rebuild the wrong request. So is a row that does not unpickle. A callback
the spider no longer has is a plain :class:`StoreError`: the spider's code
changed, which concerns every row that names it, not one.

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

import inspect
import logging
import pickle
import pickletools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from scrapy import Request
from scrapy.http.headers import Headers
from scrapy.utils.request import request_from_dict

from scrapy_frontier.errors import MissingCallback, StoreError, UndecodableRow, Unserializable
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
_COMPACT_TAG = bytes([COMPACT])
_FULL_TAG = bytes([FULL])
_PROTOCOL = 5

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


def request_codec(spider: Any, *, compact: bool = True) -> Codec[Any]:
    """The codec of queued requests; callbacks must be methods of ``spider``.

    Plain requests are written in the compact form if this Scrapy's ``Request``
    passes :func:`compact_layout`. ``compact=False`` writes every request in
    the full form, as on a Scrapy that fails it (tests run that path on any
    Scrapy with it).
    """
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

    def from_dict(d: dict[str, Any]) -> Any:
        # Checked first so that a missing method is told apart from a corrupt row.
        for key in ("callback", "errback"):
            name = d.get(key)
            if isinstance(name, str) and not hasattr(spider, name):
                raise MissingCallback(f"Method {name!r} not found in: {spider}")
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
    encode = encode_compact if compact else encode_full

    def decode_compact(data: bytes) -> Request:
        fields = pickle.loads(memoryview(data)[1:])
        if fast and plain(fields[0]):
            return fill(fields)
        return construct(fields)

    def decode(data: bytes) -> Any:
        tag = data[0] if data else None
        try:
            if tag == COMPACT:
                return decode_compact(data)
            if tag == FULL:
                return from_dict(pickle.loads(memoryview(data)[1:]))
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
                return arg if "://" in arg else None
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
