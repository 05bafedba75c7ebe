"""``DUPEFILTER_CLASS = "scrapy_frontier.dupefilter.FrontierDupeFilter"``.

A Scrapy dupefilter built on the URL-seen test of Broder, Najork and Wiener
(:mod:`scrapy_frontier.core.seen`): 64-bit fingerprints, a CLOCK cache of
2^16 entries in RAM, and behind it the full set -- in memory, or, when
``FRONTIER_PATH`` or ``JOBDIR`` is set, in ``<dir>/seen.sqlite``, which
persists across runs. It works with scrapy-frontier's scheduler and with
Scrapy's own.

Settings:

* ``FRONTIER_SEEN_CACHE_SIZE`` -- cache entries (default 65536 = 2^16);
* ``FRONTIER_SEEN_CACHE_POLICY`` -- ``"clock"`` (default), ``"lru"`` or
  ``"random"`` (seeded from ``FRONTIER_SEED``). The static, MIN and infinite
  policies need the future or all of the set in RAM and exist only in
  simulations (``benchmarks/bench_seen_cache.py``);
* ``FRONTIER_PATH``, else ``JOBDIR`` -- where ``seen.sqlite`` lives;
* ``DUPEFILTER_DEBUG`` -- log every filtered request, as Scrapy's filter does;
* ``REQUEST_FINGERPRINTER_CLASS`` -- applies as usual: the crawler's
  fingerprinter makes the fingerprints.

Stats (published every few thousand lookups and at close, not per request):
``frontier/seen/hits``, ``frontier/seen/misses``, ``frontier/seen/store_hits``,
``frontier/seen/hit_rate`` and Scrapy's ``dupefilter/filtered``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.request import RequestFingerprinter, referer_str
from scrapy.utils.request import fingerprint as scrapy_fingerprint

from scrapy_frontier.config import FrontierConfigError
from scrapy_frontier.core.seen import (
    DEFAULT_CACHE_SIZE,
    ONLINE_POLICIES,
    FingerprintStore,
    MemoryStore,
    SeenSet,
    fingerprint64,
    make_cache,
)
from scrapy_frontier.hostkey import PLAIN_URL
from scrapy_frontier.seen_sqlite import SeenStoreError, SQLiteFingerprintStore

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger("scrapy_frontier.dupefilter")

#: The file the seen-set is kept in, inside FRONTIER_PATH or JOBDIR.
STORE_NAME = "seen.sqlite"
#: Stats are published after this many lookups (and at close).
PUBLISH_EVERY = 4096
#: A cache bigger than this is surely a typo (and RAM the crawl does not have).
MAX_CACHE_SIZE = 1 << 28


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
        self.fingerprinter: RequestFingerprinterProtocol = (
            fingerprinter if fingerprinter is not None else RequestFingerprinter()
        )
        # Scrapy's own fingerprinter makes SHA1 digests: their first 8 bytes are
        # already uniform. Any other may return structured bytes (a URL, say),
        # whose first 8 bytes would collide: those are hashed down to 8 bytes.
        self._digest = type(self.fingerprinter) is RequestFingerprinter
        # Scrapy's default fingerprinter, unmodified: plain URLs take a shortcut
        # that gives the very same digest (see fast_fingerprint).
        self._fast = self._digest and (
            getattr(self.fingerprinter, "_fingerprint", None) is scrapy_fingerprint
        )
        self.debug = debug
        self.stats = stats
        #: The seen-set file, when persistent.
        self.path = path
        self.logdupes = True
        self.filtered = 0
        self._since_publish = 0
        self._published: dict[str, int] = {}
        self.last_fp: int | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierDupeFilter:
        settings = crawler.settings
        size = _cache_size(settings)
        policy = _cache_policy(settings)
        rng = random.Random(_seed(settings))
        cache = make_cache(policy, size, rng=rng)
        directory = store_directory(settings)
        store: FingerprintStore
        path: Path | None = None
        if directory is None:
            store = MemoryStore()
        else:
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
            debug=settings.getbool("DUPEFILTER_DEBUG"),
            stats=crawler.stats,
            path=path,
        )

    # -- BaseDupeFilter ----------------------------------------------------------------

    def request_seen(self, request: Request) -> bool:
        fp = fast_fingerprint(request) if self._fast else None
        if fp is None:
            fp = self.fingerprinter.fingerprint(request)
            if not self._digest:
                fp = hashlib.blake2b(fp, digest_size=8).digest()
        #: The fingerprint of the last request looked up (for the page history's inlinks).
        self.last_fp = fingerprint64(fp)
        answer = self.seen.seen(self.last_fp)
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


def request_fp64(fingerprinter: RequestFingerprinterProtocol, request: Request) -> int:
    """The 64-bit fingerprint the seen-set and the page history use for ``request``."""
    default = type(fingerprinter) is RequestFingerprinter
    fp = None
    if default and getattr(fingerprinter, "_fingerprint", None) is scrapy_fingerprint:
        fp = fast_fingerprint(request)
    if fp is None:
        fp = fingerprinter.fingerprint(request)
        if not default:
            # Other fingerprinters may return structured bytes: hash them down first.
            fp = hashlib.blake2b(fp, digest_size=8).digest()
    return fingerprint64(fp)


def fast_fingerprint(request: Request) -> bytes | None:
    """Scrapy's default request fingerprint for a plain GET of an already
    canonical URL, without canonicalising it again; None for any other request.

    The digest is the SHA1 of the same JSON document Scrapy's
    :func:`scrapy.utils.request.fingerprint` hashes (``json.dumps`` with sorted
    keys; such a URL needs no escaping). ``verbatim_url`` and ``keep_fragments``
    cannot change it: the URL is canonical and has no fragment. Most of the
    enqueue time of a plain request otherwise goes into ``canonicalize_url``.
    """
    url = request.url
    if request.method != "GET" or request.body or not PLAIN_URL.fullmatch(url):
        return None
    doc = '{"body": "", "headers": {}, "method": "GET", "url": "' + url + '"}'
    return hashlib.sha1(doc.encode()).digest()  # noqa: S324 -- Scrapy's digest, not security


def store_directory(settings: BaseSettings) -> Path | None:
    """FRONTIER_PATH if set, else JOBDIR if set, else None (in-memory seen-set)."""
    for name in ("FRONTIER_PATH", "JOBDIR"):
        raw = settings.get(name)
        if raw is None or raw == "":
            continue
        if not isinstance(raw, (str, os.PathLike)):
            raise FrontierConfigError(f"{name} must be a directory path, got {raw!r}")
        return Path(raw)
    return None


def _cache_size(settings: BaseSettings) -> int:
    raw: Any = settings.get("FRONTIER_SEEN_CACHE_SIZE")
    if raw is None or raw == "":
        return DEFAULT_CACHE_SIZE
    try:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError
        value = int(raw)
    except (TypeError, ValueError):
        raise FrontierConfigError(
            f"FRONTIER_SEEN_CACHE_SIZE must be an integer number of entries, got {raw!r}"
        ) from None
    if not 1 <= value <= MAX_CACHE_SIZE:
        raise FrontierConfigError(
            f"FRONTIER_SEEN_CACHE_SIZE must be in 1..{MAX_CACHE_SIZE}, got {value} "
            f"(the default, {DEFAULT_CACHE_SIZE}, is the size Broder et al. recommend)"
        )
    return value


def _cache_policy(settings: BaseSettings) -> str:
    raw: Any = settings.get("FRONTIER_SEEN_CACHE_POLICY")
    if raw is None or raw == "":
        return "clock"
    name = raw.strip().lower() if isinstance(raw, str) else raw
    if name in ONLINE_POLICIES:
        return str(name)
    if name in ("static", "min", "infinite"):
        raise FrontierConfigError(
            f"FRONTIER_SEEN_CACHE_POLICY={raw!r} is a simulation-only policy (it needs the "
            "future, or the whole set in RAM); use 'clock' (default), 'lru' or 'random'"
        )
    raise FrontierConfigError(
        f"FRONTIER_SEEN_CACHE_POLICY must be one of {', '.join(ONLINE_POLICIES)}, got {raw!r}"
    )


def _seed(settings: BaseSettings) -> int | None:
    raw: Any = settings.get("FRONTIER_SEED")
    if raw is None or raw == "":
        return None
    try:
        if isinstance(raw, bool):
            raise ValueError
        return int(raw)
    except (TypeError, ValueError):
        raise FrontierConfigError(f"FRONTIER_SEED must be an integer, got {raw!r}") from None
