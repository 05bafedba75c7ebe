"""The Lua scripts of the Redis backend, shipped as package data (``lua/*.lua``)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return (files(__package__) / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def load_script(name: str) -> str:
    """A frontier script: the shared prelude, then ``lua/<name>.lua`` as the body of a
    function, after which the counters it added up reach the stats hash at once."""
    return (lua_source("prelude") + "local function body()\n" + lua_source(name)
            + "\nend\nlocal reply = body()\nflush_stats()\nreturn reply\n")
