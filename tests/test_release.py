"""The release: the sdist and the wheel that ``python -m build`` makes, and what each holds.

Built offline (``--no-isolation``: the venv's setuptools, from the ``test`` extra), from the
sdist as ``python -m build`` does by default, so a file the sdist forgets fails the wheel.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import scrapy_frontier

ROOT = Path(__file__).resolve().parent.parent


def _build(source: Path, out: Path) -> tuple[Path, Path]:
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _build(ROOT, tmp_path_factory.mktemp("dist"))


def _metadata(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(zf.read(meta_name).decode())
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return names, fields


def test_the_wheel_holds_the_package_and_nothing_else(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    names, _ = _metadata(wheel)
    version = scrapy_frontier.__version__
    assert wheel.name == f"scrapy_frontier-{version}-py3-none-any.whl"
    outside = [n for n in names if not n.startswith(
        ("scrapy_frontier/", f"scrapy_frontier-{version}.dist-info/"))]
    assert outside == []
    assert not [n for n in names if "testweb" in n or "/tests/" in n or "benchmarks" in n]
    # Every module of the source tree, and the package data, is in it.
    source = {p.relative_to(ROOT).as_posix()
              for p in (ROOT / "scrapy_frontier").rglob("*")
              if p.suffix in (".py", ".lua") or p.name == "py.typed"}
    assert source and source <= set(names), sorted(source - set(names))


def test_the_wheel_metadata_says_what_users_pin(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    _, meta = _metadata(wheel)
    assert meta["Version"] == [scrapy_frontier.__version__]
    assert meta["License-Expression"] == ["BSD-3-Clause"]
    assert meta["Requires-Python"] == [">=3.10"]
    classifiers = set(meta["Classifier"])
    assert "Framework :: Scrapy" in classifiers
    # The Pythons named are those .ci/run tests at both ends of requires-python.
    assert {"Programming Language :: Python :: 3.10",
            "Programming Language :: Python :: 3.13"} <= classifiers
    runtime = [r for r in meta["Requires-Dist"] if "extra ==" not in r]
    assert sorted(r.split(">=")[0] for r in runtime) == [
        "numpy", "protego", "scrapy", "twisted", "w3lib"]


def test_the_sdist_carries_tests_docs_example_and_the_test_web(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.removeprefix(f"{top}/") for n in tf.getnames()}
    for wanted in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml",
                   "tests/test_release.py", "docs/index.rst", "example_project/scrapy.cfg",
                   "testweb/pyproject.toml", "testweb/frontier_testweb/server.py",
                   "benchmarks/bench_politeness.py"):
        assert wanted in names, wanted
    assert not [n for n in names if "__pycache__" in n or n.startswith("docs/_build")
                or n.startswith("testweb/") and ".egg-info" in n]


def test_the_test_web_is_a_distribution_of_its_own(tmp_path: Path) -> None:
    _, wheel = _build(ROOT / "testweb", tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "frontier_testweb/server.py" in names
    assert not [n for n in names if n.startswith("scrapy_frontier/")]
