"""The host controls on Redis: a host's rest and retirement ride the next I/O round (and
apply at once to the requests kept in this worker's memory); budgets are counted in Redis."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, succeed

from scrapy_frontier.backends.ports import HostControlPort, RobotsPort
from scrapy_frontier.backends.steered import log_steered

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy import Request

    from scrapy_frontier.backends.redis.driver import RedisDriver
    from scrapy_frontier.core.frontier import Frontier
    from scrapy_frontier.core.host_policy import HostPolicies


redis_log = logging.getLogger("scrapy_frontier.redis")


class RedisControls(HostControlPort, RobotsPort):
    """Rest and retire hosts in the shared frontier and in this worker's local one."""

    def __init__(self, driver: RedisDriver, local: Frontier[Request],
                 policies: HostPolicies) -> None:
        self.driver = driver
        self.local = local
        self.policies = policies

    def steer_policies(self, raw: Mapping[str, Any]) -> list[str]:
        """The delay rules and budgets of the steered entries hold from each host's next
        fetch's end in this worker (budgets are counted in Redis against this worker's
        answer); a host's connections stay what the settings give."""
        policies = self.policies
        said = policies.steer(raw)
        log_steered(policies, said)
        self.local.policy_of = policies.delays
        self.driver.use_delays(policies.delays)
        return said

    def robots_get(self, origin: str) -> Deferred[object]:
        """Read on the I/O thread, between two rounds; Redis away: None (fetched)."""
        driver, session = self.driver, self.driver.session
        if session is None or driver.closed or not driver.io.running:
            return succeed(None)
        d: Deferred[object] = driver.io.run(session.robots.get, origin)
        d.addErrback(self._robots_failed, "read", origin)
        return d

    def robots_put(self, origin: str, record: bytes, keep: float) -> None:
        """Written on the I/O thread, before any round sent after it (the completion of
        the lease that waited for this robots.txt goes later): another worker that then
        claims the host finds it."""
        driver, session = self.driver, self.driver.session
        if session is None or driver.closed or not driver.io.running:
            return
        d = driver.io.run(session.robots.put, origin, record, keep)
        d.addErrback(self._robots_failed, "write", origin)

    def _robots_failed(self, failure: Any, doing: str, origin: str) -> None:
        redis_log.debug("robots.txt of %s: %s in Redis failed: %s", origin, doing,
                        failure.getErrorMessage())
        self.driver.ctx.stats.inc_value("frontier/robots/store_errors")

    def set_min_rest(self, host: str, seconds: float) -> None:
        self.local.set_min_rest(host, seconds)
        self.driver.next.min_rests.append((host, seconds))
        self.driver.kick()

    def retire(self, host: str) -> list[Request]:
        self.driver.next.retire.append(host)
        return self.local.retire(host)

    def take_dropped(self) -> list[tuple[str, Request]]:
        return self.local.take_dropped()

    def contain(self, host: str, fetched: int, allowance: int) -> None:
        """Atomic in Redis with the workers' claims (lua/control.lua), at the next round."""
        self.driver.next.contain.append((host, fetched, allowance))
        self.driver.kick()

    def take_trap_states(self) -> list[tuple[str, str]]:
        session = self.driver.session
        if session is None:
            return []
        states = session.rounds.memory.trap_states
        out = []
        while states:
            out.append(states.popleft())
        return out

    def over_budget(self, host: str) -> bool:
        return False  # budgets are counted in Redis (complete.lua), not at the push

    def host_counts(self) -> dict[str, int]:
        """Hosts blocked, retired and over budget in the shared frontier, as read by the
        I/O thread at most 5 s ago (no Redis call here)."""
        shared = self.driver.shared_budget
        return {name: shared.get(name, 0) for name in ("blocked", "retired", "over_budget")}
