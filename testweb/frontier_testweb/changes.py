"""Pages that change over time, noisy pages, and the ground truth of both.

For the incremental-recrawl (freshness) work the test web can make its generated pages change.
Everything here is a pure function of ``(seed, options)`` and of the time since the server
started, so a benchmark can rebuild the exact truth the server used without talking to it.

Change model
    A *changing* page (host ``i``, page ``j``) changes as a Poisson process of its own: its
    change events are the partial sums of exponential gaps drawn from a stream seeded by
    ``(seed, i, j)``, counted in seconds since the server started (``time.monotonic()``). Its
    *version* at time ``t`` is the number of events in ``(0, t]`` (0 at the start). All changing
    pages have rate ``rate`` (changes per second), or with ``rate_shape=K`` each page's rate is
    drawn once from a gamma distribution of shape ``K`` and mean ``rate`` (variance
    ``rate**2 / K``: small ``K``, very unequal rates). Which pages change is decided per page by
    the seed, with probability ``changing_fraction``.

    Events are generated lazily and cached per page: each gap costs one BLAKE2b hash (no
    per-page random-generator state is kept). The first look at a page at time ``t`` costs about
    ``rate * t`` gaps, later looks only the events since the previous one.

Page content (whenever a change model is given to the server)
    A long page (about 1300 words): a "news" section of about 400 words derived from
    ``(seed, i, j, version)``, which is replaced entirely when the version changes, and about
    900 stable words. The links are those of :meth:`WebSpec.links` whatever the version, so the
    link graph never changes. A version change moves a 64-bit word-shingle simhash by tens of
    bits.

Noisy pages
    Chosen per page by the seed with probability ``noisy_fraction``, *independently* of the
    changing pages (a page may be both: a news page with a "generated" line). A noisy page adds
    one line ``Generated for request N`` where ``N`` counts the server's responses for that page
    (1, 2, ...), so its bytes differ on every fetch while one word token changes among about 1300:
    a 64-bit 3-word-shingle simhash typically moves 0 to 3 bits (a few percent of fetch pairs move
    4 or 5). Noisy pages send no ``ETag`` (as dynamic pages on the real web do), but do send the
    ``Last-Modified`` of their stable part.

Small edits (``serve --edits``)
    Pages change only when the test edits them (``POST /_edit/p/N`` on the page's host; see
    :func:`edit_page`). Each edit replaces one word of the news section (edit ``k`` puts
    ``revisionk`` at a position picked by the seed), so a 64-bit 3-word-shingle simhash moves a
    few bits, as a noise line does: a change that is real, and small.

Validators (``ETag``, ``Last-Modified``) and the 304 rules are described in
:func:`evaluate_conditional`.
"""

from __future__ import annotations

import html
import json
import math
import random
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from email.utils import formatdate, mktime_tz, parsedate_tz
from hashlib import blake2b
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from urllib.request import Request, urlopen

from frontier_testweb.spec import PAGE_PREFIX, WebSpec

__all__ = [
    "ChangeModel",
    "ChangeOptions",
    "GroundTruth",
    "edit_page",
    "evaluate_conditional",
    "http_date",
    "parse_http_date",
    "render_dynamic_page",
]

#: Upper bound on a page's mean change rate (changes per second), which keeps event generation
#: (about rate x elapsed seconds per page) bounded.
MAX_RATE = 1000.0
#: Words of the stable text and of the versioned "news" section of a dynamic page.
STABLE_WORDS = 900
NEWS_WORDS = 400
_PARAGRAPH_WORDS = 75
_UNIT = float(1 << 53)


def _unit(*parts: object) -> float:
    """A uniform float in [0, 1) from a hash of ``parts`` (stable across runs and processes)."""
    digest = blake2b(":".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 11) / _UNIT


