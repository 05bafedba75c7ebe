"""``scrapy frontier``: the Scrapy command (entry point ``scrapy.commands``).

Reads the same settings as the crawl (the project's, then ``-s KEY=VALUE``): JOBDIR or
FRONTIER_PATH, FRONTIER_BACKEND, REDIS_URL and FRONTIER_REDIS_*; ``--spider`` names the
spider whose Redis keys to read. Works inside and outside a project. Errors go to
stderr with exit code 1, and nothing is changed.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from typing import Any, TextIO

from scrapy.commands import ScrapyCommand, ScrapyHelpFormatter
from scrapy.exceptions import UsageError

from scrapy_frontier.commands import render, steer
from scrapy_frontier.commands.shapes import RETIRED_WHY, HostView
from scrapy_frontier.errors import (
    CommandInterrupted,
    FrontierCommandError,
    FrontierError,
    HostlessURL,
)
from scrapy_frontier.hostkey import url_host_key
from scrapy_frontier.settings import FrontierConfig

SUBCOMMANDS = ("status", "hosts", "url", "due", "recrawl", "quarantine", "reset", "policy",
               "seed", *steer.ACTIONS)

USAGE = """\
  status                         queued, in flight, hosts by state, seen, history
  hosts [--limit N] [--sort queued|next]
                                 the hosts with queued URLs, rests, blocks, retirements
  url URL                        what the frontier knows about one URL
  due [--limit N]                the pages of the history due soonest
  recrawl URL | --host HOST | --all
                                 make pages of the history due now (fetched again soon)
  quarantine [--requeue | --drop] [--limit N]
                                 what the crawl set aside as unreadable; put it back, or clear it
  seed FILE [--callback NAME] [--column N|NAME] [--priority P]
                                 load a seed list (text, CSV, gzip; - for stdin) into the
                                 crawl's queue, through its seen set: URLs seen are skipped
  reset --spider NAME [--yes]    Redis: delete that crawl's keys (queue, seen set, history),
                                 after a confirmation; nothing else is touched
  block HOST [--for SECONDS]     stop contacting a host (its URLs are kept)
  unblock HOST                   contact it again
  delay HOST SECONDS             a minimum rest after every fetch of the host (0 removes)
  retire HOST                    drop its queued URLs and refuse new ones
  unretire HOST                  take a retired host back (its dropped URLs are gone)
  budget HOST PAGES              its fetch budget for the crawl (0: unlimited); releases a
                                 host contained as a crawler trap
  policy KEY FIELD=VALUE ... | policy KEY --clear
                                 set or clear a per-host policy entry on the crawl (KEY and
                                 fields as in FRONTIER_HOST_POLICY: delay_factor, min_delay,
                                 max_delay, concurrency, budget)"""


class _HelpFormatter(ScrapyHelpFormatter):
    """Scrapy's help layout, with the description's lines kept (one per subcommand)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "<subcommand> [args] [--json] [--spider NAME] [-s KEY=VALUE ...]"

    def short_desc(self) -> str:
        return "Look inside a crawl's frontier, and steer it, while it runs"

    def long_desc(self) -> str:
        return ("Look inside a crawl's frontier, and steer it, while it runs\n"
                "(SQLite: JOBDIR or FRONTIER_PATH; Redis: REDIS_URL and --spider).\n\n"
                "Subcommands:\n" + USAGE)

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.formatter_class = _HelpFormatter
        parser.add_argument("--json", action="store_true", help="print JSON (the documented "
                            "shapes) instead of a table")
        parser.add_argument("--spider", help="the spider whose Redis keys to read")
        parser.add_argument("--limit", type=int, default=20, help="rows to show (hosts, due)")
        parser.add_argument("--sort", choices=("queued", "next"), default="queued",
                            help="hosts: most queued first, or next contact first")
        parser.add_argument("--for", dest="for_seconds", type=float, metavar="SECONDS",
                            help="block: for this long only")
        parser.add_argument("--new-host", action="store_true",
                            help="steer a host the crawl has not seen yet")
        parser.add_argument("--host", dest="recrawl_host", metavar="HOST",
                            help="recrawl: every page of this host")
        parser.add_argument("--all", dest="recrawl_all", action="store_true",
                            help="recrawl: every page of the history")
        parser.add_argument("--requeue", action="store_true",
                            help="quarantine: queue the requests again, put the page records "
                            "back (once the spider can read them)")
        parser.add_argument("--drop", action="store_true",
                            help="quarantine: delete what is set aside")
        parser.add_argument("--clear", action="store_true",
                            help="policy: clear the steered entry (the setting's is in force "
                            "again)")
        parser.add_argument("--callback", metavar="NAME",
                            help="seed: the spider method for the seeds (default: parse)")
        parser.add_argument("--column", metavar="N|NAME",
                            help="seed: the file is CSV; its URLs are in this column (from 1, "
                            "or the header's name)")
        parser.add_argument("--priority", type=int, default=0, metavar="P",
                            help="seed: the seeds' Request.priority (default 0)")
        parser.add_argument("--yes", action="store_true",
                            help="reset: confirmed, do not ask (needed without a terminal)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        try:
            main(args, opts, self.settings, sys.stdout)
        except UsageError:
            raise
        except FrontierError as exc:
            print(f"scrapy frontier: {exc}", file=sys.stderr)
            self.exitcode = exc.exit_code if isinstance(exc, CommandInterrupted) else 1
        except (sqlite3.Error, OSError) as exc:
            # What the state files' own checks did not foresee: one line, not a traceback.
            print(f"scrapy frontier: the crawl's state could not be used "
                  f"({type(exc).__name__}: {exc}). Nothing was changed.", file=sys.stderr)
            self.exitcode = 1


def main(args: list[str], opts: argparse.Namespace, settings: Any, out: TextIO) -> None:
    if not args:
        raise UsageError(f"give a subcommand:\n{USAGE}", print_help=False)
    if args[0] not in SUBCOMMANDS:
        raise UsageError(f"unknown subcommand {args[0]!r}; the subcommands are:\n{USAGE}",
                         print_help=False)
    sub, rest = args[0], args[1:]
    want = {"url": 1, "seed": 1, "block": 1, "unblock": 1, "retire": 1, "unretire": 1,
            "delay": 2, "budget": 2}
    if sub == "recrawl":  # a URL, or --host / --all (checked by _recrawl)
        if len(rest) > 1:
            raise UsageError(f"recrawl: wrong arguments\n{USAGE}", print_help=False)
    elif sub == "policy":  # a key, then fields or --clear (checked by _policy)
        if not rest:
            raise UsageError(f"policy: wrong arguments\n{USAGE}", print_help=False)
    elif len(rest) != want.get(sub, 0):
        raise UsageError(f"{sub}: wrong arguments\n{USAGE}", print_help=False)
    if opts.limit < 0:
        raise UsageError("--limit must be >= 0", print_help=False)
    if sub == "seed":  # writes a JOBDIR or a Redis crawl itself: no inspector
        from scrapy_frontier.commands.seed import seed

        data, text = seed(rest[0], opts, settings, opts.spider, _only_spider(settings))
        out.write((json.dumps(data, indent=2) if opts.json else text) + "\n")
        return
    config = FrontierConfig.from_settings(settings)
    config.host_policies.cap_of = crawl_caps(settings)
    inspector = open_inspector(config, settings, opts.spider)
    try:
        data, text = run_subcommand(inspector, sub, rest, opts)
    finally:
        inspector.close()
    out.write((json.dumps(data, indent=2) if opts.json else text) + "\n")


def crawl_caps(settings: Any) -> Any:
    """The connections Scrapy's downloader opens per host in the crawl: the add-on opens it
    to the most connections the settings give, unless the project sets it."""
    from scrapy_frontier.addon import open_connections
    from scrapy_frontier.settings import downloader_caps

    crawl = settings.copy()
    open_connections(crawl)
    return downloader_caps(crawl)


def open_inspector(config: FrontierConfig, settings: Any, spider: str | None) -> Any:
    if config.backend == "memory":
        raise FrontierCommandError(
            "FRONTIER_BACKEND is 'memory': the crawl keeps its frontier inside its own process, "
            "where nothing else can read or steer it. Crawl with FRONTIER_BACKEND='sqlite' "
            "(set JOBDIR) or 'redis' to use scrapy frontier; if the crawl does, pass the same "
            "settings here (-s JOBDIR=... or -s FRONTIER_BACKEND=redis -s REDIS_URL=...).")
    if config.backend == "sqlite":
        from scrapy_frontier.commands.inspect_sqlite import SQLiteInspector

        return SQLiteInspector(config)
    if config.backend == "redis":
        from scrapy_frontier.backends.redis.connection import redis_from_settings
        from scrapy_frontier.commands.inspect_redis import RedisInspector

        name = spider or _only_spider(settings)
        if name is None and "%(spider)s" in config.redis.key:
            raise FrontierCommandError(
                "the Redis keys depend on the spider (FRONTIER_REDIS_KEY="
                f"{config.redis.key!r}): give --spider NAME")
        return RedisInspector(config, redis_from_settings(settings), name or "")
    raise FrontierCommandError(
        f"FRONTIER_BACKEND={config.backend!r} is a third-party driver: scrapy frontier reads "
        "'sqlite' and 'redis' state only")


def _only_spider(settings: Any) -> str | None:
    """Inside a project with one spider, that spider."""
    try:
        from scrapy_frontier.scheduler.engine import spider_loader

        names = spider_loader(settings).list()
    except Exception:  # noqa: BLE001 - no project, or one that does not load: ask for --spider
        return None
    return names[0] if len(names) == 1 else None


def normalize_host(raw: str) -> str:
    if "://" in raw:
        try:
            return url_host_key(raw)
        except HostlessURL as exc:
            raise FrontierCommandError(f"{raw!r} has no host ({exc})") from None
    return raw.strip().lower()


def _number(action: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise FrontierCommandError(f"{action}: {raw!r} is not a number") from None
    return value


def _page(raw: str) -> tuple[str, str, int]:
    """A URL as the frontier holds it: (URL, host key, 64-bit fingerprint)."""
    from scrapy import Request

    from scrapy_frontier.fingerprint import Fingerprinter64

    try:
        request = Request(raw)
        host = url_host_key(request.url)
    except (ValueError, HostlessURL) as exc:
        raise FrontierCommandError(f"{raw!r} is not a URL the frontier can hold ({exc})") \
            from None
    return request.url, host, Fingerprinter64()(request)


def _nothing_to_do(sub: str, host: str, view: HostView | None) -> str | None:
    """What to say instead when ``unblock`` or ``unretire`` would change nothing."""
    retired = view.retired if view is not None else None
    if sub == "unblock" and (view is None or view.blocked_for is None):
        if retired:
            return (f"not blocked, but retired ({RETIRED_WHY.get(retired, retired)}): "
                    f"scrapy frontier unretire {host} takes it back. Nothing was changed.")
        return "not blocked. Nothing was changed."
    if sub == "unretire" and not retired:
        return "not retired. Nothing was changed."
    return None


def _recrawl(inspector: Any, rest: list[str], opts: argparse.Namespace) -> tuple[Any, str]:
    chosen = [bool(rest), opts.recrawl_host is not None, bool(opts.recrawl_all)]
    if sum(chosen) != 1:
        raise UsageError("recrawl takes one of: a URL, --host HOST, --all", print_help=False)
    fp: int | None = None
    host: str | None = None
    if rest:
        _, _, fp = _page(rest[0])
        what = rest[0]
    elif opts.recrawl_host is not None:
        host = normalize_host(opts.recrawl_host)
        what = f"the pages of {host}"
    else:
        what = "every page"
    data = steer.recrawl(inspector, fp, host)
    return data, f"recrawl {what}: {data['applied']}"


def _quarantine(inspector: Any, opts: argparse.Namespace) -> tuple[Any, str]:
    from scrapy_frontier.commands import quarantine

    if opts.requeue and opts.drop:
        raise UsageError("quarantine takes --requeue or --drop, not both", print_help=False)
    action = "requeue" if opts.requeue else "drop" if opts.drop else "list"
    limit = opts.limit or 20
    if inspector.backend == "sqlite":
        data = quarantine.sqlite_quarantine(inspector, action, limit)
    else:
        data = quarantine.redis_quarantine(inspector, action, limit)
    return data, render.quarantine(data)


def _policy(inspector: Any, rest: list[str], opts: argparse.Namespace) -> tuple[Any, str]:
    from scrapy_frontier.core.host_policy import FIELDS, cap_connections

    key, pairs = policy_key(rest[0]), rest[1:]
    if opts.clear == bool(pairs):
        raise UsageError("policy takes a key and FIELD=VALUE pairs, or a key and --clear",
                         print_help=False)
    stored = steer.stored_policies(inspector)
    if opts.clear:
        if key not in stored:
            data = steer.unchanged("policy", key, inspector.running,
                                   "no steered entry has that key")
            return data, f"policy {key}: no steered entry has that key. Nothing was changed."
        data = steer.steer_policy(inspector, key, None)
        return data, f"policy {key}: cleared ({data['applied']})"
    given: dict[str, Any] = {}
    for pair in pairs:
        field, sep, raw = pair.partition("=")
        if not sep or field not in FIELDS:
            raise FrontierCommandError(
                f"policy: {pair!r} is not FIELD=VALUE with a field of {', '.join(FIELDS)}. "
                "Nothing was changed.")
        if field in given:
            raise FrontierCommandError(f"policy: {field} is given twice. Nothing was changed.")
        value = _number(f"policy {field}", raw)
        given[field] = int(value) if value.is_integer() else value
    # A second steer of a key changes the fields it gives and keeps the others.
    earlier = stored.get(key)
    fields = {**(earlier if isinstance(earlier, dict) else {}), **given}
    policies = inspector.config.host_policies
    try:
        _, policy = policies.steered_entry(key, fields)
    except ValueError as exc:
        raise FrontierCommandError(f"{exc}. Nothing was changed.") from None
    said = []
    if policies.cap_of is not None and not policies.connections_fixed:
        policy, warning = cap_connections(key, policy, policies.cap_of, "policy")
        if warning is not None:
            said.append(warning)
    data = steer.steer_policy(inspector, key, fields)
    data["policy"] = policy.describe()
    data["warnings"] = said
    text = f"policy {key}: {policy.describe()} ({data['applied']})"
    return data, "\n".join([text, *(f"warning: {w}" for w in said)])


def policy_key(raw: str) -> str:
    """A key of the per-host policy as the crawl's host keys spell it: a host name or suffix
    (IDNA for a name that is not ASCII), ``=`` first for one host only."""
    from scrapy_frontier.core.host_policy import normal_key

    key = normal_key(raw)
    name = key.removeprefix("=")
    if not name or any(c in name for c in "/:@ \t\0"):
        raise FrontierCommandError(
            f"{raw!r} is not a key: a host name or suffix such as 'example.com', or "
            "'=www.example.com' for one host (no scheme, port or path). Nothing was changed.")
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise FrontierCommandError(f"{raw!r} is not a host name ({exc}). Nothing was "
                                       "changed.") from None
    return ("=" if key.startswith("=") else "") + name


def _reset(inspector: Any, opts: argparse.Namespace) -> tuple[Any, str]:
    from scrapy_frontier.commands.reset import redis_reset

    if inspector.backend != "redis":
        raise FrontierCommandError(
            "reset deletes a Redis crawl's keys. A crawl in JOBDIR or FRONTIER_PATH starts "
            "afresh with a new directory, and the old one stays as it is. Nothing was changed.")
    if not opts.spider:
        raise UsageError("reset needs --spider NAME: the crawl whose keys to delete",
                         print_help=False)

    def confirm(question: str) -> bool:
        if opts.yes:
            return True
        if not sys.stdin.isatty():
            raise FrontierCommandError(
                f"{question} Give --yes to confirm without a terminal. Nothing was changed.")
        print(question, file=sys.stderr)
        return input(f"Type the spider's name ({opts.spider}) to confirm: ") == opts.spider

    data = redis_reset(inspector, confirm)
    if not data["confirmed"]:
        return data, "reset: not confirmed. Nothing was changed."
    return data, (f"reset: deleted {data['deleted']} key(s) of spider {data['spider']!r} "
                  f"({', '.join(p + '*' for p in data['prefixes'])}).")


def run_subcommand(inspector: Any, sub: str, rest: list[str],
                   opts: argparse.Namespace) -> tuple[Any, str]:
    if sub == "status":
        data = inspector.status()
        return data, render.status(data)
    if sub == "hosts":
        rows, notes = inspector.hosts(opts.limit, opts.sort)
        return rows, render.hosts(rows, notes)
    if sub == "due":
        rows = inspector.due(opts.limit or 20)
        return rows, render.due(rows)
    if sub == "url":
        url, host, fp = _page(rest[0])
        data = inspector.url(url, host, fp)
        return data, render.url(data)
    if sub == "recrawl":
        return _recrawl(inspector, rest, opts)
    if sub == "quarantine":
        return _quarantine(inspector, opts)
    if sub == "reset":
        return _reset(inspector, opts)
    if sub == "policy":
        return _policy(inspector, rest, opts)
    host = normalize_host(rest[0])
    value: float | None = _number(sub, rest[1]) if len(rest) > 1 else None
    if sub == "block" and opts.for_seconds is not None:
        value = opts.for_seconds
    if not host or "\0" in host:
        raise FrontierCommandError(f"{rest[0]!r} is not a host")
    steer.check_value(sub, value)
    # One read of the hosts serves both questions; known_host reads more only for a host
    # with no view (one known by its budget or fetch count alone).
    view = inspector.host_view(host)
    if not opts.new_host and view is None and not inspector.known_host(host):
        raise FrontierCommandError(
            f"host {host!r} is not known to this crawl (nothing queued, resting, fetched or "
            "steered for it): check the spelling (lower-case, no port; see scrapy frontier "
            "hosts), or pass --new-host to steer it before the crawl finds it. Nothing was "
            "changed.")
    idle = _nothing_to_do(sub, host, view)
    if idle is not None:
        return steer.unchanged(sub, host, inspector.running, idle), f"{host}: {idle}"
    if inspector.backend == "sqlite":
        data = steer.steer_sqlite(inspector, sub, host, value)
    else:
        data = steer.steer_redis(inspector, sub, host, value)
    what = {"block": "blocked" + ("" if value is None or math.isinf(value)
                                  else f" for {render.seconds(value)}"),
            "unblock": "unblocked", "delay": f"minimum rest {value} s",
            "retire": "retired", "unretire": "taken back",
            "budget": f"budget {int(value or 0) or 'unlimited'} pages"}[sub]
    return data, f"{host}: {what} ({data['applied']})"
