"""A Twisted HTTP server that plays many hosts at once, one loopback address per host, or
named virtual hosts (:attr:`~frontier_testweb.spec.HostSpec.name`) on a few shared addresses.

Latency is simulated with ``callLater`` so one reactor thread can keep hundreds of slow requests
open at the same time, as hundreds of real hosts would. A host with ``workers``
(:class:`~frontier_testweb.spec.HostSpec`) serves at most that many requests at once and keeps
the others waiting, first come first served; its log entries say when each one's service began.

With a change model (``changes=ChangeOptions(...)``; see :mod:`frontier_testweb.changes`)
the generated pages are long pages whose content changes over time, some pages carry a noise
line that differs on every response, and every generated page sends ``Last-Modified`` (and,
unless noisy, ``ETag``) and answers conditional GETs with 304 Not Modified when they match.
Without one, pages and headers are exactly as before.
"""

from __future__ import annotations

import json
import math
import mimetypes
import os
import re
import resource
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from email.utils import formatdate
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import quote, unquote

from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.internet.error import CannotListenError
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from frontier_testweb.changes import (
    EDIT_PREFIX,
    ChangeModel,
    ChangeOptions,
    GroundTruth,
    evaluate_conditional,
    http_date,
    render_dynamic_page,
)
from frontier_testweb.docs import html_files
from frontier_testweb.hostile import (
    HOSTILE_PREFIX,
    TRICKLE_EVERY,
    TRICKLE_HEAD,
    TRICKLE_LENGTH,
    TRICKLE_PREFIX,
    hostile_document,
)
from frontier_testweb.log import CLIENT_CLOSED, LogEntry, LogWriter
from frontier_testweb.signals import (
    KINDS,
    SITEMAP_PATHS,
    atom_feed,
    check_kinds,
    claimed,
    host_kind,
    sitemap_index,
    urlset,
)
from frontier_testweb.spec import PAGE_PREFIX, WebSpec
from frontier_testweb.traps import TRAP_KINDS, trap_page

if TYPE_CHECKING:
    from twisted.internet.protocol import Protocol as TwistedProtocol
    from twisted.python.failure import Failure


# Structural types for the few reactor features used here: Twisted's zope interfaces do not
# type-check as plain classes without a mypy plugin.
class _Address(Protocol):
    port: int


class _ListeningPort(Protocol):
    def getHost(self) -> _Address: ...

    def stopListening(self) -> Deferred[None] | None: ...


class _DelayedCall(Protocol):
    def active(self) -> bool: ...

    def cancel(self) -> None: ...


class _Closable(Protocol):
    def loseConnection(self) -> None: ...


class _Reactor(Protocol):
    def listenTCP(
        self, port: int, factory: Site, backlog: int = 50, interface: str = ""
    ) -> _ListeningPort: ...

    def callLater(
        self, delay: float, callable: Callable[..., object], *args: object
    ) -> _DelayedCall: ...


DEFAULT_ROBOTS_TXT = "User-agent: *\nDisallow:\n"
#: Files bigger than this are not served from documentation trees (keeps memory bounded).
MAX_DOC_FILE_BYTES = 20 * 1024 * 1024
#: Entries in the generated index of a documentation tree without an index.html.
MAX_LISTING_ENTRIES = 2000
#: File descriptors kept free on top of one per listening address, for client connections.
FD_HEADROOM = 1024
#: Twisted's default: a connection idle this long (no request in service) is closed.
IDLE_TIMEOUT = 60.0

_PAGE_RE = re.compile(re.escape(PAGE_PREFIX) + r"(0|[1-9][0-9]{0,8})")
_HTML = "text/html; charset=utf-8"


def _reactor() -> _Reactor:
    # Imported late: importing the reactor module installs the default reactor, which must not
    # happen before Scrapy (or a test) had the chance to install its own.
    from twisted.internet import reactor

    return cast(_Reactor, reactor)


