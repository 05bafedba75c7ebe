"""Which requests go into the frontier, and into which front queue.

The seen test (Scrapy's dupe filter, the frontier's own, or a shared seen set the queue
tests), the start gate (a start request already fetched, or not due for recrawl, is
skipped), the request's priority with the host's boost, then the queue's push.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_frontier.backends.ports import SeenTest
from scrapy_frontier.core.prioritizer import PriorityMapper
from scrapy_frontier.core.recrawl_priority import HostRules
from scrapy_frontier.dupefilter import FrontierDupeFilter
from scrapy_frontier.errors import HistoryStoreError
from scrapy_frontier.fingerprint import Fingerprinter64, occurrence_key
from scrapy_frontier.meta import BOOST_META, FORCE_META, RECRAWL_META, START_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.backends.ports import Backend
    from scrapy_frontier.scheduler.recrawl import RecrawlHooks
    from scrapy_frontier.scheduler.slots import SlotKeys
    from scrapy_frontier.settings import FrontierConfig

logger = logging.getLogger("scrapy_frontier.scheduler")


class Admission:
    """Admits requests into the backend's queue (see the module docstring)."""

    def __init__(self, config: FrontierConfig, dupefilter: BaseDupeFilter, backend: Backend,
                 stats: StatsCollector, fp64: Fingerprinter64, slots: SlotKeys, *,
                 history_failed: Callable[[HistoryStoreError], None]) -> None:
        self.df = dupefilter
        self.slots = slots
        self.queue = backend.queue
        self.persistent = backend.persistent
        self.stats = stats
        self.fp64 = fp64
        self.history_failed = history_failed
        self.mapper = PriorityMapper(config.front_queues)
        self.host_rules = HostRules(config.priority_rules)
        self.frontier_df = isinstance(dupefilter, FrontierDupeFilter)
        # The queue's seen set is shared by every worker: it tests and marks there.
        self.shared_seen = backend.queue.shared_seen
        # Decided once, read once per request: whether route needs the fingerprint,
        # and whether the queue's shared seen set does the whole seen test.
        self.route_fp = self.frontier_df or self.shared_seen
        self.queue_dedupes = self.frontier_df and self.shared_seen
        self.over_budget = backend.controls.over_budget
        # Start requests of this run already let through (Scrapy fetches a start URL
        # listed twice twice); their fingerprints only.
        # (On a shared frontier: how often each was listed, see occurrence_key.)
        self.own_starts: dict[int, int] = {}
        #: Set at open.
        self.spider: Spider | None = None
        self.recrawl: RecrawlHooks | None = None
        self.enqueued = 0
        self.bad_boosts = 0

    def route(self, request: Request, meta: dict[str, Any], ticket: int | None) -> bool:
        """Filter, then queue: the host key (HostlessURL if there is none), the seen
        test, the start gate, the priority."""
        host = self.slots.key(request)
        fp: int | None = self.fp64(request) if self.route_fp else None
        dedupe = mark = start = False
        key: int | None = None
        if request.dont_filter:
            if (ticket is None and self.persistent and START_META in meta
                    and not meta.get(RECRAWL_META) and not meta.get(FORCE_META)):
                fp = self.fp64(request) if fp is None else fp
                # A spider that lists a start URL twice fetches it twice, as with Scrapy;
                # N workers of that spider on a shared frontier fetch it twice too, not 2N
                # times: the n-th copy of a worker is gated on a key of its own.
                seen_before = self.own_starts.get(fp, 0)
                self.own_starts[fp] = seen_before + 1
                start = self.shared_seen or not seen_before
                if self.shared_seen and seen_before:
                    key = occurrence_key(fp, seen_before)
            if start:
                if self.shared_seen:
                    dedupe = mark = True  # the queue's start gate, on the shared seen set
                elif self._admit_start(request, fp):  # type: ignore[arg-type]
                    start = False
                else:
                    return False
            elif self.shared_seen:
                mark = self.frontier_df
            # Not filtered, but marked seen: a later ordinary link to the same URL is
            # not fetched again (Scrapy's filter leaves it unmarked).
            elif self.frontier_df:
                self.df.fingerprint_seen(fp)  # type: ignore[attr-defined,arg-type]
            else:
                self.df.request_seen(request)
        elif self.queue_dedupes:
            dedupe = mark = True
        elif (self.df.fingerprint_seen(fp) if self.frontier_df  # type: ignore[attr-defined]
              else self.df.request_seen(request)):
            self.df.log(request, self.spider)  # type: ignore[arg-type]
            if self.recrawl is not None:
                self.recrawl.inlink(fp)
            return False
        priority = request.priority
        if self.host_rules.rules or BOOST_META in meta:
            priority += self.host_rules.boost(host) + self._boost(request)
        # The seen test only for a queue that keeps the seen set: one object fewer per
        # request on the others.
        seen = SeenTest(fp, dedupe, mark, start, key) if self.shared_seen else None
        if self.queue.push(request, host, self.mapper.level(priority), seen):
            self.enqueued += 1
            return True
        if self.over_budget(host):
            return False  # counted by the backend (frontier/budget/requests), not logged each
        self.stats.inc_value("frontier/retired_requests")
        self.stats.inc_value("frontier/retired_requests/refused")
        logger.info("Dropped %s: its host %r was retired", request, host)
        return False

    def _seen(self, request: Request, fp: int | None) -> bool:
        if self.frontier_df:
            return bool(self.df.fingerprint_seen(fp))  # type: ignore[attr-defined]
        return bool(self.df.request_seen(request))

    def _admit_start(self, request: Request, fp: int) -> bool:
        """The start gate on this process's persistent state (see Recrawler.admit_start)."""
        seen = self._seen(request, fp)
        if self.recrawl is None:
            admitted = not seen
        else:
            try:
                admitted, record = self.recrawl.recrawler.admit_start(fp, seen, shared=False)
            except HistoryStoreError as exc:
                self.history_failed(exc)
                return True  # fetching a page again is the safe side
            if admitted and record is not None:
                self.recrawl.add_validators(request, record)
        if not admitted:
            self.stats.inc_value("frontier/start/skipped")
        return admitted

    def _boost(self, request: Request) -> int:
        raw = request.meta.get(BOOST_META, 0)
        try:
            if isinstance(raw, bool):
                raise TypeError
            return int(raw)
        except (TypeError, ValueError, OverflowError):
            self.bad_boosts += 1
            if self.bad_boosts == 1:
                logger.warning(
                    "meta[%r]=%r on %s is not an integer: ignored (counted in "
                    "frontier/rejected/bad_boost)", BOOST_META, raw, request,
                )
            self.stats.inc_value("frontier/rejected/bad_boost")
            return 0
