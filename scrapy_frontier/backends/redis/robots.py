"""Each site's last robots.txt answer, kept in Redis for every worker and later runs.

One string key per origin, ``P robots:<scheme://host[:port]>``, under the first
partition's prefix, written with an expiry (``SET ... PX``): Redis forgets a record 30 days
after its fetch (it answers while fresh, ``FRONTIER_ROBOTS_CACHE``, and after that while
the site's robots.txt is unreachable), so the keys never outgrow the sites crawled in that
time. The value is a record of ``scrapy_frontier.core.robots_cache`` (sealed with
``FRONTIER_SIGNING_KEYS``), which the reader checks (it is untrusted). Both calls run on the
I/O thread.
"""

from __future__ import annotations

import math
from typing import Any

from scrapy_frontier.backends.redis.connection import guard

#: The key of an origin's record, after the prefix.
KEY = "robots:"


class RedisRobots:
    """The robots.txt records of one crawl."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def key(self, origin: str) -> str:
        return f"{self.prefix}{KEY}{origin}"

    def get(self, origin: str) -> object:
        """The record kept for ``origin`` as Redis has it, or None."""
        client = self.client
        return guard(client, self.prefix, "reading a robots.txt",
                     lambda: client.get(self.key(origin)))

    def put(self, origin: str, record: bytes, keep: float) -> None:
        """Keep ``record`` for ``origin`` for ``keep`` seconds."""
        client = self.client
        ms = max(1, math.ceil(keep * 1000))
        guard(client, self.prefix, "keeping a robots.txt",
              lambda: client.set(self.key(origin), record, px=ms))


__all__ = ["RedisRobots"]
