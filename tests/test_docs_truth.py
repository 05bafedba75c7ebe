"""What the docs state that the code or CI already holds, checked against that source.

Pure file parsing: nothing is built, installed or crawled. The sources of truth:

* the version: ``scrapy_frontier.__version__`` (pyproject.toml and docs/conf.py read it);
* the Pythons CI tests: the ``python_of`` of each leg of ``.ci/run``, which are also the ends of
  pyproject.toml's ``requires-python`` and classifiers;
* the dependency floors: pyproject.toml (``.ci/constraints-oldest.txt`` pins them);
* the settings and their defaults: ``scrapy_frontier.settings.DEFAULTS``;
* the stats: the names the package's code sets.

Test counts change with every commit, so the docs state none.
"""

from __future__ import annotations

import ast
import re
import runpy
import sys
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import scrapy_frontier
from scrapy_frontier.settings import DEFAULTS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself needs tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: Every page a user reads, bar the changelog (which names past versions on purpose).
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.rst")), ROOT / "benchmarks" / "README.md",
         ROOT / "testweb" / "README.md"]
#: The runtime dependencies and the extras whose floors .ci/constraints-oldest.txt pins.
PINNED_EXTRAS = ("redis", "metrics")


def _pyproject(path: Path = ROOT / "pyproject.toml") -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _ci_pythons() -> dict[str, str]:
    """Each leg of .ci/run and the CPython minor version it asks ``python_of`` for."""
    legs = dict(re.findall(r"^python_(\w+)=\$\(python_of (\d+\.\d+)\)$", _text(ROOT / ".ci/run"),
                           re.M))
    assert set(legs) == {"newest", "oldest"}, legs
    return legs


def _floors() -> dict[str, Version]:
    """The ``>=`` floor of each runtime dependency and of the pinned extras."""
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for extra in PINNED_EXTRAS:
        reqs += project["optional-dependencies"][extra]
    floors = {}
    for text in reqs:
        req = Requirement(text)
        (floor,) = [s.version for s in req.specifier if s.operator == ">="]
        floors[canonicalize_name(req.name)] = Version(floor)
    return floors


def _pins() -> dict[str, Version]:
    pins = {}
    for line in _text(ROOT / ".ci/constraints-oldest.txt").splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            name, _, pinned = spec.partition("==")
            pins[canonicalize_name(name)] = Version(pinned)
    return pins


def _list_tables(text: str) -> list[list[list[str]]]:
    """Each ``.. list-table::`` of an .rst text, as rows of cell texts (continuations joined)."""
    tables = []
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if line.strip().startswith(".. list-table::"):
            directive = len(line) - len(line.lstrip())
            rows: list[list[str]] = []
            row_indent = -1
            for body in lines[start + 1:]:
                indent = len(body) - len(body.lstrip())
                stripped = body.strip()
                if stripped and indent <= directive:
                    break
                if stripped.startswith("* -") and (row_indent < 0 or indent == row_indent):
                    row_indent = indent
                    rows.append([stripped[3:].strip()])
                elif stripped.startswith("-") and rows and indent == row_indent + 2:
                    rows[-1].append(stripped[1:].strip())
                elif stripped and rows:
                    rows[-1][-1] = f"{rows[-1][-1]} {stripped}".strip()
            tables.append(rows)
    return tables


def _markdown_tables(text: str) -> list[list[list[str]]]:
    """Each pipe table of a Markdown text, as rows of cell texts (the rule row left out)."""
    tables: list[list[list[str]]] = []
    previous = False
    for line in text.splitlines():
        is_row = line.startswith("|")
        if is_row:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                if not previous:
                    tables.append([])
                tables[-1].append(cells)
        previous = is_row
    return tables


def _tables(path: Path) -> list[list[list[str]]]:
    text = _text(path)
    return _markdown_tables(text) if path.suffix == ".md" else _list_tables(text)


