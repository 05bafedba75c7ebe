"""Every ``FRONTIER_*`` setting: one table of defaults, read and validated in one place.

:meth:`FrontierConfig.from_settings` is the only code that reads a
``FRONTIER_*`` setting; everything else gets the validated
:class:`FrontierConfig`. A bad value raises :class:`FrontierConfigError`
naming the setting, at startup.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from scrapy.settings import BaseSettings

from scrapy_frontier.codec import MIN_KEY_LENGTH
from scrapy_frontier.core.host_policy import (
    HostPolicies,
    HostPolicy,
    cap_connections,
    parse_entries,
)
from scrapy_frontier.core.politeness import (
    DEFAULT_FACTOR,
    DEFAULT_MAX_DELAY,
    DEFAULT_MIN_DELAY,
    DelayPolicy,
)
from scrapy_frontier.core.recrawl import MODES, PREDICTORS, RecrawlSettings
from scrapy_frontier.core.refresh import DAY, RefreshConfig
from scrapy_frontier.core.seen import DEFAULT_CACHE_SIZE, POLICIES
from scrapy_frontier.core.traps import TrapConfig
from scrapy_frontier.errors import FrontierConfigError

__all__ = ["DEFAULTS", "BACKENDS", "BudgetConfig", "FrontierConfig", "FrontierConfigError",
           "ObserveConfig", "SitemapConfig", "unknown_settings"]

#: The backends that ship with scrapy-frontier; FRONTIER_BACKEND may also be an import path.
BACKENDS = {
    "memory": "scrapy_frontier.backends.memory.MemoryBackend",
    "sqlite": "scrapy_frontier.backends.sqlite.backend.SQLiteBackend",
    "redis": "scrapy_frontier.backends.redis.backend.RedisBackend",
}

#: Every FRONTIER_* setting and its default. ``None`` means "derived" (see from_settings).
DEFAULTS: dict[str, Any] = {
    "FRONTIER_BACKEND": None,  # "sqlite" with JOBDIR / FRONTIER_PATH, else "memory"
    "FRONTIER_PATH": None,
    "FRONTIER_FRONT_QUEUES": 8,
    "FRONTIER_PRIORITY_BIAS": 2.0,
    "FRONTIER_PRIORITY_RULES": {},
    "FRONTIER_BACK_QUEUES": None,  # 2 x (ceil(factor) + 1) x CONCURRENT_REQUESTS
    "FRONTIER_BACK_QUEUES_MAX": None,  # FRONTIER_BACK_QUEUES
    "FRONTIER_DELAY_FACTOR": DEFAULT_FACTOR,
    "FRONTIER_MIN_DELAY": DEFAULT_MIN_DELAY,
    "FRONTIER_MAX_DELAY": DEFAULT_MAX_DELAY,
    "FRONTIER_LEASE_TIMEOUT": None,  # DOWNLOAD_TIMEOUT + 60
    "FRONTIER_SEED": None,
    "FRONTIER_FLUSH_INTERVAL": 1.0,
    "FRONTIER_WRITE_THROUGH": True,
    "FRONTIER_MAX_CRAWL_DELAY": 300.0,
    "FRONTIER_MAX_RETRY_AFTER": 3600.0,
    "FRONTIER_BACKOFF_BASE": 5.0,
    "FRONTIER_BACKOFF_MAX": 600.0,
    "FRONTIER_RETIRE_AFTER": 10,
    "FRONTIER_ROBOTS_CACHE": 24 * 3600.0,  # RFC 9309's most; 0: off
    "FRONTIER_IP_POLITENESS": False,
    "FRONTIER_STALL_DISCOUNT": False,  # deprecated: records stalls only (docs/design.rst)
    "FRONTIER_TCP_TIMING": True,
    "FRONTIER_SEEN_CACHE_SIZE": DEFAULT_CACHE_SIZE,
    "FRONTIER_SEEN_CACHE_POLICY": "clock",
    "FRONTIER_RECRAWL": "due",
    "FRONTIER_RECRAWL_MIN": 3600.0,
    "FRONTIER_RECRAWL_MAX": 180 * DAY,
    "FRONTIER_RECRAWL_INITIAL": None,  # clamp(1 day, FRONTIER_RECRAWL_MIN, FRONTIER_RECRAWL_MAX)
    "FRONTIER_RECRAWL_PREDICTOR": "timely_return",
    "FRONTIER_RECRAWL_BUDGET": 0.0,
    "FRONTIER_RECRAWL_PASS_304": False,
    "FRONTIER_RECRAWL_ALL": False,
    "FRONTIER_CHANGE_THRESHOLD": 3,
    "FRONTIER_CHANGE_EXACT": False,
    "FRONTIER_HISTORY_MAX_PAGES": 0,
    "FRONTIER_SITEMAPS": None,  # off; "robots", or a list of sitemap / feed URLs
    "FRONTIER_SITEMAP_TIMEOUT": 30.0,
    "FRONTIER_SIGNING_KEYS": None,  # the environment variable of the same name, else none
    "FRONTIER_HISTORY_RETIRE_AFTER": 5,
    "FRONTIER_QUALITY": "depth",
    "FRONTIER_REDIS_KEY": "%(spider)s:frontier:",
    "FRONTIER_REDIS_SEEN_KEY": "%(spider)s:seen:",
    "FRONTIER_REDIS_HISTORY_KEY": "%(spider)s:history:",
    "FRONTIER_REDIS_SEEN_EXPECTED": 10_000_000,
    "FRONTIER_REDIS_PREFETCH": 4,
    "FRONTIER_REDIS_IDLE_GRACE": 2.0,
    "FRONTIER_REDIS_LIVENESS": 5.0,
    "FRONTIER_REDIS_CLUSTER": False,
    "FRONTIER_REDIS_PARTITIONS": 1,
    "FRONTIER_PROGRESS_INTERVAL": 30.0,
    "FRONTIER_METRICS_PORT": None,  # off
    "FRONTIER_METRICS_HOST": "127.0.0.1",
    "FRONTIER_HOST_BUDGET": 0,
    "FRONTIER_HOST_BUDGETS": {},
    "FRONTIER_TRAPS": False,
    "FRONTIER_TRAPS_WINDOW": 50,
    "FRONTIER_TRAPS_MIN_YIELD": 0.1,
    "FRONTIER_TRAPS_ALLOWANCE": 20,
    "FRONTIER_HOST_POLICY": {},
    "FRONTIER_CAPACITY": 0,
}

#: More front queues than this is surely a typo (each is scanned when choosing a level).
MAX_FRONT_QUEUES = 1000
#: RFC 9309 2.4: a robots.txt is not used for more than 24 hours after its fetch.
MAX_ROBOTS_CACHE = 24 * 3600.0
#: A seen cache bigger than this is surely a typo (and RAM the crawl does not have).
MAX_CACHE_SIZE = 1 << 28


def dotted_name(obj: object) -> str:
    """A setting's component as its import path, whether given as a string or a class."""
    if isinstance(obj, str):
        return obj
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"


