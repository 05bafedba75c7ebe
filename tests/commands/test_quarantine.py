"""What a crawl sets aside is visible and undoable, on every backend that keeps state.

A request whose meta pickles but no longer unpickles, and a page record damaged on disk,
are set aside (not fatal), named in the log, counted in the next run's opening, listed by
``scrapy frontier quarantine``, and put back by ``--requeue`` once the spider is fixed:
the fixed spider's next run fetches them with their meta.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.commands.quarantine_spider import FRAGILE_PAGES
from tests.commands.test_operating import Backend, as_json
from tests.redis_server import RedisServer
from tests.styles_site import StyleSite
from tests.test_codec import forged

pytestmark = pytest.mark.crawl

ROOT = Path(__file__).resolve().parents[2]
PAGES = 10
KEY = "a-signing-key-of-the-tests-0123456789"


def _site(site: StyleSite) -> None:
    links = "".join(f"<a href='/p/{n}'>{n}</a>" for n in range(PAGES))
    site.put("/", f"<html><body>{links}</body></html>")
    for n in range(PAGES):
        site.put(f"/p/{n}", f"<html><body>page {n}</body></html>")


def _crawl(site: StyleSite, b: Backend, workdir: Path, *, fixed: bool, ok: bool = True
           ) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """The crawl's items, stats and output; ``ok=False``: a crawl that fails to open (this
    harness runs CrawlerProcess, which exits 0 either way: ``scrapy crawl`` exits 1)."""
    workdir.mkdir(parents=True, exist_ok=True)
    items, stats = workdir / "items.jsonl", workdir / "stats.json"
    settings = {"LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
                "FRONTIER_MIN_DELAY": 0.0, "FEEDS": {str(items): {"format": "jsonlines"}},
                **b.crawl}
    env = {k: v for k, v in os.environ.items() if k != "FRAGILE_FIXED"}
    if fixed:
        env["FRAGILE_FIXED"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.commands.quarantine_spider", site.base, json.dumps(settings),
         str(stats)], cwd=ROOT, capture_output=True, text=True, timeout=180, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    if not ok:
        assert "scrapy-frontier cannot start" in output, output[-3000:]
        return [], {}, output
    got = [json.loads(line) for line in items.read_text().splitlines()] if items.exists() \
        else []
    return got, json.loads(stats.read_text()), output


def _damage_record(b: Backend, redis_server: RedisServer, url: str) -> int:
    """Overwrite the page record of ``url`` with text that is not JSON; its fingerprint."""
    if b.name == "sqlite":
        db = sqlite3.connect(Path(b.crawl["JOBDIR"]) / "history.sqlite")
        with db:
            rows = db.execute("SELECT fp, data FROM pages").fetchall()
            [fp] = [fp for fp, data in rows if json.loads(data)["u"] == url]
            db.execute("UPDATE pages SET data = '{not json' WHERE fp = ?", (fp,))
        db.close()
        return int(fp)
    client = redis_server.client()
    key = b.crawl["FRONTIER_REDIS_HISTORY_KEY"] + "pages"
    [fp] = [f for f, data in client.hgetall(key).items() if json.loads(data)["u"] == url]
    client.hset(key, fp, "{not json")
    client.close()
    return int(fp)


def _undecodable(stats: dict[str, Any], backend: str) -> int:
    return int(stats.get("frontier/store/undecodable" if backend == "sqlite"
                         else "frontier/redis/undecodable", 0))


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.slow)])
def test_set_aside_listed_and_requeued_once_the_spider_is_fixed(
        backend: str, tmp_path: Path, redis_server: RedisServer) -> None:
    b = Backend(backend, tmp_path, redis_server)
    b.crawl["FRONTIER_REDIS_IDLE_GRACE"] = 0.5
    if backend == "redis":
        b.args = ["--spider", "quarantine"]
        # Other classes than plain values in meta: a shared store needs its rows sealed.
        b.crawl["FRONTIER_SIGNING_KEYS"] = b.command["FRONTIER_SIGNING_KEYS"] = KEY
    fragile = {f"/p/{n}" for n in FRAGILE_PAGES}
    with StyleSite() as site:
        _site(site)
        base = site.base
        fragile_urls = {base + p for p in fragile}
        # Run 1, the spider as it is: the fragile requests cannot be rebuilt.
        items, stats, out = _crawl(site, b, tmp_path / "run1", fixed=False)
        assert stats["finish_reason"] == "finished"
        assert {i["url"] for i in items} == {f"{base}/"} | {
            f"{base}/p/{n}" for n in range(PAGES)} - fragile_urls
        assert _undecodable(stats, backend) == len(fragile)
        rebuilt = [line for line in out.splitlines() if "cannot be rebuilt" in line]
        assert len(rebuilt) == len(fragile), rebuilt
        for url in fragile_urls:
            assert any(url in line and "--requeue" in line for line in rebuilt), rebuilt

        # One page record damaged on disk: the next run goes on past it.
        damaged = _damage_record(b, redis_server, f"{base}/")
        items, stats, out = _crawl(site, b, tmp_path / "run2", fixed=False)
        assert stats["finish_reason"] == "finished", out[-3000:]
        assert stats.get("frontier/history/quarantined") == 1, out[-3000:]
        # Nothing of the URL is left in the record: the fingerprint names it.
        assert f"history record of the page of fingerprint {damaged} cannot be read" in out
        assert "Quarantine: 2 requests that could not be rebuilt are set aside" in out
        assert not any(i["url"] in fragile_urls for i in items)

        listed = as_json(b.run(["quarantine", "--json"]))
        assert listed["total"] == {"requests": 2, "records": 1}, listed
        assert {r["url"] for r in listed["requests"]} == fragile_urls
        assert all("cannot rebuild Fragile" in r["error"] for r in listed["requests"])
        assert [(r["fp"], r["url"]) for r in listed["records"]] == [(damaged, None)]
        table = b.run(["quarantine"]).stdout
        assert f"{base}/p/3" in table and "--requeue" in table

        requeued = as_json(b.run(["quarantine", "--requeue", "--json"]))
        assert requeued["applied"].startswith("2 requests queued again"), requeued

        # Run 3, the spider fixed: the requests set aside are fetched, with their meta.
        items, stats, out = _crawl(site, b, tmp_path / "run3", fixed=True)
        assert stats["finish_reason"] == "finished", out[-3000:]
        assert {(i["url"], i["tag"]) for i in items if i["url"] in fragile_urls} == {
            (base + p, "v" + p.rsplit("/", 1)[1]) for p in fragile}
        assert _undecodable(stats, backend) == 0
        after = as_json(b.run(["quarantine", "--json"]))
        assert after["total"]["requests"] == 0, after

        dropped = as_json(b.run(["quarantine", "--drop", "--json"]))
        assert "0 requests" in dropped["applied"], dropped
        assert as_json(b.run(["quarantine", "--json"]))["total"] == {"requests": 0,
                                                                      "records": 0}
    fetched = [path for _, path, status in site.log if status == 200]
    for path in fragile:
        assert fetched.count(path) == 1, (path, fetched)


# -- trust: a forged row or record runs no code ------------------------------------------


def _forge(b: Backend, redis_server: RedisServer, base: str, marker: Path) -> tuple[int, str]:
    """Push a forged queue row and a page record with a forged kept request into the
    crawl's store, as a plain client would; the fingerprint and URL of that record."""
    import base64

    host = base.split("//", 1)[1].split(":")[0]
    row = (12345).to_bytes(8, "big", signed=True) + forged(marker)
    url = f"{base}/p/1"
    if b.name == "sqlite":
        job = Path(b.crawl["JOBDIR"])
        db = sqlite3.connect(job / "frontier.sqlite")
        with db:
            top = max(db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {t}").fetchone()[0]
                      for t in ("front", "back"))
            db.execute("INSERT INTO front(id, level, host, data) VALUES (?, 1, ?, ?)",
                       (top + 1, host, forged(marker)))
        db.close()
        db = sqlite3.connect(job / "history.sqlite")
        with db:
            [(fp, data)] = [(fp, data) for fp, data in db.execute("SELECT fp, data FROM pages")
                            if json.loads(data)["u"] == url]
            record = json.loads(data)
            record["rq"] = base64.b64encode(forged(marker)).decode()
            db.execute("UPDATE pages SET data = ?, eligible = 0 WHERE fp = ?",
                       (json.dumps(record), fp))
        db.close()
        return int(fp), url
    client = redis_server.client()
    prefix, history = b.crawl["FRONTIER_REDIS_KEY"], b.crawl["FRONTIER_REDIS_HISTORY_KEY"]
    client.rpush(prefix + "f:1", host.encode() + b"\0" + row)
    client.hincrby(prefix + "count", "front", 1)
    [(fp, data)] = [(f, d) for f, d in client.hgetall(history + "pages").items()
                    if json.loads(d)["u"] == url]
    record = json.loads(data)
    record["rq"] = base64.b64encode(forged(marker)).decode()
    client.hset(history + "pages", fp, json.dumps(record))
    client.zadd(history + "due", {fp: 0.0})
    client.close()
    return int(fp), url


