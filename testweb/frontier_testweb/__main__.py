"""Command line: ``serve`` a test web until signalled, or ``audit`` a request log.

Examples::

    python -m frontier_testweb serve --shape skewed --log /tmp/web.jsonl
    python -m frontier_testweb audit /tmp/web.jsonl --factor 10
    python -m frontier_testweb serve --change-rate 0.01 --changing-fraction 0.5 \
        --rate-shape 0.5 --noisy-fraction 0.2

Pages that change (see :mod:`frontier_testweb.changes`):

``--change-rate RATE``
    Mean changes per second of a changing page (a Poisson process per page; default 0).
``--changing-fraction F``
    Fraction of the generated pages that change, chosen per page by the seed (default 1.0).
``--rate-shape K``
    Draw each changing page's rate from a gamma distribution of shape K and mean RATE
    (default: every changing page has RATE).
``--noisy-fraction F``
    Fraction of the pages (chosen by the seed, independently of the changing ones) that add a
    per-response "Generated for request N" line and send no ETag (default 0).
``--conditional``
    Send validators and answer conditional GETs even with no other change option (the pages
    then never change). Any of these options turns the change model on, and with it long
    pages, ``ETag``/``Last-Modified`` headers and 304 answers.
``--edits``
    Pages change only when the test edits them, one small edit per ``POST /_edit/p/N`` on the
    page's host (``changes.edit_page``); turns the change model on.

The announcement line then also has ``"changes"`` (the options; null without a change model),
and always ``"seed"``, ``"started"`` (the server's ``time.monotonic()`` at start, which page
times count from) and ``"started_wall"`` (its ``time.time()``):
``changes.GroundTruth.from_announcement(line)`` rebuilds the ground truth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from frontier_testweb.audit import audit
from frontier_testweb.changes import ChangeOptions
from frontier_testweb.docs import doc_tree_hosts
from frontier_testweb.log import read_log
from frontier_testweb.server import IDLE_TIMEOUT, TestWebServer
from frontier_testweb.signals import KINDS, host_kind, parse_kinds
from frontier_testweb.spec import WebSpec, skewed_web, wide_web
from frontier_testweb.traps import TRAP_KINDS


def build_changes(args: argparse.Namespace) -> ChangeOptions | None:
    """The change options asked for, or None when no change option is given."""
    if not (
        args.change_rate
        or args.noisy_fraction
        or args.conditional
        or args.rate_shape is not None
        or args.changing_fraction is not None
    ):
        return None
    return ChangeOptions(
        rate=args.change_rate,
        changing_fraction=1.0 if args.changing_fraction is None else args.changing_fraction,
        rate_shape=args.rate_shape,
        noisy_fraction=args.noisy_fraction,
    )


def kinds_argument(text: str) -> tuple[str, ...]:
    """``--kinds``, with the reason of a bad value in argparse's error."""
    try:
        return parse_kinds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_serve(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (``p.error``: usage and exit 2) options of ``serve`` that would be ignored."""
    if args.kinds is not None and not args.signals:
        p.error("--kinds gives the hosts' kinds of --signals: add --signals")
    if args.edits and (args.change_rate or args.changing_fraction is not None
                       or args.rate_shape is not None):
        p.error("--edits: pages change only by the test's edits, so --change-rate, "
                "--changing-fraction and --rate-shape would be ignored")


def build_spec(args: argparse.Namespace) -> WebSpec:
    latency = tuple(args.latency) if args.latency else None
    common: dict[str, Any] = {"seed": args.seed, "cross_links": args.cross_links}
    if latency is not None:
        common["latency"] = latency
    if args.hosts is not None:
        common["hosts"] = args.hosts
    if args.addresses is not None:
        common["addresses"] = args.addresses
    if args.shape == "skewed":
        if args.largest is not None:
            common["largest"] = args.largest
        if args.zipf_s is not None:
            common["zipf_s"] = args.zipf_s
        spec = skewed_web(**common)
    else:
        if args.pages is not None:
            common["pages"] = args.pages
        spec = wide_web(**common)
    if args.docs_root:
        # Named trees: served whatever their size, in the order given.
        spec = spec.with_hosts(doc_tree_hosts(max_hosts=len(args.docs_root), roots=args.docs_root,
                                              max_pages=None, keep_order=True))
    elif args.docs:
        spec = spec.with_hosts(doc_tree_hosts(max_hosts=args.docs_max,
                                              max_pages=args.docs_max_pages))
    if args.workers is not None:
        spec = spec.with_workers(args.workers)
    return spec


class _RunnableReactor(Protocol):
    def run(self) -> None: ...

    def stop(self) -> None: ...

    def callLater(self, delay: float, f: Callable[[], object]) -> object: ...

    def addSystemEventTrigger(self, phase: str, event: str, f: Callable[[], object]) -> object: ...


def serve(args: argparse.Namespace) -> int:
    from twisted.internet import reactor as installed
    from twisted.internet.task import LoopingCall

    # Twisted's zope interfaces are not plain classes to mypy; describe what is used here.
    reactor = cast(_RunnableReactor, installed)

    spec = build_spec(args)
    changes = build_changes(args)
    robots = None
    if args.robots_txt is not None:
        with open(args.robots_txt, encoding="utf-8") as f:
            robots = f.read()
    server = TestWebServer(
        spec,
        log_path=args.log,
        port=args.port,
        robots_txt=robots,
        crawl_delays={int(i): float(d) for i, d in args.crawl_delay or ()},
        failing_hosts=args.failing_host or (),
        robots_failures=args.robots_failures,
        signals=args.signals,
        foreign_sitemaps=[(int(a), int(b)) for a, b in args.foreign_sitemap or ()],
        hostile=args.hostile,
        changes=changes,
        trap_hosts=args.trap_host or (),
        kinds=args.kinds or KINDS,
        edits=args.edits,
        idle_timeout=args.idle_timeout,
        trap_kinds=dict(args.trap or ()),
    )
    server.start()
    announcement = {
        "start_urls": server.start_urls(),
        "expected": sorted([h, p] for h, p in server.expected()),
        "allowed_domains": server.allowed_domains(),
        "pid": os.getpid(),
        "port": server.port,
        "seed": spec.seed,
        "started": server.started,
        "started_wall": server.started_wall,
        "changes": (None if server.changes is None
                    else server.changes.options.as_dict()),
        "edits": args.edits,
        "hosts": [
            {"address": h.address, "pages": h.pages, "latency": h.latency, "doc_root": h.doc_root,
             **({"name": h.name} if h.name is not None else {}),
             **({"signals": host_kind(i, server.kinds)} if args.signals and not h.doc_root
                else {}),
             **({"workers": h.workers} if h.workers is not None else {})}
            for i, h in enumerate(spec.hosts)
        ],
    }
    sys.stdout.write(json.dumps(announcement) + "\n")
    sys.stdout.flush()

    # Shutdown waits for the ports to close and the log file to be flushed and closed.
    reactor.addSystemEventTrigger("before", "shutdown", server.stop)
    # Never outlive the time budget, nor the process that started us (a crashed test run
    # must not leave hundreds of listening sockets behind).
    reactor.callLater(args.max_seconds, reactor.stop)
    if not args.detached:
        parent = os.getppid()

        def check_parent() -> None:
            if os.getppid() != parent:
                reactor.stop()

        LoopingCall(check_parent).start(1.0, now=False)
    reactor.run()
    return 0


def run_audit(args: argparse.Namespace) -> int:
    expected: set[tuple[str, str]] | None = None
    if args.expected is not None:
        with open(args.expected, encoding="utf-8") as f:
            data = json.loads(f.readline())
        pairs = data["expected"] if isinstance(data, dict) else data
        expected = {(str(h), str(p)) for h, p in pairs}
    report = audit(
        read_log(args.log),
        expected=expected,
        factor=args.factor,
        min_delay=args.min_delay,
        max_delay=args.max_delay,
        concurrency=args.concurrency,
        connections=lambda host: int(args.connections),
        tolerance=args.tolerance,
        include_robots=args.include_robots,
    )
    print(json.dumps(report.as_dict()) if args.json else report.summary())
    return 1 if args.strict and not report.polite else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m frontier_testweb")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="serve a simulated multi-host web on loopback")
    s.add_argument("--shape", choices=("skewed", "wide"), default="skewed")
    s.add_argument("--hosts", type=int, help="number of hosts (skewed: 30, wide: 300)")
    s.add_argument("--pages", type=int, help="pages per host (wide only; default 8)")
    s.add_argument("--largest", type=int, help="pages of the largest host (skewed; 150)")
    s.add_argument("--zipf-s", type=float, help="Zipf exponent of host sizes (skewed; 1.0)")
    s.add_argument("--latency", type=float, nargs=2, metavar=("LO", "HI"))
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--cross-links", type=int, default=2)
    s.add_argument(
        "--addresses", type=int, metavar="K",
        help="virtual hosts: host i is h{i}.web.test on the (i mod K)-th of K loopback "
        "addresses, found by the Host header (crawls resolve the names with "
        "frontier_testweb.resolver.AliasResolver; up to 200,000 hosts). Default: one "
        "address per host, URLs by address (up to 5,000 hosts)",
    )
    s.add_argument(
        "--workers", type=int, metavar="C",
        help="every host serves at most C requests at once, the others wait in line "
        "(default: all on arrival)",
    )
    s.add_argument("--port", type=int, default=0, help="0 picks a free port")
    s.add_argument(
        "--idle-timeout", type=float, default=IDLE_TIMEOUT, metavar="SECONDS",
        help="close a connection idle this long (default %(default)g, Twisted's)",
    )
    s.add_argument("--log", help="append request log entries (JSON lines) to this file")
    s.add_argument("--robots-txt", help="file whose content every host serves as robots.txt")
    s.add_argument(
        "--crawl-delay",
        nargs=2,
        action="append",
        metavar=("HOST", "SECONDS"),
        help="host number HOST's robots.txt asks for this Crawl-delay (repeatable)",
    )
    s.add_argument(
        "--failing-host",
        type=int,
        action="append",
        metavar="HOST",
        help="host number HOST answers 503 to everything but robots.txt (repeatable)",
    )
    s.add_argument(
        "--robots-failures",
        type=int,
        default=0,
        metavar="N",
        help="every host's robots.txt answers 500 to its first N requests",
    )
    s.add_argument(
        "--signals",
        action="store_true",
        help="hosts publish sitemaps and an Atom feed, by host number modulo 4: truthful, "
        "liar (lastmod never moves), noisy (lastmod always now), silent",
    )
    s.add_argument(
        "--kinds",
        type=kinds_argument,
        metavar="K1,K2,...",
        help="with --signals, host i is of kind K[i %% len(K)] (truthful, liar, noisy, silent, "
        "stamped: truthful, its pages with a per-response line and no validators)",
    )
    s.add_argument(
        "--foreign-sitemap",
        type=int,
        nargs=2,
        action="append",
        metavar=("HOST", "OTHER"),
        help="with --signals, HOST's sitemap index also names OTHER's /sitemap-2.xml "
        "(repeatable)",
    )
    s.add_argument(
        "--hostile",
        action="store_true",
        help="every host serves hostile sitemaps under /hostile/: a gzip bomb, billion "
        "laughs, external entities, one too large, one malformed, one that never finishes",
    )
    s.add_argument(
        "--trap-host",
        type=int,
        action="append",
        metavar="HOST",
        help="host number HOST is a spider trap: an infinite calendar (repeatable)",
    )
    s.add_argument(
        "--trap",
        type=_trap,
        action="append",
        metavar="HOST:KIND",
        help="host number HOST is a trap of KIND: calendar, session or counter (its pages "
        "wear a site template; see frontier_testweb.traps; repeatable)",
    )
    c = s.add_argument_group("pages that change (any of these turns the change model on)")
    c.add_argument(
        "--change-rate",
        type=float,
        default=0.0,
        metavar="RATE",
        help="mean changes per second of a changing page (Poisson; default 0)",
    )
    c.add_argument(
        "--changing-fraction",
        type=float,
        metavar="F",
        help="fraction of pages that change, chosen by the seed (default 1.0)",
    )
    c.add_argument(
        "--rate-shape",
        type=float,
        metavar="K",
        help="per-page rates drawn from a gamma distribution of shape K, mean RATE",
    )
    c.add_argument(
        "--noisy-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="fraction of pages with a per-response noise line and no ETag (default 0)",
    )
    c.add_argument(
        "--edits",
        action="store_true",
        help="pages change only by the test's small edits (POST /_edit/p/N on their host)",
    )
    c.add_argument(
        "--conditional",
        action="store_true",
        help="send ETag/Last-Modified and answer 304 even if no page changes",
    )
    s.add_argument("--docs", action="store_true", help="add hosts serving installed HTML docs")
    s.add_argument("--docs-max", type=int, default=2)
    s.add_argument(
        "--docs-max-pages", type=int, default=100, metavar="N",
        help="--docs picks only trees of at most N pages (default 100: quick test crawls)",
    )
    s.add_argument(
        "--docs-root", action="append", metavar="DIR",
        help="serve this HTML tree as a host (repeatable; replaces the --docs search)",
    )
    s.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long")
    s.add_argument(
        "--detached", action="store_true", help="keep serving if the parent process exits"
    )
    s.set_defaults(func=serve)

    a = sub.add_parser("audit", help="check politeness and coverage of a request log")
    a.add_argument("log")
    a.add_argument("--factor", type=float, default=10.0)
    a.add_argument("--min-delay", type=float, default=0.0)
    a.add_argument("--max-delay", type=float, default=60.0)
    a.add_argument("--concurrency", type=int, default=16)
    a.add_argument(
        "--connections", type=int, default=1, metavar="K",
        help="connections every host may use at once, each resting after its own fetches",
    )
    a.add_argument("--tolerance", type=float, default=0.002)
    a.add_argument("--include-robots", action="store_true")
    a.add_argument("--expected", help="the JSON line printed by serve (or a JSON list of pairs)")
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.add_argument("--strict", action="store_true", help="exit 1 if the log is impolite")
    a.set_defaults(func=run_audit)
    return p


def _trap(text: str) -> tuple[int, str]:
    host, _, kind = text.partition(":")
    if not host.isdigit() or kind not in TRAP_KINDS:
        raise argparse.ArgumentTypeError(
            f"expected HOST:KIND with KIND one of {', '.join(TRAP_KINDS)}, got {text!r}")
    return int(host), kind


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.command == "serve":
        check_serve(p, args)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