def ensure_fd_limit(needed: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard limit if ``needed`` fds would not fit.

    Returns the soft limit in force afterwards; raises RuntimeError if even the hard limit is
    too small.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = hard if hard == resource.RLIM_INFINITY else max(soft, hard)
        if target != resource.RLIM_INFINITY and target < needed:
            raise RuntimeError(f"need {needed} file descriptors, hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


class _QuietSite(Site):
    """A Site without access logging that remembers its connections so stop() can close them."""

    noisy = False

    def __init__(self, root: Resource, channels: weakref.WeakSet[TwistedProtocol],
                 idle_timeout: float) -> None:
        super().__init__(root, timeout=idle_timeout)
        self._channels = channels

    def log(self, request: object) -> None:
        pass  # the TestWebServer keeps its own, structured log

    def buildProtocol(self, addr: Any) -> Any:
        proto = super().buildProtocol(addr)
        if proto is not None:
            self._channels.add(proto)
        return proto


class _Workers:
    """A host's c workers: at most c requests in service, the others wait first come first
    served."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.busy = 0
        self._waiting: deque[Callable[[], None]] = deque()

    def admit(self, serve: Callable[[], None]) -> None:
        """Call ``serve`` now if a worker is free, else when one is (after those waiting)."""
        if self.busy < self.count:
            self.busy += 1
            serve()
        else:
            self._waiting.append(serve)

    def withdraw(self, serve: Callable[[], None]) -> bool:
        """Drop a waiting request whose client went away; False if it is not waiting."""
        try:
            self._waiting.remove(serve)
        except ValueError:
            return False
        return True

    def release(self) -> None:
        """A service ended: its worker takes the longest-waiting request, if any."""
        if self._waiting:
            self._waiting.popleft()()
        else:
            self.busy -= 1

    def clear(self) -> None:
        self._waiting.clear()
        self.busy = 0


class _HostResource(Resource):
    isLeaf = True

    def __init__(self, handler: Callable[[int, Request], int | bytes], host_index: int) -> None:
        super().__init__()
        self._handler = handler
        self._index = host_index

    def render(self, request: Request) -> int | bytes:
        return self._handler(self._index, request)


class _NamedHostsResource(Resource):
    """The named hosts of one address: the Host header's name picks the host."""

    isLeaf = True

    def __init__(self, handler: Callable[[int, Request], int | bytes],
                 by_name: dict[str, int]) -> None:
        super().__init__()
        self._handler = handler
        self._by_name = by_name

    def render(self, request: Request) -> int | bytes:
        header = (request.getHeader(b"host") or b"").decode("latin-1")
        name = header.rsplit(":", 1)[0] if ":" in header else header
        index = self._by_name.get(name.lower())
        if index is None:  # not logged: no host of the web was asked
            request.setResponseCode(404)
            request.setHeader(b"Content-Type", b"text/plain")
            return b"no such host here\n"
        return self._handler(index, request)


class TestWebServer:
    """Twisted HTTP server(s) on loopback, one listening address per host or per group of named
    hosts.

    ``start()`` only calls ``listenTCP``, so it works before the reactor runs or inside a running
    one (pytest-twisted, Scrapy's own reactor in-process). Every answered request is appended to
    ``log`` and, if ``log_path`` is given, written to that file as a JSON line.

    All hosts share one port when possible: with ``port=0`` the first host gets an ephemeral
    port and the others try the same one; a host whose address already has that port in use (by
    another process) falls back to its own ephemeral port. ``port_of`` always has the truth.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        spec: WebSpec,
        log_path: str | None = None,
        port: int = 0,
        robots_txt: str | None = None,
        crawl_delays: Mapping[int, float] | None = None,
        failing_hosts: Iterable[int] = (),
        changes: ChangeOptions | None = None,
        trap_hosts: Iterable[int] = (),
        robots_failures: int = 0,
        signals: bool = False,
        foreign_sitemaps: Iterable[tuple[int, int]] = (),
        hostile: bool = False,
        kinds: Sequence[str] = KINDS,
        edits: bool = False,
        idle_timeout: float = IDLE_TIMEOUT,
        trap_kinds: Mapping[int, str] | None = None,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port out of range: {port}")
        self.spec = spec
        self.log_path = log_path
        self.requested_port = port
        self.robots_txt = DEFAULT_ROBOTS_TXT if robots_txt is None else robots_txt
        #: Host index -> the Crawl-delay its robots.txt asks for (politeness tests).
        self.crawl_delays = dict(crawl_delays or {})
        #: Host indexes that answer 503 (no Retry-After) to everything but robots.txt.
        self.failing_hosts = frozenset(failing_hosts)
        #: Host indexes that are a spider trap: an infinite calendar, every page linking to
        #: the next two days (budget tests).
        self.trap_hosts = frozenset(trap_hosts)
        #: Every host's robots.txt answers 500 to its first this many requests.
        self.robots_failures = robots_failures
        #: Hosts publish sitemaps and feeds, truthful or not (frontier_testweb.signals).
        self.signals = signals
        #: (A, B): host A's sitemap index also names host B's ``/sitemap-2.xml`` (scope tests).
        self.foreign_sitemaps = tuple(foreign_sitemaps)
        #: Every host serves hostile sitemaps under /hostile/ (frontier_testweb.hostile).
        self.hostile = hostile
        #: With signals, host i is of kind kinds[i % len(kinds)].
        self.kinds = check_kinds(kinds)
        #: Pages change by the test's small edits (POST /_edit/p/N), with a change model.
        self.edits = edits
        if edits and changes is None:
            changes = ChangeOptions()
        if edits and changes is not None and changes.rate:
            raise ValueError("with edits, pages change only by the test's edits: "
                             f"a change rate ({changes.rate}) would be ignored")
        #: Wall-clock times of each page's edits, in order.
        self._edit_times: dict[tuple[int, int], list[float]] = {}
        #: Seconds a connection may stay idle before the server closes it (keep-alive).
        self.idle_timeout = idle_timeout
        #: Host index -> the kind of trap it is (frontier_testweb.traps): every path of it
        #: is a page of the trap, and its pages are not expected of a crawl.
        self.trap_kinds = dict(trap_kinds or {})
        for kind in self.trap_kinds.values():
            if kind not in TRAP_KINDS:
                raise ValueError(f"unknown trap kind {kind!r}; the kinds are "
                                 f"{', '.join(TRAP_KINDS)}")
        self._robots_hits: dict[int, int] = {}
        for index in [*self.crawl_delays, *self.failing_hosts, *self.trap_hosts,
                      *self.trap_kinds,
                      *(i for pair in self.foreign_sitemaps for i in pair)]:
            if not 0 <= index < len(spec.hosts):
                raise ValueError(f"no host with index {index}")
        #: The change model, or None: pages static, short, and without validators.
        self.changes = None if changes is None else ChangeModel(spec.seed, changes)
        #: ``time.monotonic()`` and ``time.time()`` when start() was called; page times count
        #: from ``started``.
        self.started: float | None = None
        self.started_wall: float | None = None
        self._responses: dict[tuple[int, int], int] = {}  # noisy pages' response counters
        self.log: list[LogEntry] = []
        self.port_of: dict[str, int] = {}
        self._ports: list[_ListeningPort] = []
        self._pending: dict[Request, _DelayedCall] = {}
        self._workers = {
            i: _Workers(h.workers) for i, h in enumerate(spec.hosts) if h.workers is not None
        }
        self._flaky_hits: dict[tuple[int, str], int] = {}
        self._channels: weakref.WeakSet[TwistedProtocol] = weakref.WeakSet()
        self._writer: LogWriter | None = None
        self._doc_roots = {
            i: os.path.realpath(h.doc_root)
            for i, h in enumerate(spec.hosts)
            if h.doc_root is not None
        }

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port of the first host (all hosts' port unless one had to fall back)."""
        if not self.spec.hosts or not self.port_of:
            raise RuntimeError("server not started")
        return self.port_of[self.spec.hosts[0].address]

    def start(self) -> None:
        if self._ports:
            raise RuntimeError("server already started")
        resources = self._resources()
        ensure_fd_limit(len(resources) + FD_HEADROOM)
        if self.log_path is not None:
            self._writer = LogWriter(self.log_path)
        tcp = _reactor()
        shared = self.requested_port
        self.started = time.monotonic()
        self.started_wall = time.time()
        try:
            for address, resource in resources.items():
                site = _QuietSite(resource, self._channels, self.idle_timeout)
                try:
                    lp = tcp.listenTCP(shared, site, interface=address)
                except CannotListenError:
                    if self.requested_port != 0 or shared == 0:
                        raise  # an explicit port must be honoured exactly
                    lp = tcp.listenTCP(0, site, interface=address)
                bound = lp.getHost().port
                if shared == 0:
                    shared = bound
                self._ports.append(lp)
                self.port_of[address] = bound
        except BaseException:
            for lp in self._ports:
                lp.stopListening()
            self._ports.clear()
            self.port_of.clear()
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            raise

    def _resources(self) -> dict[str, Resource]:
        """What each listening address serves: its one host, or its named hosts by name."""
        named: dict[str, dict[str, int]] = {}
        out: dict[str, Resource] = {}
        for i, host in enumerate(self.spec.hosts):
            if host.name is None:
                out[host.address] = _HostResource(self._handle, i)
            else:
                if host.address not in named:
                    named[host.address] = {}
                    out[host.address] = _NamedHostsResource(self._handle, named[host.address])
                named[host.address][host.name] = i
        return out

    def stop(self) -> Deferred[None]:
        """Stop listening on every address, drop pending responses and open connections."""
        stops = [lp.stopListening() or succeed(None) for lp in self._ports]
        self._ports = []
        for call in list(self._pending.values()):
            if call.active():
                call.cancel()
        self._pending.clear()
        for workers in self._workers.values():
            workers.clear()
        for proto in list(self._channels):
            transport = cast("_Closable | None", getattr(proto, "transport", None))
            if transport is not None:
                transport.loseConnection()
        done: Deferred[None] = gatherResults(stops).addCallback(lambda _: None)

        def close_log(result: object) -> object:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            return result

        done.addBoth(close_log)
        return done

    def ground_truth(self) -> GroundTruth:
        """Which version each page has when (requires a change model and a started server)."""
        if self.changes is None or self.started is None or self.started_wall is None:
            raise RuntimeError("no change model, or server not started")
        hosts = [(h.key, 0 if h.doc_root else h.pages) for h in self.spec.hosts]
        return GroundTruth(self.changes, hosts, self.started, self.started_wall)

    # -- what a crawl should do --------------------------------------------------------------

    def start_urls(self) -> list[str]:
        """One root URL per host, e.g. http://127.0.1.7:PORT/p/0 or, named,
        http://h7.web.test:PORT/p/0."""
        if not self.port_of:
            raise RuntimeError("server not started")
        return [
            self.spec.url(i, self.spec.root_path(i), self.port_of)
            for i in range(len(self.spec.hosts))
        ]

    def allowed_domains(self) -> list[str]:
        """Put these in ``allowed_domains`` so a crawl stays on loopback (documentation hosts
        link to the real web): see :meth:`~frontier_testweb.spec.WebSpec.allowed_domains`."""
        return self.spec.allowed_domains()

    def host_addresses(self) -> dict[str, str]:
        """Each named host's address: a crawl's ``TESTWEB_HOST_ADDRESSES``."""
        return {h.name: h.address for h in self.spec.hosts if h.name is not None}

    def expected(self) -> set[tuple[str, str]]:
        """Every (host address, path) a complete crawl fetches; doc hosts, trap hosts of a
        kind and robots excluded."""
        traps = {self.spec.hosts[i].address for i in self.trap_kinds}
        return {(h, p) for h, p in self.spec.expected_paths() if h not in traps}

    # -- request handling --------------------------------------------------------------------

    def _handle(self, index: int, request: Request) -> int | bytes:
        start = time.monotonic()
        host = self.spec.hosts[index]
        host_header = (request.getHeader(b"host") or b"").decode("latin-1")
        vhost = host_header.rsplit(":", 1)[0] if ":" in host_header else host_header
        raw_path = request.path.decode("latin-1")
        query = request.uri.partition(b"?")[2].decode("latin-1")
        logged_path = raw_path + ("?" + query if query else "")
        location: str | None = None
        retry_after: str | None = None
        headers: list[tuple[bytes, bytes]] = []
        version = -1
        conditional = (
            request.getHeader(b"if-none-match") is not None
            or request.getHeader(b"if-modified-since") is not None
        )
        method = request.method
        if self.hostile and raw_path.startswith(TRICKLE_PREFIX) and method == b"GET":
            return self._trickle(index, request, logged_path, start, vhost)
        if self.edits and method == b"POST" and raw_path.startswith(EDIT_PREFIX + "/"):
            return self._edit(index, raw_path[len(EDIT_PREFIX):], request)
        if method not in (b"GET", b"HEAD"):
            status, ctype, body = 405, "text/plain", b"method not allowed\n"
        elif raw_path == "/robots.txt" and not query:
            hits = self._robots_hits[index] = self._robots_hits.get(index, 0) + 1
            if hits <= self.robots_failures:
                status, ctype, body = 500, "text/plain", b"robots.txt is failing\n"
            else:
                status, ctype, body = 200, "text/plain", self._robots(index).encode("utf-8")
        elif index in self.failing_hosts:
            status, ctype, body = 503, "text/plain", b"down\n"
        elif index in self.trap_hosts:
            status, ctype, body = 200, "text/html", _calendar_page(raw_path)
        elif index in self.trap_kinds:
            status, ctype, body = 200, "text/html", trap_page(self.trap_kinds[index], index,
                                                              raw_path, query)
        elif raw_path.startswith("/garbage-retry-after/") and not query:
            # 429 with a Retry-After no parser can read (Latin-1 superscript two: it passes
            # str.isdigit() and fails float()), then 200.
            key = (index, raw_path)
            self._flaky_hits[key] = self._flaky_hits.get(key, 0) + 1
            if self._flaky_hits[key] > 1:
                status, ctype, body = 200, "text/html", b"<html><title>ok</title></html>"
            else:
                status, ctype, body = 429, "text/plain", b"slow down\n"
                headers.append((b"Retry-After", b"\xb2"))
        elif raw_path.startswith(("/ratelimit/", "/unavailable/")) and not query:
            # First request to each such path: 429 with "Retry-After: 1" (/ratelimit/) or 503
            # with an HTTP-date Retry-After 1 to 2 s ahead (/unavailable/); then 200.
            key = (index, raw_path)
            self._flaky_hits[key] = self._flaky_hits.get(key, 0) + 1
            if self._flaky_hits[key] > 1:
                status, ctype, body = 200, "text/html", b"<html><title>ok</title></html>"
            elif raw_path.startswith("/ratelimit/"):
                status, ctype, body = 429, "text/plain", b"slow down\n"
                retry_after = "1"
            else:
                status, ctype, body = 503, "text/plain", b"come back later\n"
                # Whole seconds only: the next full second plus one, so more than 1 s ahead.
                retry_after = formatdate(math.floor(time.time()) + 2, usegmt=True)
        elif self.hostile and raw_path.startswith(HOSTILE_PREFIX):
            status, ctype, body = hostile_document(
                raw_path, self.spec.url(index, "", self.port_of).rstrip("/"))
        elif self.signals and raw_path in SITEMAP_PATHS and not query:
            status, ctype, body = self._signals_response(index, raw_path, start)
        elif index in self._doc_roots:
            status, ctype, body = self._doc_response(self._doc_roots[index], raw_path)
        elif raw_path.startswith("/redirect/") and not query:
            # Off the link graph: for tests of redirects re-entering the scheduler.
            location = "/p/" + raw_path[len("/redirect/") :]
            status, ctype, body = 302, "text/plain", b"moved\n"
        elif raw_path.startswith("/flaky/") and not query:
            # 503 on the first request to each such path, then 200: for retry tests.
            key = (index, raw_path)
            self._flaky_hits[key] = self._flaky_hits.get(key, 0) + 1
            if self._flaky_hits[key] == 1:
                status, ctype, body = 503, "text/plain", b"try again\n"
            else:
                status, ctype, body = 200, "text/html", b"<html><title>ok</title></html>"
        else:
            status, ctype, body, version, headers = self._page_response(
                index, raw_path, query, start, request
            )
        sent = 0 if method == b"HEAD" or status in (204, 304) else len(body)
        workers = self._workers.get(index)
        begun = start  # when the service began: later than the arrival only while queued
        serving = False  # holds one of the host's workers

        def serve() -> None:
            nonlocal begun, serving
            begun, serving = time.monotonic(), True
            self._pending[request] = _reactor().callLater(host.latency, respond)

        def release() -> None:
            nonlocal serving
            if workers is not None and serving:
                serving = False
                workers.release()

        def respond() -> None:
            self._pending.pop(request, None)
            # callLater runs on the reactor's wall clock; re-arm if the monotonic clock says the
            # latency has not fully passed, so the logged service time is never below it.
            left = host.latency - (time.monotonic() - begun)
            if left > 0.0005:
                self._pending[request] = _reactor().callLater(left, respond)
                return
            if getattr(request, "_disconnected", False):
                release()
                return
            request.setResponseCode(status)
            for name, value in headers:
                request.setHeader(name, value)
            if status == 304:  # no body, no Content-Type/Length of a body not sent
                request.finish()
            else:
                request.setHeader(b"Content-Type", ctype.encode("ascii"))
                if location is not None:
                    request.setHeader(b"Location", location.encode("ascii"))
                if retry_after is not None:
                    request.setHeader(b"Retry-After", retry_after.encode("ascii"))
                request.setHeader(b"Content-Length", str(len(body)).encode("ascii"))
                request.write(body)
                request.finish()
            self._record(
                LogEntry(
                    host.key,
                    logged_path,
                    start,
                    time.monotonic(),
                    status,
                    vhost,
                    bytes=sent,
                    version=version,
                    conditional=conditional,
                    begin=None if workers is None else begun,
                )
            )
            release()  # after the record: the next service begins no earlier than this end

        def closed(ended: float, began: float | None) -> None:
            self._record(
                LogEntry(
                    host.key,
                    logged_path,
                    start,
                    ended,
                    CLIENT_CLOSED,
                    vhost,
                    version=version,
                    conditional=conditional,
                    begin=began,
                )
            )

        def aborted(failure: Failure) -> None:
            del failure  # any failure here means the client went away
            call = self._pending.pop(request, None)
            now = time.monotonic()
            if call is not None and call.active():
                call.cancel()
                closed(now, None if workers is None else begun)
                release()
            elif workers is not None and workers.withdraw(serve):
                closed(now, now)  # left while waiting: no service at all

        request.notifyFinish().addErrback(aborted)
        if workers is None:
            self._pending[request] = _reactor().callLater(host.latency, respond)
        else:
            workers.admit(serve)
        return cast(int, NOT_DONE_YET)

    def _robots(self, index: int) -> str:
        delay = self.crawl_delays.get(index)
        text = (self.robots_txt if delay is None
                else f"User-agent: *\nCrawl-delay: {delay:g}\nDisallow:\n")
        if self._publishes(index):
            text += f"\nSitemap: {self.spec.url(index, '/sitemap.xml', self.port_of)}\n"
        return text

    def _publishes(self, index: int) -> bool:
        host = self.spec.hosts[index]
        return self.signals and self._kind(index) != "silent" and not host.doc_root

    def _kind(self, index: int) -> str:
        return host_kind(index, self.kinds)

    def _stamped(self, index: int) -> bool:
        """Pages with a per-response line and no validators (a ``stamped`` host)."""
        return self.signals and self._kind(index) == "stamped"

    def _claims(self, index: int, now: float) -> list[tuple[str, float, str]]:
        """(URL, claimed change time, changefreq) of every page of a publishing host."""
        assert self.started is not None and self.started_wall is not None
        kind = self._kind(index)
        model = self.changes
        wall_now = self.started_wall + (now - self.started)
        out = []
        for page in range(self.spec.hosts[index].pages):
            changing = self.edits or (model is not None and model.is_changing(index, page))
            last = self._changes_wall(index, page, now)[0]
            freq = "hourly" if changing and kind != "liar" else "never"
            out.append((self.spec.url(index, f"{PAGE_PREFIX}{page}", self.port_of),
                        claimed(kind, last, self.started_wall, wall_now), freq))
        return out

    def _trickle(self, index: int, request: Request, logged_path: str, start: float,
                 vhost: str) -> int:
        """A sitemap that never finishes: its start, then a byte every TRICKLE_EVERY
        seconds until the client goes away (or the server stops)."""
        host = self.spec.hosts[index]
        sent = len(TRICKLE_HEAD)
        request.setResponseCode(200)
        request.setHeader(b"Content-Type", b"application/xml")
        request.setHeader(b"Content-Length", str(TRICKLE_LENGTH).encode("ascii"))
        request.write(TRICKLE_HEAD)

        def drip() -> None:
            nonlocal sent
            if getattr(request, "_disconnected", False):
                return
            request.write(b" ")
            sent += 1
            self._pending[request] = _reactor().callLater(TRICKLE_EVERY, drip)

        def gone(failure: Failure) -> None:
            del failure  # the client went away: the only way a trickle ends
            call = self._pending.pop(request, None)
            if call is not None and call.active():
                call.cancel()
            self._record(LogEntry(host.key, logged_path, start, time.monotonic(),
                                  CLIENT_CLOSED, vhost, bytes=sent))

        request.notifyFinish().addErrback(gone)
        self._pending[request] = _reactor().callLater(TRICKLE_EVERY, drip)
        return cast(int, NOT_DONE_YET)

    def _signals_response(self, index: int, path: str, now: float) -> tuple[int, str, bytes]:
        if not self._publishes(index):
            return _not_found()
        claims = self._claims(index, now)
        half = (len(claims) + 1) // 2
        parts = {"/sitemap-1.xml.gz": claims[:half], "/sitemap-2.xml": claims[half:]}
        if path == "/sitemap.xml":
            children = [(self.spec.url(index, child, self.port_of),
                         max((c[1] for c in entries), default=self.started_wall or 0.0))
                        for child, entries in parts.items()]
            children += [(self.spec.url(other, "/sitemap-2.xml", self.port_of),
                          self.started_wall or 0.0)
                         for named_by, other in self.foreign_sitemaps if named_by == index]
            return 200, "application/xml", sitemap_index(children)
        if path == "/feed.atom":
            base = self.spec.url(index, "", self.port_of)
            return 200, "application/atom+xml", atom_feed(base, [(u, t) for u, t, _ in claims])
        compress = path.endswith(".gz")
        return (200, "application/gzip" if compress else "application/xml",
                urlset(parts[path], compress=compress))

    def _record(self, entry: LogEntry) -> None:
        self.log.append(entry)
        if self._writer is not None:
            self._writer.write(entry)

    def _page_response(
        self, index: int, path: str, query: str, now: float, request: Request
    ) -> tuple[int, str, bytes, int, list[tuple[bytes, bytes]]]:
        """(status, content type, body, version, extra headers) of a generated page.

        With a change model the content is the page's version at ``now`` (the request's
        arrival), with validators, and 304 when the request's conditions say so.
        """
        m = _PAGE_RE.fullmatch(path)
        if m is None or query:
            return (*_not_found(), -1, [])
        page = int(m.group(1))
        if page >= self.spec.hosts[index].pages:
            return (*_not_found(), -1, [])
        model = self.changes
        if model is None:
            return 200, _HTML, self.spec.render_page(index, page, self.port_of), 0, []
        assert self.started is not None and self.started_wall is not None
        t = now - self.started
        edits = len(self._edit_times.get((index, page), ()))
        # With --edits the page changes only by edits: its version is their count.
        version = edits if self.edits else model.version(index, page, t)
        stamped = self._stamped(index)
        noisy = stamped or model.is_noisy(index, page)
        etag = None if noisy else model.etag(index, page, version)
        last, previous = self._changes_wall(index, page, now)
        headers = [] if stamped else [(b"Last-Modified", http_date(last).encode("ascii"))]
        if etag is not None:
            headers.append((b"ETag", etag.encode("ascii")))
        inm = request.getHeader(b"if-none-match")
        ims = request.getHeader(b"if-modified-since")
        if not stamped and evaluate_conditional(
            None if inm is None else inm.decode("latin-1"),
            None if ims is None else ims.decode("latin-1"),
            etag,
            last,
            previous,
            self.started_wall + t,
        ):
            return 304, _HTML, b"", version, headers
        noise = None
        if noisy:
            key = (index, page)
            self._responses[key] = self._responses.get(key, 0) + 1
            noise = f"Generated for request {self._responses[key]}"
        body = render_dynamic_page(self.spec, index, page, self.port_of,
                                   0 if self.edits else version, noise, edits)
        return 200, _HTML, body, version, headers

    def _changes_wall(self, index: int, page: int, now: float) -> tuple[float, float | None]:
        """Wall-clock times of the page's last change at ``now`` (monotonic) and of the one
        before (the server's start counting as a change; None when it is the last)."""
        assert self.started is not None and self.started_wall is not None
        if self.edits:
            times = [self.started_wall, *self._edit_times.get((index, page), ())]
            return times[-1], (times[-2] if len(times) > 1 else None)
        model = self.changes
        if model is None:
            return self.started_wall, None
        t = now - self.started
        before = model.previous_change(index, page, t)
        return (self.started_wall + model.last_change(index, page, t),
                None if before is None else self.started_wall + before)

    def _edit(self, index: int, path: str, request: Request) -> bytes:
        """``POST /_edit/p/N``: one small edit of page N, now (not logged: not a crawl's)."""
        m = _PAGE_RE.fullmatch(path)
        request.setHeader(b"Content-Type", b"application/json")
        if m is None or int(m.group(1)) >= self.spec.hosts[index].pages:
            request.setResponseCode(404)
            return b'{"error": "no such page"}'
        times = self._edit_times.setdefault((index, int(m.group(1))), [])
        times.append(time.time())
        return json.dumps({"edits": len(times), "at": times[-1]}).encode()

    def _doc_response(self, root: str, raw_path: str) -> tuple[int, str, bytes]:
        path = unquote(raw_path)
        parts = [p for p in path.split("/") if p]
        if "\x00" in path or any(p in (".", "..") for p in parts):
            return _not_found()
        fs_path = os.path.join(root, *parts)
        if os.path.isdir(fs_path):
            index_file = os.path.join(fs_path, "index.html")
            if os.path.isfile(index_file):
                fs_path = index_file
            elif not parts:
                return 200, _HTML, _listing(root)
            else:
                return _not_found()
        real = os.path.realpath(fs_path)
        # Symlinks may point anywhere; serve only what really lives inside the tree.
        if not real.startswith(root + os.sep) or not os.path.isfile(real):
            return _not_found()
        try:
            if os.path.getsize(real) > MAX_DOC_FILE_BYTES:
                return _not_found()
            with open(real, "rb") as f:
                body = f.read(MAX_DOC_FILE_BYTES + 1)
        except OSError:
            return _not_found()
        ctype, encoding = mimetypes.guess_type(real)
        if encoding is not None:
            ctype = "application/gzip" if encoding == "gzip" else "application/octet-stream"
        return 200, ctype or "application/octet-stream", body


def _calendar_page(path: str) -> bytes:
    """A day of an infinite calendar: links to the next two days, forever."""
    tail = path.rsplit("/", 1)[-1]
    day = int(tail) if path.startswith("/calendar/") and tail.isdigit() else 0
    links = "".join(f'<a href="/calendar/{d}">day {d}</a>' for d in (day + 1, day + 2))
    return f"<html><title>day {day}</title><body>{links}</body></html>".encode()


def _not_found() -> tuple[int, str, bytes]:
    return 404, "text/plain", b"not found\n"


def _listing(root: str) -> bytes:
    """An index page linking every HTML file of a tree that has no index.html of its own."""
    rels = html_files(root, MAX_LISTING_ENTRIES)
    items = "\n".join(f'<li><a href="/{quote(r)}">{quote(r)}</a></li>' for r in rels)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Index</title>'
        f"</head>\n<body><h1>Index</h1>\n<ul>\n{items}\n</ul>\n</body></html>\n"
    ).encode()
