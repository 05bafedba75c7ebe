"""The two INFO lines a crawl opens with: the frontier in force, and the page history.

Pure functions of the validated config and of what the driver reports, so that a run
says at once where its state lives, how it rests, and what it is going to recrawl.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from typing import TYPE_CHECKING

from scrapy_frontier.errors import StoreError
from scrapy_frontier.settings import FrontierConfig

if TYPE_CHECKING:
    from scrapy_frontier.backends.ports import Backend
    from scrapy_frontier.core.recrawl import Recrawler

logger = logging.getLogger("scrapy_frontier.scheduler")


def log_opening(config: FrontierConfig, backend: Backend, recrawler: Recrawler | None) -> None:
    """What this run is: the frontier in force, then what the history will recrawl."""
    logger.info("%s", frontier_line(config, backend.location))
    policies = config.host_policies.summary()
    if policies is not None:
        logger.info("%s", policies)
    for warning in config.host_policies.warnings:
        logger.warning("%s", warning)
    try:
        requests = backend.inspection.quarantine_size()
        records = recrawler.store.quarantine_size() if recrawler is not None else 0
    except StoreError as exc:  # the crawl itself says so when it next writes
        logger.debug("No quarantine count at open: %s", exc)
    else:
        held = quarantine_line(requests, records)
        if held is not None:
            logger.warning("%s", held)
    if recrawler is None:
        return
    try:
        pages, due = recrawler.census()
        next_due = recrawler.next_due()
    except StoreError as exc:  # the crawl itself says so when it next reads
        logger.debug("No page history census at open: %s", exc)
        return
    logger.info("%s", history_line(pages, due, next_due, time.time(),
                                   refetch_all=config.recrawl.refetch_all,
                                   shared=backend.name == "redis"))


def _seconds(value: float) -> str:
    if math.isinf(value):
        return "never"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.1f} s"


def frontier_line(config: FrontierConfig, location: str) -> str:
    """Backend and where it lives, the delay rule, the recrawl mode and the budgets."""
    policy = config.policy
    parts = [
        f"backend {config.backend} ({location})",
        f"rest {policy.factor:g} x fetch time, within [{policy.min_delay:g}, "
        f"{policy.max_delay:g}] s",
        f"recrawl {config.recrawl.mode!r}"
        + (", every page once (FRONTIER_RECRAWL_ALL)" if config.recrawl.refetch_all else ""),
    ]
    budgets = []
    if config.budgets.per_host:
        budgets.append(f"{config.budgets.per_host} pages per host")
    if config.budgets.own:
        budgets.append(f"{len(config.budgets.own)} hosts with their own")
    parts.append("budgets: " + (", ".join(budgets) if budgets else "none"))
    return "Frontier: " + "; ".join(parts)


def quarantine_line(requests: int, records: int) -> str | None:
    """What earlier runs set aside, and how to get it back; None if nothing."""
    if not requests and not records:
        return None
    held = []
    if requests:
        held.append(f"{requests} request{'s' if requests != 1 else ''} that could not be "
                    "rebuilt")
    if records:
        held.append(f"{records} page record{'s' if records != 1 else ''} that could not be "
                    "read")
    return ("Quarantine: " + " and ".join(held) + " are set aside and not crawled. "
            "scrapy frontier quarantine lists them; once the spider (or the release) can "
            "read them, scrapy frontier quarantine --requeue puts them back")


def history_line(pages: int, due: int | None, next_due: float | None, now: float, *,
                 refetch_all: bool, shared: bool) -> str:
    """Pages known, due now, when the next one comes due, and what becomes of start
    requests for pages that are not due."""
    if pages == 0:
        return "Page history: empty; every page fetched is recorded for later recrawls"
    if refetch_all:
        return (f"Page history: {pages} pages known; FRONTIER_RECRAWL_ALL takes every one "
                "of them (not retired) as due in this run")
    due_text = "an unknown number" if due is None else str(due)
    line = f"Page history: {pages} pages known, {due_text} due now"
    if not due and next_due is not None:
        when = datetime.datetime.fromtimestamp(next_due, datetime.timezone.utc)
        line += (f"; the next one comes due in {_seconds(max(0.0, next_due - now))} "
                 f"({when:%Y-%m-%d %H:%M} UTC)")
    scope = " by any worker" if shared else ""
    return (line + ". Start requests for pages not due (or fetched already" + scope
            + ") are skipped; meta['frontier_force'] fetches one anyway, "
            "and FRONTIER_RECRAWL_ALL=True refetches every page once")
