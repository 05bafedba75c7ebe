"""Pause and resume through Scrapy's JOBDIR: the queue is saved on a clean close.

This is the interim persistence of the in-memory frontier: like Scrapy's own
scheduler it writes its state when the spider closes (Ctrl-C once, or the
crawl finishing) and reads it back when the same JOBDIR is used again. A
process killed with SIGKILL loses the queue; crash safety needs the SQLite
backend (planned).

The file is a pickle of plain data (request dicts from ``Request.to_dict``),
written to a temporary name and renamed, so a crash while saving leaves the
previous state intact.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_NAME = "scrapy-frontier.queue.pickle"
FORMAT = "scrapy-frontier/queue"
VERSION = 1


class FrontierStateError(RuntimeError):
    """A saved frontier state cannot be used; the message says what to do."""


@dataclass
class SavedQueue:
    spider: str
    # (host, level, request dict)
    requests: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    # host -> seconds of rest left when the crawl stopped
    rests: dict[str, float] = field(default_factory=dict)


def state_path(jobdir: str) -> Path:
    return Path(jobdir) / STATE_NAME


def save(path: Path, queue: SavedQueue) -> None:
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "spider": queue.spider,
        "requests": queue.requests,
        "rests": queue.rests,
    }
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise FrontierStateError(
            f"could not save the frontier queue to {path}: {exc}. The requests still "
            "queued are listed in the log; free disk space or fix the directory's "
            "permissions and run the crawl again with the same JOBDIR."
        ) from exc


def load(path: Path, spider: str) -> SavedQueue | None:
    """The saved queue, None if there is none; FrontierStateError if unusable."""
    if not path.exists():
        return None
    try:
        with open(path, "rb") as f:
            payload = pickle.load(f)
    except Exception as exc:  # truncated or corrupt pickles raise many types
        raise FrontierStateError(
            f"the frontier state {path} is corrupt or truncated ({exc!r}). Nothing was "
            "loaded. Move the file away to start this JOBDIR's queue afresh (its URLs "
            "will be filtered as already seen), or restore it from a backup."
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise FrontierStateError(
            f"{path} is not a scrapy-frontier queue file. Use another JOBDIR or move it away."
        )
    if payload.get("version") != VERSION:
        raise FrontierStateError(
            f"{path} was written by an incompatible scrapy-frontier (format version "
            f"{payload.get('version')!r}, this version reads {VERSION}). Finish the crawl "
            "with the version that wrote it, or use a new JOBDIR."
        )
    if payload.get("spider") != spider:
        raise FrontierStateError(
            f"{path} belongs to spider {payload.get('spider')!r}, not {spider!r}. "
            "Each spider needs its own JOBDIR."
        )
    return SavedQueue(spider, list(payload["requests"]), dict(payload["rests"]))
