"""A plain ``pip install scrapy-frontier`` (no extras): the command line, memory and SQLite
crawls work, and a feature whose extra is missing names the extra.

Each case runs in a fresh interpreter in which the optional packages cannot be imported
(``sys.modules[name] = None`` makes every import of them fail), as on a machine that never
installed them. .ci/run also installs the package alone into a new venv and runs README's
first command there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

OPTIONAL = ("redis", "scrapy_redis", "prometheus_client")

PRELUDE = textwrap.dedent(f"""
    import sys
    for name in {OPTIONAL!r}:
        sys.modules[name] = None
""")


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_the_blocker_blocks(tmp_path: Path) -> None:
    result = _run("import redis", tmp_path)
    assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr


@pytest.mark.parametrize("argv", [["version"], ["frontier", "-h"],
                                  ["settings", "--get", "BOT_NAME"]])
def test_the_scrapy_command_line_works(tmp_path: Path, argv: list[str]) -> None:
    result = _run(f"""
        from scrapy.cmdline import execute
        execute(["scrapy", *{argv!r}])
    """, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "No module named" not in result.stderr


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_memory_and_sqlite_crawls_work(tmp_path: Path, backend: str) -> None:
    jobdir = tmp_path / "job"
    result = _run(f"""
        import json, scrapy
        from scrapy.crawler import CrawlerProcess

        class S(scrapy.Spider):
            name = "plain"
            async def start(self):
                for i in range(5):
                    yield scrapy.Request(f"data:,page{{i}}")
            def parse(self, response):
                yield {{"body": response.text}}

        settings = {{"ADDONS": {{"scrapy_frontier.Addon": 0}}, "LOG_LEVEL": "WARNING",
                    "FRONTIER_BACKEND": {backend!r}, "TELNETCONSOLE_ENABLED": False}}
        if {backend!r} == "sqlite":
            settings["JOBDIR"] = {str(jobdir)!r}
        process = CrawlerProcess(settings=settings)
        crawler = process.create_crawler(S)
        process.crawl(crawler)
        process.start()
        stats = crawler.stats.get_stats()
        print(json.dumps({{"items": stats.get("item_scraped_count"),
                          "reason": stats.get("finish_reason")}}))
        assert "redis" not in sys.modules or sys.modules["redis"] is None
    """, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert '{"items": 5, "reason": "finished"}' in result.stdout, result.stdout
    if backend == "sqlite":
        assert (jobdir / "frontier.sqlite").exists()


@pytest.mark.parametrize(("setting", "extra"), [
    ('"FRONTIER_BACKEND": "redis"', "scrapy-frontier[redis]"),
    ('"FRONTIER_METRICS_PORT": 1, "FRONTIER_METRICS_HOST": "127.0.0.1"',
     "scrapy-frontier[metrics]"),
])
def test_a_missing_extra_is_named(tmp_path: Path, setting: str, extra: str) -> None:
    result = _run(f"""
        import scrapy
        from scrapy.crawler import CrawlerProcess

        class S(scrapy.Spider):
            name = "plain"
            start_urls = ["data:,a"]
            def parse(self, response):
                pass

        process = CrawlerProcess(settings={{"ADDONS": {{"scrapy_frontier.Addon": 0}},
                                           "TELNETCONSOLE_ENABLED": False, {setting}}})
        process.crawl(S)
        process.start()
    """, tmp_path)
    assert f"pip install '{extra}'" in result.stdout + result.stderr, result.stderr[-3000:]


def test_numpy_is_imported_only_by_the_first_simhash(tmp_path: Path) -> None:
    result = _run("""
        import scrapy_frontier, scrapy_frontier.scheduler, scrapy_frontier.spidermiddlewares
        import scrapy_frontier.core.recrawl
        assert "numpy" not in sys.modules, "imported with the package"
        from scrapy_frontier.core.simhash import simhash
        simhash("one two three four")
        assert "numpy" in sys.modules
    """, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize(("mode", "imported"), [("off", False), ("due", True)])
def test_numpy_comes_with_the_page_history_only(tmp_path: Path, mode: str,
                                                imported: bool) -> None:
    """A crawl with a JOBDIR keeps a page history unless FRONTIER_RECRAWL is off; only
    that history's simhash imports numpy."""
    result = _run(f"""
        import http.server, json, threading, scrapy
        from scrapy.crawler import CrawlerProcess

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b"<html><body><p>one two three four five</p></body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]

        class S(scrapy.Spider):
            name = "plain"
            start_urls = [f"http://127.0.0.1:{{port}}/{{i}}" for i in range(3)]
            def parse(self, response):
                yield {{"url": response.url}}

        process = CrawlerProcess(settings={{"ADDONS": {{"scrapy_frontier.Addon": 0}},
                                           "LOG_LEVEL": "WARNING", "FRONTIER_RECRAWL": {mode!r},
                                           "FRONTIER_MIN_DELAY": 0, "ROBOTSTXT_OBEY": False,
                                           "JOBDIR": {str(tmp_path / "job")!r},
                                           "TELNETCONSOLE_ENABLED": False}})
        crawler = process.create_crawler(S)
        process.crawl(crawler)
        process.start()
        stats = crawler.stats.get_stats()
        print(json.dumps({{"items": stats.get("item_scraped_count"),
                          "numpy": "numpy" in sys.modules}}))
    """, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = '{"items": 3, "numpy": ' + ("true" if imported else "false") + "}"
    assert expected in result.stdout, result.stdout + result.stderr[-2000:]
