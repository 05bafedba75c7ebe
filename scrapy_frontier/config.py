"""All ``FRONTIER_*`` settings, read and validated in one place."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scrapy.settings import BaseSettings

from scrapy_frontier.core.politeness import DelayPolicy
from scrapy_frontier.core.refresh import DAY, RefreshConfig
from scrapy_frontier.recrawl import MODES, PREDICTORS, RecrawlSettings


class FrontierConfigError(ValueError):
    """A ``FRONTIER_*`` setting has a value the frontier cannot use."""


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
    ip_politeness: bool = False
    """Hosts that resolve to one IP address also share one fetch at a time and one rest."""
    dns_timeout: float = 60.0
    """Scrapy's DNS_TIMEOUT, for the lookups per-IP politeness makes."""
    backend: str = "embedded"
    """FRONTIER_BACKEND: "embedded" (memory, SQLite with JOBDIR) or "redis" (shared)."""
    recrawl: RecrawlSettings = field(default_factory=RecrawlSettings)
    priority_rules: dict[str, int] = field(default_factory=dict)
    """FRONTIER_PRIORITY_RULES: host suffix -> priority boost."""

    @property
    def policy(self) -> DelayPolicy:
        return DelayPolicy(self.delay_factor, self.min_delay, self.max_delay)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierConfig:
        concurrency = _int(settings, "CONCURRENT_REQUESTS", 16, minimum=1)
        factor = _float(settings, "FRONTIER_DELAY_FACTOR", 10.0, minimum=0.0)
        min_delay = _float(settings, "FRONTIER_MIN_DELAY", 1.0, minimum=0.0)
        max_delay = _float(settings, "FRONTIER_MAX_DELAY", 60.0, minimum=0.0)
        if max_delay < min_delay:
            raise FrontierConfigError(
                f"FRONTIER_MAX_DELAY ({max_delay}) must be >= FRONTIER_MIN_DELAY ({min_delay})"
            )
        # Mercator's rule of thumb is 3 back queues per fetching thread, but a
        # host rests about `factor` fetch times per fetch, so keeping every
        # download slot busy needs about (factor + 1) x CONCURRENT_REQUESTS hosts
        # with work; twice that absorbs uneven fetch times and hosts that run
        # out of known URLs for a while.
        back = _int(
            settings, "FRONTIER_BACK_QUEUES", 2 * (math.ceil(factor) + 1) * concurrency, minimum=1
        )
        # Beyond the floor, hosts are activated only on demand (see Frontier.pop).
        back_max = _int(settings, "FRONTIER_BACK_QUEUES_MAX", back, minimum=1)
        if back_max < back:
            raise FrontierConfigError(
                f"FRONTIER_BACK_QUEUES_MAX ({back_max}) must be >= FRONTIER_BACK_QUEUES ({back})"
            )
        timeout = _float(settings, "DOWNLOAD_TIMEOUT", 180.0, minimum=0.0)
        lease = _float(settings, "FRONTIER_LEASE_TIMEOUT", timeout + 60.0, minimum=0.001)
        backoff_base = _float(settings, "FRONTIER_BACKOFF_BASE", 5.0, minimum=0.0)
        backoff_max = _float(settings, "FRONTIER_BACKOFF_MAX", 600.0, minimum=0.0)
        if backoff_max < backoff_base:
            raise FrontierConfigError(
                f"FRONTIER_BACKOFF_MAX ({backoff_max}) must be >= "
                f"FRONTIER_BACKOFF_BASE ({backoff_base})"
            )
        seed_raw = settings.get("FRONTIER_SEED")
        seed = None if seed_raw in (None, "") else _int(settings, "FRONTIER_SEED", 0)
        return cls(
            front_queues=_int(settings, "FRONTIER_FRONT_QUEUES", 8, minimum=1),
            priority_bias=_float(settings, "FRONTIER_PRIORITY_BIAS", 2.0, minimum=1.0),
            back_queues=back,
            back_queues_max=back_max,
            delay_factor=factor,
            min_delay=min_delay,
            max_delay=max_delay,
            lease_timeout=lease,
            seed=seed,
            concurrent_requests=concurrency,
            state_dir=_raw(settings, "FRONTIER_PATH", None) or _raw(settings, "JOBDIR", None),
            flush_interval=_float(settings, "FRONTIER_FLUSH_INTERVAL", 1.0, minimum=0.0),
            write_through=_bool(settings, "FRONTIER_WRITE_THROUGH", True),
            max_crawl_delay=_float(settings, "FRONTIER_MAX_CRAWL_DELAY", 300.0, minimum=0.0),
            max_retry_after=_float(settings, "FRONTIER_MAX_RETRY_AFTER", 3600.0, minimum=0.0),
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            retire_after=_int(settings, "FRONTIER_RETIRE_AFTER", 10, minimum=0),
            ip_politeness=_bool(settings, "FRONTIER_IP_POLITENESS", False),
            dns_timeout=_float(settings, "DNS_TIMEOUT", 60.0, minimum=0.001),
            backend=_choice(settings, "FRONTIER_BACKEND", "embedded", ("embedded", "redis")),
            recrawl=_recrawl(settings),
            priority_rules=_priority_rules(settings),
        )


