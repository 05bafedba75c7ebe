"""The read side of ``scrapy frontier`` on the SQLite backend.

Every file is opened read-only (``mode=ro``) in WAL mode, beside the crawl that writes
it (the crawl holds a lock file, not an SQLite exclusive lock: see
:mod:`scrapy_frontier.backends.sqlite.lock`). All reads of one call are one read
transaction per file, so the numbers are a consistent snapshot of the last commit --
with write-through, at most a second behind the crawl. Nothing here writes.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from w3lib.url import canonicalize_url

from scrapy_frontier.backends.sqlite.backend import STATE_FILE
from scrapy_frontier.backends.sqlite.control import RETIRED, TAKEN_BACK, ControlFile
from scrapy_frontier.backends.sqlite.history import FORMAT as HISTORY_FORMAT
from scrapy_frontier.backends.sqlite.history import STORE_NAME as HISTORY_FILE
from scrapy_frontier.backends.sqlite.history import VERSION as HISTORY_VERSION
from scrapy_frontier.backends.sqlite.lock import is_locked
from scrapy_frontier.backends.sqlite.seen import FORMAT as SEEN_FORMAT
from scrapy_frontier.backends.sqlite.seen import VERSION as SEEN_VERSION
from scrapy_frontier.backends.sqlite.state import FORMAT, VERSION
from scrapy_frontier.codec import saved_url
from scrapy_frontier.commands import shapes
from scrapy_frontier.commands.shapes import HostView, HostViews
from scrapy_frontier.core.history import readable_record
from scrapy_frontier.core.politeness import delay_rule_from
from scrapy_frontier.dupefilter import STORE_NAME as SEEN_FILE
from scrapy_frontier.errors import FrontierCommandError
from scrapy_frontier.settings import FrontierConfig


def _connect_ro(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0,
                               isolation_level=None)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        raise FrontierCommandError(
            f"cannot read {path} ({type(exc).__name__}: {exc}). Check that it is a "
            "scrapy-frontier state file and that this user may read it and its directory."
        ) from exc
    return conn


def _meta(conn: sqlite3.Connection, path: Path, table: str) -> dict[str, Any]:
    try:
        return dict(conn.execute(f"SELECT key, value FROM {table}").fetchall())
    except sqlite3.Error as exc:
        raise FrontierCommandError(
            f"{path} is not a scrapy-frontier state file ({exc}). Point JOBDIR / "
            "FRONTIER_PATH at the crawl's directory."
        ) from exc


class SQLiteInspector:
    """A read-only look at a JOBDIR (or FRONTIER_PATH): queues, seen-set, history."""

    backend = "sqlite"

    def __init__(self, config: FrontierConfig) -> None:
        if not config.state_dir:
            raise FrontierCommandError(
                "no crawl state to read: set JOBDIR or FRONTIER_PATH to the crawl's directory "
                "(-s JOBDIR=path), or FRONTIER_BACKEND='redis' with REDIS_URL")
        self.config = config
        self.directory = Path(config.state_dir)
        path = self.directory / STATE_FILE
        if not path.is_file():
            raise FrontierCommandError(
                f"no frontier state at {path}: no crawl with FRONTIER_BACKEND='sqlite' has run "
                "in this directory (check JOBDIR / FRONTIER_PATH). Nothing was created.")
        self.path = path
        self.db = _connect_ro(path)
        meta = _meta(self.db, path, "meta")
        if meta.get("format") != FORMAT or meta.get("version") != str(VERSION):
            raise FrontierCommandError(
                f"{path} holds state format {meta.get('format')!r} version "
                f"{meta.get('version')!r}; this scrapy-frontier reads {FORMAT!r} version "
                f"{VERSION}. Use the scrapy-frontier release that wrote it. Nothing was changed.")
        self.spider = meta.get("spider")
        #: The rests the crawl gives (its own settings, saved with its state).
        self.policy = delay_rule_from(meta, config.policy)
        self.running = is_locked(path)
        #: Queued rows newer than a threshold, as the last :meth:`views` counted them.
        self.newer_rows = 0
        self.seen = self._optional(SEEN_FILE, SEEN_FORMAT, SEEN_VERSION)
        self.history = self._optional(HISTORY_FILE, HISTORY_FORMAT, HISTORY_VERSION)
        self.control = ControlFile(self.directory, readonly=True)
        config.host_policies.steer(self.control.policies())  # shown in force by hosts

    def _optional(self, name: str, fmt: str, version: int) -> sqlite3.Connection | None:
        path = self.directory / name
        if not path.is_file() or not path.stat().st_size:
            return None
        conn = _connect_ro(path)
        meta = _meta(conn, path, "frontier_meta")
        if meta.get("format") != fmt or meta.get("version") != version:
            raise FrontierCommandError(
                f"{path} holds format {meta.get('format')!r} version {meta.get('version')!r}; "
                f"this scrapy-frontier reads {fmt!r} version {version}. Use the release that "
                "wrote it. Nothing was changed.")
        return conn

    def close(self) -> None:
        for conn in (self.db, self.seen, self.history):
            if conn is not None:
                conn.close()
        self.control.close()

    # -- hosts -------------------------------------------------------------------------

    def views(self, rows_after: int | None = None) -> tuple[dict[str, HostView], int]:
        """Every host the state knows, and how many that is.

        ``rows_after``: also count, in the same snapshot, the queued rows with ids above it
        (into :attr:`newer_rows`).
        """
        db = self.db
        now = time.time()
        views = HostViews()

        db.execute("BEGIN")
        try:
            if rows_after is not None:
                self.newer_rows = sum(
                    db.execute(f"SELECT COUNT(*) FROM {table} WHERE id > ? "
                               "AND data IS NOT NULL", (rows_after,)).fetchone()[0]
                    for table in ("front", "back"))
            for host, n in db.execute("SELECT host, COUNT(*) FROM front GROUP BY host"):
                views[host].front = n
            running = self.running
            for host, leased, n in db.execute(
                    "SELECT host, leased, COUNT(*) FROM back GROUP BY host, leased"):
                v = views[host]
                if not running:
                    # A stopped crawl fetches nothing: no host is active, and its URLs
                    # (those of its leases too) wait for the next start, as in a front queue.
                    v.front += n
                    continue
                v.back_queue = True
                if leased:
                    v.in_flight = n
                else:
                    v.back = n
            policy = self.policy
            for host, rest_until, last_fetch in db.execute(
                    "SELECT host, rest_until, last_fetch FROM hosts"):
                v = views[host]
                v.next_contact_in = max(0.0, rest_until - now)
                v.last_fetch_s = last_fetch
                if last_fetch is not None:
                    v.rest_s = policy.delay(last_fetch)
        finally:
            db.execute("COMMIT")
        controls = self.control.controls()
        for host, c in controls.items():
            v = views[host]
            if c.blocked(now):
                assert c.blocked_until is not None
                v.blocked_for = c.blocked_until - now
            if c.delay:
                v.crawl_delay = c.delay
                v.rest_s = max(v.rest_s or 0.0, c.delay)
            if c.retired == RETIRED:
                v.retired = "retired"
        for host, (_, closed) in self.control.crawl_hosts().items():
            # Taken back by hand since the crawl closed it: retired no longer, unless by
            # its budget, which only a higher budget reopens.
            taken_back = host in controls and controls[host].retired == TAKEN_BACK
            if closed and (closed == "budget" or not taken_back):
                views[host].retired = views[host].retired or closed
        if self.history is not None:
            shapes.add_hints(views, self._hint_checks())
        return views, len(views)

    def _hint_checks(self) -> dict[str, tuple[int, int]]:
        history = self.history
        assert history is not None
        if not history.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = "
                               "'hint_trust'").fetchone()[0]:
            return {}
        return {str(h): (int(a), int(d)) for h, a, d in history.execute(
            "SELECT host, agreed, disagreed FROM hint_trust")}

    def notes(self, views: dict[str, HostView]) -> dict[str, str]:
        """A few words per host for the human table: why it is retired, its budget."""
        budgets = {h: c.budget for h, c in self.control.controls().items()
                   if c.budget is not None}
        counts = self.control.crawl_hosts()
        traps = self.control.traps()
        notes: dict[str, str] = {}
        for host, v in views.items():
            budget = budgets.get(host, self.config.budget_for(host))
            fetched = counts.get(host, (0, None))[0]
            parts = []
            if v.retired == "budget":
                parts.append(f"budget {fetched}/{budget}" if budget
                             else f"budget reached at {fetched}")
            elif v.retired:
                parts.append(shapes.RETIRED_WHY.get(v.retired, v.retired))
            elif budget:
                parts.append(f"{fetched}/{budget} of budget")
            if host in traps:
                parts.append(shapes.TRAP_NOTES[traps[host][0]])
            policy = self.config.host_policies.note(host)
            if policy is not None:
                parts.append(policy)
            if parts:
                notes[host] = ", ".join(parts)
        return notes

    # -- the subcommands -------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        # The seen-set and the history first, the queues last. The seen-set on disk covers
        # the queue rows up to its 'covers' id; the fingerprints of newer rows are written
        # at the next flush, so they are counted from the queue, in the queue's snapshot.
        # A URL is marked seen only after it is queued, so "seen - queued - in flight"
        # never counts a URL as done that the crawl has not finished.
        seen = 0
        covers: int | None = None
        if self.seen is not None:
            seen = self.seen.execute("SELECT COUNT(*) FROM seen").fetchone()[0]
            row = self.seen.execute(
                "SELECT value FROM frontier_meta WHERE key = 'covers'").fetchone()
            covers = row[0] if row and isinstance(row[0], int) else None
        pages = due = 0
        if self.history is not None:
            pages = self.history.execute("SELECT COUNT(*) FROM pages").fetchone()[0]
            due = self.history.execute(
                "SELECT COUNT(*) FROM pages WHERE retired = 0 AND eligible <= ?",
                (time.time(),)).fetchone()[0]
        views, known = self.views(rows_after=covers)
        if covers is not None:
            seen += self.newer_rows
        queued = sum(v.front + v.back for v in views.values())
        in_flight = sum(v.in_flight for v in views.values())
        return shapes.status(self.backend, queued, in_flight,
                             shapes.host_counts(list(views.values()), known), seen, pages, due)

    def hosts(self, limit: int, sort: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        views, _ = self.views()
        chosen = shapes.sort_hosts(list(views.values()), sort, limit)
        return [shapes.host_row(v) for v in chosen], self.notes(views)

    def known_host(self, host: str) -> bool:
        views, _ = self.views()
        return host in views

    def host_view(self, host: str) -> HostView | None:
        return self.views()[0].get(host)

    def history_pages(self, fp: int | None, host: str | None) -> int:
        """How many pages of the history a recrawl of ``fp`` / ``host`` / all would mark."""
        if self.history is None:
            return 0
        if fp is not None:
            return len(self.history.execute("SELECT 1 FROM pages WHERE fp = ?",
                                            (fp,)).fetchall())
        if host is None:
            return int(self.history.execute(
                "SELECT COUNT(*) FROM pages WHERE retired = 0").fetchone()[0])
        from scrapy_frontier.hostkey import url_host_key_or_none

        records = (readable_record(fp_, data) for fp_, data in self.history.execute(
            "SELECT fp, data FROM pages WHERE retired = 0"))
        return sum(1 for r in records if r is not None and url_host_key_or_none(r.url) == host)

    def url(self, url: str, host: str, fp: int) -> dict[str, Any]:
        seen = False
        if self.seen is not None:
            seen = self.seen.execute("SELECT 1 FROM seen WHERE fp = ?", (fp,)).fetchone() \
                is not None
        # The same page as the seen-set's: compared canonical, without the fragment.
        page = canonicalize_url(url)
        queued = False
        for table in ("front", "back"):
            for (data,) in self.db.execute(f"SELECT data FROM {table} WHERE host = ?", (host,)):
                saved = None if data is None else saved_url(bytes(data))
                if saved is not None and canonicalize_url(saved) == page:
                    queued = True
                    break
            if queued:
                break
        record = None
        if self.history is not None:
            row = self.history.execute("SELECT data FROM pages WHERE fp = ?", (fp,)).fetchone()
            if row is not None:
                record = readable_record(fp, row[0])
        return shapes.url(url, host, seen, queued, record, self.config.recrawl.predictor)

    def due(self, limit: int) -> list[dict[str, Any]]:
        if self.history is None:
            return []
        rows = self.history.execute(
            "SELECT fp, data FROM pages WHERE retired = 0 ORDER BY eligible, fp LIMIT ?",
            (limit,)).fetchall()
        now = time.time()
        records = (readable_record(fp, data) for fp, data in rows)
        return [shapes.due_row(r, now) for r in records if r is not None]
