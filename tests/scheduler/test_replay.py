"""The request a recrawl replays: what is kept with the page's record, and what is not."""

from __future__ import annotations

from typing import Any

import scrapy
from scrapy import Request

from scrapy_frontier.core.history import PageRecord
from scrapy_frontier.meta import LEASE_META, START_META, UNSAFE_META
from scrapy_frontier.scheduler.replay import MAX_REQUEST_BYTES, RequestReplay, replayable


class _Spider(scrapy.Spider):
    name = "replay"

    def parse_item(self, response: Any, section: str) -> None:
        pass

    def failed(self, failure: Any) -> None:
        pass


def _fetched() -> Request:
    """A request as it looks when its response arrives: the spider's fields, plus what
    the frontier and Scrapy's middlewares wrote while fetching it."""
    request = Request("http://a.example/p", callback=_Spider().parse_item,
                      errback=_Spider().failed, cb_kwargs={"section": "linked"},
                      meta={"rule": 1, "chain": ["home"], "depth": 2, LEASE_META: 7,
                            START_META: True, "download_latency": 0.1,
                            "download_slot": "a.example", "redirect_times": 1},
                      headers={"X-Mine": "1", "User-Agent": "ua", "Cookie": "s=1",
                               "If-None-Match": '"x"', "Authorization": "Basic Zm9v"},
                      cookies={"c": "v"}, flags=["f"], priority=3)
    return request


def test_the_spiders_fields_are_kept_and_the_fetchs_are_not() -> None:
    spider = _Spider()
    replay = RequestReplay(spider)
    data = replay.snapshot(_fetched())
    assert data is not None
    back = replay.rebuild(data)
    assert back is not None
    assert back.url == "http://a.example/p"
    assert back.callback == spider.parse_item and back.errback == spider.failed
    assert back.cb_kwargs == {"section": "linked"}
    assert back.meta == {"rule": 1, "chain": ["home"], "depth": 2}
    assert dict(back.headers) == {b"X-Mine": [b"1"]}  # credentials never reach the history
    assert back.cookies == {"c": "v"} and back.flags == ["f"] and back.priority == 3


def test_a_download_slot_the_spider_chose_is_kept() -> None:
    replay = RequestReplay(_Spider())
    data = replay.snapshot(Request("http://a.example/", meta={"download_slot": "group"}))
    assert data is not None
    back = replay.rebuild(data)
    assert back is not None and back.meta == {"download_slot": "group"}


def test_unsafe_methods_only_on_opt_in() -> None:
    assert replayable(Request("http://a.example/")) and replayable(
        Request("http://a.example/", method="HEAD"))
    assert not replayable(Request("http://a.example/", method="POST", body=b"q=1"))
    assert replayable(Request("http://a.example/", method="POST", meta={UNSAFE_META: True}))


def test_a_large_request_is_not_kept() -> None:
    replay = RequestReplay(_Spider())
    big = Request("http://a.example/", body=b"x" * (MAX_REQUEST_BYTES + 1))
    assert replay.snapshot(big) is None
    assert replay.counters == {"recrawl/request_not_kept": 1}


def test_the_kept_request_survives_the_records_json() -> None:
    data = RequestReplay(_Spider()).snapshot(_fetched())
    record = PageRecord(fp=5, url="http://a.example/p", request=data)
    assert PageRecord.from_json(5, record.to_json()).request == data
    assert PageRecord.from_json(5, PageRecord(fp=5, url="u").to_json()).request is None