def unknown_settings(settings: BaseSettings) -> list[tuple[str, str | None]]:
    """Each ``FRONTIER_*`` name in ``settings`` that no setting has, with the nearest known
    name (None if none is close): a misspelled setting is otherwise silently ignored."""
    import difflib

    known = list(DEFAULTS)
    out = []
    for name in sorted(settings):
        if name.startswith("FRONTIER_") and name not in DEFAULTS:
            near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            out.append((name, near[0] if near else None))
    return out


@dataclass(frozen=True, slots=True)
class SitemapConfig:
    """The sitemaps and feeds the frontier reads itself (see docs/signals.rst)."""

    urls: tuple[str, ...] = ()
    """FRONTIER_SITEMAPS: sitemap and feed URLs; "robots" among them: also those robots.txt
    files name."""
    timeout: float = DEFAULTS["FRONTIER_SITEMAP_TIMEOUT"]
    """FRONTIER_SITEMAP_TIMEOUT: seconds each of these requests may take (their
    ``download_timeout``); they are retried at most once."""


@dataclass(frozen=True, slots=True)
class ObserveConfig:
    """The progress line and the metrics endpoint (:mod:`scrapy_frontier.observe`)."""

    progress_interval: float = DEFAULTS["FRONTIER_PROGRESS_INTERVAL"]
    """Seconds between two progress lines; 0: no progress line."""
    metrics_port: int | None = None
    """TCP port of the Prometheus endpoint; None: no endpoint."""
    metrics_host: str = DEFAULTS["FRONTIER_METRICS_HOST"]


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """The Redis driver's settings (key prefixes still hold ``%(spider)s``)."""

    key: str = DEFAULTS["FRONTIER_REDIS_KEY"]
    seen_key: str = DEFAULTS["FRONTIER_REDIS_SEEN_KEY"]
    history_key: str = DEFAULTS["FRONTIER_REDIS_HISTORY_KEY"]
    seen_expected: int = DEFAULTS["FRONTIER_REDIS_SEEN_EXPECTED"]
    prefetch: int = DEFAULTS["FRONTIER_REDIS_PREFETCH"]
    idle_grace: float = DEFAULTS["FRONTIER_REDIS_IDLE_GRACE"]
    """How long a worker that has seen no work yet waits for its peers' start requests."""
    liveness: float = DEFAULTS["FRONTIER_REDIS_LIVENESS"]
    """Seconds a worker's leases outlive its last heartbeat (0: only the lease timeout)."""
    cluster: bool = False
    """Talk to a Redis Cluster (redis-py's cluster client)."""
    partitions: int = DEFAULTS["FRONTIER_REDIS_PARTITIONS"]
    """Partitions of the frontier, by host (see backends/redis/partitions.py)."""

    def keys_for(self, spider: str) -> tuple[str, str, str]:
        """(frontier, seen set, history) key prefixes of ``spider``."""
        names = {"spider": spider}
        return self.key % names, self.seen_key % names, self.history_key % names

    @property
    def tagged(self) -> bool:
        """Each partition's keys carry a hash tag (partitioned, or on a cluster)."""
        return self.cluster or self.partitions > 1


@dataclass(frozen=True, slots=True)
class SiteRuleLimits:
    """The caps of the site rules (scheduler/site_rules.py)."""

    max_crawl_delay: float = 300.0
    """Cap on a robots.txt Crawl-delay (Heritrix's default); longer ones are capped."""
    max_retry_after: float = 3600.0
    """Cap on a Retry-After wait (429 / 503); longer ones are clamped."""
    backoff_base: float = 5.0
    """Rest after a first failure (5xx, 429 without Retry-After, timeout, connection error)."""
    backoff_max: float = 600.0
    """Cap on the doubling back-off."""
    retire_after: int = 10
    """Consecutive failures after which a host is retired; 0 never retires."""
    robots_cache: float = DEFAULTS["FRONTIER_ROBOTS_CACHE"]
    """FRONTIER_ROBOTS_CACHE: seconds a fetched robots.txt answers for its site, for every
    worker and later runs (RFC 9309 allows 24 hours at most); 0: not kept."""


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """How many fetches hosts may have, and the traps that shrink that."""

    per_host: int = 0
    """FRONTIER_HOST_BUDGET: pages fetched per host per crawl (0: unlimited)."""
    own: dict[str, int] = field(default_factory=dict)
    """FRONTIER_HOST_BUDGETS: host -> its own budget (0: unlimited)."""
    traps: TrapConfig = field(default_factory=TrapConfig)
    """FRONTIER_TRAPS*: hosts whose yield of new content collapses get a small budget."""


