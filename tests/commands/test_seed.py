"""``scrapy frontier seed``: a seed list loaded into a JOBDIR or a Redis crawl.

Text, gzip (told by its bytes) and CSV files go through the crawl's seen set: a second load
queues nothing, a load stopped midway and run again queues each URL once, and a real crawl
then fetches every seeded URL exactly once, with the callback the load named (the site's
request log and the spider's items are the judges). The load's memory does not grow with
the number of URLs.
"""

from __future__ import annotations

import argparse
import array
import bz2
import fcntl
import gzip
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import termios
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from frontier_testweb.crawl import run_crawl
from scrapy_frontier.backends.sqlite.lock import is_locked
from scrapy_frontier.backends.sqlite.seen import SQLiteFingerprintStore
from scrapy_frontier.codec import saved_url
from scrapy_frontier.commands import seed as seed_module
from scrapy_frontier.commands.seed import LoadTally, seed
from scrapy_frontier.errors import CommandInterrupted, FrontierCommandError
from tests.commands.test_operating import SCRAPY, Backend, as_json
from tests.redis_server import RedisServer
from tests.styles_site import StyleSite

ROOT = Path(__file__).resolve().parents[2]
KEY = "a-signing-key-of-the-seed-tests-0123"
#: Spiders found by the command, as a project's SPIDER_MODULES.
CHECKED = "tests.commands.checked_spiders"
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
    if not (job / "frontier.sqlite").exists():
        return 0
    db = sqlite3.connect(job / "frontier.sqlite")
    try:
        return int(db.execute("SELECT COUNT(*) FROM front").fetchone()[0])
    finally:
        db.close()


def _settings(backend: str, tmp: Path, redis_server: RedisServer, prefix: str) -> Settings:
    if backend == "sqlite":
        return Settings({"JOBDIR": str(tmp / "job")})
    return Settings({"FRONTIER_BACKEND": "redis", "REDIS_URL": redis_server.url,
                     "FRONTIER_REDIS_KEY": prefix, "FRONTIER_REDIS_SEEN_KEY": prefix + "seen:"})


def _total_queued(backend: str, tmp: Path, redis_server: RedisServer, prefix: str) -> int:
    if backend == "sqlite":
        return _queued_rows(tmp / "job")
    client = redis_server.client()
    try:
        count = client.hgetall(prefix + "count")
        return int(count.get(b"front", 0)) + int(count.get(b"back", 0))
    finally:
        client.close()


