"""The Lua scripts of the Redis backend, shipped as package data (``lua/*.lua``)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return (files(__package__) / "lua" / f"{name}.lua").read_text(encoding="utf-8")


#: Runs the script's body, then writes the counters it added up (stats, URL counts), even
#: when the body fails midway: the counts then match the writes it made.
_TAIL = """
end
local ok, reply = pcall(body)
flush_stats()
if not ok then error(reply, 0) end
return reply
"""


def load_script(name: str) -> str:
    """A frontier script: the shared prelude, then ``lua/<name>.lua`` as the body of a
    function, after which its counters reach Redis (see flush_stats in the prelude)."""
    return lua_source("prelude") + "local function body()\n" + lua_source(name) + _TAIL
