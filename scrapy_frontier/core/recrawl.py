"""Incremental recrawl: which known pages are due, and what each visit taught us.

:class:`Recrawler` sits between the scheduler, the spider middleware and a
:class:`~scrapy_frontier.core.history.HistoryStore`. It has no Scrapy imports: the
middleware turns responses into digests and simhashes, the scheduler turns due
records into requests.

* **visits** -- :meth:`visited` (a full response), :meth:`not_modified` (a 304),
  :meth:`failed` (an error status or a download error), :meth:`gone` (404/410)
  update the page's record and its next due time (a refresh predictor from
  :mod:`scrapy_frontier.core.refresh`, clamped to [FRONTIER_RECRAWL_MIN,
  FRONTIER_RECRAWL_MAX]).
* **the start gate** -- :meth:`admit_start` tells whether a start request for a known
  URL may be fetched now (its page is due, not retired, not started elsewhere).
* **the feed** -- :meth:`take_due` hands out due pages in due order, once each.

A page is *eligible* from a tenth of its interval before its due time (see
``history.DUE_SLACK``). A page handed out (or admitted) is *held* for the
due hold, so the feed and the gate never hand it out twice; the visit then
sets the real next due time. A held page that is never fetched (the crawl
was stopped, its frontier state deleted) becomes due again after the hold.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from scrapy_frontier.core.change_evidence import (
    Evidence,
    found_change,
    full_visit,
    same_validator,
)
from scrapy_frontier.core.hint_trust import MIN_CHECKS, HintTrust
from scrapy_frontier.core.history import HistoryStore, PageRecord, make_due
from scrapy_frontier.core.recrawl_priority import (
    change_term,
    depth_quality,
    inlinks_quality,
    quality_term,
)
from scrapy_frontier.core.refresh import (
    DAY,
    AutoSelector,
    EqualInterval,
    EstimatorOptimal,
    HalveDouble,
    NutchAdaptive,
    PoissonTarget,
    Predictor,
    RefreshConfig,
    Refresher,
    TimelyReturn,
    calibrate,
)
from scrapy_frontier.core.simhash import SIMHASH_VERSION, is_change, simhash

MODES = ("off", "due", "continuous")
PREDICTORS = (
    "auto", "poisson", "estimator_optimal", "halve_double", "nutch", "timely_return",
    "equal_interval",
)
GONE_STATUSES = frozenset({404, 410})
#: Texts longer than this are simhashed on their first part only (bounded CPU per page).
SIMHASH_MAX_CHARS = 200_000


def make_predictor(name: str, config: RefreshConfig) -> Predictor:
    simple: dict[str, Callable[[RefreshConfig], Predictor]] = {
        "poisson": PoissonTarget,
        "estimator_optimal": EstimatorOptimal,
        "halve_double": HalveDouble,
        "nutch": NutchAdaptive,
        "timely_return": TimelyReturn,
        "equal_interval": EqualInterval,
    }
    if name == "auto":
        order = ("poisson", "equal_interval", "timely_return", "halve_double", "nutch")
        return AutoSelector([simple[n](config) for n in order])
    if name not in simple:
        raise ValueError(f"unknown refresh predictor {name!r}; use one of {', '.join(PREDICTORS)}")
    return simple[name](config)


@dataclass
class RecrawlSettings:
    mode: str = "due"
    refresh: RefreshConfig = field(default_factory=RefreshConfig)
    predictor: str = "timely_return"
    simhash_threshold: int = 3
    exact: bool = False
    pass_304: bool = False
    refetch_all: bool = False
    """This run takes every page not retired as due (FRONTIER_RECRAWL_ALL), once."""
    max_pages: int = 0
    """Cap on the history's pages (0: no cap); the lowest-quality pages go first."""
    retire_after: int = 5
    """Consecutive failed visits after which a page is retired (0: never)."""
    quality: str = "depth"
    """'depth', 'inlinks', or an import path of a callable (see quality_callable)."""
    quality_callable: Any = None
    """A callable given directly in the settings, taking a PageRecord."""
    budget: float = 0.0
    """Recrawl fetches per day (estimator_optimal spreads them for the best freshness)."""
    feed_batch: int = 500


