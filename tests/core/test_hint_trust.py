"""Change hints in the recrawl: a truthful host's hints decide, a liar's and a noisy
host's are found out and ignored (on the fake clock, one Recrawler)."""

from __future__ import annotations

from dataclasses import replace

from scrapy_frontier.core import FakeClock
from scrapy_frontier.core.hint_trust import MIN_CHECKS, HintTrust
from scrapy_frontier.core.recrawl import PROBES_PER_RUN, Recrawler
from scrapy_frontier.core.refresh import DAY
from tests.core.test_recrawl import make_recrawler, page

TEXT = " ".join(f"word{i}" for i in range(300))
NEW = " ".join(f"other{i}" for i in range(300))


def _visit(rc: Recrawler, fp: int, host: str, text: str) -> None:
    rc.visited(fp, f"http://{host}/{fp}", page(text))


def test_a_claim_past_the_last_visit_makes_the_page_due_now() -> None:
    rc, clock = make_recrawler()
    _visit(rc, 1, "a.example", TEXT)
    _visit(rc, 2, "a.example", TEXT)
    clock.advance(3600)
    assert rc.hint(1, "http://a.example/1", clock.now - 60) == "due"
    assert rc.hint(2, "http://a.example/2", clock.now - 7200) == "kept"  # before the visit
    due = rc.take_due(10)
    assert [r.fp for r in due] == [1]
    assert rc.hint(99, "http://a.example/99", clock.now) == "unknown"
    assert rc.counters["signals/due"] == 1 and rc.counters["signals/kept"] == 1


def _check_many(rc: Recrawler, clock: FakeClock, host: str, *, claims_move: bool,
                pages_change: bool, rounds: int, first: int = 0) -> list[str]:
    """Visit pages, hint, visit again: ``rounds`` checks of the host's hints."""
    outcomes = []
    pages = range(first, first + rounds)
    for fp in pages:
        _visit(rc, fp, host, TEXT)
    clock.advance(3600)
    for fp in pages:
        when = clock.now - 10 if claims_move else clock.now - 7200
        outcomes.append(rc.hint(fp, f"http://{host}/{fp}", when))
        _visit(rc, fp, host, NEW if pages_change else TEXT)
    return outcomes


def test_a_truthful_host_becomes_trusted_and_its_unmoved_claims_defer_the_visit() -> None:
    rc, clock = make_recrawler()
    _check_many(rc, clock, "true.example", claims_move=True, pages_change=True,
                rounds=MIN_CHECKS + 2)
    assert rc.trust.state("true.example") == "trusted"
    record = rc.store.get(0)
    assert record is not None
    clock.advance(60)
    assert rc.hint(0, "http://true.example/0", record.fetched_at - 5) == "deferred"
    again = rc.store.get(0)
    assert again is not None and again.next_due == record.fetched_at + 10 * DAY


def test_a_liar_and_a_noisy_host_are_distrusted_and_then_ignored() -> None:
    rc, clock = make_recrawler()
    # The liar's lastmod never moves although its pages change.
    _check_many(rc, clock, "liar.example", claims_move=False, pages_change=True, rounds=6)
    # The noisy host's lastmod always moves although nothing changed.
    _check_many(rc, clock, "noisy.example", claims_move=True, pages_change=False, rounds=6,
                first=100)
    assert rc.trust.state("liar.example") == "distrusted"
    assert rc.trust.state("noisy.example") == "distrusted"
    assert rc.counters["signals/wrong"] >= 2 * MIN_CHECKS
    clock.advance(3600)
    assert rc.hint(100, "http://noisy.example/100", clock.now) == "ignored"
    before = rc.store.get(0)
    assert rc.hint(0, "http://liar.example/0", 0.0) == "ignored"
    after = rc.store.get(0)
    assert before is not None and after is not None and after.next_due == before.next_due


def test_trust_needs_checks_and_a_clear_majority() -> None:
    trust = HintTrust()
    assert trust.state("a") == "unknown"
    for _ in range(MIN_CHECKS - 1):
        trust.check("a", True, True)
    assert trust.state("a") == "unknown"
    # An unmoved hint on an unchanged page tells nothing, and is not counted.
    assert trust.check("a", False, False) is None
    assert trust.state("a") == "unknown"
    assert trust.check("a", True, True) is True
    assert trust.state("a") == "trusted"
    for _ in range(4):
        trust.check("a", True, False)
    assert trust.state("a") in ("unknown", "distrusted")


