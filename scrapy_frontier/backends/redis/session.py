"""One worker's session with the crawl's keys in Redis: the shared frontier, its seen set,
the lease fence, the heartbeat and the round runner, opened together and closed together.

Everything here runs on the I/O thread (the rounds) or the heartbeat thread; the reactor
only opens the session and reads its location.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_frontier.backends.redis.acl import check_permissions, start_url_commands
from scrapy_frontier.backends.redis.connection import describe, redis_from_settings
from scrapy_frontier.backends.redis.fence import LeaseFence
from scrapy_frontier.backends.redis.heartbeat import Heartbeat
from scrapy_frontier.backends.redis.partitions import (
    Layout,
    PartitionedFrontier,
    PartitionedSeen,
    open_frontier,
    open_history,
    open_seen,
)
from scrapy_frontier.backends.redis.robots import RedisRobots
from scrapy_frontier.backends.redis.round import Round, RoundAnswer, RoundRunner
from scrapy_frontier.codec import RowTrust
from scrapy_frontier.errors import RedisFrontierError

if TYPE_CHECKING:
    from scrapy.spiders import Spider

    from scrapy_frontier.backends.redis.view import SharedView
    from scrapy_frontier.core.history import HistoryStore
    from scrapy_frontier.core.recrawl import Recrawler
    from scrapy_frontier.settings import FrontierConfig

redis_log = logging.getLogger("scrapy_frontier.redis")

#: Seconds ahead of a host's ready time that a round claims it when no host is ready now.
#: The worker holds the request until then (Redis reports the wait; the worker counts it
#: from the reply, so never from before the server's ready time). One round then claims
#: every host that comes ready within it, instead of one round per host as each rest ends.
CLAIM_AHEAD = 0.2


def _check_user(client: Any, layout: Layout, config: FrontierConfig, spider: Spider,
                settings: Any) -> None:
    """Refuse to open, naming what is denied, when the Redis user may not run the worker's
    commands on its keys (RedisSpider's start URLs included): before any key is written."""
    keys = [layout.frontier_prefix(0) + "meta", layout.seen_prefix(0) + "meta"]
    if config.recrawl.mode != "off":
        keys.append(layout.history_prefix(0) + "meta")
    extra, start_key = start_url_commands(spider, settings)
    check_permissions(client, keys, extra=extra, extra_key=start_key)


class RedisSession:
    """The crawl's keys in Redis as one worker holds them open."""

    def __init__(self, config: FrontierConfig, spider: Spider, client: Any, *,
                 clock: Callable[[], float], unfetched: set[int],
                 lost: Callable[[list[int]], None], settings: Any = None) -> None:
        self.client = client
        #: A shared store: its rows are sealed (FRONTIER_SIGNING_KEYS), or read restricted.
        self.trust = RowTrust.of(config.signing_keys, private=False)
        layout = self.layout = Layout(*config.redis.keys_for(spider.name),
                                      count=config.redis.partitions,
                                      tagged=config.redis.tagged)
        _check_user(client, layout, config, spider, settings)
        self.remote: PartitionedFrontier = open_frontier(
            client, layout,
            front_queues=config.front_queues, priority_bias=config.priority_bias,
            back_queues=config.back_queues, back_queues_max=config.back_queues_max,
            policy=config.policy, policy_of=config.host_policies.delays,
            connections=config.host_policies.connections,
            lease_timeout=config.lease_timeout, spider=spider.name,
            rng=random.Random(config.seed), liveness=config.redis.liveness,
        )
        self.remote.save_delay_rule()
        self.seen: PartitionedSeen = open_seen(client, layout,
                                               expected=config.redis.seen_expected)
        #: Each site's robots.txt record (FRONTIER_ROBOTS_CACHE).
        self.robots = RedisRobots(client, layout.frontier_prefix(0))
        #: Until when each lease is proven held.
        self.fence = LeaseFence(config.redis.liveness, config.lease_timeout)
        self.rounds = RoundRunner(self.remote, self.seen, budget_for=config.budget_for,
                                  clock=clock, unfetched=unfetched, claim_ahead=CLAIM_AHEAD,
                                  fence=self.fence)
        # Crawler traps contained or released before this worker opened.
        self.rounds.memory.trap_states.extend(self.remote.traps().items())
        self.heartbeat: Heartbeat | None = None
        if config.redis.liveness:
            self.heartbeat = Heartbeat(self.remote, self.rounds.held, fence=self.fence,
                                       lost=lost)
            self.heartbeat.start()
        self.location = f"{describe(client)}, keys {layout.describe()}"
        redis_log.debug("Frontier on Redis: keys %s, %d partition(s), prefetch %d",
                        layout.describe(), layout.count, config.redis.prefetch)

    @classmethod
    def open(cls, config: FrontierConfig, spider: Spider, client: Any, settings: Any, *,
             clock: Callable[[], float], unfetched: set[int],
             lost: Callable[[list[int]], None]) -> RedisSession:
        client = client if client is not None else redis_from_settings(settings)
        return cls(config, spider, client, clock=clock, unfetched=unfetched, lost=lost,
                   settings=settings)

    @property
    def recrawler(self) -> Recrawler | None:
        return self.rounds.recrawler

    def open_history(self) -> HistoryStore:
        return open_history(self.client, self.layout, self.trust.check_record)

    def run(self, rnd: Round) -> RoundAnswer:
        """In the I/O thread: one round against Redis."""
        return self.rounds.run(rnd)

    def run_final(self, rnd: Round, view: SharedView) -> RoundAnswer | None:
        """In the I/O thread, at close: the last round, then the history's last writes."""
        answer = self.run(rnd) if rnd.has_writes() else None
        recrawler = self.recrawler
        with contextlib.suppress(RedisFrontierError):  # the stats only: never fail close
            self.rounds.memory.shared_budget = self.remote.budget_stats()
            # The whole frontier after this worker's last writes, for the final progress
            # line and the metrics that outlive the crawl (the last poll's may be older).
            census = self.remote.census()
            history = recrawler.census() if recrawler is not None else None
            view.read_final(census, history,
                            self.remote.censuses if self.remote.count > 1 else None)
        if recrawler is not None:
            recrawler.close()
        if self.heartbeat is not None:
            self.heartbeat.stop()  # after the last completions: nothing left to renew
        return answer
