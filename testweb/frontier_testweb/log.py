"""The server's request log: one entry per answered request, as JSON lines on disk."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import IO, Any

#: Status logged when the client went away before the response was finished (nginx's code);
#: the server did spend the time, so the entry still counts for politeness.
CLIENT_CLOSED = 499


@dataclass(frozen=True)
class LogEntry:
    """One request as the server saw it.

    ``start`` is ``time.monotonic()`` when the request had arrived (fully parsed) and ``end``
    when the response was handed to the transport; ``begin``, when its service began, lies
    between them. The fields after ``vhost`` were added later: logs without them read with
    their defaults. On Linux the monotonic clock is system-wide,
    so a crawler in another process can compare its own timestamps with these.
    """

    host: str
    path: str
    start: float
    end: float
    status: int
    vhost: str = ""
    """The Host header's name (without port): which of several names on one address."""
    bytes: int = 0
    """Body bytes sent (0 for HEAD, 304 and aborted requests)."""
    version: int = -1
    """Version of the generated page served (see :mod:`~frontier_testweb.changes`),
    as of ``start`` (always 0 without a change model); -1 for anything else."""
    conditional: bool = False
    """Whether the request carried If-None-Match or If-Modified-Since."""
    begin: float | None = None
    """When a worker took the request up, on a host with ``workers`` (the request waited at
    the server from ``start`` until then); None: its service began on arrival."""

    @property
    def duration(self) -> float:
        """Arrival to end: what the client's own fetch time contains."""
        return self.end - self.start

    @property
    def service_begin(self) -> float:
        return self.start if self.begin is None else self.begin

    @property
    def service(self) -> float:
        """Service time: from when a worker took the request up to the end."""
        return self.end - self.service_begin

    @property
    def queued(self) -> float:
        """Queueing time: from arrival to when a worker took the request up."""
        return self.service_begin - self.start

    def to_json(self) -> str:
        d = asdict(self)
        if self.begin is None:  # hosts without workers write the lines they always wrote
            del d["begin"]
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogEntry:
        return cls(
            host=str(d["host"]),
            path=str(d["path"]),
            start=float(d["start"]),
            end=float(d["end"]),
            status=int(d["status"]),
            vhost=str(d.get("vhost", "")),
            bytes=int(d.get("bytes", 0)),
            version=int(d.get("version", -1)),
            conditional=bool(d.get("conditional", False)),
            begin=None if d.get("begin") is None else float(d["begin"]),
        )


class LogWriter:
    """Appends entries to a file, flushing each line so a killed crawl's log survives."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, entry: LogEntry) -> None:
        if self._file is not None:
            self._file.write(entry.to_json() + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_log(path: str | os.PathLike[str]) -> list[LogEntry]:
    """Entries of a JSON-lines log, in file order.

    A line that does not parse is skipped: a server killed mid-write leaves at most one torn
    line, at the end, and the rest of the log is still good evidence.
    """
    entries: list[LogEntry] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                entries.append(LogEntry.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                continue
    return entries
