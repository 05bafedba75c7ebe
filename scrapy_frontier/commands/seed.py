"""``scrapy frontier seed FILE``: load a seed list into a crawl's frontier, in batches.

Each URL becomes the request the spider would have yielded from ``start()`` --
``Request(url, callback=NAME, priority=P)`` -- and is stored as the crawl stores it: the
same codec and row trust (sealed with ``FRONTIER_SIGNING_KEYS``), the host key, the front
level the crawl gives its priority (``FRONTIER_PRIORITY_RULES`` included), the 64-bit
fingerprint. It goes through the crawl's seen set: a URL seen or queued before (by the
crawl, an earlier load, or earlier in the file) is not queued again, so loading a file
twice, or again after a load was stopped midway, queues each URL once. Memory holds one
batch, whatever the size of the file.

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
import itertools
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from scrapy import Request

from scrapy_frontier.backends.sqlite.backend import STATE_FILE
from scrapy_frontier.codec import Codec, RowTrust, request_codec
from scrapy_frontier.commands.seed_input import Column, Line, read_lines
from scrapy_frontier.core.prioritizer import PriorityMapper
from scrapy_frontier.core.recrawl_priority import HostRules
from scrapy_frontier.errors import FrontierCommandError, HostlessURL, UndecodableRow
from scrapy_frontier.fingerprint import Fingerprinter64
from scrapy_frontier.hostkey import url_host_key
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


class Invalid(Exception):
    """A seed file's entry that is not a URL the crawl can fetch."""


class SeedMaker:
    """A seed file's URL, made the request the crawl would queue (see the module doc)."""

    def __init__(self, config: FrontierConfig, codec: Codec[Any], fp64: Fingerprinter64,
                 callback: str | None, priority: int) -> None:
        self.codec = codec
        self.fp64 = fp64
        self.callback = callback
        self.priority = priority
        self.mapper = PriorityMapper(config.front_queues)
        self.rules = HostRules(config.priority_rules)

    def make(self, line: Line) -> Seed:
        if line.bad:
            raise Invalid("is not UTF-8 text")
        if not line.text:
            raise Invalid("holds no URL")
        if not line.text[:8].lower().startswith(("http://", "https://")):
            raise Invalid("is not an http:// or https:// URL")
        try:
            request = Request(line.text, priority=self.priority)
            host = url_host_key(request.url)
        except (ValueError, HostlessURL) as exc:
            raise Invalid(f"is not a URL the crawl can fetch ({exc})") from None
        # A method name, as Request.to_dict keeps it: the crawl rebuilds it on its spider.
        request.callback = self.callback  # type: ignore[assignment]
        level = self.mapper.level(self.priority + self.rules.boost(host))
        return Seed(host, level, self.fp64(request), self.codec.encode(request))


@dataclass(slots=True)
class Tally:
    """What a load did, counted as it goes."""

    read: int = 0
    queued: int = 0
    seen: int = 0
    invalid: int = 0
    refused: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)

    def add_invalid(self, line: Line, why: str) -> None:
        self.invalid += 1
        if len(self.samples) < INVALID_SHOWN:
            self.samples.append({"line": line.number, "text": line.text[:200], "why": why})

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


def load(lines: Iterable[Line], maker: SeedMaker, sink: Sink, tally: Tally) -> Tally:
    """Stream ``lines`` into ``sink``, one batch at a time (``tally`` counts as it goes,
    so that a load stopped midway still says what it did)."""
    batch: list[Seed] = []
    for line in lines:
        tally.read += 1
        try:
            batch.append(maker.make(line))
        except Invalid as exc:
            tally.add_invalid(line, str(exc))
            continue
        if len(batch) >= sink.batch:
            tally.add(sink.write(batch))
            batch = []
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
        self.spider = spider
        self.trust = RowTrust.of(config.signing_keys, private=exposed(
            directory, (STATE_FILE, HISTORY_FILE)) is None)
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


def check_callback(settings: Any, spider: str | None, callback: str | None) -> str | None:
    """Refuse a callback the spider does not have; a warning when the spider's class
    cannot be found here (outside its project) to check it."""
    if callback is None:
        return None
    if not callback.isidentifier() or callback.startswith("__"):
        raise FrontierCommandError(f"--callback {callback!r} is not a method name")
    cls = None
    if spider is not None:
        try:
            from scrapy.spiderloader import get_spider_loader

            cls = get_spider_loader(settings).load(spider)
        except Exception:  # noqa: BLE001 - no project, or no such spider in it: not checked
            cls = None
    if cls is None:
        return (f"callback {callback!r} not checked: spider {spider or '(unnamed)'} is not "
                "in this project (run the command in the spider's project to check it). "
                "The crawl cannot rebuild a seed that names a method its spider lacks.")
    if not callable(getattr(cls, callback, None)):
        raise FrontierCommandError(
            f"spider {spider!r} ({cls.__module__}.{cls.__name__}) has no method "
            f"{callback!r}. Nothing was changed.")
    return None


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


def result(source: str, backend: str, tally: Tally, callback: str | None, done: str,
           warnings: list[str]) -> dict[str, Any]:
    return {"source": source, "backend": backend, "callback": callback, "read": tally.read,
            "queued": tally.queued, "already_seen": tally.seen, "invalid": tally.invalid,
            "refused": tally.refused, "invalid_lines": tally.samples, "applied": done,
            "warnings": warnings}


def render(data: dict[str, Any]) -> str:
    lines = [f"seed {data['source']}: {data['read']} read, {data['queued']} queued, "
             f"{data['already_seen']} already seen, {data['invalid']} invalid"
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
    config = FrontierConfig.from_settings(settings)
    column = None if opts.column is None else Column.parse(opts.column)
    fp64 = fingerprinter(settings)
    name = crawl_spider(config, spider, default)
    warning = check_callback(settings, name, opts.callback)  # before anything is written
    # The file opened, and its CSV header read, before anything is written too.
    lines = read_lines(path, column)
    first = next(lines, None)
    entries = lines if first is None else itertools.chain((first,), lines)
    sink: SQLiteSeeds | RedisSeeds
    if config.backend == "sqlite":
        assert name is not None  # sqlite_spider names one, or refuses
        sink = SQLiteSeeds(config, name)
    else:
        sink = RedisSeeds(config, settings, name)
    try:
        sink.catch_up(fp64)
        maker = SeedMaker(config, sink.codec, fp64, opts.callback, opts.priority)
        tally = Tally()
        try:
            load(entries, maker, sink, tally)
        except FrontierCommandError as exc:
            if not tally.read:
                raise
            # A file that breaks off midway: what was loaded before stays, and is said.
            raise FrontierCommandError(
                f"{exc} ({tally.queued} queued, {tally.seen} already seen, {tally.invalid} "
                f"invalid before that)") from None
    finally:
        sink.close()
    done = (f"{tally.queued} queued, {sink.applied}" if tally.queued
            else "nothing new to queue")
    if opts.callback is not None and tally.queued:
        done += f" (callback {opts.callback})"
    data = result(path, config.backend, tally, opts.callback, done,
                  [warning] if warning else [])
    return data, render(data)
