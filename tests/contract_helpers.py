"""Helpers of the scheduler-level contract suite (tests/scheduler/test_contract.py).

Everything here drives the scheduler through Scrapy's public scheduler interface
(``from_crawler``, ``open``, ``enqueue_request``, ``next_request``,
``has_pending_requests``, ``len``, ``close``) and the add-on's components as Scrapy
builds them from the settings, so the suite holds for any scrapy-frontier whose
add-on installs a working scheduler.

The backend settings of each driver live in :data:`DRIVER_SETTINGS`, and only there.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred, ensureDeferred, inlineCallbacks, succeed
from twisted.python.failure import Failure

from scrapy_frontier import FetchTimingMiddleware

ADDON = {"scrapy_frontier.Addon": 0}
DRIVERS = ("memory", "sqlite", "redis")
#: The scheduler contract also runs on a three-master Redis Cluster, three partitions.
CONTRACT_DRIVERS = (*DRIVERS, "redis-cluster")
PERSISTENT = frozenset({"sqlite", "redis", "redis-cluster"})

#: The backend settings of each driver: the one place to change when the values of
#: FRONTIER_BACKEND change. "memory" and "sqlite" leave FRONTIER_BACKEND unset: they
#: are the default (JOBDIR set means SQLite), as most projects run it.
#: ``{state_dir}``, ``{redis_url}`` and ``{redis_prefix}`` are filled in per test.
DRIVER_SETTINGS: dict[str, dict[str, Any]] = {
    "memory": {},
    "sqlite": {"JOBDIR": "{state_dir}"},
    "redis": {
        "FRONTIER_BACKEND": "redis",
        "REDIS_URL": "{redis_url}",
        "FRONTIER_REDIS_KEY": "{redis_prefix}",
        "FRONTIER_REDIS_SEEN_KEY": "{redis_base}seen:",
        "FRONTIER_REDIS_HISTORY_KEY": "{redis_base}history:",
        # How long the cluster must look idle before has_pending_requests() says
        # False (default 5 s): short, so that drains to the end stay quick.
        "FRONTIER_REDIS_IDLE_GRACE": 0.2,
    },
    "redis-cluster": {
        "FRONTIER_BACKEND": "redis",
        "REDIS_URL": "{redis_url}",
        "FRONTIER_REDIS_CLUSTER": True,
        "FRONTIER_REDIS_PARTITIONS": 3,
        "FRONTIER_REDIS_KEY": "{redis_prefix}",
        "FRONTIER_REDIS_HISTORY_KEY": "{redis_base}history:",
        "FRONTIER_REDIS_IDLE_GRACE": 0.2,
    },
}

#: Every contract test: no politeness rest, so fetches need no waiting.
CONTRACT_SETTINGS: dict[str, Any] = {
    "ADDONS": ADDON,
    "FRONTIER_MIN_DELAY": 0.0,
    "FRONTIER_DELAY_FACTOR": 0.0,
    "FRONTIER_SEED": 1,
    "LOG_LEVEL": "INFO",
}


@dataclass
class Driver:
    """One backend, with the settings that select it for one test."""

    name: str
    settings: dict[str, Any]
    state_dir: Path

    @property
    def persistent(self) -> bool:
        return self.name in PERSISTENT

    @property
    def backend(self) -> str:
        """FRONTIER_BACKEND's value: "redis" for a Redis Cluster too."""
        return self.name.removesuffix("-cluster")


def driver_settings(
    name: str, *, state_dir: Path, redis_url: str = "", redis_prefix: str = ""
) -> dict[str, Any]:
    base = redis_prefix.removesuffix("frontier:")
    values = {"state_dir": str(state_dir), "redis_url": redis_url,
              "redis_prefix": redis_prefix, "redis_base": base}
    return {key: value.format(**values) if isinstance(value, str) else value
            for key, value in DRIVER_SETTINGS[name].items()}


def driver_for(name: str, tmp_path: Path, fixture: Callable[[str], Any]) -> Driver:
    """The Driver of backend ``name`` for one test; ``fixture``: pytest's
    ``request.getfixturevalue``, for the Redis servers and the key prefix."""
    state_dir = tmp_path / "state"
    if name.startswith("redis"):
        server = fixture("redis_cluster" if name == "redis-cluster" else "redis_server")
        settings = driver_settings(name, state_dir=state_dir, redis_url=server.url,
                                   redis_prefix=fixture("redis_prefix"))
    else:
        settings = driver_settings(name, state_dir=state_dir)
    return Driver(name, settings, state_dir)


class ContractSpider(Spider):
    name = "contract"

    def parse(self, response: Any) -> None:
        return None


def spider_named(name: str) -> type[Spider]:
    return type(f"Spider_{name}", (ContractSpider,), {"name": name})


def as_deferred(result: Any) -> Deferred[Any]:
    """What a scheduler's open()/close() returned, as a Deferred (None, Deferred, coroutine)."""
    if isinstance(result, Deferred):
        return result
    if inspect.isawaitable(result):
        return ensureDeferred(result)  # type: ignore[arg-type]
    return succeed(result)


