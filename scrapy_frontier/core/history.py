"""Per-page change history for incremental recrawls: the record and its stores.

A :class:`PageRecord` is what the crawler remembers about one URL between visits:
validators for conditional GET (ETag, Last-Modified), an exact digest and a 64-bit
simhash of the visible text, the last status and size, the page's quality inputs
(depth, inlinks), whether it was retired, and the predictors' view of it
(:class:`~scrapy_frontier.core.refresh.PageHistory`: visit times, changes, the
refresh interval in force and the next due time).

Stores (:class:`HistoryStore`) keep records by 64-bit URL fingerprint (the same
fingerprint as the seen-set) and answer "which pages are due, in due order".
:class:`MemoryHistoryStore` is for continuous crawls without a job directory and
for tests; :class:`~scrapy_frontier.backends.sqlite.history.SQLiteHistoryStore` keeps
``history.sqlite`` in JOBDIR / FRONTIER_PATH.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from scrapy_frontier.core.refresh import PageHistory

#: Version of :meth:`PageRecord.to_json`'s layout.
RECORD_VERSION = 1
#: A page may be recrawled from this share of its interval before its due time on. A run
#: started a little before the previous one (daily cron: a page visited at 00:05 yesterday is
#: due at 00:05 today) still takes it, instead of leaving it for the run after.
DUE_SLACK = 0.1


@dataclass
class PageRecord:
    fp: int
    url: str
    callback: str | None = None
    depth: int = 0
    etag: str | None = None
    last_modified: str | None = None
    """The raw Last-Modified header, sent back as If-Modified-Since."""
    digest: str | None = None
    simhash: int | None = None
    simhash_version: int = 0
    """Which simhash function made ``simhash`` (core.simhash.SIMHASH_VERSION); 0 without
    one. Simhashes of different versions do not compare."""
    size: int = 0
    """Body bytes of the last full (200) response: what a 304 saves."""
    status: int = 0
    fetched_at: float = 0.0
    inlinks: int = 0
    retired: str | None = None
    """Why the page is never recrawled again ("gone", "failures"), or None."""
    weight: float = 1.0
    """Quality, for eviction when the history is full (lowest goes first)."""
    held_until: float = 0.0
    """Handed out for a recrawl: not handed out again before this time (or a visit)."""
    request: bytes | None = None
    """The request the spider made for this page, encoded like the queue's requests, that a
    recrawl replays; None if it was not kept (too large, or not encodable)."""
    hinted_change: float | None = None
    """The change time its site last hinted for it (a sitemap's lastmod, a feed's
    updated), wall clock; None if the site never said."""
    history: PageHistory = field(default_factory=PageHistory)

    @property
    def next_due(self) -> float:
        return self.history.next_due

    @property
    def eligible(self) -> float:
        """When the page may be recrawled: its due time less the slack, unless hinted."""
        h = self.history
        return max(h.next_due - DUE_SLACK * h.interval, self.held_until)

    def to_json(self) -> str:
        out: dict[str, Any] = {"v": RECORD_VERSION, "u": self.url, "h": self.history.to_dict()}
        for key, value in (
            ("cb", self.callback),
            ("d", self.depth),
            ("e", self.etag),
            ("lm", self.last_modified),
            ("dg", self.digest),
            ("sh", self.simhash),
            ("sv", None if self.simhash is None else self.simhash_version),
            ("sz", self.size),
            ("st", self.status),
            ("ft", self.fetched_at),
            ("in", self.inlinks),
            ("r", self.retired),
            ("w", self.weight),
            ("cl", self.held_until or None),
            ("rq", None if self.request is None else base64.b64encode(self.request).decode()),
            ("cc", self.hinted_change),
        ):
            if value is not None:
                out[key] = value
        return json.dumps(out, separators=(",", ":"))

    @classmethod
    def from_json(cls, fp: int, text: str,
                  check: Callable[[str, bytes | None], str | None] | None = None,
                  ) -> PageRecord:
        """Inverse of :meth:`to_json`; raises ValueError on anything it cannot read, and on
        a record that ``check`` refuses, given its URL and kept request (it says why: see
        codec.RowTrust.check_record)."""
        record = cls._parse(fp, text)
        if check is not None:
            refused = check(record.url, record.request)
            if refused is not None:
                raise ValueError(f"{REFUSED}: {refused}")
        return record

    @classmethod
    def _parse(cls, fp: int, text: str) -> PageRecord:
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"page record is not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("v") != RECORD_VERSION:
            version = data.get("v") if isinstance(data, dict) else None
            raise ValueError(
                f"page record version {version!r}; this scrapy-frontier reads {RECORD_VERSION}"
            )
        for key in ("u", "cb", "e", "lm", "dg", "r"):
            if not isinstance(data.get(key, ""), str | None):
                raise ValueError(f"page record is damaged (its {key!r} is not a string)")
        try:
            return cls(
                fp=fp,
                url=str(data["u"]),
                callback=data.get("cb"),
                depth=int(data.get("d", 0)),
                etag=data.get("e"),
                last_modified=data.get("lm"),
                digest=data.get("dg"),
                simhash=None if data.get("sh") is None else int(data["sh"]),
                simhash_version=0 if data.get("sh") is None else int(data["sv"]),
                size=int(data.get("sz", 0)),
                status=int(data.get("st", 0)),
                fetched_at=float(data.get("ft", 0.0)),
                inlinks=int(data.get("in", 0)),
                retired=data.get("r"),
                weight=float(data.get("w", 1.0)),
                held_until=float(data.get("cl", 0.0)),
                request=None if data.get("rq") is None else base64.b64decode(
                    data["rq"], validate=True),
                hinted_change=None if data.get("cc") is None else float(data["cc"]),
                history=PageHistory.from_dict(data["h"]),
            )
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ValueError(f"page record is damaged ({type(exc).__name__}: {exc})") from None


_URL_IN_RECORD = re.compile(r'"u"\s*:\s*"((?:[^"\\]|\\.){1,2000})"')

#: How a record that fails the trust check is named (see from_json).
REFUSED = "it fails the trust check"
#: Unreadable page records logged one by one by a store; later ones are only counted.
QUARANTINE_LOGGED = 10


def record_url(raw: str | bytes) -> str | None:
    """The URL in a page record that cannot be read as a whole, if it still shows."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    found = _URL_IN_RECORD.search(text)
    if found is None:
        return None
    try:
        url = json.loads(f'"{found.group(1)}"')
    except ValueError:
        return None
    return url if isinstance(url, str) else None


