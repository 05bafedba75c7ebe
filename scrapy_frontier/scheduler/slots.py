"""One politeness key per host: ``meta["download_slot"]`` may group hosts, never split one.

Scrapy's downloader keys its slots by ``download_slot`` or else the hostname, and the frontier
uses the same key, so that what it hands out never waits in a downloader slot. A host reached
both with a slot and without one (or with two slots) would then be two keys, fetched at the
same time. :class:`SlotKeys` binds each hostname to the first key it is queued under in this
process, warns once per host about a slot it overrides, and once about an empty slot (which
is no host: such requests are keyed by their hostname).

The bindings live in this process: a host that a JOBDIR's earlier run queued under a slot,
or another Redis worker under another key, is not known here (docs/design.rst says so).
"""

from __future__ import annotations

import logging

from scrapy import Request

from scrapy_frontier.hostkey import download_slot, url_host_key

logger = logging.getLogger("scrapy_frontier.scheduler")

#: Hosts whose overridden slot is logged one by one; later ones are not.
OVERRIDES_LOGGED = 10


class SlotKeys:
    """The politeness key of each request, and the bindings that keep one key per host."""

    __slots__ = ("own", "bound", "_warned_empty", "_warned_hosts")

    def __init__(self) -> None:
        #: Hostnames queued under their own name (no slot).
        self.own: set[str] = set()
        #: Hostname -> the slot it was first queued under.
        self.bound: dict[str, str] = {}
        self._warned_empty = False
        self._warned_hosts: set[str] = set()

    def key(self, request: Request, *, remember: bool = True) -> str:
        """The host key of ``request``; raises HostlessURL as ``hostkey.host_key`` does.

        ``remember``: a request about to be queued binds its hostname; a look-up for a
        request that is not queued (robots.txt) binds nothing."""
        slot = download_slot(request)
        hostname = url_host_key(request.url)
        if slot is not None and not slot.strip():
            self._warn_empty(request, slot)
            slot = None
        if slot is None:
            key = self.bound.get(hostname) if self.bound else None
            if key is None:
                if remember:
                    self.own.add(hostname)
                return hostname
            return key
        if not remember:
            return self.bound.get(hostname, hostname if hostname in self.own else slot)
        key = hostname if hostname in self.own else self.bound.setdefault(hostname, slot)
        if key != slot:
            self._warn_override(hostname, slot, key)
        return key

    def _warn_empty(self, request: Request, slot: str) -> None:
        if not self._warned_empty:
            self._warned_empty = True
            logger.warning(
                "%s sets meta['download_slot'] = %r: an empty slot names no host. The frontier "
                "rests such requests by their hostname (logged once), while Scrapy's "
                "downloader puts them all in one slot. Leave download_slot unset, or name "
                "the group.", request, slot)

    def _warn_override(self, hostname: str, slot: str, key: str) -> None:
        warned = self._warned_hosts
        if hostname not in warned and len(warned) < OVERRIDES_LOGGED:
            warned.add(hostname)
            logger.warning(
                "Host %r is queued under the key %r already: its requests with "
                "meta['download_slot'] = %r are queued there too, so that two requests "
                "never reach the host at once (logged once per host, for %d hosts). Give "
                "all the requests of a host the same download_slot.", hostname, key, slot,
                OVERRIDES_LOGGED)
