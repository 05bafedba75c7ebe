"""The inspection port on Redis: this worker's share beside the whole frontier as the last
rounds read it (never a Redis call on the reactor), and the stats."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_frontier.backends.ports import InspectPort
from scrapy_frontier.observe.census import Census, HostCounts

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.backends.redis.driver import RedisDriver
    from scrapy_frontier.backends.redis.queue import RedisQueue


class RedisInspection(InspectPort):
    """Census and stats from the queue's counts and the driver's shared view."""

    def __init__(self, driver: RedisDriver, queue: RedisQueue) -> None:
        self.driver = driver
        self.queue = queue

    def census(self) -> Census:
        """This worker's share, and the whole frontier as the last poll round read it
        (never a Redis call here: the rounds read it at most every CENSUS_REFRESH s)."""
        view, queue = self.driver.view, self.queue
        view.census_wanted = True
        local = queue.local
        mine = Census(
            backend="redis",
            # Waiting to be pushed, or kept in this worker's memory.
            queued=self.driver.backlog() + len(local),
            # The leases this worker holds in Redis (claimed ahead, being fetched, or
            # fetched and not completed there yet), as the shared count has them.
            in_flight=len(queue.buffer) + len(queue.held) + queue.unacked + local.in_flight,
            hosts=HostCounts(active=len(queue.held) + local.in_flight,
                             waiting=len(queue.buffer)),
            fetched=queue.fetched,
            partial=True,
        )
        return view.whole(mine)

    def publish_stats(self, stats: StatsCollector) -> None:
        set_value = stats.set_value
        queue, view = self.queue, self.driver.view
        for key, value in queue.counters.items():
            set_value(f"frontier/{key}", value)
        set_value("frontier/redis/queued", view.queued)
        # Scrapy's own scheduler stats, for dashboards that read them.
        unserializable = queue.counters.get("redis/unserializable", 0)
        if queue.pushed:
            set_value("scheduler/enqueued/redis", queue.pushed - queue.dropped_later)
        if unserializable:
            set_value("scheduler/enqueued/memory", unserializable)
            set_value("scheduler/unserializable", unserializable)
        set_value("frontier/redis/in_flight", view.in_flight)
        budget = self.driver.shared_budget
        if budget.get("budget_hosts"):
            # Shared by every worker of the crawl (the budget is per crawl, not per worker).
            set_value("frontier/budget/hosts", budget["budget_hosts"])
            set_value("frontier/budget/requests", budget.get("budget_items", 0))
        stall = self.driver.stall
        set_value("frontier/reactor/stall_max_ms", round(1000 * stall.worst, 1))
        set_value("frontier/reactor/stalls_over_100ms", stall.over)

    def quarantine_size(self) -> int:
        """Requests in the crawl's quarantine key (set aside by any worker, any run)."""
        session = self.driver.session
        return session.remote.quarantine_size() if session is not None else 0
