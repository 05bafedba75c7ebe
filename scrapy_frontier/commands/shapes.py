"""The JSON shapes ``scrapy frontier --json`` prints: one builder per shape, for every
backend. They are a contract (docs/operating.rst): add nothing, rename nothing."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any

from scrapy_frontier.core.history import PageRecord

#: A host's state in ``hosts``, in order of precedence.
STATES = ("retired", "blocked", "active", "resting", "waiting")
#: Why a host is retired, in the human table's words.
RETIRED_WHY = {"retired": "by hand", "failures": "after failures", "budget": "budget"}
#: A crawler trap's state (core/traps.py), in the human table's words.
TRAP_NOTES = {"contained": "trap contained", "released": "trap released by hand"}


@dataclass(slots=True)
class HostView:
    """What a backend knows about one host, before it is shaped."""

    host: str
    front: int = 0
    """URLs in front queues (waiting for a back queue)."""
    back: int = 0
    """URLs in its back queue, not in flight."""
    in_flight: int = 0
    back_queue: bool = False
    next_contact_in: float | None = None
    """Seconds until it may be contacted (rest or block); None if it may be now."""
    last_fetch_s: float | None = None
    rest_s: float | None = None
    failures: int | None = None
    crawl_delay: float | None = None
    blocked_for: float | None = None
    """Seconds its block still lasts (inf: until unblocked)."""
    retired: str | None = None
    """Why it was retired ("budget", "failures", "retired" by hand), if it was."""
    hints: str | None = None
    """How far its sitemap and feed hints are believed (core/hint_trust.py); None if
    none of them was checked."""

    @property
    def state(self) -> str:
        if self.retired:
            return "retired"
        if self.blocked_for is not None:
            return "blocked"
        if self.in_flight:
            return "active"
        if self.next_contact_in is not None and self.next_contact_in > 0:
            return "resting"
        if self.back_queue or not self.front:
            return "active"
        return "waiting"

    @property
    def listed(self) -> bool:
        """Worth a row in ``hosts``: something queued, in flight, resting or set."""
        return bool(self.front or self.back or self.in_flight or self.retired
                    or self.blocked_for is not None
                    or (self.next_contact_in is not None and self.next_contact_in > 0))


class HostViews(dict[str, HostView]):
    """Host views by host, made on first use (each backend's ``views()`` fills one)."""

    def __missing__(self, host: str) -> HostView:
        v = self[host] = HostView(host)
        return v


def host_row(view: HostView) -> dict[str, Any]:
    wait = view.next_contact_in
    if view.blocked_for is not None:
        wait = max(wait or 0.0, view.blocked_for)
    if view.retired:
        wait = None  # never contacted again (unless taken back)
    return {
        "host": view.host,
        "queued": view.front + view.back,
        "state": view.state,
        "next_contact_in": None if wait is None or math.isinf(wait) else round(max(0.0, wait), 3),
        "last_fetch_s": _round(view.last_fetch_s),
        "rest_s": _round(view.rest_s),
        "failures": view.failures,
        "crawl_delay": _round(view.crawl_delay),
        "hints": view.hints,
    }


def add_hints(views: dict[str, HostView], checks: dict[str, tuple[int, int]]) -> None:
    """Annotate the hosts shown with the state of their checked change hints."""
    from scrapy_frontier.core.hint_trust import HintTrust

    trust = HintTrust(checks)
    for host in checks:
        view = views.get(host)
        if view is not None:
            view.hints = trust.state(host)


def sort_hosts(views: list[HostView], by: str, limit: int) -> list[HostView]:
    listed = [v for v in views if v.listed]
    if by == "next":
        def contact(v: HostView) -> float:
            wait = max(v.next_contact_in or 0.0, v.blocked_for or 0.0)
            return wait if v.retired is None else math.inf
        listed.sort(key=lambda v: (contact(v), -(v.front + v.back), v.host))
    else:
        listed.sort(key=lambda v: (-(v.front + v.back), v.host))
    return listed[:limit] if limit else listed


def host_counts(views: list[HostView], known: int) -> dict[str, int]:
    counts = dict.fromkeys(("active", "resting", "blocked", "retired"), 0)
    for v in views:
        state = v.state
        if state in counts and (v.listed or state == "retired"):
            counts[state] += 1
    return {"known": known, **counts}


def status(backend: str, queued: int, in_flight: int, hosts: dict[str, int], seen: int,
           pages: int, due: int) -> dict[str, Any]:
    return {"backend": backend, "queued": queued, "in_flight": in_flight, "hosts": hosts,
            "seen": seen, "history": {"pages": pages, "due": due}}


def iso(ts: float | None) -> str | None:
    if ts is None or not ts or math.isinf(ts):
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat(
        timespec="seconds")


def history(record: PageRecord | None, predictor: str) -> dict[str, Any] | None:
    if record is None:
        return None
    h = record.history
    return {
        "visits": len(h.visits),
        "changes": sum(1 for c in h.changed if c),
        "last_visit": iso(h.visits[-1] if h.visits else None),
        "interval_s": _round(h.interval),
        "next_due": iso(h.next_due),
        "predictor": predictor,
        "etag": record.etag,
        "last_modified": record.last_modified,
    }


def url(url: str, host: str, seen: bool, queued: bool, record: PageRecord | None,
        predictor: str) -> dict[str, Any]:
    return {"url": url, "seen": seen, "queued": queued, "host": host,
            "history": history(record, predictor)}


def due_row(record: PageRecord, now: float) -> dict[str, Any]:
    h = record.history
    return {"url": record.url, "next_due": iso(h.next_due),
            "due_in_s": round(h.next_due - now, 3), "interval_s": _round(h.interval),
            "visits": len(h.visits), "changes": sum(1 for c in h.changed if c)}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
