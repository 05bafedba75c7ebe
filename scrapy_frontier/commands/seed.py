"""``scrapy frontier seed FILE``: load a seed list into a crawl's frontier, in batches.

Each URL becomes the request the spider would have yielded from ``start()`` --
``Request(url, callback=NAME, priority=P)`` -- and is stored as the crawl stores it: the
same codec and row trust (sealed with ``FRONTIER_SIGNING_KEYS``), the host key, the front
level the crawl gives its priority (``FRONTIER_PRIORITY_RULES`` included), the 64-bit
fingerprint. It goes through the crawl's seen set: a URL seen or queued before (by the
crawl, an earlier load, or earlier in the file) is not queued again, so loading a file
twice, or again after a load was stopped midway, queues each URL once. Memory holds one
batch, whatever the size of the file. Inside the spider's project, a URL its
``allowed_domains`` refuses (by Scrapy's offsite rule) is counted and skipped.

Ctrl-C (SIGINT) stops a load at a batch's edge: a batch being written is committed first,
the entries read since the last batch are committed too, and the command says what was
loaded and exits 130. Input that breaks off midway (gzip on a pipe: a file is checked whole
first, see seed_input) is handled the same way, with exit code 1.

SQLite: the crawl's files are written by the crawl alone (as for ``quarantine
--requeue``), so the load takes their locks and refuses while the crawl runs; the next
run fetches the URLs. Each batch is committed to ``frontier.sqlite`` first and then its
fingerprints to ``seen.sqlite``, as the crawl writes them; a load stopped between the two
is caught up by the next load (or run) from the rows newer than the seen set.

Redis: safe beside running workers. Each batch is one push script per partition, the one
the workers' rounds run, which tests and marks the seen set atomically with the push; a
host retired in the crawl refuses its URLs (counted). The workers take them at once.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import signal
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from scrapy import Request

from scrapy_frontier.backends.sqlite.backend import STATE_FILE
from scrapy_frontier.codec import Codec, RowTrust, request_codec
from scrapy_frontier.commands.seed_input import Column, Line, read_lines
from scrapy_frontier.core.prioritizer import PriorityMapper
from scrapy_frontier.core.recrawl_priority import HostRules
from scrapy_frontier.errors import (
    CommandInterrupted,
    FrontierCommandError,
    HostlessURL,
    SeedFileBroken,
    UndecodableRow,
)
from scrapy_frontier.fingerprint import Fingerprinter64
from scrapy_frontier.hostkey import url_host_key
from scrapy_frontier.scheduler.sitemap_scope import OFFSITE, host_pattern, hostname
from scrapy_frontier.settings import FrontierConfig

#: Invalid entries shown by line; the others are counted.
INVALID_SHOWN = 5
#: URLs per batch: one transaction of each SQLite file, one push script per partition.
SQLITE_BATCH = 5000
REDIS_BATCH = 500

#: A batch's outcome per URL, as the Redis push script answers.
REFUSED, QUEUED, SEEN = 0, 1, 2


def _never_called(*args: Any, **kwargs: Any) -> None:  # pragma: no cover - never called
    raise AssertionError("a stand-in callback was called")


class AnySpider:
    """Stands in for the spider where the command reads saved rows for their
    fingerprints only: every callback name resolves (to a function never called).
    The seeds themselves name their callback as a string, as ``Request.to_dict`` does."""

    name = "scrapy-frontier-seed"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _never_called


@dataclass(frozen=True, slots=True)
class Seed:
    """One URL as the crawl queues it."""

    host: str
    level: int
    fp: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Rejected:
    """A seed file's entry that is not queued: not a URL the crawl can fetch (``why``
    says how), or one whose host the spider's ``allowed_domains`` refuse (``offsite``)."""

    why: str
    offsite: bool = False


class Stopped(KeyboardInterrupt):
    """Ctrl-C, taken at a batch's edge (see :class:`CtrlC`)."""


