"""Did the page really change? Exact digests and 64-bit simhash.

An exact digest changes with every timestamp, counter or markup tweak; most measured
changes are of that kind (Fetterly et al. 2003). A simhash (Charikar 2002; used for
near-duplicates by Manku et al. 2007) of the page's word shingles moves only a few
bits for a small edit: pages within Hamming distance 3 are treated as the same.

Hashes come from BLAKE2b (8-byte digests), not Python's per-process salted
``hash()``, so a simhash stored by one process compares with one made by another.
"""

from __future__ import annotations

import re
from hashlib import blake2b

__all__ = ["hamming", "is_change", "simhash", "tokens"]

_WORD = re.compile(r"\w+")
_MASK = (1 << 64) - 1


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (runs of Unicode letters, digits and underscores)."""
    return _WORD.findall(text.lower())


def simhash(text: str, shingle: int = 3) -> int:
    """The 64-bit simhash of ``text``'s ``shingle``-word shingles.

    Every shingle (each occurrence counts) votes +1 for the bits set in its 64-bit
    BLAKE2b hash and -1 for the others; bit ``i`` of the result is 1 when the
    shingles with bit ``i`` set are a strict majority. A text shorter than
    ``shingle`` words is one shingle; an empty text hashes to 0.

    The per-bit counts are taken with string slicing over the concatenated binary
    forms of the hashes, so a 100 KB text takes a few tens of milliseconds.
    """
    if shingle < 1:
        raise ValueError(f"shingle must be >= 1, got {shingle}")
    words = tokens(text)
    if not words:
        return 0
    if len(words) <= shingle:
        features = [" ".join(words)]
    else:
        features = [" ".join(words[i : i + shingle]) for i in range(len(words) - shingle + 1)]
    bits = "".join(
        format(int.from_bytes(blake2b(f.encode(), digest_size=8).digest(), "big"), "064b")
        for f in features
    )
    n = len(features)
    # bits[i::64] is column i of the hashes (bit 63 - i): count its ones.
    out = "".join("1" if 2 * bits[i::64].count("1") > n else "0" for i in range(64))
    return int(out, 2)


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit values."""
    return ((a ^ b) & _MASK).bit_count()


def is_change(
    old_digest: bytes | str | None,
    new_digest: bytes | str | None,
    old_simhash: int | None = None,
    new_simhash: int | None = None,
    threshold: int = 3,
    exact: bool = False,
) -> bool:
    """Whether a visit saw a change worth counting.

    * nothing old to compare with (no old digest and no old simhash, a first
      visit): not a change;
    * equal digests: not a change;
    * ``exact=True``, or a simhash missing on either side: any digest difference
      is a change;
    * otherwise a change only if the simhashes differ in more than ``threshold``
      bits (Manku et al.: 3 for 64-bit simhashes), so near-identical pages
      (a new timestamp, a counter) do not count.
    """
    if old_digest is None and old_simhash is None:
        return False
    if old_digest is not None and old_digest == new_digest:
        return False
    if exact or old_simhash is None or new_simhash is None:
        return old_digest != new_digest
    return hamming(old_simhash, new_simhash) > threshold