@dataclass
class Visit:
    """What the middleware extracted from a response."""

    status: int
    digest: str | None = None
    text: str | None = None
    """The visible text, simhashed only when the digest changed (None: binary body)."""
    text_source: Callable[[], str | None] | None = None
    """Makes the visible text when ``text`` is None; called only if a simhash is needed."""
    simhash: int | None = None
    size: int = 0
    etag: str | None = None
    last_modified: str | None = None
    depth: int = 0
    callback: str | None = None
    request: bytes | None = None
    """The encoded request to replay on a recrawl (opaque here; see the scheduler)."""


#: Pages never fetched whose changefreq is kept for their first interval (about 100 bytes
#: each).
SEEDS_KEPT = 200_000

#: Seconds a hinted change time may be past a visit and still be that visit's content
#: (clocks, and sitemaps written to the second).
HINT_SLACK = 1.0

#: Moved hints of a host whose hints are not decided yet (too few checks) that make their
#: pages due in one run: twice the checks a host needs. The others are held until these
#: probes are back.
PROBES_PER_RUN = 2 * MIN_CHECKS

#: After a host's first probe, one page in 2**PROBE_BITS (those whose scattered fingerprint
#: has that many top bits 0) is a probe.
PROBE_BITS = 3
_SPREAD = 0x9E3779B97F4A7C15  # Fibonacci hashing: the product's top bits mix every bit of fp
_MASK64 = (1 << 64) - 1

#: Pages held past the probes that a run remembers, to make them due once their host is
#: trusted, and read times of unmoved hints it remembers (about 100 bytes each).
HELD_KEPT = 200_000

#: One hint of a sitemap or feed: (page fingerprint, URL, hinted change time (wall
#: clock), hinted change period in seconds).
PageHint = tuple[int, str, "float | None", "float | None"]

#: A census counts due pages up to this many: past it, a count on an SQLite index
#: would hold the crawl for tens of milliseconds (about 7 ms per 100 000 pages).
DUE_COUNT_CAP = 100_000


