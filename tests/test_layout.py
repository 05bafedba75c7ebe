"""The package's layers, checked from its source: no import cycles, a pure core."""

from __future__ import annotations

import ast
from pathlib import Path

import scrapy_frontier

ROOT = Path(scrapy_frontier.__file__).parent
PKG = "scrapy_frontier"
#: What the core must never import: it is plain Python with an injected clock.
IMPURE = ("scrapy", "twisted", "sqlite3", "redis", "w3lib")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(path: Path) -> set[str]:
    """Every module name ``path`` imports, at any depth (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for name in _imports(path):
            while name and name not in mods:
                name = name.rpartition(".")[0]
            # Importing a.b.c runs a/__init__ and a/b/__init__ first.
            while name and name != PKG:
                if name != mod and not mod.startswith(name + "."):
                    edges[mod].add(name)
                name = name.rpartition(".")[0]
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_core_imports_no_scrapy_twisted_sqlite_or_redis() -> None:
    for mod, path in _modules().items():
        if mod == f"{PKG}.core" or mod.startswith(f"{PKG}.core."):
            bad = {n for n in _imports(path) if n.split(".")[0] in IMPURE}
            bad |= {n for n in _imports(path)
                    if n.startswith(PKG) and not n.startswith(f"{PKG}.core")}
            assert not bad, f"{mod} imports {sorted(bad)}"


def test_one_meta_key_module_and_one_error_module() -> None:
    """``frontier_*`` meta keys are defined in meta.py only; errors in errors.py only."""
    for mod, path in _modules().items():
        text = path.read_text()
        if mod != f"{PKG}.meta":
            assert '_META = "frontier_' not in text, f"{mod} defines a meta key"
        if mod != f"{PKG}.errors":
            tree = ast.parse(text)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                    assert not bases & {"Exception", "RuntimeError", "ValueError"}, (
                        f"{mod} defines {node.name}")


def test_lua_scripts_ship_as_package_data() -> None:
    from scrapy_frontier.backends.redis.lua import lua_source

    for name in ("prelude", "push", "claim", "complete", "expire", "retire", "wakeup", "round",
                 "history_take_due", "census"):
        assert "return" in lua_source(name)
    assert "redis.call('TIME')" in lua_source("prelude")


def test_backends_and_reactor_helpers_never_import_the_scrapy_shell() -> None:
    """The layers go core <- backends <- scheduler (the Scrapy shell): a backend reaches the
    shell only through what the ports hand it, never by importing it."""
    shell = (f"{PKG}.scheduler", f"{PKG}.commands", f"{PKG}.addon", f"{PKG}.downloadermiddlewares",
             f"{PKG}.spidermiddlewares", f"{PKG}.dupefilter")
    for mod, path in _modules().items():
        if mod.startswith((f"{PKG}.backends", f"{PKG}.reactor")):
            bad = {n for n in _imports(path) if n.startswith(shell)}
            assert not bad, f"{mod} imports {sorted(bad)}"


def _size(node: ast.ClassDef) -> tuple[int, int]:
    """(attributes, methods) of a class: attributes are the names its body binds plus every
    ``self.X`` it assigns anywhere."""
    attrs: set[str] = set()
    methods: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            methods.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            attrs.add(item.target.id)
        elif isinstance(item, ast.Assign):
            attrs.update(t.id for t in item.targets if isinstance(t, ast.Name))
    for sub in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(sub, ast.Assign):
            targets = sub.targets
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
            targets = [sub.target]
        for target in targets:
            for e in ast.walk(target):
                if (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
                        and e.value.id == "self"):
                    attrs.add(e.attr)
    return len(attrs), len(methods)


def _class_sizes() -> list[tuple[str, str, int, int]]:
    """(module, class, attributes, methods) of every class in the package."""
    out = []
    for mod, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                out.append((mod, node.name, *_size(node)))
    return out


def test_the_scheduler_shell_is_no_larger_than_scrapys_scheduler() -> None:
    """The shell delegates: it has no more attributes or methods than the installed Scrapy's
    own ``Scheduler``, counted the same way."""
    import inspect

    import scrapy.core.scheduler

    theirs = next(node for node in ast.walk(ast.parse(inspect.getsource(scrapy.core.scheduler)))
                  if isinstance(node, ast.ClassDef) and node.name == "Scheduler")
    ours = next((a, m) for mod, name, a, m in _class_sizes() if name == "FrontierScheduler")
    limit = _size(theirs)
    assert ours[0] <= limit[0] and ours[1] <= limit[1], (ours, limit)


def test_no_class_has_more_than_30_attributes() -> None:
    """Small classes with one job each (Scrapy's Scheduler has 13 attributes)."""
    big = [(mod, name, attrs) for mod, name, attrs, _ in _class_sizes() if attrs > 30]
    assert big == []


def test_no_two_classes_share_a_name() -> None:
    """One name for one thing (docs/design.rst, Glossary)."""
    seen: dict[str, str] = {}
    twice = []
    for mod, name, _, _ in _class_sizes():
        if name in seen:
            twice.append((name, seen[name], mod))
        seen[name] = mod
    assert twice == []
