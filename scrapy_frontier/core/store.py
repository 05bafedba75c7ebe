"""Where the frontier keeps its URLs: the storage contract and the memory store.

:class:`~scrapy_frontier.core.frontier.Frontier` owns the scheduling state
(which hosts are active, the ready heap, leases); a :class:`QueueStore` owns
the URLs themselves: the F front queues and one back queue per active host.
The memory store keeps everything in deques; the SQLite store
(:mod:`scrapy_frontier.backends.sqlite.queue`) keeps small windows in memory and the
rest on disk, and survives a crash.

Every URL handed out is *leased* from the store and *acknowledged* when its
fetch is over; a durable store keeps leased URLs until then, so a crash
re-queues them (at-least-once).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class QueueStore(Protocol[T]):
    """The storage contract. Levels are 1..F, F highest."""

    #: URLs set aside so far because they cannot be rebuilt (see back_lease).
    undecodable: int

    # -- front queues: FIFO per level, URLs of hosts without a back queue ---
    def front_append(self, level: int, host: str, item: T) -> None: ...
    def front_levels(self) -> list[int]:
        """The levels whose front queue is not empty, ascending."""
        ...

    def front_head_host(self, level: int) -> str:
        """The host of the URL at the head of front queue ``level``."""
        ...

    def front_to_back(self, level: int) -> str:
        """Move the head of front queue ``level`` to the end of its host's back
        queue at the same level (the host must own one); return the host."""
        ...

    def front_items(self) -> Iterator[tuple[str, int, T]]: ...

    # -- back queues: per active host, highest level first, FIFO within ----
    def back_open(self, host: str) -> None: ...
    def back_close(self, host: str) -> None:
        """The host gave up its back queue (which is empty)."""
        ...

    def back_append(self, host: str, level: int, item: T) -> None: ...
    def back_len(self, host: str) -> int: ...
    def back_head_level(self, host: str) -> int: ...
    def back_lease(self, host: str) -> tuple[int, T, object] | None:
        """Take the head URL: (level, item, token for :meth:`ack`).

        A durable store may set aside rows it cannot read back on the way (they
        leave :meth:`back_len`); None if that emptied the queue.
        """
        ...

    def ack(self, token: object) -> None:
        """The leased URL's fetch is over: forget it for good."""
        ...

    def back_items(self, host: str) -> Iterator[tuple[int, T]]: ...

    # -- hosts -----------------------------------------------------------------
    def save_rest(self, host: str, rest_seconds: float, last_fetch: float | None) -> None:
        """Remember the host's rest so that a restart honours it."""
        ...


class BackQueue(Generic[T]):
    """One host's URLs: highest level first, FIFO within a level.

    One deque per level in use, so an entry costs one pointer (no tuple).
    """

    __slots__ = ("_levels", "_size")

    def __init__(self) -> None:
        self._levels: dict[int, deque[T]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def append(self, level: int, item: T) -> None:
        queue = self._levels.get(level)
        if queue is None:
            queue = self._levels[level] = deque()
        queue.append(item)
        self._size += 1

    def head_level(self) -> int:
        return max(self._levels)

    def popleft(self) -> tuple[int, T]:
        level = max(self._levels)
        queue = self._levels[level]
        item = queue.popleft()
        if not queue:
            del self._levels[level]
        self._size -= 1
        return level, item

    def items(self) -> Iterator[tuple[int, T]]:
        for level in sorted(self._levels, reverse=True):
            for item in self._levels[level]:
                yield level, item


class MemoryQueueStore(Generic[T]):
    """Everything in memory: nothing survives the process."""

    undecodable = 0  # items in memory are never rebuilt

    def __init__(self, levels: int) -> None:
        # Front queue i holds level i + 1, as two parallel deques (no tuple per URL).
        self._front: list[deque[T]] = [deque() for _ in range(levels)]
        self._front_hosts: list[deque[str]] = [deque() for _ in range(levels)]
        self._back: dict[str, BackQueue[T]] = {}

    def front_append(self, level: int, host: str, item: T) -> None:
        self._front[level - 1].append(item)
        self._front_hosts[level - 1].append(host)

    def front_levels(self) -> list[int]:
        return [i + 1 for i, queue in enumerate(self._front) if queue]

    def front_head_host(self, level: int) -> str:
        return self._front_hosts[level - 1][0]

    def front_to_back(self, level: int) -> str:
        host = self._front_hosts[level - 1].popleft()
        self._back[host].append(level, self._front[level - 1].popleft())
        return host

    def front_items(self) -> Iterator[tuple[str, int, T]]:
        for index, queue in enumerate(self._front):
            for host, item in zip(self._front_hosts[index], queue, strict=True):
                yield host, index + 1, item

    def back_open(self, host: str) -> None:
        self._back[host] = BackQueue()

    def back_close(self, host: str) -> None:
        del self._back[host]

    def back_append(self, host: str, level: int, item: T) -> None:
        self._back[host].append(level, item)

    def back_len(self, host: str) -> int:
        return len(self._back[host])

    def back_head_level(self, host: str) -> int:
        return self._back[host].head_level()

    def back_lease(self, host: str) -> tuple[int, T, object] | None:
        level, item = self._back[host].popleft()
        return level, item, None

    def ack(self, token: object) -> None:
        pass

    def back_items(self, host: str) -> Iterator[tuple[int, T]]:
        return self._back[host].items()

    def save_rest(self, host: str, rest_seconds: float, last_fetch: float | None) -> None:
        pass
