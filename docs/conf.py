"""Sphinx configuration for the scrapy-frontier documentation.

Build with ``sphinx-build -W -b html docs docs/_build``. No extensions are used,
so the build needs no network and nothing beyond Sphinx itself.
"""

project = "scrapy-frontier"
author = "the scrapy-frontier maintainers"
copyright = "the scrapy-frontier maintainers"
release = "0.1.0"
version = "0.1"

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
