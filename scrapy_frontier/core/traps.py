"""Crawler traps, learned: how much of what a host serves is new.

A trap serves endless URLs and little new content: an infinite calendar, a session id in
every link, pages that differ only in a counter. The :class:`TrapDetector` sees each fetched
page of a host -- its URL and the simhash of its visible text -- and keeps a window of the
host's last ``window`` pages. A page is *new* when its text is not a near-duplicate of a page
in the window (simhash within ``near_bits`` bits), or when its URL shape
(:func:`url_shape`) is not in the window. The host's *yield* is the share of new pages in its
window.

A low yield alone does not make a trap: generated API documentation has thousands of short
pages of one template under a few shapes (``/fn.vaddq_s#.html``), near-duplicates by their
text, and finite. A trap's URLs also keep growing: a session parameter, a path segment
repeated three times, or one variable part (a digit run or an id at one place of a shape's
path, or the value of one query key) taking values on a third of the window's pages or more
(a counter, the days of a calendar, a token in every link; the documentation's
``8, 16, 32, 64`` take few). Once the window is full, the yield is at
most ``min_yield`` and the URLs grow, the host is a trap: :meth:`TrapDetector.observe` says so
once, with the evidence (a :class:`Containment`), and the shell shrinks the host's budget to
the pages it has fetched plus ``allowance``.

Memory is bounded: a window of at most ``window`` pages (a simhash, a shape and its variable
parts as one number) per host, kept for the ``max_hosts`` hosts fetched most recently (the
least recently fetched goes first). Contained hosts and hosts an operator released are
remembered apart, by name: neither is judged again.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

__all__ = ["Containment", "TrapConfig", "TrapDetector", "UrlShape", "url_shape"]

#: Path segments a shape keeps; deeper paths end in "/..." (repeating paths saturate).
MAX_SEGMENTS = 8
#: Query keys that carry a session, whatever their value.
SESSION_KEYS = frozenset({
    "sid", "session", "sessionid", "session_id", "sess", "sessid", "jsessionid", "phpsessid",
    "aspsessionid", "cfid", "cftoken", "zenid", "oscsid",
})
_DIGITS = re.compile(r"\d+")
#: An id-like segment: hex with a digit, at least 8 long; or a long run of id characters.
_ID = re.compile(r"(?=[a-f]*\d)[0-9a-f]{8,}|[a-z0-9_-]{24,}")
#: A value that looks random: 16+ hex or base64-ish characters with a digit.
_TOKEN = re.compile(r"(?=\D*\d)[A-Za-z0-9_-]{16,}")
#: Variable parts of a URL whose values a window keeps, in one number per page: 16 bits of
#: the part's name, 16 of its value and a bit that says it is there.
SLOTS = 6
_SLOT_BITS, _SLOT_MARK = 33, 1 << 32
#: A window's pages flags: new, a near-duplicate, a session parameter, a repeated segment.
_NEW, _NEAR, _SESSION, _REPEATS = 1, 2, 4, 8


@dataclass(frozen=True, slots=True)
class TrapConfig:
    """FRONTIER_TRAPS and its numbers (see docs/settings.rst)."""

    enabled: bool = False
    """FRONTIER_TRAPS: judge hosts by the yield of new content, and contain traps (opt-in:
    a false positive drops pages the spider asked for)."""
    window: int = 50
    """FRONTIER_TRAPS_WINDOW: a host is judged on its last this many pages, once it has them."""
    min_yield: float = 0.1
    """FRONTIER_TRAPS_MIN_YIELD: a host whose share of new pages in its window is at most
    this is contained."""
    allowance: int = 20
    """FRONTIER_TRAPS_ALLOWANCE: fetches a contained host keeps beyond those it has had."""
    near_bits: int = 8
    """Simhashes within this many bits are near-duplicates (more than the change test's 3:
    a small page's simhash moves more for a one-word edit)."""
    max_hosts: int = 10_000
    """Hosts whose windows are kept (the most recently fetched)."""


@dataclass(frozen=True, slots=True)
class UrlShape:
    """A URL with its variable parts blanked: what a page generator's URLs share."""

    text: str
    """Path segments with digit runs as ``#`` and ids as ``{id}``, query keys sorted
    without their values: ``/calendar/#/#/#?view``."""
    depth: int
    session_keys: tuple[str, ...]
    """Query or path parameters that carry a session id."""
    repeats: int
    """The most times one path segment occurs (``/a/b/a/b/a`` has 3)."""
    parts: tuple[tuple[str, str], ...] = ()
    """The variable parts, (name, value): the digit runs and ids blanked in the path, named by
    the path's shape and their place (``/cal/#/#/#@0``), then the query's values, named by
    their key (``?sid``: one name across the host's paths)."""

    def slots(self) -> int:
        """The first :data:`SLOTS` parts, 16 bits of each name and value, as one number."""
        packed = 0
        for i, (name, value) in enumerate(self.parts[:SLOTS]):
            part = (hash(name) & 0xFFFF) << 16 | (hash(value) & 0xFFFF)
            packed |= (part | _SLOT_MARK) << (_SLOT_BITS * i)
        return packed


def _segment(seg: str, values: list[str]) -> str:
    if _ID.fullmatch(seg):
        values.append(seg)
        return "{id}"
    values.extend(_DIGITS.findall(seg))
    return _DIGITS.sub("#", seg)


def url_shape(url: str) -> UrlShape:
    """The shape of ``url`` (see :class:`UrlShape`)."""
    parts = urlsplit(url)
    sessions: list[str] = []
    segments = []
    for raw in parts.path.lower().split("/"):
        if not raw:
            continue
        seg, _, params = raw.partition(";")  # /page;jsessionid=...
        if params:
            sessions.extend(p.partition("=")[0] for p in params.split(";")
                            if p.partition("=")[0] in SESSION_KEYS)
        segments.append(seg)
    keys = set()
    query = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        key = key.lower()
        keys.add(key)
        query.append((key, value))
        if key in SESSION_KEYS or (key.endswith(("sid", "session")) and _TOKEN.fullmatch(value)):
            sessions.append(key)
    values: list[str] = []
    shape = "/" + "/".join(_segment(s, values) for s in segments[:MAX_SEGMENTS])
    if len(segments) > MAX_SEGMENTS:
        shape += "/..."
    named = [(f"{shape}@{i}", value) for i, value in enumerate(values)]
    if keys:
        shape += "?" + "&".join(sorted(keys))
    named.extend((f"?{key}", value) for key, value in sorted(query))
    repeats = max(Counter(segments).values(), default=0)
    return UrlShape(shape, len(segments), tuple(sorted(set(sessions))), repeats, tuple(named))


@dataclass(frozen=True, slots=True)
class Containment:
    """A host found to be a trap, and why."""

    host: str
    pages: int
    """Pages of the host judged so far (its window's and those before)."""
    window: int
    new: int
    """Pages of the window that were new (text or shape)."""
    near_duplicates: int
    """Pages of the window whose text was a near-duplicate of an earlier one in it."""
    shapes: int
    """Distinct URL shapes in the window."""
    top_shape: str
    session_keys: tuple[str, ...]
    max_depth: int
    max_repeats: int
    variety: int = 0
    """The most values one variable part of the URLs took in the window."""

    def evidence(self) -> str:
        """The evidence, in a sentence's words."""
        parts = [f"{self.new} of its last {self.window} pages were new, "
                 f"{self.near_duplicates} near-duplicates of a recent page",
                 f"{self.shapes} URL shape(s), mostly {self.top_shape}"]
        if self.variety:
            parts.append(f"{self.variety} values of one part of the URLs")
        if self.session_keys:
            parts.append("session parameter(s) " + ", ".join(self.session_keys))
        if self.max_repeats >= 3:
            parts.append(f"a path segment repeated {self.max_repeats} times")
        parts.append(f"path depth up to {self.max_depth}")
        return "; ".join(parts)


@dataclass(slots=True)
class _Window:
    """One host's last pages."""

    hashes: deque[int] = field(default_factory=deque)
    shapes: deque[str] = field(default_factory=deque)
    slots: deque[int] = field(default_factory=deque)
    """Per page: its shape's variable parts (:meth:`UrlShape.slots`)."""
    flags: deque[int] = field(default_factory=deque)
    """Per page: _NEW, _NEAR, _SESSION, _REPEATS (any of them)."""
    shape_counts: Counter[str] = field(default_factory=Counter)
    new: int = 0
    near: int = 0
    growing: int = 0
    """Pages of the window with a session parameter or a repeated segment."""
    pages: int = 0
    sessions: set[str] = field(default_factory=set)
    max_depth: int = 0
    max_repeats: int = 0


class TrapDetector:
    """The yield of new content per host, from its recent pages (see the module doc)."""

    def __init__(self, config: TrapConfig) -> None:
        if config.window < 1:
            raise ValueError(f"window must be >= 1, got {config.window}")
        self.config = config
        self._hosts: OrderedDict[str, _Window] = OrderedDict()
        #: Hosts found to be traps (never judged again).
        self.contained: set[str] = set()
        #: Contained hosts an operator took back (never judged again).
        self.released: set[str] = set()

    @property
    def tracked(self) -> int:
        """Hosts with a window now."""
        return len(self._hosts)

    def observe(self, host: str, url: str, simhash: int) -> Containment | None:
        """A page of ``host`` at ``url`` with text of ``simhash`` was fetched: the host's
        containment if this page shows it is a trap (once per host), else None."""
        if host in self.contained or host in self.released:
            return None
        hosts = self._hosts
        w = hosts.get(host)
        if w is None:
            w = hosts[host] = _Window()
            if len(hosts) > self.config.max_hosts:
                hosts.popitem(last=False)
        else:
            hosts.move_to_end(host)
        shape = url_shape(url)
        text = shape.text
        bits = self.config.near_bits
        near = any((simhash ^ h).bit_count() <= bits for h in w.hashes)
        new = not near or not w.shape_counts[text]
        flag = ((_NEW if new else 0) | (_NEAR if near else 0)
                | (_SESSION if shape.session_keys else 0)
                | (_REPEATS if shape.repeats >= 3 else 0))
        if len(w.flags) >= self.config.window:
            self._drop_oldest(w)
        w.flags.append(flag)
        w.hashes.append(simhash)
        w.shapes.append(text)
        w.slots.append(shape.slots())
        w.shape_counts[text] += 1
        w.new += bool(flag & _NEW)
        w.near += bool(flag & _NEAR)
        w.growing += bool(flag & (_SESSION | _REPEATS))
        w.pages += 1
        if len(w.sessions) < 4:
            w.sessions.update(shape.session_keys)
        w.max_depth = max(w.max_depth, shape.depth)
        w.max_repeats = max(w.max_repeats, shape.repeats)
        size = len(w.flags)
        if size < self.config.window or w.new > self.config.min_yield * size:
            return None
        variety = _variety(w)
        if not w.growing and variety < max(2, size // 3):
            return None  # near-duplicates, but a finite set of URLs: documentation, say
        del hosts[host]
        self.contained.add(host)
        return Containment(
            host=host, pages=w.pages, window=size, new=w.new, near_duplicates=w.near,
            shapes=len(w.shape_counts), top_shape=w.shape_counts.most_common(1)[0][0],
            session_keys=tuple(sorted(w.sessions)), max_depth=w.max_depth,
            max_repeats=w.max_repeats, variety=variety)

    @staticmethod
    def _drop_oldest(w: _Window) -> None:
        old = w.flags.popleft()
        w.new -= bool(old & _NEW)
        w.near -= bool(old & _NEAR)
        w.growing -= bool(old & (_SESSION | _REPEATS))
        w.hashes.popleft()
        w.slots.popleft()
        gone = w.shapes.popleft()
        w.shape_counts[gone] -= 1
        if not w.shape_counts[gone]:
            del w.shape_counts[gone]

    def restore(self, host: str, state: str) -> None:
        """What the backend keeps about ``host``: "contained" (by this or another worker,
        or an earlier run) or "released" (taken back by an operator)."""
        self._hosts.pop(host, None)
        if state == "released":
            self.contained.discard(host)
            self.released.add(host)
        elif host not in self.released:
            self.contained.add(host)


def _variety(w: _Window) -> int:
    """The most values one variable part of the URLs took in the window."""
    seen: dict[int, set[int]] = {}
    for packed in w.slots:
        while packed:
            part = packed & (_SLOT_MARK - 1)
            seen.setdefault(part >> 16, set()).add(part & 0xFFFF)
            packed >>= _SLOT_BITS
    return max(map(len, seen.values()), default=0)
