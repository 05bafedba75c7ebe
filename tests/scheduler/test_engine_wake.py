"""The engine adapter's wake-ups, against Scrapy's own CallLaterOnce (the engine's nextcall)."""

from __future__ import annotations

from collections.abc import Generator
from types import SimpleNamespace
from typing import Any

import pytest_twisted
from scrapy.utils.reactor import CallLaterOnce
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from scrapy_frontier.scheduler.engine import EngineAdapter


def _adapter(nextcall: Any) -> EngineAdapter:
    engine = SimpleNamespace(_slot=SimpleNamespace(nextcall=nextcall))
    return EngineAdapter(SimpleNamespace(engine=engine))  # type: ignore[arg-type]


def _later(seconds: float) -> Deferred[None]:
    d: Deferred[None] = Deferred()
    reactor.callLater(seconds, d.callback, None)  # type: ignore[attr-defined,arg-type]
    return d


@pytest_twisted.inlineCallbacks
def test_wake_now_runs_the_engine_loop_in_the_call() -> Generator[Deferred[None], Any, None]:
    runs: list[str] = []
    nextcall = CallLaterOnce(runs.append, "ran")
    adapter = _adapter(nextcall)
    assert adapter.wake(now=True)
    assert runs == ["ran"]  # not one loop iteration later
    yield _later(0.02)
    assert runs == ["ran"]  # and not a second time


@pytest_twisted.inlineCallbacks
def test_wake_now_leaves_a_pending_run_alone() -> Generator[Deferred[None], Any, None]:
    runs: list[str] = []
    nextcall = CallLaterOnce(runs.append, "ran")
    adapter = _adapter(nextcall)
    nextcall.schedule()
    assert adapter.wake(now=True)
    assert runs == []  # the engine's own pending run is not doubled
    yield _later(0.02)
    assert runs == ["ran"]


@pytest_twisted.inlineCallbacks
def test_plain_wake_schedules_for_the_next_iteration() -> Generator[Deferred[None], Any, None]:
    runs: list[str] = []
    nextcall = CallLaterOnce(runs.append, "ran")
    adapter = _adapter(nextcall)
    assert adapter.wake()
    assert adapter.wake()
    assert runs == []
    yield _later(0.02)
    assert runs == ["ran"]


def test_a_nextcall_that_only_schedules_is_scheduled() -> None:
    class Counting:  # a stand-in engine's nextcall: not callable
        calls = 0

        def schedule(self, delay: float = 0) -> None:
            self.calls += 1

    nextcall = Counting()
    assert _adapter(nextcall).wake(now=True)
    assert nextcall.calls == 1


def test_no_nextcall_is_no_wake() -> None:
    assert not _adapter(None).wake(now=True)
