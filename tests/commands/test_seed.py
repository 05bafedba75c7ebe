"""``scrapy frontier seed``: a seed list loaded into a JOBDIR or a Redis crawl.

Text, gzip (told by its bytes) and CSV files go through the crawl's seen set: a second load
queues nothing, a load stopped midway and run again queues each URL once, and a real crawl
then fetches every seeded URL exactly once, with the callback the load named (the site's
request log and the spider's items are the judges). The load's memory does not grow with
the number of URLs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from frontier_testweb.crawl import run_crawl
from scrapy_frontier.backends.sqlite.lock import is_locked
from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore
from scrapy_frontier.commands.seed import Tally, seed
from scrapy_frontier.errors import FrontierCommandError
from tests.commands.test_operating import Backend, as_json
from tests.redis_server import RedisServer
from tests.styles_site import StyleSite

ROOT = Path(__file__).resolve().parents[2]
KEY = "a-signing-key-of-the-seed-tests-0123"
PAGES = 20


def _site(site: StyleSite) -> None:
    site.put("/", "<html><body>home</body></html>")
    for n in range(PAGES):
        site.put(f"/p/{n}", f"<html><body>page {n}</body></html>")


def _inputs(tmp: Path, base: str) -> dict[str, Path]:
    """Four seed files over /p/0 .. /p/19, overlapping, with invalid entries."""
    plain = tmp / "seeds.txt"
    plain.write_text("\n".join([
        "# the first ten pages, one twice",
        *(f"{base}/p/{n}" for n in range(5)),
        "",
        "   ",
        "ftp://127.0.3.1/file",
        "not a url",
        *(f"{base}/p/{n}" for n in range(5, 10)),
        f"{base}/p/3#a-fragment-is-the-same-page",
        "http://",
    ]) + "\n")
    # A gzip file named as plain text: told by its magic bytes.
    packed = tmp / "more.txt"
    packed.write_bytes(gzip.compress("".join(
        f"{base}/p/{n}\n" for n in range(5, 15)).encode()))
    table = tmp / "seeds.csv"
    table.write_text("id,url,title\n" + "".join(
        f'{n},{base}/p/{n},"page, {n}"\n' for n in range(15, 20))
        + "20,ftp://127.0.3.1/x,bad\n")
    return {"plain": plain, "gzip": packed, "csv": table}


def _crawl(b: Backend, workdir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    workdir.mkdir(parents=True, exist_ok=True)
    items, stats = workdir / "items.jsonl", workdir / "stats.json"
    settings = {"LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
                "FRONTIER_MIN_DELAY": 0.0, "FEEDS": {str(items): {"format": "jsonlines"}},
                **b.crawl}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.commands.seed_spider", json.dumps(settings), str(stats)],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    got = [json.loads(line) for line in items.read_text().splitlines()] if items.exists() \
        else []
    return got, json.loads(stats.read_text())


@pytest.mark.crawl
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.slow),
                                     pytest.param("redis-cluster", marks=pytest.mark.slow)])
def test_seed_files_load_once_and_the_crawl_fetches_each_url_once_with_its_callback(
        backend: str, tmp_path: Path, redis_server: RedisServer,
        request: pytest.FixtureRequest) -> None:
    b = Backend(backend, tmp_path, redis_server,
                request.getfixturevalue("redis_cluster") if backend == "redis-cluster" else None)
    b.args = ["--spider", "seeded"]
    if backend != "sqlite":
        # A shared store: the crawl reads only rows sealed with its key, so the seeds must
        # be written as the workers write theirs.
        b.crawl["FRONTIER_SIGNING_KEYS"] = b.command["FRONTIER_SIGNING_KEYS"] = KEY
        b.crawl["FRONTIER_REDIS_IDLE_GRACE"] = 0.5
    with StyleSite() as site:
        _site(site)
        base = site.base
        files = _inputs(tmp_path, base)

        first = as_json(b.run(["seed", str(files["plain"]), "--callback", "parse_item",
                               "--json"]))
        assert {k: first[k] for k in ("read", "queued", "already_seen", "invalid",
                                      "refused")} == {
            "read": 14, "queued": 10, "already_seen": 1, "invalid": 3, "refused": 0}, first
        assert [(bad["line"], bad["text"]) for bad in first["invalid_lines"]] == [
            (9, "ftp://127.0.3.1/file"), (10, "not a url"), (17, "http://")]
        assert first["callback"] == "parse_item" and first["backend"] == b.backend

        again = as_json(b.run(["seed", str(files["plain"]), "--callback", "parse_item",
                               "--json"]))
        assert (again["queued"], again["already_seen"]) == (0, 11), again
        assert again["applied"] == "nothing new to queue"

        packed = as_json(b.run(["seed", str(files["gzip"]), "--json"]))  # callback: parse
        assert (packed["read"], packed["queued"], packed["already_seen"]) == (10, 5, 5), packed

        by_name = as_json(b.run(["seed", str(files["csv"]), "--column", "url",
                                 "--callback", "parse_item", "--json"]))
        assert (by_name["read"], by_name["queued"], by_name["invalid"]) == (6, 5, 1), by_name
        assert by_name["invalid_lines"][0]["line"] == 7
        # By index, the header row is an entry too: shown as invalid, not queued.
        by_index = b.run(["seed", str(files["csv"]), "--column", "2"])
        assert by_index.stdout.splitlines()[0].endswith(
            "7 read, 0 queued, 5 already seen, 2 invalid"), by_index.stdout
        assert "line 1: 'url' is not an http:// or https:// URL" in by_index.stdout

        status = as_json(b.run(["status", "--json"]))
        assert (status["queued"], status["seen"]) == (PAGES, PAGES), status

        items, stats = _crawl(b, tmp_path / "crawl")
        assert stats["finish_reason"] == "finished", stats
        fetched = Counter(path for method, path, _ in site.requests() if method == "GET")
        assert fetched == Counter({f"/p/{n}": 1 for n in range(PAGES)}), fetched
        callbacks = {item["url"].removeprefix(base): item["callback"] for item in items}
        assert callbacks == {f"/p/{n}": "parse" if 10 <= n < 15 else "parse_item"
                             for n in range(PAGES)}, callbacks

        # Fetched pages stay in the seen set: a later load queues none of them.
        after = as_json(b.run(["seed", str(files["plain"]), "--json"]))
        assert (after["queued"], after["already_seen"]) == (0, 11), after


@pytest.mark.crawl
def test_seeding_a_running_sqlite_crawl_is_refused(tmp_path: Path) -> None:
    b = Backend("sqlite", tmp_path, None)
    seeds = tmp_path / "seeds.txt"
    flag = tmp_path / "stop"
    with StyleSite() as site:
        _site(site)
        seeds.write_text(f"{site.base}/p/1\n")
        out: dict[str, Any] = {}

        def crawl() -> None:
            out["result"] = run_crawl([f"{site.base}/"], b.crawl, workdir=tmp_path / "crawl",
                                      timeout=120, stay_open_until=flag)

        thread = threading.Thread(target=crawl)
        thread.start()
        try:
            state = Path(b.crawl["JOBDIR"]) / "frontier.sqlite"
            for _ in range(300):  # bounded: the crawl opens its state within seconds
                if is_locked(state) or not thread.is_alive():
                    break
                thread.join(0.1)
            assert is_locked(state), "the crawl did not start"
            before = as_json(b.run(["status", "--json"]))
            refused = b.run(["seed", str(seeds), "--spider", "testweb"], check=False)
            assert refused.returncode == 1
            assert "is running" in refused.stderr and "Nothing was changed" in refused.stderr
            assert refused.stdout == ""
            assert as_json(b.run(["status", "--json"]))["seen"] == before["seen"]
        finally:
            flag.touch()
            thread.join(timeout=150)
    assert out["result"].returncode == 0, out["result"].output[-3000:]
    # Stopped, the same directory takes the seeds (for its next run).
    loaded = as_json(b.run(["seed", str(seeds), "--json"]))
    assert loaded["queued"] == 1, loaded


def test_the_callback_is_checked_against_the_projects_spider(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "seedproj").mkdir(parents=True)
    (project / "scrapy.cfg").write_text("[settings]\ndefault = seedproj.settings\n")
    (project / "seedproj" / "__init__.py").write_text("")
    (project / "seedproj" / "settings.py").write_text(
        'SPIDER_MODULES = ["tests.commands.seed_spider"]\n')
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://127.0.3.1/a\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)])}
    job = f"JOBDIR={tmp_path / 'job'}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "scrapy.cmdline", "frontier", "seed",
                               str(seeds), *args, "-s", job], cwd=project, env=env,
                              capture_output=True, text=True, timeout=120)

    wrong = run("--callback", "parse_itme")
    assert wrong.returncode == 1
    assert "spider 'seeded'" in wrong.stderr and "no method 'parse_itme'" in wrong.stderr
    assert not (tmp_path / "job").exists()  # refused before anything was written
    right = run("--callback", "parse_item")
    assert right.returncode == 0, right.stderr
    assert "1 queued" in right.stdout and "warning" not in right.stdout


def test_the_memory_backend_is_refused(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://127.0.3.1/a\n")
    with pytest.raises(FrontierCommandError, match="inside its own process"):
        seed(str(seeds), _opts(), Settings({"FRONTIER_BACKEND": "memory"}), "seeded")


# -- in-process: interrupted loads, and memory --------------------------------------------


def _opts(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"column": None, "callback": None, "priority": 0, **kw})


def _write_urls(path: Path, n: int, *, hosts: int = 500, packed: bool = False) -> None:
    lines = "".join(f"http://h{i % hosts}.example/p/{i}\n" for i in range(n)).encode()
    path.write_bytes(gzip.compress(lines) if packed else lines)


def _queued_rows(job: Path) -> int:
    db = sqlite3.connect(job / "frontier.sqlite")
    try:
        return int(db.execute("SELECT COUNT(*) FROM front").fetchone()[0])
    finally:
        db.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_load_stopped_midway_and_run_again_queues_each_url_once(
        backend: str, tmp_path: Path, redis_server: RedisServer, redis_prefix: str) -> None:
    n = 12_000
    full, cut = tmp_path / "urls.gz", tmp_path / "cut.gz"
    _write_urls(full, n, packed=True)
    cut.write_bytes(full.read_bytes()[: len(full.read_bytes()) // 2])  # a truncated download
    if backend == "sqlite":
        settings = Settings({"JOBDIR": str(tmp_path / "job")})
    else:
        settings = Settings({"FRONTIER_BACKEND": "redis", "REDIS_URL": redis_server.url,
                             "FRONTIER_REDIS_KEY": redis_prefix,
                             "FRONTIER_REDIS_SEEN_KEY": redis_prefix + "seen:"})
    with pytest.raises(FrontierCommandError, match="cannot be read to its end") as stopped:
        seed(str(cut), _opts(), settings, "seeded")
    assert "queued" in str(stopped.value)
    data, _ = seed(str(full), _opts(), settings, "seeded")
    assert data["read"] == n
    assert 0 < data["queued"] < n and data["queued"] + data["already_seen"] == n, data
    again, _ = seed(str(full), _opts(), settings, "seeded")
    assert (again["queued"], again["already_seen"]) == (0, n)
    if backend == "sqlite":
        assert _queued_rows(tmp_path / "job") == n
    else:
        client = redis_server.client()
        try:
            count = client.hgetall(redis_prefix + "count")
            assert int(count[b"front"]) + int(count.get(b"back", 0)) == n, count
        finally:
            client.close()


def test_a_load_killed_between_the_queue_and_the_seen_set_is_caught_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue's batch is committed, the process dies before the seen set's: the next
    load finds those URLs in the queue, not in the seen set, and must not queue them twice."""
    n = 12_000
    urls = tmp_path / "urls.txt"
    _write_urls(urls, n)
    settings = Settings({"JOBDIR": str(tmp_path / "job")})
    real = SQLiteFingerprintStore.flush
    calls = Counter[str]()

    def dies_at_the_second_batch(self: SQLiteFingerprintStore, covers: int | None = None
                                 ) -> None:
        if covers is not None:
            calls["batch"] += 1
            if calls["batch"] == 2:
                self.discard()  # a kill: the fingerprints in memory are gone with it
                raise KeyboardInterrupt
        real(self, covers)

    monkeypatch.setattr(SQLiteFingerprintStore, "flush", dies_at_the_second_batch)
    with pytest.raises(KeyboardInterrupt):
        seed(str(urls), _opts(), settings, "seeded")
    monkeypatch.setattr(SQLiteFingerprintStore, "flush", real)
    queued = _queued_rows(tmp_path / "job")
    assert queued == 10_000  # two batches in the queue, one in the seen set
    data, _ = seed(str(urls), _opts(), settings, "seeded")
    assert (data["queued"], data["already_seen"]) == (n - queued, queued), data
    assert _queued_rows(tmp_path / "job") == n


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.slow)])
def test_memory_does_not_grow_with_the_number_of_urls(
        backend: str, tmp_path: Path, redis_server: RedisServer, redis_prefix: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's live memory blocks (``sys.getallocatedblocks``) and the process's RSS,
    sampled after every batch of a load of 200 000 URLs (100 000 on Redis): one batch at
    a time, so they stay flat. A load that kept one object per URL would add 180 000
    blocks after the first 20 000 URLs; one that kept 100 bytes per URL, 10 MB of RSS
    over the second half."""
    n = 200_000 if backend == "sqlite" else 100_000
    urls = tmp_path / "urls.txt"
    _write_urls(urls, n)
    if backend == "sqlite":
        settings = Settings({"JOBDIR": str(tmp_path / "job")})
    else:
        settings = Settings({"FRONTIER_BACKEND": "redis", "REDIS_URL": redis_server.url,
                             "FRONTIER_REDIS_KEY": redis_prefix,
                             "FRONTIER_REDIS_SEEN_KEY": redis_prefix + "seen:"})
    samples: list[tuple[int, int, int]] = []  # (URLs read, blocks, RSS) after each batch
    counted = Tally.add

    def sampled(self: Tally, outcomes: Any) -> None:
        counted(self, outcomes)
        samples.append((self.read, sys.getallocatedblocks(), _rss()))

    monkeypatch.setattr(Tally, "add", sampled)
    data, _ = seed(str(urls), _opts(), settings, "seeded")
    assert data["queued"] == n
    warm = next(s for s in samples if s[0] >= 20_000)  # caches, scripts, imports: warm
    half = next(s for s in samples if s[0] >= n // 2)
    blocks = max(s[1] for s in samples if s[0] >= warm[0]) - warm[1]
    rss = max(s[2] for s in samples if s[0] >= half[0]) - half[2]
    print(f"\n{backend}, {n} URLs: blocks {warm[1]} at {warm[0]} URLs, at most +{blocks} "
          f"after; RSS {half[2] / 1e6:.1f} MB at {half[0]} URLs, at most +{rss / 1e6:.1f} MB "
          f"after (end {samples[-1][2] / 1e6:.1f} MB)")
    assert blocks <= 5_000, samples[::10]
    # SQLite's page caches are bounded (8 MiB for the queue, 2 MiB for the seen set), and
    # full well before half of the load.
    assert rss <= 8 * 1024 * 1024, samples[::10]