@dataclass(frozen=True)
class ChangeOptions:
    """The server options of the change model (CLI ``--change-rate`` and friends)."""

    rate: float = 0.0
    """Mean changes per second of a changing page; 0 = no page ever changes."""
    changing_fraction: float = 1.0
    """Fraction of the generated pages that change (chosen per page by the seed)."""
    rate_shape: float | None = None
    """Gamma shape of the per-page rates (mean ``rate``); None = every page has ``rate``."""
    noisy_fraction: float = 0.0
    """Fraction of the generated pages with a per-response noise line (chosen by the seed)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= MAX_RATE or math.isnan(self.rate):
            raise ValueError(f"change rate must be in [0, {MAX_RATE}], got {self.rate}")
        for name in ("changing_fraction", "noisy_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.rate_shape is not None and not 0.01 <= self.rate_shape <= 1e6:
            raise ValueError(f"rate_shape must be in [0.01, 1e6], got {self.rate_shape}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChangeOptions:
        shape = d.get("rate_shape")
        return cls(
            rate=float(d.get("rate", 0.0)),
            changing_fraction=float(d.get("changing_fraction", 1.0)),
            rate_shape=None if shape is None else float(shape),
            noisy_fraction=float(d.get("noisy_fraction", 0.0)),
        )


class ChangeModel:
    """Which pages change or are noisy, and when each page changes.

    Times are seconds since the server started. Host and page are indexes, as in
    :meth:`WebSpec.edges`. Instances cache generated events (not thread-safe).
    """

    def __init__(self, seed: int, options: ChangeOptions) -> None:
        self.seed = seed
        self.options = options
        self._rates: dict[tuple[int, int], float] = {}
        self._events: dict[tuple[int, int], list[float]] = {}

    def is_changing(self, host: int, page: int) -> bool:
        o = self.options
        return o.rate > 0.0 and _unit(self.seed, "changing", host, page) < o.changing_fraction

    def is_noisy(self, host: int, page: int) -> bool:
        return _unit(self.seed, "noisy", host, page) < self.options.noisy_fraction

    def page_rate(self, host: int, page: int) -> float:
        """This page's mean changes per second (0 for a page that does not change)."""
        key = (host, page)
        rate = self._rates.get(key)
        if rate is None:
            o = self.options
            if not self.is_changing(host, page):
                rate = 0.0
            elif o.rate_shape is None:
                rate = o.rate
            else:
                rng = random.Random(f"{self.seed}:rate:{host}:{page}")
                rate = min(MAX_RATE, rng.gammavariate(o.rate_shape, o.rate / o.rate_shape))
            self._rates[key] = rate
        return rate

    def _events_until(self, host: int, page: int, t: float) -> list[float]:
        """The page's event times, generated at least until one event is later than ``t``."""
        rate = self.page_rate(host, page)
        key = (host, page)
        events = self._events.setdefault(key, [])
        if rate <= 0.0:
            return events
        last = events[-1] if events else 0.0
        while last <= t:
            u = _unit(self.seed, "event", host, page, len(events))
            last += -math.log(1.0 - u) / rate
            events.append(last)
        return events

    def version(self, host: int, page: int, t: float) -> int:
        """Number of change events in (0, t]: the page's version at ``t`` (0 before any)."""
        if t <= 0.0:
            return 0
        return bisect_right(self._events_until(host, page, t), t)

    def change_times(self, host: int, page: int, t0: float, t1: float) -> list[float]:
        """The page's change times in (t0, t1], in order."""
        if t1 <= t0 or t1 <= 0.0:
            return []
        events = self._events_until(host, page, t1)
        return events[bisect_right(events, t0) : bisect_right(events, t1)]

    def last_change(self, host: int, page: int, t: float) -> float:
        """Time of the last change event at or before ``t``; 0.0 (the start) if none."""
        n = self.version(host, page, t)
        return self._events[(host, page)][n - 1] if n else 0.0

    def previous_change(self, host: int, page: int, t: float) -> float | None:
        """Time of the change before the last one at or before ``t``, the start (0.0) counting
        as a change; None at version 0 (the start is the last "change" then)."""
        n = self.version(host, page, t)
        if n == 0:
            return None
        return self._events[(host, page)][n - 2] if n >= 2 else 0.0

    def etag(self, host: int, page: int, version: int) -> str:
        """The strong entity tag (with its quotes) of a page version.

        It names the content, which is a function of (seed, host, page, version) for one server
        run (cross-host links carry the ports, which a later run may change).
        """
        digest = blake2b(f"{self.seed}:{host}:{page}:{version}".encode(), digest_size=8)
        return f'"{digest.hexdigest()}"'


