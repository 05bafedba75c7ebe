"""Crawler traps, learned: how much of what a host serves is new.

A trap serves endless URLs and little new content: an infinite calendar, a session id in
every link, pages that differ only in a counter. The :class:`TrapDetector` sees each fetched
page of a host -- its URL and the simhash of its visible text -- and keeps a window of the
host's last ``window`` pages. A page is *new* when its text is not a near-duplicate of a page
in the window (simhash within ``near_bits`` bits), or when its URL shape
(:func:`url_shape`) is not in the window. The host's *yield* is the share of new pages in its
window. Once the window is full and the yield is at most ``min_yield``, the host is a trap:
:meth:`TrapDetector.observe` says so once, with the evidence (a :class:`Containment`), and the
shell shrinks the host's budget to the pages it has fetched plus ``allowance``.

Memory is bounded: a window of at most ``window`` simhashes and shapes per host, kept for the
``max_hosts`` hosts fetched most recently (the least recently fetched goes first). Contained
hosts and hosts an operator released are remembered apart, by name: neither is judged again.
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


def _segment(seg: str) -> str:
    if _ID.fullmatch(seg):
        return "{id}"
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
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        key = key.lower()
        keys.add(key)
        if key in SESSION_KEYS or (key.endswith(("sid", "session")) and _TOKEN.fullmatch(value)):
            sessions.append(key)
    shape = "/" + "/".join(_segment(s) for s in segments[:MAX_SEGMENTS])
    if len(segments) > MAX_SEGMENTS:
        shape += "/..."
    if keys:
        shape += "?" + "&".join(sorted(keys))
    repeats = max(Counter(segments).values(), default=0)
    return UrlShape(shape, len(segments), tuple(sorted(set(sessions))), repeats)


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

    def evidence(self) -> str:
        """The evidence, in a sentence's words."""
        parts = [f"{self.new} of its last {self.window} pages were new, "
                 f"{self.near_duplicates} near-duplicates of a recent page",
                 f"{self.shapes} URL shape(s), mostly {self.top_shape}"]
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
    flags: deque[int] = field(default_factory=deque)
    """Per page: 1 new, 2 a near-duplicate (both bits may be set)."""
    shape_counts: Counter[str] = field(default_factory=Counter)
    new: int = 0
    near: int = 0
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
        bits = self.config.near_bits
        near = any((simhash ^ h).bit_count() <= bits for h in w.hashes)
        new = not near or not w.shape_counts[shape.text]
        flag = int(new) | (2 * near)
        if len(w.flags) >= self.config.window:
            old = w.flags.popleft()
            w.new -= old & 1
            w.near -= old >> 1
            w.hashes.popleft()
            gone = w.shapes.popleft()
            w.shape_counts[gone] -= 1
            if not w.shape_counts[gone]:
                del w.shape_counts[gone]
        w.flags.append(flag)
        w.hashes.append(simhash)
        w.shapes.append(shape.text)
        w.shape_counts[shape.text] += 1
        w.new += flag & 1
        w.near += flag >> 1
        w.pages += 1
        if len(w.sessions) < 4:
            w.sessions.update(shape.session_keys)
        w.max_depth = max(w.max_depth, shape.depth)
        w.max_repeats = max(w.max_repeats, shape.repeats)
        size = len(w.flags)
        if size < self.config.window or w.new > self.config.min_yield * size:
            return None
        del hosts[host]
        self.contained.add(host)
        return Containment(
            host=host, pages=w.pages, window=size, new=w.new, near_duplicates=w.near,
            shapes=len(w.shape_counts), top_shape=w.shape_counts.most_common(1)[0][0],
            session_keys=tuple(sorted(w.sessions)), max_depth=w.max_depth,
            max_repeats=w.max_repeats)

    def restore(self, host: str, state: str) -> None:
        """What the backend keeps about ``host``: "contained" (by this or another worker,
        or an earlier run) or "released" (taken back by an operator)."""
        self._hosts.pop(host, None)
        if state == "released":
            self.contained.discard(host)
            self.released.add(host)
        elif host not in self.released:
            self.contained.add(host)
