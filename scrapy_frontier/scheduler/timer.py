"""A one-shot timer on whichever reactor Scrapy runs (asyncio or Twisted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


def call_later(delay: float, func: Callable[[], Any]) -> Timer:
    try:  # Scrapy >= 2.14 picks the asyncio loop or the Twisted reactor for us.
        from scrapy.utils.asyncio import call_later as scrapy_call_later
    except ImportError:  # pragma: no cover - Scrapy 2.13
        from twisted.internet import reactor

        return reactor.callLater(delay, func)  # type: ignore[attr-defined,arg-type,no-any-return]
    return scrapy_call_later(delay, func)
