"""Crawl the test web with real Scrapy, each side in its own process.

The server and the crawler run as separate processes so that on a 2-core
machine they do not compete for one core, and so that a crawl can be killed
(SIGKILL) without losing the server's log. Used by the crawl tests, the
benchmarks and ``python -m scrapy_frontier.testweb.crawl``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Settings every test-web crawl starts from; the caller's settings win.
BASE_SETTINGS: dict[str, Any] = {
    "LOG_LEVEL": "INFO",
    "ROBOTSTXT_OBEY": False,
    "TELNETCONSOLE_ENABLED": False,
    "COOKIES_ENABLED": False,
    "RETRY_ENABLED": False,
    "USER_AGENT": "scrapy-frontier-testweb",
    "CONCURRENT_REQUESTS": 16,
    "DOWNLOAD_TIMEOUT": 30,
}

FRONTIER_ADDON = {"scrapy_frontier.Addon": 0}


@dataclass
class ServedWeb:
    start_urls: list[str]
    expected: set[tuple[str, str]]
    log_path: Path
    process: subprocess.Popen[str]


@dataclass
class CrawlResult:
    returncode: int
    elapsed: float
    stats: dict[str, Any] = field(default_factory=dict)
    output: str = ""


@contextmanager
def serve(args: Sequence[str], log_path: Path, *, timeout: float = 60.0) -> Iterator[ServedWeb]:
    """Run ``python -m scrapy_frontier.testweb serve ARGS`` until the block ends."""
    cmd = [sys.executable, "-m", "scrapy_frontier.testweb", "serve", *args, "--log", str(log_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _read_line(proc, timeout)
        info = json.loads(line)
        yield ServedWeb(
            start_urls=list(info["start_urls"]),
            expected={(h, p) for h, p in info["expected"]},
            log_path=log_path,
            process=proc,
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"test web exited with {proc.returncode}: {err[-2000:]}")
        if sel.select(timeout=0.2):
            line = proc.stdout.readline()
            if line.strip():
                return line
    raise TimeoutError(f"test web did not start within {timeout} s")


def run_crawl(
    start_urls: Sequence[str],
    settings: dict[str, Any],
    *,
    timeout: float = 300.0,
    workdir: Path | None = None,
    kill_after: float | None = None,
    cwd: Path | None = None,
) -> CrawlResult:
    """Crawl ``start_urls`` in a fresh process; follow every link found.

    ``kill_after`` SIGKILLs the crawl after that many seconds (crash tests).
    """
    tmp = Path(workdir or tempfile.mkdtemp(prefix="frontier-crawl-"))
    tmp.mkdir(parents=True, exist_ok=True)
    spec = tmp / "crawl.json"
    out = tmp / "result.json"
    spec.write_text(
        json.dumps({"start_urls": list(start_urls), "settings": {**BASE_SETTINGS, **settings}})
    )
    cmd = [sys.executable, "-m", "scrapy_frontier.testweb.crawl", str(spec), str(out)]
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

    class TestWebSpider(scrapy.Spider):
        name = "testweb"

        async def start(self) -> Any:
            for url in start_urls:
                yield scrapy.Request(url)

        def parse(self, response: Any) -> Any:
            if not hasattr(response, "css"):
                return
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

    process = CrawlerProcess(settings=spec["settings"], install_root_handler=True)
    crawler = process.create_crawler(TestWebSpider)
    process.crawl(crawler)
    started = time.monotonic()
    process.start()
    stats = dict(crawler.stats.get_stats()) if crawler.stats else {}
    stats["harness/elapsed"] = time.monotonic() - started
    Path(out_path).write_text(json.dumps(stats, default=str))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spec")
    parser.add_argument("out")
    args = parser.parse_args(argv)
    return _crawl_main(args.spec, args.out)


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
