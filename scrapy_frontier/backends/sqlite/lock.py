"""One crawl per SQLite file: an advisory lock on ``<file>.lock``, held while the file is open.

SQLite's own ``locking_mode=EXCLUSIVE`` kept a second crawl out, but it also kept every
reader out, so nothing could look at a running crawl. The lock file keeps the first job
and gives up the second: the files are opened in ordinary WAL mode, where readers
(``scrapy frontier``, opening them read-only) see the last commit beside the writer.

``flock`` locks belong to the open file, so the kernel drops them when the process
dies, even with ``kill -9``: a stale lock file is just a file, and the next crawl takes
it. The lock file is never deleted (deleting it while another process waits on it would
let two processes hold "the" lock).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

#: Builds the caller's exception from (path, problem, advice), as in files.py.
ErrorFactory = Callable[[Path, str, str], Exception]


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"

SUFFIX = ".lock"


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + SUFFIX)


class FileLock:
    """The writer's lock on one SQLite file; ``release`` (or process death) frees it."""

    def __init__(self, path: Path, error: ErrorFactory) -> None:
        self.path = lock_path(path)
        self._fd: int | None = None
        self.created = not self.path.exists()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise error(path, f"cannot be opened: it is read-only ({describe(exc)})",
                            "Make the file and its directory writable, or point "
                            "FRONTIER_PATH / JOBDIR elsewhere.") from exc
            raise error(path, f"cannot be opened: its lock file {self.path} cannot be "
                        f"created ({describe(exc)})",
                        "Check that the directory exists, is writable and has free "
                        "space.") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise error(
                    path, f"cannot be opened: it is in use by another process (the lock "
                    f"{self.path} is held{_holder(self.path)})",
                    "Another crawl is using this job directory: stop it, or use another "
                    "FRONTIER_PATH / JOBDIR. Nothing was changed in it.",
                ) from exc
            raise error(path, f"cannot be locked ({describe(exc)})",
                        "Check the file system it is on (it must support flock).") from exc
        self._fd = fd
        # Who holds it, for the message above and for people looking: informative only.
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def end(self, *, refused: bool) -> None:
        """Done with the file: :meth:`discard` the lock if its open was refused (the
        directory is left as it was), else :meth:`release` it."""
        if refused:
            self.discard()
        else:
            self.release()

    def discard(self) -> None:
        """Release after a refused open: a lock file this open created goes too, so a
        refused directory is left as it was found."""
        if self._fd is not None and self.created:
            with contextlib.suppress(OSError):
                self.path.unlink()
        self.release()


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        return ""
    return f" by process {pid}" if pid.isdigit() else ""


def is_locked(path: Path) -> bool:
    """Whether a writer holds ``path``'s lock now (a crawl is running on it). Never blocks."""
    target = lock_path(path)
    try:
        fd = os.open(target, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


__all__ = ["FileLock", "is_locked", "lock_path"]