class CtrlC:
    """SIGINT during a load, taken at a batch's edge. While the file is read it raises
    :class:`Stopped` at once (a read waiting on a pipe included); while a batch is written
    (:meth:`held`) it waits until the batch is committed. Only the main thread receives
    signals: elsewhere nothing is installed. The previous handler is put back at the end."""

    def __init__(self) -> None:
        #: A write is under way: a Ctrl-C waits for it.
        self.holding = False
        self.pending = False
        self._installed = False
        self._previous: Any = None

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            # None: a handler not set from Python; Python's own then.
            previous = self._previous
            signal.signal(signal.SIGINT,
                          signal.default_int_handler if previous is None else previous)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.holding:
            self.pending = True
            return
        raise Stopped

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A batch's write: a Ctrl-C during it is taken once the batch is committed."""
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pending:
            raise Stopped


class SeedMaker:
    """A seed file's URL, made the request the crawl would queue (see the module doc)."""

    def __init__(self, config: FrontierConfig, codec: Codec[Any], fp64: Fingerprinter64,
                 callback: str | None, priority: int, spider: type | None = None) -> None:
        self.codec = codec
        self.fp64 = fp64
        self.callback = callback
        self.priority = priority
        self.mapper = PriorityMapper(config.front_queues)
        self.rules = HostRules(config.priority_rules)
        #: Scrapy's offsite rule (it reads allowed_domains only, so the spider's class
        #: does), None where the class is not found: not checked.
        self.allowed = None if spider is None else host_pattern(cast(Any, spider),
                                                                cast(Any, None))

    def make(self, line: Line) -> Seed | Rejected:
        if line.bad:
            return Rejected("is not UTF-8 text")
        if not line.text:
            return Rejected("holds no URL")
        if not line.text[:8].lower().startswith(("http://", "https://")):
            return Rejected("is not an http:// or https:// URL")
        try:
            request = Request(line.text, priority=self.priority)
            host = url_host_key(request.url)
        except (ValueError, HostlessURL) as exc:
            return Rejected(f"is not a URL the crawl can fetch ({exc})")
        if self.allowed is not None and not self.allowed.search(hostname(request.url)):
            return Rejected(OFFSITE, offsite=True)
        # A method name, as Request.to_dict keeps it: the crawl rebuilds it on its spider.
        request.callback = self.callback  # type: ignore[assignment]
        level = self.mapper.level(self.priority + self.rules.boost(host))
        return Seed(host, level, self.fp64(request), self.codec.encode(request))


@dataclass(slots=True)
class LoadTally:
    """What a load did, counted as it goes."""

    read: int = 0
    queued: int = 0
    seen: int = 0
    invalid: int = 0
    refused: int = 0
    offsite: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def settled(self) -> int:
        """The entries with an outcome: queued, seen, refused (committed by then), invalid
        or offsite. ``read`` may count one more: the entry a Ctrl-C cut short."""
        return self.queued + self.seen + self.refused + self.invalid + self.offsite

    def reject(self, line: Line, rejected: Rejected) -> None:
        if rejected.offsite:
            self.offsite += 1
            return
        self.invalid += 1
        if len(self.samples) < INVALID_SHOWN:
            self.samples.append({"line": line.number, "text": line.text[:200],
                                 "why": rejected.why})

    def add(self, outcomes: Iterable[int]) -> None:
        for outcome in outcomes:
            if outcome == QUEUED:
                self.queued += 1
            elif outcome == SEEN:
                self.seen += 1
            else:
                self.refused += 1


class Sink(Protocol):
    """Where the seeds go: a crawl's frontier, behind its seen set."""

    batch: int
    #: When the crawl takes what was loaded, for the summary.
    applied: str

    def write(self, seeds: list[Seed]) -> list[int]:
        """Queue the seeds not seen yet; per seed QUEUED, SEEN or REFUSED."""

    def close(self) -> None: ...


def load(lines: Iterable[Line], maker: SeedMaker, sink: Sink, tally: LoadTally,
         ctrl_c: CtrlC) -> LoadTally:
    """Stream ``lines`` into ``sink``, one batch at a time (``tally`` counts as it goes,
    so that a load stopped midway still says what it did). A Ctrl-C (:class:`Stopped`) or
    a file that breaks off (:class:`SeedFileBroken`) while reading: the entries read so far
    are committed, then it is raised."""
    batch: list[Seed] = []
    try:
        for line in lines:
            tally.read += 1
            made = maker.make(line)
            if isinstance(made, Rejected):
                tally.reject(line, made)
                continue
            batch.append(made)
            if len(batch) >= sink.batch:
                with ctrl_c.held():
                    tally.add(sink.write(batch))
                    batch = []
    except (Stopped, SeedFileBroken):
        ctrl_c.holding = True  # from here on, a Ctrl-C waits for the end
        if batch:
            tally.add(sink.write(batch))
        raise
    ctrl_c.holding = True  # the whole file is read: a Ctrl-C now waits for the end
    if batch:
        tally.add(sink.write(batch))
    return tally