@dataclass(frozen=True, slots=True)
class FrontierConfig:
    front_queues: int
    priority_bias: float
    back_queues: int
    back_queues_max: int
    delay_factor: float
    min_delay: float
    max_delay: float
    lease_timeout: float
    seed: int | None
    concurrent_requests: int
    state_dir: str | None
    """Where the SQLite state lives: FRONTIER_PATH, else JOBDIR, else None (memory)."""
    flush_interval: float
    write_through: bool
    site_limits: SiteRuleLimits = field(default_factory=SiteRuleLimits)
    """Caps of the site rules: Crawl-delay, Retry-After, back-off, retirement."""
    ip_politeness: bool = False
    """Hosts that resolve to one IP address also share one fetch at a time and one rest."""
    stall_discount: bool = False
    """Record the crawler's loop's stalls (stats only: no fetch time is shortened by one)."""
    tcp_timing: bool = True
    """Time HTTP/1.x fetches by the kernel's TCP stamps where it has them (Linux)."""
    dns_timeout: float = 60.0
    """Scrapy's DNS_TIMEOUT, for the lookups per-IP politeness makes."""
    backend: str = "memory"
    """FRONTIER_BACKEND resolved: "memory", "sqlite", "redis", or a backend's import path."""
    recrawl: RecrawlSettings = field(default_factory=RecrawlSettings)
    priority_rules: dict[str, int] = field(default_factory=dict)
    """FRONTIER_PRIORITY_RULES: host suffix -> priority boost."""
    seen_cache: tuple[int, str] = (DEFAULT_CACHE_SIZE, "clock")
    """FRONTIER_SEEN_CACHE_SIZE and FRONTIER_SEEN_CACHE_POLICY."""
    redis: RedisConfig = field(default_factory=RedisConfig)
    observe: ObserveConfig = field(default_factory=ObserveConfig)
    budgets: BudgetConfig = field(default_factory=lambda: BudgetConfig())
    """FRONTIER_HOST_BUDGET, FRONTIER_HOST_BUDGETS and FRONTIER_TRAPS*: the fetch budgets,
    and the traps that shrink them."""
    sitemaps: SitemapConfig = field(default_factory=SitemapConfig)
    """FRONTIER_SITEMAPS and FRONTIER_SITEMAP_TIMEOUT: the sitemaps and feeds the frontier
    reads itself."""
    host_policies: HostPolicies = field(default_factory=lambda: HostPolicies(HostPolicy()))
    """FRONTIER_HOST_POLICY: each host's delay rule, connections and budget."""
    capacity: int = 0
    """FRONTIER_CAPACITY: the most connections a host's measured capacity may give it
    (0: off); each host's policy concurrency is then its cap."""
    signing_keys: tuple[str, ...] = field(default=(), repr=False)
    """FRONTIER_SIGNING_KEYS (or the environment variable): the keys that seal stored
    requests, the first one sealing; never logged."""

    def budget_for(self, host: str) -> int:
        """FRONTIER_HOST_BUDGETS' entry for ``host``, else its per-host policy's budget,
        else FRONTIER_HOST_BUDGET."""
        own = self.budgets.own.get(host)
        if own is not None:
            return own
        policy = self.host_policies.budget_of(host)
        return self.budgets.per_host if policy is None else policy

    @property
    def policy(self) -> DelayPolicy:
        return DelayPolicy(self.delay_factor, self.min_delay, self.max_delay)

    @property
    def backend_path(self) -> str:
        """The import path of the Backend class FRONTIER_BACKEND names."""
        return BACKENDS.get(self.backend, self.backend)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierConfig:
        concurrency = _int(settings, "CONCURRENT_REQUESTS", 16, minimum=1)
        factor = _float(settings, "FRONTIER_DELAY_FACTOR", minimum=0.0)
        min_delay = _float(settings, "FRONTIER_MIN_DELAY", minimum=0.0)
        max_delay = _float(settings, "FRONTIER_MAX_DELAY", minimum=0.0)
        if max_delay < min_delay:
            raise FrontierConfigError(
                f"FRONTIER_MAX_DELAY ({max_delay}) must be >= FRONTIER_MIN_DELAY ({min_delay})"
            )
        pacing = scrapy_pacing(settings)
        min_delay = max(min_delay, pacing.min_delay)
        max_delay = max(max_delay, min_delay)
        # Mercator's rule of thumb is 3 back queues per fetching thread, but a
        # host rests about `factor` fetch times per fetch, so keeping every
        # download slot busy needs about (factor + 1) x CONCURRENT_REQUESTS hosts
        # with work; twice that absorbs uneven fetch times and hosts that run
        # out of known URLs for a while.
        derived_back = 2 * (math.ceil(min(factor, 1e6)) + 1) * concurrency
        back = _int(settings, "FRONTIER_BACK_QUEUES", derived_back, minimum=1)
        # Beyond the floor, hosts are activated only on demand (see Frontier.pop).
        back_max = _int(settings, "FRONTIER_BACK_QUEUES_MAX", back, minimum=1)
        if back_max < back:
            raise FrontierConfigError(
                f"FRONTIER_BACK_QUEUES_MAX ({back_max}) must be >= FRONTIER_BACK_QUEUES ({back})"
            )
        timeout = _float(settings, "DOWNLOAD_TIMEOUT", 180.0, minimum=0.0)
        lease = _float(settings, "FRONTIER_LEASE_TIMEOUT", timeout + 60.0, minimum=0.001)
        backoff_base = _float(settings, "FRONTIER_BACKOFF_BASE", minimum=0.0)
        backoff_max = _float(settings, "FRONTIER_BACKOFF_MAX", minimum=0.0)
        if backoff_max < backoff_base:
            raise FrontierConfigError(
                f"FRONTIER_BACKOFF_MAX ({backoff_max}) must be >= "
                f"FRONTIER_BACKOFF_BASE ({backoff_base})"
            )
        seed_raw = settings.get("FRONTIER_SEED")
        seed = None if seed_raw in (None, "") else _int(settings, "FRONTIER_SEED")
        state_dir = _directory(settings)
        ip_politeness = _bool(settings, "FRONTIER_IP_POLITENESS")
        backend = _backend(settings, state_dir)
        recrawl = _recrawl(settings)
        if backend == "redis" and recrawl.refetch_all:
            raise FrontierConfigError(
                "FRONTIER_RECRAWL_ALL is not supported on the Redis backend: its workers "
                "claim due pages by their due time alone. Leave it unset there; pages come "
                "due on their own schedule, and meta['frontier_force'] fetches a start page "
                "whatever its schedule")
        capacity = _int(settings, "FRONTIER_CAPACITY", minimum=0)
        if capacity and backend == "redis":
            raise FrontierConfigError(
                "FRONTIER_CAPACITY is not supported by FRONTIER_BACKEND='redis' (a host's "
                "connections are measured in one process): remove one of the two settings")
        if capacity and ip_politeness:
            raise FrontierConfigError(
                "FRONTIER_CAPACITY cannot be combined with FRONTIER_IP_POLITENESS (hosts on "
                "one IP address share one connection): remove one of the two settings")
        if backend == "redis" and ip_politeness:
            raise FrontierConfigError(
                "FRONTIER_IP_POLITENESS is not supported by FRONTIER_BACKEND='redis' (hosts on "
                "one IP address are not grouped across workers): remove one of the two settings"
            )
        policies = _host_policies(settings, DelayPolicy(factor, min_delay, max_delay), pacing,
                                  max(1, capacity))
        if backend == "redis":
            policies.connections_fixed = ("on Redis (each host's connections are fixed when "
                                          "it is queued)")
        elif ip_politeness:
            policies.connections_fixed = ("with FRONTIER_IP_POLITENESS (one connection per IP "
                                          "address)")
        return cls(
            front_queues=_int(settings, "FRONTIER_FRONT_QUEUES", minimum=1,
                              maximum=MAX_FRONT_QUEUES),
            priority_bias=_bias(settings),
            back_queues=back,
            back_queues_max=back_max,
            delay_factor=factor,
            min_delay=min_delay,
            max_delay=max_delay,
            lease_timeout=lease,
            seed=seed,
            concurrent_requests=concurrency,
            state_dir=state_dir,
            flush_interval=_float(settings, "FRONTIER_FLUSH_INTERVAL", minimum=0.0),
            write_through=_bool(settings, "FRONTIER_WRITE_THROUGH"),
            site_limits=SiteRuleLimits(
                max_crawl_delay=_float(settings, "FRONTIER_MAX_CRAWL_DELAY", minimum=0.0),
                max_retry_after=_float(settings, "FRONTIER_MAX_RETRY_AFTER", minimum=0.0),
                backoff_base=backoff_base,
                backoff_max=backoff_max,
                retire_after=_int(settings, "FRONTIER_RETIRE_AFTER", minimum=0),
                robots_cache=_robots_cache(settings),
            ),
            ip_politeness=ip_politeness,
            stall_discount=_bool(settings, "FRONTIER_STALL_DISCOUNT"),
            tcp_timing=_bool(settings, "FRONTIER_TCP_TIMING"),
            dns_timeout=_float(settings, "DNS_TIMEOUT", 60.0, minimum=0.001),
            backend=backend,
            recrawl=recrawl,
            priority_rules=_priority_rules(settings),
            seen_cache=(_int(settings, "FRONTIER_SEEN_CACHE_SIZE", minimum=1,
                             maximum=MAX_CACHE_SIZE), _cache_policy(settings)),
            redis=_redis(settings),
            observe=_observe(settings),
            budgets=BudgetConfig(_int(settings, "FRONTIER_HOST_BUDGET", minimum=0),
                                 _host_budgets(settings), _traps(settings)),
            sitemaps=SitemapConfig(
                _sitemaps(settings),
                _float(settings, "FRONTIER_SITEMAP_TIMEOUT", minimum=0.001)),
            host_policies=policies,
            capacity=capacity,
            signing_keys=signing_keys(settings),
        )