def _queued_urls(job: Path) -> Counter[str]:
    db = sqlite3.connect(job / "frontier.sqlite")
    try:
        return Counter(str(saved_url(data)) for data, in db.execute("SELECT data FROM front"))
    finally:
        db.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_load_stopped_midway_and_run_again_queues_each_url_once(
        backend: str, tmp_path: Path, redis_server: RedisServer, redis_prefix: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncated gzip download: given as a file it is read to its end first and refused
    whole; through a pipe (read once) the load stops where it breaks off, with every complete
    line before it committed, and loading the whole file then queues each URL once."""
    n = 12_000
    full, cut = tmp_path / "urls.gz", tmp_path / "cut.gz"
    _write_urls(full, n, packed=True)
    cut.write_bytes(full.read_bytes()[: len(full.read_bytes()) // 2])  # a truncated download
    complete = zlib.decompressobj(wbits=31).decompress(cut.read_bytes()).count(b"\n")
    assert 5_000 < complete < n
    settings = _settings(backend, tmp_path, redis_server, redis_prefix)
    with pytest.raises(FrontierCommandError, match="truncated or damaged.*Nothing was changed"):
        seed(str(cut), _opts(), settings, "seeded")
    assert not (tmp_path / "job").exists()
    assert _total_queued(backend, tmp_path, redis_server, redis_prefix) == 0

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(
        io.BytesIO(cut.read_bytes()))))
    with pytest.raises(FrontierCommandError, match="cannot be read to its end") as stopped:
        seed("-", _opts(), settings, "seeded")
    assert f"The {complete} entries before that point are committed ({complete} queued" \
        in str(stopped.value), stopped.value
    assert _total_queued(backend, tmp_path, redis_server, redis_prefix) == complete
    data, _ = seed(str(full), _opts(), settings, "seeded")
    assert data["read"] == n
    assert (data["queued"], data["already_seen"]) == (n - complete, complete), data
    again, _ = seed(str(full), _opts(), settings, "seeded")
    assert (again["queued"], again["already_seen"]) == (0, n)
    assert _total_queued(backend, tmp_path, redis_server, redis_prefix) == n


# -- Ctrl-C ----------------------------------------------------------------------------------


STOP_AT, ALL = 6_200, 8_000  # SQLite: one batch and 1 200 read; Redis: 12 batches and 200


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_ctrl_c_while_reading_commits_what_was_read_and_a_rerun_finishes_the_load(
        backend: str, tmp_path: Path, redis_server: RedisServer, redis_prefix: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT raised by the reader right after entry 6 200, mid-batch on both backends: the
    load commits the 6 200 read, says so, and raises the exit-130 error; the handler Python
    had is back; the same load again queues the rest, each URL once."""
    urls = tmp_path / "urls.txt"
    _write_urls(urls, ALL)
    settings = _settings(backend, tmp_path, redis_server, redis_prefix)
    real = seed_module.read_lines

    def interrupted(path: str, column: Any = None) -> Iterator[Any]:
        for line in real(path, column):
            yield line
            if line.number == STOP_AT:
                signal.raise_signal(signal.SIGINT)  # taken on the next bytecode, here

    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(seed_module, "read_lines", interrupted)
    with pytest.raises(CommandInterrupted) as stopped:
        seed(str(urls), _opts(), settings, "seeded")
    assert signal.getsignal(signal.SIGINT) is before
    assert stopped.value.exit_code == 130
    assert (f"stopped (Ctrl-C) after {STOP_AT} entries, all committed ({STOP_AT} queued, "
            "0 already seen, 0 invalid). Run the same command again") in str(stopped.value)
    assert _total_queued(backend, tmp_path, redis_server, redis_prefix) == STOP_AT
    monkeypatch.setattr(seed_module, "read_lines", real)
    data, _ = seed(str(urls), _opts(), settings, "seeded")
    assert (data["queued"], data["already_seen"]) == (ALL - STOP_AT, STOP_AT), data
    assert _total_queued(backend, tmp_path, redis_server, redis_prefix) == ALL
    if backend == "sqlite":
        assert _queued_urls(tmp_path / "job") == Counter(
            f"http://h{i % 500}.example/p/{i}" for i in range(ALL))


def test_ctrl_c_while_a_batch_is_written_waits_for_its_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT in the middle of the second batch's write (its queue rows committed, its
    fingerprints not yet): both files get the batch before the load stops, so the seen set
    covers the queue and nothing is left to catch up."""
    urls = tmp_path / "urls.txt"
    _write_urls(urls, 12_000)
    job = tmp_path / "job"
    real = SQLiteFingerprintStore.flush
    calls = Counter[str]()

    def interrupted(self: SQLiteFingerprintStore, covers: int | None = None) -> None:
        if covers is not None:
            calls["batch"] += 1
            if calls["batch"] == 2:
                signal.raise_signal(signal.SIGINT)
        real(self, covers)

    monkeypatch.setattr(SQLiteFingerprintStore, "flush", interrupted)
    with pytest.raises(CommandInterrupted, match=r"after 10000 entries, all committed "
                                                 r"\(10000 queued"):
        seed(str(urls), _opts(), Settings({"JOBDIR": str(job)}), "seeded")
    assert calls["batch"] == 2
    monkeypatch.setattr(SQLiteFingerprintStore, "flush", real)
    assert _queued_rows(job) == 10_000
    db = sqlite3.connect(job / "frontier.sqlite")
    try:
        last = db.execute("SELECT MAX(id) FROM front").fetchone()[0]
    finally:
        db.close()
    with SQLiteFingerprintStore(job / "seen.sqlite") as seen:
        assert (len(seen), seen.covers) == (10_000, last)
    data, _ = seed(str(urls), _opts(), Settings({"JOBDIR": str(job)}), "seeded")
    assert (data["queued"], data["already_seen"]) == (2_000, 10_000), data


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def _unread(fd: int) -> int:
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_ctrl_c_on_the_command_line_stops_cleanly_and_the_same_command_resumes(
        tmp_path: Path) -> None:
    """``scrapy frontier seed -`` reads a pipe: 12 000 URLs are written to it and it is left
    open, so the reader blocks after the last of them (two batches committed, 2 000 URLs
    read since). Once the pipe is empty and the process sleeps in its read, SIGINT: no
    traceback, the count of what was loaded and how to resume on stderr, exit code 130.
    The same command with the whole list (15 000) then queues the other 3 000."""
    job = tmp_path / "job"
    command = [*SCRAPY, "frontier", "seed", "-", "--spider", "seeded", "-s", f"JOBDIR={job}"]
    urls = [f"http://h{i % 500}.example/p/{i}\n" for i in range(15_000)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        assert proc.stdin is not None
        proc.stdin.write("".join(urls[:12_000]).encode())
        proc.stdin.flush()  # returns once the reader has taken all but a pipe's buffer
        for _ in range(1200):  # bounded; a condition, not a time: the reader is waiting
            if _unread(proc.stdin.fileno()) == 0 and _state(proc.pid) == "S":
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("the command did not wait on its input")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert out == b"", out
    text = err.decode()
    assert "Traceback" not in text, text
    assert text.splitlines()[-1] == (
        "scrapy frontier: seed -: stopped (Ctrl-C) after 12000 entries, all committed "
        "(12000 queued, 0 already seen, 0 invalid). Run the same command again to load the "
        "rest: the URLs loaded so far are skipped as already seen, so none is queued "
        "twice."), text
    assert _queued_rows(job) == 12_000
    again = subprocess.run(command, input="".join(urls).encode(), capture_output=True,
                           cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.decode().startswith(
        "seed -: 15000 read, 3000 queued, 12000 already seen, 0 invalid\n"), again.stdout
    assert _queued_urls(job) == Counter(url.strip() for url in urls)


# -- bad input --------------------------------------------------------------------------------


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, dict[str, Any], str]]:
    """Files refused before anything is written: (path, options, the error's words)."""
    text = "".join(f"http://h{i}.example/p/{i}\n" for i in range(3_000)).encode()
    packed = gzip.compress(text)
    damaged = bytearray(packed)
    for i in range(len(damaged) // 2, len(damaged) // 2 + 64):
        damaged[i] ^= 0x55
    files: dict[str, tuple[bytes | None, dict[str, Any], str]] = {
        "missing": (None, {}, "cannot read the seed file .*FileNotFoundError"),
        "binary": (bytes(range(256)) * 64, {}, "is not text: .* NUL byte"),
        "utf-16": ("http://a.example/\n".encode("utf-16"), {}, "is not text: .*UTF-16"),
        "bzip2": (bz2.compress(text), {}, "is compressed with bzip2: only gzip"),
        "truncated gzip": (packed[: len(packed) * 2 // 3], {}, "gzip, truncated or damaged"),
        "damaged gzip": (bytes(damaged), {}, "gzip, truncated or damaged"),
        "gzip of a binary": (gzip.compress(bytes(range(256)) * 64), {}, "is not text"),
        "csv without the column": (b"id,link\n1,http://a.example/\n", {"column": "url"},
                                   "the CSV header has no column 'url' .*'id', 'link'"),
    }
    out = {}
    for name, (data, opts, error) in files.items():
        path = tmp / name.replace(" ", "-")
        if data is not None:
            path.write_bytes(data)
        out[name] = (path, opts, error)
    return out


@pytest.mark.parametrize("case", ["missing", "directory", "binary", "utf-16", "bzip2",
                                  "truncated gzip", "damaged gzip", "gzip of a binary",
                                  "csv without the column"])
def test_a_file_that_cannot_be_loaded_is_refused_before_anything_is_written(
        case: str, tmp_path: Path) -> None:
    cases = _bad_inputs(tmp_path)
    cases["directory"] = (tmp_path, {}, "cannot read the seed file .*IsADirectoryError")
    path, opts, error = cases[case]
    job = tmp_path / "job"
    with pytest.raises(FrontierCommandError, match=error) as refused:
        seed(str(path), _opts(**opts), Settings({"JOBDIR": str(job)}), "seeded")
    assert "Nothing was changed" in str(refused.value)
    assert not job.exists()


def test_entries_that_are_not_urls_of_the_spiders_domains_are_counted_and_skipped(
        tmp_path: Path) -> None:
    """Inside the project, the spider's allowed_domains (Scrapy's offsite rule: subdomains
    pass) skip the other hosts, counted as offsite; entries that are not http(s) URLs, or not
    UTF-8, are counted invalid. Outside it, a warning says the domains were not checked."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_bytes(b"\n".join([
        b"http://example.com/a", b"https://www.example.com/b", b"http://example.org/c",
        b"http://notexample.com/d", b"ftp://example.com/e", b"mailto:desk@example.com",
        b"http://example.com/\xff\xfe", b"javascript:alert(1)", b"http://127.0.3.1/f",
    ]) + b"\n")
    job = tmp_path / "job"
    project = Settings({"JOBDIR": str(job), "SPIDER_MODULES": [CHECKED]})
    data, text = seed(str(seeds), _opts(), project, "scoped")
    assert {k: data[k] for k in ("read", "queued", "already_seen", "invalid", "offsite",
                                 "refused")} == {
        "read": 9, "queued": 3, "already_seen": 0, "invalid": 4, "offsite": 2, "refused": 0}
    assert [bad["line"] for bad in data["invalid_lines"]] == [5, 6, 7, 8]
    assert data["warnings"] == []
    assert text.splitlines()[0] == (f"seed {seeds}: 9 read, 3 queued, 0 already seen, "
                                    "4 invalid, 2 offsite (not in allowed_domains)")
    assert sorted(_queued_urls(job)) == [
        "http://127.0.3.1/f", "http://example.com/a", "https://www.example.com/b"]
    with SQLiteFingerprintStore(job / "seen.sqlite") as seen:
        assert len(seen) == 3  # the skipped URLs are not marked seen

    outside = Settings({"JOBDIR": str(tmp_path / "elsewhere")})
    data, text = seed(str(seeds), _opts(), outside, "scoped")
    assert (data["queued"], data["offsite"]) == (5, 0), data
    assert data["warnings"] == [
        "spider scoped is not in this project: its allowed_domains not checked (run the "
        "command in the spider's project to check them). The crawl drops a URL its "
        "allowed_domains refuse, and cannot rebuild a seed that names a method its spider "
        "lacks."]


def test_a_seed_without_a_callback_needs_a_parse_method_of_the_spiders(
        tmp_path: Path) -> None:
    """Without --callback a seed's response goes to the spider's parse: a spider that
    has none of its own (Scrapy's raises NotImplementedError) is refused; a CrawlSpider's
    rules take it."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://127.0.3.1/a\n")

    def project(job: str) -> Settings:
        return Settings({"JOBDIR": str(tmp_path / job), "SPIDER_MODULES": [CHECKED]})

    with pytest.raises(FrontierCommandError, match="'unparsed' .* has no parse method of its "
                                                   "own.*--callback NAME. Nothing was"):
        seed(str(seeds), _opts(), project("job"), "unparsed")
    assert not (tmp_path / "job").exists()
    data, _ = seed(str(seeds), _opts(callback="parse_article"), project("job"), "unparsed")
    assert (data["queued"], data["warnings"]) == (1, []), data
    data, _ = seed(str(seeds), _opts(), project("crawl-spider"), "rules")
    assert (data["queued"], data["warnings"]) == (1, []), data


def test_a_jobdir_others_may_write_is_refused(tmp_path: Path) -> None:
    """The crawl refuses to open such a directory, so seeds loaded there would never be
    fetched: the load refuses it too, before writing anything."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://127.0.3.1/a\n")
    job = tmp_path / "job"
    job.mkdir()
    job.chmod(0o777)
    with pytest.raises(FrontierCommandError, match="may be written by others.*Nothing was "
                                                   "changed"):
        seed(str(seeds), _opts(), Settings({"JOBDIR": str(job)}), "seeded")
    assert list(job.iterdir()) == []


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


def _sampled_load(backend: str, n: int, tmp: Path, redis_server: RedisServer, prefix: str,
                  monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Load ``n`` URLs; (URLs read, Python's live blocks, RSS) after each batch."""
    urls = tmp / "urls.txt"
    _write_urls(urls, n)
    samples: list[tuple[int, int, int]] = []
    counted = LoadTally.add

    def sampled(self: LoadTally, outcomes: Any) -> None:
        counted(self, outcomes)
        samples.append((self.read, sys.getallocatedblocks(), _rss()))

    monkeypatch.setattr(LoadTally, "add", sampled)
    data, _ = seed(str(urls), _opts(), _settings(backend, tmp, redis_server, prefix), "seeded")
    assert data["queued"] == n
    return samples


def _blocks_after(samples: list[tuple[int, int, int]], warm_at: int) -> int:
    warm = next(s for s in samples if s[0] >= warm_at)  # caches, scripts, imports: warm
    return max(s[1] for s in samples if s[0] >= warm[0]) - warm[1]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_live_memory_does_not_grow_on_a_short_load(
        backend: str, tmp_path: Path, redis_server: RedisServer, redis_prefix: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick form of the test below: 40 000 URLs, Python's live blocks only. A load
    that kept one object per URL would add 20 000 after the first 20 000 URLs."""
    samples = _sampled_load(backend, 40_000, tmp_path, redis_server, redis_prefix,
                            monkeypatch)
    assert _blocks_after(samples, 20_000) <= 5_000, samples


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"])  # Redis: the 40 000-URL form above
def test_memory_does_not_grow_with_the_number_of_urls(
        backend: str, tmp_path: Path, redis_server: RedisServer, redis_prefix: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's live memory blocks (``sys.getallocatedblocks``) and the process's RSS,
    sampled after every batch of a load of 200 000 URLs (100 000 on Redis): one batch at
    a time, so they stay flat. A load that kept one object per URL would add 180 000
    blocks after the first 20 000 URLs; one that kept 100 bytes per URL, 10 MB of RSS
    over the second half. About 11 s each: slow (the test above is the quick check)."""
    n = 200_000 if backend == "sqlite" else 100_000
    samples = _sampled_load(backend, n, tmp_path, redis_server, redis_prefix, monkeypatch)
    warm = next(s for s in samples if s[0] >= 20_000)
    half = next(s for s in samples if s[0] >= n // 2)
    blocks = _blocks_after(samples, 20_000)
    rss = max(s[2] for s in samples if s[0] >= half[0]) - half[2]
    print(f"\n{backend}, {n} URLs: blocks {warm[1]} at {warm[0]} URLs, at most +{blocks} "
          f"after; RSS {half[2] / 1e6:.1f} MB at {half[0]} URLs, at most +{rss / 1e6:.1f} MB "
          f"after (end {samples[-1][2] / 1e6:.1f} MB)")
    assert blocks <= 5_000, samples[::10]
    # SQLite's page caches are bounded (8 MiB for the queue, 2 MiB for the seen set), and
    # full well before half of the load.
    assert rss <= 8 * 1024 * 1024, samples[::10]