def test_a_jobdir_others_may_write_is_refused_before_anything_is_read(
        tmp_path: Path, redis_server: RedisServer) -> None:
    """Scrapy unpickles spider.state, and the frontier its rows, from JOBDIR: a directory the
    group may write is refused at open, naming it, before any row is read or run."""
    b = Backend("sqlite", tmp_path, redis_server)
    marker = tmp_path / "payload-ran"
    with StyleSite() as site:
        _site(site)
        _crawl(site, b, tmp_path / "run1", fixed=True)
        _forge(b, redis_server, site.base, marker)
        os.chmod(b.crawl["JOBDIR"], 0o775)
        fetched_before = len(site.log)
        _, _, out = _crawl(site, b, tmp_path / "run2", fixed=True, ok=False)
        assert f"{b.crawl['JOBDIR']} may be written by others (mode 775)" in out, out[-3000:]
        assert "chmod -R go-w" in out
        assert not marker.exists()
        assert len(site.log) == fetched_before


@pytest.mark.parametrize("keys", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_forged_row_and_record_run_no_code_and_are_set_aside(
        keys: bool, tmp_path: Path, redis_server: RedisServer) -> None:
    """A queue row and a page record's kept request, each a pickle that calls os.system,
    pushed into the crawl's Redis by a plain client: no worker runs them; each is set aside
    and named, and ``quarantine --requeue`` refuses them. Without keys the restricted
    unpickler refuses the function; with FRONTIER_SIGNING_KEYS an unsealed row is not read."""
    backend = "redis"
    b = Backend(backend, tmp_path, redis_server)
    b.crawl["FRONTIER_REDIS_IDLE_GRACE"] = 0.5
    b.args = ["--spider", "quarantine"]
    if keys:
        b.crawl["FRONTIER_SIGNING_KEYS"] = b.command["FRONTIER_SIGNING_KEYS"] = KEY
    marker = tmp_path / "payload-ran"
    with StyleSite() as site:
        _site(site)
        base = site.base
        _crawl(site, b, tmp_path / "run1", fixed=True)
        fp, url = _forge(b, redis_server, base, marker)
        fetched_before = len(site.log)
        items, stats, out = _crawl(site, b, tmp_path / "run2", fixed=True)
        assert not marker.exists(), out[-3000:]
        assert stats["finish_reason"] == "finished", out[-3000:]
        assert stats.get("frontier/redis/untrusted") == 1, out[-3000:]
        assert stats.get("frontier/history/quarantined") == 1, out[-3000:]
        why = ("it is not sealed" if keys else "it names posix.system")
        assert any("cannot be rebuilt" in line and why in line and "refuses it" in line
                   for line in out.splitlines()), out[-3000:]
        assert any(f"page {url} (fingerprint {fp})" in line and why in line
                   for line in out.splitlines()), out[-3000:]
        # The forged record's page is not fetched with the forged request (nor at all).
        assert all(path != "/p/1" for _, path, _ in site.log[fetched_before:])

        listed = as_json(b.run(["quarantine", "--json"]))
        assert listed["total"] == {"requests": 1, "records": 1}, listed
        assert [r["fp"] for r in listed["records"]] == [fp]
        assert why in listed["requests"][0]["error"]
        requeued = as_json(b.run(["quarantine", "--requeue", "--json"]))
        assert "1 requests and 1 page records stay in the quarantine: they fail the trust " \
            "check" in requeued["applied"], requeued
        assert as_json(b.run(["quarantine", "--json"]))["total"] == {"requests": 1,
                                                                      "records": 1}
        assert not marker.exists()
