"""The history port on Redis: the page history's events ride the next I/O round, and the
due pages its poll rounds take wait here until the scheduler takes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy_frontier.backends.ports import HistoryPort

if TYPE_CHECKING:
    from scrapy_frontier.backends.redis.driver import RedisDriver
    from scrapy_frontier.backends.redis.round import RoundAnswer
    from scrapy_frontier.core.history import HistoryStore, PageRecord
    from scrapy_frontier.core.recrawl import PageHint, Recrawler, Visit


class RedisHistory(HistoryPort):
    """Visits, hints and sources into the next round; due pages out of the last ones."""

    def __init__(self, driver: RedisDriver, due_arrived: Callable[[], None]) -> None:
        self.driver = driver
        self.due_arrived = due_arrived
        self.recrawler: Recrawler | None = None
        #: Due pages the last rounds took, not handed to the scheduler yet.
        self.due: list[PageRecord] = []
        self._want = 0

    def open_history(self) -> HistoryStore:
        session = self.driver.session
        assert session is not None
        return session.open_history()

    def attach(self, recrawler: Recrawler) -> None:
        self.recrawler = recrawler
        if self.driver.session is not None:
            self.driver.session.rounds.recrawler = recrawler

    def _recording(self) -> bool:
        return self.recrawler is not None and not self.driver.closed

    def record_visit(self, fp: int, url: str, visit: Visit | None) -> None:
        if self._recording():
            self.driver.next.visits.append((fp, url, visit))

    def record_hints(self, hints: list[PageHint]) -> None:
        if self._recording():
            self.driver.next.hints.extend(hints)
            self.driver.kick()

    def record_signal_source(self, fp: int) -> None:
        if self._recording():
            self.driver.next.sources.append(fp)

    def take_due(self, limit: int) -> list[PageRecord]:
        """Due pages the last rounds took; the next poll round takes more."""
        self._want = limit
        due, self.due = self.due, []
        return due

    def wants_due(self) -> bool:
        return self._want > 0

    def feed(self) -> int:
        """How many due pages the next poll round takes (asked once)."""
        want, self._want = self._want, 0
        return want

    def landed(self, answer: RoundAnswer) -> None:
        if answer.due:
            self.due.extend(answer.due)
            self.due_arrived()

    def next_due(self) -> float | None:
        """The shared history's next due time, as the last I/O round read it."""
        return self.driver.view.next_due
