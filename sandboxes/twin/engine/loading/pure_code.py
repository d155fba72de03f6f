"""Run the workspace's own copy of a pure function of the engine, without importing the engine.

Where the real SGLang tree has a pure function that decides an outcome (Quark's exclude matching, a model's
weight-name mapper), the twin runs the workspace's copy of it: a fix made in the engine's source is then
honoured exactly as a fix made in the checkpoint's config. The files themselves import torch and much more,
so they cannot be imported here; instead ``load_definitions`` parses the file, takes the named top-level
definitions (and every top-level definition they use, transitively), keeps the file's imports of the standard
library, and executes just that. ``class_attribute`` evaluates one class-level assignment (such as a model's
``hf_to_sglang_mapper = WeightsMapper(...)``) the same way.

A syntax error or a missing name raises ``PureCodeError`` whose ``frames`` point at the workspace file and
line, so the caller can print the traceback a real import would have printed. Standard library only.
"""

from __future__ import annotations

import ast
import builtins
import collections
import itertools
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"__future__"}


class PureCodeError(RuntimeError):
    """The workspace file could not provide the definitions (``line`` is 1-based, 0 when unknown)."""

    def __init__(self, message: str, *, path: Path, line: int = 0, kind: str = "ImportError") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.kind = kind


@dataclass(frozen=True)
class _Top:
    names: tuple[str, ...]
    node: ast.stmt


def bound_names(node: ast.stmt) -> tuple[str, ...]:
    """The names a top-level statement binds (a def, a class, an assignment to plain names)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return (node.name,)
    if isinstance(node, ast.Assign):
        return tuple(t.id for t in node.targets if isinstance(t, ast.Name))
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return (node.target.id,)
    return ()


def _used_names(node: ast.AST) -> set[str]:
    """Names a definition uses when it is defined or run. Annotations are left out: they are compiled as text
    (``from __future__ import annotations``), so a type named only there is never needed."""
    return names_under(node, unannotated_children)


def names_under(node: ast.AST, children: Callable[[ast.AST], Iterable[ast.AST]]) -> set[str]:
    """The names (``ast.Name`` ids) in ``node`` and what ``children`` descends into from each node."""
    names: set[str] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Name):
            names.add(n.id)
        todo.extend(children(n))
    return names


def unannotated_children(node: ast.AST) -> list[ast.AST]:
    """``node``'s child nodes but its annotations (``annotation``, ``returns``: compiled as text)."""
    out: list[ast.AST] = []
    for name, value in ast.iter_fields(node):
        if name in ("annotation", "returns"):
            continue
        if isinstance(value, ast.AST):
            out.append(value)
        elif isinstance(value, list):
            out.extend(v for v in value if isinstance(v, ast.AST))
    return out


def _is_stdlib_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] in _STDLIB for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in _STDLIB
    return False


_MODULE_NUMBERS = itertools.count(1)
_PARSED: dict[Path, tuple[tuple[int, int], ast.Module]] = {}
# the same text under another path (every workspace holds a copy of the release): parsed once, a few hundred files
_BY_TEXT: collections.OrderedDict[str, ast.Module] = collections.OrderedDict()
_BY_TEXT_MAX = 512


def parsed_files() -> list[Path]:
    """Every file this process has parsed (what a result computed from workspace code depends on)."""
    return list(_PARSED)


def parse(path: Path) -> ast.Module:
    """The file's syntax tree (cached while the file is unchanged, and by its text; callers never modify it)."""
    try:
        st = path.stat()
        cached = _PARSED.get(path)
        if cached is not None and cached[0] == (st.st_mtime_ns, st.st_size):
            return cached[1]
        source = path.read_text()
    except FileNotFoundError:
        raise PureCodeError(f"No such file: {path}", path=path, kind="ModuleNotFoundError") from None
    tree = _BY_TEXT.get(source)
    if tree is not None:
        _BY_TEXT.move_to_end(source)
        _PARSED[path] = ((st.st_mtime_ns, st.st_size), tree)
        return tree
    try:
        tree = ast.parse(source, filename=str(path))
        _PARSED[path] = ((st.st_mtime_ns, st.st_size), tree)
        _BY_TEXT[source] = tree
        if len(_BY_TEXT) > _BY_TEXT_MAX:
            _BY_TEXT.popitem(last=False)
        return tree
    except SyntaxError as exc:
        error = PureCodeError(f"{exc.msg} ({path.name}, line {exc.lineno})", path=path, line=exc.lineno or 0,
                              kind="SyntaxError")  # fmt: skip
        error.syntax_error = exc  # type: ignore[attr-defined]
        raise error from None