def _switch(settings: BaseSettings, name: str) -> bool | None:
    """A True/False setting that may be absent (None)."""
    return None if settings.get(name) is None else _bool(settings, name, default=False)


def refuse_scrapy_redis_switches(settings: BaseSettings) -> None:
    """scrapy-redis's SCHEDULER_PERSIST = False and SCHEDULER_FLUSH_ON_START = True delete
    the crawl's queue and seen set when a worker closes, or starts. A shared frontier keeps
    them (another worker may still be crawling, a recrawl needs its history): the crawl is
    refused, naming the frontier's way, rather than the switch silently ignored. Their other
    values are what the frontier does anyway."""
    if _switch(settings, "SCHEDULER_PERSIST") is False:
        raise FrontierConfigError(
            "SCHEDULER_PERSIST = False is scrapy-redis's switch to delete the crawl's queue and "
            "seen set when a worker closes. scrapy-frontier keeps them: other workers may "
            "still be crawling, and a recrawl needs the page history. Remove the setting; to "
            "start a crawl afresh, stop its workers and run `scrapy frontier reset --spider "
            "NAME`.")
    if _switch(settings, "SCHEDULER_FLUSH_ON_START"):
        raise FrontierConfigError(
            "SCHEDULER_FLUSH_ON_START = True is scrapy-redis's switch to delete the crawl's "
            "queue and seen set when a worker starts: a worker started late would delete the "
            "others' progress. Remove the setting, and run `scrapy frontier reset --spider "
            "NAME` before the crawl instead.")


