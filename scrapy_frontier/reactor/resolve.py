"""IP addresses of hosts, for per-IP politeness, without blocking the reactor.

Lookups go through the reactor's installed resolver (Scrapy installs the one
named by TWISTED_DNS_RESOLVER, DNS_RESOLVER before Scrapy 2.15, by default a
caching resolver in front of a thread pool), so Scrapy's DNS cache, timeout and
any override apply, and the download that follows finds the address already
cached.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("scrapy_frontier.reactor.resolve")


def ip_literal(host: str) -> str | None:
    """``host`` in canonical form if it is an IPv4 or IPv6 address, else None."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


class HostResolver:
    """Finds the group (IP address) of a host key and reports it to ``on_group``.

    ``on_group(key, group, synchronous)`` is called exactly once per
    :meth:`resolve`; ``synchronous`` tells whether it happened inside the call
    (an IP literal, or a cached answer). A host whose name does not resolve
    forms a group of its own: its fetch will fail with Scrapy's DNS error, and
    the usual back-off applies.
    """

    def __init__(
        self,
        on_group: Callable[[str, str, bool], None],
        *,
        timeout: float,
        reactor: Any = None,
    ) -> None:
        self.on_group = on_group
        self.timeout = timeout
        self._reactor = reactor
        self._pending: set[str] = set()
        self.lookups = 0
        self.failures = 0

    @property
    def reactor(self) -> Any:
        if self._reactor is None:
            from twisted.internet import reactor

            self._reactor = reactor
        return self._reactor

    def resolve(self, key: str, hostname: str) -> None:
        literal = ip_literal(hostname)
        if literal is not None:
            self.on_group(key, literal, True)
            return
        if hostname.endswith(":"):  # data:, file:, about: pseudo-hosts
            self.on_group(key, hostname, True)
            return
        if key in self._pending:
            return
        self._pending.add(key)
        self.lookups += 1
        inside = True
        d = self.reactor.resolve(hostname, timeout=(self.timeout,))

        def found(address: object) -> None:
            self._pending.discard(key)
            group = ip_literal(str(address)) or str(address)
            self.on_group(key, group, inside)

        def failed(failure: Any) -> None:
            self._pending.discard(key)
            self.failures += 1
            logger.debug("could not resolve %r (%s); it gets its own IP group", hostname,
                         failure.getErrorMessage())
            self.on_group(key, f"unresolved:{key}", inside)

        d.addCallbacks(found, failed)
        inside = False
