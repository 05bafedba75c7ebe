"""Human-readable tables for ``scrapy frontier`` (``--json`` prints the data as is)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "until unblocked"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r]
                                            for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def status(data: dict[str, Any]) -> str:
    h = data["hosts"]
    hist = data["history"]
    return "\n".join([
        f"backend     {data['backend']}",
        f"queued      {data['queued']}",
        f"in flight   {data['in_flight']}",
        f"hosts       {h['known']} known: {h['active']} active, {h['resting']} resting, "
        f"{h['blocked']} blocked, {h['retired']} retired",
        f"seen        {data['seen']}",
        f"history     {hist['pages']} pages, {hist['due']} due",
    ])


def hosts(rows: list[dict[str, Any]], notes: dict[str, str]) -> str:
    if not rows:
        return "(no hosts with queued URLs, a rest, a block or a retirement)"
    return table(
        ["host", "queued", "state", "next contact", "last fetch", "rest", "failures",
         "crawl delay", "hints"],
        [[r["host"], r["queued"], r["state"] + (f" ({notes[r['host']]})"
                                                 if r["host"] in notes else ""),
          _next_contact(r),
          seconds(r["last_fetch_s"]), seconds(r["rest_s"]), r["failures"],
          seconds(r["crawl_delay"]), r["hints"]] for r in rows])


def _next_contact(row: dict[str, Any]) -> str:
    if row["state"] == "retired":
        return "never"
    wait = row["next_contact_in"]
    if wait is None and row["state"] == "blocked":
        return "until unblocked"
    return "now" if wait == 0 else seconds(wait)


def url(data: dict[str, Any]) -> str:
    lines = [f"url         {data['url']}", f"host        {data['host']}",
             f"seen        {'yes' if data['seen'] else 'no'}",
             f"queued      {'yes' if data['queued'] else 'no'}"]
    h = data["history"]
    if h is None:
        lines.append("history     none")
    else:
        lines += [f"visits      {h['visits']} ({h['changes']} changes seen)",
                  f"last visit  {h['last_visit']}", f"interval    {seconds(h['interval_s'])}",
                  f"next due    {h['next_due']}", f"predictor   {h['predictor']}",
                  f"validators  ETag {h['etag']!r}, Last-Modified {h['last_modified']!r}"]
    return "\n".join(lines)


def due(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no pages in the history)"
    return table(["url", "due in", "interval", "visits", "changes"],
                 [[r["url"], "now" if r["due_in_s"] <= 0 else seconds(r["due_in_s"]),
                   seconds(r["interval_s"]), r["visits"], r["changes"]] for r in rows])


def quarantine(data: dict[str, Any]) -> str:
    total = data["total"]
    parts = [f"requests set aside: {total['requests']}"]
    if data["requests"]:
        parts.append(table(["url", "host", "level", "set aside", "why"],
                           [[r["url"] or "(not readable)", r["host"], r["level"], r["at"],
                             r["error"]] for r in data["requests"]]))
    parts.append(f"page records set aside: {total['records']}")
    if data["records"]:
        parts.append(table(["url", "fingerprint", "set aside", "why"],
                           [[r["url"] or "(not readable)", "?" if r["fp"] is None else r["fp"],
                             r["at"], r["error"]]
                            for r in data["records"]]))
    if data["action"] != "list":
        parts.append(f"{data['action']}: {data['applied']}")
    elif any(total.values()):
        parts.append("Once the spider (or the release) can read them, scrapy frontier "
                     "quarantine --requeue puts them back; --drop clears them.")
    return "\n".join(parts)
