"""Run workspace definitions with what they import from the workspace, without the engine's dependencies.

``pure_code.load_definitions`` runs chosen definitions of one file with its standard-library imports only.
Some of the release's pure code needs names other workspace files define: ``ServerArgs.add_cli_args`` takes
its flag types from ``utils/common.py``, the tool-call parsers' names from ``function_call/``, its argparse
actions (in 0.5.13) from ``arg_groups/``. ``PureImports`` follows those imports through the workspace tree:

* a name a definition needs *while it is defined* (a base class, a decorator, a class-level constant, a default)
  is imported before it runs, by loading that name's own definition from the file it comes from, the same way,
  recursively;
* a name only a function body uses is imported when the body first uses it (the namespace's ``__missing__``: a
  function's globals may be a ``dict`` subclass; module and class bodies never consult it, hence the first rule);
* a third-party library is the installed one where ``LIBRARIES`` allows it (else its stand-in in ``STAND_INS``);
  anything else that cannot be had (torch, triton, a file that fails to define the name) is a ``StubValue``.

Failures of the code itself are never hidden: only *loading* a definition may fall back to a stub; a loaded
function that raises (``human_readable_int("x")``) raises as written. Every file read is in ``files_read`` (what a
result computed from it depends on); ``origin(obj)`` names the workspace module and name an object came from.
Standard library only.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib
import itertools
import json
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .pure_code import (
    PureCodeError,
    _closure,
    _is_stdlib_import,
    _used_names,
    bound_names,
    named_code,
    names_under,
    parse,
    unannotated_children,
)
from .stubs import StubValue

_STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
_FUTURE_ANNOTATIONS = __import__("__future__").annotations.compiler_flag
_BUILTINS = set(dir(builtins))
_NUMBERS = itertools.count(1)
_FORMAT = "1"  # of what the per-user cache keeps (``_summary``, ``_prepared``): bumped when that changes

# third-party libraries used as installed (pure Python, installed with the twin) when they import
LIBRARIES = frozenset({"yaml", "orjson", "packaging"})


def _orjson_stand_in() -> types.ModuleType:
    """``orjson`` as far as the release's argument parsing uses it, where it is not installed."""
    module = types.ModuleType("orjson")
    module.loads = json.loads  # type: ignore[attr-defined]
    module.dumps = lambda obj, *a, **k: json.dumps(obj).encode()  # type: ignore[attr-defined]
    module.JSONDecodeError = json.JSONDecodeError  # type: ignore[attr-defined]
    return module


STAND_INS = {"orjson": _orjson_stand_in}


class _Namespace(dict):
    """A workspace module's namespace whose imported names are resolved when a function body first uses them."""

    def __init__(self, importer: PureImports, module: str, imports: Mapping[str, tuple[str, str | None]]) -> None:
        super().__init__()
        self._importer, self._module, self._imports = importer, module, imports

    def __missing__(self, name: str) -> Any:
        if name not in self._imports:
            raise KeyError(name)
        value = self._importer.imported(*self._imports[name])
        self[name] = value
        return value


class _ModuleProxy:
    """``import sglang.x`` / ``from sglang import x`` of a workspace module: its names resolved on first use."""

    def __init__(self, importer: PureImports, module: str) -> None:
        self._dz = (importer, module)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_dz":
            raise AttributeError(name)
        importer, module = self._dz
        value = importer.imported(module, name)
        setattr(self, name, value)
        return value


def _definition_time_names(node: ast.AST) -> set[str]:
    """The names ``node`` uses while it is executed as a definition: all but function and lambda bodies (their
    decorators and defaults included, their annotations left out: they stay text)."""
    return names_under(node, _definition_time_children)


def _definition_time_children(n: ast.AST) -> list[ast.AST]:
    if isinstance(n, ast.Name):
        return []
    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        decorators = [] if isinstance(n, ast.Lambda) else n.decorator_list
        return [*decorators, *(d for d in (*n.args.defaults, *n.args.kw_defaults) if d is not None)]
    return unannotated_children(n)


def _top_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The file's import statements at module level (also inside a top-level ``try`` or ``if``)."""
    out: list[ast.Import | ast.ImportFrom] = []
    todo = list(tree.body)
    while todo:
        n = todo.pop(0)
        if isinstance(n, ast.Import | ast.ImportFrom):
            out.append(n)
        elif isinstance(n, ast.Try | ast.If):
            todo[:0] = [*n.body, *n.orelse]
    return out


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in _STDLIB


