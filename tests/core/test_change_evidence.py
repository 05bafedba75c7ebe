"""Hints checked against whether a page changed at all: small edits, noisy pages, validators
(core/change_evidence.py, and the Recrawler's checks on the fake clock)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scrapy_frontier.core import FakeClock
from scrapy_frontier.core.change_evidence import (
    NOISY_AFTER,
    STABLE,
    Evidence,
    found_change,
    full_visit,
    same_validator,
)
from scrapy_frontier.core.recrawl import Recrawler, Visit
from scrapy_frontier.core.simhash import hamming, simhash
from tests.core.test_recrawl import make_recrawler, page

WORDS = [f"word{i}" for i in range(1300)]
TEXT = " ".join(WORDS)


def edited(k: int) -> str:
    """TEXT after k one-word edits (a small change: a few simhash bits)."""
    words = list(WORDS)
    for i in range(1, k + 1):
        words[97 * i % len(words)] = f"revision{i}"
    return " ".join(words)


def stamped(text: str, n: int) -> str:
    return f"{text} generated for request {n}"


def test_the_test_texts_are_what_they_say() -> None:
    """The premise: an edit and a stamp move the simhash by no more than the threshold."""
    for other in (edited(1), edited(2), stamped(TEXT, 1), stamped(edited(1), 2)):
        assert hamming(simhash(TEXT), simhash(other)) <= 3, other[-40:]
    assert hamming(simhash(stamped(TEXT, 1)), simhash(stamped(TEXT, 2))) <= 3


@pytest.mark.parametrize(("etags", "modified", "same"), [
    (('"a"', '"a"'), (None, None), True),
    (('W/"a"', '"a"'), (None, None), True),
    (('"a"', '"b"'), ("d1", "d1"), False),  # the ETag decides when both have one
    ((None, '"b"'), ("d1", "d1"), True),
    ((None, None), ("d1", "d2"), False),
    ((None, None), ("d1", None), None),
    ((None, None), (None, None), None),
])
def test_same_validator(etags: tuple[str | None, str | None],
                        modified: tuple[str | None, str | None], same: bool | None) -> None:
    assert same_validator(etags[0], modified[0], etags[1], modified[1]) is same


def test_the_evidence_of_a_full_visit() -> None:
    # Same bytes: unchanged, and the page's bytes repeat.
    assert full_visit(0, same_bytes=True, meaningful=False, validator=None) == (
        Evidence.SAME, STABLE)
    # A meaningful change is a change, unless the page is noisy.
    assert full_visit(0, same_bytes=False, meaningful=True, validator=None) == (
        Evidence.CHANGED, 0)
    assert full_visit(NOISY_AFTER, same_bytes=False, meaningful=True, validator=False)[0] \
        is Evidence.UNKNOWN
    # New bytes under the same validator: noise, proven.
    assert full_visit(0, same_bytes=False, meaningful=False, validator=True) == (
        Evidence.SAME, NOISY_AFTER)
    # A small difference: a change when the validator moved or the bytes were seen to
    # repeat; "changed or noise" when nothing tells; noisy once it happens NOISY_AFTER
    # times in a row.
    assert full_visit(0, same_bytes=False, meaningful=False, validator=False) == (
        Evidence.CHANGED, 1)
    assert full_visit(STABLE, same_bytes=False, meaningful=False, validator=None) == (
        Evidence.CHANGED, 1)
    assert full_visit(0, same_bytes=False, meaningful=False, validator=None) == (
        Evidence.CHANGED_OR_NOISE, 1)
    assert full_visit(NOISY_AFTER - 1, same_bytes=False, meaningful=False,
                      validator=False) == (Evidence.UNKNOWN, NOISY_AFTER)


def test_what_each_evidence_judges() -> None:
    for hinted in (True, False):
        assert found_change(hinted, Evidence.SAME) is False
        assert found_change(hinted, Evidence.CHANGED) is True
        assert found_change(hinted, Evidence.UNKNOWN) is None
    # Noise may be a small edit: it confirms "changed", and cannot refute "not changed".
    assert found_change(True, Evidence.CHANGED_OR_NOISE) is True
    assert found_change(False, Evidence.CHANGED_OR_NOISE) is None


def _visit(rc: Recrawler, fp: int, text: str, etag: str | None = None,
           last_modified: str | None = None) -> None:
    rc.visited(fp, f"http://{_HOST}/{fp}",
               replace(page(text), etag=etag, last_modified=last_modified))


_HOST = "h.example"


def _hint(rc: Recrawler, clock: FakeClock, fp: int, moved: bool) -> None:
    record = rc.store.get(fp)
    assert record is not None
    when = clock.now - 10 if moved else record.fetched_at - 3600
    rc.hint(fp, f"http://{_HOST}/{fp}", when)


def test_a_truthful_host_whose_pages_change_by_small_edits_is_trusted() -> None:
    """Each edit is under the threshold: the recrawl sees no change, the hints are right."""
    rc, clock = make_recrawler()
    for fp in range(6):
        _visit(rc, fp, TEXT, etag='"v0"')
    clock.advance(3600)
    for fp in range(6):
        _hint(rc, clock, fp, moved=True)
        _visit(rc, fp, edited(1), etag='"v1"')
    assert "recrawl/pages_changed" not in rc.counters  # the schedule's view is unchanged
    assert rc.counters["signals/checked"] == 6 and "signals/wrong" not in rc.counters
    assert rc.trust.state(_HOST) == "trusted"


def test_a_liar_is_found_out_by_small_edits_it_hid_and_by_edits_it_made_up() -> None:
    rc, clock = make_recrawler()
    for fp in range(8):
        _visit(rc, fp, TEXT, etag='"v0"')
    clock.advance(3600)
    for fp in range(4):  # edited, the hint did not move
        _hint(rc, clock, fp, moved=False)
        _visit(rc, fp, edited(1), etag='"v1"')
    for fp in range(4, 8):  # the hint moved, nothing changed (a 304)
        _hint(rc, clock, fp, moved=True)
        rc.not_modified(fp, f"http://{_HOST}/{fp}", Visit(status=304))
    assert rc.counters["signals/wrong"] == 8
    assert rc.trust.state(_HOST) == "distrusted"


def test_noisy_pages_do_not_make_a_truthful_host_a_liar() -> None:
    """Pages with a timestamp and no validators: their bytes differ on every visit. An
    unmoved hint is not refuted by that; a moved one is confirmed by the edit; once a page
    is known noisy its hints tell nothing."""
    rc, clock = make_recrawler()
    for fp in range(10):
        _visit(rc, fp, stamped(TEXT, 1))
    for n in (2, 3):
        clock.advance(3600)
        for fp in range(10):
            edit = fp < 3  # three pages edited before each visit, the hint true
            _hint(rc, clock, fp, moved=edit)
            _visit(rc, fp, stamped(edited(n - 1) if edit else TEXT, n))
    assert "signals/wrong" not in rc.counters
    assert rc.counters["signals/checked"] == 3  # the edits of the first round
    assert rc.counters["signals/unjudged"] == 17  # noise, then noisy pages
    assert rc.trust.state(_HOST) == "trusted"
    noisy = rc.store.get(5)
    assert noisy is not None and noisy.noise >= NOISY_AFTER


def test_a_noisy_page_under_a_stable_validator_still_judges_hints() -> None:
    """The server's Last-Modified did not move while the bytes did: noise, and an exact
    "not changed" (as its 304 would say), so a hint that it changed is wrong."""
    rc, clock = make_recrawler()
    modified = "Mon, 07 Dec 2026 10:00:00 GMT"
    _visit(rc, 1, stamped(TEXT, 1), last_modified=modified)
    clock.advance(3600)
    _hint(rc, clock, 1, moved=True)
    _visit(rc, 1, stamped(TEXT, 2), last_modified=modified)
    assert rc.counters["signals/wrong"] == 1
    record = rc.store.get(1)
    assert record is not None and record.noise >= NOISY_AFTER


def test_a_page_seen_to_repeat_makes_a_small_difference_a_change() -> None:
    """No validators: after the same bytes came back once, a small difference is an edit,
    and refutes a hint that did not move."""
    rc, clock = make_recrawler()
    _visit(rc, 1, TEXT)
    clock.advance(3600)
    _visit(rc, 1, TEXT)  # the same bytes: stable
    clock.advance(3600)
    _hint(rc, clock, 1, moved=False)
    _visit(rc, 1, edited(1))
    assert rc.counters["signals/wrong"] == 1


def test_the_noise_state_survives_the_store_as_json() -> None:
    from scrapy_frontier.core.history import PageRecord

    for noise in (STABLE, 0, 1, NOISY_AFTER):
        record = PageRecord(fp=1, url="http://a.example/", noise=noise)
        assert PageRecord.from_json(1, record.to_json()).noise == noise
    assert '"nz"' not in PageRecord(fp=1, url="u").to_json()
