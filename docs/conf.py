"""Sphinx configuration for the scrapy-frontier documentation.

Build with ``sphinx-build -W -b html docs docs/_build``. No extensions are used,
so the build needs no network and nothing beyond Sphinx itself.
"""

import ast
from pathlib import Path


def _package_version() -> str:
    """``scrapy_frontier.__version__``, read from the source without importing the package."""
    source = Path(__file__).resolve().parent.parent / "scrapy_frontier" / "__init__.py"
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise RuntimeError(f"{source} sets no __version__")


project = "scrapy-frontier"
author = "the scrapy-frontier maintainers"
copyright = "the scrapy-frontier maintainers"
# The version is written once, in scrapy_frontier/__init__.py (pyproject.toml reads it too).
release = _package_version()
version = ".".join(release.split(".")[:2])

extensions: list[str] = []

root_doc = "index"
source_suffix = {".rst": "restructuredtext"}
exclude_patterns = ["_build"]
language = "en"

html_theme = "alabaster"
html_title = "scrapy-frontier"
html_theme_options = {
    "description": "A polite Mercator-style crawl frontier for Scrapy",
    "fixed_sidebar": False,
}
