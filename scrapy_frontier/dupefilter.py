"""``DUPEFILTER_CLASS = "scrapy_frontier.dupefilter.FrontierDupeFilter"``.

A Scrapy dupefilter built on the URL-seen test of Broder, Najork and Wiener
(:mod:`scrapy_frontier.core.seen`): 64-bit fingerprints, a CLOCK cache of
2^16 entries in RAM, and behind it the full set -- in memory, or, when
``FRONTIER_PATH`` or ``JOBDIR`` is set, in ``<dir>/seen.sqlite``, which
persists across runs. It works with scrapy-frontier's scheduler and with
Scrapy's own.

Settings (read by :mod:`scrapy_frontier.settings`): ``FRONTIER_SEEN_CACHE_SIZE``,
``FRONTIER_SEEN_CACHE_POLICY`` (``"clock"``, ``"lru"`` or ``"random"``, seeded
from ``FRONTIER_SEED``), ``FRONTIER_PATH`` / ``JOBDIR`` (where ``seen.sqlite``
lives), and Scrapy's ``DUPEFILTER_DEBUG`` and ``REQUEST_FINGERPRINTER_CLASS``.

With ``FRONTIER_BACKEND = "redis"`` the seen set is the one the workers share in
Redis: the scheduler leaves the seen test to its driver, and this filter keeps
only an in-memory set (used if something else calls :meth:`request_seen`).

Stats (published every few thousand lookups and at close, not per request):
``frontier/seen/hits``, ``frontier/seen/misses``, ``frontier/seen/store_hits``,
``frontier/seen/hit_rate`` and Scrapy's ``dupefilter/filtered``.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.request import referer_str

from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore
from scrapy_frontier.core.seen import FingerprintStore, MemoryFingerprintStore, SeenSet, make_cache
from scrapy_frontier.errors import SeenStoreError
from scrapy_frontier.fingerprint import Fingerprinter64
from scrapy_frontier.settings import FrontierConfig

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger("scrapy_frontier.dupefilter")

#: The file the seen-set is kept in, inside FRONTIER_PATH or JOBDIR.
STORE_NAME = "seen.sqlite"
#: Stats are published after this many lookups (and at close).
PUBLISH_EVERY = 4096


class FrontierDupeFilter(BaseDupeFilter):
    """Duplicate filter: a fingerprint cache in front of a (persistent) seen-set.

    Built by Scrapy through :meth:`from_crawler`; can also be built directly
    (``FrontierDupeFilter()``: CLOCK cache of 2^16, in-memory set).
    """

    def __init__(
        self,
        seen: SeenSet | None = None,
        *,
        fingerprinter: RequestFingerprinterProtocol | None = None,
        debug: bool = False,
        stats: StatsCollector | None = None,
        path: Path | None = None,
    ) -> None:
        self.seen = seen if seen is not None else SeenSet()
        self.fp64 = Fingerprinter64(fingerprinter)
        self.fingerprinter = self.fp64.fingerprinter
        self.debug = debug
        self.stats = stats
        #: The seen-set file, when persistent.
        self.path = path
        self.logdupes = True
        self.filtered = 0
        self._since_publish = 0
        self._published: dict[str, int] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierDupeFilter:
        config = FrontierConfig.from_settings(crawler.settings)
        size, policy = config.seen_cache
        cache = make_cache(policy, size, rng=random.Random(config.seed))
        store: FingerprintStore
        path: Path | None = None
        if config.state_dir is None or config.backend in ("memory", "redis"):
            store = MemoryFingerprintStore()
        else:
            directory = Path(config.state_dir)
            path = directory / STORE_NAME
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SeenStoreError(
                    path, f"its directory cannot be created ({exc})",
                    "Check FRONTIER_PATH / JOBDIR and the permissions of its parent.",
                ) from exc
            store = SQLiteFingerprintStore(path)
            logger.info("Seen-set: %s (%d fingerprints from earlier runs), %s cache of %d",
                        path, len(store), policy, size)
        return cls(
            SeenSet(cache, store),
            fingerprinter=crawler.request_fingerprinter,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            stats=crawler.stats,
            path=path,
        )

    # -- BaseDupeFilter ----------------------------------------------------------------

    def request_seen(self, request: Request) -> bool:
        return self.fingerprint_seen(self.fp64(request))

    def fingerprint_seen(self, fp: int) -> bool:
        """Whether ``fp`` was seen before; it is seen from now on either way.

        The scheduler calls this with the fingerprint it computed once per request.
        """
        answer = self.seen.seen(fp)
        self._since_publish += 1
        if self._since_publish >= PUBLISH_EVERY:
            self.publish_stats()
        return answer

    def open(self) -> None:
        return None

    def close(self, reason: str) -> None:
        self.publish_stats()
        self.seen.close()

    def log(self, request: Request, spider: Spider | None) -> None:
        self.filtered += 1
        if self.debug:
            logger.debug(
                "Filtered duplicate request: %(request)s (referer: %(referer)s)",
                {"request": request, "referer": referer_str(request)},
                extra={"spider": spider},
            )
        elif self.logdupes:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown "
                "(see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
                extra={"spider": spider},
            )
            self.logdupes = False

    # -- stats -------------------------------------------------------------------------

    def publish_stats(self) -> None:
        """Bring the crawl stats up to date with the plain counters."""
        self._since_publish = 0
        stats = self.stats
        if stats is None:
            return
        seen = self.seen
        for key, value in (
            ("frontier/seen/hits", seen.hits),
            ("frontier/seen/misses", seen.misses),
            ("frontier/seen/store_hits", seen.store_hits),
            ("dupefilter/filtered", self.filtered),
        ):
            # Increments, not values: anything else counting the same key keeps its share.
            delta = value - self._published.get(key, 0)
            if delta:
                stats.inc_value(key, delta)
                self._published[key] = value
        if seen.lookups:
            stats.set_value("frontier/seen/hit_rate", round(seen.hit_rate, 4))
