"""The crawler-trap detector (core/traps.py): URL shapes, the yield window, the growth of the
URLs, containment once, restored states, bounded memory."""

from __future__ import annotations

import random

import pytest

from scrapy_frontier.core.traps import TrapConfig, TrapDetector, url_shape

CONFIG = TrapConfig(window=20, min_yield=0.1, allowance=5, near_bits=8, max_hosts=3)


def far(rng: random.Random) -> int:
    return rng.getrandbits(64)


def near(base: int, rng: random.Random, bits: int = 3) -> int:
    for i in rng.sample(range(64), bits):
        base ^= 1 << i
    return base


def test_a_url_shape_blanks_numbers_and_ids_and_drops_query_values() -> None:
    shape = url_shape("http://h/cal/2026/05/17?view=day&sid=abc")
    assert shape.text == "/cal/#/#/#?sid&view"
    assert shape.depth == 4
    assert shape.session_keys == ("sid",)
    assert shape.parts == (("/cal/#/#/#@0", "2026"), ("/cal/#/#/#@1", "05"),
                           ("/cal/#/#/#@2", "17"), ("?sid", "abc"), ("?view", "day"))
    assert url_shape("http://h/item/deadbeef42/x").text == "/item/{id}/x"
    assert url_shape("http://h/page-12.html").text == "/page-#.html"
    assert url_shape("http://h/a;jsessionid=XYZ/b").session_keys == ("jsessionid",)
    assert url_shape("http://h/a/b/a/b/a").repeats == 3
    deep = url_shape("http://h/" + "/".join("abcdefghijk"))
    assert deep.text.endswith("/...") and deep.depth == 11


def test_a_host_of_new_pages_is_never_contained() -> None:
    rng = random.Random(1)
    detector = TrapDetector(CONFIG)
    for i in range(500):
        assert detector.observe("normal", f"http://normal/p/{i}", far(rng)) is None
    assert not detector.contained


def test_near_duplicates_under_one_shape_are_contained_once_with_evidence() -> None:
    rng = random.Random(2)
    detector = TrapDetector(CONFIG)
    base = far(rng)
    found = [detector.observe("cal", f"http://cal/cal/2026/1/{i}?sid=x{i}", near(base, rng))
             for i in range(60)]
    hits = [f for f in found if f is not None]
    assert len(hits) == 1
    hit = hits[0]
    assert found.index(hit) == CONFIG.window - 1  # as soon as the window is full
    assert hit.host == "cal" and hit.pages == CONFIG.window and hit.window == CONFIG.window
    assert hit.new <= 2 and hit.near_duplicates >= CONFIG.window - 1
    assert hit.shapes == 1 and hit.top_shape == "/cal/#/#/#?sid"
    assert hit.session_keys == ("sid",)
    text = hit.evidence()
    assert "near-duplicates" in text and "/cal/#/#/#?sid" in text and "sid" in text
    assert "cal" in detector.contained and detector.tracked == 0


def test_near_duplicates_under_new_shapes_are_new_pages() -> None:
    """Hand-named pages sharing a template (about, contact, ...) are new by their shape."""
    rng = random.Random(3)
    detector = TrapDetector(CONFIG)
    base = far(rng)
    for _ in range(100):
        name = "".join(rng.choice("abcdefghij") for _ in range(12))
        assert detector.observe("site", f"http://site/{name}", near(base, rng)) is None


@pytest.mark.parametrize(("lanes", "contained"), [((1, 2, 4, 8, 16), False),
                                                   (tuple(range(1, 21)), True)])
def test_near_duplicates_are_a_trap_only_if_a_part_of_their_urls_grows(
        lanes: tuple[int, ...], contained: bool) -> None:
    """Generated API documentation: short pages of one template under a few shapes, whose
    variable parts take a few values each (``fn.vadd_s8x16``, ``_s16x8``, ...); the same pages
    with a part that takes many values are a trap."""
    rng = random.Random(7)
    detector = TrapDetector(CONFIG)
    base = far(rng)
    urls = [f"http://docs/fn.v{op}_s{bits}x{n}.html" for op in ("add", "sub", "mul", "min")
            for bits in (8, 16, 32, 64) for n in lanes]
    found = [detector.observe("docs", url, near(base, rng)) for url in urls]
    assert any(found) is contained
    assert ("docs" in detector.contained) is contained


def test_a_token_in_every_link_is_growth_whatever_its_key() -> None:
    rng = random.Random(8)
    detector = TrapDetector(CONFIG)
    base = far(rng)
    pages = ("home", "news", "faq", "jobs")
    found = [detector.observe("s", f"http://s/{pages[i % 4]}?t={rng.getrandbits(48):x}",
                              near(base, rng)) for i in range(40)]
    hit = next(f for f in found if f is not None)
    assert hit.variety >= CONFIG.window // 3 and not hit.session_keys
    assert "values of one part of the URLs" in hit.evidence()


def test_a_host_whose_yield_falls_is_contained_after_the_window_moves_on() -> None:
    rng = random.Random(4)
    detector = TrapDetector(CONFIG)
    for i in range(30):  # a normal start
        assert detector.observe("h", f"http://h/p/{i}", far(rng)) is None
    base = far(rng)
    found = None
    for i in range(40):
        found = found or detector.observe("h", f"http://h/counter/{i}", near(base, rng, 1))
    assert found is not None and found.pages > CONFIG.window


def test_released_and_restored_hosts_are_not_judged() -> None:
    rng = random.Random(5)
    detector = TrapDetector(CONFIG)
    base = far(rng)
    detector.restore("kept", "contained")
    detector.restore("freed", "released")
    for host in ("kept", "freed"):
        for i in range(60):
            assert detector.observe(host, f"http://{host}/c/{i}", near(base, rng)) is None
    detector.restore("kept", "released")  # an operator took it back
    assert "kept" in detector.released and "kept" not in detector.contained
    detector.restore("freed", "contained")  # a released host stays released
    assert "freed" not in detector.contained


def test_only_the_most_recently_fetched_hosts_keep_a_window() -> None:
    rng = random.Random(6)
    detector = TrapDetector(CONFIG)
    for i in range(10):
        detector.observe(f"h{i}", f"http://h{i}/", far(rng))
    assert detector.tracked == CONFIG.max_hosts


def test_the_window_must_hold_a_page() -> None:
    with pytest.raises(ValueError):
        TrapDetector(TrapConfig(window=0))
