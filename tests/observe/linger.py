"""A Scrapy extension for tests: keep an idle spider open until the test says so.

With ``LINGER_DIR`` set, the first time the spider is idle (everything fetched) it
writes ``LINGER_DIR/idle`` and stays open until ``LINGER_DIR/done`` appears or
``LINGER_MAX`` seconds (default 30) have passed: a test can then look at the
finished frontier (its metrics endpoint) while the crawl process still runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, NotConfigured


class LingerWhenIdle:
    def __init__(self, directory: str, longest: float) -> None:
        self.dir = Path(directory)
        self.longest = longest
        self.since: float | None = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> LingerWhenIdle:
        directory = crawler.settings.get("LINGER_DIR")
        if not directory:
            raise NotConfigured
        ext = cls(directory, crawler.settings.getfloat("LINGER_MAX", 30.0))
        crawler.signals.connect(ext.idle, signal=signals.spider_idle)
        return ext

    def idle(self, spider: Any) -> None:
        if self.since is None:
            self.since = time.monotonic()
            (self.dir / "idle").write_text("idle")
        if (self.dir / "done").exists() or time.monotonic() - self.since > self.longest:
            return
        raise DontCloseSpider
