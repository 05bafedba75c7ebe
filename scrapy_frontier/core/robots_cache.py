"""A fetched robots.txt as the frontier keeps it, and RFC 9309's rules for reusing it.

RFC 9309 (the Robots Exclusion Protocol) lets a crawler cache a robots.txt for up to 24
hours, and says what each answer means:

* 2xx: the body is the rules (a crawler parses at least its first 500 KiB);
* 4xx but 429: no rules at all ("allow all"), whatever the body;
* 5xx, 429, or no answer: the file is *unreachable*: for as long as that lasts the
  crawler must assume "disallow all", or use a copy it cached.

So only the first two are *definitive* and kept: the status and the body (a 4xx keeps no
body) are all that is needed to reproduce the decision, with the wall-clock time of the
fetch for the age. An unreachable answer is never kept: the next worker, or the next run,
asks again. Redirects were followed (up to 5 hops and more) before the answer came here.

A record answers for its site while it is fresh (:meth:`RobotsRecord.fresh`). After that
the site is asked again, and if it answers that the file is unreachable, the record, up to
:data:`STALE_LIMIT` old, answers instead (:func:`stand_in`): RFC 9309 2.4 allows a cached
copy past 24 hours while the file is unreachable, and 2.3.1.4 names 30 days as a
reasonably long time for that. Without a record, the unreachable answer stands.

A record is stored as bytes (:func:`encode`); what a store hands back is untrusted and
checked again (:func:`decode` raises ``ValueError`` for anything this module did not
write, a body over the cap, or a fetch time in the future).

That check is of the record's shape only: whoever can write the store can write a
well-formed, permissive robots.txt. With ``FRONTIER_SIGNING_KEYS`` each record is stored
sealed (:func:`seal`): the keyring's tag covers the origin and the record, so a record is
read (:func:`unseal`) only if a key verifies it and it was sealed for the origin asked
for, not copied from another site's key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

#: RFC 9309 2.5: a crawler parses at least the first 500 KiB; the rest is not kept.
MAX_BODY = 500 * 1024
#: RFC 9309 2.4: a cached robots.txt should not be used for more than 24 hours.
MAX_AGE = 24 * 3600.0
#: RFC 9309 2.3.1.4: how old a kept copy may be and still answer for an unreachable file.
STALE_LIMIT = 30 * 24 * 3600.0
#: How far in the future a fetch time may be (another worker's clock running ahead).
CLOCK_SLACK = 300.0
#: An origin (``scheme://host:port``) longer than this is no key of ours.
MAX_ORIGIN = 2048

_MAGIC = b"robots1"
#: The first byte of a sealed blob (``scrapy_frontier.codec.SEALED``).
_SEALED = b"\x03"


class Keyring(Protocol):
    """``FRONTIER_SIGNING_KEYS`` (``scrapy_frontier.codec.RowKeys``)."""

    def seal(self, row: bytes) -> bytes: ...

    def verified(self, data: bytes) -> bytes | None: ...


@dataclass(frozen=True, slots=True)
class RobotsRecord:
    """One definitive robots.txt answer."""

    status: int
    """The HTTP status of the final answer (after redirects): 2xx or 4xx but 429."""
    body: bytes
    """Its body, at most MAX_BODY bytes (empty for a 4xx: no rules)."""
    fetched_at: float
    """Wall-clock time (seconds since the epoch) when it was fetched."""

    def age(self, now: float) -> float:
        return now - self.fetched_at

    def fresh(self, now: float, max_age: float) -> bool:
        """Whether it may still answer for the site at wall-clock time ``now``."""
        return -CLOCK_SLACK <= self.age(now) < max_age

    def may_stand_in(self, now: float) -> bool:
        """Whether it may answer at ``now`` for a site whose robots.txt is unreachable."""
        return self.fresh(now, STALE_LIMIT)


def definitive(status: int) -> bool:
    """Whether an answer of ``status`` says what the site's rules are (and may be kept):
    2xx (the rules) and 4xx but 429 (none). 3xx left here were not followed."""
    return 200 <= status < 300 or (400 <= status < 500 and status != 429)


def unreachable(status: int | None) -> bool:
    """Whether a final answer of ``status`` says the robots.txt is unreachable: 5xx, 429, or
    no answer at all (None: the download failed)."""
    return status is None or 500 <= status < 600 or status == 429


def stand_in(kept: RobotsRecord | None, status: int | None, now: float) -> RobotsRecord | None:
    """The record that answers at ``now`` in place of a final answer of ``status`` (None:
    no answer): ``kept``, when the answer says the file is unreachable and ``kept`` is
    younger than :data:`STALE_LIMIT`; otherwise None, and the answer stands."""
    if kept is None or not unreachable(status) or not kept.may_stand_in(now):
        return None
    return kept


def record_of(status: int, body: bytes, fetched_at: float) -> RobotsRecord | None:
    """The record to keep for a final answer, or None when the answer is not definitive."""
    if not definitive(status) or not math.isfinite(fetched_at):
        return None
    return RobotsRecord(status, body[:MAX_BODY] if status < 300 else b"", fetched_at)


def encode(record: RobotsRecord) -> bytes:
    return b"%s %d %r\n%s" % (_MAGIC, record.status, record.fetched_at, record.body)


def decode(raw: object, now: float) -> RobotsRecord:
    """The record stored as ``raw``; ``ValueError`` saying what is wrong with it."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise ValueError(f"a {type(raw).__name__}, not bytes")
    raw = bytes(raw)
    head, newline, body = raw.partition(b"\n")
    fields = head.split(b" ")
    if not newline or len(fields) != 3 or fields[0] != _MAGIC:
        raise ValueError("not a robots.txt record")
    try:
        status = int(fields[1])
        fetched_at = float(fields[2])
    except ValueError:
        raise ValueError("its status or fetch time is not a number") from None
    if not definitive(status):
        raise ValueError(f"status {status} is not kept")
    if status >= 300 and body:
        raise ValueError(f"a {status} answer carries no rules, yet it has a body")
    if len(body) > MAX_BODY:
        raise ValueError(f"its body has {len(body)} bytes, more than {MAX_BODY}")
    if not math.isfinite(fetched_at) or fetched_at - now > CLOCK_SLACK:
        raise ValueError(f"it was fetched at {fields[2]!r}, in the future")
    return RobotsRecord(status, body, fetched_at)


