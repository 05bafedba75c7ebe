"""Per-host policy: the delay rule, the connections and the budget in force for each host.

``FRONTIER_HOST_POLICY`` maps hosts to entries. A key such as ``"example.com"`` is a suffix,
as in ``FRONTIER_PRIORITY_RULES``: it applies to example.com and its subdomains. A key that
starts with ``=`` (``"=www.example.com"``) applies to that host only. The most specific entry
wins: the exact one, else the longest matching suffix. The entry that wins is complete: what
it leaves out comes from the crawl's own settings, not from a shorter suffix.

*Steered* entries (``scrapy frontier policy``) are set on a running crawl: each replaces the
setting's entry of the same key, and takes what it leaves out from that entry (else from the
crawl's settings). Clearing one puts the setting's entry back in force.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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
        #: The setting's entries.
        self.entries = dict(entries or {})
        #: Entries set on the running crawl (``steer``), by key.
        self.steered: dict[str, HostPolicy] = {}
        #: What the entries ask that cannot be honoured, one sentence each (logged at open).
        self.warnings = list(warnings or ())
        #: Why steered entries cannot change a host's connections (None: they can); the
        #: connections are then the setting's alone.
        self.connections_fixed: str | None = None
        #: An entry's key -> the most connections the crawler can give its host, and the
        #: setting that says so (None: no cap).
        self.cap_of: Callable[[str], tuple[int, str]] | None = None
        self._settings = _index(self.entries)
        self._force = self._settings

    def of(self, host: str) -> HostPolicy:
        """The policy of ``host``: its exact entry's, else its longest matching suffix's,
        else the default."""
        return _lookup(self._force, host, self.default)

    def steer(self, raw: Mapping[str, Any]) -> list[str]:
        """Put the steered entries ``raw`` (key -> fields, as the setting's) in force, in
        place of any earlier ones. Returns one sentence per entry refused (left out) or
        capped."""
        steered: dict[str, HostPolicy] = {}
        said: list[str] = []
        for key, fields in raw.items():
            try:
                name, policy = self.steered_entry(key, fields)
            except ValueError as exc:
                said.append(str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - bytes from a store: refuse, never stop
                said.append(f"scrapy frontier policy[{key!r}] cannot be read "
                            f"({type(exc).__name__}: {exc})")
                continue
            if name in steered:
                said.append(f"scrapy frontier policy[{key!r}]: {name!r} is given twice")
                continue
            if self.cap_of is not None:
                policy, warning = cap_connections(name, policy, self.cap_of,
                                                  "scrapy frontier policy")
                if warning is not None:
                    said.append(warning)
            steered[name] = policy
        self.steered = steered
        self._force = _index({**self.entries, **steered}) if steered else self._settings
        return said

    def steered_entry(self, key: Any, fields: Any) -> tuple[str, HostPolicy]:
        """The key, normalised, and policy of a steered entry; a :class:`ValueError` that
        names the entry and the field otherwise."""
        name = normal_key(key) if isinstance(key, str) else key
        base = self.entries.get(name, self.default) if isinstance(name, str) else self.default
        if (self.connections_fixed and isinstance(fields, Mapping)
                and "concurrency" in fields):
            raise ValueError(f"scrapy frontier policy[{key!r}]: concurrency cannot change on "
                             f"a running crawl {self.connections_fixed}: set it in "
                             "FRONTIER_HOST_POLICY and start the crawl again")
        ((name, policy),) = parse_entries({key: fields}, base,
                                          "scrapy frontier policy").items()
        if self.connections_fixed:
            policy = replace(policy, connections=base.connections)
        return name, policy

    def delay_of(self, host: str) -> DelayPolicy:
        return self.of(host).delay

    def connections_of(self, host: str) -> int:
        if self.connections_fixed is None:
            return self.of(host).connections
        return _lookup(self._settings, host, self.default).connections

    def budget_of(self, host: str) -> int | None:
        return self.of(host).budget

    # What a frontier is given: None where no entry differs from the default, so that a
    # crawl without entries pays no lookup per fetch.

    def _in_force(self) -> list[HostPolicy]:
        return [*self.entries.values(), *self.steered.values()]

    @property
    def delays(self) -> Callable[[str], DelayPolicy] | None:
        differs = any(p.delay != self.default.delay for p in self._in_force())
        return self.delay_of if differs else None

    @property
    def connections(self) -> Callable[[str], int] | None:
        differs = any(p.connections != self.default.connections for p in self._in_force())
        return self.connections_of if differs else None

    @property
    def most_connections(self) -> int:
        return max([self.default.connections, *(p.connections for p in self._in_force())])

    @property
    def has_budgets(self) -> bool:
        return any(p.budget is not None for p in self._in_force())

    def note(self, host: str) -> str | None:
        """The policy of ``host`` in a few words, where an entry gives it one."""
        policy = self.of(host)
        if policy is self.default:
            return None
        steered = any(p is policy for p in self.steered.values())
        if self.connections_fixed:  # the setting's connections hold
            policy = replace(policy, connections=self.connections_of(host))
        return f"policy{' (steered)' if steered else ''}: {policy.describe()}"

    def steered_summary(self) -> str:
        """The steered entries in one line."""
        parts = [f"{key}: {p.describe()}" for key, p in sorted(self.steered.items())]
        return f"{len(parts)} steered entries" + (": " + "; ".join(parts) if parts else "")

    def summary(self) -> str | None:
        """One line for the opening log: each entry and its policy; None without entries."""
        if not self.entries:
            return None
        parts = [f"{key}: {p.describe()}" for key, p in sorted(self.entries.items())]
        return f"per-host policy ({len(parts)} entries): " + "; ".join(parts)


_Index = tuple[dict[str, HostPolicy], dict[str, HostPolicy]]


def _index(entries: Mapping[str, HostPolicy]) -> _Index:
    """(exact entries by host, suffix entries by suffix)."""
    return ({k[1:]: p for k, p in entries.items() if k.startswith("=")},
            {k: p for k, p in entries.items() if not k.startswith("=")})


def _lookup(index: _Index, host: str, default: HostPolicy) -> HostPolicy:
    exact, suffixes = index
    if not exact and not suffixes:
        return default
    host = host.lower()
    found = exact.get(host)
    if found is not None:
        return found
    while True:
        found = suffixes.get(host)
        if found is not None:
            return found
        dot = host.find(".")
        if dot < 0:
            return default
        host = host[dot + 1:]


def cap_connections(key: str, policy: HostPolicy, cap_of: Callable[[str], tuple[int, str]],
                    where: str) -> tuple[HostPolicy, str | None]:
    """``policy`` with its connections capped at ``cap_of(key)``, and a warning if capped."""
    cap, name = cap_of(key)
    if policy.connections <= cap:
        return policy, None
    return replace(policy, connections=cap), (
        f"{where}[{key!r}] asks for {policy.connections} connections; {name} lets Scrapy's "
        f"downloader open {cap}, so the host gets {cap} (raise {name} to give it more)")


def normal_key(key: str) -> str:
    """An entry's key as the table holds it: lower case, without outer dots and spaces."""
    key = key.strip().lower()
    return "=" + key[1:].strip(". ") if key.startswith("=") else key.strip(".")


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
        key = normal_key(suffix)
        if key in out:
            raise ValueError(f"{where}: {key!r} is given twice")
        out[key] = HostPolicy(DelayPolicy(factor, low, high), connections, budget)
    return out


def _number(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, got {value!r}")
    try:
        number = float(value)
    except (ValueError, OverflowError):
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
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, "
                              f"got {value!r}") from None
    if not number.is_integer() or number < minimum:
        raise ValueError(f"{where}[{name!r}] must be {FIELDS[name]}, got {value!r}")
    return int(number)