def test_a_liar_on_pages_that_seldom_change_is_not_trusted() -> None:
    """Its unmoved hints agree with most fetches (the pages did not change), but only the
    changes it missed count: counting every agreement would trust it and defer its pages."""
    rc, clock = make_recrawler()
    for fp in range(20):
        _visit(rc, fp, "liar.example", TEXT)
    clock.advance(3600)
    for fp in range(20):
        assert rc.hint(fp, f"http://liar.example/{fp}", clock.now - 7200) in ("kept", "ignored")
        _visit(rc, fp, "liar.example", NEW if fp % 7 == 0 else TEXT)  # 3 of 20 changed
    assert rc.trust.state("liar.example") == "distrusted"
    assert rc.counters["signals/checked"] == 3 and rc.counters["signals/wrong"] == 3


def test_an_undecided_hosts_moved_claims_make_a_few_pages_due_per_run() -> None:
    """PROBES_PER_RUN moved hints of a host not decided yet make their pages due; the rest
    are held, so a noisy host's sitemap does not make its every page due at once. Once the
    probes have proved the host right, the held pages are due at once."""
    rc, clock = make_recrawler()
    for fp in range(30):
        _visit(rc, fp, "new.example", TEXT)
    clock.advance(3600)
    hints = [(fp, f"http://new.example/{fp}", clock.now - 60, None) for fp in range(30)]
    outcomes = rc.hint_many(hints)
    probes = outcomes.count("due")
    assert MIN_CHECKS <= probes <= PROBES_PER_RUN  # the first, then one page in eight
    assert outcomes.count("held") == 30 - probes
    due = rc.take_due(100)
    assert len(due) == probes
    for record in due:
        _visit(rc, record.fp, "new.example", NEW)  # the probes find the hinted changes
    assert rc.trust.state("new.example") == "trusted"
    assert "signals/released" not in rc.counters  # not in the visit: by the feed, in batches
    released = rc.take_due(10)
    assert len(released) == 10 and rc.counters["signals/released"] == 10
    released += rc.take_due(100)
    assert rc.counters["signals/released"] == 30 - probes
    assert sorted(r.fp for r in released) == sorted(set(range(30)) - {r.fp for r in due})


def test_a_noisy_hosts_held_claims_are_dropped_once_its_probes_find_it_out() -> None:
    rc, clock = make_recrawler()
    for fp in range(30):
        _visit(rc, fp, "noisy.example", TEXT)
    clock.advance(3600)
    rc.hint_many([(fp, f"http://noisy.example/{fp}", clock.now, None) for fp in range(30)])
    for record in rc.take_due(100):
        _visit(rc, record.fp, "noisy.example", TEXT)  # nothing changed
    assert rc.trust.state("noisy.example") == "distrusted"
    assert "signals/released" not in rc.counters and rc.take_due(100) == []


def test_a_claim_survives_the_store_as_json() -> None:
    from scrapy_frontier.core.history import PageRecord

    record = PageRecord(fp=1, url="http://a.example/", hinted_change=1234.5)
    assert PageRecord.from_json(1, record.to_json()).hinted_change == 1234.5
    assert PageRecord.from_json(1, PageRecord(fp=1, url="u").to_json()).hinted_change is None


def test_a_host_found_out_stays_found_out_in_the_next_run() -> None:
    rc, clock = make_recrawler()
    _check_many(rc, clock, "noisy.example", claims_move=True, pages_change=False, rounds=6)
    assert rc.trust.state("noisy.example") == "distrusted"
    rc.store.flush()
    again = Recrawler(rc.settings, rc.store, clock=clock)
    assert again.trust.state("noisy.example") == "distrusted"
    clock.advance(3600)
    assert again.hint(0, "http://noisy.example/0", clock.now) == "ignored"


def test_a_trusted_claim_stands_in_for_a_missing_last_modified() -> None:
    rc, clock = make_recrawler()
    _check_many(rc, clock, "true.example", claims_move=True, pages_change=True, rounds=5)
    assert rc.trust.state("true.example") == "trusted"
    clock.advance(3600)
    when = clock.now - 120
    assert rc.hint(0, "http://true.example/0", when) == "due"
    _visit(rc, 0, "true.example", TEXT + " changed")  # the visit sends no Last-Modified
    record = rc.store.get(0)
    assert record is not None and record.history.last_modified[-1] == when
    # An untrusted host's hint is not used so.
    rc2, clock2 = make_recrawler()
    _visit(rc2, 1, "new.example", TEXT)
    clock2.advance(3600)
    rc2.hint(1, "http://new.example/1", clock2.now - 120)
    _visit(rc2, 1, "new.example", NEW)
    other = rc2.store.get(1)
    assert other is not None and other.history.last_modified[-1] is None