def _last_run_table(path: Path) -> dict[str, tuple[str, str]]:
    """The "last run" table of a page: each row's label and its (oldest, newest) versions."""
    (table,) = [t for t in _tables(path) if t and t[0][1:] == ["oldest leg", "newest leg"]]
    return {row[0]: (row[1], row[2]) for row in table[1:]}


# -- the version ----------------------------------------------------------------------------------


def test_the_version_is_written_once_and_read_everywhere() -> None:
    version = scrapy_frontier.__version__
    project = _pyproject()
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "scrapy_frontier.__version__"}
    conf = runpy.run_path(str(DOCS / "conf.py"))
    assert (conf["release"], conf["version"]) == (version, _minor(version))
    # The test web ships beside the package from the same tree, under the same number.
    assert _pyproject(ROOT / "testweb" / "pyproject.toml")["project"]["version"] == version


def test_the_changelog_opens_with_this_version() -> None:
    headings = re.findall(r"^## (\S+)", _text(ROOT / "CHANGELOG.md"), re.M)
    assert headings and headings[0] == scrapy_frontier.__version__, headings[:1]


def test_no_page_writes_the_version_down() -> None:
    """The pages say ``|release|`` (Sphinx) or point at ``__version__``: a number would drift."""
    stated = re.compile(r"\b(?:[Vv]ersion|scrapy-frontier)\s+v?\d+\.\d+(?:\.\d+)?\b")
    found = [(_rel(p), m.group()) for p in PAGES for m in stated.finditer(_text(p))]
    assert found == []


# -- the Pythons and the floors CI tests ----------------------------------------------------------