# -- SQLite -----------------------------------------------------------------------------


def _saved_spider(path: Path) -> str | None:
    """The spider a ``frontier.sqlite`` belongs to, read without a lock (None: no file)."""
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'spider'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise FrontierCommandError(
            f"cannot read {path} ({type(exc).__name__}: {exc}): it is not a scrapy-frontier "
            "state file. Point JOBDIR / FRONTIER_PATH at the crawl's directory. Nothing was "
            "changed.") from None
    return None if row is None else str(row[0])


def sqlite_directory(config: FrontierConfig) -> Path:
    if not config.state_dir:
        raise FrontierCommandError(
            "no crawl to seed: set JOBDIR or FRONTIER_PATH to the crawl's directory "
            "(-s JOBDIR=path), or FRONTIER_BACKEND='redis' with REDIS_URL")
    return Path(config.state_dir)


def sqlite_spider(config: FrontierConfig, spider: str | None, default: str | None) -> str:
    """The spider a JOBDIR belongs to: the one its ``frontier.sqlite`` records, else the
    one named (a directory no crawl has used yet)."""
    directory = sqlite_directory(config)
    path = directory / STATE_FILE
    saved = _saved_spider(path)
    if saved is not None and spider is not None and saved != spider:
        raise FrontierCommandError(
            f"{path} belongs to spider {saved!r}, not {spider!r}. Nothing was changed.")
    name = saved or spider or default
    if name is None:
        raise FrontierCommandError(
            f"no crawl has run in {directory} yet: give --spider NAME, the spider that "
            "will crawl it (its frontier.sqlite records it). Nothing was changed.")
    return name


class SQLiteSeeds:
    """A JOBDIR's queue and seen set, held with their locks while seeds go in."""

    batch = SQLITE_BATCH
    applied = "for the next run of the crawl"

    def __init__(self, config: FrontierConfig, spider: str) -> None:
        from scrapy_frontier.backends.sqlite.control import FILE as CONTROL_FILE
        from scrapy_frontier.backends.sqlite.files import exposed
        from scrapy_frontier.backends.sqlite.history import STORE_NAME as HISTORY_FILE
        from scrapy_frontier.backends.sqlite.lock import is_locked
        from scrapy_frontier.backends.sqlite.queue import SQLiteStore
        from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore
        from scrapy_frontier.dupefilter import STORE_NAME as SEEN_FILE

        directory = sqlite_directory(config)
        path = directory / STATE_FILE
        if is_locked(path):
            raise FrontierCommandError(
                f"the crawl in {directory} is running: its files are written by it alone. "
                "Stop it (Ctrl-C once), load the seeds, then start it again. Nothing was "
                "changed.")
        reason = exposed(directory, (STATE_FILE, HISTORY_FILE, CONTROL_FILE, "spider.state"))
        if reason is not None:
            raise FrontierCommandError(
                f"{reason}: the crawl refuses to open such a directory (whoever may write "
                "it could run code in the crawl), so it would fetch no seed loaded there. "
                f"Make {directory} and its files writable by this user alone (chmod -R go-w), "
                "or point JOBDIR / FRONTIER_PATH at a private directory (docs/security.rst). "
                "Nothing was changed.")
        self.spider = spider
        # A private directory, as the crawl opens it: its rows are read in full.
        self.trust = RowTrust.of(config.signing_keys, private=True)
        self.codec = request_codec(AnySpider(), trust=self.trust)
        # The seeds come encoded (SeedMaker); the crawl's codec reads the rows back.
        stored: Codec[Any] = Codec(encode=bytes, decode=self.codec.decode)
        self.store: SQLiteStore[Any] = SQLiteStore(path, levels=config.front_queues,
                                                   spider=self.spider, codec=stored)
        try:
            self.seen = SQLiteFingerprintStore(directory / SEEN_FILE)
        except BaseException:
            self.store.close()
            raise
        self.caught_up = 0

    def catch_up(self, fp64: Fingerprinter64) -> None:
        """Put the fingerprints of the rows newer than the seen set's last write into it
        (a crawl or a load stopped between its two writes), as the crawl does when it
        opens: then the seen set covers every queued URL."""
        store, seen = self.store, self.seen
        covered = seen.covers or 0
        store.start_ids_after(covered)  # rows up to it count as covered: new ids after it
        if store.last_row() > covered:
            for data in store.rows_after(covered):
                try:
                    fp = fp64(self.codec.decode(data))
                except UndecodableRow:
                    continue  # the crawl sets it aside when its turn comes
                if not seen.contains(fp):
                    seen.add(fp)
                    self.caught_up += 1
            seen.flush(covers=store.last_row())  # a no-op when nothing was missing
        # From here on, written only right after the queue (see write).
        seen.batch_size = 1 << 62
        seen.flush_interval = float("inf")

    def write(self, seeds: list[Seed]) -> list[int]:
        store, seen = self.store, self.seen
        out = []
        for s in seeds:
            if seen.contains(s.fp):
                out.append(SEEN)
                continue
            seen.add(s.fp)
            store.front_append(s.level, s.host, s.data)
            out.append(QUEUED)
        # The queue first, made durable; then the seen set, which says it covers the queue:
        # a fingerprint on the disk before its URL would lose that URL.
        store.sync()
        seen.flush(covers=store.last_row())
        return out

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            self.seen.close()


