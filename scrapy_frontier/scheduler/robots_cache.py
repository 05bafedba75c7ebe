"""robots.txt once per site: the answers Scrapy's robots.txt middleware fetched, kept with
the frontier (``RobotsPort.robots_get`` / ``robots_put``) for ``FRONTIER_ROBOTS_CACHE``
seconds, so that no other worker and no later run fetches them again meanwhile.

``RobotsCacheMiddleware`` (downloadermiddlewares.py) asks :meth:`RobotsCache.lookup` for
each robots.txt request Scrapy makes and answers it from the record when there is a fresh
one; otherwise the request goes to the site and :meth:`RobotsCache.keep` keeps its final
answer when RFC 9309 calls it definitive (see ``core/robots_cache.py``). When that answer
says the file is unreachable (5xx, 429, no answer), a record that is no longer fresh but
younger than ``STALE_LIMIT`` (30 days) answers instead (:meth:`RobotsCache.stand_in`), so
the stores keep each record that long. Scrapy's middleware parses any answer the same way:
``ROBOTSTXT_PARSER``, ``ROBOTSTXT_USER_AGENT`` and the ``robots_parsed`` signal
(Crawl-delay, the Sitemap lines) work as without the cache.

With ``FRONTIER_SIGNING_KEYS`` every record is sealed for its origin, on every backend: the
shell does not know which store is shared (Redis) and which is private (a JOBDIR, or
memory), and a record that fails costs one fetch of a robots.txt, not lost work, so the
leniency a private store has for queued rows is not needed here. Turning keys on, or
dropping one, makes each site's robots.txt be fetched once more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy_frontier.core.robots_cache import (
    STALE_LIMIT,
    Keyring,
    RobotsRecord,
    check_origin,
    decode,
    encode,
    record_of,
    seal,
    stand_in,
    unseal,
)

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from scrapy_frontier.backends.ports import RobotsPort

logger = logging.getLogger("scrapy_frontier.robots")


def robots_origin(url: str) -> str | None:
    """The origin whose robots.txt ``url`` is (``scheme://netloc``, lower-cased, as Scrapy's
    robots.txt middleware keys its parsers by netloc), or None if it is no such URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if (parts.scheme not in ("http", "https") or parts.path != "/robots.txt" or parts.query
            or not parts.netloc or parts.username or parts.password):
        return None
    try:
        return check_origin(f"{parts.scheme}://{parts.netloc.lower()}")
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Kept:
    """A site's record, as a lookup found it."""

    record: RobotsRecord
    fresh: bool
    """It answers for the site. If not, the site is asked, and the record answers only in
    place of an answer that says the file is unreachable (:meth:`RobotsCache.stand_in`)."""


class RobotsCache:
    """Reads and keeps each site's robots.txt record through the backend's port."""

    def __init__(self, store: RobotsPort, stats: StatsCollector, max_age: float, *,
                 keys: Keyring | None = None, wall: Callable[[], float] = time.time) -> None:
        self.store = store
        self.stats = stats
        self.max_age = max_age
        #: FRONTIER_SIGNING_KEYS: records are sealed, and only verified ones are read.
        self.keys = keys
        #: Wall-clock time: records are shared across processes and runs.
        self.wall = wall
        self._warned = False

    def lookup(self, origin: str) -> Deferred[Kept | None]:
        """The record of ``origin``'s robots.txt younger than STALE_LIMIT, fresh or not, or
        None (fetch it)."""
        d = self.store.robots_get(origin)
        return d.addCallback(self._checked, origin)

    def _checked(self, raw: object, origin: str) -> Kept | None:
        if raw is None:
            return None
        now = self.wall()
        try:
            record = decode(unseal(self.keys, origin, raw), now)
        except ValueError as exc:
            self.stats.inc_value("frontier/robots/cache_invalid")
            log = logger.debug if self._warned else logger.warning
            self._warned = True
            log("The robots.txt kept for %s is not valid (%s): it is fetched again, and "
                "frontier/robots/cache_invalid counts such records", origin, exc)
            return None
        if record.fresh(now, self.max_age):
            self.stats.inc_value("frontier/robots/cached")
            return Kept(record, fresh=True)
        return Kept(record, fresh=False) if record.may_stand_in(now) else None

    def stand_in(self, origin: str, kept: RobotsRecord | None, status: int | None
                 ) -> RobotsRecord | None:
        """The record that answers in place of the site's final answer of ``status`` (None:
        no answer): ``kept`` when the answer says the file is unreachable and ``kept`` is
        still young enough; None: the site's answer stands."""
        now = self.wall()
        record = stand_in(kept, status, now)
        if record is not None:
            self.stats.inc_value("frontier/robots/stale_used")
            logger.info("robots.txt of %s is unreachable (%s): the copy kept from %.1f hours "
                        "ago answers instead (RFC 9309)", origin,
                        "no answer" if status is None else f"status {status}",
                        record.age(now) / 3600)
        return record

    def keep(self, origin: str, status: int, body: bytes) -> bool:
        """The final answer to ``origin``'s robots.txt came from the site: keep it when
        it is definitive. Whether it was kept. The store keeps it STALE_LIMIT, for
        :meth:`stand_in`; it is fresh for ``max_age``."""
        record = record_of(status, body, self.wall())
        if record is None:
            return False
        stored = encode(record)
        if self.keys is not None:
            stored = seal(self.keys, origin, stored)
        self.store.robots_put(origin, stored, STALE_LIMIT)
        self.stats.inc_value("frontier/robots/stored")
        return True


__all__ = ["Kept", "RobotsCache", "robots_origin"]