class PureImports:
    """The workspace tree under ``python_root`` (which holds ``sglang/``), its definitions loaded on demand."""

    def __init__(self, python_root: Path) -> None:
        self.root = Path(python_root)
        self.files_read: set[Path] = set()
        self._values: dict[tuple[str, str], Any] = {}
        self._origins: dict[int, tuple[str, str]] = {}
        self._loading: set[tuple[str, str]] = set()

    # --- where things are -------------------------------------------------------------------------------------

    def file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def origin(self, obj: Any) -> tuple[str, str] | None:
        """(module, name) of a top-level definition this importer loaded, or None."""
        return self._origins.get(id(obj))

    # --- values -----------------------------------------------------------------------------------------------

    def imported(self, module: str, name: str | None) -> Any:
        """What ``from module import name`` (``import module`` when ``name`` is None) gives workspace code here."""
        top = module.split(".")[0]
        if self.file(top) is None:  # a library, not the workspace's
            library = self._library(module)
            return library if name is None else getattr(library, name, StubValue())
        if name is None:
            return _ModuleProxy(self, module)
        return self.value(module, name)

    def _library(self, module: str) -> Any:
        top = module.split(".")[0]
        if top in LIBRARIES:
            try:
                return importlib.import_module(module)
            except ImportError:
                pass
        if module in STAND_INS:
            return STAND_INS[module]()
        return StubValue()

    def value(self, module: str, name: str) -> Any:
        """The workspace definition ``module.name``: loaded as written, a submodule as a module, a stub when it
        cannot be loaded without what the twin does not have."""
        key = (module, name)
        if key in self._values:
            return self._values[key]
        if key in self._loading:  # an import cycle: what the engine would see half-initialised
            return StubValue()
        self._loading.add(key)
        try:
            value = self._find(module, name)
        finally:
            self._loading.discard(key)
        self._values[key] = value
        return value

    def _find(self, module: str, name: str) -> Any:
        if self.file(f"{module}.{name}") is not None:
            return _ModuleProxy(self, f"{module}.{name}")
        path = self.file(module)
        if path is None:
            return StubValue()
        try:
            bound, imports, stars = _summary(path, module)
        except PureCodeError:
            return StubValue()
        self.files_read.add(path)
        if name in bound:
            try:
                namespace = self.load(module, [name])
            except PureCodeError:
                return StubValue()
            return dict.get(namespace, name, StubValue())  # bound only on a path not taken (``if``, ``try``)
        if name in imports:  # a re-export: ``from .common import name``
            return self.imported(*imports[name])
        for source in stars:  # ``from .common import *``
            found = self.value(source, name)
            if not isinstance(found, StubValue):
                return found
        return StubValue()

    def star_names(self, module: str) -> list[str]:
        """The names ``from module import *`` asks of it: its literal ``__all__``, else its public top-level
        names (defined or imported)."""
        path = self.file(module)
        if path is None:
            return []
        for node in parse(path).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in node.targets):  # fmt: skip
                try:
                    return [str(v) for v in ast.literal_eval(node.value)]
                except ValueError:
                    break
        bound, imports, _stars = _summary(path, module)
        return [n for n in [*bound, *imports] if not n.startswith("_")]

    def load(self, module: str, names: list[str]) -> dict[str, Any]:
        """Execute the named top-level definitions of ``module`` (with the definitions of its own they use, and
        its standard-library imports) and return the namespace. Raises ``PureCodeError``."""
        path = self.file(module)
        if path is None:
            raise PureCodeError(f"No module named '{module}'", path=self.root, kind="ModuleNotFoundError")
        self.files_read.add(path)
        code, imports, eager, defined = _prepared(path, module, sorted(set(names)))
        namespace = _Namespace(self, module, imports)
        module_name = f"dayzero_twin_pure_{next(_NUMBERS)}"
        namespace.update(__name__=module_name, __file__=str(path), __builtins__=builtins)
        # dataclasses and typing find a class's module by name (its namespace, as it is while the class is made)
        holder = _Holder()
        holder.__dict__ = namespace
        sys.modules[module_name] = holder  # type: ignore[assignment]
        for needed in eager:
            namespace[needed] = self.imported(*imports[needed])
        try:
            exec(code, namespace)  # noqa: S102 (the workspace's own source)
        except Exception as exc:
            raise PureCodeError(f"{type(exc).__name__}: {exc}", path=path, kind=type(exc).__name__) from None
        for bound in defined:
            if bound in namespace:
                self._origins.setdefault(id(namespace[bound]), (module, bound))
        return namespace


