"""Fail unless this venv runs exactly the pinned oldest versions, and each pin is the floor
that pyproject.toml declares for it (its dependencies and the ``redis`` and ``metrics``
extras).

Usage: python .ci/check_pins.py .ci/constraints-oldest.txt
"""

from __future__ import annotations

import sys
from importlib.metadata import requires, version

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version


def pins(path: str) -> dict[str, Version]:
    out: dict[str, Version] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            spec = line.split("#", 1)[0].strip()
            if spec:
                name, _, pinned = spec.partition("==")
                out[canonicalize_name(name)] = Version(pinned)
    return out


def floors() -> dict[str, Version]:
    """The ``>=`` floors of the runtime dependencies and of the ``redis`` and ``metrics``
    extras."""
    out: dict[str, Version] = {}
    for text in requires("scrapy-frontier") or ():
        req = Requirement(text)
        if req.marker is not None and not any(
                req.marker.evaluate({"extra": extra}) for extra in ("redis", "metrics")):
            continue  # test and dev tools: not pinned
        for spec in req.specifier:
            if spec.operator == ">=":
                out[canonicalize_name(req.name)] = Version(spec.version)
    return out


def main(path: str) -> int:
    pinned, declared = pins(path), floors()
    problems = []
    for name in sorted(pinned.keys() | declared.keys()):
        want, floor = pinned.get(name), declared.get(name)
        if want is None or floor is None or want != floor:
            problems.append(f"{name}: pyproject floor {floor}, {path} pins {want}")
            continue
        got = Version(version(name))
        if got != want:
            problems.append(f"{name}: {got} installed, {path} pins {want}")
    for problem in problems:
        print("check_pins:", problem, file=sys.stderr)
    if not problems:
        print("check_pins: " + ", ".join(f"{n}=={v}" for n, v in sorted(pinned.items())))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
