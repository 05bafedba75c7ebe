"""Find real HTML documentation trees on this machine, to serve as realistic hosts.

Generated pages have a known graph; real documentation has real markup, relative links, CSS and
images. A crawl over both checks the frontier against content nobody tuned for it.
"""

from __future__ import annotations

import glob
import math
import os
import sys
import sysconfig
import time

from frontier_testweb.spec import HostSpec, host_addresses

#: Where packaged HTML documentation usually lives (Debian layouts, Python's own docs, and
#: documentation some packages bundle in site-packages).
_PATTERNS = (
    "/usr/share/doc/*/html",
    "/usr/share/doc/*/*/html",
    "/usr/share/*/html",
    "/usr/share/gtk-doc/html/*",
    "/usr/share/devhelp/books/*",
    "/usr/local/share/doc/*/html",
    "{prefix}/share/doc/*/html",
    "{prefix}/Doc/html",
    "{purelib}/*/docs/html",
    "{purelib}/*/doc/html",
    "{purelib}/*/html",
)
DEFAULT_DOC_FIRST_ADDRESS = "127.0.200.1"
#: A tree needs at least this many pages to be worth crawling.
MIN_HTML_FILES = 5
#: Per-tree cap on files counted, so a huge tree cannot stall the search.
MAX_FILES_SCANNED = 5000
#: Cap on candidate directories looked at.
MAX_CANDIDATES = 200


def _candidates() -> list[str]:
    prefixes = {sys.base_prefix, sys.prefix}
    purelib = sysconfig.get_paths().get("purelib", "")
    dirs: list[str] = []
    for pattern in _PATTERNS:
        for prefix in sorted(prefixes):
            expanded = pattern.format(prefix=prefix, purelib=purelib)
            dirs.extend(sorted(glob.glob(expanded)))
            if "{prefix}" not in pattern:
                break  # the pattern does not depend on the prefix
    seen: set[str] = set()
    out: list[str] = []
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen and os.path.isdir(real):
            seen.add(real)
            out.append(d)
    return out[:MAX_CANDIDATES]


def _count_html(root: str, deadline: float) -> tuple[int, tuple[str, ...]]:
    """Number of .html files under ``root`` (bounded) and a signature of the first few names."""
    names = html_files(root, MAX_FILES_SCANNED, deadline)
    return len(names), tuple(names[:20])


def html_files(root: str, limit: int, deadline: float = math.inf) -> list[str]:
    """Relative paths of up to ``limit`` HTML files the server would serve from ``root``.

    Symlinks leading out of the tree are skipped: the server refuses them.
    """
    real_root = os.path.realpath(root)
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith((".html", ".htm")):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full) and not os.path.realpath(full).startswith(real_root + os.sep):
                continue
            out.append(os.path.relpath(full, root))
            if len(out) >= limit:
                return out
        if time.monotonic() > deadline:
            break
    return out


def _nested(a: str, b: str) -> bool:
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    return ra == rb or ra.startswith(rb + os.sep) or rb.startswith(ra + os.sep)


def doc_tree_hosts(
    max_hosts: int = 2,
    first_address: str = DEFAULT_DOC_FIRST_ADDRESS,
    latency: float = 0.01,
    time_budget: float = 2.0,
    roots: list[str] | None = None,
    max_pages: int | None = None,
    keep_order: bool = False,
) -> list[HostSpec]:
    """Up to ``max_hosts`` documentation trees installed here, as hosts; [] when there are none.

    Picks the trees with the most HTML files (ties by path, so the choice is stable on one
    machine). Packages often ship the same tree twice (e.g. -dev and runtime packages), so trees
    whose file listings match are counted once. The search stops after ``time_budget`` seconds.
    ``roots`` replaces the built-in search locations (useful in tests, and to name the trees a
    benchmark serves; ``keep_order`` then keeps their order instead of sorting by size).
    ``max_pages`` leaves out trees with more HTML files (None: no limit).
    """
    if max_hosts <= 0:
        return []
    deadline = time.monotonic() + time_budget
    found: list[tuple[int, str]] = []
    signatures: set[tuple[int, tuple[str, ...]]] = set()
    for root in roots if roots is not None else _candidates():
        if time.monotonic() > deadline:
            break
        if not os.access(root, os.R_OK | os.X_OK):
            continue
        count, names = _count_html(root, deadline)
        if count < MIN_HTML_FILES or (count, names) in signatures:
            continue
        if max_pages is not None and count > max_pages:
            continue
        signatures.add((count, names))
        found.append((count, root))
    if not keep_order:
        found.sort(key=lambda item: (-item[0], item[1]))
    chosen: list[tuple[int, str]] = []
    for count, root in found:
        if len(chosen) >= max_hosts:
            break
        # A tree nested in another (or containing it) would serve the same files twice.
        if any(_nested(root, other) for _, other in chosen):
            continue
        chosen.append((count, root))
    addresses = host_addresses(len(chosen), first_address)
    return [
        HostSpec(address=a, pages=count, latency=latency, doc_root=os.path.realpath(root))
        for a, (count, root) in zip(addresses, chosen, strict=True)
    ]
