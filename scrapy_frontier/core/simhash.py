"""Did the page really change? Exact digests and 64-bit simhash.

An exact digest changes with every timestamp, counter or markup tweak; most measured
changes are of that kind (Fetterly et al. 2003). A simhash (Charikar 2002; used for
near-duplicates by Manku et al. 2007) of the page's word shingles moves only a few
bits for a small edit: pages within Hamming distance 3 are treated as the same.

Each distinct word is hashed once with BLAKE2b (8-byte digests), not Python's
per-process salted ``hash()``, so a simhash stored by one process compares with one
made by another. A shingle's hash combines its words' hashes (a polynomial over
2**64, then the SplitMix64 finaliser so every bit depends on every word), and the
per-bit votes are counted with numpy, imported at the first simhash (a crawl without
the page history never imports it). docs/design.rst gives the times with and without it.
:func:`simhash_reference` is the same function in plain Python, for tests.

:data:`SIMHASH_VERSION` names the function, and is stored beside each simhash:
simhashes of different versions do not compare.
"""

from __future__ import annotations

import re
from hashlib import blake2b
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SIMHASH_VERSION", "hamming", "is_change", "simhash", "simhash_reference", "tokens"]

#: This module's function (word hashes combined per shingle).
SIMHASH_VERSION = 1

_WORD = re.compile(r"\w+")
_MASK = (1 << 64) - 1
# Odd multipliers: the polynomial step and SplitMix64's finaliser (Steele et al. 2014).
_STEP = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
#: Word hashes kept across pages (a site repeats its vocabulary); cleared when full.
_WORD_CACHE_MAX = 200_000
_word_cache: dict[str, int] = {}


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (runs of Unicode letters, digits and underscores)."""
    return _WORD.findall(text.lower())


def _word_hash(word: str) -> int:
    h = _word_cache.get(word)
    if h is None:
        if len(_word_cache) >= _WORD_CACHE_MAX:
            _word_cache.clear()
        h = int.from_bytes(blake2b(word.encode(), digest_size=8).digest(), "big")
        _word_cache[word] = h
    return h


def _check(shingle: int) -> None:
    if shingle < 1:
        raise ValueError(f"shingle must be >= 1, got {shingle}")


def simhash(text: str, shingle: int = 3) -> int:
    """The 64-bit simhash of ``text``'s ``shingle``-word shingles.

    Every shingle (each occurrence counts) votes +1 for the bits set in its 64-bit
    hash and -1 for the others; bit ``i`` of the result is 1 when the shingles with
    bit ``i`` set are a strict majority. A text shorter than ``shingle`` words is
    one shingle; an empty text hashes to 0.
    """
    _check(shingle)
    words = tokens(text)
    if not words:
        return 0
    import numpy as np  # a dict lookup once imported

    lookup = _word_cache.get
    hashes = np.fromiter(
        (h if (h := lookup(w)) is not None else _word_hash(w) for w in words),
        dtype=np.uint64, count=len(words),
    )
    width = min(shingle, len(words))
    n = len(words) - width + 1
    acc = hashes[:n].copy()
    step = np.uint64(_STEP)
    for k in range(1, width):
        acc *= step
        acc += hashes[k:k + n]
    acc = _finalise(np, acc)
    # Big-endian bytes, so column 0 of the unpacked bits is bit 63 on every platform.
    bits = np.unpackbits(acc.astype(">u8").view(np.uint8).reshape(n, 8), axis=1)
    ones = bits.sum(axis=0, dtype=np.int64)
    packed = np.packbits(2 * ones > n)
    return int.from_bytes(packed.tobytes(), "big")


def _finalise(np: Any, x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x *= np.uint64(_MIX1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(_MIX2)
    x ^= x >> np.uint64(31)
    return x


def simhash_reference(text: str, shingle: int = 3) -> int:
    """:func:`simhash` in plain Python (slow): the definition the fast one must match."""
    _check(shingle)
    words = tokens(text)
    if not words:
        return 0
    hashes = [int.from_bytes(blake2b(w.encode(), digest_size=8).digest(), "big") for w in words]
    width = min(shingle, len(words))
    n = len(words) - width + 1
    votes = [0] * 64
    for i in range(n):
        h = hashes[i]
        for k in range(1, width):
            h = (h * _STEP + hashes[i + k]) & _MASK
        h ^= h >> 30
        h = (h * _MIX1) & _MASK
        h ^= h >> 27
        h = (h * _MIX2) & _MASK
        h ^= h >> 31
        for bit in range(64):
            votes[bit] += (h >> bit) & 1
    return sum(1 << bit for bit in range(64) if 2 * votes[bit] > n)


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
