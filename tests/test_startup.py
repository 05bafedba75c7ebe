"""A crawl that cannot start says why in one message, before Scrapy builds its engine.

Each case is a real ``scrapy crawl`` of a one-page spider of a small project, in a fresh
process: exit code 1, the message first (one ERROR line) and last (the end of the short
traceback that Scrapy prints; older Scrapy and Twisted print it twice), and none of the
engine's own failures after it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.redis_server import free_port

SPIDER = textwrap.dedent("""
    import scrapy

    class One(scrapy.Spider):
        name = "one"
        start_urls = ["data:,a"]

        def parse(self, response):
            pass
""")


def _crawl(tmp_path: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    spiders = tmp_path / "proj" / "spiders"
    spiders.mkdir(parents=True)
    (tmp_path / "proj" / "__init__.py").write_text("")
    (tmp_path / "proj" / "settings.py").write_text(
        'SPIDER_MODULES = ["proj.spiders"]\nADDONS = {"scrapy_frontier.Addon": 0}\n'
        "TELNETCONSOLE_ENABLED = False\n")
    (spiders / "__init__.py").write_text("")
    (spiders / "one.py").write_text(SPIDER)
    args: list[str] = []
    for setting in settings:
        args += ["-s", setting]
    return subprocess.run([sys.executable, "-m", "scrapy", "crawl", "one", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("setting", "message"), [
    ("FRONTIER_MIN_DELAY=-1", "FRONTIER_MIN_DELAY must be >= 0.0, got -1.0"),
    ("FRONTIER_BACKEND=sqlite", "FRONTIER_BACKEND='sqlite'"),
    ("FRONTIER_BACKEND=nosuch.Driver", "FRONTIER_BACKEND='nosuch.Driver' cannot be imported"),
])
def test_a_bad_setting_stops_before_the_engine(tmp_path: Path, setting: str,
                                               message: str) -> None:
    result = _crawl(tmp_path, setting)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    errors = [line for line in output.splitlines() if "] ERROR:" in line]
    assert errors and "scrapy-frontier cannot start: " + message in errors[0], output[-3000:]
    assert output.count("Traceback") <= 2, output[-3000:]
    assert "slot not assigned" not in output and "Spider opened" not in output
    assert message in output.rstrip().splitlines()[-1], output[-3000:]


def test_a_redis_that_does_not_answer_names_redis_url(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    result = _crawl(tmp_path, "FRONTIER_BACKEND=redis", f"REDIS_URL=redis://127.0.0.1:{port}/0")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert f"Redis at 127.0.0.1:{port}/0 did not answer" in output
    assert "REDIS_URL" in output
    assert output.count("Traceback") <= 2, output[-3000:]
    assert "Spider opened" not in output