class _Holder:
    """What ``sys.modules`` holds for a loaded namespace: an object whose ``__dict__`` is that namespace."""


def _is_future(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


def _tolerated(node: ast.stmt) -> ast.stmt:
    """``node`` in a ``try`` that ignores an ``ImportError`` (an optional module of the standard library)."""
    handler = ast.ExceptHandler(type=ast.Name("ImportError", ast.Load()), name=None, body=[ast.Pass()])
    return ast.copy_location(ast.Try(body=[node], handlers=[handler], orelse=[], finalbody=[]), node)


def _only(node: ast.Import | ast.ImportFrom, used: set[str]) -> ast.stmt | None:
    """The import ``node`` binding only the names in ``used`` (None: none): a module of the standard library that
    nothing chosen uses is not imported (``utils/common.py`` imports dozens)."""
    names = [a for a in node.names if (a.asname or a.name.split(".")[0]) in used]
    if not names:
        return None
    if isinstance(node, ast.Import):
        return ast.copy_location(ast.Import(names=names), node)
    return ast.copy_location(ast.ImportFrom(module=node.module, names=names, level=node.level), node)


def _source_module(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` of ``module`` (whose file is ``path``) imports from."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _import_table(module: str, path: Path, tree: ast.Module) -> dict[str, tuple[str, str | None]]:
    """Name -> (module, attribute; None for the module itself) for the file's imports of other than the
    standard library."""
    table: dict[str, tuple[str, str | None]] = {}
    for node in _top_imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_stdlib(alias.name):
                    top = alias.name.split(".")[0]
                    table.setdefault(alias.asname or top, (alias.name if alias.asname else top, None))
            continue
        source = _source_module(module, path, node)
        if source and not _is_stdlib(source):
            for alias in node.names:
                if alias.name != "*":
                    table.setdefault(alias.asname or alias.name, (source, alias.name))
    return table


def _keyed(path: Path, *salt: str) -> Path:
    """The per-user cache file of what is derived from ``path``'s contents (and ``salt``), like a .pyc."""
    from ...workspace.release import cache_dir

    key = hashlib.sha256(path.read_bytes() + "\0".join(("pure", _FORMAT, sys.version, *salt)).encode()).hexdigest()[:40]
    return cache_dir() / "compiled" / f"{key}.bin"


def _summary(path: Path, module: str) -> tuple[list[str], dict[str, tuple[str, str | None]], list[str]]:
    """The names ``path`` defines at top level, its import table, the modules it star-imports from."""
    from ... import cache_files

    def make() -> tuple[Any, ...]:
        tree = parse(path)
        bound = sorted({name for node in tree.body for name in bound_names(node)})
        stars = [_source_module(module, path, n) for n in _top_imports(tree)
                 if isinstance(n, ast.ImportFrom) and n.level and any(a.name == "*" for a in n.names)]  # fmt: skip
        return bound, _import_table(module, path, tree), stars

    bound, imports, stars = cache_files.marshalled(_keyed(path, "summary", module), make)
    return list(bound), dict(imports), list(stars)


def _prepared(path: Path, module: str, names: list[str]) -> tuple[types.CodeType, dict, list[str], list[str]]:
    """What ``PureImports.load`` runs for ``names`` of ``path``: the code (the file's standard-library imports and
    the chosen definitions), its import table, the imported names needed while it runs, the names it defines.
    Kept in the per-user cache by the file's contents: parsing a large file is what costs."""
    from ... import cache_files

    def make() -> tuple[Any, ...]:
        tree = parse(path)
        chosen = _closure(tree, names, path)
        imports = _import_table(module, path, tree)
        defined = sorted({name for node in chosen for name in bound_names(node)})
        eager = sorted({needed for node in chosen for needed in _definition_time_names(node)
                        if needed in imports and needed not in defined})  # fmt: skip
        used = set().union(*(_used_names(n) for n in chosen))
        stdlib = [_tolerated(n) for n in (_only(n, used) for n in _top_imports(tree) if _is_stdlib_import(n)
                                          and not _is_future(n)) if n is not None]  # fmt: skip
        code = compile(ast.fix_missing_locations(ast.Module(body=stdlib + chosen, type_ignores=[])), str(path),
                       "exec", flags=_FUTURE_ANNOTATIONS, dont_inherit=True)  # fmt: skip
        return code, imports, eager, defined

    code, imports, eager, defined = cache_files.marshalled(_keyed(path, "load", module, ",".join(names)), make)
    return named_code(code, str(path)), dict(imports), list(eager), list(defined)