class Recrawler:
    def __init__(
        self,
        settings: RecrawlSettings,
        store: HistoryStore,
        *,
        clock: Callable[[], float] = time.time,
        quality: Callable[[PageRecord], float] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.predictor = make_predictor(settings.predictor, settings.refresh)
        self.refresher = Refresher(self.predictor, settings.refresh, clock)
        self.quality = quality or _builtin_quality(settings.quality)
        refresh = settings.refresh
        self.due_hold = max(refresh.min_interval, refresh.initial_interval)
        self.counters: dict[str, float] = {}
        self._cursor: tuple[float, int] = (-math.inf, -(1 << 63))
        self._boundary = clock()
        #: Pages eligible up to this time are due in this run (the run's start, or every
        #: page with FRONTIER_RECRAWL_ALL).
        self._all = settings.refetch_all and settings.mode == "due"
        self._due_until = math.inf if self._all else self._boundary
        first_due = store.next_due()
        # Nothing due at the start of a "due" run: the feed has nothing to hand out.
        self._exhausted = first_due is None or first_due > self._due_until
        self._inlinks: dict[int, int] = {}
        #: How far each host's change hints agree with what fetches find.
        self.trust = HintTrust(store.load_trust())
        #: First intervals of pages never fetched, from their sitemaps' changefreq.
        self._seeds: dict[int, float] = {}
        #: When each unmoved hint was read, in this run (see _check_hint).
        self._read_at: dict[int, float] = {}
        #: Moved hints made due in this run, per host not yet decided (see _probe).
        self._probes: dict[str, int] = {}
        #: Pages whose moved hints wait for their host to be decided (see _hold), and the
        #: checks of such a host in this run.
        self._held: dict[str, list[int]] = {}
        self._probes_back: dict[str, int] = {}
        #: Held pages of hosts since trusted, made due by the next take_due calls.
        self._releasing: deque[int] = deque()
        self._held_count = 0
        self._puts = 0
        self._calibrated_at = -math.inf
        self.maybe_calibrate()

    def maybe_calibrate(self) -> None:
        """estimator_optimal: spread the recrawl budget over the pages' estimated rates.

        At the start of each run, and once a day in a continuous crawl.
        """
        if not isinstance(self.predictor, EstimatorOptimal):
            return
        now = self.clock()
        if now - self._calibrated_at < DAY:
            return
        self._calibrated_at = now
        mu = calibrate(
            self.predictor, lambda: (r.history for r in self.store.scan()),
            self.settings.budget / DAY,
        )
        if mu is not None:
            self.counters["recrawl/mu"] = mu

    def _count(self, key: str, n: float = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    # -- the due gate and the feed ---------------------------------------------------------

    def admit_start(self, fp: int, seen: bool, *, shared: bool) -> tuple[bool, PageRecord | None]:
        """May a start request for page ``fp`` (``dont_filter``) be fetched now?

        ``seen``: the seen set knew the URL. A start request is fetched once per crawl,
        however many workers start it and however often the crawl is resumed:

        * a page never fetched is admitted unless it is seen (queued already);
        * a page fetched in this run is admitted again in one process (Scrapy's
          ``dont_filter`` contract), never on a ``shared`` frontier (another worker
          started it);
        * a page fetched in an earlier run is admitted only when it is due (held).
        """
        record = self.store.get(fp)
        if record is None:
            return not seen, None
        if record.retired is not None:
            self._count("recrawl/filtered_retired")
            return False, record
        if record.fetched_at >= self._boundary:
            return not shared, record
        now = self.clock()
        due = (not self._touched(record)) if self._all else record.eligible <= now
        if not due:
            self._count("recrawl/not_due")
            return False, record
        self._hold_due(record, now)
        return True, record

    def _touched(self, record: PageRecord) -> bool:
        """Fetched or handed out in this run (FRONTIER_RECRAWL_ALL takes each page once)."""
        return (record.fetched_at >= self._boundary
                or record.held_until - self.due_hold >= self._boundary)

    def take_due(self, limit: int) -> list[PageRecord]:
        """Up to ``limit`` due pages not handed out yet, most overdue first; holds them.

        In ``due`` mode "due" means due when the crawl started; in ``continuous``
        mode, due now.
        """
        if self._releasing:
            self._make_held_due(limit)
        if self._exhausted and self.settings.mode != "continuous":
            return []
        if self.settings.mode == "continuous":
            self.maybe_calibrate()
        until = self.clock() if self.settings.mode == "continuous" else self._due_until
        # A shared store takes them atomically: no two workers get the same page.
        taken = self.store.take_due(until, limit, self.clock() + self.due_hold)
        if taken is not None:
            if len(taken) < limit and self.settings.mode != "continuous":
                self._exhausted = True
            if taken:
                self._count("recrawl/fed", len(taken))
            return list(taken)
        records = self.store.due(self._cursor, until, limit)
        if len(records) < limit and self.settings.mode != "continuous":
            self._exhausted = True
        if records:
            last = records[-1]
            self._cursor = (last.eligible, last.fp)
            if self._all:
                records = [r for r in records if not self._touched(r)]
            now = self.clock()
            for record in records:
                self._hold_due(record, now)
            self._count("recrawl/fed", len(records))
        return records

    def census(self) -> tuple[int, int | None]:
        """(pages in the history, pages due now and not handed out yet, at most
        DUE_COUNT_CAP); the due count is None for a store that cannot count (no
        ``count_due``). In ``due`` mode "due" means due when the crawl started, as for
        :meth:`take_due`."""
        count_due = getattr(self.store, "count_due", None)
        due: int | None = None
        if count_due is not None:
            until = self.clock() if self.settings.mode == "continuous" else self._due_until
            due = min(DUE_COUNT_CAP, int(count_due(until, DUE_COUNT_CAP)))
        return len(self.store), due

    @property
    def exhausted(self) -> bool:
        """``due`` mode: every page due at the start was handed out."""
        return self._exhausted

    def next_due(self) -> float | None:
        return self.store.next_due()

    def mark_due(self, records: Iterable[PageRecord]) -> int:
        """Make ``records`` due now and let the feed look again (scrapy frontier recrawl)."""
        marked = 0
        for record in records:
            make_due(record)
            self._put(record)
            marked += 1
        self.reset_feed()
        self._count("recrawl/marked_due", marked)
        return marked

    def reset_feed(self) -> None:
        """Pages may have become due behind the feed (marked by hand): read from the start."""
        self._cursor = (-math.inf, -(1 << 63))
        self._exhausted = False

    def _hold_due(self, record: PageRecord, now: float) -> None:
        record.held_until = now + self.due_hold
        self._put(record)

    def priority(self, record: PageRecord, boost: int = 0) -> int:
        """The priority adjustment of a recrawl request for ``record``."""
        samples = record.history.samples()
        changes = sum(1 for _, changed in samples if changed)
        return change_term(changes, len(samples)) + quality_term(self.quality(record)) + boost

    # -- change hints (sitemaps, feeds) ---------------------------------------------------

    def hint(self, fp: int, url: str, changed_at: float | None,
              changefreq: float | None = None) -> str:
        """A site hints page ``fp`` last changed at ``changed_at`` (wall clock), and
        changes every ``changefreq`` seconds.

        For a page never fetched, a finite ``changefreq`` is kept (at most SEEDS_KEPT of
        them, in this process) to be its first interval after its first visit: ``seeded``.

        A hint past the last visit makes the page due now, unless the host's hints have
        proved wrong (or, for a host not decided yet, past PROBES_PER_RUN of them in this
        run); one that did not move defers the next visit to the verification interval
        (``FRONTIER_RECRAWL_MAX`` after the last visit), once the host's hints have proved
        right. Returns what became of it: ``due``, ``deferred``, ``kept``, ``held`` (not
        decided yet, past the probes), ``ignored`` (a distrusted host), ``unknown`` (never
        fetched) or ``retired``.
        """
        return self._apply_hint(self.store.get(fp), fp, url, changed_at, changefreq)

    def hint_many(self, hints: Sequence[PageHint]) -> list[str]:
        """:meth:`hint` for each of ``hints``, their records read together."""
        records = self.store.get_many([hint[0] for hint in hints])
        outcomes = []
        for fp, url, changed_at, changefreq in hints:
            # A page hinted twice sees its record as the first hint left it.
            outcomes.append(self._apply_hint(records.get(fp), fp, url, changed_at,
                                              changefreq))
        return outcomes

    def _apply_hint(self, record: PageRecord | None, fp: int, url: str,
                     changed_at: float | None, changefreq: float | None) -> str:
        if record is None and changefreq is not None and math.isfinite(changefreq) \
                and changefreq > 0 and len(self._seeds) < SEEDS_KEPT:
            self._seeds[fp] = changefreq
            self._count("signals/seeded")
            return "seeded"
        if record is None or changed_at is None:
            self._count("signals/unknown")
            return "unknown"
        if record.retired is not None:
            return "retired"
        if record.hinted_change is not None and changed_at < record.hinted_change:
            # An older hint since the visit (another sitemap, a feed) does not undo a newer.
            changed_at = record.hinted_change
        unchanged = record.hinted_change == changed_at  # read again, nothing new
        record.hinted_change = changed_at
        if changed_at <= record.fetched_at + HINT_SLACK and len(self._read_at) < HELD_KEPT:
            self._read_at[fp] = self.clock()  # "not changed" as of now (see _check_hint)
        state = self.trust.state(_hostname(url))
        outcome = "kept"
        if state == "distrusted":
            outcome = "ignored"
        elif changed_at > record.fetched_at + HINT_SLACK:
            outcome = "due"
            # Handed out for a recrawl already: it is on its way, not to be handed twice.
            if record.held_until <= self.clock() and record.eligible > 0.0:
                host = _hostname(url)
                if state == "unknown" and not self._probe(host, fp):
                    outcome = "held"
                    self._hold(host, fp)
                else:
                    make_due(record)
                    self.reset_feed()
        elif state == "trusted":
            verify = record.fetched_at + self.settings.refresh.max_interval
            if record.history.next_due < verify:
                record.history.next_due = verify
                outcome = "deferred"
        self._count(f"signals/{outcome}")
        if not (unchanged and outcome in ("kept", "ignored", "held")):
            self._put(record)  # each sitemap read would otherwise rewrite every record
        return outcome

    def _probe(self, host: str, fp: int) -> bool:
        """May the moved hint of page ``fp`` of ``host`` (neither trusted nor distrusted
        yet) make the page due in this run? PROBES_PER_RUN of them decide the host, and a
        noisy host's hints do not make every page of it due at once.

        The host's first MIN_CHECKS moved hints are probes, then one page in 2**PROBE_BITS
        picked by its fingerprint: spread over the whole sitemap, whatever order its parts
        are read in, rather than its first pages only (which may all be pages that do
        change). The held hints wait until every probe is back (see _check_hint)."""
        made = self._probes.get(host, 0)
        if made >= PROBES_PER_RUN:
            return False
        if made >= MIN_CHECKS and ((fp * _SPREAD) & _MASK64) >> (64 - PROBE_BITS):
            return False
        self._probes[host] = made + 1
        return True

    def _hold(self, host: str, fp: int) -> None:
        """Page ``fp``'s moved hint waits for its host's probes: due once the host is
        trusted (in this run), forgotten if it is distrusted. At most HELD_KEPT pages are
        remembered so; the others' hints are read again by the next run."""
        if self._held_count < HELD_KEPT:
            self._held.setdefault(host, []).append(fp)
            self._held_count += 1

    def _decided(self, host: str, state: str) -> None:
        """``host``'s hints were just decided: a trusted host's held pages are released
        (made due by the next ``take_due``s, a batch at a time, not here, in the middle of a
        visit); a distrusted host's are dropped."""
        held = self._held.pop(host, [])
        if state == "trusted" and held:
            self._releasing.extend(held)
            self.reset_feed()
        else:
            self._held_count -= len(held)

    def _make_held_due(self, limit: int) -> None:
        """Make up to ``limit`` released pages due whose hints still say they changed."""
        releasing = self._releasing
        batch = [releasing.popleft() for _ in range(min(limit, len(releasing)))]
        self._held_count -= len(batch)
        released = 0
        for record in self.store.get_many(batch).values():
            hinted = record.hinted_change
            if (record.retired is None and hinted is not None
                    and hinted > record.fetched_at + HINT_SLACK
                    and record.held_until <= self.clock() and record.eligible > 0.0):
                make_due(record)
                self._put(record)
                released += 1
        if released:
            self.reset_feed()
            self._count("signals/released", released)

    def signal_source(self, fp: int) -> None:
        """Page ``fp`` is a sitemap or a feed: due again after ``FRONTIER_RECRAWL_MIN``, so
        that every run reads the hints afresh (its content is what the hints are)."""
        record = self.store.get(fp)
        if record is None or record.retired is not None:
            return
        soon = record.fetched_at + self.settings.refresh.min_interval
        if record.history.next_due > soon:
            record.history.next_due = soon
            record.history.interval = self.settings.refresh.min_interval
            self._put(record)

    def _check_hint(self, record: PageRecord, evidence: Evidence,
                     last_modified: float | None = None) -> None:
        """A visit found whether the page changed at all (``evidence``, from
        core/change_evidence.py): was its site's hint right?

        A change found after a hint that did not move is no miss when the page's
        Last-Modified is after the hint was read: it changed since (a sitemap read, then
        its pages fetched a while later)."""
        hinted = record.hinted_change
        read_at = self._read_at.pop(record.fp, None)
        if hinted is None or not record.history.visits:
            return
        record.hinted_change = None  # one hint, one check
        said = hinted > record.fetched_at + HINT_SLACK
        changed = found_change(said, evidence)
        if changed is None:
            self._count("signals/unjudged")  # a noisy page, or noise against "not changed"
            return
        if (changed and not said and read_at is not None and last_modified is not None
                and last_modified >= read_at - HINT_SLACK):
            return
        host = _hostname(record.url)
        agreed = self.trust.check(host, said, changed)
        if agreed is None:
            return  # neither said "changed": tells nothing of the host
        if host in self._held:
            back = self._probes_back[host] = self._probes_back.get(host, 0) + 1
            state = self.trust.state(host)
            if back >= self._probes.get(host, 0) and state != "unknown":
                self._decided(host, state)  # on the whole sample, not its first checks
        self.store.add_trust(host, int(agreed), int(not agreed))
        if not agreed:
            self._count("signals/wrong")
        self._count("signals/checked")

    # -- visits ----------------------------------------------------------------------------

    def note_inlink(self, fp: int) -> None:
        """Another link to page ``fp`` was found (it was filtered as already seen)."""
        self._inlinks[fp] = self._inlinks.get(fp, 0) + 1

    def _record(self, fp: int, url: str) -> PageRecord:
        record = self.store.get(fp)
        if record is None:
            record = PageRecord(fp=fp, url=url)
        record.inlinks += self._inlinks.pop(fp, 0)
        return record

    def visited(self, fp: int, url: str, visit: Visit) -> tuple[PageRecord, bool]:
        """A full response: returns the record and whether the page really changed."""
        record = self._record(fp, url)
        first = not record.history.visits
        old_simhash = record.simhash if record.simhash_version == SIMHASH_VERSION else None
        if visit.simhash is None and not self.settings.exact:
            self._simhash_of(visit, record.digest, old_simhash)
        changed = is_change(
            record.digest,
            visit.digest,
            old_simhash,
            visit.simhash,
            threshold=self.settings.simhash_threshold,
            exact=self.settings.exact,
        )
        hinted = record.hinted_change
        last_modified = _http_date(visit.last_modified)
        self._check_hint(record, self._evidence(record, visit, changed), last_modified)
        if first:
            self._count("recrawl/pages_new")
        elif changed:
            self._count("recrawl/pages_changed")
        else:
            self._count("recrawl/pages_unchanged")
        if (last_modified is None and hinted is not None and hinted <= self.clock()
                and self.trust.state(_hostname(url)) == "trusted"):
            # No Last-Modified: a trusted host's hint is the change time the
            # Last-Modified estimator wants.
            last_modified = hinted
        self.refresher.visited(record.history, changed, last_modified,
                               self._seeds.pop(fp, None) if first else None)
        record.digest = visit.digest
        record.simhash = visit.simhash
        record.simhash_version = SIMHASH_VERSION if visit.simhash is not None else 0
        record.size = visit.size
        record.etag = visit.etag
        record.last_modified = visit.last_modified
        self._update(record, visit)
        return record, changed

    @staticmethod
    def _evidence(record: PageRecord, visit: Visit, changed: bool) -> Evidence:
        """What this full response proves of a change since the last one (the page's noise
        state follows); the recrawl's ``changed`` is the meaningful change."""
        if record.digest is None or visit.digest is None:
            return Evidence.UNKNOWN  # no full response before (or no body) to compare
        evidence, record.noise = full_visit(
            record.noise, same_bytes=visit.digest == record.digest, meaningful=changed,
            validator=same_validator(record.etag, record.last_modified, visit.etag,
                                     visit.last_modified))
        return evidence

    def _simhash_of(self, visit: Visit, old_digest: str | None, old_simhash: int | None) -> None:
        """Set ``visit.simhash``, doing only the work the decision needs.

        Same bytes as last time: the stored simhash is still right, no text is made.
        Otherwise the text is made (lazily, by the middleware's ``text_source``) and
        hashed, capped at SIMHASH_MAX_CHARS. ``exact`` mode never comes here: the
        digest alone decides.
        """
        if visit.digest is not None and visit.digest == old_digest and old_simhash is not None:
            visit.simhash = old_simhash  # same bytes, same text
            self._count("recrawl/simhash_reused")
            return
        text = visit.text
        if text is None and visit.text_source is not None:
            text = visit.text_source()
        visit.text_source = None  # the response it holds can be freed
        if text is not None:
            visit.simhash = simhash(text[:SIMHASH_MAX_CHARS])
            self._count("recrawl/simhash_computed")

    def not_modified(self, fp: int, url: str, visit: Visit) -> PageRecord:
        """A 304: a visit that saw no change; the body it saved is counted."""
        record = self._record(fp, url)
        self._check_hint(record, Evidence.SAME)
        self._count("recrawl/not_modified")
        self._count("recrawl/bytes_saved", record.size)
        self.refresher.visited(record.history, False, None)
        self._update(record, visit)
        return record

    def failed(self, fp: int, url: str, visit: Visit | None) -> PageRecord:
        """An error status or a download error: counts towards retirement."""
        record = self._record(fp, url)
        if visit is not None and visit.status in GONE_STATUSES:
            record.retired = "gone"
            self._count("history/retired/gone")
        else:
            self.refresher.failed(record.history)
            limit = self.settings.retire_after
            if limit and record.history.consecutive_failures >= limit:
                record.retired = "failures"
                self._count("history/retired/failures")
        if visit is not None:
            record.status = visit.status
        record.fetched_at = self.clock()
        record.held_until = 0.0
        self._put(record)
        return record

    def record(self, fp: int, url: str, visit: Visit | None) -> None:
        """Dispatch one outcome: a response (by status), or a download error (None)."""
        if visit is None:
            self.failed(fp, url, None)
        elif visit.status == 304:
            self.not_modified(fp, url, visit)
        elif 200 <= visit.status < 300:
            self.visited(fp, url, visit)
        elif visit.status >= 400:
            self.failed(fp, url, visit)

    def _update(self, record: PageRecord, visit: Visit) -> None:
        record.status = visit.status
        record.fetched_at = self.clock()
        record.depth = visit.depth
        if visit.callback is not None:
            record.callback = visit.callback
        if visit.request is not None:
            record.request = visit.request
        record.retired = None
        record.held_until = 0.0
        record.weight = self.quality(record)
        self._put(record)

    def _put(self, record: PageRecord) -> None:
        self.store.put(record)
        self._puts += 1
        cap = self.settings.max_pages
        # Evict in chunks (1% over the cap) rather than one page per put.
        if cap and self._puts % max(1, cap // 100) == 0:
            evicted = self.store.evict(cap)
            if evicted:
                self._count("history/evicted", evicted)

    def close(self) -> None:
        cap = self.settings.max_pages
        if cap:
            evicted = self.store.evict(cap)
            if evicted:
                self._count("history/evicted", evicted)
        self.store.close()


def _builtin_quality(name: str) -> Callable[[PageRecord], float]:
    if name == "depth":
        return lambda record: depth_quality(record.depth)
    if name == "inlinks":
        return lambda record: inlinks_quality(record.inlinks)
    raise ValueError(f"unknown quality {name!r}: use 'depth', 'inlinks' or a callable's path")


def _hostname(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def _http_date(value: str | None) -> float | None:
    """Seconds since the epoch of an HTTP date, or None if missing or unusable."""
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None

