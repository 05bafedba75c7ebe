"""The only code that touches Scrapy's engine and downloader internals.

Public API first (``crawler.get_downloader_middleware``, ``engine.scheduler``,
``engine.close_spider_async``). Where only an internal tells what the frontier
needs -- which requests the engine still works on (``engine._slot.inprogress``)
and how to make it ask for requests now (``engine._slot.nextcall``, and whether
that ``CallLaterOnce`` already has a call pending, ``nextcall._call``) -- the
adapter reads it defensively: when the attribute is missing or is not what
Scrapy's real engine has (a ``Mock`` engine, as in Scrapy's own tests, or a
future Scrapy), it falls back to behaviour that is still correct but less
precise, logs that once at debug level, and never raises.

It is also the one place that tells Scrapy versions apart, by feature, never by
version number. Across the supported range (docs/quickstart.rst, "Supported versions"):

* ``engine.close_spider_async(reason=...)`` (Scrapy >= 2.14), else
  ``engine.close_spider(spider, reason)``;
* ``engine.scheduler`` (2.19), else ``engine._slot.scheduler``;
* the ``robots_parsed`` signal and ``RobotParser.crawl_delay`` (2.18), else each
  robots.txt response the robots.txt middleware fetched (``response_received``
  fires before that middleware parses it), read with Protego;
* ``scrapy.spiderloader.get_spider_loader`` (2.14), else ``SPIDER_LOADER_CLASS``'s
  ``from_settings`` (:func:`spider_loader`).

It reads the feed exporter's open slots (``FeedExporter.slots``, :func:`feed_exporter`), so
that a page's items are on disk before the frontier forgets the page.
When the frontier fails, it tells the Scrapy command that runs the crawl (:func:`fail_command`:
``scrapy crawl`` or ``runspider``, found on the call stack as the ``ScrapyCommand`` whose ``run``
is running) to exit with code 1: Scrapy itself exits 0 after a crawl that closed, whatever its
finish reason, and Scrapy 2.13 also after a crawl whose engine did not open. And when the
scheduler cannot be built or opened, it makes the engine's clean-up skip the spider
(:func:`abandon_open`, ``engine.spider``): Scrapy would otherwise close a spider whose slot or
scraper never opened, and its own errors (``Engine slot not assigned``) would hide the
frontier's.

It also finds the TCP transport an HTTP/1.x answer is read from (:func:`answer_transport`),
for the kernel's fetch times (``scheduler.tcp_timing``): no signal carries the connection,
so it looks for the HTTP/1.1 handler's ``_cb_bodyready`` frame (the same name in every
supported Scrapy) and finds nothing, safely, anywhere else (HTTP/2, other handlers). For the
same times it hands out the connection pools of the loaded http and https download handlers
(``engine.downloader.handlers._handlers``, each HTTP/1.1 handler's ``_pool``,
:meth:`EngineAdapter.connection_pools`), whose new connections are then stamped as they
connect.
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Callable, Collection
from types import FrameType
from typing import TYPE_CHECKING, Any

from scrapy import signals

from scrapy_frontier.scheduler.tcp_timing import tcp_transport

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: What the scheduler is told of a parsed robots.txt: (robot parser, request of that site).
RobotsHandler = Callable[[Any, "Request"], None]

logger = logging.getLogger("scrapy_frontier.engine")

_UNSET = object()

#: Where Scrapy's HTTP/1.1 handler sends ``headers_received``, with the Twisted response.
_HTTP11_MODULE = "scrapy.core.downloader.handlers.http11"
_BODYREADY = "_cb_bodyready"


def answer_transport(request: Request, depth: int = 12) -> Any:
    """The TCP transport the answer to ``request`` is read from (its ``socket`` attribute
    is the connection's socket), when called from a ``headers_received`` handler under
    Scrapy's HTTP/1.1 download handler; else None.

    Looks at most ``depth`` frames up for the handler's ``_cb_bodyready`` (which holds
    the Twisted response), then follows its transport down to the TCP one, through a
    TLS wrapper if there is one.
    """
    frame: FrameType | None = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == _BODYREADY and frame.f_globals.get("__name__") == _HTTP11_MODULE:
            found = frame.f_locals
            if found.get("request") is not request:
                return None
            transport = getattr(getattr(found.get("txresponse"), "_transport", None),
                                "_producer", None)
            return tcp_transport(transport)  # the TCP transport, or a TLS protocol's
        frame = frame.f_back
    return None


def spider_loader(settings: Any) -> Any:
    """The project's spider loader, as ``scrapy crawl`` builds it."""
    try:
        from scrapy.spiderloader import get_spider_loader
    except ImportError:  # Scrapy < 2.14
        from scrapy.utils.misc import load_object

        return load_object(settings["SPIDER_LOADER_CLASS"]).from_settings(
            settings.frozencopy())
    return get_spider_loader(settings)


