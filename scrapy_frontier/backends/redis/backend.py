"""The ``redis`` backend: one frontier in Redis, shared by every worker of a spider."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_frontier.backends.ports import Backend, BackendContext
from scrapy_frontier.backends.redis.controls import RedisControls
from scrapy_frontier.backends.redis.driver import RedisDriver
from scrapy_frontier.backends.redis.events import RedisHistory
from scrapy_frontier.backends.redis.inspection import RedisInspection
from scrapy_frontier.backends.redis.queue import RedisQueue
from scrapy_frontier.codec import RowTrust

if TYPE_CHECKING:
    from scrapy.spiders import Spider
    from twisted.internet.defer import Deferred


class RedisBackend(Backend):
    """Builds the four ports over one driver (the I/O rounds), and opens and closes them."""

    name = "redis"
    persistent = True

    def __init__(self, context: BackendContext, *, client: Any = None) -> None:
        driver = self.driver = RedisDriver(context, client=client)
        self.queue: RedisQueue = RedisQueue(context, driver)
        self.history: RedisHistory = RedisHistory(driver, context.due_arrived)
        self.controls: RedisControls = RedisControls(driver, self.queue.local,
                                                     context.config.host_policies)
        self.robots = self.controls
        self.inspection: RedisInspection = RedisInspection(driver, self.queue)
        driver.serve(self.queue, self.history)
        driver.steer_to = self.controls.steer_policies

    @property
    def location(self) -> str:  # type: ignore[override]
        return self.driver.location

    @property
    def row_trust(self) -> RowTrust:  # type: ignore[override]
        session = self.driver.session
        assert session is not None, "asked after open"
        return session.trust

    def open(self, spider: Spider) -> None:
        self.driver.open(spider)
        self.queue.open(spider)

    def close(self, reason: str) -> Deferred[None] | None:
        self.queue.closing()
        return self.driver.close()
