"""The backend contract: checked when a backend is loaded and built, and listed in the docs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from scrapy_frontier.backends.ports import (
    Backend,
    BackendContext,
    HistoryPort,
    HostControlPort,
    InspectPort,
    QueuePort,
    RobotsPort,
    build_backend,
    contract_members,
    load_backend,
)
from scrapy_frontier.errors import FrontierConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends.rst"


class NotABackend:
    def claim(self) -> None:
        return None


class HalfBackend(Backend):
    """Leaves ``close`` out."""

    def __init__(self, context: BackendContext) -> None:
        pass

    def open(self, spider: Any) -> None:
        pass


class QueueWithoutClaim(QueuePort):
    def push(self, request: Any, host: str, level: int, seen: Any = None) -> bool:
        return True

    def complete(self, ticket: int, seconds: float, rest: float,
                 ended_at: float | None = None, *, sent: bool = True) -> object:
        return None

    def ack(self, token: object) -> None:
        pass

    def __len__(self) -> int:
        return 0

    def has_pending(self) -> bool:
        return False

    def next_wakeup(self) -> float | None:
        return None


class BackendWithABadQueue(Backend):
    def __init__(self, context: BackendContext) -> None:
        self.queue = QueueWithoutClaim()  # type: ignore[abstract]

    def open(self, spider: Any) -> None:
        pass

    def close(self, reason: str) -> None:
        pass


class BackendWithoutInspection(BackendWithABadQueue):
    def __init__(self, context: BackendContext) -> None:
        from scrapy_frontier.backends.memory import MemoryBackend

        whole = MemoryBackend(context)
        self.queue, self.history, self.controls = whole.queue, whole.history, whole.controls


def test_the_shipped_backends_load() -> None:
    for name in ("memory", "sqlite", "redis"):
        from scrapy_frontier.settings import BACKENDS

        assert issubclass(load_backend(BACKENDS[name]), Backend)


def test_a_class_that_is_not_a_backend_is_refused_at_load() -> None:
    with pytest.raises(FrontierConfigError, match="is not a backend: a backend subclasses"):
        load_backend(f"{__name__}.NotABackend")
    with pytest.raises(FrontierConfigError, match="cannot be imported"):
        load_backend(f"{__name__}.Nowhere")


def test_a_backend_missing_a_member_is_refused_at_load_with_its_name() -> None:
    with pytest.raises(FrontierConfigError, match=r"does not implement HalfBackend\.close"):
        load_backend(f"{__name__}.HalfBackend")


def test_a_port_missing_a_member_is_refused_when_built(context: BackendContext) -> None:
    cls = load_backend(f"{__name__}.BackendWithABadQueue")
    with pytest.raises(FrontierConfigError, match="QueueWithoutClaim.*claim"):
        build_backend(cls, context)


def test_a_backend_missing_a_port_is_refused_when_built(context: BackendContext) -> None:
    cls = load_backend(f"{__name__}.BackendWithoutInspection")
    with pytest.raises(FrontierConfigError, match="has no inspection port.*InspectPort"):
        build_backend(cls, context)


def test_optional_members_have_defaults() -> None:
    assert QueuePort.holds(None, 1) is True  # type: ignore[arg-type]
    assert QueuePort.give_back(None, 1) is None  # type: ignore[arg-type]
    assert InspectPort.quarantine_size(None) == 0  # type: ignore[arg-type]


def test_the_docs_list_the_contract_as_the_code_has_it() -> None:
    """docs/backends.rst, "Writing a backend": one list per port, each member named once, as
    required or optional; a member added to or dropped from a port fails here."""
    text = DOCS.read_text()
    section = text[text.index("Writing a backend"):]
    for port, (required, optional) in contract_members().items():
        block = re.search(rf"``{port}``.*?\n\n(.*?)(?:\n\n[^ *]|\Z)", section, re.S)
        assert block, f"docs/backends.rst does not list {port}"
        listed = dict(re.findall(r"^\* ``(\w+)``[^(\n]*?\((required|optional)\)",
                                 block.group(1), re.M))
        expected = {**dict.fromkeys(required, "required"), **dict.fromkeys(optional, "optional")}
        assert listed == expected, port


def test_the_ports_are_small() -> None:
    """Narrow ports: a third party implements a handful of methods per port."""
    for port in (QueuePort, HistoryPort, HostControlPort, InspectPort, RobotsPort, Backend):
        required, optional = contract_members()[port.__name__]
        assert len(required) + len(optional) <= 10, port.__name__


@pytest.fixture
def context() -> BackendContext:
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.settings import FrontierConfig

    crawler = get_crawler()
    config = FrontierConfig.from_settings(crawler.settings)
    assert crawler.stats is not None
    return BackendContext(crawler=crawler, config=config, stats=crawler.stats,
                          clock=lambda: 0.0, dupefilter=None,  # type: ignore[arg-type]
                          wake=lambda: None, fail=lambda reason, exc: None)
