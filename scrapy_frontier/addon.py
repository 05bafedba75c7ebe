"""``ADDONS = {"scrapy_frontier.Addon": 0}``: everything the frontier needs, in one line."""

from __future__ import annotations

import logging
import os

from scrapy.settings import BaseSettings, Settings
from scrapy.utils.misc import load_object

from scrapy_frontier.settings import dotted_name

logger = logging.getLogger("scrapy_frontier.addon")

SCHEDULER_PATH = "scrapy_frontier.scheduler.FrontierScheduler"
MIDDLEWARE_PATH = "scrapy_frontier.downloadermiddlewares.FetchTimingMiddleware"
MIDDLEWARE_ORDER = 950
HOLD_MIDDLEWARE_PATH = "scrapy_frontier.downloadermiddlewares.RobotsHoldMiddleware"
ROBOTS_CACHE_MIDDLEWARE_PATH = "scrapy_frontier.downloadermiddlewares.RobotsCacheMiddleware"
ROBOTS_MIDDLEWARE_PATH = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"

#: Settings the add-on sets at "addon" priority: a project's own values win.
ADDON_SETTINGS = {
    "SCHEDULER": SCHEDULER_PATH,
    # 64-bit fingerprints, a CLOCK cache, and with JOBDIR a seen-set written in
    # step with the frontier's state, so a crash neither loses nor repeats URLs.
    "DUPEFILTER_CLASS": "scrapy_frontier.dupefilter.FrontierDupeFilter",
    "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
    "DOWNLOAD_DELAY": 0,
    "AUTOTHROTTLE_ENABLED": False,
}


class Addon:
    """Installs the frontier scheduler and its fetch-timing middleware."""

    def update_settings(self, settings: Settings) -> None:
        check_startup(settings)
        _warn_about_overrides(settings)
        _take_over_scrapy_pacing(settings)
        for name, value in ADDON_SETTINGS.items():
            settings.set(name, value, "addon")
        open_connections(settings)
        _add_component(settings, "DOWNLOADER_MIDDLEWARES", MIDDLEWARE_PATH, MIDDLEWARE_ORDER)
        robots = _robots_step(settings)
        if robots is not None:  # just after it, before the middlewares that come next
            hold, cache = robots
            _add_component(settings, "DOWNLOADER_MIDDLEWARES", HOLD_MIDDLEWARE_PATH, hold)
            # Before RetryMiddleware and RedirectMiddleware: it keeps the final answer.
            _add_component(settings, "DOWNLOADER_MIDDLEWARES", ROBOTS_CACHE_MIDDLEWARE_PATH,
                           cache)
        # Below HttpErrorMiddleware (50): the page history sees 304s and error statuses.
        _add_component(settings, "SPIDER_MIDDLEWARES", RECRAWL_MIDDLEWARE_PATH, 40)


RECRAWL_MIDDLEWARE_PATH = "scrapy_frontier.spidermiddlewares.RecrawlMiddleware"


def check_startup(settings: Settings) -> None:
    """Stop a crawl that cannot start before Scrapy builds its engine: invalid settings, a
    backend whose extra is missing, a Redis that does not answer.

    Scrapy applies add-ons before it makes the engine, so the crawl ends here, under
    ``scrapy crawl`` with one ERROR line and exit code 1 (:mod:`scrapy_frontier.scheduler.startup`).
    """
    from scrapy_frontier.backends.ports import load_backend
    from scrapy_frontier.errors import FrontierConfigError, FrontierError
    from scrapy_frontier.scheduler import startup
    from scrapy_frontier.settings import FrontierConfig

    try:
        config = FrontierConfig.from_settings(settings)
        if settings.get("JOBDIR"):
            check_state_dir(str(settings.get("JOBDIR")), "JOBDIR")
        if config.state_dir and config.state_dir != settings.get("JOBDIR"):
            check_state_dir(config.state_dir, "FRONTIER_PATH")
        load_backend(config.backend_path)  # imports the backend: a missing extra is named
        if config.backend == "redis":
            from scrapy_frontier.backends.redis.connection import (
                redis_from_settings,
                wait_for_redis,
            )

            client = redis_from_settings(settings)
            try:
                wait_for_redis(client, timeout=STARTUP_PING_TIMEOUT)
            finally:
                client.close()
    except FrontierError as exc:
        error = FrontierConfigError(str(exc))
        startup.report(logger, error)
        raise error from None


def check_state_dir(path: str, setting: str) -> None:
    """Refuse a state directory that cannot be written, before Scrapy's own components try
    (SpiderState and the dupe filter create it with a bare OSError). Nothing is created."""
    from scrapy_frontier.errors import FrontierConfigError

    target = os.path.abspath(path)
    existing = target
    for _ in range(256):  # bounded: up to the file system's root
        if os.path.lexists(existing):
            break
        existing = os.path.dirname(existing)
    problem = None
    if not os.path.isdir(existing):
        problem = f"{existing} is not a directory"
    elif not os.access(existing, os.W_OK | os.X_OK):
        try:
            readonly = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
        except OSError:
            readonly = False
        problem = (f"{existing} is on a read-only file system" if readonly
                   else f"this user may not write in {existing}")
    if problem is not None:
        raise FrontierConfigError(
            f"{setting} = {path!r} cannot be used: {problem}, so the crawl's state cannot be "
            f"kept there. Point {setting} at a writable directory (or make this one "
            "writable), then run the crawl again. Nothing was created or changed.")


#: How long the add-on waits for Redis to answer before the crawl starts (a server that
#: is starting up answers within it).
STARTUP_PING_TIMEOUT = 3.0


