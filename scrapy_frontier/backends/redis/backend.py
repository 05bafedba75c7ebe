"""The ``redis`` backend: one frontier in Redis, shared by every worker of a spider."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_frontier.backends.ports import Backend, BackendContext
from scrapy_frontier.backends.redis.driver import RedisDriver

if TYPE_CHECKING:
    from scrapy.spiders import Spider
    from twisted.internet.defer import Deferred


class RedisBackend(Backend):
    """One object serves the four ports for now (see RedisDriver)."""

    name = "redis"
    persistent = True

    def __init__(self, context: BackendContext, *, client: Any = None) -> None:
        driver = self.driver = RedisDriver(context, client=client)
        self.queue = self.history = self.controls = self.inspection = driver

    @property
    def location(self) -> str:  # type: ignore[override]
        return str(getattr(self.driver, "location", "redis"))

    def open(self, spider: Spider) -> None:
        self.driver.open(spider)

    def close(self, reason: str) -> Deferred[None] | None:
        return self.driver.close(reason)