def call_deferred(func: Callable[..., Any], *args: Any) -> Deferred[Any]:
    """``func(*args)`` as a Deferred: a synchronous exception becomes its failure."""
    try:
        result = func(*args)
    except Exception:  # noqa: BLE001 - handed to the caller as a Failure
        from twisted.internet.defer import fail

        return fail(Failure())
    return as_deferred(result)


def sleep(seconds: float) -> Deferred[None]:
    from twisted.internet import reactor, task

    return task.deferLater(reactor, seconds, lambda: None)  # type: ignore[arg-type]


# -- the engine the scheduler runs under ----------------------------------------------------


class MockDownloader:
    """Scrapy's tests/utils/downloader.py MockDownloader (slots by key; no middleware)."""

    def __init__(self) -> None:
        self.slots: dict[str, list[int]] = {}

    def get_slot_key(self, request: Request) -> str:
        from scrapy.utils.httpobj import urlparse_cached

        if "download_slot" in request.meta:
            return str(request.meta["download_slot"])
        return urlparse_cached(request).hostname or ""

    def increment(self, slot_key: str) -> None:
        self.slots.setdefault(slot_key, []).append(1)

    def decrement(self, slot_key: str) -> None:
        self.slots[slot_key].pop()

    def close(self) -> None:
        pass


class NextCall:
    """Stands in for the engine's CallLaterOnce: counts wake-ups."""

    def __init__(self) -> None:
        self.calls = 0

    def schedule(self, delay: float = 0) -> None:
        self.calls += 1

    def cancel(self) -> None:
        pass


def contract_engine(crawler: Any) -> Any:
    """An engine shaped like Scrapy's ExecutionEngine once the spider is open.

    Its downloader is Scrapy's real one (with the downloader middlewares the
    settings enable, the add-on's FetchTimingMiddleware among them); its slot has
    the attributes of ``scrapy.core.engine._Slot`` that a scheduler or middleware
    may look at: ``inprogress`` (the requests the engine is working on),
    ``nextcall`` and ``scheduler`` (set by :class:`Run` once the scheduler is built).
    """
    from scrapy.core.downloader import Downloader

    downloader = Downloader(crawler)
    slot = SimpleNamespace(inprogress=set(), nextcall=NextCall(), scheduler=None,
                           closing=None, close_if_idle=False)
    return SimpleNamespace(downloader=downloader, _slot=slot, spider=None)


def mock_engine() -> Any:
    """Scrapy's own scheduler tests' engine: ``Mock(downloader=MockDownloader())``.

    Every attribute not set is a Mock (``_slot.inprogress`` too, which is neither a
    set nor iterable).
    """
    from unittest.mock import Mock

    return Mock(downloader=MockDownloader())


# -- one run: crawler, scheduler, simulated fetches ---------------------------------------


@dataclass
class Run:
    """One scheduler lifetime on ``driver``: build, open, feed, drain, close."""

    driver: Driver
    spidercls: type[Spider] = ContractSpider
    extra: dict[str, Any] = field(default_factory=dict)
    engine: str = "contract"  # or "mock"

    def __post_init__(self) -> None:
        settings = {**CONTRACT_SETTINGS, **self.driver.settings, **self.extra}
        self.crawler = get_crawler(self.spidercls, settings)
        self.crawler.engine = mock_engine() if self.engine == "mock" else contract_engine(
            self.crawler)
        self.spider = self.spidercls.from_crawler(self.crawler)
        self.crawler.spider = self.spider
        scheduler_cls = load_object(self.crawler.settings["SCHEDULER"])
        self.scheduler: Any = build_from_crawler(scheduler_cls, self.crawler)
        # Scrapy's engine keeps its scheduler in its slot, where middlewares find it.
        self.crawler.engine._slot.scheduler = self.scheduler
        if self.engine == "contract":
            self.crawler.engine.spider = self.spider
        self.fetcher = Fetcher(self.crawler, self.spider, track=self.engine == "contract")
        self.opened = False
        self.closed = False

    def open(self) -> Deferred[Any]:
        d = call_deferred(self.scheduler.open, self.spider)

        def opened(result: Any) -> Any:
            self.opened = True
            return result

        return d.addCallback(opened)

    def enqueue(self, *requests: Request) -> list[bool]:
        return [bool(self.scheduler.enqueue_request(r)) for r in requests]

    def drain(self, expect: int | None = None, timeout: float = 5.0) -> Deferred[list[Request]]:
        return drain(self.scheduler, timeout, expect=expect, fetch=self.fetcher.fetch)

    @inlineCallbacks
    def close(self, reason: str = "finished") -> Generator[Deferred[Any], Any, None]:
        if self.closed:
            return
        self.closed = True
        try:
            if self.opened:
                yield call_deferred(self.scheduler.close, reason)
        finally:
            downloader = self.crawler.engine.downloader
            close = getattr(downloader, "close", None)
            if close is not None:
                yield as_deferred(close())


