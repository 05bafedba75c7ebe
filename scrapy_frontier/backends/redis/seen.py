"""The seen set of a distributed crawl: 64-bit fingerprints in Redis intsets."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import partial
from typing import Any

import redis

from scrapy_frontier.backends.redis.connection import guard, text
from scrapy_frontier.errors import RedisFrontierDataError

SEEN_FORMAT = "scrapy-frontier/redis-seen"



class RedisSeenSet:
    """64-bit fingerprints in bucketed Redis sets of integers (intsets: 8 bytes each).

    The top bits of a fingerprint pick the bucket, so each bucket holds about
    ``expected / buckets`` integers; the bucket count is chosen from ``expected``
    (about 256 per bucket, under Redis's ``set-max-intset-entries`` 512) and
    stored in ``S meta`` the first time: later openers use the stored count.
    """

    PER_BUCKET = 256

    def __init__(self, client: redis.Redis, prefix: str, *, expected: int = 10_000_000,
                 batch: int = 1000) -> None:
        self.client: Any = client
        self.prefix = prefix
        self.batch = batch
        bits = max(0, math.ceil(math.log2(max(1, expected) / self.PER_BUCKET)))
        bits = min(bits, 24)
        meta = prefix + "meta"

        def setup() -> int:
            kind = text(client.type(meta))
            if kind not in ("none", "hash"):
                raise RedisFrontierDataError(
                    f"Redis key {meta!r} is a {kind}, not the seen set's marker hash: pick "
                    "another FRONTIER_REDIS_SEEN_KEY prefix, or move that key away (RENAME)."
                )
            client.hsetnx(meta, "format", SEEN_FORMAT)
            client.hsetnx(meta, "bits", str(bits))
            got = {text(a): text(b) for a, b in client.hgetall(meta).items()}
            if got.get("format") != SEEN_FORMAT:
                raise RedisFrontierDataError(
                    f"{meta!r} says format {got.get('format')!r}, not {SEEN_FORMAT!r}: pick "
                    "another FRONTIER_REDIS_SEEN_KEY prefix; nothing was changed under this one."
                )
            return int(got["bits"])

        self.bits = guard(client, prefix, "opening the seen set", setup)
        self.buckets = 1 << self.bits

    def bucket(self, fp: int) -> tuple[str, int]:
        """(the set key, the member) that hold ``fp``."""
        fp &= 0xFFFF_FFFF_FFFF_FFFF
        bucket = fp >> (64 - self.bits) if self.bits else 0
        signed = fp - (1 << 64) if fp >= 1 << 63 else fp
        return f"{self.prefix}{bucket:x}", signed

    def add_if_new(self, fp: int) -> bool:
        return self.add_many([fp])[0]

    def add_many(self, fps: Iterable[int]) -> list[bool]:
        """Add fingerprints; True for each one not seen before (pipelined in batches)."""
        return self._each(fps, "sadd", "adding fingerprints")

    def contains_many(self, fps: Iterable[int]) -> list[bool]:
        """Whether each fingerprint is in the set (pipelined in batches; changes nothing)."""
        return self._each(fps, "sismember", "testing fingerprints")

    def _each(self, fps: Iterable[int], command: str, doing: str) -> list[bool]:
        """One set command per fingerprint, pipelined in batches of ``self.batch``."""
        fps = list(fps)
        out: list[bool] = []

        def run(chunk: list[int]) -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for fp in chunk:
                getattr(pipe, command)(*self.bucket(fp))
            return pipe.execute()  # type: ignore[no-any-return]

        for i in range(0, len(fps), self.batch):
            chunk = fps[i:i + self.batch]
            out += [bool(x) for x in guard(self.client, self.prefix, doing, partial(run, chunk))]
        return out

    def __contains__(self, fp: int) -> bool:
        key, member = self.bucket(fp)
        return bool(guard(self.client, self.prefix, "testing a fingerprint",
                           lambda: self.client.sismember(key, member)))

    @staticmethod
    def fingerprint(data: bytes) -> int:
        """A 64-bit fingerprint of bytes (e.g. Scrapy's request fingerprint)."""
        import hashlib

        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")