def readable_record(fp: int, raw: str | bytes) -> PageRecord | None:
    """The record, or None if it cannot be read (a reader that only looks skips it; the
    crawl sets it aside when it meets it)."""
    try:
        return PageRecord.from_json(fp, raw.decode() if isinstance(raw, bytes) else raw)
    except (ValueError, UnicodeDecodeError):
        return None


def quarantine_message(where: str, fp: int, raw: str | bytes, error: str, count: int,
                       stat: str) -> str:
    """The ERROR a store logs for the ``count``-th page record it sets aside."""
    url = record_url(raw)
    page = f"page {url} (fingerprint {fp})" if url else f"page of fingerprint {fp}"
    last = (f" Further records set aside are only counted ({stat})."
            if count == QUARANTINE_LOGGED else "")
    requeue = ("--requeue refuses it unless its seal verifies under the keys given then, "
               "see docs/security.rst" if error.startswith(REFUSED)
               else "--requeue puts it back for a release that reads it")
    return (f"{where}: the history record of the {page} cannot be read ({error}). It is "
            f"set aside in the history's quarantine (scrapy frontier quarantine lists it; "
            f"{requeue}), and the crawl goes on. "
            "The page stays seen but has no recrawl schedule until it is fetched again (a "
            f"start request with meta['frontier_force'] = True fetches it).{last}")


def make_due(record: PageRecord) -> None:
    """Due at once, whatever its schedule (``scrapy frontier recrawl``): a retired page
    named this way comes back too. Its next visit sets its schedule again."""
    record.history.next_due = 0.0
    record.held_until = 0.0
    record.retired = None


def split_pending(pending: dict[int, PageRecord],
                  fps: Sequence[int]) -> tuple[dict[int, PageRecord], list[int]]:
    """For ``get_many`` of a store that buffers its writes: copies of the records of ``fps``
    still in ``pending`` (as the store would give them), and the fingerprints left to read."""
    found: dict[int, PageRecord] = {}
    wanted: list[int] = []
    for fp in fps:
        record = pending.get(fp)
        if record is not None:
            found[fp] = PageRecord.from_json(fp, record.to_json())
        else:
            wanted.append(fp)
    return found, wanted


