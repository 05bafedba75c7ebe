"""Trap hosts (``serve --trap HOST:KIND``): endless URLs with little new content.

Each page wears the same site template (a header, a navigation bar, an about paragraph and a
footer, about 150 words, seeded by the host), as real sites do; what changes from page to
page is small. Every path of such a host is a page of the trap (its start URL, ``/p/0``,
too).

``calendar``
    An infinite calendar: ``/cal/YYYY/MM/DD`` shows that day ("no events") and its month's
    grid, and links to every day of the month, the next and previous day, month and year.
``session``
    A session id in every link: eight pages (``/home``, ``/news``, ...), each with its own
    text, linking to all eight with a fresh ``?sid=`` on every page served. The text does not
    depend on the id.
``counter``
    Pages that differ only in a counter: ``/counter/N`` says "N visits" and links to
    ``/counter/N+1`` .. ``N+3``.
"""

from __future__ import annotations

import calendar
import contextlib
import datetime
import hashlib
import html
import random
import re

__all__ = ["TRAP_KINDS", "trap_page"]

TRAP_KINDS = ("calendar", "session", "counter")

_WORDS = (
    "welcome", "community", "events", "local", "news", "visitors", "members", "updates",
    "calendar", "program", "season", "tickets", "venue", "schedule", "friends", "family",
    "music", "market", "garden", "library", "museum", "workshop", "open", "weekly",
)
SESSION_PAGES = ("home", "news", "about", "events", "shop", "contact", "faq", "jobs")
_CAL = re.compile(r"/cal/(\d{4})/(\d{1,2})/(\d{1,2})$")
_COUNTER = re.compile(r"/counter/(\d+)$")
_FIRST_DAY = datetime.date(2026, 1, 1)


def _filler(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _template(host: int, title: str, main: str) -> bytes:
    """The host's site template around ``main`` (HTML)."""
    rng = random.Random(f"trap-template:{host}")
    nav = "".join(f'<a href="/{name}">{name.title()}</a> ' for name in SESSION_PAGES[:5])
    about = _filler(rng, 110)
    footer = _filler(rng, 30)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title></head><body>\n"
        f"<header>Community site {host}</header><nav>{nav}</nav>\n"
        f"<main>{main}</main>\n<aside><p>{about}</p></aside>\n"
        f"<footer><p>{footer}</p></footer></body></html>\n"
    ).encode()


def _calendar(host: int, path: str) -> bytes:
    m = _CAL.match(path)
    day = _FIRST_DAY
    if m:
        with contextlib.suppress(ValueError):
            day = datetime.date(int(m[1]), int(m[2]), int(m[3]))

    def href(d: datetime.date) -> str:
        return f"/cal/{d.year}/{d.month}/{d.day}"

    def shift_month(d: datetime.date, months: int) -> datetime.date:
        y, mo = divmod(d.month - 1 + months, 12)
        year = min(9999, max(1, d.year + y))
        return datetime.date(year, mo + 1, min(d.day, calendar.monthrange(year, mo + 1)[1]))

    days = calendar.monthrange(day.year, day.month)[1]
    grid = " ".join(f'<a href="{href(day.replace(day=i))}">{i}</a>' for i in range(1, days + 1))
    def shift_day(d: datetime.date, days: int) -> datetime.date:
        try:
            return d + datetime.timedelta(days=days)
        except OverflowError:  # the first and last days of dates link to themselves
            return d

    links = [("previous day", shift_day(day, -1)), ("next day", shift_day(day, 1)),
             ("previous month", shift_month(day, -1)), ("next month", shift_month(day, 1)),
             ("previous year", shift_month(day, -12)), ("next year", shift_month(day, 12))]
    nav = " ".join(f'<a href="{href(d)}">{name}</a>' for name, d in links)
    title = day.strftime("%A %d %B %Y")
    main = (f"<h1>Events on {title}</h1><p>No events.</p>"
            f"<p>{day.strftime('%B %Y')}: {grid}</p><p>{nav}</p>")
    return _template(host, title, main)


def _session(host: int, path: str, query: str) -> bytes:
    name = path.strip("/") if path.strip("/") in SESSION_PAGES else "home"
    # A fresh id on every page served: from the page and the id it was asked with.
    seed = hashlib.blake2b(f"{host}:{path}?{query}".encode(), digest_size=8).hexdigest()
    def sid(other: str) -> str:
        return hashlib.blake2b((seed + other).encode(), digest_size=8).hexdigest()

    links = " ".join(f'<a href="/{other}?sid={sid(other)}">{other}</a>'
                     for other in SESSION_PAGES)
    text = _filler(random.Random(f"trap-session:{host}:{name}"), 60)
    main = f"<h1>{name.title()}</h1><p>{text}</p><p>{links}</p>"
    return _template(host, name.title(), main)


def _counter(host: int, path: str) -> bytes:
    m = _COUNTER.match(path)
    n = int(m[1]) if m else 0
    links = " ".join(f'<a href="/counter/{k}">more</a>' for k in (n + 1, n + 2, n + 3))
    main = f"<h1>Guest book</h1><p>This page has had {n} visits.</p><p>{links}</p>"
    return _template(host, "Guest book", main)


def trap_page(kind: str, host: int, path: str, query: str = "") -> bytes:
    """The HTML of ``path`` (with ``query``) on trap host ``host`` of ``kind``."""
    if kind == "calendar":
        return _calendar(host, path)
    if kind == "session":
        return _session(host, path, query)
    if kind == "counter":
        return _counter(host, path)
    raise ValueError(f"unknown trap kind {kind!r}; the kinds are {', '.join(TRAP_KINDS)}")
