"""The log of a change of the per-host policy's steered entries, on every backend."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_frontier.core.host_policy import HostPolicies

logger = logging.getLogger("scrapy_frontier.control")


def log_steered(policies: HostPolicies, said: list[str]) -> None:
    """One WARNING per entry refused or capped, and the entries now in force."""
    for sentence in said:
        logger.warning("%s", sentence)
    logger.info("Per-host policy steered (scrapy frontier policy): %s",
                policies.steered_summary())