# -- Redis ------------------------------------------------------------------------------


class RedisSeeds:
    """A Redis crawl's partitions and seen sets, opened as a worker opens them."""

    batch = REDIS_BATCH
    applied = "the workers take them at once"

    def __init__(self, config: FrontierConfig, settings: Any, spider: str | None) -> None:
        import random

        from scrapy_frontier.backends.redis.connection import redis_from_settings
        from scrapy_frontier.backends.redis.partitions import Layout, open_frontier, open_seen

        if spider is None and "%(spider)s" in config.redis.key:
            raise FrontierCommandError(
                "the Redis keys depend on the spider (FRONTIER_REDIS_KEY="
                f"{config.redis.key!r}): give --spider NAME")
        self.spider = spider
        self.client = redis_from_settings(settings)
        try:
            layout = Layout(*config.redis.keys_for(spider or ""), count=config.redis.partitions,
                            tagged=config.redis.tagged)
            # The crawl's shape and ownership, checked (or written, for a crawl that has
            # not started yet) as a worker does.
            self.remote = open_frontier(
                self.client, layout,
                front_queues=config.front_queues, priority_bias=config.priority_bias,
                back_queues=config.back_queues, back_queues_max=config.back_queues_max,
                policy=config.policy, policy_of=config.host_policies.delays,
                connections=config.host_policies.connections,
                lease_timeout=config.lease_timeout, spider=spider,
                rng=random.Random(config.seed))
            self.seen = open_seen(self.client, layout, expected=config.redis.seen_expected)
        except BaseException:
            self.client.close()
            raise
        #: A shared store: rows sealed with FRONTIER_SIGNING_KEYS, as the workers' are.
        self.trust = RowTrust.of(config.signing_keys, private=False)
        self.codec = request_codec(AnySpider(), trust=self.trust)

    def catch_up(self, fp64: Fingerprinter64) -> None:
        """Nothing to catch up: each push marks its URL seen in the same script."""

    def write(self, seeds: list[Seed]) -> list[int]:
        bucket = self.seen.bucket
        return self.remote.push_unseen(
            (s.host, s.level, s.fp.to_bytes(8, "big", signed=True) + s.data,
             (*bucket(s.host, s.fp), True))
            for s in seeds)

    def close(self) -> None:
        self.client.close()


# -- the subcommand ---------------------------------------------------------------------


