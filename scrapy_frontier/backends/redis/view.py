"""What a Redis worker knows of the shared frontier without asking Redis: the last rounds'
reading of it, and whether Redis is reachable at all.

The reactor thread answers ``len()``, ``has_pending()``, ``next_due()`` and the census from
:class:`SharedView`; :class:`Outage` paces the rounds while Redis is away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from scrapy_frontier.observe.census import Census, HostCounts

if TYPE_CHECKING:
    from scrapy_frontier.backends.redis.frontier import SharedCensus
    from scrapy_frontier.backends.redis.round import RoundAnswer

#: Longest pause between two attempts while Redis is unreachable.
MAX_BACKOFF = 30.0
#: Once anything asked for a census, the I/O rounds read the shared one this often.
CENSUS_REFRESH = 1.0


class Outage:
    """Redis is unreachable: since when, and when to try again (the pause doubles from
    0.25 s up to :data:`MAX_BACKOFF`)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.since: float | None = None
        self.backoff = 0.0
        self.retry_at = 0.0

    def may_try(self) -> bool:
        return self.clock() >= self.retry_at

    def failed(self) -> bool:
        """A round could not reach Redis; True if this begins an outage."""
        began = self.since is None
        if began:
            self.since = self.clock()
        self.backoff = min(MAX_BACKOFF, max(0.25, 2 * self.backoff))
        self.retry_at = self.clock() + self.backoff
        return began

    def reached(self) -> float | None:
        """A round reached Redis: how long the outage it ends lasted (None: there was none)."""
        since, self.since = self.since, None
        self.backoff = 0.0
        return None if since is None else self.clock() - since


class SharedView:
    """The shared frontier as this worker's I/O rounds last read it."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.queued = 0
        """Requests queued in Redis."""
        self.in_flight = 0
        """Leases held in Redis, by every worker."""
        self.next_due: float | None = None
        """Continuous recrawl: when the history's next page falls due (wall clock)."""
        self.idle_since: float | None = None
        """When the rounds began finding the whole crawl idle (None: it is not)."""
        #: The census: asked for at least once (the rounds then read it), when last asked
        #: of a round, and what and when the last one read.
        self.census_wanted = False
        self.census_asked_at = -CENSUS_REFRESH
        self.census: SharedCensus | None = None
        self.partitions: list[SharedCensus] = []
        self.history: tuple[int, int | None] | None = None
        self.read_at: float | None = None

    def census_due(self) -> float | None:
        """The time to ask the next round for a census, if one is due (stamped asked)."""
        now = self.clock()
        if self.census_wanted and now - self.census_asked_at >= CENSUS_REFRESH:
            self.census_asked_at = now
            return now
        return None

    def read_census_soon(self) -> None:
        self.census_asked_at = -CENSUS_REFRESH

    def landed(self, answer: RoundAnswer, census_asked: float | None, busy: bool) -> bool:
        """Take in a round's answer (``busy``: this worker still holds work); True if the
        crawl has just begun to look idle."""
        self.next_due = answer.next_due
        self.queued = answer.queued
        self.in_flight = answer.in_flight
        if answer.census is not None:
            self.census, self.history = answer.census, answer.history
            self.partitions = answer.partitions
            self.read_at = census_asked  # the census is at least that recent
        if answer.idle and not busy:
            if self.idle_since is None:
                self.idle_since = self.clock()
                return True
            return False
        self.idle_since = None
        return False

    def read_final(self, census: SharedCensus, history: tuple[int, int | None] | None,
                   partitions: list[SharedCensus] | None = None) -> None:
        """The census read at close, after this worker's last writes."""
        self.census, self.history = census, history
        self.partitions = partitions or []
        self.read_at = self.clock()

    def whole(self, mine: Census) -> Census:
        """``mine`` with the whole frontier beside it, once a round read it."""
        shared, read_at = self.census, self.read_at
        if shared is None or read_at is None:
            return mine
        pages, due = self.history or (None, None)
        whole = replace(_as_census(mine.backend, "shared", shared), history_pages=pages,
                        history_due=due,
                        partitions=tuple(_as_census(mine.backend, "partition", part)
                                         for part in self.partitions))
        return replace(mine, shared=whole, shared_age=self.clock() - read_at)


def _as_census(backend: str, scope: str, shared: SharedCensus) -> Census:
    return Census(
        backend=backend, scope=scope, queued=shared.queued,
        in_flight=shared.in_flight, waiting_for_queue=shared.front,
        hosts=HostCounts(known=shared.known, active=shared.active, waiting=shared.waiting,
                         resting=shared.resting, blocked=shared.blocked,
                         retired=shared.retired, queued=shared.queued_hosts),
        fetched=shared.fetched, politeness_wait_seconds=shared.politeness_wait_seconds,
    )
