"""A crawl that cannot start says why in one message, before Scrapy builds its engine.

Each case is a real ``scrapy crawl`` of a one-page spider of a small project, in a fresh
process: exit code 1, the message first (one ERROR line) and last (the end of the short
traceback that Scrapy prints; older Scrapy and Twisted print it twice), and none of the
engine's own failures after it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
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
    tmp_path.mkdir(parents=True, exist_ok=True)
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


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on a read-only file system (a tmpfs mounted ro): needs root."""
    target = tmp_path / "ro"
    target.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only file system needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


@pytest.mark.parametrize("where", ["a file", "read-only"])
def test_a_state_directory_that_cannot_be_written_is_refused_by_name(
        tmp_path: Path, where: str, request: pytest.FixtureRequest) -> None:
    if where == "a file":
        (tmp_path / "state").write_text("not a directory")
        jobdir, problem = tmp_path / "state" / "job", "is not a directory"
    else:
        jobdir = request.getfixturevalue("read_only_dir") / "job"
        problem = "is on a read-only file system"
    result = _crawl(tmp_path / "project", f"JOBDIR={jobdir}")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert f"JOBDIR = {str(jobdir)!r} cannot be used" in output and problem in output, \
        output[-3000:]
    assert "Nothing was created" in output
    assert "OSError" not in output and "Spider opened" not in output, output[-3000:]
    assert not jobdir.exists()
