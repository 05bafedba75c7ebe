"""Where the frontier's queues live: the driver contract the scheduler talks to.

The scheduler shell (:class:`~scrapy_frontier.scheduler.FrontierScheduler`) does
everything that is not storage -- fingerprints, the dupe filter, priority
mapping, site rules, the recrawl hooks, the in-flight ledger, waking the engine,
the stats -- and hands each request to a driver, which queues it and hands it
out when its host may be contacted. ``FRONTIER_BACKEND`` picks the driver by
name (``memory``, ``sqlite``, ``redis``) or by import path: a third party adds
one by implementing :class:`Driver` and naming its class.

Times a driver receives are seconds of the scheduler's clock (monotonic);
durations are what they say, whatever clock the driver keeps inside.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from scrapy_frontier.core.frontier import Lease
    from scrapy_frontier.core.history import HistoryStore, PageRecord
    from scrapy_frontier.core.recrawl import PageClaim, Recrawler, Visit
    from scrapy_frontier.observe.census import Census
    from scrapy_frontier.settings import FrontierConfig


class Handout(NamedTuple):
    """A request the driver hands out; its host is busy until ``release``. Anything with
    these three attributes will do (the core frontier's ``Lease`` has them)."""

    ticket: int
    host: str
    item: Request


class SeenTest(NamedTuple):
    """What a ``shared_seen`` driver does with its seen set as it queues a request (see
    :meth:`Driver.push`); other drivers are never given one."""

    fp: int | None
    """The request's 64-bit fingerprint (None: the shell computed none)."""
    dedupe: bool
    """Drop the request if the seen set has ``key``."""
    mark: bool
    """Add ``key`` to the seen set once queued."""
    start: bool
    """A start request on a shared frontier, for the driver's start gate (see
    :meth:`scrapy_frontier.core.recrawl.Recrawler.admit_start`)."""
    key: int | None
    """The seen-set member to test and mark when it is not ``fp`` (a start URL listed
    again by the same spider: the page history is not asked then)."""


@dataclass
class DriverContext:
    """What every driver gets from the shell."""

    crawler: Crawler
    config: FrontierConfig
    stats: StatsCollector
    clock: Callable[[], float]
    dupefilter: BaseDupeFilter
    wake: Callable[[], None]
    """Make the engine ask for requests now (new requests became available)."""
    fail: Callable[[str, BaseException], None]
    """Stop the crawl cleanly with this finish reason; the error is logged once."""
    due_arrived: Callable[[], None] = lambda: None  # noqa: E731 -- a default callable
    """Due pages of the history arrived that ``take_due`` did not have when last asked (a
    remote history answers a later I/O round): the scheduler asks again at once."""


class Driver(Protocol):
    #: The name in the ``frontier/backend`` stat and in error messages.
    name: str
    #: The driver dedupes requests pushed with ``dedupe`` itself (a seen set shared by
    #: all workers); the shell then leaves the seen test of FrontierDupeFilter to it.
    shared_seen: ClassVar[bool]
    #: State outlives the process (resumes, other workers): start requests go through
    #: the start gate.
    persistent: bool
    #: Requests ``push`` accepted that the driver refused later (a shared frontier finds
    #: duplicates and skipped start requests only when its round lands; it sends
    #: ``request_dropped`` for them): not counted as enqueued.
    dropped_later: int

    def open(self, spider: Spider) -> Deferred[None] | None: ...

    def close(self, reason: str) -> Deferred[None] | None: ...

    def open_history(self) -> HistoryStore: ...

    def attach_recrawler(self, recrawler: Recrawler) -> None: ...

    def push(self, request: Request, host: str, level: int,
             seen: SeenTest | None = None) -> bool:
        """Queue ``request`` for its politeness key ``host`` at front-queue ``level``
        (1..F, F highest, already mapped from its priority); ``seen``: the seen-set test
        of a ``shared_seen`` driver. False if it was refused (its host was retired, or
        not due)."""

    def pop(self) -> Handout | Lease[Request] | None:
        """The next request whose host may be contacted now, or None."""

    def release(self, ticket: int, seconds: float, rest: float, ended_at: float | None = None,
                ) -> object:
        """The fetch of ``ticket`` ended after ``seconds``: its host rests by the delay
        policy from ``ended_at`` (the context's clock; None: now, else no later than the
        server's end), and at least ``rest`` from now (and its minimum rest).

        Returns the token that :meth:`ack` takes once the engine is done with the
        request, so that a crash in between cannot lose the links it found; None when
        nothing is left to acknowledge. The shell keeps it (in the lease's ``Fetch``).
        """

    def ack(self, token: object) -> None:
        """The engine is done with the request whose release returned ``token``: forget
        it for good."""

    def set_min_rest(self, host: str, seconds: float) -> None: ...

    def retire(self, host: str) -> list[Request]:
        """Give up ``host``: its queued requests are dropped (returned when known now)."""

    def take_dropped(self) -> list[tuple[str, Request]]:
        """Queued requests of retired hosts dropped since the last call."""

    def over_budget(self, host: str) -> bool:
        """Whether ``host`` has used its page budget (a refused push is then not a
        retirement). False where the budget is decided later, in the shared store."""

    def record_visit(self, fp: int, url: str, visit: Visit | None) -> None:
        """Record a page visit (None: a download error) in the page history."""

    def record_claims(self, claims: list[PageClaim]) -> None:
        """Sites claim when their pages changed, and how often they change (see
        Recrawler.claim); the records are read together."""

    def record_signal_source(self, fp: int) -> None:
        """Page ``fp`` is a sitemap or a feed (see Recrawler.signal_source)."""

    def take_due(self, limit: int) -> list[PageRecord]:
        """Pages of the history due for a recrawl (claimed), at most ``limit``. A driver
        whose history answers later returns what it has, and calls
        ``DriverContext.due_arrived`` when more arrive."""

    def quarantine_size(self) -> int:
        """Requests set aside because they could not be rebuilt (any run), for the
        opening line; optional (a driver without it reports none)."""
        ...

    # A driver whose leases can lapse while its process does not run (a shared frontier)
    # also has ``holds(ticket) -> bool``: whether it can still prove it holds the lease of
    # a request it handed out, asked just before the request reaches the downloader; and
    # ``give_back(ticket)``: that request is not sent, its lease goes back unfetched. The
    # scheduler looks for both with getattr: a driver without them is never asked.

    def __len__(self) -> int:
        """Requests queued (here and, for a shared frontier, everywhere), not in flight."""

    def has_pending(self) -> bool:
        """Anything queued or in flight that may still produce a request."""

    def next_wakeup(self) -> float | None:
        """Clock time at which ``pop`` could return something new, if known."""

    def next_due(self) -> float | None:
        """Wall-clock time at which the next page of the history falls due, if any.

        Asked on the reactor thread when a continuous crawl is idle: a driver whose
        history is remote answers from its last I/O round, without a call.
        """

    def publish_stats(self, stats: StatsCollector) -> None: ...

    def census(self) -> Census:
        """A snapshot of sizes and host states (:mod:`scrapy_frontier.observe.census`).

        Called on the reactor thread every few seconds, never per request: it must not
        block (a shared store's totals come from its last background read)."""


def load_driver(path: str) -> type[Any]:
    from scrapy.utils.misc import load_object

    from scrapy_frontier.errors import FrontierConfigError

    try:
        cls = load_object(path)
    except FrontierConfigError:
        raise  # a backend whose extra is not installed says which
    except (ImportError, ValueError, AttributeError, NameError) as exc:
        raise FrontierConfigError(
            f"FRONTIER_BACKEND={path!r} cannot be imported ({exc}); use 'memory', 'sqlite', "
            "'redis' or the import path of a driver class"
        ) from None
    if not isinstance(cls, type) or not callable(getattr(cls, "pop", None)):
        raise FrontierConfigError(
            f"FRONTIER_BACKEND={path!r} is not a driver class (see "
            "scrapy_frontier.backends.ports.Driver)"
        )
    missing = [name for name in ("over_budget", "next_due")
               if not callable(getattr(cls, name, None))]
    if missing:
        raise FrontierConfigError(
            f"FRONTIER_BACKEND={path!r} lacks {', '.join(missing)}, which every driver has "
            "(see scrapy_frontier.backends.ports.Driver)"
        )
    return cls
