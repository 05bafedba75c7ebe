"""The tests mirror the package: each folder of test files is a package of scrapy_frontier.

``tests/core/`` holds the tests of ``scrapy_frontier/core/``, ``tests/backends/redis/`` those of
``scrapy_frontier/backends/redis/``, and so on; ``tests/`` itself holds the tests of the top-level
modules (``test_codec.py``) and the checks of the project as a whole (``PROJECT_CHECKS``). Only
the folders of ``CROSS_LAYER`` have no package of their own.
"""

from __future__ import annotations

import re
from pathlib import Path

import scrapy_frontier

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: The pages that name test files (as ``tests/...py`` in reST, `tests/...py` in Markdown).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.rst")),
         ROOT / "benchmarks" / "README.md", ROOT / "testweb" / "README.md"]
PACKAGE = Path(scrapy_frontier.__file__).resolve().parent
#: Test folders that mirror no package, and why.
CROSS_LAYER = {
    "crawls": "whole crawls of the test web, through every layer",
    "testweb": "the loopback test web, a distribution of its own",
}
#: Test files in ``tests/`` that check the project, not one module.
PROJECT_CHECKS = {"test_docs_truth.py", "test_layout.py", "test_plain_install.py",
                  "test_release.py", "test_tree.py"}


def _test_folders() -> set[Path]:
    return {path.parent.relative_to(TESTS) for path in TESTS.rglob("test_*.py")
            if "__pycache__" not in path.parts}


def test_every_test_folder_mirrors_a_package_or_is_cross_layer() -> None:
    stray = set()
    for folder in _test_folders():
        if folder.parts in {(), *((name,) for name in CROSS_LAYER)}:
            continue
        if not (PACKAGE / folder / "__init__.py").is_file():
            stray.add(folder.as_posix())
    assert stray == set(), f"test folders that mirror no package of scrapy_frontier: {stray}"


def test_the_top_level_tests_test_a_top_level_module_or_the_project() -> None:
    stray = {path.name for path in TESTS.glob("test_*.py")
             if path.name not in PROJECT_CHECKS
             and not (PACKAGE / f"{path.stem.removeprefix('test_')}.py").is_file()}
    assert stray == set(), f"move these into the folder of the package they test: {stray}"


def test_every_test_folder_is_a_package() -> None:
    # Equal basenames in two folders (core/test_recrawl.py, crawls/test_recrawl.py) import as
    # tests.core.test_recrawl and tests.crawls.test_recrawl only if each folder is a package.
    folders = _test_folders()
    for folder in list(folders):
        folders.update(folder.parents)
    missing = {f.as_posix() for f in folders if not (TESTS / f / "__init__.py").is_file()}
    assert missing == set()


def test_the_allow_lists_name_what_exists() -> None:
    assert {name for name in CROSS_LAYER if (TESTS / name).is_dir()} == set(CROSS_LAYER)
    assert {name for name in PROJECT_CHECKS if (TESTS / name).is_file()} == PROJECT_CHECKS


def test_the_pages_name_test_files_that_exist() -> None:
    missing = set()
    for page in PAGES:
        for name in re.findall(r"`+(tests/[\w/]+\.py)`+", page.read_text(encoding="utf-8")):
            if not (ROOT / name).is_file():
                missing.add((page.name, name))
    assert missing == set()
