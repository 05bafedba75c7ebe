"""The control writes of ``scrapy frontier``: block, unblock, delay, retire, budget, policy.

SQLite: one short transaction in ``control.sqlite`` (never in the crawl's own files); the
running crawl applies it within a second (:mod:`scrapy_frontier.backends.sqlite.steering`), a
stopped one when it starts again. Redis: one script on the shared frontier
(``lua/control.lua``), atomic with the workers' claims, so it holds for every worker at
once and is kept with the rest of the state.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_frontier.backends.sqlite.control import RETIRED, TAKEN_BACK, ControlFile
from scrapy_frontier.errors import FrontierCommandError

if TYPE_CHECKING:  # the Redis side needs the redis extra; a plain install never imports it
    from scrapy_frontier.commands.inspect_redis import RedisInspector
    from scrapy_frontier.commands.inspect_sqlite import SQLiteInspector

ACTIONS = ("block", "unblock", "delay", "retire", "unretire", "budget")


def check_value(action: str, value: float | None) -> None:
    if action in ("delay", "budget") and value is None:
        raise FrontierCommandError(f"{action} needs a value: scrapy frontier {action} HOST "
                                   f"{'SECONDS' if action == 'delay' else 'PAGES'}")
    if value is not None and (math.isnan(value) or value < 0 or math.isinf(value)):
        raise FrontierCommandError(f"{action}: the value must be a finite number >= 0, got "
                                   f"{value}")
    if action == "budget" and value is not None and not float(value).is_integer():
        raise FrontierCommandError(f"budget: a whole number of pages, got {value}")


def steer_sqlite(inspector: SQLiteInspector, action: str, host: str,
                 value: float | None) -> dict[str, Any]:
    check_value(action, value)
    when = in_control_file(inspector, lambda control: _write(control, action, host, value))
    return _result(action, host, value, inspector.running, when)


def in_control_file(inspector: Any, write: Callable[[ControlFile], object]) -> str:
    """Run ``write`` on the crawl's ``control.sqlite``; returns when the crawl applies it."""
    control = ControlFile(inspector.directory)
    try:
        write(control)
    except sqlite3.Error as exc:
        raise _unwritable(control, exc) from None
    finally:
        control.close()
    return ("applied by the running crawl within a second" if inspector.running
            else "applied when the crawl starts again")


def _write(control: ControlFile, action: str, host: str, value: float | None) -> None:
    if action == "block":
        until = math.inf if value is None else time.time() + value
        control.update(host, blocked_until=until)
    elif action == "unblock":
        control.update(host, blocked_until=None)
    elif action == "delay":
        control.update(host, delay=value or None)
    elif action == "retire":
        control.update(host, retired=RETIRED)
    elif action == "unretire":
        control.update(host, retired=TAKEN_BACK)
    else:
        control.update(host, budget=int(value or 0))


def _unwritable(control: ControlFile, exc: sqlite3.Error) -> FrontierCommandError:
    return FrontierCommandError(
        f"cannot write {control.path} ({type(exc).__name__}: {exc}): the crawl's directory "
        "must be writable by this user to steer it. Nothing was changed.")


def steer_redis(inspector: RedisInspector, action: str, host: str,
                value: float | None) -> dict[str, Any]:
    check_value(action, value)
    remote = inspector.frontier(inspector.partition(host))  # the host's partition
    if action == "block":
        remote.control("block", host, math.inf if value is None else float(value))
    elif action == "unblock":
        remote.control("unblock", host)
    elif action == "delay":
        remote.control("delay", host, float(value or 0.0))
    elif action == "retire":
        dropped = remote.control("retire", host)[0]
        return _result(action, host, value, True,
                       f"applied to every worker now; {int(dropped)} queued URLs dropped")
    elif action == "unretire":
        if int(remote.control("unretire", host)[0]) < 0:
            raise FrontierCommandError(
                f"host {host!r} reached its budget: raise it to take the host back (scrapy "
                "frontier budget HOST PAGES). Nothing was changed.")
        return _result(action, host, value, True,
                       "applied to every worker now; its new URLs are queued again")
    else:
        remote.control("budget", host, int(value or 0))
    return _result(action, host, value, True, "applied to every worker now")