def _add_component(settings: Settings, name: str, path: str, order: float) -> None:
    """Add a component unless the project already lists it: by this path, by another path
    to the same class (``scrapy_frontier.FetchTimingMiddleware``), or as the class itself;
    even with the order None, which turns it off."""
    components = settings[name]
    if isinstance(components, BaseSettings):
        if path not in components and not _lists_class_of(components, path):
            components.set(path, order, "addon")
    else:  # pragma: no cover - settings built from a plain dict
        settings.set(name, {**(components or {}), path: order}, "addon")


def _robots_step(settings: Settings) -> tuple[float, float] | None:
    """Where RobotsHoldMiddleware and RobotsCacheMiddleware go: between
    RobotsTxtMiddleware's order and the next middleware's, at most 0.5 and 0.75 after the
    former; None if robots.txt is not obeyed."""
    if not settings.getbool("ROBOTSTXT_OBEY"):
        return None
    base = dict(settings["DOWNLOADER_MIDDLEWARES_BASE"] or {})
    project = dict(settings["DOWNLOADER_MIDDLEWARES"] or {})
    robots_class = load_object(ROBOTS_MIDDLEWARE_PATH)
    robots = next((order for path, order in [*project.items(), *base.items()]
                   if path == ROBOTS_MIDDLEWARE_PATH or path is robots_class), None)
    if not isinstance(robots, int | float):
        return None  # turned off, or replaced by another class: the timing middleware waits
    after = [o for o in {**base, **project}.values() if isinstance(o, int | float) and o > robots]
    gap = min(1.0, min(after, default=robots + 1.0) - robots)
    return robots + gap / 2, robots + gap * 3 / 4


def _lists_class_of(components: BaseSettings, path: str) -> bool:
    wanted = load_object(path)
    for listed in components:
        if listed is wanted:
            return True
        if isinstance(listed, str) and listed.startswith("scrapy_frontier."):
            try:
                if load_object(listed) is wanted:
                    return True
            except (ImportError, NameError, ValueError):
                pass  # a wrong path of the project's own: Scrapy reports it
    return False


def _warn_about_overrides(settings: Settings) -> None:
    addon_priority = settings.getpriority("SCHEDULER") or 0
    scheduler = settings.get("SCHEDULER")
    if addon_priority > _addon_level() and dotted_name(scheduler) not in (
        SCHEDULER_PATH,
        "scrapy_frontier.FrontierScheduler",
    ):
        logger.warning(
            "SCHEDULER=%r in your settings overrides scrapy-frontier's add-on: "
            "the frontier (and its politeness) is not used.",
            scheduler,
        )
    mws = settings["DOWNLOADER_MIDDLEWARES"]
    disabled = MIDDLEWARE_PATH in mws and mws.get(MIDDLEWARE_PATH) is None
    if isinstance(mws, BaseSettings) and disabled:
        logger.warning(
            "%s is disabled in DOWNLOADER_MIDDLEWARES: fetch ends will be learnt from "
            "signals, and fetch times measured less precisely.",
            MIDDLEWARE_PATH,
        )


def _take_over_scrapy_pacing(settings: Settings) -> None:
    """The project's DOWNLOAD_DELAY and DOWNLOAD_SLOTS become the frontier's settings
    (:func:`scrapy_frontier.settings.scrapy_pacing`), and Scrapy's own per-slot delays are
    turned off, so that no host waits twice. One INFO line per translation."""
    from scrapy_frontier.settings import FrontierConfig, scrapy_pacing

    pacing = scrapy_pacing(settings)
    if not pacing.any:
        return
    if pacing.min_delay:
        config = FrontierConfig.from_settings(settings)  # the rests with the translation
        priority = max(settings.getpriority(name) or 0 for name in (
            "DOWNLOAD_DELAY", "FRONTIER_MIN_DELAY", "FRONTIER_MAX_DELAY"))
        settings.set("FRONTIER_MIN_DELAY", config.min_delay, priority)
        settings.set("FRONTIER_MAX_DELAY", config.max_delay, priority)
        settings.set("DOWNLOAD_DELAY", 0, priority)
    if pacing.entries:
        own = settings.getdict("FRONTIER_HOST_POLICY")
        priority = max(settings.getpriority("DOWNLOAD_SLOTS") or 0,
                       settings.getpriority("FRONTIER_HOST_POLICY") or 0)
        settings.set("FRONTIER_HOST_POLICY", {**pacing.entries, **own}, priority)
        slots = settings.getdict("DOWNLOAD_SLOTS")
        settings.set("DOWNLOAD_SLOTS", {slot: {**values, "delay": 0}
                                        for slot, values in slots.items()},
                     settings.getpriority("DOWNLOAD_SLOTS") or 0)
    for line in pacing.lines:
        logger.info("%s; Scrapy's own delay for it is off", line)


def open_connections(settings: Settings) -> None:
    """Scrapy's downloader lets each host have as many requests at once as the most
    connections a FRONTIER_HOST_POLICY entry or FRONTIER_CAPACITY gives (the frontier keeps
    every host to its own); a project's own CONCURRENT_REQUESTS_PER_DOMAIN wins, and caps
    them."""
    from scrapy_frontier.core.host_policy import HostPolicy, parse_entries

    try:
        entries = parse_entries(settings.getdict("FRONTIER_HOST_POLICY"), HostPolicy())
    except (TypeError, ValueError):
        return  # check_startup has stopped the crawl
    try:
        capacity = settings.getint("FRONTIER_CAPACITY")
    except ValueError:
        return  # check_startup has stopped the crawl
    most = max([1, capacity, *(policy.connections for policy in entries.values())])
    settings.set("CONCURRENT_REQUESTS_PER_DOMAIN", most, "addon")


def _addon_level() -> int:
    from scrapy.settings import SETTINGS_PRIORITIES

    return SETTINGS_PRIORITIES["addon"]
