"""The robots.txt records in Redis: one key per origin under the crawl's prefix, which
Redis expires by itself."""

from __future__ import annotations

import redis

from scrapy_frontier.backends.redis.robots import RedisRobots


def test_a_record_is_one_key_that_redis_expires(redis_client: redis.Redis,
                                               redis_prefix: str) -> None:
    robots = RedisRobots(redis_client, redis_prefix)
    assert robots.get("http://a.example:81") is None
    robots.put("http://a.example:81", b"robots1 200 1.0\nDisallow: /", 60.0)
    key = f"{redis_prefix}robots:http://a.example:81"
    assert redis_client.get(key) == b"robots1 200 1.0\nDisallow: /"
    assert 0 < redis_client.pttl(key) <= 60_000
    assert robots.get("http://a.example:81") == b"robots1 200 1.0\nDisallow: /"
    robots.put("http://a.example:81", b"robots1 404 2.0\n", 0.0001)  # at least 1 ms
    assert redis_client.pttl(key) <= 1  # -2: gone already