def stored_policies(inspector: Any) -> dict[str, Any]:
    """The steered entries the crawl keeps: key -> fields."""
    if inspector.backend == "sqlite":
        return dict(inspector.control.policies())
    return dict(inspector.frontier(0).policies())


def steer_policy(inspector: Any, key: str, fields: dict[str, Any] | None) -> dict[str, Any]:
    """Set the per-host policy's steered entry ``key`` to ``fields``, already validated and
    merged with what it had (None: clear it).

    SQLite: in ``control.sqlite``, applied by the running crawl within a second, or by the
    next run when it opens. Redis: in the crawl's ``policies`` hash, read by every worker
    within 5 s; the budgets of the hosts it covers are tested again at once, atomically with
    the workers' claims (a raised budget takes a capped host back)."""
    if inspector.backend == "sqlite":
        when = in_control_file(inspector, lambda control: control.set_policy(key, fields))
    else:
        inspector.frontier(0).set_policy(key, fields)
        reopened = _rebudget(inspector, key)
        when = "applied by every worker within 5 s" + (
            f"; {reopened} host(s) over budget taken back" if reopened else "")
    return {"action": "policy", "key": key, "fields": fields,
            "crawl_running": inspector.running, "applied": when}


def _rebudget(inspector: Any, key: str) -> int:
    """Redis: test again the budget of each host ``key`` covers that has a fetch count or
    is over budget, by the policies now in force. Returns the hosts taken back."""
    from scrapy_frontier.backends.redis.connection import text

    config = inspector.config
    config.host_policies.steer(inspector.frontier(0).policies())
    exact = key[1:] if key.startswith("=") else None
    reopened = 0
    client = inspector.client
    for i in range(inspector.count):
        fetched, capped = inspector.k("fetched", i), inspector.k("capped", i)
        hosts = {text(h) for h in inspector._read(
            "reading the hosts' fetch counts",
            lambda fetched=fetched, capped=capped: [*client.hkeys(fetched),
                                                    *client.smembers(capped)])}
        covered = [h for h in hosts if h == exact or exact is None
                   and (h == key or h.endswith("." + key))]
        if covered:
            remote = inspector.frontier(i)
            for host in covered:
                reopened += int(remote.control("rebudget", host, config.budget_for(host))[0])
    return reopened


def unchanged(action: str, host: str, running: bool, why: str) -> dict[str, Any]:
    return _result(action, host, None, running, why)


def _result(action: str, host: str, value: float | None, running: bool,
            when: str) -> dict[str, Any]:
    return {"action": action, "host": host, "value": value, "crawl_running": running,
            "applied": when}


def recrawl(inspector: Any, fp: int | None, host: str | None) -> dict[str, Any]:
    """Make the page ``fp``, or the pages of ``host``, or every page, due now.

    SQLite: a request in ``control.sqlite``, applied to the page history by the running
    crawl within a second, or by the next run when it opens. Redis: the records change in
    Redis at once, and the workers read the feed again within a few seconds.
    """
    if inspector.backend == "sqlite":
        pages = inspector.history_pages(fp, host)
        if not pages:
            raise FrontierCommandError(_nothing_to_recrawl(fp, host))
        applied = in_control_file(
            inspector, lambda control: control.request_recrawl(fp=fp, host=host))
        return {"action": "recrawl", "fp": fp, "host": host, "marked": pages,
                "applied": f"{pages} pages, {applied}"}
    from scrapy_frontier.backends.sqlite.steering import select_records
    from scrapy_frontier.core.history import make_due

    store = inspector.history()
    records = select_records(store, [(fp, host)])
    if not records:
        raise FrontierCommandError(_nothing_to_recrawl(fp, host))
    for record in records:
        make_due(record)
        store.put(record)
    store.flush()
    store.marked()
    return {"action": "recrawl", "fp": fp, "host": host, "marked": len(records),
            "applied": f"{len(records)} pages due now; the workers take them within seconds"}


def _nothing_to_recrawl(fp: int | None, host: str | None) -> str:
    if fp is not None:
        return ("that URL has no page history (never fetched, or fetched with "
                "FRONTIER_RECRAWL='off'): nothing to recrawl. Nothing was changed.")
    if host is not None:
        return (f"no page of host {host!r} is in the page history: check the spelling "
                "(lower-case, no port; see scrapy frontier hosts). Nothing was changed.")
    return "the page history is empty: nothing to recrawl. Nothing was changed."
