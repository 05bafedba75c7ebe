"""The ports a backend offers the Scrapy shell, and the factory that hands them out.

The scheduler shell (:class:`~scrapy_frontier.scheduler.FrontierScheduler`) does
everything that is not storage -- fingerprints, the dupe filter, priority mapping, site
rules, the recrawl hooks, the in-flight ledger, waking the engine, the stats -- and talks
to a backend through four narrow ports:

- :class:`QueuePort`, the queue and its leases: push, claim, complete, ack, the next
  wake-up and the counts;
- :class:`HistoryPort`, the page history's events (visits, change hints, due pages);
- :class:`HostControlPort`, a host's rest, retirement and budget;
- :class:`InspectPort`, the census and the stats.

A :class:`Backend` hands them out, as crawlee's ``StorageClient`` hands out its clients.
``FRONTIER_BACKEND`` names one (``memory``, ``sqlite``, ``redis``) or gives the import path
of a third party's :class:`Backend` subclass. The contract is checked when the backend is
loaded (:func:`load_backend`) and again when it is built: every abstract member must be
there. Optional members have their defaults here, so the shell never probes for them.

Times a port receives are seconds of the scheduler's clock (monotonic); durations are what
they say, whatever clock the backend keeps inside.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from scrapy_frontier.codec import RowTrust

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from scrapy_frontier.core.frontier import Lease
    from scrapy_frontier.core.history import HistoryStore, PageRecord
    from scrapy_frontier.core.recrawl import PageHint, Recrawler, Visit
    from scrapy_frontier.observe.census import Census
    from scrapy_frontier.settings import FrontierConfig


class Handout(NamedTuple):
    """A request a queue hands out under a lease; its host is busy until ``complete``.
    Anything with these three attributes will do (the core frontier's ``Lease`` has them)."""

    ticket: int
    host: str
    item: Request


class SeenTest(NamedTuple):
    """What a ``shared_seen`` queue does with its seen set as it queues a request (see
    :meth:`QueuePort.push`); other queues are never given one."""

    fp: int | None
    """The request's 64-bit fingerprint (None: the shell computed none)."""
    dedupe: bool
    """Drop the request if the seen set has ``key``."""
    mark: bool
    """Add ``key`` to the seen set once queued."""
    start: bool
    """A start request on a shared frontier, for the queue's start gate (see
    :meth:`scrapy_frontier.core.recrawl.Recrawler.admit_start`)."""
    key: int | None
    """The seen-set member to test and mark when it is not ``fp`` (a start URL listed
    again by the same spider: the page history is not asked then)."""


@dataclass
class BackendContext:
    """What every backend gets from the shell."""

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


class QueuePort(ABC):
    """The queue and its leases."""

    #: Pushes dedupe against a seen set shared by all workers (``push`` gets a
    #: :class:`SeenTest`); the shell then leaves the seen test of FrontierDupeFilter to it.
    shared_seen: ClassVar[bool] = False
    #: Requests ``push`` accepted that the queue refused later (a shared frontier finds
    #: duplicates and skipped start requests only when its round lands; it sends
    #: ``request_dropped`` for them): not counted as enqueued.
    dropped_later: int = 0

    @abstractmethod
    def push(self, request: Request, host: str, level: int,
             seen: SeenTest | None = None) -> bool:
        """Queue ``request`` for its politeness key ``host`` at front-queue ``level``
        (1..F, F highest, already mapped from its priority); ``seen``: the seen-set test
        of a ``shared_seen`` queue. False if it was refused (its host was retired, or
        over its budget)."""

    @abstractmethod
    def claim(self) -> Handout | Lease[Request] | None:
        """The next request whose host may be contacted now, under a lease; or None."""

    @abstractmethod
    def complete(self, ticket: int, seconds: float, rest: float,
                 ended_at: float | None = None, *, sent: bool = True) -> object:
        """The fetch of ``ticket`` ended after ``seconds``: its host rests by the delay
        policy from ``ended_at`` (the context's clock; None: now), and at least ``rest``
        from now (and its minimum rest). ``sent=False``: the request never reached the
        host (robots.txt forbade it, a cache answered it): the host rests nothing, is ready
        again as it was for this lease, and its budget does not count it.

        Returns the token that :meth:`ack` takes once the engine is done with the
        request, so that a crash in between cannot lose the links it found; None when
        nothing is left to acknowledge."""

    @abstractmethod
    def ack(self, token: object) -> None:
        """The engine is done with the request whose ``complete`` returned ``token``:
        forget it for good."""

    def holds(self, ticket: int) -> bool:
        """Whether the lease of ``ticket`` is still provably held, asked just before its
        request reaches the downloader. A queue whose leases cannot lapse while its
        process does not run keeps this default."""
        return True

    def give_back(self, ticket: int) -> None:
        """The request of ``ticket`` is not sent (its lease lapsed): its lease goes back
        unfetched. Only asked after :meth:`holds` said False."""
        return None

    @abstractmethod
    def __len__(self) -> int:
        """Requests queued (here and, for a shared frontier, everywhere), not in flight."""

    @abstractmethod
    def has_pending(self) -> bool:
        """Anything queued or in flight that may still produce a request."""

    @abstractmethod
    def next_wakeup(self) -> float | None:
        """Clock time at which ``claim`` could return something new, if known."""


class HistoryPort(ABC):
    """The page history's events, for the recrawl hooks.

    A remote history cannot be read on the reactor, so the port takes events and answers
    from what it has: a local history passes them to the
    :class:`~scrapy_frontier.core.recrawl.Recrawler` at once, a remote one sends them with
    its next I/O round. The records themselves live in the ``HistoryStore`` that
    :meth:`open_history` returns."""

    @abstractmethod
    def open_history(self) -> HistoryStore:
        """The store of page records (asked once, when a recrawl mode is on)."""

    @abstractmethod
    def attach(self, recrawler: Recrawler) -> None:
        """The recrawler over :meth:`open_history`'s store, to hand the events to."""

    @abstractmethod
    def record_visit(self, fp: int, url: str, visit: Visit | None) -> None:
        """Record a page visit (None: a download error)."""

    @abstractmethod
    def record_hints(self, hints: list[PageHint]) -> None:
        """Sitemaps and feeds hint when their pages changed and how often they change
        (see ``Recrawler.hint``); the records are read together."""

    @abstractmethod
    def record_signal_source(self, fp: int) -> None:
        """Page ``fp`` is a sitemap or a feed."""

    @abstractmethod
    def take_due(self, limit: int) -> list[PageRecord]:
        """Pages due for a recrawl, at most ``limit``. A history that answers later
        returns what it has and calls ``BackendContext.due_arrived`` when more arrive."""

    @abstractmethod
    def next_due(self) -> float | None:
        """Wall-clock time at which the next page falls due, if any; asked on the reactor
        when a continuous crawl is idle, so a remote history answers from its last round."""


class HostControlPort(ABC):
    """A host's rest, retirement and budget."""

    @abstractmethod
    def set_min_rest(self, host: str, seconds: float) -> None:
        """``host`` rests at least ``seconds`` after each fetch (a Crawl-delay)."""

    @abstractmethod
    def retire(self, host: str) -> list[Request]:
        """Give up ``host``: its queued requests are dropped (returned when known now)."""

    @abstractmethod
    def take_dropped(self) -> list[tuple[str, Request]]:
        """Queued requests of retired hosts dropped since the last call."""

    @abstractmethod
    def over_budget(self, host: str) -> bool:
        """Whether ``host`` has used its page budget (a refused push is then not a
        retirement). False where the budget is decided later, in the shared store."""

    @abstractmethod
    def host_counts(self) -> dict[str, int]:
        """Hosts blocked, retired and over budget (cheap: no I/O)."""

    def set_connections(self, host: str, connections: int, *, together: bool = False) -> None:
        """``host`` uses ``connections`` from now, as its capacity was measured
        (:meth:`Frontier.set_connections <scrapy_frontier.core.frontier.Frontier.set_connections>`).
        Only called with ``FRONTIER_CAPACITY``, which a backend that cannot change a host's
        connections refuses at startup."""
        raise NotImplementedError(f"{type(self).__name__} keeps its hosts' connections")

    def contain(self, host: str, fetched: int, allowance: int) -> None:
        """``host`` is a crawler trap (:mod:`scrapy_frontier.core.traps`): its budget becomes
        the larger of its fetch count and ``fetched``, plus ``allowance`` (a lower budget of
        its own stays), and the backend keeps it marked contained until an operator sets its
        budget, which releases it. A backend that cannot keeps this default: the crawl then
        runs without trap containment."""
        raise NotImplementedError(f"{type(self).__name__} cannot contain traps")

    def take_trap_states(self) -> list[tuple[str, str]]:
        """(host, "contained" or "released") learnt since the last call: kept by an earlier
        run or another worker, or a host an operator released (``scrapy frontier budget``)."""
        return []

    def steer_policies(self, raw: Mapping[str, Any]) -> list[str]:
        """Put the per-host policy's steered entries ``raw`` (key -> fields, as in
        ``FRONTIER_HOST_POLICY``; ``scrapy frontier policy``) in force for every host, in
        place of the earlier ones. Returns one sentence per entry refused or capped. The
        backend calls it with what its control store holds, at open and when that changes."""
        raise NotImplementedError(f"{type(self).__name__} keeps no steered policies")


class RobotsPort:
    """Each site's robots.txt record (``FRONTIER_ROBOTS_CACHE``), kept for every worker and
    later runs. Both members are optional: a backend that keeps none leaves this port's
    defaults (:attr:`Backend.robots`), and every worker and run fetches robots.txt itself."""

    def robots_get(self, origin: str) -> Deferred[object]:
        """The robots.txt record kept for ``origin`` (``scheme://host[:port]``), as
        :meth:`robots_put` was given it, or None: a Deferred that fires on the reactor (a
        remote store reads it off the reactor). What it fires with is checked by the shell,
        as untrusted. A backend that keeps none leaves this default: every worker and run
        fetches robots.txt itself."""
        from twisted.internet.defer import succeed

        return succeed(None)

    def robots_put(self, origin: str, record: bytes, keep: float) -> None:
        """Keep ``record`` for ``origin`` in place of the one before, for every worker and
        later runs, for ``keep`` seconds at least (it may be forgotten after that). Never
        blocks the reactor; a failed write is logged, not raised."""
        return None


class InspectPort(ABC):
    """Sizes and stats, for the census and the stats collector."""

    @abstractmethod
    def census(self) -> Census:
        """A snapshot of sizes and host states (:mod:`scrapy_frontier.observe.census`).
        Called on the reactor every few seconds: it must not block."""

    @abstractmethod
    def publish_stats(self, stats: StatsCollector) -> None:
        """Set the backend's ``frontier/*`` stats (and Scrapy's ``scheduler/*`` ones)."""

    def quarantine_size(self) -> int:
        """Requests set aside because they could not be rebuilt (any run), for the
        opening line."""
        return 0


class Backend(ABC):
    """Hands out the ports of one crawl, and opens and closes them together.

    A subclass sets :attr:`queue`, :attr:`history`, :attr:`controls` and
    :attr:`inspection` in its constructor (one object may serve several ports)."""

    #: The name in the ``frontier/backend`` stat and in error messages.
    name: str = ""
    #: State outlives the process (resumes, other workers): start requests go through
    #: the start gate.
    persistent: bool = False
    #: Where the state lives, for the opening line.
    location: str = "in this process"
    #: How its stored requests are sealed and read (see codec.RowTrust); known once open.
    row_trust: RowTrust = RowTrust(private=True)

    queue: QueuePort
    history: HistoryPort
    controls: HostControlPort
    inspection: InspectPort
    #: Keeps none unless the backend sets its own.
    robots: RobotsPort = RobotsPort()

    #: Each port's attribute and the class it must be an instance of.
    PORTS: ClassVar[dict[str, type]] = {
        "queue": QueuePort, "history": HistoryPort, "controls": HostControlPort,
        "inspection": InspectPort, "robots": RobotsPort,
    }

    @abstractmethod
    def __init__(self, context: BackendContext) -> None: ...

    @abstractmethod
    def open(self, spider: Spider) -> Deferred[None] | None:
        """Open the state (resume it, when persistent) before the first push."""

    @abstractmethod
    def close(self, reason: str) -> Deferred[None] | None:
        """Write what is left and let go of the state."""


def contract_members() -> dict[str, tuple[list[str], list[str]]]:
    """Each port's members: (required, optional), as the docs list them."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for port in (Backend, QueuePort, HistoryPort, HostControlPort, InspectPort, RobotsPort):
        required = sorted(getattr(port, "__abstractmethods__", ()))
        optional = sorted(name for name, value in vars(port).items()
                          if inspect.isfunction(value) and name not in required
                          and not (name.startswith("_") and name != "__len__"))
        out[port.__name__] = (required, optional)
    return out


def missing_members(cls: type) -> list[str]:
    """What ``cls`` (a Backend subclass) leaves abstract, as ``Class.member`` names."""
    return sorted(f"{cls.__name__}.{name}" for name in getattr(cls, "__abstractmethods__", ()))


def check_ports(backend: Backend) -> None:
    """Every port is there and of its kind, with no abstract member left."""
    from scrapy_frontier.errors import FrontierConfigError

    for attr, port in Backend.PORTS.items():
        value = getattr(backend, attr, None)
        if not isinstance(value, port):
            raise FrontierConfigError(
                f"backend {type(backend).__name__} has no {attr} port (an instance of "
                f"scrapy_frontier.backends.ports.{port.__name__})")


def load_backend(path: str) -> type[Backend]:
    """The Backend class at ``path``, its contract checked."""
    from scrapy.utils.misc import load_object

    from scrapy_frontier.errors import FrontierConfigError

    try:
        cls = load_object(path)
    except FrontierConfigError:
        raise  # a backend whose extra is not installed says which
    except (ImportError, ValueError, AttributeError, NameError) as exc:
        raise FrontierConfigError(
            f"FRONTIER_BACKEND={path!r} cannot be imported ({exc}); use 'memory', 'sqlite', "
            "'redis' or the import path of a backend class"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise FrontierConfigError(
            f"FRONTIER_BACKEND={path!r} is not a backend: a backend subclasses "
            "scrapy_frontier.backends.ports.Backend"
        )
    missing = missing_members(cls)
    if missing:
        raise FrontierConfigError(
            f"FRONTIER_BACKEND={path!r} does not implement {', '.join(missing)} "
            "(see scrapy_frontier.backends.ports)"
        )
    return cls


def build_backend(cls: type[Backend], context: BackendContext) -> Backend:
    """An instance of ``cls`` whose ports are all there and complete."""
    from scrapy_frontier.errors import FrontierConfigError

    try:
        backend = cls(context)
    except TypeError as exc:
        if "abstract" not in str(exc):
            raise
        # A port class left a member abstract: Python names it.
        raise FrontierConfigError(f"backend {cls.__name__}: {exc}") from None
    check_ports(backend)
    return backend


__all__ = [
    "Backend", "BackendContext", "Handout", "HistoryPort", "HostControlPort", "InspectPort",
    "QueuePort", "RobotsPort", "SeenTest", "build_backend", "contract_members", "load_backend",
]