def _backend(settings: BaseSettings, state_dir: str | None) -> str:
    raw = _raw(settings, "FRONTIER_BACKEND", None)
    if raw is None:
        return "sqlite" if state_dir else "memory"
    if not isinstance(raw, str):
        raise FrontierConfigError(
            f"FRONTIER_BACKEND must be 'memory', 'sqlite', 'redis' or a backend's import path, "
            f"got {raw!r}"
        )
    name = raw.strip()
    if name.lower() in BACKENDS:
        name = name.lower()
        if name == "sqlite" and not state_dir:
            raise FrontierConfigError(
                "FRONTIER_BACKEND='sqlite' needs a directory for its files: set JOBDIR or "
                "FRONTIER_PATH"
            )
        return name
    if "." not in name:
        raise FrontierConfigError(
            f"FRONTIER_BACKEND must be 'memory', 'sqlite', 'redis' or a backend's import path, "
            f"got {raw!r}"
        )
    return name


def _directory(settings: BaseSettings) -> str | None:
    """FRONTIER_PATH if set, else JOBDIR if set, else None (everything in memory)."""
    for name in ("FRONTIER_PATH", "JOBDIR"):
        raw = settings.get(name)
        if raw is None or raw == "":
            continue
        if not isinstance(raw, str | os.PathLike):
            raise FrontierConfigError(f"{name} must be a directory path, got {raw!r}")
        return os.fspath(raw)
    return None


def _bias(settings: BaseSettings) -> float:
    bias = _float(settings, "FRONTIER_PRIORITY_BIAS", minimum=1.0)
    levels = _int(settings, "FRONTIER_FRONT_QUEUES", minimum=1, maximum=MAX_FRONT_QUEUES)
    # Level weights are bias ** (level - 1): they must stay finite floats.
    if (levels - 1) * math.log(bias) > 700:
        raise FrontierConfigError(
            f"FRONTIER_PRIORITY_BIAS={bias} is too large for {levels} front queues (the "
            "highest level's weight, bias ** (levels - 1), overflows); values from 1 to 10 "
            "cover every sensible bias"
        )
    return bias


def _redis(settings: BaseSettings) -> RedisConfig:
    keys = {}
    for name, attr in (("FRONTIER_REDIS_KEY", "key"), ("FRONTIER_REDIS_SEEN_KEY", "seen_key"),
                       ("FRONTIER_REDIS_HISTORY_KEY", "history_key")):
        value = _raw(settings, name, DEFAULTS[name])
        if not isinstance(value, str):
            raise FrontierConfigError(f"{name} must be a string key prefix, got {value!r}")
        try:
            expanded = value % {"spider": "spider"}
        except (KeyError, ValueError, TypeError) as exc:
            raise FrontierConfigError(
                f"{name}={value!r} is not a valid key prefix: only %(spider)s may be "
                f"substituted ({exc})"
            ) from None
        if not expanded:
            raise FrontierConfigError(f"{name} must not be empty")
        keys[attr] = value
    cluster = _bool(settings, "FRONTIER_REDIS_CLUSTER")
    partitions = _int(settings, "FRONTIER_REDIS_PARTITIONS", minimum=1, maximum=1024)
    if cluster or partitions > 1:
        for name, attr in (("FRONTIER_REDIS_KEY", "key"),
                           ("FRONTIER_REDIS_HISTORY_KEY", "history_key")):
            if "{" in keys[attr] or "}" in keys[attr]:
                raise FrontierConfigError(
                    f"{name}={keys[attr]!r} holds a hash tag ({{...}}): partitioned or on a "
                    "Redis Cluster, each partition tags its own keys. Take the braces out.")
        if keys["seen_key"] != DEFAULTS["FRONTIER_REDIS_SEEN_KEY"]:
            raise FrontierConfigError(
                "FRONTIER_REDIS_SEEN_KEY is set, but partitioned or on a Redis Cluster each "
                "partition keeps its seen set under its own frontier keys (it is tested in the "
                "same script as the push): leave FRONTIER_REDIS_SEEN_KEY unset, and choose the "
                "keys with FRONTIER_REDIS_KEY.")
    return RedisConfig(
        **keys,
        cluster=cluster,
        partitions=partitions,
        seen_expected=_int(settings, "FRONTIER_REDIS_SEEN_EXPECTED", minimum=1),
        prefetch=_int(settings, "FRONTIER_REDIS_PREFETCH", minimum=1, maximum=10_000),
        idle_grace=_float(settings, "FRONTIER_REDIS_IDLE_GRACE", minimum=0.0),
        liveness=_liveness(settings),
    )


def _liveness(settings: BaseSettings) -> float:
    seconds = _float(settings, "FRONTIER_REDIS_LIVENESS", minimum=0.0)
    if 0 < seconds < 0.2:
        raise FrontierConfigError(
            f"FRONTIER_REDIS_LIVENESS={seconds} is too short to renew leases in time (its "
            "heartbeat beats every quarter of it): use at least 0.2 s, or 0 to rely on "
            "FRONTIER_LEASE_TIMEOUT alone")
    return seconds


