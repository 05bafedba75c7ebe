"""Page budgets: how many fetches each host may have in all, and how many it had."""

from __future__ import annotations

from collections.abc import Callable


class Budgets:
    def __init__(self, default: int = 0) -> None:
        self._default = default
        self._own: dict[str, int] = {}
        self._fetched: dict[str, int] = {}
        self._by_policy: Callable[[str], int | None] | None = None
        #: Whether any host has a budget (fetches are counted only then): a plain attribute,
        #: since every fetch's end tests it.
        self.active = bool(default)

    @property
    def default(self) -> int:
        """Fetches allowed per host (0: unlimited), unless the host has its own."""
        return self._default

    @default.setter
    def default(self, fetches: int) -> None:
        self._default = fetches
        self._refresh()

    @property
    def by_policy(self) -> Callable[[str], int | None] | None:
        """A host's budget from its per-host policy (None: none there), below the host's
        own budget and above the default."""
        return self._by_policy

    @by_policy.setter
    def by_policy(self, lookup: Callable[[str], int | None] | None) -> None:
        self._by_policy = lookup
        self._refresh()

    def set(self, host: str, fetches: int | None) -> None:
        """``host`` may be fetched ``fetches`` times in all (None: the default; 0:
        unlimited)."""
        if fetches is None:
            self._own.pop(host, None)
        elif fetches < 0:
            raise ValueError(f"a budget must be >= 0, got {fetches}")
        else:
            self._own[host] = fetches
        self._refresh()

    def _refresh(self) -> None:
        self.active = bool(self._default or self._own or self._by_policy)

    def of(self, host: str) -> int:
        own = self._own.get(host)
        if own is not None:
            return own
        if self._by_policy is not None:
            found = self._by_policy(host)
            if found is not None:
                return found
        return self._default

    def fetched(self, host: str) -> int:
        """Fetches of ``host`` completed so far (counted while a budget is in force)."""
        return self._fetched.get(host, 0)

    def counts(self) -> dict[str, int]:
        return dict(self._fetched)

    def restore(self, host: str, count: int) -> None:
        """A count saved by an earlier run."""
        self._fetched[host] = count

    def count(self, host: str) -> bool:
        """One more fetch of ``host``; True if that spent its budget."""
        self._fetched[host] = self._fetched.get(host, 0) + 1
        return self.spent(host)

    def spent(self, host: str) -> bool:
        cap = self.of(host)
        return cap > 0 and self._fetched.get(host, 0) >= cap