def test_ci_runs_the_ends_of_what_pyproject_admits() -> None:
    legs = _ci_pythons()
    config = _pyproject()
    assert config["project"]["requires-python"] == f">={legs['oldest']}"
    classifiers = {c.rsplit(" :: ", 1)[1] for c in config["project"]["classifiers"]
                   if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    oldest, newest = (int(legs[leg].split(".")[1]) for leg in ("oldest", "newest"))
    assert classifiers == {f"3.{m}" for m in range(oldest, newest + 1)}
    # The linter and the type checker hold the code to the oldest Python.
    assert config["tool"]["ruff"]["target-version"] == "py" + legs["oldest"].replace(".", "")
    assert config["tool"]["mypy"]["python_version"] == legs["oldest"]


def test_the_pins_of_the_oldest_leg_are_the_floors() -> None:
    assert _pins() == _floors()


def test_the_pages_name_the_pythons_ci_runs() -> None:
    legs = _ci_pythons()
    named: dict[str, set[str]] = {"newest": set(), "oldest": set()}
    admitted = []
    for page in PAGES:
        text = re.sub(r"\s+", " ", _text(page))
        for leg, minor in re.findall(r"\b(newest|oldest) CPython[^()]*?\((\d+\.\d+)\)", text):
            named[leg].add(minor)
        admitted += re.findall(r"\bPython (?:>= ?(\d+\.\d+)|(\d+\.\d+) or later)", text)
    assert named == {leg: {minor} for leg, minor in legs.items()}
    assert admitted and {a or b for a, b in admitted} == {legs["oldest"]}


def test_the_last_run_tables_agree_with_ci_and_the_pins() -> None:
    readme = _last_run_table(ROOT / "README.md")
    quickstart = _last_run_table(DOCS / "quickstart.rst")
    assert readme == quickstart
    legs = _ci_pythons()
    oldest, newest = readme.pop("Python")
    assert (_minor(oldest), _minor(newest)) == (legs["oldest"], legs["newest"])
    pins = _pins()
    checked = set()
    for label, (old, _) in readme.items():
        names = [canonicalize_name(n.strip().removesuffix("-py"))
                 for n in label.split("(")[0].split(",")]
        versions = [v.strip() for v in old.split(",")]
        for name, version in zip(names, versions, strict=True):
            if name in pins:
                assert Version(version) == pins[name], (label, version)
                checked.add(name)
    # Every runtime dependency is in the table (the Redis server is not a Python package).
    runtime = {canonicalize_name(Requirement(r).name)
               for r in _pyproject()["project"]["dependencies"]}
    assert runtime <= checked, sorted(runtime - checked)


def test_the_pages_state_the_floors_of_pyproject() -> None:
    floors = _floors()
    # README's table of each floor and why.
    (table,) = [t for t in _tables(ROOT / "README.md") if t and t[0][:2] == ["Package", "Floor"]]
    listed = {canonicalize_name(row[0]): Version(row[1]) for row in table[1:]}
    runtime = {canonicalize_name(Requirement(r).name)
               for r in _pyproject()["project"]["dependencies"]}
    assert listed == {name: floors[name] for name in runtime}
    # And the paragraph on the extras' floors.
    extras = re.search(r"^The extras:.*?(?=\n\n)", _text(ROOT / "README.md"), re.S | re.M)
    assert extras
    stated = {canonicalize_name(name.removesuffix("-py")): Version(floor) for name, floor in
              re.findall(r"\b(redis-py|scrapy-redis|prometheus_client) (\d+(?:\.\d+)+)",
                         extras.group())}
    assert stated == {name: floor for name, floor in floors.items() if name not in runtime}
    scrapy = floors["scrapy"].release
    claims = []
    for page in PAGES:
        text = re.sub(r"\s+", " ", _text(page))
        for at_least in re.findall(r"\bScrapy (?:>= ?(\d+\.\d+)|(\d+\.\d+) or later)", text):
            claims.append((page.name, "Scrapy", at_least[0] or at_least[1]))
            assert Version(claims[-1][2]).release == scrapy[:2], claims[-1]
        for older in re.findall(r"\bScrapy (\d+\.\d+) and older are not supported", text):
            claims.append((page.name, "Scrapy older", older))
            assert Version(older).release == (scrapy[0], scrapy[1] - 1), claims[-1]
        for name, before in re.findall(
                r"\b(Twisted|w3lib|Protego|numpy|redis-py|scrapy-redis|prometheus_client) "
                r"(?:before|<) ?(\d+(?:\.\d+)+)", text):
            claims.append((page.name, name, before))
            key = canonicalize_name(name.removesuffix("-py"))
            assert Version(before) == floors[key], claims[-1]
    assert claims


# -- test counts ----------------------------------------------------------------------------------


#: A count of this project's tests, as the pages used to state them.
TEST_COUNT = re.compile(
    r"\b\d[\d,]* (?:passed|deselected)\b"  # a pytest summary
    r"|\bslow\b\W{0,3}\d[\d,]* of \d"  # "slow, 26 of 850"
    r"|\b\d[\d,]* (?:of [\d,]+ )?(?:slow )?tests? (?:are |were )?(?:marked|in the suite)\b"
    r"|\b\d[\d,]* slow tests?\b")


def test_no_page_counts_the_tests() -> None:
    """How many tests there are, or are marked slow, changes with every commit: no page says."""
    files = [*PAGES, ROOT / "CHANGELOG.md", ROOT / ".ci/run", ROOT / ".ci/constraints-oldest.txt",
             ROOT / "pyproject.toml"]
    found = [(_rel(p), m.group()) for p in files
             for m in TEST_COUNT.finditer(re.sub(r"\s+", " ", _text(p)))]
    assert found == []


def test_the_count_finder_finds_counts() -> None:
    for drifted in ("marker `slow`, 26 of 850: those", "998 passed in 812 s",
                    "the 36 slow tests", "1,004 tests in the suite", "36 of 1,004 tests marked"):
        assert TEST_COUNT.search(drifted), drifted
    assert not TEST_COUNT.search("3 of 3 runs, 5 of 5 trials, over 926 tests of Scrapy's suite")


# -- settings, stats, benchmarks ------------------------------------------------------------------


def _documented_defaults() -> list[tuple[str, str, str]]:
    """(page, setting, default cell) of every row of a table with a Default column."""
    rows = []
    for page in (ROOT / "README.md", DOCS / "settings.rst", DOCS / "distributed.rst"):
        for table in _tables(page):
            if not table or "Default" not in table[0]:
                continue
            column = table[0].index("Default")
            for row in table[1:]:
                name = re.fullmatch(r"`{1,2}(FRONTIER_[A-Z0-9_]+)`{1,2}", row[0])
                if name:
                    rows.append((page.name, name.group(1), row[column]))
    return rows


def test_every_setting_is_in_the_settings_tables() -> None:
    documented = {name for page, name, _ in _documented_defaults() if page != "README.md"}
    # The Redis settings are on the Redis page; the settings page points there.
    assert set(DEFAULTS) - documented == set()


def test_the_documented_defaults_are_the_defaults() -> None:
    wrong = []
    for page, name, cell in _documented_defaults():
        assert name in DEFAULTS, (page, name)
        default = DEFAULTS[name]
        if default is None:
            continue  # derived from other settings: the cell says how, in words
        literal = re.match(r"`{1,2}([^`]+)`{1,2}", cell)
        try:
            value = ast.literal_eval(literal.group(1)) if literal else cell
        except (SyntaxError, ValueError):
            value = cell
        if value != default or type(value) is not type(default) and not (
                isinstance(value, int) and isinstance(default, float)):
            wrong.append((page, name, cell, default))
    assert wrong == []


def test_the_pages_name_only_settings_that_exist() -> None:
    #: Names that are not settings on purpose: a typo the docs show being caught, and the
    #: benchmarks' environment variable.
    not_settings = {"FRONTIER_MIN_DELEY", "FRONTIER_BENCH_CODE"}
    unknown = set()
    for page in [*PAGES, ROOT / "CHANGELOG.md"]:
        for name, star in re.findall(r"\b(FRONTIER_[A-Z0-9_]*[A-Z0-9])(_?\*)?", _text(page)):
            if star:  # a family, FRONTIER_REDIS_*
                assert any(s.startswith(name) for s in DEFAULTS), (page.name, name)
            elif name not in DEFAULTS and name not in not_settings:
                unknown.add((page.name, name))
    assert unknown == set()


def _code_strings() -> tuple[set[str], set[str]]:
    """The package's string constants, and the constant heads of its f-strings."""
    constants: set[str] = set()
    heads: set[str] = set()
    for path in (ROOT / "scrapy_frontier").rglob("*.py"):
        for node in ast.walk(ast.parse(_text(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                constants.add(node.value)
            elif (isinstance(node, ast.JoinedStr) and node.values
                  and isinstance(node.values[0], ast.Constant)):
                heads.add(str(node.values[0].value))
    return constants, heads


def test_the_stats_page_names_the_stats_the_code_sets() -> None:
    documented = set(re.findall(r"``(frontier/[a-z0-9_/]+)``", _text(DOCS / "stats.rst")))
    constants, heads = _code_strings()
    # Set by its full name, or built from an f-string's constant head and another constant: a
    # counter's key published under "frontier/" ("frontier/" + "recrawl/fed"), an outcome
    # counted under its group ("signals/" + "kept").
    missing = {name for name in documented
               if name not in constants
               and not any(name.startswith(h) and name[len(h):] in constants for h in heads)
               and not any(name.startswith(f"frontier/{h}")
                           and name[len(h) + 9:] in constants for h in heads)}
    assert missing == set()
    groups = {name.split("/")[1] for name in documented if name.count("/") >= 2}
    undocumented = {c for c in constants
                    if re.fullmatch(r"(frontier/)?[a-z_]+(/[a-z0-9_]+)+", c)
                    and c.removeprefix("frontier/").split("/")[0] in groups
                    and ("frontier/" + c.removeprefix("frontier/")) not in documented}
    assert undocumented == set()


def test_every_benchmark_is_described() -> None:
    named = "".join(_text(page) for page in PAGES)
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        assert ast.get_docstring(ast.parse(_text(script))), script.name
        assert script.name in named, script.name
    for page in PAGES:
        for name in re.findall(r"\bbenchmarks/([\w/]+\.py)\b", _text(page)):
            assert (ROOT / "benchmarks" / name).is_file(), (page.name, name)


def test_every_subcommand_is_in_the_help_and_the_operating_table() -> None:
    from scrapy_frontier.commands.frontier import SUBCOMMANDS, USAGE

    helped = set(re.findall(r"^  ([a-z]+)\b", USAGE, re.MULTILINE))
    rows = [line for line in _text(DOCS / "operating.rst").splitlines()
            if line.startswith("   * - ``")]
    tabled = {name for row in rows for name in re.findall(r"``([a-z]+)\b", row)}
    assert set(SUBCOMMANDS) - helped == set()
    assert set(SUBCOMMANDS) - tabled == set()


_SEED = re.compile(r"seed (\S+): (\d+) read, (\d+) queued, (\d+) already seen, (\d+) invalid$")
_SEED_INVALID = re.compile(r"  invalid, line (\d+): '(.*)' (.*)$")
_SEED_STOP = re.compile(r"scrapy frontier: seed (\S+): stopped \(Ctrl-C\) after \d+ entries, "
                        r"all committed \((\d+) queued, (\d+) already seen, (\d+) invalid\)")


def test_the_seed_examples_are_what_the_command_prints() -> None:
    """The numbers of operating.rst's ``scrapy frontier seed`` examples are a real run's;
    each output is rebuilt from them here by the command's own code (summary, applied line,
    Ctrl-C message), so that a change of wording shows up."""
    from scrapy_frontier.commands.seed import (
        LoadTally,
        SQLiteSeeds,
        Stopped,
        render,
        result,
        stopped,
    )

    page = _text(DOCS / "operating.rst")
    section = page[page.index("\nLoading seeds\n"):page.index("\n.. _exit-codes:")]
    lines = [line[3:] for block in re.findall(r"\.\. code-block:: text\n\n((?:   .*\n)+)",
                                              section) for line in block.splitlines()]
    commands = [i for i, line in enumerate(lines) if line.startswith("$ ")] + [len(lines)]
    seen = {"summary": 0, "stop": 0}
    for start, end in zip(commands, commands[1:], strict=False):
        command, output = lines[start], lines[start + 1:end]
        if not command.startswith("$ scrapy frontier seed") or not output:
            continue
        callback = re.search(r"--callback (\w+)", command)
        name = None if callback is None else callback.group(1)
        stop = _SEED_STOP.match(output[0])
        if stop is not None:
            tally = LoadTally(queued=int(stop[2]), seen=int(stop[3]), invalid=int(stop[4]))
            assert output == [f"scrapy frontier: {stopped(stop[1], Stopped(), tally)}"]
            seen["stop"] += 1
            continue
        summary = _SEED.match(output[0])
        assert summary is not None, output
        tally = LoadTally(read=int(summary[2]), queued=int(summary[3]), seen=int(summary[4]),
                      invalid=int(summary[5]))
        for line in output[1:]:
            if (bad := _SEED_INVALID.match(line)) is not None:
                tally.samples.append({"line": int(bad[1]), "text": bad[2], "why": bad[3]})
        done = (f"{tally.queued} queued, {SQLiteSeeds.applied}"
                + (f" (callback {name})" if name else "")) if tally.queued \
            else "nothing new to queue"
        assert render(result(summary[1], "sqlite", tally, name, done, [])).splitlines() \
            == output
        seen["summary"] += 1
    assert seen == {"summary": 3, "stop": 1}
