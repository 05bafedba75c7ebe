"""A DNS resolver for crawls of the test web: chosen hostnames map to loopback addresses.

Set ``TWISTED_DNS_RESOLVER = "frontier_testweb.resolver.AliasResolver"``
(``DNS_RESOLVER`` before Scrapy 2.15) and ``TESTWEB_HOST_ADDRESSES = {"a.test": "127.0.9.1",
...}``. Several names may share one address, which is how the tests simulate virtual hosts on
one IP. Names not in the map fail
with ``DNSLookupError``: a test crawl never asks a real DNS server. Answers come after
``TESTWEB_DNS_DELAY`` seconds (default 0.01), asynchronously like a real lookup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from twisted.internet.task import deferLater
from zope.interface import implementer

from frontier_testweb.spec import check_loopback
from scrapy_frontier.reactor.resolve import ip_literal


@implementer(IResolverSimple)
class AliasResolver:
    def __init__(self, reactor: Any, aliases: Mapping[str, str], delay: float = 0.01) -> None:
        self.reactor = reactor
        self.aliases = {name.lower(): check_loopback(addr) for name, addr in aliases.items()}
        self.delay = delay
        self.lookups: list[str] = []

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> AliasResolver:
        settings = crawler.settings
        return cls(
            reactor,
            settings.getdict("TESTWEB_HOST_ADDRESSES"),
            settings.getfloat("TESTWEB_DNS_DELAY", 0.01),
        )

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:  # noqa: N802
        self.lookups.append(name)
        literal = ip_literal(name)
        if literal is not None:
            return deferLater(self.reactor, 0, lambda: literal)
        address = self.aliases.get(name.lower())
        if address is None:
            return fail(DNSLookupError(f"{name!r} is not a test-web host name"))
        return deferLater(self.reactor, self.delay, lambda: address)