class Fetcher:
    """Simulates the fetch of a request the scheduler handed out, as Scrapy does it.

    The engine tracks the request (``_slot.inprogress``); the add-on's
    FetchTimingMiddleware sees it go out (``process_request``) and its response
    come back (``process_response``), which ends the host's lease; the add-on's
    spider middlewares see the response (``process_spider_input``: the page
    history records the visit); then the engine is done with the request.
    """

    def __init__(self, crawler: Any, spider: Spider, *, track: bool) -> None:
        self.crawler = crawler
        self.spider = spider
        self.track = track
        self.timing = _installed_timing_middleware(crawler) or FetchTimingMiddleware.from_crawler(
            crawler)
        self.spider_mws = [
            build_from_crawler(load_object(path), crawler)
            for path, order in _components(crawler.settings["SPIDER_MIDDLEWARES"])
            if order is not None and path.startswith("scrapy_frontier")
        ]
        self.fetched: list[Request] = []

    def fetch(self, request: Request, status: int = 200) -> None:
        inprogress = self.crawler.engine._slot.inprogress if self.track else None
        if inprogress is not None:
            inprogress.add(request)
        again = self.timing.process_request(request)
        if isinstance(again, Request):  # held back by the frontier: goes back to it
            self.crawler.engine._slot.scheduler.enqueue_request(again)
        else:
            response = HtmlResponse(
                request.url, status=status, request=request,
                body=f"<html><body>{request.url}</body></html>".encode(), encoding="utf-8",
            )
            self.timing.process_response(request, response)
            for mw in self.spider_mws:
                mw.process_spider_input(response)
            self.fetched.append(request)
        if inprogress is not None:
            inprogress.discard(request)

    def forbid(self, request: Request) -> None:
        """robots.txt forbids ``request``: Scrapy's RobotsTxtMiddleware raises IgnoreRequest
        before the request reaches the timing middleware's process_request, and Scrapy then
        passes the exception to every middleware's process_exception."""
        from scrapy.exceptions import IgnoreRequest

        inprogress = self.crawler.engine._slot.inprogress if self.track else None
        if inprogress is not None:
            inprogress.add(request)
        self.timing.process_exception(request, IgnoreRequest("Forbidden by robots.txt"))
        if inprogress is not None:
            inprogress.discard(request)


def _installed_timing_middleware(crawler: Any) -> FetchTimingMiddleware | None:
    """The downloader's own instance, as the real downloader would call it."""
    manager = getattr(crawler.engine.downloader, "middleware", None)
    for mw in getattr(manager, "middlewares", None) or ():
        if isinstance(mw, FetchTimingMiddleware):
            return mw
    return None


def _components(value: Any) -> Iterable[tuple[str, Any]]:
    items = value.items() if hasattr(value, "items") else []
    return [(p if isinstance(p, str) else f"{p.__module__}.{p.__qualname__}", o)
            for p, o in items]


@inlineCallbacks
def next_soon(scheduler: Any, timeout: float = 10.0) -> Generator[Any, Any, Any]:
    """The scheduler's next request, spinning the reactor 2 ms between empty calls (the
    Redis scheduler hands out what its I/O thread claimed); None after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        request = scheduler.next_request()
        if request is not None:
            return request
        yield sleep(0.002)
    return None


@inlineCallbacks
def drain(
    scheduler: Any,
    timeout: float = 5.0,
    *,
    expect: int | None = None,
    fetch: Callable[[Request], None] | None = None,
    concurrency: int = 16,
    max_calls: int = 20_000,
) -> Generator[Deferred[Any], Any, list[Request]]:
    """Call ``next_request()`` until ``expect`` requests came out, or (``expect`` None)
    until the scheduler has nothing pending.

    Like Scrapy's engine with CONCURRENT_REQUESTS = ``concurrency``, it keeps asking
    while fetches are in flight: requests are "fetched" (``fetch``) only once the
    scheduler has nothing more to hand out right now (or ``concurrency`` are out),
    so ``next_request`` is also called while earlier requests' fetches are running.
    When nothing is in flight and nothing comes out, the reactor spins for 5 ms.
    Bounded by ``max_calls`` calls and ``timeout`` seconds: returns what came out.
    """
    out: list[Request] = []
    in_flight: list[Request] = []
    deadline = time.monotonic() + timeout

    def finish_all() -> None:
        while in_flight:
            request = in_flight.pop(0)
            if fetch is not None:
                fetch(request)

    for _ in range(max_calls):
        if (expect is not None and len(out) >= expect) or time.monotonic() > deadline:
            break
        request = scheduler.next_request() if len(in_flight) < concurrency else None
        if request is not None:
            out.append(request)
            in_flight.append(request)
            continue
        if in_flight:
            finish_all()
            continue
        if expect is None and not scheduler.has_pending_requests():
            break
        yield sleep(0.005)
    finish_all()
    return out


def urls(requests: Iterable[Request]) -> list[str]:
    return [r.url for r in requests]
