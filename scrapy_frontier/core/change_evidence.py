"""What a visit proves about whether a page changed *at all*: the evidence a hint is
checked against (``core/hint_trust.py`` counts the checks).

A sitemap's ``<lastmod>`` says that a page changed, not that it changed meaningfully: a
one-word edit moves the simhash a bit or two, under ``FRONTIER_CHANGE_THRESHOLD``, and is
still a change the lastmod rightly reports. So a hint is checked against an exact answer to
"did the bytes change since the last full visit?", not against the recrawl's "did the page
change meaningfully?" (which still sets its schedule):

``SAME``
    The page did not change: a 304, the same body digest, or a different body under the
    same validator (ETag, else Last-Modified) as the last full response: the server's own
    version did not move, so the difference is noise (and the page is *noisy*).
``CHANGED``
    The page changed: a different body on a page whose bytes are known to repeat (or whose
    validator moved with them), or a meaningful change (past the threshold) on a page not
    known to be noisy. With ``FRONTIER_CHANGE_EXACT`` every byte is meaningful.
``CHANGED_OR_NOISE``
    A small difference (under the threshold) with no validator to tell, on a page not known
    to be noisy yet: a small edit, or a timestamp. It confirms a hint that the page changed
    (if it was noise, the page's next visit shows it) but does not refute one that it did not:
    on a noisy page a truthful host would look like a liar.
``UNKNOWN``
    A noisy page's body changed: its bytes change on every visit, whatever the content
    does, and even its text may move past the threshold by noise alone. Its hints are
    not evidence either way (a 304 or the same validator still is: ``SAME``).

A page is *noisy* once a different body came under the same validator, or once its body
differed on ``NOISY_AFTER`` visits in a row while its text stayed under the threshold. A
visit that finds the same bytes again makes it *stable*, so a later small difference is a
change. The state is kept in the page's record (``PageRecord.noise``).
"""

from __future__ import annotations

from enum import Enum

#: Small differences in a row after which a page is noisy.
NOISY_AFTER = 2
#: ``PageRecord.noise`` of a page whose bytes were seen to repeat.
STABLE = -1


class Evidence(Enum):
    SAME = "same"
    CHANGED = "changed"
    CHANGED_OR_NOISE = "changed_or_noise"
    UNKNOWN = "unknown"


def same_validator(old_etag: str | None, old_modified: str | None, etag: str | None,
                   modified: str | None) -> bool | None:
    """Whether the server's version of the page is the one of the last full response: by
    the ETag (weak comparison) when both responses have one, else by the Last-Modified;
    None when neither is on both."""
    if old_etag and etag:
        return old_etag.removeprefix("W/") == etag.removeprefix("W/")
    if old_modified and modified:
        return old_modified.strip() == modified.strip()
    return None


def full_visit(noise: int, *, same_bytes: bool, meaningful: bool,
               validator: bool | None) -> tuple[Evidence, int]:
    """The evidence of a 200 that followed a full visit, and the page's new noise state.

    ``noise``: the page's state (``STABLE``, 0 not known, or the small differences in a
    row); ``same_bytes``: the body digest is the last one; ``meaningful``: the recrawl's
    change (past the threshold, or any byte with FRONTIER_CHANGE_EXACT); ``validator``:
    :func:`same_validator`."""
    if same_bytes:
        return Evidence.SAME, STABLE
    if meaningful:
        return (Evidence.UNKNOWN if noise >= NOISY_AFTER else Evidence.CHANGED), noise
    if validator:
        return Evidence.SAME, max(noise, NOISY_AFTER)  # new bytes, same version: noise
    small = max(noise, 0) + 1
    if small >= NOISY_AFTER:
        return Evidence.UNKNOWN, small
    if validator is False or noise == STABLE:
        return Evidence.CHANGED, small
    return Evidence.CHANGED_OR_NOISE, small


def found_change(hinted_changed: bool, evidence: Evidence) -> bool | None:
    """What the visit found to check a hint against: changed or not; None when this
    evidence cannot judge that hint."""
    if evidence is Evidence.SAME:
        return False
    if evidence is Evidence.CHANGED:
        return True
    if evidence is Evidence.CHANGED_OR_NOISE and hinted_changed:
        return True
    return None