class GroundTruth:
    """The change model as a benchmark sees it: host addresses (a named
    host: its name), URL paths, monotonic times.

    ``started`` is the server's ``time.monotonic()`` at start, ``started_wall`` its
    ``time.time()`` at the same moment (only Last-Modified dates need it). Build one from the
    JSON line ``serve`` prints with :meth:`from_announcement`, or from a running
    :class:`~frontier_testweb.server.TestWebServer` with its ``ground_truth()``.
    """

    def __init__(
        self,
        model: ChangeModel,
        hosts: Sequence[tuple[str, int]],
        started: float,
        started_wall: float = 0.0,
    ) -> None:
        self.model = model
        self.started = started
        self.started_wall = started_wall
        self._hosts = {address: (i, pages) for i, (address, pages) in enumerate(hosts)}

    @classmethod
    def from_announcement(cls, info: Mapping[str, Any]) -> GroundTruth:
        """From the JSON line printed by ``python -m frontier_testweb serve``.

        Documentation hosts (``doc_root`` set) get no generated pages.
        """
        changes = info.get("changes") or {}
        model = ChangeModel(int(info["seed"]), ChangeOptions.from_dict(changes))
        hosts = [
            (str(h.get("name") or h["address"]), 0 if h.get("doc_root") else int(h["pages"]))
            for h in info["hosts"]
        ]
        return cls(model, hosts, float(info["started"]), float(info.get("started_wall", 0.0)))

    def page_of(self, address: str, path: str) -> tuple[int, int] | None:
        """(host index, page) of a generated page's URL path, or None."""
        entry = self._hosts.get(address)
        if entry is None or not path.startswith(PAGE_PREFIX):
            return None
        digits = path[len(PAGE_PREFIX) :]
        if not digits.isdigit() or (len(digits) > 1 and digits[0] == "0"):
            return None
        page = int(digits)
        return (entry[0], page) if page < entry[1] else None

    def _page(self, address: str, path: str) -> tuple[int, int]:
        found = self.page_of(address, path)
        if found is None:
            raise KeyError(f"not a generated page: {address}{path}")
        return found

    def version(self, address: str, path: str, when: float) -> int:
        """The page's version at monotonic time ``when``; -1 if it is not a generated page."""
        found = self.page_of(address, path)
        if found is None:
            return -1
        return self.model.version(*found, when - self.started)

    def change_times(self, address: str, path: str, t0: float, t1: float) -> list[float]:
        """Monotonic times of the page's changes in (t0, t1] (KeyError for other paths)."""
        host, page = self._page(address, path)
        rel = self.model.change_times(host, page, t0 - self.started, t1 - self.started)
        return [self.started + x for x in rel]

    def is_changing(self, address: str, path: str) -> bool:
        return self.model.is_changing(*self._page(address, path))

    def is_noisy(self, address: str, path: str) -> bool:
        return self.model.is_noisy(*self._page(address, path))

    def rate(self, address: str, path: str) -> float:
        return self.model.page_rate(*self._page(address, path))

    def etag(self, address: str, path: str, when: float) -> str | None:
        """The ETag served at ``when`` (None for noisy pages, which send none)."""
        host, page = self._page(address, path)
        if self.model.is_noisy(host, page):
            return None
        return self.model.etag(host, page, self.model.version(host, page, when - self.started))

    def last_modified(self, address: str, path: str, when: float) -> float:
        """Wall-clock time (``time.time()`` scale) of the last change at or before ``when``,
        or of the server start; the ``Last-Modified`` header is this, rounded down."""
        host, page = self._page(address, path)
        return self.started_wall + self.model.last_change(host, page, when - self.started)


# -- HTTP dates and conditional requests -----------------------------------------------------


def http_date(wall: float) -> str:
    """IMF-fixdate of ``wall`` rounded down to the second."""
    return formatdate(math.floor(wall), usegmt=True)