def _observe(settings: BaseSettings) -> ObserveConfig:
    port = _int(settings, "FRONTIER_METRICS_PORT", 0, minimum=0, maximum=65535)
    host = _raw(settings, "FRONTIER_METRICS_HOST", DEFAULTS["FRONTIER_METRICS_HOST"])
    if not isinstance(host, str) or not host.strip():
        raise FrontierConfigError(
            f"FRONTIER_METRICS_HOST must be an address to listen on, such as '127.0.0.1', "
            f"got {host!r}"
        )
    return ObserveConfig(
        progress_interval=_float(settings, "FRONTIER_PROGRESS_INTERVAL", minimum=0.0),
        metrics_port=port or None,
        metrics_host=host.strip(),
    )


def _cache_policy(settings: BaseSettings) -> str:
    raw = _raw(settings, "FRONTIER_SEEN_CACHE_POLICY", "clock")
    name = raw.strip().lower() if isinstance(raw, str) else raw
    if name in POLICIES:
        return str(name)
    if name in ("static", "min", "infinite"):
        raise FrontierConfigError(
            f"FRONTIER_SEEN_CACHE_POLICY={raw!r} is a simulation-only policy (it needs the "
            "future, or the whole set in RAM); use 'clock' (default), 'lru' or 'random'"
        )
    raise FrontierConfigError(
        f"FRONTIER_SEEN_CACHE_POLICY must be one of {', '.join(POLICIES)}, got {raw!r}"
    )


def _choice(settings: BaseSettings, name: str, choices: tuple[str, ...]) -> str:
    raw = _raw(settings, name, DEFAULTS[name])
    value = raw.strip().lower() if isinstance(raw, str) else raw
    if value not in choices:
        raise FrontierConfigError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return str(value)


def _recrawl(settings: BaseSettings) -> RecrawlSettings:
    low = _float(settings, "FRONTIER_RECRAWL_MIN", minimum=0.001)
    high = _float(settings, "FRONTIER_RECRAWL_MAX", minimum=0.001)
    if high < low:
        raise FrontierConfigError(
            f"FRONTIER_RECRAWL_MAX ({high}) must be >= FRONTIER_RECRAWL_MIN ({low})"
        )
    initial = _float(settings, "FRONTIER_RECRAWL_INITIAL", min(max(DAY, low), high),
                     minimum=0.001)
    predictor = _choice(settings, "FRONTIER_RECRAWL_PREDICTOR", PREDICTORS)
    budget = _float(settings, "FRONTIER_RECRAWL_BUDGET", minimum=0.0)
    if predictor == "estimator_optimal" and not budget:
        raise FrontierConfigError(
            "FRONTIER_RECRAWL_PREDICTOR='estimator_optimal' needs FRONTIER_RECRAWL_BUDGET: how "
            "many recrawl fetches per day to spread over the pages (e.g. 100000)"
        )
    quality = _raw(settings, "FRONTIER_QUALITY", DEFAULTS["FRONTIER_QUALITY"])
    if isinstance(quality, str) and quality not in ("depth", "inlinks"):
        from scrapy.utils.misc import load_object

        try:
            quality = load_object(quality)
        except (ImportError, ValueError, AttributeError, NameError) as exc:
            raise FrontierConfigError(
                f"FRONTIER_QUALITY must be 'depth', 'inlinks', or a callable (or its import "
                f"path); {quality!r} cannot be imported ({exc})"
            ) from None
    if not isinstance(quality, str) and not callable(quality):
        raise FrontierConfigError(
            f"FRONTIER_QUALITY must be 'depth', 'inlinks', or a callable (or its import path) "
            f"taking a page record and returning a quality in [0, 1], got {quality!r}"
        )
    return RecrawlSettings(
        mode=_choice(settings, "FRONTIER_RECRAWL", MODES),
        refresh=RefreshConfig(
            min_interval=low, max_interval=high, initial_interval=initial,
            base_interval=initial,
        ),
        predictor=predictor,
        budget=budget,
        simhash_threshold=_int(settings, "FRONTIER_CHANGE_THRESHOLD", minimum=0, maximum=64),
        exact=_bool(settings, "FRONTIER_CHANGE_EXACT"),
        pass_304=_bool(settings, "FRONTIER_RECRAWL_PASS_304"),
        refetch_all=_bool(settings, "FRONTIER_RECRAWL_ALL"),
        max_pages=_int(settings, "FRONTIER_HISTORY_MAX_PAGES", minimum=0),
        retire_after=_int(settings, "FRONTIER_HISTORY_RETIRE_AFTER", minimum=0),
        quality=quality if isinstance(quality, str) else "callable",
        quality_callable=None if isinstance(quality, str) else quality,
    )


def _priority_rules(settings: BaseSettings) -> dict[str, int]:
    raw = _raw(settings, "FRONTIER_PRIORITY_RULES", {})
    try:
        rules = settings.getdict("FRONTIER_PRIORITY_RULES") if raw else {}
        out = {str(host): int(boost) for host, boost in rules.items()}
    except (TypeError, ValueError, AttributeError, OverflowError):
        raise FrontierConfigError(
            "FRONTIER_PRIORITY_RULES must map host suffixes to integer priority boosts, "
            f'e.g. {{"example.com": 2}}, got {raw!r}'
        ) from None
    # A fraction would be cut off silently by int(): priorities are whole numbers.
    if any(isinstance(b, bool) or (isinstance(b, float) and not b.is_integer())
           for b in rules.values()):
        raise FrontierConfigError(
            "FRONTIER_PRIORITY_RULES boosts must be whole numbers (Scrapy priorities are "
            f"integers), got {raw!r}")
    return out