def fingerprinter(settings: Any) -> Fingerprinter64:
    """The crawl's 64-bit fingerprint: its ``REQUEST_FINGERPRINTER_CLASS``, as the
    crawler builds it."""
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider
    from scrapy.utils.misc import build_from_crawler, load_object
    from scrapy.utils.request import RequestFingerprinter

    cls = load_object(settings.get("REQUEST_FINGERPRINTER_CLASS") or RequestFingerprinter)
    if cls is RequestFingerprinter:
        return Fingerprinter64()
    try:
        return Fingerprinter64(build_from_crawler(cls, Crawler(Spider, settings.copy())))
    except Exception as exc:  # noqa: BLE001 - the project's class: say which, and why
        raise FrontierCommandError(
            f"REQUEST_FINGERPRINTER_CLASS {cls.__name__} cannot be built outside the crawl "
            f"({type(exc).__name__}: {exc}), and the seen set needs the crawl's "
            "fingerprints. Nothing was changed.") from None


def spider_class(settings: Any, spider: str | None) -> type | None:
    """The spider's class, found in the project (None: no project, or not in it)."""
    if spider is None:
        return None
    try:
        from scrapy_frontier.scheduler.engine import spider_loader

        return cast(type, spider_loader(settings).load(spider))
    except Exception:  # noqa: BLE001 - no project, or no such spider in it: not checked
        return None


def check_callback(cls: type | None, spider: str | None, callback: str | None) -> str | None:
    """Refuse a callback the spider does not have; a warning when the spider's class
    cannot be found here (outside its project) to check it, nor its allowed_domains."""
    if callback is not None and (not callback.isidentifier() or callback.startswith("__")):
        raise FrontierCommandError(f"--callback {callback!r} is not a method name")
    if cls is None:
        checked = "allowed_domains" if callback is None else \
            f"allowed_domains and callback {callback!r}"
        return (f"spider {spider or '(unnamed)'} is not in this project: its {checked} not "
                "checked (run the command in the spider's project to check them). The crawl "
                "drops a URL its allowed_domains refuse, and cannot rebuild a seed that names "
                "a method its spider lacks.")
    if callback is not None and not callable(getattr(cls, callback, None)):
        raise FrontierCommandError(
            f"spider {spider!r} ({cls.__module__}.{cls.__name__}) has no method "
            f"{callback!r}. Nothing was changed.")
    if callback is None and not _parses(cls):
        raise FrontierCommandError(
            f"spider {spider!r} ({cls.__module__}.{cls.__name__}) has no parse method of its "
            "own, which a seed without --callback is given (Scrapy's raises "
            "NotImplementedError): name the seeds' method with --callback NAME. Nothing was "
            "changed.")
    return None


def _parses(cls: type) -> bool:
    """Does a response of a request without a callback reach a method of the spider's
    (its ``parse``, or a ``_parse`` of its own such as CrawlSpider's rules)?"""
    from scrapy import Spider

    return (getattr(cls, "parse", None) is not Spider.parse
            or getattr(cls, "_parse", None) is not getattr(Spider, "_parse", None))


def crawl_spider(config: FrontierConfig, spider: str | None, default: str | None
                 ) -> str | None:
    """The spider whose crawl is seeded (refusing the backends that cannot be)."""
    if config.backend == "memory":
        raise FrontierCommandError(
            "FRONTIER_BACKEND is 'memory': the crawl keeps its frontier inside its own "
            "process, so nothing can be loaded into it from outside. Give such a crawl its "
            "URLs through the spider's start(), or crawl with FRONTIER_BACKEND='sqlite' (set "
            "JOBDIR) or 'redis' and pass the same settings here. Nothing was changed.")
    if config.backend == "sqlite":
        return sqlite_spider(config, spider, default)
    if config.backend == "redis":
        return spider or default
    raise FrontierCommandError(
        f"FRONTIER_BACKEND={config.backend!r} is a third-party driver: scrapy frontier seed "
        "loads 'sqlite' and 'redis' crawls only")


def result(source: str, backend: str, tally: LoadTally, callback: str | None, done: str,
           warnings: list[str]) -> dict[str, Any]:
    return {"source": source, "backend": backend, "callback": callback, "read": tally.read,
            "queued": tally.queued, "already_seen": tally.seen, "invalid": tally.invalid,
            "offsite": tally.offsite, "refused": tally.refused, "invalid_lines": tally.samples,
            "applied": done, "warnings": warnings}


