"""The URLs of a seed file for ``scrapy frontier seed``, read as a stream.

Plain text (one URL per line; blank lines and lines starting with ``#`` are skipped) or
CSV (one column, by its 1-based index or by its name in the header row), either one
compressed with gzip or not: gzip is told by its magic bytes, whatever the file's name.
``-`` reads standard input. Nothing is held but the line being read, so the memory used
does not grow with the file. A file that is not text (a NUL byte in its first block, or
another compressor's magic bytes), or a gzip file that is truncated or damaged (read to its
end first: gzip's checksum is at the end), is refused before its first entry. Standard
input and pipes are read once: gzip that breaks off there stops the load midway.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from scrapy_frontier.errors import FrontierCommandError, SeedFileBroken

GZIP_MAGIC = b"\x1f\x8b"
#: Other compressors' magic bytes, named in the refusal: only gzip is read.
OTHER_MAGIC = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd",
               b"PK\x03\x04": "zip"}
#: The first bytes looked at for a NUL byte (text files have none; UTF-16 and binaries do).
HEAD_BYTES = 8192


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
    if buffered.peek(2)[:2] != GZIP_MAGIC:
        _check_text(path, buffered.peek(HEAD_BYTES)[:HEAD_BYTES])
        return buffered
    if path != "-" and Path(path).is_file():
        _check_gzip(path)
    packed = stack.enter_context(gzip.GzipFile(fileobj=buffered, mode="rb"))
    try:
        head = packed.peek(HEAD_BYTES)[:HEAD_BYTES]
    except (OSError, EOFError, zlib.error) as exc:
        raise _damaged(path, exc) from None
    _check_text(path, head)
    return cast(IO[bytes], packed)


def _check_gzip(path: str) -> None:
    """Reads a gzip file to its end (its checksum is at the end): a truncated or damaged
    one is refused before its first entry. A pipe is read once, so checked as it goes."""
    try:
        with gzip.open(path, "rb") as packed:
            while packed.read(1 << 20):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        raise _damaged(path, exc) from None


def _damaged(path: str, exc: BaseException) -> FrontierCommandError:
    return FrontierCommandError(
        f"the seed file {path} is gzip, truncated or damaged ({type(exc).__name__}: {exc}): "
        "no URL is loaded from it. Nothing was changed.")


def _check_text(path: str, head: bytes) -> None:
    """Refuses a file whose first bytes are not a text file's."""
    for magic, name in OTHER_MAGIC.items():
        if head.startswith(magic):
            raise FrontierCommandError(
                f"the seed file {path} is compressed with {name}: only gzip is read (or "
                f"plain text). Decompress it to standard input and give - as the file. "
                "Nothing was changed.")
    if b"\0" in head:
        raise FrontierCommandError(
            f"the seed file {path} is not text: its first {len(head)} bytes hold a NUL "
            "byte (a binary file, or text in UTF-16: seed files are UTF-8). Nothing was "
            "changed.")


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
    :class:`FrontierCommandError` for a file that cannot be read, is not text, or has a CSV
    header without such a column, all before the first entry; :class:`SeedFileBroken` for
    an error midway (a truncated gzip file), after the entries read so far."""
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
        except (OSError, EOFError, zlib.error, csv.Error) as exc:
            raise SeedFileBroken(
                f"the seed file {path} cannot be read to its end ({type(exc).__name__}: "
                f"{exc})") from None


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
