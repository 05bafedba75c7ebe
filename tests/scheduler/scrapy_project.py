"""A small Scrapy project on disk, crawled with a real ``scrapy crawl`` in a fresh process.

What a user's shell, cron or CI sees: the exit code and the output (stdout and stderr
together, in order).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A spider of one page that needs no network.
ONE_PAGE = textwrap.dedent("""
    import scrapy

    class One(scrapy.Spider):
        name = "one"
        start_urls = ["data:,a"]

        def parse(self, response):
            pass
""")


@dataclass
class Crawl:
    returncode: int
    output: str

    @property
    def lines(self) -> list[str]:
        return self.output.rstrip().splitlines()

    @property
    def errors(self) -> list[str]:
        """The log's ERROR lines."""
        return [line for line in self.lines if "] ERROR: " in line]

    @property
    def finish_reason(self) -> str | None:
        found = re.findall(r"'finish_reason': '([^']*)'", self.output)
        return found[-1] if found else None


def make_project(root: Path, spiders: dict[str, str] | None = None) -> Path:
    """A project in ``root`` with the frontier's add-on and the given spider modules
    (module name: source); the one-page spider ``one`` by default."""
    spiders_dir = root / "proj" / "spiders"
    spiders_dir.mkdir(parents=True, exist_ok=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (root / "proj" / "__init__.py").write_text("")
    (root / "proj" / "settings.py").write_text(
        'SPIDER_MODULES = ["proj.spiders"]\nADDONS = {"scrapy_frontier.Addon": 0}\n'
        "TELNETCONSOLE_ENABLED = False\n")
    (spiders_dir / "__init__.py").write_text("")
    for name, source in (spiders or {"one": ONE_PAGE}).items():
        (spiders_dir / f"{name}.py").write_text(source)
    return root


def crawl_command(spider: str, *settings: str) -> list[str]:
    args = [sys.executable, "-m", "scrapy", "crawl", spider]
    for setting in settings:
        args += ["-s", setting]
    return args


def scrapy_crawl(project: Path, spider: str, *settings: str,
                 env: dict[str, str] | None = None, timeout: float = 120) -> Crawl:
    """``scrapy crawl SPIDER -s ...`` in ``project``; waits for it to end."""
    done = subprocess.run(crawl_command(spider, *settings), cwd=project,
                          env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    return Crawl(done.returncode, done.stdout)


def start_crawl(project: Path, spider: str, *settings: str,
                env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The same crawl, left running."""
    return subprocess.Popen(crawl_command(spider, *settings), cwd=project,
                            env=_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _env(extra: dict[str, str] | None) -> dict[str, Any]:
    return {**os.environ, **(extra or {})}
