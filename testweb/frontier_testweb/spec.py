"""The shape of a simulated web: hosts, their sizes and latencies, and the link graph.

Everything here is pure data and deterministic from ``WebSpec.seed``, so tests can reason about
the graph (reachability, expected fetches) without starting a server.
"""

from __future__ import annotations

import html
import ipaddress
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

#: The generated pages live under this prefix; /p/0 is each host's root.
PAGE_PREFIX = "/p/"
#: Seeded random same-host links per page, on top of the tree links (they create duplicate
#: discoveries, which is what a real site's navigation does to a crawler's seen-set).
SAME_HOST_EXTRA_LINKS = 2
#: Upper bounds that keep a spec (and a server) finite: hosts (named ones share addresses),
#: listening addresses (one socket each) and pages per host.
MAX_HOSTS = 200_000
MAX_ADDRESSES = 5000
MAX_PAGES_PER_HOST = 1_000_000

DEFAULT_FIRST_ADDRESS = "127.0.1.1"
#: Named hosts are h0.web.test, h1.web.test, ... (``.test`` is reserved: never a real name).
NAMED_DOMAIN = "web.test"


def check_loopback(address: str) -> str:
    """Return ``address`` if it is an allowed simulated-host address, else raise ValueError.

    Only 127.0.x.y with x >= 1 is accepted: loopback keeps traffic on this machine, and staying
    out of 127.0.0.0/24 leaves the usual 127.0.0.1 to whatever else runs here.
    """
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError as exc:
        raise ValueError(f"not an IPv4 address: {address!r}") from exc
    if ip not in ipaddress.IPv4Network("127.0.0.0/8") or ip in ipaddress.IPv4Network(
        "127.0.0.0/24"
    ):
        raise ValueError(f"simulated hosts must be 127.0.x.y with x >= 1, got {address}")
    return address


def host_addresses(count: int, first: str = DEFAULT_FIRST_ADDRESS) -> list[str]:
    """``count`` consecutive loopback addresses from ``first``, skipping .0 and .255 last octets.

    Skipping them avoids addresses that look like network/broadcast addresses to humans and tools.
    """
    if count < 0 or count > MAX_ADDRESSES:
        raise ValueError(f"address count must be in 0..{MAX_ADDRESSES}, got {count}")
    out: list[str] = []
    ip = ipaddress.IPv4Address(check_loopback(first))
    while len(out) < count:
        last = int(ip) & 0xFF
        if last not in (0, 255):
            out.append(check_loopback(str(ip)))
        ip += 1
    return out


@dataclass(frozen=True)
class HostSpec:
    """One simulated host.

    ``address`` is both the listening address and the host key Scrapy sees (URLs use the IP),
    unless the host has a ``name``: a named host is a virtual host, found by its name (the
    request's Host header) on ``address``, which other named hosts share; its URLs, log
    entries and audit key use the name (:attr:`key`), and a crawl resolves the name with
    :class:`~frontier_testweb.resolver.AliasResolver`.

    A generated host serves /p/0 .. /p/{pages-1}. A host with ``doc_root`` serves the static files
    of that directory instead; ``pages`` is then only informative (its number of .html files).

    ``workers``: None serves every request on arrival, however many are open at once. A number
    c serves at most c requests at once; the others wait at the server, first come first
    served, for a worker to be free. Either way a request's service takes ``latency``.
    """

    address: str
    pages: int
    latency: float
    doc_root: str | None = None
    workers: int | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        check_loopback(self.address)
        if self.name is not None and (not self.name or self.name != self.name.lower()):
            raise ValueError(f"a host name must be non-empty and lower case, got {self.name!r}")
        if self.doc_root is None and not 1 <= self.pages <= MAX_PAGES_PER_HOST:
            raise ValueError(f"pages must be in 1..{MAX_PAGES_PER_HOST}, got {self.pages}")
        if not 0.0 <= self.latency <= 60.0:
            raise ValueError(f"latency must be in [0, 60] seconds, got {self.latency}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be None or >= 1, got {self.workers}")

    @property
    def key(self) -> str:
        """What URLs, the log and the audit call this host: its name, else its address."""
        return self.address if self.name is None else self.name


def _rng(*parts: object) -> random.Random:
    # A string seed is hashed with SHA-512 by random.Random, so it is stable across runs and
    # Python versions (unlike hash() of a tuple).
    return random.Random(":".join(str(p) for p in parts))