def running_engine(crawler: Crawler) -> Any:
    """``crawler.engine``, or None before the crawl has created it."""
    try:
        return crawler.engine
    except (RuntimeError, AttributeError):  # a late attribute, unset until the crawl starts
        return None


def running_command() -> Any:
    """The Scrapy command running this crawl (``scrapy crawl``, ``runspider``...): the
    ``ScrapyCommand`` whose ``run`` is on the call stack; None in a script or a test."""
    try:
        from scrapy.commands import ScrapyCommand
    except ImportError:  # pragma: no cover - every supported Scrapy has it
        return None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run":
            command = frame.f_locals.get("self")
            if isinstance(command, ScrapyCommand):
                return command
        frame = frame.f_back
    return None


def fail_command() -> bool:
    """Make the Scrapy command running this crawl exit with code 1 (a higher code it set
    stays); False in a script or a test, where there is none."""
    command = running_command()
    code = getattr(command, "exitcode", None)
    if command is None or not isinstance(code, int):
        return False
    if code == 0:
        command.exitcode = 1
    return True


def abandon_open(crawler: Crawler) -> None:
    """The scheduler could not be built or opened: let the engine's clean-up skip the spider.

    Called before the error is raised, while the engine opens the spider. Scrapy 2.13 to
    2.19 then close that spider anyway: without a slot (the scheduler was not built) their
    close raises ``Engine slot not assigned`` in place of the frontier's error; with one,
    the scraper and the stats, not opened yet, fail in turn. With ``engine.spider`` unset the
    engine closes its downloader only, and the crawl ends with the frontier's error.
    """
    engine = running_engine(crawler)
    if engine is None or getattr(engine, "running", False):  # started: a normal close
        return
    spider = getattr(crawler, "spider", None)
    try:
        if spider is not None and getattr(engine, "spider", None) is spider:
            engine.spider = None
    except Exception:  # noqa: BLE001 -- a Mock or a foreign engine
        logger.debug("engine: cannot unset engine.spider", exc_info=True)


def running_scheduler(crawler: Crawler) -> Any:
    """The running frontier scheduler, or None (no engine or spider yet, another
    scheduler, or an engine that is a ``Mock``)."""
    engine = running_engine(crawler)
    if engine is None:
        return None
    # ``engine.scheduler`` is public since Scrapy 2.19; ``_slot.scheduler`` before.
    for candidate in (getattr(engine, "scheduler", None),
                      getattr(getattr(engine, "_slot", None), "scheduler", None)):
        # A method of its class (only this scheduler has it), so that a Mock's made-up
        # attributes do not count.
        if callable(getattr(type(candidate), "publish_stats", None)):
            return candidate
    return None


