"""Items before acknowledgement: a page is recorded as done only once its items are safe.

When the engine is done with a response, its items have been through the item pipelines
(Scrapy awaits each ``process_item``) and the feed exporter has written them, but into
Python's buffer: a kill loses them, and the frontier would not fetch the page again. The
feed guard flushes the local feed files before each batch of acknowledgements, so that
what the frontier forgets is on disk (in the kernel's page cache: safe from a kill).

At the start of a resumable crawl it also keeps a line-based feed (JSON Lines, CSV) valid
after a kill: a line cut off by the kill is moved to a file beside the feed (its page is
fetched again), and a CSV feed that already has its header gets no second one. It warns
about feeds it cannot guard: array formats (JSON, XML), feeds overwritten at each run,
and storages that write only when the feed closes (S3, GCS, FTP, post-processing).
"""

from __future__ import annotations

import csv
import logging
import os
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.extensions.feedexport import FileFeedStorage, StdoutFeedStorage

from scrapy_frontier.errors import FeedWriteError
from scrapy_frontier.scheduler.engine import feed_exporter

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger("scrapy_frontier.feeds")

#: Formats written a line per item: a kill cuts off at most the last line.
LINE_FORMATS = frozenset({"jsonlines", "jl", "csv"})
#: Bytes read from the end of a feed to find its last complete line.
TAIL_CHUNK = 1 << 16


class FeedGuard:
    """Flushes the local feed files before the frontier acknowledges fetched pages."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._exporter: Any = None
        #: Slots whose file is flushed before acknowledgements, until the file is closed: a
        #: full batch leaves the exporter's list before its file is closed (and flushed).
        self._slots: list[Any] = []
        #: Slots already looked at, by object (an id() could be reused by a later batch).
        self._known: weakref.WeakSet[Any] = weakref.WeakSet()
        #: Files flushed (the frontier/feeds/flushes stat).
        self.flushes = 0

    def open(self, *, resumable: bool) -> None:
        """At spider_opened, after the feed exporter made its slots (files not open yet)."""
        self._exporter = feed_exporter(self.crawler)
        if self._exporter is None or not resumable:
            self._exporter = None  # a state that ends with the run: nothing to guard
            return
        for slot in list(self._exporter.slots):
            self._check(slot)

    def flush(self) -> None:
        """Write every guarded feed's buffered items to its file (before acknowledging
        the pages they came from); FeedWriteError if a file cannot take them."""
        exporter = self._exporter
        if exporter is None:
            return
        known = self._known
        for slot in exporter.slots:  # a few feeds: a set lookup each
            if slot not in known:
                known.add(slot)
                if _local_file(slot):
                    self._slots.append(slot)
        done = False
        for slot in self._slots:
            file = slot.file
            if file is None:
                continue
            if file.closed:
                done = True
                continue
            try:
                file.flush()
            except (OSError, ValueError) as exc:
                raise FeedWriteError(
                    f"cannot write the feed {slot.uri} ({exc}): the pages whose items it "
                    "holds are not recorded as done, and the next run fetches them again. "
                    "Free disk space or fix permissions, then run the same command."
                ) from exc
            self.flushes += 1
        if done:
            self._slots = [slot for slot in self._slots
                           if slot.file is None or not slot.file.closed]

    # -- at the start of a run ---------------------------------------------------------

    def _check(self, slot: Any) -> None:
        storage = slot.storage
        path = getattr(storage, "path", None)
        fmt = str(slot.format)
        if not _local_file(slot):
            logger.warning(
                "The feed %s is written only when it closes (%s%s): a kill loses its items, "
                "and the frontier does not fetch their pages again. Use a local file feed "
                "in JSON Lines or CSV for a crawl you may kill.", slot.uri,
                type(storage).__name__,
                ", post-processing" if "postprocessing" in slot.feed_options else "")
            return
        if path is None:  # standard output
            return
        if getattr(storage, "write_mode", "ab") != "ab":
            logger.warning(
                "The feed %s is overwritten at each run (-O, or overwrite=True): a resumed "
                "crawl does not fetch again the pages done before, so their items are lost. "
                "Use -o (append) for a crawl you may resume.", slot.uri)
            return
        if fmt not in LINE_FORMATS:
            logger.warning(
                "The feed %s is a %s document: a kill leaves it unterminated and a resumed "
                "run appends a second one, so the file is no longer valid %s. Use the "
                "jsonlines or csv format for a crawl you may resume.", slot.uri, fmt,
                fmt.upper())
            return
        feed = Path(path)
        if not feed.is_file() or feed.stat().st_size == 0:
            return
        moved = _cut_partial_line(feed)
        if moved is not None:
            logger.warning(
                "The feed %s ended in a line cut off by a kill (%d bytes): moved to %s, so "
                "that the feed stays valid; the page it came from is fetched again.",
                slot.uri, moved[1], moved[0])
        if fmt == "csv" and feed.stat().st_size > 0:
            # The header is already there: a resumed run appends rows only, in its columns.
            options = dict(slot.feed_options)
            options["item_export_kwargs"] = {**options.get("item_export_kwargs", {}),
                                             "include_headers_line": False}
            if not options.get("fields"):
                options["fields"] = _csv_header(feed, options.get("encoding") or "utf-8")
            slot.feed_options = options


def _local_file(slot: Any) -> bool:
    """The slot writes its items straight into a local file (or standard output)."""
    if "postprocessing" in slot.feed_options:
        return False
    return isinstance(slot.storage, FileFeedStorage | StdoutFeedStorage)


def _csv_header(feed: Path, encoding: str) -> list[str] | None:
    """The column names in the first line of a CSV feed (None if it has none)."""
    with feed.open(encoding=encoding, newline="") as f:
        return next(csv.reader(f), None) or None


def _cut_partial_line(feed: Path) -> tuple[Path, int] | None:
    """If ``feed`` does not end with a newline, move what follows its last newline to a
    file beside it and cut it off: (that file, its size), or None."""
    with feed.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        end = size
        while end > 0:
            start = max(0, end - TAIL_CHUNK)
            f.seek(start)
            chunk = f.read(end - start)
            if end == size and chunk.endswith(b"\n"):
                return None
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            end = start
        else:
            keep = 0
        f.seek(keep)
        tail = f.read()
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = feed.with_name(f"{feed.name}.cut-{stamp}-{os.getpid()}")
        aside.write_bytes(tail)
        f.truncate(keep)
    return aside, len(tail)