class HistoryStore(Protocol):
    """Page records by fingerprint, with the due order of pages not retired.

    A record that cannot be read is set aside in the store's quarantine when it is met
    (``get`` answers None, ``due`` and ``scan`` skip it), never raised: one bad record
    must not stop every run.
    """

    #: Records this process set aside (frontier/history/quarantined).
    quarantined: int

    def get(self, fp: int) -> PageRecord | None: ...

    def get_many(self, fps: Sequence[int]) -> dict[int, PageRecord]:
        """The records of those of ``fps`` that exist, read together (one query or round
        trip where the store has them), as ``get`` reads each."""
        ...

    def put(self, record: PageRecord) -> None: ...

    def due(self, after: tuple[float, int], until: float, limit: int) -> list[PageRecord]:
        """Records not retired with ``after < (eligible, fp)`` and ``eligible <= until``,
        in ``(eligible, fp)`` order, at most ``limit``."""
        ...

    def next_due(self) -> float | None:
        """The earliest eligible time of a page not retired, if any."""
        ...

    def take_due(self, until: float, limit: int, hold_until: float) -> list[PageRecord] | None:
        """A store shared by several workers: up to ``limit`` records eligible by ``until``,
        held until ``hold_until`` in one atomic step, so that no two workers get the same
        page. None from a store of one process: the recrawler walks :meth:`due` itself."""
        ...

    def evict(self, keep: int) -> int:
        """Delete the lowest-weight records until at most ``keep`` remain; return how many."""
        ...

    def scan(self) -> Iterator[PageRecord]:
        """Every record not retired, in no particular order (streamed)."""
        ...

    def __len__(self) -> int: ...

    def unsaved(self) -> int:
        """How many records were put but are not durable yet (0 for a store in memory)."""
        ...

    def flush(self) -> None: ...

    def quarantine_size(self) -> int:
        """Records set aside because they could not be read (this run and earlier ones)."""
        ...

    def load_trust(self) -> dict[str, tuple[int, int]]:
        """Each host's checked change hints: (agreed, disagreed), over every run."""
        ...

    def add_trust(self, host: str, agreed: int, disagreed: int) -> None:
        """Count checks of ``host``'s hints (written with the next flush)."""
        ...

    def sync(self) -> None:
        """Flush, and make what was flushed survive a power loss (a no-op in memory)."""
        ...

    def close(self) -> None: ...


