"""The scheduler's capacity feed: what each fetch tells the host's capacity, and where a
change goes."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.http import Response
from scrapy.settings import Settings
from twisted.internet.error import TimeoutError as TwistedTimeout

from scrapy_frontier.errors import FrontierConfigError
from scrapy_frontier.scheduler.capacity import CapacityFeed
from scrapy_frontier.settings import FrontierConfig


class Controls:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []

    def set_connections(self, host: str, connections: int, *, together: bool = False) -> None:
        self.calls.append((host, connections, together))


class Stats:
    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def inc_value(self, key: str, count: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count


class Recorder:
    """Stands for core Capacities: records what it is told."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.answer: int | None = None
        self.now = 1

    def observe(self, host: str, service: float, **kw: Any) -> int | None:
        self.seen.append({"host": host, "service": service, **kw})
        return self.answer

    def connections(self, host: str) -> int:
        return self.now


def feed() -> tuple[CapacityFeed, Recorder, Controls, Stats]:
    controls, stats = Controls(), Stats()
    f = CapacityFeed(lambda host: 4, controls, stats)  # type: ignore[arg-type]
    rec = Recorder()
    f.capacities = rec  # type: ignore[assignment]
    return f, rec, controls, stats


def test_concurrency_and_overlap_count_the_hosts_fetches_in_flight() -> None:
    f, rec, _, _ = feed()
    f.sent(1, "a", 0.0)
    f.sent(2, "a", 0.1)  # 1 in flight at its send
    f.sent(3, "b", 0.1)  # another host: not counted
    f.ended(1, 0.3, 0.3, strained=False)
    f.sent(4, "a", 0.35)  # 2 in flight at its send
    f.ended(2, 0.4, 0.5, strained=False)
    f.ended(4, 0.5, 0.9, strained=False)
    first, second, third = rec.seen
    assert (first["concurrent"], first["overlapped"]) == (1, 1)
    # 2 was sent at 0.1 with 1 in flight; 1 ended at 0.3, past 2's halfway point (0.3).
    assert (second["concurrent"], second["overlapped"]) == (2, 1)
    # 4 was sent with 2 in flight, which ended at 0.5, before 4's halfway point (0.625).
    assert (third["concurrent"], third["overlapped"]) == (2, 1)
    assert [s["service"] for s in rec.seen] == [0.3, 0.4, 0.5]


def test_a_fetch_still_in_flight_at_the_halfway_point_overlaps() -> None:
    f, rec, _, _ = feed()
    f.sent(1, "a", 0.0)
    f.sent(2, "a", 0.0)
    f.sent(3, "a", 0.0)
    f.ended(3, 0.2, 0.2, strained=False)
    assert (rec.seen[0]["concurrent"], rec.seen[0]["overlapped"]) == (3, 3)


def test_a_change_goes_to_the_backend_a_rise_together() -> None:
    f, rec, controls, stats = feed()
    rec.answer = 2
    f.sent(1, "a", 0.0)
    f.ended(1, 0.1, 0.1, strained=False)
    rec.now, rec.answer = 2, 1
    f.sent(2, "a", 1.0)
    f.ended(2, 0.1, 1.1, strained=True)
    assert controls.calls == [("a", 2, True), ("a", 1, False)]
    assert stats.values == {"frontier/capacity/rises": 1, "frontier/capacity/falls": 1}


def test_unsent_and_given_back_fetches_are_not_measured() -> None:
    f, rec, _, _ = feed()
    f.sent(1, "a", 0.0)
    f.dropped(1)
    f.dropped(7)  # never sent
    f.ended(1, 0.1, 0.1, strained=False)  # a late report
    f.sent(2, "a", 0.2)
    f.ended(2, 0.1, 0.3, strained=False)
    assert len(rec.seen) == 1 and rec.seen[0]["concurrent"] == 1


def test_strain_is_429_503_or_a_timeout() -> None:
    def response(status: int) -> Response:
        return Response("http://a/", status=status)

    assert CapacityFeed.strained(response(429), None)
    assert CapacityFeed.strained(response(503), None)
    assert not CapacityFeed.strained(response(500), None)
    assert not CapacityFeed.strained(response(200), None)
    assert CapacityFeed.strained(None, TwistedTimeout())
    assert not CapacityFeed.strained(None, ConnectionRefusedError())


def test_the_real_capacities_rise_on_a_host_that_serves_two_at_once() -> None:
    controls, stats = Controls(), Stats()
    f = CapacityFeed(lambda host: 2, controls, stats)  # type: ignore[arg-type]
    t = 0.0
    for ticket in range(40):
        f.sent(ticket, "a", t)
        f.ended(ticket, 0.1, t + 0.1, strained=False)
        t += 1.0
        if controls.calls:
            break
    assert controls.calls == [("a", 2, True)]


@pytest.mark.parametrize("extra, says", [
    ({"FRONTIER_BACKEND": "redis"}, "FRONTIER_CAPACITY is not supported by FRONTIER_BACKEND"),
    ({"FRONTIER_IP_POLITENESS": True}, "cannot be combined with FRONTIER_IP_POLITENESS"),
    ({"FRONTIER_CAPACITY": -1}, "FRONTIER_CAPACITY"),
])
def test_capacity_is_refused_where_it_cannot_work(extra: dict[str, Any], says: str) -> None:
    with pytest.raises(FrontierConfigError, match=says):
        FrontierConfig.from_settings(Settings({"FRONTIER_CAPACITY": 4, **extra}))


def test_capacity_is_every_hosts_cap_and_an_entry_its_own() -> None:
    config = FrontierConfig.from_settings(Settings({
        "FRONTIER_CAPACITY": 6, "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        "FRONTIER_HOST_POLICY": {"fragile.example": {"min_delay": 5},
                                 "big.example": {"concurrency": 8}}}))
    caps = config.host_policies
    assert caps.connections_of("other.example") == 6
    assert caps.connections_of("fragile.example") == 6  # left out: the crawl's
    assert caps.connections_of("big.example") == 8
    low = FrontierConfig.from_settings(Settings({"FRONTIER_CAPACITY": 6,
                                                 "CONCURRENT_REQUESTS_PER_DOMAIN": 2}))
    assert low.host_policies.connections_of("a.example") == 2
    assert any("FRONTIER_CAPACITY=6" in w for w in low.host_policies.warnings)
