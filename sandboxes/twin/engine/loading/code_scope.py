"""The twin code a remembered outcome depends on: the modules its entry points import, followed through the twin's
own packages (``sources()``).

A weight load, a model's description and its checkpoint are kept under a key that hashes the code that computed
them, so that an entry computed by other code is never taken for this code's outcome. Hashing every file of the
twin made any edit (of the performance model, the HTTP server, the memory plan) recompute every entry, although none
of them runs during a load. The code that can run is what the entry modules import, directly or through the
modules they import, inside a function or at the top (``from .x import y``, ``from ..pkg import mod``, ``import
sandboxes.twin.x``), plus the parts of their callers that decide the arguments (``CALLERS``: the function's own
source). ``tests/twin/test_weights_cache.py`` checks that a real load imports nothing outside that scope.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TWIN = Path(__file__).resolve().parents[2]  # sandboxes/twin
# where a load, a model's description, its checkpoint and the node's own checks begin
ENTRIES = ("engine/loading/loader.py", "engine/loading/platform.py", "engine/loading/model_checks.py",
           "models/description.py", "models/derive.py", "models/release_checkpoint.py")  # fmt: skip
# functions outside that scope that build a load's arguments: their source is part of the code hashed
CALLERS = {"launch_server.py": ("load_weights",)}

_FROM = re.compile(r"^\s*from\s+(\.+)([\w.]*)\s+import\s+(\([^)]*\)|[^\n#]+)", re.M)
_ABSOLUTE = re.compile(r"^\s*(?:from\s+sandboxes\.twin\.?([\w.]*)\s+import\s+(\([^)]*\)|[^\n#]+)"
                       r"|import\s+sandboxes\.twin\.([\w.]+))", re.M)  # fmt: skip


def _module(parts: list[str]) -> Path | None:
    path = TWIN.joinpath(*parts) if parts else TWIN
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if parts and path.with_suffix(".py").is_file() else None


def _targets(module: list[str], names: str) -> list[list[str]]:
    """The module and, for each imported name that is a module of it, that module; and every package on the way."""
    out = []
    for q in [module] + [module + [n.split()[0]] for n in names.strip("() \n").replace("\n", " ").split(",") if n.strip()]:
        out += [q[:i] for i in range(len(q) + 1)]
    return out


def _imports(path: Path) -> set[Path]:
    text = path.read_text()
    package = list(path.relative_to(TWIN).parts[:-1])
    wanted: list[list[str]] = []
    for dots, module, names in _FROM.findall(text):
        base = package[: len(package) - (len(dots) - 1)] if len(dots) > 1 else package
        wanted += _targets(base + [p for p in module.split(".") if p], names)
    for module, names, plain in _ABSOLUTE.findall(text):
        wanted += _targets([p for p in (module or plain).split(".") if p], names)
    return {m for parts in wanted if (m := _module(parts)) is not None}


def sources() -> list[Path]:
    """The twin's source files the entries can run, in a stable order (the callers' files not among them)."""
    seen: set[Path] = set()
    todo = [TWIN / e for e in ENTRIES]
    while todo:
        path = todo.pop()
        if path in seen or "bundled_sglang" in path.parts:
            continue
        seen.add(path)
        todo += [p for p in _imports(path) if p not in seen]
    return sorted(seen, key=lambda p: p.parts)


def callers_source() -> str:
    """The source of ``CALLERS``' functions (a caller's file changing elsewhere leaves the entries as they were)."""
    out = []
    for file, names in CALLERS.items():
        text = (TWIN / file).read_text()
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                out.append(ast.get_source_segment(text, node) or "")
    return "\n".join(out)
