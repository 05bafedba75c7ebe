"""The one 64-bit request fingerprint the seen-set, the page history and Redis share."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.request import fingerprint as scrapy_fingerprint

from scrapy_frontier.core.seen import fingerprint64
from scrapy_frontier.hostkey import PLAIN_URL

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinterProtocol


class Fingerprinter64:
    """``fp64(request)``: the 64-bit fingerprint of a request, computed the same way
    by the dupe filter, the scheduler, the page history and the Redis seen set.

    Scrapy's own fingerprinter makes SHA1 digests: their first 8 bytes are
    already uniform. Any other may return structured bytes (a URL, say), whose
    first 8 bytes would collide: those are hashed down to 8 bytes. Scrapy's
    default fingerprinter, unmodified, lets plain URLs take a shortcut that
    gives the very same digest (see :func:`fast_fingerprint`).
    """

    __slots__ = ("_digest", "_fast", "fingerprinter")

    def __init__(self, fingerprinter: RequestFingerprinterProtocol | None = None) -> None:
        self.fingerprinter: RequestFingerprinterProtocol = (
            fingerprinter if fingerprinter is not None else RequestFingerprinter()
        )
        self._digest = type(self.fingerprinter) is RequestFingerprinter
        self._fast = self._digest and (
            getattr(self.fingerprinter, "_fingerprint", None) is scrapy_fingerprint
        )

    def __call__(self, request: Request) -> int:
        fp = fast_fingerprint(request) if self._fast else None
        if fp is None:
            fp = self.fingerprinter.fingerprint(request)
            if not self._digest:
                fp = hashlib.blake2b(fp, digest_size=8).digest()
        return fingerprint64(fp)



def fast_fingerprint(request: Request) -> bytes | None:
    """Scrapy's default request fingerprint for a plain GET of an already
    canonical URL, without canonicalising it again; None for any other request.

    The digest is the SHA1 of the same JSON document Scrapy's
    :func:`scrapy.utils.request.fingerprint` hashes (``json.dumps`` with sorted
    keys; such a URL needs no escaping). ``verbatim_url`` and ``keep_fragments``
    cannot change it: the URL is canonical and has no fragment. Most of the
    enqueue time of a plain request otherwise goes into ``canonicalize_url``.
    """
    url = request.url
    if request.method != "GET" or request.body or not PLAIN_URL.fullmatch(url):
        return None
    doc = '{"body": "", "headers": {}, "method": "GET", "url": "' + url + '"}'
    return hashlib.sha1(doc.encode()).digest()  # noqa: S324 -- Scrapy's digest, not security


def occurrence_key(fp: int, n: int) -> int:
    """A 64-bit key for the ``n``-th repeat (n >= 1) of a start URL of fingerprint ``fp``
    in one worker: the shared seen set then lets through as many copies as one spider
    lists, however many workers list them."""
    data = (fp & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big") + n.to_bytes(8, "big")
    return fingerprint64(hashlib.blake2b(data, digest_size=8, person=b"frontier-start").digest())
