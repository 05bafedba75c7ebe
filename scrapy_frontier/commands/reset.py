"""``scrapy frontier reset``: delete one Redis crawl's keys, after a confirmation.

Only the keys under the crawl's three prefixes (``FRONTIER_REDIS_KEY``,
``FRONTIER_REDIS_SEEN_KEY``, ``FRONTIER_REDIS_HISTORY_KEY`` for the spider) go, and only when
a frontier this release wrote is there (the inspector checks its meta key first) and no
request is leased: a running crawl is refused. Everything else in that Redis stays.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from scrapy_frontier.backends.redis.connection import describe, guard
from scrapy_frontier.errors import FrontierCommandError

#: Keys deleted (UNLINK) per round trip, and asked for per SCAN step.
BATCH = 500
_GLOB_SPECIAL = "*?[]\\"


def glob_literal(prefix: str) -> str:
    """``prefix`` as a Redis MATCH pattern that matches exactly it."""
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in prefix)


def _scan(client: Any, pattern: str) -> list[bytes]:
    return list(client.scan_iter(match=pattern, count=BATCH))


def redis_reset(inspector: Any, confirm: Callable[[str], bool]) -> dict[str, Any]:
    """Delete the crawl's keys if ``confirm(question)`` says yes; what was done."""
    layout = inspector.layout
    prefixes = sorted({p for i in range(layout.count) for p in (
        layout.frontier_prefix(i), layout.seen_prefix(i), layout.history_prefix(i))})
    if any(not p for p in prefixes):
        raise FrontierCommandError(
            "an empty FRONTIER_REDIS_*KEY would name every key of that Redis: reset refuses. "
            "Nothing was changed.")
    client = inspector.client

    def run(doing: str, fn: Callable[[], Any]) -> Any:
        return guard(client, inspector.prefix, doing, fn)

    def live_leases() -> int:
        # Leases past their deadline belong to workers that are gone (no claim has taken
        # them back yet, since no worker runs): they do not hold the reset back.
        sec, usec = client.time()
        now = f"({sec + usec / 1e6!r}"
        return sum(int(client.zcount(inspector.k("deadlines", i), now, "+inf"))
                   for i in range(layout.count))

    leased = run("reading the leases", live_leases)
    if leased:
        raise FrontierCommandError(
            f"{leased} request(s) of spider {inspector.spider!r} are leased: its workers are "
            "crawling. Stop them first (a killed worker's leases lapse within "
            "FRONTIER_REDIS_LIVENESS, or FRONTIER_LEASE_TIMEOUT for a worker without a "
            "heartbeat). Nothing was changed.")
    keys: set[bytes] = set()
    for prefix in prefixes:
        pattern = glob_literal(prefix) + "*"
        keys.update(run("listing the crawl's keys", partial(_scan, client, pattern)))
    where = describe(client)
    shown = prefixes if len(prefixes) <= 6 else [*prefixes[:5], "..."]
    question = (f"This deletes {len(keys)} key(s) of spider {inspector.spider!r} on {where} "
                f"({', '.join(p + '*' for p in shown)}): its queue, seen set and page "
                "history. It cannot be undone.")
    if not confirm(question):
        return {"spider": inspector.spider, "deleted": 0, "confirmed": False,
                "prefixes": prefixes}
    ordered = list(keys)
    for start in range(0, len(ordered), BATCH):
        part = ordered[start:start + BATCH]
        run("deleting the crawl's keys", partial(client.unlink, *part))
    return {"spider": inspector.spider, "deleted": len(ordered), "confirmed": True,
            "prefixes": prefixes}


__all__ = ["glob_literal", "redis_reset"]