class EngineAdapter:
    """What the scheduler asks of the engine, with safe answers when it cannot tell."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._noted: set[str] = set()
        self._slot_seen: object = _UNSET
        self._inprogress: Collection[Request] | None = None
        self._robots_handler: RobotsHandler | None = None

    def _fallback(self, what: str, why: str) -> None:
        if what not in self._noted:
            self._noted.add(what)
            logger.debug("engine: %s unavailable (%s); using a less precise fallback", what, why)

    def _slot(self) -> Any:
        return getattr(running_engine(self.crawler), "_slot", None)

    def in_progress(self) -> Collection[Request] | None:
        """The requests the engine still works on (downloading, or their callback's output
        not queued yet), or None if this engine cannot tell."""
        slot = self._slot()
        if slot is self._slot_seen:  # the hot path: one engine slot per crawl
            return self._inprogress
        self._slot_seen = slot
        inprogress = getattr(slot, "inprogress", None)
        if isinstance(inprogress, set | frozenset | dict):
            self._inprogress = inprogress
        else:
            self._fallback("engine._slot.inprogress", type(inprogress).__name__)
            self._inprogress = None
        return self._inprogress

    def wake(self, *, now: bool = False) -> bool:
        """Make the engine ask for requests soon, without waiting for its heartbeat.

        ``now`` asks at once, in this call: only from a reactor callback of the
        frontier's own (its rest timer), never from inside a call the engine made.
        A scheduled ask runs one loop iteration later, after every read that
        iteration brings in (and the callbacks they run): a rested host then waits
        for them. An ask already pending is left to run. An error in the engine's
        loop reaches the reactor, as it would from a scheduled call.
        """
        nextcall = getattr(self._slot(), "nextcall", None)
        schedule = getattr(nextcall, "schedule", None)
        if not callable(schedule):
            self._fallback("engine._slot.nextcall", type(nextcall).__name__)
            return False
        if now and callable(nextcall) and getattr(nextcall, "_call", None) is None:
            nextcall()  # CallLaterOnce.__call__: the engine's own request loop
            return True
        # Delay 0 only: a positive delay would swallow the engine's own wake-ups.
        schedule()
        return True

    def close_spider(self, reason: str) -> None:
        """Ask the engine to close the spider (the crawl's finish reason is ``reason``)."""
        engine = running_engine(self.crawler)
        close = getattr(engine, "close_spider_async", None)
        legacy = getattr(engine, "close_spider", None)  # Scrapy < 2.14
        spider = getattr(engine, "spider", None)
        try:
            if callable(close):
                from scrapy.utils.defer import deferred_from_coro

                deferred_from_coro(close(reason=reason))
            elif callable(legacy) and spider is not None:
                legacy(spider, reason)
            else:
                self._fallback("engine.close_spider_async", "missing")
        except Exception:  # noqa: BLE001 -- a Mock or a foreign engine
            logger.debug("engine: closing the spider (%r) failed", reason, exc_info=True)

    def fail_command(self) -> bool:
        """The crawl fails: the Scrapy command running it exits with code 1
        (:func:`fail_command`); False in a script or a test."""
        return fail_command()

    def on_robots_parsed(self, handler: RobotsHandler) -> None:
        """Call ``handler(robotparser, request)`` for each robots.txt parsed in this crawl.

        The parser answers ``crawl_delay(agent)``, and ``rp.request_rate(agent)``
        when it is Protego's. It comes from Scrapy's ``robots_parsed`` signal, or
        on a Scrapy without it, from the robots.txt responses, parsed here.
        """
        self._robots_handler = handler
        robots_parsed = getattr(signals, "robots_parsed", None)
        # Bound methods: the signal dispatcher holds receivers weakly, and this
        # adapter lives as long as its scheduler.
        if robots_parsed is not None:
            self.crawler.signals.connect(self._robots_signal, signal=robots_parsed)
        elif self.crawler.settings.getbool("ROBOTSTXT_OBEY"):  # else nothing is fetched
            self._fallback("signals.robots_parsed", "missing: reading robots.txt responses")
            self.crawler.signals.connect(self._robots_response,
                                         signal=signals.response_received)

    def _robots_signal(self, robotparser: Any, request: Request, **kwargs: Any) -> None:
        if self._robots_handler is not None:
            self._robots_handler(robots_view(robotparser), request)

    def _robots_response(self, response: Response, request: Request, **kwargs: Any) -> None:
        # The robots.txt middleware's own request: marked so that it skips itself.
        if self._robots_handler is None or not request.meta.get("dont_obey_robotstxt"):
            return
        if not request.url.partition("?")[0].endswith("/robots.txt"):
            return
        try:
            parser = ProtegoDelays.parse(response.body)
        except Exception:  # noqa: BLE001 -- a robots.txt must not stop the crawl
            logger.debug("engine: cannot parse %s", request.url, exc_info=True)
            return
        self._robots_handler(parser, request)

    def download_slots(self) -> tuple[int, int] | None:
        """(requests in the downloader, CONCURRENT_REQUESTS), or None if this engine
        cannot tell (``downloader.active`` and ``total_concurrency`` are internals)."""
        downloader = getattr(running_engine(self.crawler), "downloader", None)
        active = getattr(downloader, "active", None)
        total = getattr(downloader, "total_concurrency", None)
        if not isinstance(active, set | frozenset | dict) or not isinstance(total, int):
            self._fallback("engine.downloader.active", type(active).__name__)
            return None
        return len(active), total

    def middlewares_before(self, middleware: object) -> list[Any] | None:
        """The downloader middlewares that see a request before ``middleware``, in order;
        None if this engine cannot tell or ``middleware`` is not in its chain."""
        middlewares = self._downloader_middlewares()
        if middlewares is None or not any(m is middleware for m in middlewares):
            return None
        return list(itertools.takewhile(lambda m: m is not middleware, middlewares))

    def _downloader_middlewares(self) -> list[Any] | tuple[Any, ...] | None:
        engine = running_engine(self.crawler)
        manager = getattr(getattr(engine, "downloader", None), "middleware", None)
        middlewares = getattr(manager, "middlewares", None)
        if not isinstance(middlewares, list | tuple):
            self._fallback("engine.downloader.middleware", type(middlewares).__name__)
            return None
        return middlewares

    def connection_pools(self) -> list[Any]:
        """The connection pools of the download handlers loaded for http and https (Scrapy's
        HTTP/1.1 handler keeps its Twisted ``HTTPConnectionPool`` as ``_pool``), each once;
        empty if this engine cannot tell."""
        downloader = getattr(running_engine(self.crawler), "downloader", None)
        loaded = getattr(getattr(downloader, "handlers", None), "_handlers", None)
        if not isinstance(loaded, dict):
            self._fallback("engine.downloader.handlers._handlers", type(loaded).__name__)
            return []
        pools: list[Any] = []
        for scheme in ("http", "https"):
            pool = getattr(loaded.get(scheme), "_pool", None)
            if pool is not None and all(pool is not seen for seen in pools):
                pools.append(pool)
        return pools

    def has_downloader_middleware(self, path: str) -> bool | None:
        """Whether a downloader middleware of class ``path`` (or a subclass) is
        installed; None if this engine cannot tell. By name: no import needed."""
        middlewares = self._downloader_middlewares()
        if middlewares is None:
            return None
        return any(f"{c.__module__}.{c.__qualname__}" == path
                   for mw in middlewares for c in type(mw).__mro__)


def feed_exporter(crawler: Crawler) -> Any:
    """Scrapy's running feed exporter (its ``slots`` list the open feeds: each slot has
    ``storage``, ``file``, ``format`` and ``feed_options``), or None without feeds."""
    manager = getattr(crawler, "extensions", None)
    for extension in getattr(manager, "middlewares", ()):
        if isinstance(getattr(extension, "slots", None), list) and \
                type(extension).__name__ == "FeedExporter":
            return extension
    return None


def robots_view(robotparser: Any) -> Any:
    """``robotparser`` as the delay rules read it: as is if it has
    ``crawl_delay`` (Scrapy >= 2.18), else its Protego parse (Scrapy's
    ``ProtegoRobotParser`` before 2.18 keeps it as ``rp``), else as is."""
    if not callable(getattr(robotparser, "crawl_delay", None)):
        inner = getattr(robotparser, "rp", None)
        if callable(getattr(inner, "crawl_delay", None)):
            return ProtegoDelays(inner)
    return robotparser


class ProtegoDelays:
    """A robots.txt parsed by Protego, shaped as Scrapy's RobotParser where the
    delay rules read it: ``crawl_delay(agent)`` and ``rp`` (the Protego parse)."""

    def __init__(self, rp: Any) -> None:
        self.rp = rp

    @classmethod
    def parse(cls, body: bytes) -> ProtegoDelays:
        from protego import Protego  # a dependency of Scrapy itself

        # As Scrapy decodes robots.txt: UTF-8, undecodable bytes dropped.
        return cls(Protego.parse(body.decode("utf-8", errors="ignore")))

    def crawl_delay(self, user_agent: str) -> float | None:
        delay = self.rp.crawl_delay(user_agent)
        return None if delay is None else float(delay)