def render(data: dict[str, Any]) -> str:
    lines = [f"seed {data['source']}: {data['read']} read, {data['queued']} queued, "
             f"{data['already_seen']} already seen, {data['invalid']} invalid"
             + (f", {data['offsite']} offsite (not in allowed_domains)" if data["offsite"]
                else "")
             + (f", {data['refused']} refused (host retired)" if data["refused"] else "")]
    for bad in data["invalid_lines"]:
        lines.append(f"  invalid, line {bad['line']}: {bad['text']!r} {bad['why']}")
    if data["invalid"] > len(data["invalid_lines"]):
        lines.append(f"  ... and {data['invalid'] - len(data['invalid_lines'])} more invalid")
    lines.append(data["applied"])
    lines += [f"warning: {w}" for w in data["warnings"]]
    return "\n".join(lines)


def seed(path: str, opts: argparse.Namespace, settings: Any, spider: str | None,
         default: str | None = None) -> tuple[dict[str, Any], str]:
    """``scrapy frontier seed FILE``: load it, and say what was done."""
    with CtrlC() as ctrl_c:
        try:
            return _seed(path, opts, settings, spider, default, ctrl_c)
        except Stopped:  # before the load began (it says what it loaded itself)
            raise CommandInterrupted(
                f"seed {path}: stopped (Ctrl-C) before any URL was loaded. Nothing was "
                "queued.") from None


def _seed(path: str, opts: argparse.Namespace, settings: Any, spider: str | None,
          default: str | None, ctrl_c: CtrlC) -> tuple[dict[str, Any], str]:
    config = FrontierConfig.from_settings(settings)
    column = None if opts.column is None else Column.parse(opts.column)
    fp64 = fingerprinter(settings)
    name = crawl_spider(config, spider, default)
    cls = spider_class(settings, name)
    warning = check_callback(cls, name, opts.callback)  # before anything is written
    # The file opened, and its CSV header read, before anything is written too.
    lines = read_lines(path, column)
    try:
        first = next(lines, None)
    except SeedFileBroken as exc:
        raise FrontierCommandError(f"{exc}. Nothing was changed.") from None
    entries = lines if first is None else itertools.chain((first,), lines)
    sink: SQLiteSeeds | RedisSeeds
    if config.backend == "sqlite":
        assert name is not None  # sqlite_spider names one, or refuses
        sink = SQLiteSeeds(config, name)
    else:
        sink = RedisSeeds(config, settings, name)
    tally = LoadTally()
    try:
        sink.catch_up(fp64)
        maker = SeedMaker(config, sink.codec, fp64, opts.callback, opts.priority, cls)
        try:
            load(entries, maker, sink, tally, ctrl_c)
        except (Stopped, SeedFileBroken) as exc:
            raise stopped(path, exc, tally) from None
    finally:
        ctrl_c.holding = True  # the files are closed whatever comes
        sink.close()
    done = (f"{tally.queued} queued, {sink.applied}" if tally.queued
            else "nothing new to queue")
    if opts.callback is not None and tally.queued:
        done += f" (callback {opts.callback})"
    data = result(path, config.backend, tally, opts.callback, done,
                  [warning] if warning else [])
    return data, render(data)


def stopped(path: str, why: BaseException, tally: LoadTally) -> FrontierCommandError:
    """The error of a load stopped midway (Ctrl-C, or a file that breaks off), saying what
    was loaded before it: committed, and skipped as seen by a load of the same file."""
    counts = (f"{tally.queued} queued, {tally.seen} already seen, {tally.invalid} invalid"
              + (f", {tally.offsite} offsite" if tally.offsite else "")
              + (f", {tally.refused} refused" if tally.refused else ""))
    if isinstance(why, Stopped):
        return CommandInterrupted(
            f"seed {path}: stopped (Ctrl-C) after {tally.settled} entries, all committed "
            f"({counts}). Run the same command again to load the rest: the URLs loaded so "
            "far are skipped as already seen, so none is queued twice.")
    return FrontierCommandError(
        f"{why}. The {tally.settled} entries before that point are committed ({counts}). "
        "Load the whole file again once it is fixed: the URLs already loaded are skipped "
        "as already seen, so none is queued twice.")
