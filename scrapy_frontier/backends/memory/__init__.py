"""The ``memory`` backend: the core :class:`~scrapy_frontier.core.frontier.Frontier` in this
process, with nothing on disk. A stop loses it."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from scrapy_frontier.backends.memory.ip_groups import IPGroups
from scrapy_frontier.backends.memory.ports import (
    LocalControls,
    LocalHistory,
    LocalInspection,
    LocalQueue,
)
from scrapy_frontier.backends.ports import Backend, BackendContext
from scrapy_frontier.core.frontier import Frontier

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.spiders import Spider

    from scrapy_frontier.backends.sqlite.queue import SQLiteStore


class MemoryBackend(Backend):
    """Builds the frontier and the four local ports over it."""

    name = "memory"
    queue: LocalQueue
    history: LocalHistory
    controls: LocalControls
    inspection: LocalInspection

    def __init__(self, context: BackendContext) -> None:
        self.ctx = context
        #: Each host's measured connections (FRONTIER_CAPACITY), kept across a resume.
        self.measured: dict[str, int] = {}
        frontier = self.frontier = self._new_frontier(None)
        self.ip_groups = (IPGroups(frontier, timeout=context.config.dns_timeout,
                                   wake=context.wake)
                          if context.config.ip_politeness else None)
        self.queue = self._new_queue()
        self.history = self._new_history()
        self.controls = self.robots = self._new_controls()
        self.inspection = LocalInspection(self.name, frontier, self.history,
                                          context.dupefilter, self.ip_groups)

    def _new_queue(self) -> LocalQueue:
        return LocalQueue(self.frontier, self.ctx.clock, self.ip_groups)

    def _new_history(self) -> LocalHistory:
        return LocalHistory()

    def _new_controls(self) -> LocalControls:
        config = self.ctx.config
        return LocalControls(self.frontier, self.measured, config.host_policies,
                             measuring=bool(config.capacity))

    def _new_frontier(self, store: SQLiteStore[Request] | None) -> Frontier[Request]:
        config = self.ctx.config
        frontier: Frontier[Request] = Frontier(
            front_queues=config.front_queues,
            priority_bias=config.priority_bias,
            back_queues=config.back_queues,
            back_queues_max=config.back_queues_max,
            policy=config.policy,
            policy_of=config.host_policies.delays,
            lease_timeout=config.lease_timeout,
            clock=self.ctx.clock,
            rng=random.Random(config.seed),
            store=store,
            group_hosts=config.ip_politeness,
            connections=(self._measured_connections if config.capacity
                         else config.host_policies.connections),
        )
        frontier.budgets.default = config.budgets.per_host
        if config.host_policies.has_budgets:
            frontier.budgets.by_policy = config.host_policies.budget_of
        for host, budget in config.budgets.own.items():
            frontier.set_budget(host, budget)
        return frontier

    def _measured_connections(self, host: str) -> int:
        return self.measured.get(host, 1)

    def _use(self, frontier: Frontier[Request]) -> None:
        """Every port works on ``frontier`` from now on (a resumed one)."""
        self.frontier = frontier
        self.queue.frontier = self.controls.frontier = self.inspection.frontier = frontier
        if self.ip_groups is not None:
            self.ip_groups.frontier = frontier

    def open(self, spider: Spider) -> None:
        """Nothing to open: the frontier is ready from the start."""

    def close(self, reason: str) -> None:
        self.history.close()


__all__ = ["MemoryBackend"]