def seal(keys: Keyring, origin: str, stored: bytes) -> bytes:
    """``stored`` (an :func:`encode`-d record) as kept for ``origin`` with keys: sealed
    together with the origin, which a well-formed origin keeps apart (it has no newline)."""
    return keys.seal(origin.encode() + b"\n" + stored)


def unseal(keys: Keyring | None, origin: str, raw: object) -> object:
    """What to :func:`decode` of ``raw``, kept for ``origin``: with ``keys``, the record
    inside a seal that a key verifies and that names ``origin``; without, ``raw`` unless it
    is sealed. ``ValueError`` saying why it is not to be read."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise ValueError(f"a {type(raw).__name__}, not bytes")
    raw = bytes(raw)
    sealed = raw[:1] == _SEALED
    if keys is None:
        if sealed:
            raise ValueError("it is sealed, and FRONTIER_SIGNING_KEYS is not set")
        return raw
    if not sealed:
        raise ValueError("it is not sealed, and FRONTIER_SIGNING_KEYS is set: a client "
                         "without the key wrote it")
    inner = keys.verified(raw)
    if inner is None:
        raise ValueError("its seal matches no key of FRONTIER_SIGNING_KEYS: it was forged, "
                         "damaged, or sealed with a key no longer listed")
    named, newline, stored = inner.partition(b"\n")
    if not newline or named != origin.encode():
        raise ValueError("it was sealed for another site")
    return stored


def check_origin(origin: str) -> str:
    """``origin`` if it is one a store may key: ``http(s)://`` a host, no path, short."""
    if (not origin.startswith(("http://", "https://")) or len(origin) > MAX_ORIGIN
            or "/" in origin.partition("://")[2] or not origin.isprintable()
            or " " in origin):
        raise ValueError(f"{origin[:100]!r} is not an origin (scheme://host[:port])")
    return origin


__all__ = ["MAX_AGE", "MAX_BODY", "STALE_LIMIT", "Keyring", "RobotsRecord", "check_origin",
           "decode", "definitive", "encode", "record_of", "seal", "stand_in", "unreachable",
           "unseal"]