def signing_keys(settings: BaseSettings) -> tuple[str, ...]:
    """FRONTIER_SIGNING_KEYS: a list of keys, or one string of comma-separated keys; unset,
    the environment variable FRONTIER_SIGNING_KEYS (keys are secrets: they belong in the
    environment or a secrets store, not in a project's settings.py)."""
    raw = _raw(settings, "FRONTIER_SIGNING_KEYS", None)
    if raw is None:
        raw = os.environ.get("FRONTIER_SIGNING_KEYS") or None
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = raw.split(",")
    if not isinstance(raw, list | tuple) or not all(isinstance(k, str) for k in raw):
        raise FrontierConfigError(
            "FRONTIER_SIGNING_KEYS must be a list of strings, or one string of "
            f"comma-separated keys; got a {type(raw).__name__}")
    keys = tuple(k.strip() for k in raw)
    for i, key in enumerate(keys):
        if len(key) < MIN_KEY_LENGTH:
            raise FrontierConfigError(
                f"FRONTIER_SIGNING_KEYS: key {i + 1} of {len(keys)} has {len(key)} characters; "
                f"a key needs at least {MIN_KEY_LENGTH} (for example: python -c \"import "
                "secrets; print(secrets.token_urlsafe(32))\")")
    return keys


def _sitemaps(settings: BaseSettings) -> tuple[str, ...]:
    raw = _raw(settings, "FRONTIER_SITEMAPS", None)
    if raw in (None, "", False, "off"):
        return ()
    values: Any
    if isinstance(raw, str) and raw.lstrip().startswith("["):
        try:
            values = json.loads(raw)  # -s FRONTIER_SITEMAPS='["robots", ...]'
        except ValueError:
            values = None
    elif isinstance(raw, str):
        values = [v.strip() for v in raw.split(",") if v.strip()]
    else:
        values = raw
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise FrontierConfigError(
            "FRONTIER_SITEMAPS must be 'robots' (read the Sitemap: lines of robots.txt), a "
            f"list of sitemap or feed URLs (\"robots\" may be one of them), or None; got {raw!r}")
    for value in values:
        if value != "robots" and not value.startswith(("http://", "https://")):
            raise FrontierConfigError(
                f"FRONTIER_SITEMAPS: {value!r} is neither 'robots' nor an http(s) URL")
    return tuple(values)


def _traps(settings: BaseSettings) -> TrapConfig:
    return TrapConfig(
        enabled=_bool(settings, "FRONTIER_TRAPS"),
        window=_int(settings, "FRONTIER_TRAPS_WINDOW", minimum=1),
        min_yield=_float(settings, "FRONTIER_TRAPS_MIN_YIELD", minimum=0.0),
        allowance=_int(settings, "FRONTIER_TRAPS_ALLOWANCE", minimum=1),
    )


def _host_budgets(settings: BaseSettings) -> dict[str, int]:
    raw = _raw(settings, "FRONTIER_HOST_BUDGETS", {})
    try:
        budgets = settings.getdict("FRONTIER_HOST_BUDGETS") if raw else {}
        if any(isinstance(n, bool) or (isinstance(n, float) and not n.is_integer())
               for n in budgets.values()):
            raise ValueError
        out = {str(host).lower(): int(n) for host, n in budgets.items()}
    except (TypeError, ValueError, AttributeError, OverflowError):
        raise FrontierConfigError(
            "FRONTIER_HOST_BUDGETS must map hosts to whole numbers of pages (0: unlimited), "
            f'e.g. {{"calendar.example.com": 500}}, got {raw!r}'
        ) from None
    if any(n < 0 for n in out.values()):
        raise FrontierConfigError(f"FRONTIER_HOST_BUDGETS budgets must be >= 0: {raw!r}")
    return out


@dataclass(frozen=True)
class ScrapyPacing:
    """What a project's own Scrapy settings ask of each host's pace, as the frontier's
    settings: ``DOWNLOAD_DELAY`` a minimum rest for every host, ``DOWNLOAD_SLOTS`` an exact
    per-host policy entry each (its ``delay`` a minimum rest, its ``concurrency`` the host's
    connections). ``lines``: one sentence per translation, for the log."""

    min_delay: float = 0.0
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.min_delay or self.entries)


def scrapy_pacing(settings: BaseSettings) -> ScrapyPacing:
    """The translation of ``DOWNLOAD_DELAY`` (set by the project or a spider) and
    ``DOWNLOAD_SLOTS`` into the frontier's terms (see :class:`ScrapyPacing`)."""
    lines = []
    min_delay = 0.0
    if (settings.getpriority("DOWNLOAD_DELAY") or 0) > 0:
        delay = _float(settings, "DOWNLOAD_DELAY", 0.0, minimum=0.0)
        if delay > 0:
            min_delay = delay
            lines.append(f"DOWNLOAD_DELAY={delay:g} is every host's minimum rest "
                         "(FRONTIER_MIN_DELAY at least that)")
    entries: dict[str, dict[str, Any]] = {}
    try:
        slots = settings.getdict("DOWNLOAD_SLOTS")
    except (TypeError, ValueError):
        raise FrontierConfigError(
            f"DOWNLOAD_SLOTS must be a dict of slot -> {{concurrency, delay}}, got "
            f"{settings.get('DOWNLOAD_SLOTS')!r}") from None
    for slot, values in sorted(slots.items()):
        if not isinstance(values, dict):
            raise FrontierConfigError(f"DOWNLOAD_SLOTS[{slot!r}] must be a dict such as "
                                      f'{{"concurrency": 2, "delay": 1}}, got {values!r}')
        entry: dict[str, Any] = {}
        said = []
        if values.get("delay"):
            entry["min_delay"] = values["delay"]
            # A delay longer than the longest rest raises that host's longest.
            longest = _float(settings, "FRONTIER_MAX_DELAY", minimum=0.0)
            if isinstance(values["delay"], int | float) and values["delay"] > longest:
                entry["max_delay"] = values["delay"]
            said.append(f"a minimum rest of {values['delay']} s")
        if "concurrency" in values:
            entry["concurrency"] = values["concurrency"]
            said.append(f"{values['concurrency']} connection(s)")
        if entry:
            entries[f"={slot}"] = entry
            lines.append(f"DOWNLOAD_SLOTS[{slot!r}] gives host {slot!r} {' and '.join(said)}")
    return ScrapyPacing(min_delay, entries, tuple(lines))


