"""The steps of a Redis I/O round (backends/redis/round.py), each a function of its inputs:
checked here without Redis, with small stand-ins for the seen set, the page history and the
script's reply. tests/test_redis_frontier.py runs whole rounds on a real Redis."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from scrapy_frontier.backends.redis.frontier import (
    HAND_BACK,
    Completion,
    RedisLease,
    RoundReply,
)
from scrapy_frontier.backends.redis.round import (
    Gated,
    LeaseEnd,
    Pushed,
    Tally,
    answer_of,
    ended_fetches,
    gate_pushes,
    settle_ends,
    tally_pushes,
)


def _lease(ticket: int, host: str = "a.example", *, wait: float = 0.0) -> RedisLease:
    return RedisLease(ticket=ticket, host=host, item=ticket.to_bytes(8, "big") + b"r",
                      level=1, handed_at=10.0, deadline=40.0, ready_at=10.0 + wait)


def _pushed(fp: int, *, start: bool = False, dedupe: bool = True, key: int | None = None,
            mark: bool = True) -> Pushed:
    return Pushed(fp, fp if key is None else key, dedupe, mark, start, "a.example", 2,
                  fp.to_bytes(8, "big") + b"r")


class Seen:
    """The seen set: one bucket per host, and the members it holds."""

    def __init__(self, members: set[int]) -> None:
        self.members = members
        self.asked: list[list[tuple[str, int]]] = []

    def bucket(self, host: str, fp: int) -> tuple[str, int]:
        return f"seen:{host}", fp

    def contains_many(self, entries: list[tuple[str, int]]) -> list[bool]:
        self.asked.append(entries)
        return [fp in self.members for _, fp in entries]


class Gate:
    """A recrawler's start gate that admits ``admit`` and records what it was asked."""

    def __init__(self, admit: set[int]) -> None:
        self.admit = admit
        self.asked: list[tuple[int, bool]] = []

    def admit_start(self, fp: int, seen: bool, *, shared: bool) -> tuple[bool, None]:
        assert shared
        self.asked.append((fp, seen))
        return fp in self.admit, None


def test_pushes_go_to_the_script_with_their_seen_test() -> None:
    seen = Seen(set())
    gated = gate_pushes([_pushed(1), _pushed(2, dedupe=False, mark=False)], seen,  # type: ignore[arg-type]
                        None)
    assert gated.fresh == [("a.example", 2, _pushed(1).item, ("seen:a.example", 1, True)),
                           ("a.example", 2, _pushed(2).item, None)]
    assert gated.indexes == [0, 1] and gated.starts == [False, False] and gated.dropped == []
    assert seen.asked == []  # tested in the script, atomically with the push


def test_the_start_gate_asks_the_seen_set_first_and_skips_what_it_refuses() -> None:
    seen = Seen({1})
    gate = Gate(admit={1, 3})
    pushes = [_pushed(1, start=True), _pushed(2, start=True), _pushed(3, start=True),
              _pushed(4)]
    gated = gate_pushes(pushes, seen, gate)  # type: ignore[arg-type]
    assert seen.asked == [[("a.example", 1), ("a.example", 2), ("a.example", 3)]]
    assert gate.asked == [(1, True), (2, False), (3, False)]
    assert gated.dropped == [1] and gated.indexes == [0, 2, 3]
    # A seen start URL the gate admits is due for a recrawl: queued although seen.
    assert gated.fresh[0][3] == ("seen:a.example", 1, False)
    assert gated.fresh[1][3] == ("seen:a.example", 3, True)


def test_tally_counts_duplicates_and_skipped_starts() -> None:
    gated = Gated([], [True, False, False], [1, 2, 4], [0])
    assert tally_pushes(gated, [2, 2, 1]) == Tally(duplicates=1, skipped=2, dropped=[0, 1, 2])
    assert tally_pushes(gated, [1, 0, 1]) == Tally(0, 1, [0])


def test_ended_fetches_charge_the_budget_unless_unfetched_or_given_back() -> None:
    ends = [LeaseEnd(_lease(1), 0.5, 1.0, 99.0), LeaseEnd(_lease(2, "b.example"), 0.0, 0.0, None),
            LeaseEnd(_lease(3), 0.0, 0.0, None, True)]
    out = ended_fetches(ends, {2}, budget_for=lambda host: 7, clock=lambda: 100.0)
    assert [f.budget for f in out] == [7, -1, HAND_BACK]
    assert [f.ended_ago for f in out] == [1.0, 0.0, 0.0]
    assert (out[0].fetch_seconds, out[0].rest_at_least) == (0.5, 1.0)


def test_settle_ends_forgets_the_leases_and_counts_lost_and_taken(
        caplog: pytest.LogCaptureFixture) -> None:
    ends = [LeaseEnd(_lease(1), 0.1, 0.0, None), LeaseEnd(_lease(2), 0.1, 0.0, None),
            LeaseEnd(_lease(3), 0.0, 0.0, None, True), LeaseEnd(_lease(4), 0.1, 0.0, None)]
    leased = {1: "a.example", 2: "a.example", 3: "a.example", 4: "a.example", 5: "b.example"}
    with caplog.at_level(logging.INFO, "scrapy_frontier.scheduler"):
        lost, taken = settle_ends(ends, [Completion(1.0, 1.0, -1), None, None,
                                         Completion(1.0, 1.0, 3)], leased)
    assert (lost, taken) == (1, 1) and leased == {5: "b.example"}
    assert "reached its budget: 3 queued requests dropped" in caplog.text


def test_the_answer_counts_a_claim_ahead_from_the_reply() -> None:
    reply = RoundReply(pushed=[], completed=[], leases=[_lease(1), _lease(2, wait=0.15)],
                       wakeup=0.3, front=2, back=1, in_flight=2, reclaimed=1)
    answer = answer_of(reply, Tally(1, 0, [3]), (0, 1), received=50.0)
    assert answer.not_before == {2: pytest.approx(50.15)}
    assert (answer.queued, answer.in_flight, answer.idle) == (3, 2, False)
    assert (answer.duplicates, answer.dropped, answer.reclaimed, answer.taken) == (1, [3], 1, 1)
    idle: Any = RoundReply([], [], [], None, 0, 0, 0, 0, settled=False)
    assert not answer_of(idle, Tally(0, 0, []), (0, 0), 0.0).idle  # a partition moved
    assert answer_of(idle._replace(settled=True), Tally(0, 0, []), (0, 0), 0.0).idle