class SortedKeys:
    """A set of distinct, totally ordered tuples kept in order, for the stores' indexes.

    Sorted chunks of at most ``2 * load`` keys and each chunk's largest key: adding,
    removing and finding the first key after a given one bisect the chunk maxima, then
    one chunk (O(log n) comparisons, plus a move of at most one chunk in memory).
    """

    def __init__(self, load: int = 512) -> None:
        self._load = load
        self._chunks: list[list[tuple[Any, ...]]] = []
        self._maxes: list[tuple[Any, ...]] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, key: tuple[Any, ...]) -> None:
        """Add ``key`` (not in the set yet)."""
        self._len += 1
        maxes = self._maxes
        if not maxes:
            self._chunks.append([key])
            maxes.append(key)
            return
        i = bisect_left(maxes, key)
        if i == len(maxes):
            i -= 1
            chunk = self._chunks[i]
            chunk.append(key)
            maxes[i] = key
        else:
            chunk = self._chunks[i]
            insort(chunk, key)
        if len(chunk) > 2 * self._load:
            half = self._load
            self._chunks[i:i + 1] = [chunk[:half], chunk[half:]]
            maxes[i:i + 1] = [chunk[half - 1], chunk[-1]]

    def remove(self, key: tuple[Any, ...]) -> None:
        """Remove ``key`` (in the set)."""
        i = bisect_left(self._maxes, key)
        if i == len(self._maxes):
            raise KeyError(key)
        chunk = self._chunks[i]
        j = bisect_left(chunk, key)
        if chunk[j] != key:
            raise KeyError(key)
        del chunk[j]
        self._len -= 1
        if not chunk:
            del self._chunks[i]
            del self._maxes[i]
        elif j == len(chunk):
            self._maxes[i] = chunk[-1]

    def count_below(self, key: tuple[Any, ...]) -> int:
        """How many keys are smaller than ``key`` (O(chunks + log n))."""
        i = bisect_left(self._maxes, key)
        below = sum(len(chunk) for chunk in islice(self._chunks, i))
        if i < len(self._chunks):
            below += bisect_left(self._chunks[i], key)
        return below

    def first(self) -> tuple[Any, ...] | None:
        return self._chunks[0][0] if self._chunks else None

    def after(self, key: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        """The keys greater than ``key``, in order (do not change the set meanwhile)."""
        i = bisect_right(self._maxes, key)
        if i == len(self._chunks):
            return
        chunk = self._chunks[i]
        yield from islice(chunk, bisect_right(chunk, key), None)
        for chunk in islice(self._chunks, i + 1, None):
            yield from chunk


class MemoryHistoryStore:
    """A :class:`HistoryStore` in a dict, with in-memory indexes.

    As a durable store, it indexes a record as it was when put: the due order by
    ``(eligible, fp)`` of the pages not retired, and the eviction order by
    ``(weight, -fp)`` of all pages. No query looks at more records than it returns.
    """

    def __init__(self) -> None:
        self._records: dict[int, PageRecord] = {}
        self._json: dict[int, str] = {}
        self._due_key: dict[int, tuple[float, int]] = {}
        self._weight_key: dict[int, tuple[float, int]] = {}
        self._due = SortedKeys()
        self._weights = SortedKeys()
        #: Nothing is ever set aside: the store holds only the records it wrote.
        self.quarantined = 0
        self._trust: dict[str, tuple[int, int]] = {}

    def get(self, fp: int) -> PageRecord | None:
        # A copy, as a durable store would give: callers change what they get.
        text = self._json.get(fp)
        return None if text is None else PageRecord.from_json(fp, text)

    def get_many(self, fps: Sequence[int]) -> dict[int, PageRecord]:
        found = {}
        for fp in fps:
            text = self._json.get(fp)
            if text is not None:
                found[fp] = PageRecord.from_json(fp, text)
        return found

    def put(self, record: PageRecord) -> None:
        fp = record.fp
        self._json[fp] = record.to_json()
        self._records[fp] = record
        due_key = None if record.retired is not None else (record.eligible, fp)
        old = self._due_key.get(fp)
        if old != due_key:
            if old is not None:
                self._due.remove(old)
                del self._due_key[fp]
            if due_key is not None:
                self._due.add(due_key)
                self._due_key[fp] = due_key
        weight_key = (record.weight, -fp)
        old = self._weight_key.get(fp)
        if old != weight_key:
            if old is not None:
                self._weights.remove(old)
            self._weights.add(weight_key)
            self._weight_key[fp] = weight_key

    def due(self, after: tuple[float, int], until: float, limit: int) -> list[PageRecord]:
        out: list[PageRecord] = []
        if limit <= 0:
            return out
        for eligible, fp in self._due.after(after):
            if eligible > until:
                break
            out.append(PageRecord.from_json(fp, self._json[fp]))
            if len(out) >= limit:
                break
        return out

    def count_due(self, until: float, limit: int | None = None) -> int:
        """Pages not retired with an eligible time <= ``until`` (exact: ``limit`` is only
        a hint, for stores that count by reading)."""
        return self._due.count_below((until, 1 << 63))

    def take_due(self, until: float, limit: int, hold_until: float) -> None:
        """Not shared: the recrawler walks :meth:`due` itself."""
        return None

    def next_due(self) -> float | None:
        first = self._due.first()
        return None if first is None else float(first[0])

    def evict(self, keep: int) -> int:
        extra = len(self._records) - keep
        if extra <= 0:
            return 0
        victims = list(islice(self._weights.after((-math.inf, -math.inf)), extra))
        for key in victims:
            fp = -key[1]
            self._weights.remove(key)
            del self._weight_key[fp]
            due_key = self._due_key.pop(fp, None)
            if due_key is not None:
                self._due.remove(due_key)
            del self._records[fp]
            del self._json[fp]
        return len(victims)

    def scan(self) -> Iterator[PageRecord]:
        for fp, record in list(self._records.items()):
            if record.retired is None:
                yield PageRecord.from_json(fp, self._json[fp])

    def __len__(self) -> int:
        return len(self._records)

    def unsaved(self) -> int:
        return 0

    def flush(self) -> None:
        return None

    def quarantine_size(self) -> int:
        return 0

    def load_trust(self) -> dict[str, tuple[int, int]]:
        return dict(self._trust)

    def add_trust(self, host: str, agreed: int, disagreed: int) -> None:
        a, d = self._trust.get(host, (0, 0))
        self._trust[host] = (a + agreed, d + disagreed)

    def sync(self) -> None:
        return None

    def close(self) -> None:
        return None

