"""A crawl the frontier cannot start: one ERROR line, exit code 1, and nothing after it.

The error is logged once, naming the cause and what to do, and raised so that Scrapy
stops the crawl. Under a Scrapy command (``scrapy crawl``) the process then exits 1 with
that line last: Scrapy's own reports of the raised error, which would follow it with a
traceback, are left out -- asyncio's "Task exception was never retrieved" (Scrapy >= 2.14
runs the crawl in a task) and Twisted's "Unhandled error in Deferred" (its
``CrawlerProcess``, the only one in 2.13), both logged and, for Twisted, also echoed to
stderr. Only these reports, of this very error object, are left out: any other error keeps
its traceback. In a script or a test nothing but the ERROR line is added: the raised error
is the caller's to handle.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from scrapy_frontier.scheduler.engine import fail_command, running_command

#: The errors reported by :func:`report`: their unhandled-error reports are left out.
_reported: list[BaseException] = []

#: What Twisted logs, without the error, just before it logs an unhandled failure.
_TWISTED_HEADER = "Unhandled error in Deferred:"


def report(log: logging.Logger, exc: BaseException) -> None:
    """Log ``exc`` as the reason the crawl cannot start; the caller raises it next."""
    log.error("scrapy-frontier cannot start: %s", exc)
    command = running_command()
    if command is None:
        return
    fail_command()
    _reported.append(exc)
    _install_filters()
    if not _runs_in_asyncio_task(command):
        _end_twisted_stderr_echo()


def _runs_in_asyncio_task(command: Any) -> bool:
    """Whether the command's crawler process runs crawls as asyncio tasks (Scrapy >= 2.14's
    ``AsyncCrawlerProcess``): then no Deferred carries the error."""
    from scrapy import crawler

    runner = getattr(crawler, "AsyncCrawlerRunner", None)
    return runner is not None and isinstance(getattr(command, "crawler_process", None), runner)


class QuietReported(logging.Filter):
    """Leaves out asyncio's and Twisted's reports of an error :func:`report` logged.

    Twisted logs an unhandled failure as two records: a header without the error, then the
    failure. The header is held until the next record shows whose failure it was.
    """

    def __init__(self) -> None:
        super().__init__()
        self.held: logging.LogRecord | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "frontier_released", False):
            return True
        held, self.held = self.held, None
        if _is_reported(record):
            return False
        if record.name == "twisted" and record.getMessage().strip() == _TWISTED_HEADER:
            self.held = record
            return False
        if held is not None:  # another error's header: it goes out, before this record
            setattr(held, "frontier_released", True)  # noqa: B010 -- not a LogRecord field
            logging.getLogger(held.name).handle(held)
        return True


def _is_reported(record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return exc is not None and any(exc is seen for seen in _reported)


_filter = QuietReported()


def _install_filters() -> None:
    for name in ("asyncio", "twisted"):
        logger = logging.getLogger(name)
        if _filter not in logger.filters:
            logger.addFilter(_filter)


def _end_twisted_stderr_echo() -> None:
    """Twisted prints every critical event to stderr until logging "begins"; Scrapy never
    begins it, so an unhandled failure is printed there besides being logged. Begin it with
    no observer of its own: the events still reach Scrapy's log (and the filter above), and
    Python's warnings keep going where Scrapy sends them."""
    try:
        from twisted.logger import globalLogBeginner
    except ImportError:  # pragma: no cover - Scrapy depends on Twisted
        return
    if getattr(globalLogBeginner, "_temporaryObserver", None) is None:
        return  # begun already (or a Twisted that has no such echo)
    shown = warnings.showwarning
    try:
        globalLogBeginner.beginLoggingTo([], discardBuffer=True, redirectStandardIO=False)
    finally:
        warnings.showwarning = shown