def _host_policies(settings: BaseSettings, delay: DelayPolicy,
                   pacing: ScrapyPacing, connections: int = 1) -> HostPolicies:
    raw = _raw(settings, "FRONTIER_HOST_POLICY", {})
    default = HostPolicy(delay, connections)
    try:
        table = settings.getdict("FRONTIER_HOST_POLICY") if raw else {}
    except (TypeError, ValueError):
        raise FrontierConfigError(
            "FRONTIER_HOST_POLICY must be a dict of host suffix -> {delay_factor, min_delay, "
            f'max_delay, concurrency, budget}}, e.g. {{"example.com": {{"concurrency": 2}}}}, '
            f"got {raw!r}") from None
    try:
        entries = parse_entries(pacing.entries, default, "DOWNLOAD_SLOTS")
        entries.update(parse_entries(table, default))  # the frontier's own entries win
    except ValueError as exc:
        raise FrontierConfigError(str(exc)) from None
    cap_of = downloader_caps(settings)
    warnings = _capped_connections(cap_of, entries)
    per_domain = max(1, settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8))
    if default.connections > per_domain:
        warnings.append(f"FRONTIER_CAPACITY={default.connections} gives a host up to "
                        f"{default.connections} connections; CONCURRENT_REQUESTS_PER_DOMAIN "
                        f"lets Scrapy's downloader open {per_domain}, so hosts get at most "
                        f"{per_domain} (raise CONCURRENT_REQUESTS_PER_DOMAIN to give them more)")
        default = replace(default, connections=per_domain)
    policies = HostPolicies(default, entries, warnings)
    policies.cap_of = cap_of
    return policies


def downloader_caps(settings: BaseSettings) -> Callable[[str], tuple[int, str]]:
    """An entry's key -> the connections Scrapy's downloader lets its host have at once,
    and the setting that says so: the host's DOWNLOAD_SLOTS concurrency (an exact key),
    else CONCURRENT_REQUESTS_PER_DOMAIN. A lease beyond that would wait in the downloader,
    and its wait would count as fetch time."""
    per_domain = max(1, settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8))
    try:
        slots = settings.getdict("DOWNLOAD_SLOTS")
    except (TypeError, ValueError):
        slots = {}

    def cap_of(key: str) -> tuple[int, str]:
        slot = slots.get(key[1:]) if key.startswith("=") else None
        if isinstance(slot, dict) and "concurrency" in slot:
            try:
                return max(1, int(slot["concurrency"])), f"DOWNLOAD_SLOTS[{key[1:]!r}]"
            except (TypeError, ValueError):
                pass  # parse_entries refuses a bad one
        return per_domain, "CONCURRENT_REQUESTS_PER_DOMAIN"

    return cap_of


def _capped_connections(cap_of: Callable[[str], tuple[int, str]],
                        entries: dict[str, HostPolicy]) -> list[str]:
    """Caps each entry's connections at what Scrapy's downloader opens (``cap_of``).
    Returns one warning per entry capped."""
    warnings = []
    for key, policy in entries.items():
        capped, warning = cap_connections(key, policy, cap_of, "FRONTIER_HOST_POLICY")
        if warning is not None:
            entries[key] = capped
            warnings.append(warning)
    return warnings


def _raw(settings: BaseSettings, name: str, default: Any) -> Any:
    value = settings.get(name)
    return default if value is None or value == "" else value


def _bool(settings: BaseSettings, name: str, default: bool | None = None) -> bool:
    fallback = DEFAULTS[name] if default is None else default
    try:
        return settings.getbool(name, fallback)
    except ValueError:
        raise FrontierConfigError(
            f"{name} must be True or False, got {settings.get(name)!r}"
        ) from None


def _int(
    settings: BaseSettings,
    name: str,
    default: int | None = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    raw = _raw(settings, name, DEFAULTS.get(name) if default is None else default)
    try:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError
        value = int(raw)
    except (TypeError, ValueError, OverflowError):
        raise FrontierConfigError(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise FrontierConfigError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise FrontierConfigError(f"{name} must be <= {maximum}, got {value}")
    return value


def _robots_cache(settings: BaseSettings) -> float:
    seconds = _float(settings, "FRONTIER_ROBOTS_CACHE", minimum=0.0)
    if seconds > MAX_ROBOTS_CACHE:
        raise FrontierConfigError(
            f"FRONTIER_ROBOTS_CACHE must be at most {MAX_ROBOTS_CACHE:g} seconds (24 hours: "
            f"RFC 9309 asks crawlers not to use a robots.txt longer), got {seconds}")
    return seconds


def _float(
    settings: BaseSettings, name: str, default: float | None = None, *,
    minimum: float | None = None,
) -> float:
    raw = _raw(settings, name, DEFAULTS.get(name) if default is None else default)
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise FrontierConfigError(f"{name} must be a number, got {raw!r}") from None
    if math.isnan(value) or math.isinf(value):
        raise FrontierConfigError(f"{name} must be finite, got {raw!r}")
    if minimum is not None and value < minimum:
        raise FrontierConfigError(f"{name} must be >= {minimum}, got {value}")
    return value