@dataclass(frozen=True)
class WebSpec:
    """A set of hosts plus a deterministic link graph over their generated pages."""

    hosts: tuple[HostSpec, ...]
    seed: int
    cross_links: int = 2

    def __post_init__(self) -> None:
        if len(self.hosts) > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} hosts, got {len(self.hosts)}")
        keys = [h.key for h in self.hosts]
        if len(set(keys)) != len(keys):
            raise ValueError("host names and addresses must be unique")
        plain = [h.address for h in self.hosts if h.name is None]
        named = {h.address for h in self.hosts if h.name is not None}
        if len(set(plain)) != len(plain) or named.intersection(plain):
            raise ValueError("an address without names serves one host only")
        if len(named) + len(plain) > MAX_ADDRESSES:
            raise ValueError(f"at most {MAX_ADDRESSES} addresses")
        if self.cross_links < 0:
            raise ValueError(f"cross_links must be >= 0, got {self.cross_links}")

    # -- graph -------------------------------------------------------------------------------

    def index_of(self, key: str) -> int:
        """The index of the host whose :attr:`HostSpec.key` is ``key``."""
        for i, h in enumerate(self.hosts):
            if h.key == key:
                return i
        raise KeyError(key)

    def root_path(self, host_index: int) -> str:
        """Path of a host's entry page: /p/0, or / for a documentation host."""
        return "/" if self.hosts[host_index].doc_root is not None else PAGE_PREFIX + "0"

    def edges(self, host_index: int, page: int) -> list[tuple[int, str]]:
        """The links of a generated page as (target host index, path), in page order.

        Same-host links: the tree children 2j+1 and 2j+2 (so every page is reachable from /p/0)
        plus a few seeded random pages. Then ``cross_links`` links to other hosts' roots.
        Documentation hosts have no generated pages, so their edges are [].
        """
        host = self.hosts[host_index]
        if host.doc_root is not None:
            return []
        if not 0 <= page < host.pages:
            raise IndexError(f"host {host_index} has no page {page}")
        rng = _rng(self.seed, host_index, page)
        out: list[tuple[int, str]] = []
        for child in (2 * page + 1, 2 * page + 2):
            if child < host.pages:
                out.append((host_index, f"{PAGE_PREFIX}{child}"))
        for _ in range(SAME_HOST_EXTRA_LINKS):
            out.append((host_index, f"{PAGE_PREFIX}{rng.randrange(host.pages)}"))
        others = len(self.hosts) - 1
        for k in rng.sample(range(others), min(self.cross_links, others)):
            target = k if k < host_index else k + 1  # skip our own index
            out.append((target, self.root_path(target)))
        return out

    def links(
        self, host_index: int, page: int, port_of: Mapping[str, int] | None = None
    ) -> list[str]:
        """The hrefs of a generated page: same-host links as absolute paths, others as URLs.

        Cross-host URLs carry the target's port from ``port_of`` (address -> port); without it
        they have no port, which is enough for graph checks but not for fetching.
        """
        out: list[str] = []
        for target, path in self.edges(host_index, page):
            if target == host_index:
                out.append(path)
            else:
                out.append(self.url(target, path, port_of))
        return out

    def url(self, host_index: int, path: str, port_of: Mapping[str, int] | None = None) -> str:
        """The host's URL of ``path``; ``port_of`` maps listening addresses to ports."""
        host = self.hosts[host_index]
        if port_of is None:
            return f"http://{host.key}{path}"
        return f"http://{host.key}:{port_of[host.address]}{path}"

    def expected_paths(self, port_of: Mapping[str, int] | None = None) -> set[tuple[str, str]]:
        """Every (host key, path) a complete crawl fetches, robots.txt excluded.

        Documentation hosts are left out: which of their files a crawl reaches depends on the
        crawler's link extraction, so only politeness (not coverage) is checked for them.
        ``port_of`` is accepted for symmetry with :meth:`links` and ignored (ports are not part
        of the host key).
        """
        del port_of
        return {
            (h.key, f"{PAGE_PREFIX}{p}")
            for h in self.hosts
            if h.doc_root is None
            for p in range(h.pages)
        }

    def addresses(self) -> list[str]:
        """Every host's address (named hosts share theirs), in host order."""
        return [h.address for h in self.hosts]

    def allowed_domains(self) -> list[str]:
        """A spider's ``allowed_domains`` for this web: every unnamed host's address, and the
        parent domain of the named hosts' names (one entry for them all: Scrapy checks every
        URL against one regular expression of this list).

        Restricting a crawl to these matters: documentation hosts contain links to the real
        web, and a crawl of the test web must never follow them off loopback.
        """
        out = [h.address if h.name is None else h.name.partition(".")[2] or h.name
               for h in self.hosts]
        return list(dict.fromkeys(out))

    def total_pages(self) -> int:
        return sum(h.pages for h in self.hosts if h.doc_root is None)

    def with_hosts(self, extra: Iterable[HostSpec]) -> WebSpec:
        """A copy with ``extra`` hosts appended (e.g. documentation hosts)."""
        return WebSpec(
            hosts=self.hosts + tuple(extra), seed=self.seed, cross_links=self.cross_links
        )

    def with_workers(self, workers: int | None) -> WebSpec:
        """A copy in which every host has ``workers`` (see :class:`HostSpec`)."""
        return WebSpec(
            hosts=tuple(replace(h, workers=workers) for h in self.hosts),
            seed=self.seed,
            cross_links=self.cross_links,
        )

    # -- content -----------------------------------------------------------------------------

    def render_page(self, host_index: int, page: int, port_of: Mapping[str, int]) -> bytes:
        """Small valid HTML for a generated page (raises IndexError for unknown pages)."""
        links = self.links(host_index, page, port_of)
        title = f"Host {self.hosts[host_index].key} page {page}"
        rng = _rng(self.seed, "text", host_index, page)
        # A little seeded filler so pages differ in size, as real pages do.
        filler = " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(20, 80)))
        items = "\n".join(
            f'<li><a href="{html.escape(href)}">link {i}</a></li>' for i, href in enumerate(links)
        )
        body = (
            "<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            "</head>\n"
            f"<body><h1>{html.escape(title)}</h1>\n<p>{filler}</p>\n<ul>\n{items}\n</ul>\n"
            "</body></html>\n"
        )
        return body.encode("utf-8")


