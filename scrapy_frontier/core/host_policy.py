"""Per-host policy: the delay rule, the connections and the budget in force for each host.

``FRONTIER_HOST_POLICY`` maps hosts to entries. A key such as ``"example.com"`` is a suffix,
as in ``FRONTIER_PRIORITY_RULES``: it applies to example.com and its subdomains. A key that
starts with ``=`` (``"=www.example.com"``) applies to that host only. The most specific entry
wins: the exact one, else the longest matching suffix. The entry that wins is complete: what
it leaves out comes from the crawl's own settings, not from a shorter suffix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy_frontier.core.politeness import DelayPolicy

#: The fields of an entry, and what each must be.
FIELDS = {
    "delay_factor": "a number >= 0",
    "min_delay": "seconds >= 0",
    "max_delay": "seconds >= min_delay",
    "concurrency": "a whole number >= 1",
    "budget": "a whole number of pages >= 0 (0: unlimited)",
}


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """What one host may get: its delay rule, its connections, its budget (None: the
    crawl's)."""

    delay: DelayPolicy = field(default_factory=DelayPolicy)
    connections: int = 1
    budget: int | None = None

    def describe(self) -> str:
        d = self.delay
        text = (f"factor {d.factor:g}, rest {d.min_delay:g}-{d.max_delay:g} s, "
                f"{self.connections} connection{'s' if self.connections != 1 else ''}")
        if self.budget is not None:
            text += f", budget {self.budget or 'unlimited'}"
        return text


class HostPolicies:
    """Entries by key (see the module doc) -> :class:`HostPolicy`; ``default`` for every
    other host."""

    def __init__(self, default: HostPolicy, entries: Mapping[str, HostPolicy] | None = None,
                 warnings: list[str] | None = None) -> None:
        self.default = default
        self.entries = dict(entries or {})
        #: What the entries ask that cannot be honoured, one sentence each (logged at open).
        self.warnings = list(warnings or ())
        self.exact = {k[1:]: p for k, p in self.entries.items() if k.startswith("=")}
        self.suffixes = {k: p for k, p in self.entries.items() if not k.startswith("=")}

    def of(self, host: str) -> HostPolicy:
        """The policy of ``host``: its exact entry's, else its longest matching suffix's,
        else the default."""
        if not self.entries:
            return self.default
        host = host.lower()
        found = self.exact.get(host)
        if found is not None:
            return found
        entries = self.suffixes
        while True:
            found = entries.get(host)
            if found is not None:
                return found
            dot = host.find(".")
            if dot < 0:
                return self.default
            host = host[dot + 1:]

    def delay_of(self, host: str) -> DelayPolicy:
        return self.of(host).delay

    def connections_of(self, host: str) -> int:
        return self.of(host).connections

    def budget_of(self, host: str) -> int | None:
        return self.of(host).budget

    # What a frontier is given: None where no entry differs from the default, so that a
    # crawl without entries pays no lookup per fetch.

    @property
    def delays(self) -> Callable[[str], DelayPolicy] | None:
        differs = any(p.delay != self.default.delay for p in self.entries.values())
        return self.delay_of if differs else None

    @property
    def connections(self) -> Callable[[str], int] | None:
        differs = any(p.connections != self.default.connections
                      for p in self.entries.values())
        return self.connections_of if differs else None

    @property
    def most_connections(self) -> int:
        return max([self.default.connections,
                    *(p.connections for p in self.entries.values())])

    @property
    def has_budgets(self) -> bool:
        return any(p.budget is not None for p in self.entries.values())

    def note(self, host: str) -> str | None:
        """The policy of ``host`` in a few words, where an entry gives it one."""
        policy = self.of(host) if self.entries else self.default
        return None if policy is self.default else f"policy: {policy.describe()}"

    def summary(self) -> str | None:
        """One line for the opening log: each entry and its policy; None without entries."""
        if not self.entries:
            return None
        parts = [f"{key}: {p.describe()}" for key, p in sorted(self.entries.items())]
        return f"per-host policy ({len(parts)} entries): " + "; ".join(parts)


def parse_entries(raw: Mapping[Any, Any], default: HostPolicy,
                  setting: str = "FRONTIER_HOST_POLICY") -> dict[str, HostPolicy]:
    """Validated entries from ``raw`` (suffix -> {field: value}); a :class:`ValueError`
    that names the entry and the field otherwise. Fields left out come from ``default``."""
    out: dict[str, HostPolicy] = {}
    for suffix, fields in raw.items():
        where = f"{setting}[{suffix!r}]"
        if not isinstance(suffix, str) or not suffix.lstrip("=").strip(". "):
            raise ValueError(f"{where}: a key must be a host suffix such as 'example.com' "
                                  "(the host and its subdomains) or '=www.example.com' (that "
                                  "host only)")
        if not isinstance(fields, Mapping):
            raise ValueError(f"{where} must be a dict of {', '.join(FIELDS)}, "
                                  f"got {fields!r}")
        unknown = sorted(set(map(str, fields)) - set(FIELDS))
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; the fields "
                                  f"are {', '.join(FIELDS)}")
        d = default.delay
        factor = _number(where, "delay_factor", fields.get("delay_factor", d.factor))
        low = _number(where, "min_delay", fields.get("min_delay", d.min_delay))
        high = _number(where, "max_delay", fields.get("max_delay", d.max_delay))
        if high < low:
            raise ValueError(f"{where}: max_delay ({high:g}) must be >= min_delay "
                                  f"({low:g})")
        connections = _whole(where, "concurrency", fields.get("concurrency",
                                                               default.connections), 1)
        budget = (_whole(where, "budget", fields["budget"], 0) if "budget" in fields
                  else default.budget)
        key = suffix.strip().lower()
        key = "=" + key[1:].strip(". ") if key.startswith("=") else key.strip(".")
        if key in out:
            raise ValueError(f"{where}: {key!r} is given twice")
        out[key] = HostPolicy(DelayPolicy(factor, low, high), connections, budget)
    return out


def _number(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, "
                              f"got {value!r}") from None
    if math.isnan(number) or number < 0 or math.isinf(number) and name != "max_delay":
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, got {value!r}")
    return number


def _whole(where: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, "
                              f"got {value!r}") from None
    if not number.is_integer() or number < minimum:
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, got {value!r}")
    return int(number)
