"""A real file system that fails mid-crawl and turns read-only, then a resume.

ext4 on a loop device, mounted ``errors=remount-ro``. After some pages the crawl's
harness fsyncs ``seen.sqlite``'s write-ahead log (the kernel may write any file's dirty
pages back at any moment: this picks the worst order) and triggers a file-system error.
What was not on the disk then is gone. The test unmounts, runs ``e2fsck``, mounts again
and runs the same command: every URL must be fetched in the end.

Needs root, ``losetup``, ``mkfs.ext4``, ``e2fsck``, loop devices and ext4's
``trigger_fs_error``; skipped elsewhere, with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl

pytestmark = pytest.mark.crawl

TOOLS = ("losetup", "mkfs.ext4", "e2fsck", "mount", "umount")


class LoopFS:
    """An ext4 image on a loop device, mounted at ``mnt`` with errors=remount-ro."""

    def __init__(self, image: Path, mnt: Path) -> None:
        self.image = image
        self.mnt = mnt
        self.device = ""

    @property
    def trigger(self) -> Path:
        return Path("/sys/fs/ext4") / Path(self.device).name / "trigger_fs_error"

    def create(self) -> None:
        with open(self.image, "wb") as f:
            f.truncate(96 * 1024 * 1024)
        run("mkfs.ext4", "-q", "-F", str(self.image))
        self.device = run("losetup", "-f", "--show", str(self.image)).strip()
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.mount()

    def mount(self) -> None:
        run("mount", "-o", "errors=remount-ro", self.device, str(self.mnt))

    def unmount(self) -> None:
        run("umount", str(self.mnt))

    def repair(self) -> None:
        """e2fsck -y: exit codes 0-2 mean clean or repaired."""
        done = subprocess.run(["e2fsck", "-f", "-y", self.device], capture_output=True,
                              text=True, check=False)
        assert done.returncode <= 2, done.stdout + done.stderr

    def remove(self) -> None:
        if os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", str(self.mnt)], check=False, capture_output=True)
        if self.device:
            subprocess.run(["losetup", "-d", self.device], check=False, capture_output=True)


def run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def loop_fs(tmp_path: Path) -> Iterator[LoopFS]:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root: it mounts a loop device")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    fs = LoopFS(tmp_path / "ext4.img", tmp_path / "mnt")
    try:
        fs.create()
    except (subprocess.CalledProcessError, OSError) as exc:
        fs.remove()
        detail = getattr(exc, "stderr", "") or exc
        pytest.skip(f"cannot mount a loop device here: {str(detail).strip()}")
    if not fs.trigger.exists():
        fs.remove()
        pytest.skip(f"this kernel has no {fs.trigger}")
    try:
        yield fs
    finally:
        fs.remove()


@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_a_file_system_that_turns_read_only_then_a_resume_loses_no_url(
        tmp_path: Path, loop_fs: LoopFS) -> None:
    job = loop_fs.mnt / "job"
    settings = {"ADDONS": FRONTIER_ADDON, "FRONTIER_MIN_DELAY": 0.0, "JOBDIR": str(job)}
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "8", "--pages", "80", "--latency", "0.005",
                "0.01", "--seed", "3"]
    fs_error = {"pages": 150, "trigger": str(loop_fs.trigger),
                "sync": [str(job / "seen.sqlite-wal"), str(job / "seen.sqlite")]}
    with ServerProcess(web_args, log_path=str(log)) as web:
        failed = run_crawl(web.start_urls, settings, workdir=tmp_path / "run1",
                           fs_error=fs_error)
        assert "file system error triggered" in failed.output, failed.output[-3000:]
        fetched_first = len(read_log(log))
        loop_fs.unmount()
        loop_fs.repair()
        loop_fs.mount()
        again = run_crawl(web.start_urls, settings, workdir=tmp_path / "run2")
        assert again.returncode == 0, again.output[-3000:]
    assert again.stats.get("finish_reason") == "finished", again.output[-3000:]
    assert fetched_first < len(web.expected)  # the error did cut the first run short
    entries = read_log(log)
    report = audit(entries, expected=web.expected, min_delay=0.0)
    print(report.summary(), "first run:", failed.stats.get("finish_reason"),
          "restored:", again.stats.get("frontier/restored"))
    assert report.coverage == 1.0, (report.summary(), sorted(web.expected - {
        (e.host, e.path) for e in entries if e.status < 400})[:10])
    assert report.overlaps == 0, report.summary()
