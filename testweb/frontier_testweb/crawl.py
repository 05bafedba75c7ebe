"""Crawl the test web with real Scrapy, each side in its own process.

The server and the crawler run as separate processes so that on a 2-core
machine they do not compete for one core, and so that a crawl can be killed
(SIGKILL) without losing the server's log. Used by the crawl tests, the
benchmarks and ``python -m frontier_testweb.crawl``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Settings every test-web crawl starts from; the caller's settings win.
BASE_SETTINGS: dict[str, Any] = {
    "LOG_LEVEL": "INFO",
    "ROBOTSTXT_OBEY": False,
    "TELNETCONSOLE_ENABLED": False,
    "REMOTE_CONTROL_ENABLED": False,
    "COOKIES_ENABLED": False,
    "RETRY_ENABLED": False,
    "USER_AGENT": "scrapy-frontier-testweb",
    "CONCURRENT_REQUESTS": 16,
    "DOWNLOAD_TIMEOUT": 30,
}

FRONTIER_ADDON = {"scrapy_frontier.Addon": 0}


@dataclass
class CrawlResult:
    returncode: int
    elapsed: float
    stats: dict[str, Any] = field(default_factory=dict)
    output: str = ""


def run_crawl(
    start_urls: Sequence[str],
    settings: dict[str, Any],
    *,
    allowed_domains: Sequence[str] = (),
    timeout: float = 300.0,
    workdir: Path | None = None,
    kill_after: float | None = None,
    cwd: Path | None = None,
    file_size_limit: int | None = None,
    pause_every: int = 0,
    pause_seconds: float = 0.0,
    pause_log: Path | None = None,
    stay_open_until: Path | None = None,
    fs_error: dict[str, Any] | None = None,
    items: bool = False,
    self_kill: dict[str, Any] | None = None,
    profile: Path | None = None,
) -> CrawlResult:
    """Crawl ``start_urls`` in a fresh process; follow every link found.

    Serve the web with :class:`~frontier_testweb.ServerProcess` and
    pass its ``allowed_domains`` so that doc-tree hosts' external links are
    not followed.

    ``kill_after`` SIGKILLs the crawl after that many seconds (crash tests).
    ``file_size_limit`` makes every write past that many bytes in one file fail, as on a
    full disk (fault tests).
    ``pause_every`` N > 0 makes the callback block the reactor for ``pause_seconds`` on every
    N-th page (heavy parsing, a synchronous pipeline); each pause's (start, end) on the
    monotonic clock is appended to ``pause_log`` as a JSON line.
    ``stay_open_until`` keeps the idle spider open until that file exists (at most two
    minutes): a test acts on a running crawl for as long as it needs, then lets it end.
    ``fs_error`` ``{"pages": N, "trigger": path, "sync": [paths]}``: after the N-th page
    is parsed, fsync the ``sync`` files (as if the kernel had just written them back) and
    write ``1`` to ``trigger`` (ext4's ``trigger_fs_error``): the file system fails there.
    ``items``: the spider yields one item per page (``{"url", "status", "links"}``), and an
    item pipeline holds each item for 1 to 20 ms (a database write) before passing it on.
    ``self_kill`` ``{"after": s, "report": path}``: ``s`` seconds after the spider opened,
    the crawl writes what was in flight (:func:`_in_flight_now`) to ``report`` as JSON, then
    SIGKILLs itself: a kill at a known moment, with its in-flight requests known.
    ``profile``: run the crawl under cProfile, every thread timed by its own CPU clock
    (:class:`ThreadProfiles`), and write the merged stats there (``pstats`` format).

    The stats also hold the crawl process's own ``harness/cpu_s`` (user + system seconds)
    and ``harness/maxrss_kb`` (peak resident set), read as the crawl ends, and
    ``harness/startup_cpu_s``, the CPU seconds it had used before the crawler was made (the
    interpreter's start, Scrapy's imports; the crawler's components load after).
    """
    tmp = Path(workdir or tempfile.mkdtemp(prefix="frontier-crawl-"))
    tmp.mkdir(parents=True, exist_ok=True)
    spec = tmp / "crawl.json"
    out = tmp / "result.json"
    spec.write_text(
        json.dumps(
            {
                "start_urls": list(start_urls),
                "allowed_domains": list(allowed_domains),
                "settings": {**BASE_SETTINGS, **settings},
                "file_size_limit": file_size_limit,
                "pause_every": pause_every,
                "pause_seconds": pause_seconds,
                "pause_log": None if pause_log is None else str(pause_log),
                "stay_open_until": None if stay_open_until is None else str(stay_open_until),
                "fs_error": fs_error,
                "items": items,
                "self_kill": self_kill,
                "profile": None if profile is None else str(profile),
            }
        )
    )
    cmd = [sys.executable, "-m", "frontier_testweb.crawl", str(spec), str(out)]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd
    )
    try:
        output, _ = proc.communicate(timeout=kill_after if kill_after is not None else timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate(timeout=30)
    elapsed = time.monotonic() - started
    stats: dict[str, Any] = {}
    if out.exists():
        stats = json.loads(out.read_text())
    return CrawlResult(proc.returncode, elapsed, stats, output or "")


def _crawl_main(spec_path: str, out_path: str) -> int:
    """Inside the crawl process: run one spider over the given start URLs."""
    import scrapy
    from scrapy.crawler import CrawlerProcess

    spec = json.loads(Path(spec_path).read_text())
    start_urls: list[str] = spec["start_urls"]
    limit = spec.get("file_size_limit")
    if limit:
        # A full disk, as the crawl sees it: writes past ``limit`` bytes in any file fail
        # (EFBIG) instead of killing the process (SIGXFSZ ignored).
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))
    # Doc-tree hosts link to the real web: stay on loopback.
    domains: list[str] = spec.get("allowed_domains") or []
    pause_every = int(spec.get("pause_every") or 0)
    pause_seconds = float(spec.get("pause_seconds") or 0.0)
    pause_log = spec.get("pause_log")
    parsed = [0]
    fs_error = spec.get("fs_error") or {}
    with_items = bool(spec.get("items"))

    def maybe_pause() -> None:
        parsed[0] += 1
        if fs_error and parsed[0] == fs_error["pages"]:
            _fail_file_system(fs_error["trigger"], fs_error.get("sync") or [])
        if pause_every <= 0 or parsed[0] % pause_every:
            return
        started = time.monotonic()
        time.sleep(pause_seconds)  # blocks the reactor on purpose
        if pause_log:
            with open(pause_log, "a", encoding="utf-8") as f:
                f.write(json.dumps([started, time.monotonic()]) + "\n")

    class TestWebSpider(scrapy.Spider):
        name = "testweb"
        allowed_domains = domains
        start_urls = spec["start_urls"]

        async def start(self) -> Any:
            if spec.get("default_start"):
                # Scrapy's own start(): start_urls as Request(url, dont_filter=True).
                async for request in super().start():
                    yield request
                return
            for url in start_urls:
                yield scrapy.Request(url)

        def parse(self, response: Any) -> Any:
            maybe_pause()
            if not hasattr(response, "css"):
                return
            links = 0
            for href in response.css("a::attr(href)").getall():
                # Real documentation links mailto: and javascript: too: Request refuses
                # those, and the error would lose the rest of the page's links.
                url = response.urljoin(href)
                if url.startswith(("http://", "https://")):
                    links += 1
                    yield scrapy.Request(url, callback=self.parse)
            if with_items:
                yield {"url": response.url, "status": response.status, "links": links}

    spider_cls: Any = TestWebSpider
    redis_key = spec.get("redis_key")
    if redis_key:
        # scrapy-redis's RedisSpider: start URLs come from a Redis list, not from start().
        from scrapy_redis.spiders import RedisSpider

        class TestWebRedisSpider(RedisSpider):  # type: ignore[misc]
            name = "testweb"
            allowed_domains = domains

            def parse(self, response: Any) -> Any:
                return TestWebSpider.parse(self, response)  # type: ignore[arg-type]

        TestWebRedisSpider.redis_key = redis_key
        spider_cls = TestWebRedisSpider

    settings = spec["settings"]
    if with_items:
        settings = {**settings, "ITEM_PIPELINES": {
            **settings.get("ITEM_PIPELINES", {}), "frontier_testweb.crawl.HeldItems": 300}}
    # Before the crawler loads its components (the add-on and the modules it imports).
    before = resource.getrusage(resource.RUSAGE_SELF)
    process = CrawlerProcess(settings=settings, install_root_handler=True)
    crawler = process.create_crawler(spider_cls)
    self_kill = spec.get("self_kill")
    if self_kill:
        _kill_self_after(crawler, float(self_kill["after"]), Path(self_kill["report"]))
    mark_at = int(spec.get("mark_at") or 0)
    if mark_at:
        _mark_request(crawler, mark_at, Path(spec["marker"]), freeze=bool(spec.get("freeze")))
    freeze_ahead = spec.get("freeze_claimed_ahead")
    if freeze_ahead:
        _freeze_holding_claims_ahead(crawler, Path(spec["marker"]), after=int(freeze_ahead))
    stay_open_until = spec.get("stay_open_until")
    if stay_open_until:
        _stay_open_until(crawler, Path(stay_open_until), timeout=120.0)
    wait_for = spec.get("wait_for")
    if wait_for:
        _wait_for_file(Path(wait_for), timeout=float(spec.get("wait_timeout") or 120.0))
    _raise_fd_limit()
    process.crawl(crawler)
    started = time.monotonic()
    profile = spec.get("profile")
    if profile:
        profiles = ThreadProfiles()
        profiles.start()
        try:
            process.start()
        finally:
            profiles.dump(Path(profile))
    else:
        process.start()
    stats = dict(crawler.stats.get_stats()) if crawler.stats else {}
    stats["harness/elapsed"] = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    stats["harness/cpu_s"] = usage.ru_utime + usage.ru_stime
    stats["harness/startup_cpu_s"] = before.ru_utime + before.ru_stime
    stats["harness/maxrss_kb"] = usage.ru_maxrss  # kilobytes on Linux
    # On the server log's clock (CLOCK_MONOTONIC, shared by the machine's processes).
    stats["harness/ended_at"] = time.monotonic()
    Path(out_path).write_text(json.dumps(stats, default=str))
    return 0


def _raise_fd_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: a broad crawl keeps a connection open to
    each host it contacted lately."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class ThreadProfiles:
    """cProfile on this thread and on every thread started after :meth:`start`, each timed
    by its own CPU clock (``time.thread_time``): no function is charged for time spent
    waiting, or for another thread's work; :meth:`dump` merges them into one stats file."""

    def __init__(self) -> None:
        import cProfile

        self._profile = cProfile.Profile
        self.profilers: list[Any] = []

    def start(self) -> None:
        import threading

        self._enable()
        threading.setprofile(self._boot)

    def _enable(self) -> None:
        profiler = self._profile(time.thread_time)
        self.profilers.append(profiler)
        profiler.enable()

    def _boot(self, frame: Any, event: str, arg: Any) -> None:
        # A new thread's first profile event: its own profiler takes over from this hook.
        self._enable()

    def dump(self, path: Path) -> None:
        import pstats
        import threading

        threading.setprofile(None)  # type: ignore[arg-type]
        first, *others = self.profilers
        first.disable()
        stats = pstats.Stats(first)
        for profiler in others:
            stats.add(profiler)
        stats.dump_stats(str(path))


class HeldItems:
    """An item pipeline that holds each item 1 to 20 ms, as a database write would."""

    def __init__(self) -> None:
        import random

        self.rng = random.Random()

    def process_item(self, item: Any, spider: Any = None) -> Any:
        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        return deferLater(reactor, self.rng.uniform(0.001, 0.02), lambda: item)


def _in_flight_now(crawler: Any) -> list[str]:
    """The URLs a kill now may fetch again: those the engine works on (downloading, or
    their response not done with), and those done with whose acknowledgement has not
    been written yet (the frontier's ledger, and on Redis the completions not sent)."""
    engine = crawler.engine
    slot = getattr(engine, "_slot", None)
    urls = [r.url for r in getattr(slot, "inprogress", ())]
    scheduler = getattr(engine, "scheduler", None) or getattr(slot, "scheduler", None)
    inflight = getattr(getattr(scheduler, "fetches", None), "inflight", None)
    urls += [f.request.url for f in getattr(inflight, "awaiting_ack", {}).values()]
    driver = getattr(getattr(scheduler, "backend", None), "driver", None)
    for rnd in (getattr(driver, "next", None), getattr(driver, "sending", None)):
        for completion in getattr(rnd, "completions", ()):
            from scrapy_frontier.codec import saved_url

            urls.append(saved_url(completion.lease.item[8:]) or "?")
    return urls


def _kill_self_after(crawler: Any, seconds: float, report: Path) -> None:
    import signal

    from scrapy import signals

    def kill() -> None:
        partial = report.with_suffix(".partial")
        partial.write_text(json.dumps({"in_flight": _in_flight_now(crawler)}))
        partial.replace(report)
        os.kill(os.getpid(), signal.SIGKILL)

    def opened(spider: Any) -> None:
        from twisted.internet import reactor

        reactor.callLater(seconds, kill)  # type: ignore[attr-defined,arg-type]

    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)


def _fail_file_system(trigger: str, sync: Sequence[str]) -> None:
    """Write back ``sync`` (those that exist), then make the file system fail."""
    for name in sync:
        try:
            fd = os.open(name, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    with open(trigger, "w", encoding="ascii") as f:
        f.write("1")
    print(f"harness: file system error triggered after syncing {list(sync)}", flush=True)


def _mark_request(crawler: Any, count: int, marker: Path, *, freeze: bool) -> None:
    """Write ``marker`` when the ``count``-th request reaches the downloader; with
    ``freeze``, then SIGSTOP this process.

    A test that waits for the marker knows the crawl is under way (and, frozen, that it
    holds that request's lease: the scheduler handed it out and the fetch has not ended),
    without racing it. The marker holds the request's URL and appears whole.
    """
    import signal

    from scrapy import signals

    seen = [0]

    def reached(request: Any, spider: Any) -> None:
        seen[0] += 1
        if seen[0] != count:
            return
        partial = marker.with_suffix(".partial")
        partial.write_text(request.url)
        partial.replace(marker)
        if freeze:
            os.kill(os.getpid(), signal.SIGSTOP)

    crawler.signals.connect(reached, signal=signals.request_reached_downloader, weak=False)


def _freeze_holding_claims_ahead(crawler: Any, marker: Path, *, after: int) -> None:
    """A Redis worker (``FRONTIER_BACKEND = "redis"``) stops itself (SIGSTOP) as an I/O round
    lands with requests claimed ahead of their hosts' ready times, once it has fetched
    ``after`` pages and holds no other lease: no fetch in flight, none waiting to complete.

    The marker, written first and whole, holds the leases it then holds (those of the round
    and any at hand before it) as JSON: ``[{"host", "ticket", "url", "ahead"}]``. Stopped
    there, the worker has not handed any of them out yet; continued (SIGCONT), it goes on
    from that very point. Reaches into the Redis driver's internals: a test hook only.
    """
    import signal

    from scrapy import signals

    from scrapy_frontier.codec import saved_url

    def opened(spider: Any) -> None:
        engine = crawler.engine
        scheduler = getattr(engine, "scheduler", None) or engine._slot.scheduler
        driver, queue = scheduler.backend.driver, scheduler.backend.queue
        landed_first = driver._round_done

        def landed(answer: Any) -> None:
            if (answer.not_before and not marker.exists() and queue.fetched >= after
                    and not queue.held and not queue.unacked
                    and not driver.next.completions):
                leases = [*queue.buffer, *answer.leases]
                held = [{"host": lease.host, "ticket": lease.ticket,
                         "url": saved_url(lease.item[8:]),
                         "ahead": lease.ticket in answer.not_before} for lease in leases]
                partial = marker.with_suffix(".partial")
                partial.write_text(json.dumps(held))
                partial.replace(marker)
                os.kill(os.getpid(), signal.SIGSTOP)
            landed_first(answer)

        driver._round_done = landed

    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)


def _stay_open_until(crawler: Any, path: Path, *, timeout: float) -> None:
    """Keep the spider open while idle until ``path`` exists (or ``timeout`` passed)."""
    from scrapy import signals
    from scrapy.exceptions import DontCloseSpider

    deadline = time.monotonic() + timeout

    def idle(spider: Any) -> None:
        if not path.exists() and time.monotonic() < deadline:
            raise DontCloseSpider

    crawler.signals.connect(idle, signal=signals.spider_idle, weak=False)


def _wait_for_file(path: Path, *, timeout: float) -> None:
    """Block until ``path`` exists (another worker's freeze marker), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {path} after {timeout:.0f} s")
        time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spec")
    parser.add_argument("out")
    args = parser.parse_args(argv)
    return _crawl_main(args.spec, args.out)


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