def _closure(tree: ast.Module, wanted: Iterable[str], path: Path) -> list[ast.stmt]:
    tops = [_Top(bound_names(n), n) for n in tree.body if bound_names(n)]
    by_name: dict[str, list[_Top]] = {}
    for t in tops:  # every statement that binds a name (a redefinition may use the earlier one)
        for name in t.names:
            by_name.setdefault(name, []).append(t)
    chosen: dict[int, ast.stmt] = {}
    todo = list(wanted)
    while todo:
        for top in by_name.get(todo.pop(), []):
            if id(top.node) not in chosen:
                chosen[id(top.node)] = top.node
                todo.extend(_used_names(top.node) - set(dir(builtins)))
    missing = [w for w in wanted if w not in by_name]
    if missing:
        raise PureCodeError(f"cannot import name {missing[0]!r} from {path}", path=path)
    return [n for n in tree.body if id(n) in chosen]


def load_definitions(path: Path, names: Iterable[str], *, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Execute the named top-level definitions of ``path`` (with what they use) and return the namespace."""
    names = list(names)
    tree = parse(path)
    body = [n for n in tree.body if _is_stdlib_import(n)] + _closure(tree, names, path)
    module = ast.Module(body=body, type_ignores=[])
    # a real module object: dataclasses resolve string annotations through sys.modules[cls.__module__]
    module_name = f"dayzero_twin_workspace_{next(_MODULE_NUMBERS)}"
    holder = types.ModuleType(module_name)
    holder.__file__ = str(path)
    holder.__dict__.update(extra or {})
    sys.modules[module_name] = holder
    namespace = holder.__dict__
    flags = __import__("__future__").annotations.compiler_flag  # annotations stay text: torch is never needed
    try:
        code = compile(module, str(path), "exec", flags=flags, dont_inherit=True)
        exec(code, namespace)
    except Exception as exc:  # the workspace's own code failed while being defined
        line = exception_line(exc, path)
        raise PureCodeError(f"{type(exc).__name__}: {exc}", path=path, line=line, kind=type(exc).__name__) from None
    return namespace


def class_attribute(path: Path, class_name: str, attribute: str, namespace: dict[str, Any]) -> tuple[bool, Any]:
    """``(found, value)`` of ``class_name.attribute`` as assigned in the class body of ``path``.

    Base classes are not followed; ``found`` is False when the class body does not assign it.
    """
    tree = parse(path)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        raise PureCodeError(f"cannot import name {class_name!r} from {path}", path=path)
    for node in cls.body:
        if attribute in bound_names(node):
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if value is None:
                return True, None
            try:
                expr = ast.Expression(body=value)
                return True, eval(compile(expr, str(path), "eval", dont_inherit=True), dict(namespace))
            except Exception as exc:
                raise PureCodeError(f"{type(exc).__name__}: {exc}", path=path, line=node.lineno,
                                    kind=type(exc).__name__) from None  # fmt: skip
    return False, None


def named_code(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` and every code object inside it (functions, classes, comprehensions) naming ``filename``, as if
    compiled from it: what tracebacks print (a compiled file kept by its contents is run from another path)."""
    if code.co_filename == filename:
        return code
    consts = tuple(named_code(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def definition_line(path: Path, name: str, class_name: str | None = None) -> int:
    """1-based line of a top-level (or class-level) definition of ``name`` in ``path``; 0 if absent."""
    try:
        tree = parse(path)
    except PureCodeError:
        return 0
    body = tree.body
    if class_name is not None:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
        body = cls.body if cls is not None else []
    for node in body:
        if name in bound_names(node):
            return node.lineno
    return 0


def exception_line(exc: BaseException, path: Path) -> int:
    """The last line of ``path`` the exception's traceback passed through (0 when none)."""
    tb = exc.__traceback__
    line = 0
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(path):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