_WORDS = (
    "frontier",
    "host",
    "queue",
    "polite",
    "crawl",
    "fetch",
    "delay",
    "heap",
    "page",
    "link",
    "robots",
    "seed",
    "zipf",
    "latency",
    "mercator",
    "priority",
    "budget",
    "server",
    "socket",
)


def _latencies(n: int, latency: tuple[float, float], seed: int) -> list[float]:
    lo, hi = latency
    if not 0.0 <= lo <= hi:
        raise ValueError(f"latency range must satisfy 0 <= lo <= hi, got {latency}")
    rng = _rng(seed, "latency")
    return [rng.uniform(lo, hi) for _ in range(n)]


def zipf_sizes(hosts: int, largest: int, zipf_s: float) -> list[int]:
    """Host i has max(1, round(largest / (i+1)**zipf_s)) pages."""
    if largest < 1:
        raise ValueError(f"largest must be >= 1, got {largest}")
    return [max(1, round(largest / (i + 1) ** zipf_s)) for i in range(hosts)]


def _build(sizes: list[int], lats: list[float], seed: int, first_address: str,
           cross_links: int, addresses: int | None) -> WebSpec:
    if addresses is None:
        pool = host_addresses(len(sizes), first_address)
        hosts = tuple(HostSpec(a, s, lat) for a, s, lat in zip(pool, sizes, lats, strict=True))
    else:
        if len(sizes) > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} hosts, got {len(sizes)}")
        hosts = _named(sizes, lats, addresses, first_address)
    return WebSpec(hosts=hosts, seed=seed, cross_links=cross_links)


def _named(sizes: list[int], lats: list[float], addresses: int,
           first_address: str) -> tuple[HostSpec, ...]:
    """Host i is ``h{i}.web.test`` on the (i mod ``addresses``)-th address."""
    if addresses < 1:
        raise ValueError(f"addresses must be >= 1, got {addresses}")
    pool = host_addresses(min(addresses, max(1, len(sizes))), first_address)
    return tuple(HostSpec(pool[i % len(pool)], s, lat, name=f"h{i}.{NAMED_DOMAIN}")
                 for i, (s, lat) in enumerate(zip(sizes, lats, strict=True)))


def skewed_web(
    hosts: int = 30,
    largest: int = 150,
    zipf_s: float = 1.0,
    latency: tuple[float, float] = (0.005, 0.040),
    seed: int = 1,
    first_address: str = DEFAULT_FIRST_ADDRESS,
    cross_links: int = 2,
    addresses: int | None = None,
) -> WebSpec:
    """Few hosts with Zipf-distributed sizes: a big host dominates, as on the real web.

    This is the shape where a plain priority queue bursts at one host and where the per-host
    delay, not concurrency, bounds the crawl time. ``addresses``: named virtual hosts on that
    many addresses (host i is ``h{i}.web.test`` on the (i mod ``addresses``)-th), for webs of
    more hosts than addresses.
    """
    return _build(zipf_sizes(hosts, largest, zipf_s), _latencies(hosts, latency, seed), seed,
                  first_address, cross_links, addresses)


def wide_web(
    hosts: int = 300,
    pages: int = 8,
    latency: tuple[float, float] = (0.050, 0.150),
    seed: int = 1,
    first_address: str = DEFAULT_FIRST_ADDRESS,
    cross_links: int = 2,
    addresses: int | None = None,
) -> WebSpec:
    """Many small, slow hosts: the shape where concurrency, not politeness, bounds crawl time.
    ``addresses``: as :func:`skewed_web`'s."""
    return _build([pages] * hosts, _latencies(hosts, latency, seed), seed, first_address,
                  cross_links, addresses)