def _choice(settings: BaseSettings, name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = _raw(settings, name, default)
    value = raw.strip().lower() if isinstance(raw, str) else raw
    if value not in choices:
        raise FrontierConfigError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return str(value)


def _recrawl(settings: BaseSettings) -> RecrawlSettings:
    low = _float(settings, "FRONTIER_RECRAWL_MIN", 3600.0, minimum=0.001)
    high = _float(settings, "FRONTIER_RECRAWL_MAX", 180 * DAY, minimum=0.001)
    if high < low:
        raise FrontierConfigError(
            f"FRONTIER_RECRAWL_MAX ({high}) must be >= FRONTIER_RECRAWL_MIN ({low})"
        )
    initial = _float(settings, "FRONTIER_RECRAWL_INITIAL", min(max(DAY, low), high),
                     minimum=0.001)
    predictor = _choice(settings, "FRONTIER_RECRAWL_PREDICTOR", "timely_return", PREDICTORS)
    budget = _float(settings, "FRONTIER_RECRAWL_BUDGET", 0.0, minimum=0.0)
    if predictor == "estimator_optimal" and not budget:
        raise FrontierConfigError(
            "FRONTIER_RECRAWL_PREDICTOR='estimator_optimal' needs FRONTIER_RECRAWL_BUDGET: how "
            "many recrawl fetches per day to spread over the pages (e.g. 100000)"
        )
    quality = _raw(settings, "FRONTIER_QUALITY", "depth")
    if not isinstance(quality, str) and not callable(quality):
        raise FrontierConfigError(
            f"FRONTIER_QUALITY must be 'depth', 'inlinks', or a callable (or its import path) "
            f"taking a page record and returning a quality in [0, 1], got {quality!r}"
        )
    return RecrawlSettings(
        mode=_choice(settings, "FRONTIER_RECRAWL", "due", MODES),
        refresh=RefreshConfig(
            min_interval=low, max_interval=high, initial_interval=initial,
            base_interval=initial,
        ),
        predictor=predictor,
        budget=budget,
        simhash_threshold=_int(settings, "FRONTIER_CHANGE_THRESHOLD", 3, minimum=0),
        exact=_bool(settings, "FRONTIER_CHANGE_EXACT", False),
        pass_304=_bool(settings, "FRONTIER_RECRAWL_PASS_304", False),
        max_pages=_int(settings, "FRONTIER_HISTORY_MAX_PAGES", 0, minimum=0),
        retire_after=_int(settings, "FRONTIER_HISTORY_RETIRE_AFTER", 5, minimum=0),
        quality=quality if isinstance(quality, str) else "callable",
        quality_callable=None if isinstance(quality, str) else quality,
    )


def _priority_rules(settings: BaseSettings) -> dict[str, int]:
    raw = _raw(settings, "FRONTIER_PRIORITY_RULES", {})
    try:
        rules = settings.getdict("FRONTIER_PRIORITY_RULES") if raw else {}
        out = {str(host): int(boost) for host, boost in rules.items()}
    except (TypeError, ValueError, AttributeError):
        raise FrontierConfigError(
            "FRONTIER_PRIORITY_RULES must map host suffixes to integer priority boosts, "
            f'e.g. {{"example.com": 2}}, got {raw!r}'
        ) from None
    if any(isinstance(b, bool) for b in rules.values()):
        raise FrontierConfigError(f"FRONTIER_PRIORITY_RULES boosts must be integers: {raw!r}")
    return out


def _raw(settings: BaseSettings, name: str, default: Any) -> Any:
    value = settings.get(name)
    return default if value is None or value == "" else value


def _bool(settings: BaseSettings, name: str, default: bool) -> bool:
    try:
        return settings.getbool(name, default)
    except ValueError:
        raise FrontierConfigError(
            f"{name} must be True or False, got {settings.get(name)!r}"
        ) from None


def _int(settings: BaseSettings, name: str, default: int, *, minimum: int | None = None) -> int:
    raw = _raw(settings, name, default)
    try:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError
        value = int(raw)
    except (TypeError, ValueError):
        raise FrontierConfigError(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise FrontierConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def _float(
    settings: BaseSettings, name: str, default: float, *, minimum: float | None = None
) -> float:
    raw = _raw(settings, name, default)
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = float(raw)
    except (TypeError, ValueError):
        raise FrontierConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if math.isnan(value) or math.isinf(value):
        raise FrontierConfigError(f"{name} must be finite, got {raw!r}")
    if minimum is not None and value < minimum:
        raise FrontierConfigError(f"{name} must be >= {minimum}, got {value}")
    return value
