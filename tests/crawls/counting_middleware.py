"""A downloader middleware that counts what it sees, for crawls that check every request
reaches a project's middlewares once per fetch (tests/crawls/test_robots_once.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from scrapy import signals

#: The setting naming the JSON file the counts are written to when the spider closes.
OUT_SETTING = "COUNTING_MIDDLEWARE_OUT"


class CountingMiddleware:
    """Counts ``process_request`` calls per URL, ``process_response`` and
    ``process_exception`` calls (by exception class), as a project's middleware at 543."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.requests: Counter[str] = Counter()
        self.responses: Counter[str] = Counter()
        self.exceptions: Counter[str] = Counter()

    @classmethod
    def from_crawler(cls, crawler: Any) -> CountingMiddleware:
        mw = cls(crawler.settings[OUT_SETTING])
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    def process_request(self, request: Any, spider: Any = None) -> None:
        self.requests[request.url] += 1

    def process_response(self, request: Any, response: Any, spider: Any = None) -> Any:
        self.responses[request.url] += 1
        return response

    def process_exception(self, request: Any, exception: Exception, spider: Any = None) -> None:
        self.exceptions[type(exception).__name__] += 1

    def spider_closed(self, spider: Any) -> None:
        Path(self.out).write_text(json.dumps({
            "requests": self.requests, "responses": self.responses,
            "exceptions": self.exceptions,
        }))
