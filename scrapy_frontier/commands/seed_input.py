"""The URLs of a seed file for ``scrapy frontier seed``, read as a stream.

Plain text (one URL per line; blank lines and lines starting with ``#`` are skipped) or
CSV (one column, by its 1-based index or by its name in the header row), either one
compressed with gzip or not: gzip is told by its magic bytes, whatever the file's name.
``-`` reads standard input. Nothing is held but the line being read, so the memory used
does not grow with the file.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from scrapy_frontier.errors import FrontierCommandError

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class Column:
    """The CSV column that holds the URLs: a 1-based ``index``, or a header ``name``."""

    index: int | None = None
    name: str | None = None

    @classmethod
    def parse(cls, raw: str) -> Column:
        raw = raw.strip()
        if raw.isdigit():
            if int(raw) < 1:
                raise FrontierCommandError("--column counts from 1 (the first column is 1)")
            return cls(index=int(raw))
        if not raw:
            raise FrontierCommandError("--column needs a 1-based index or a header name")
        return cls(name=raw)


@dataclass(frozen=True, slots=True)
class Line:
    """One entry of the file: its line number and its text (``bad`` if it is not UTF-8)."""

    number: int
    text: str
    bad: bool = False


def _binary(path: str, stack: contextlib.ExitStack) -> IO[bytes]:
    """The file's bytes, gunzipped if they start with gzip's magic bytes."""
    raw: IO[bytes]
    if path == "-":
        raw = sys.stdin.buffer
    else:
        try:
            raw = stack.enter_context(Path(path).open("rb"))  # noqa: SIM115 - the stack closes it
        except OSError as exc:
            raise FrontierCommandError(
                f"cannot read the seed file {path} ({type(exc).__name__}: {exc}). Nothing "
                "was changed.") from None
    buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(cast(Any, raw))
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        return cast(IO[bytes], stack.enter_context(gzip.GzipFile(fileobj=buffered, mode="rb")))
    return buffered


def _entry(number: int, text: str) -> Line:
    # surrogateescape keeps bytes that are not UTF-8 as lone surrogates: such a URL is
    # counted invalid, the rest of the file goes on.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return Line(number, text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                    bad=True)
    return Line(number, text)


def read_lines(path: str, column: Column | None = None) -> Iterator[Line]:
    """The file's URL entries, in order (see the module doc). Raises
    :class:`FrontierCommandError` for a file that cannot be read, or a CSV header that
    has no such column; an error midway (a truncated gzip file) stops after the entries
    read so far."""
    with contextlib.ExitStack() as stack:
        text = io.TextIOWrapper(_binary(path, stack), encoding="utf-8",
                                errors="surrogateescape", newline="")
        try:
            if column is None:
                for number, raw in enumerate(text, 1):
                    line = raw.strip()
                    if line and not line.startswith("#"):
                        yield _entry(number, line)
            else:
                yield from _csv_cells(text, column)
        except (OSError, EOFError, csv.Error) as exc:
            raise FrontierCommandError(
                f"the seed file {path} cannot be read to its end ({type(exc).__name__}: "
                f"{exc}); the URLs before that point are loaded. Load the whole file again "
                "once it is fixed: the URLs already loaded are skipped as seen.") from None


def _csv_cells(text: io.TextIOWrapper, column: Column) -> Iterator[Line]:
    reader = csv.reader(text)
    index = None if column.index is None else column.index - 1
    if index is None:
        header = next(reader, None)
        names = [h.strip() for h in header or []]
        if column.name not in names:
            raise FrontierCommandError(
                f"the CSV header has no column {column.name!r} (it has "
                f"{', '.join(map(repr, names)) or 'nothing'}). Nothing was changed.")
        index = names.index(column.name)
    for row in reader:
        if not row or not any(cell.strip() for cell in row):
            continue
        cell = row[index].strip() if index < len(row) else ""
        yield _entry(reader.line_num, cell)