def test_a_sitemaps_changefreq_is_a_new_pages_first_interval_when_sooner() -> None:
    rc, clock = make_recrawler()
    assert rc.hint(7, "http://a.example/7", None, 3600.0) == "seeded"
    assert rc.hint(8, "http://a.example/8", clock.now, float("inf")) == "unknown"  # never
    _visit(rc, 7, "a.example", TEXT)
    _visit(rc, 8, "a.example", TEXT)
    seven, eight = rc.store.get(7), rc.store.get(8)
    assert seven is not None and eight is not None
    assert seven.history.interval == 3600.0 and seven.next_due == clock.now + 3600.0
    assert eight.history.interval == DAY  # FRONTIER_RECRAWL_INITIAL
    # Clamped like any interval: FRONTIER_RECRAWL_MIN is 60 s here.
    rc.hint(9, "http://a.example/9", None, 1.0)
    _visit(rc, 9, "a.example", TEXT)
    nine = rc.store.get(9)
    assert nine is not None and nine.history.interval == 60.0
    # Never later than FRONTIER_RECRAWL_INITIAL (a day here): a "monthly" that is wrong
    # must not hide a page for a month.
    rc.hint(10, "http://a.example/10", None, 30 * DAY)
    _visit(rc, 10, "a.example", TEXT)
    ten = rc.store.get(10)
    assert ten is not None and ten.history.interval == DAY


def test_trust_counts_by_state_follow_every_check() -> None:
    import random

    rng = random.Random(5)
    trust = HintTrust({"old.example": (9, 0)})
    for _ in range(400):
        host = f"h{rng.randrange(12)}.example"
        trust.check(host, rng.random() < 0.5, rng.random() < 0.7)
    truth = {"trusted": 0, "distrusted": 0, "unknown": 0}
    for host in trust.hosts:
        truth[trust.state(host)] += 1
    assert trust.counts == truth and truth["trusted"] >= 1


def test_a_claim_read_again_unchanged_writes_nothing() -> None:
    rc, clock = make_recrawler()
    _visit(rc, 1, "a.example", TEXT)
    clock.advance(3600)
    assert rc.hint(1, "http://a.example/1", clock.now - 7200) == "kept"
    puts = rc._puts
    assert rc.hint(1, "http://a.example/1", clock.now - 7200) == "kept"
    assert rc._puts == puts
    assert rc.hint(1, "http://a.example/1", clock.now - 10) == "due"
    assert rc._puts == puts + 1


def test_claims_read_together_end_as_claims_read_one_by_one() -> None:
    """hint_many (one read of the page records) against hint (one read each), on the
    same history: same outcomes, same records, a page hinted twice in one batch too."""
    results = []
    for together in (False, True):
        rc, clock = make_recrawler()
        _check_many(rc, clock, "true.example", claims_move=True, pages_change=True,
                    rounds=MIN_CHECKS + 2)  # trusted: unmoved hints defer
        for fp in (20, 21, 22):
            _visit(rc, fp, "true.example", TEXT)
        clock.advance(600)
        hints = [(20, "http://true.example/20", clock.now - 30, None),       # moved
                  (21, "http://true.example/21", clock.now - 7200, None),     # unmoved
                  (21, "http://true.example/21", clock.now - 7200, None),     # again
                  (22, "http://true.example/22", clock.now - 30, None),
                  (22, "http://true.example/22", clock.now - 7200, None),     # older
                  (77, "http://true.example/77", None, 3600.0),               # never seen
                  (78, "http://true.example/78", clock.now, None)]
        outcomes = (rc.hint_many(hints) if together
                    else [rc.hint(*hint) for hint in hints])
        records = {fp: (r.to_json() if (r := rc.store.get(fp)) else None)
                   for fp in (20, 21, 22, 77, 78)}
        results.append((outcomes, records, dict(rc.counters)))
    assert results[0] == results[1]
    # The older hint for 22 does not undo the newer one before it.
    assert results[1][0] == ["due", "deferred", "kept", "due", "due", "seeded", "unknown"]
    assert [r.fp for r in rc.take_due(10)] == [20, 22]


def test_a_change_after_the_claim_was_read_is_no_miss() -> None:
    """A sitemap read, its pages fetched a while later: a page that changed in between (its
    Last-Modified is after the read) was not missed by the hint; one whose Last-Modified is
    before the read was."""
    from email.utils import formatdate

    rc, clock = make_recrawler()
    _visit(rc, 1, "a.example", TEXT)
    _visit(rc, 2, "a.example", TEXT)
    clock.advance(3600)
    read = clock.now
    assert rc.hint(1, "http://a.example/1", read - 7200) == "kept"
    assert rc.hint(2, "http://a.example/2", read - 7200) == "kept"
    clock.advance(60)
    after, before = formatdate(read + 30, usegmt=True), formatdate(read - 600, usegmt=True)
    rc.visited(1, "http://a.example/1", replace(page(NEW), last_modified=after))
    assert "signals/checked" not in rc.counters
    rc.visited(2, "http://a.example/2", replace(page(NEW), last_modified=before))
    assert rc.counters["signals/checked"] == 1 and rc.counters["signals/wrong"] == 1
