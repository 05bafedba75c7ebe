"""One snapshot of the frontier's size and host states, as a driver reports it.

Drivers build a :class:`Census` on request (``Driver.census``), a few times a minute
at most: the progress line and the metrics endpoint read it, never the hot path.
Counts a backend cannot give cheaply are ``None``.

Host states (each host that owns a back queue and has work is in exactly one):

* ``active`` -- a fetch from the host is in flight;
* ``waiting`` -- its rest is over, it waits for a free download slot (or for
  its IP group, with per-IP politeness);
* ``resting`` -- it keeps its politeness rest before the next fetch;
* ``blocked`` -- held by the operator (``scrapy frontier block``);
* ``retired`` -- given up for good (counted apart: retired hosts have no work).

``known`` counts every host the frontier keeps state for now: the above plus those
whose queues ran dry but whose rest has not ended yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class HostCounts:
    known: int | None = None
    active: int = 0
    waiting: int = 0
    resting: int = 0
    blocked: int = 0
    retired: int = 0
    queued: int | None = None
    """Hosts with queued URLs in their back queue (whatever their state)."""


@dataclass(frozen=True, slots=True)
class Census:
    """What the frontier holds now, from one process's point of view (``scope``)."""

    backend: str
    scope: str = "worker"
    """``worker``: this process's own share; ``shared``: the whole frontier (on a local
    backend the process is the whole frontier, so both agree)."""
    queued: int = 0
    """Requests queued, not in flight."""
    in_flight: int = 0
    """Requests handed out whose fetch has not ended."""
    waiting_for_queue: int | None = None
    """Queued requests of hosts that have no back queue yet (front queues)."""
    hosts: HostCounts = field(default_factory=HostCounts)
    fetched: int = 0
    """Fetches ended (responses and download errors) since the frontier was created."""
    politeness_wait_seconds: float | None = None
    """Sum of the rests imposed on hosts between two of their fetches."""
    seen: int | None = None
    """Fingerprints in the seen set, when it can count them cheaply."""
    history_pages: int | None = None
    """Pages in the page history (recrawl mode on), else None."""
    history_due: int | None = None
    """Pages of the history due for a recrawl now (recrawl mode on), else None."""
    partial: bool = False
    """One worker's share of a shared frontier: the totals are in ``shared`` (None until
    the first read)."""
    shared: Census | None = None
    """On a shared frontier (Redis): the whole frontier's totals, as last read."""
    shared_age: float | None = None
    """How old ``shared`` may be: seconds since its read was sent to the shared store."""
    partitions: tuple[Census, ...] = ()
    """The whole frontier of a partitioned crawl, partition by partition (in the ``shared``
    census; scope ``partition``)."""

    @property
    def whole(self) -> Census:
        """The whole frontier: ``shared`` when there is one, else this census."""
        return self if self.shared is None else self.shared

    @property
    def totals(self) -> Census | None:
        """The whole frontier, or None while a shared frontier's was not read yet."""
        return self.shared if self.partial else self
