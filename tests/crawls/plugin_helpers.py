"""Components the plugin crawls (tests/crawls/test_plugins.py) load by import path."""

from __future__ import annotations

from typing import Any

#: Chromium flags for a machine with no screen, run as root, whose network is loopback only
#: (without the background-networking ones Chromium keeps calling out and being refused).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


class EveryRequestInTheBrowser:
    """A downloader middleware: every request goes through scrapy-playwright's browser
    (it only takes the requests whose meta says ``playwright``)."""

    def process_request(self, request: Any, spider: Any = None) -> None:
        request.meta.setdefault("playwright", True)


def abort_subresources(request: Any) -> bool:
    """``PLAYWRIGHT_ABORT_REQUEST``: the browser fetches the page itself and nothing else,
    so that each request the frontier schedules is one request to the host."""
    return bool(request.resource_type != "document")