def parse_http_date(value: str) -> int | None:
    """Whole seconds since the epoch of an HTTP date, or None if it does not parse."""
    try:
        parsed = parsedate_tz(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None:
        return None
    try:
        return int(mktime_tz(parsed))
    except (OverflowError, ValueError):
        return None


def _tags(header: str) -> list[str]:
    """Entity tags of an If-None-Match value, without any ``W/`` prefix ("*" kept)."""
    out = []
    for raw in header.split(","):
        tag = raw.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag:
            out.append(tag)
    return out


def evaluate_conditional(
    if_none_match: str | None,
    if_modified_since: str | None,
    etag: str | None,
    last_change_wall: float,
    previous_change_wall: float | None,
    now_wall: float,
) -> bool:
    """Whether a GET/HEAD gets 304 Not Modified; the precedence of RFC 9110 section 13.2.2.

    * ``If-None-Match`` present: 304 iff one of its tags equals the current ``etag`` (weak
      comparison: ``W/`` is ignored), or it is ``*``. ``If-Modified-Since`` is then ignored. A
      page without an ETag (noisy pages) matches only ``*``.
    * Else ``If-Modified-Since`` with a valid date ``D`` not later than ``now_wall``: with
      ``L = floor(last_change_wall)`` (the Last-Modified sent), 304 iff

      - ``D >= L + 1``: the last change happened before second ``D`` began, or
      - ``D == L`` and the page did not change twice within second ``L``
        (``previous_change_wall`` is the time of the change before the last one, the server
        start counting as a change; None when there is none). The Last-Modified of two
        versions changed within one second is the same date, so the date alone cannot tell
        which one the client has: then the answer is 200.
    * Else (no condition, an unparsable or future date): no 304.

    ``D == L`` assumes the client echoes a Last-Modified it received, as HTTP caches do. A
    client that sends a date of its own (e.g. the ``Date`` of an earlier response) equal to
    ``L`` may have fetched during second ``L`` before the change, and get a 304 for content
    that changed later in that second: the 1-second resolution of HTTP dates, which ETags do
    not have.
    """
    if if_none_match is not None:
        tags = _tags(if_none_match)
        return "*" in tags or (etag is not None and etag in tags)
    if if_modified_since is None:
        return False
    date = parse_http_date(if_modified_since)
    if date is None or date > math.floor(now_wall):
        return False
    last = math.floor(last_change_wall)
    if date >= last + 1:
        return True
    if date == last:
        return previous_change_wall is None or math.floor(previous_change_wall) < last
    return False


# -- content ---------------------------------------------------------------------------------

_VOCABULARY_TEXT = (
    "alpha amber anchor apple arch autumn badge basin beacon berry birch blossom border bridge "
    "brook cabin canal candle canyon carbon castle cedar chalk channel cherry cider circle cliff "
    "clock cloud coast comet copper coral cotton crane crystal current dawn delta desert dune "
    "eagle ember engine falcon fern field flame forest fossil fountain garden garnet glacier "
    "granite harbor hazel horizon island ivory jasmine jungle kettle lagoon lantern lemon maple "
    "marble meadow mirror morning mountain needle north ocean olive orbit orchard paper pebble "
    "pepper pine planet plaza prairie quartz rain raven reef ribbon river saddle salmon sand "
    "shadow signal silver slate spring spruce stone storm summer thunder timber tower valley "
    "velvet violet walnut willow window winter yarrow zephyr"
)
_VOCABULARY = tuple(_VOCABULARY_TEXT.split(" "))


def _words(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(_VOCABULARY) for _ in range(count)]


def _paragraphs(words: list[str]) -> str:
    return "\n".join(
        f"<p>{' '.join(words[k : k + _PARAGRAPH_WORDS])}</p>"
        for k in range(0, len(words), _PARAGRAPH_WORDS)
    )


def render_dynamic_page(
    spec: WebSpec,
    host_index: int,
    page: int,
    port_of: Mapping[str, int],
    version: int,
    noise: str | None = None,
    edits: int = 0,
) -> bytes:
    """The long HTML of a generated page at ``version``, with an optional noise line, after
    ``edits`` small edits of its news section.

    The same links as :meth:`WebSpec.render_page`; the news section depends on ``version``
    and ``edits``, the rest only on (seed, host, page). Raises IndexError for unknown pages.
    """
    links = spec.links(host_index, page, port_of)
    title = f"Host {spec.hosts[host_index].key} page {page}"
    stable = _words(random.Random(f"{spec.seed}:stable:{host_index}:{page}"), STABLE_WORDS)
    news = _words(random.Random(f"{spec.seed}:news:{host_index}:{page}:{version}"), NEWS_WORDS)
    for k in range(1, edits + 1):
        news[int(_unit(spec.seed, "edit", host_index, page, k) * NEWS_WORDS)] = f"revision{k}"
    items = "\n".join(
        f'<li><a href="{html.escape(href)}">link {i}</a></li>' for i, href in enumerate(links)
    )
    stamp = f'<p class="stamp">{html.escape(noise)}</p>\n' if noise is not None else ""
    body = (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        "</head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n"
        f'<div class="news">\n{_paragraphs(news)}\n</div>\n'
        f'<div class="text">\n{_paragraphs(stable)}\n</div>\n'
        f"{stamp}<ul>\n{items}\n</ul>\n"
        "</body></html>\n"
    )
    return body.encode("utf-8")


# -- small edits (serve --edits) -------------------------------------------------------------

#: The path prefix of an edit: ``POST /_edit/p/N`` edits page N of the host it is sent to.
EDIT_PREFIX = "/_edit"


def edit_page(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """Edit the page at ``url`` (a test web started with ``--edits``) once, now; returns the
    server's answer: ``{"edits": n, "at": wall-clock time of the edit}``."""
    parts = urlsplit(url)
    target = urlunsplit((parts.scheme, parts.netloc, EDIT_PREFIX + parts.path, "", ""))
    with urlopen(Request(target, data=b"", method="POST"), timeout=timeout) as answer:
        result: dict[str, Any] = json.loads(answer.read())
    return result
