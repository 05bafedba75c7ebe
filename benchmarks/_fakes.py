"""Stand-ins for the parts of Scrapy's engine that schedulers read, for benchmarks without
downloads. Imported by the benchmark scripts, which run from this folder."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class FakeDownloader:
    """What the schedulers read from Scrapy's Downloader: no download is ever active.

    ``slots`` empty: DownloaderAwarePriorityQueue sees 0 active downloads on every
    slot. ``middleware.middlewares``: the frontier looks there for its timing
    middleware (present, as the add-on installs it).
    """

    DOWNLOAD_SLOT = "download_slot"

    def __init__(self, middlewares: list[Any]) -> None:
        self.slots: dict[str, Any] = {}
        self.middleware = SimpleNamespace(middlewares=middlewares)

    def get_slot_key(self, request: Any) -> str:
        from scrapy.utils.httpobj import urlparse_cached

        slot = request.meta.get(self.DOWNLOAD_SLOT)
        if slot is not None:
            return str(slot)
        return urlparse_cached(request).hostname or ""
