"""A crawl that cannot start says why in one line, and scripts see it fail.

Each case is a real ``scrapy crawl`` of a small project, in a fresh process: exit code 1,
one ERROR line naming the cause and what to do, and that line last -- no asyncio ("Task
exception was never retrieved") or Twisted ("Unhandled error in Deferred") traceback after
it, nor Scrapy's own failures ("Engine slot not assigned") in its place. Errors found by
the add-on stop the crawl before Scrapy builds its engine; the others (a job directory in
use, the scheduler without the add-on, a metrics extra missing) once the engine opens.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapy_frontier.errors import FrontierConfigError
from scrapy_frontier.scheduler import startup
from tests.redis_server import free_port
from tests.scheduler.scrapy_project import ONE_PAGE, Crawl, make_project, scrapy_crawl, start_crawl

#: Without the add-on: the scheduler finds the error when the engine builds it.
NO_ADDON = ("ADDONS={}", "SCHEDULER=scrapy_frontier.FrontierScheduler")


def assert_one_clean_error(crawl: Crawl, message: str) -> None:
    """Exit code 1; one ERROR line, naming ``message``, and nothing after it."""
    shown = crawl.output[-4000:]
    assert crawl.returncode == 1, shown
    assert len(crawl.errors) == 1, shown
    assert "scrapy-frontier cannot start: " in crawl.errors[0] and message in crawl.errors[0], \
        shown
    for noise in ("Traceback", "Task exception was never retrieved",
                  "Unhandled error in Deferred", "slot not assigned"):
        assert noise not in crawl.output, shown
    assert message in crawl.lines[-1], shown


@pytest.mark.parametrize("addon", [True, False], ids=["addon", "scheduler"])
@pytest.mark.parametrize(("setting", "message"), [
    ("FRONTIER_MIN_DELAY=-1", "FRONTIER_MIN_DELAY must be >= 0.0, got -1.0"),
    ("FRONTIER_DELAY_FACTOR=-1", "FRONTIER_DELAY_FACTOR must be >= 0.0, got -1.0"),
    ("FRONTIER_BACKEND=sqlite", "FRONTIER_BACKEND='sqlite'"),
    ("FRONTIER_BACKEND=nosuch.Driver", "FRONTIER_BACKEND='nosuch.Driver' cannot be imported"),
])
def test_a_bad_setting_is_one_line_and_exit_code_1(tmp_path: Path, setting: str,
                                                    message: str, addon: bool) -> None:
    crawl = scrapy_crawl(make_project(tmp_path), "one", setting,
                         *(() if addon else NO_ADDON))
    assert_one_clean_error(crawl, message)
    assert ("Spider opened" in crawl.output) is not addon  # the add-on stops it sooner


def test_a_redis_that_does_not_answer_names_redis_url(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    crawl = scrapy_crawl(make_project(tmp_path), "one", "FRONTIER_BACKEND=redis",
                         f"REDIS_URL=redis://127.0.0.1:{port}/0")
    assert_one_clean_error(crawl, f"Redis at 127.0.0.1:{port}/0 did not answer")
    assert "REDIS_URL" in crawl.errors[0]
    assert "Spider opened" not in crawl.output


@pytest.mark.parametrize(("module", "settings", "message"), [
    ("redis", ["FRONTIER_BACKEND=redis"],
     "FRONTIER_BACKEND='redis' needs the 'redis' package"),
    ("prometheus_client", [f"FRONTIER_METRICS_PORT={free_port()}"],
     "FRONTIER_METRICS_PORT needs the 'prometheus_client' package"),
])
def test_a_missing_extra_is_named(tmp_path: Path, module: str, settings: list[str],
                                  message: str) -> None:
    project = make_project(tmp_path)
    # Found first on sys.path (the project's directory), as if the package were missing.
    (project / f"{module}.py").write_text(f"raise ImportError('No module named {module}')\n")
    crawl = scrapy_crawl(project, "one", *settings)
    assert_one_clean_error(crawl, message)
    assert "pip install 'scrapy-frontier[" in crawl.lines[-1]


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


@pytest.mark.parametrize(("setting", "where"), [
    ("JOBDIR", "a file"), ("JOBDIR", "read-only"), ("FRONTIER_PATH", "read-only"),
])
def test_a_state_directory_that_cannot_be_written_is_refused_by_name(
        tmp_path: Path, setting: str, where: str, request: pytest.FixtureRequest) -> None:
    if where == "a file":
        (tmp_path / "state").write_text("not a directory")
        state, problem = tmp_path / "state" / "job", "is not a directory"
    else:
        state = request.getfixturevalue("read_only_dir") / "job"
        problem = "is on a read-only file system"
    backend = ("FRONTIER_BACKEND=sqlite",) if setting == "FRONTIER_PATH" else ()
    crawl = scrapy_crawl(make_project(tmp_path / "project"), "one", f"{setting}={state}",
                         *backend)
    assert_one_clean_error(crawl, f"{setting} = {str(state)!r} cannot be used")
    assert problem in crawl.errors[0] and "Nothing was created" in crawl.errors[0]
    assert "OSError" not in crawl.output and "Spider opened" not in crawl.output
    assert not state.exists()


#: Holds its job directory: writes $HOLDING once crawling, then blocks until $RELEASE exists.
HOLDER = textwrap.dedent("""
    import os
    import time
    from pathlib import Path

    import scrapy

    class Holder(scrapy.Spider):
        name = "holder"
        start_urls = ["data:,held"]

        def parse(self, response):
            Path(os.environ["HOLDING"]).write_text("1")
            release, deadline = Path(os.environ["RELEASE"]), time.monotonic() + 120
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
""")


def test_a_second_crawl_on_a_job_directory_in_use_is_one_line(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", {"one": ONE_PAGE, "holder": HOLDER})
    jobdir, holding, release = tmp_path / "job", tmp_path / "holding", tmp_path / "release"
    first = start_crawl(project, "holder", f"JOBDIR={jobdir}",
                        env={"HOLDING": str(holding), "RELEASE": str(release)})
    try:
        deadline = time.monotonic() + 120
        while not holding.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # until the first crawl says it holds the directory
        assert holding.exists(), "the first crawl did not start"
        second = scrapy_crawl(project, "one", f"JOBDIR={jobdir}")
    finally:
        release.write_text("1")
        first_output, _ = first.communicate(timeout=120)
    assert_one_clean_error(second, "it is in use by another process")
    assert "Another crawl is using this job directory" in second.errors[0]
    assert first.returncode == 0, first_output[-3000:]


def test_only_the_reported_error_loses_its_unhandled_error_report(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The filter leaves out asyncio's and Twisted's reports of the error it was told of,
    and nothing else: another error keeps its report, Twisted's header included."""
    reported, other = FrontierConfigError("reported"), ValueError("a bug of the spider's")
    monkeypatch.setattr(startup, "_reported", [reported])
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            exc = record.exc_info[1] if record.exc_info else None
            seen.append(f"{record.name}: {record.getMessage()} {exc!r}")

    quiet, keep = startup.QuietReported(), Keep()
    for name in ("asyncio", "twisted"):
        logging.getLogger(name).addFilter(quiet)
        logging.getLogger(name).addHandler(keep)
    try:
        for exc in (reported, other):
            error = (type(exc), exc, None)
            logging.getLogger("asyncio").error("Task exception was never retrieved",
                                               exc_info=error)
            logging.getLogger("twisted").critical("Unhandled error in Deferred:")
            logging.getLogger("twisted").critical("", exc_info=error)
    finally:
        for name in ("asyncio", "twisted"):
            logging.getLogger(name).removeFilter(quiet)
            logging.getLogger(name).removeHandler(keep)
    assert seen == [
        f"asyncio: Task exception was never retrieved {other!r}",
        "twisted: Unhandled error in Deferred: None",
        f"twisted:  {other!r}",
    ]


def test_a_script_keeps_the_raised_error(tmp_path: Path) -> None:
    """Outside a Scrapy command the error is the caller's: raised, nothing left out."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import scrapy
        from scrapy.crawler import CrawlerProcess

        class One(scrapy.Spider):
            name = "one"
            start_urls = ["data:,a"]

        process = CrawlerProcess({"ADDONS": {"scrapy_frontier.Addon": 0},
                                  "FRONTIER_DELAY_FACTOR": -1,
                                  "TELNETCONSOLE_ENABLED": False})
        failures = []
        process.crawl(One).addErrback(failures.append)
        process.start()
        print("script saw:", failures[0].value if failures else None)
    """))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "script saw: FRONTIER_DELAY_FACTOR must be >= 0.0" in done.stdout, done.stderr[-3000:]
    assert "scrapy-frontier cannot start: FRONTIER_DELAY_FACTOR" in done.stderr
