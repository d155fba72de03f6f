"""Run a workspace model class's constructor with the rest of the engine stubbed out, and record what it builds.

Some outcomes are decided in a constructor, not in a pure function: SGLang's NextN draft model decides in
``__init__`` which quantization config its decoder layer gets (``None`` when the exclude list names the whole
layer), and an upstream fix for a naming mismatch lives there too. The twin cannot import the file (it imports
torch and half the engine), so ``construct`` executes the whole module with an import hook:

* the standard library is imported for real;
* a name imported from the workspace's own ``sglang`` tree is its real definition when that definition is pure
  (``add_prefix``, ``should_ignore_layer``, ``WeightsMapper``: loaded with ``pure_code.load_definitions``);
* everything else (torch, transformers, the engine's layers) is a stub: calling a stub class records the call
  (``Built``: what was built, with which arguments) and returns a stub value, which is falsy, iterable as empty,
  and answers every attribute, call and operator with another stub value.

A function of the workspace that turns out to need what is stubbed (``is_cuda()`` needs torch) answers a stub
value too. So the constructor's own logic runs as written, and the caller reads from the recorded calls which
quantization config reached the module built under a given prefix. Standard library only.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .pure_code import PureCodeError, bound_names, exception_line, load_definitions, parse

_STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
_FUTURE_ANNOTATIONS = __import__("__future__").annotations.compiler_flag


class ConstructionError(RuntimeError):
    """The workspace's constructor raised (``line`` is the workspace file's line, 0 when unknown)."""

    def __init__(self, message: str, *, path: Path, line: int, kind: str) -> None:
        super().__init__(message)
        self.message, self.path, self.line, self.kind = message, path, line, kind


@dataclass
class Built:
    """One call of a stubbed engine class: ``what(*args, **kwargs)``."""

    what: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class Construction:
    instance: Any
    built: list[Built] = field(default_factory=list)

    def built_at(self, prefix: str) -> Built | None:
        """The module built with ``prefix=<prefix>`` (the engine's naming convention), if any."""
        return next((b for b in self.built if b.kwargs.get("prefix") == prefix), None)


# --- stubs ---------------------------------------------------------------------------------------------------


class StubValue:
    """Whatever a stubbed call returns: every use of it gives another stub value."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return StubValue()

    def __setattr__(self, name: str, value: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> StubValue:
        return StubValue()

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: Any) -> bool:
        return False

    def __getitem__(self, item: Any) -> StubValue:
        return StubValue()

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __enter__(self) -> StubValue:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        return 0.0

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (_stub_class("stub", _Recorder()),)

    def _op(self, *other: Any) -> StubValue:
        return StubValue()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _op
    __floordiv__ = __rfloordiv__ = __mod__ = __neg__ = __or__ = __ror__ = __and__ = __rand__ = _op

    def _false(self, other: Any) -> bool:
        return False

    __lt__ = __le__ = __gt__ = __ge__ = _false

    def __eq__(self, other: Any) -> bool:
        return self is other

    __hash__ = object.__hash__


class _Recorder:
    def __init__(self) -> None:
        self.built: list[Built] = []


class _StubMeta(type):
    """Stub classes: attributes are more stubs, calls are recorded. A workspace class deriving from a stub is
    a real class: calling it runs its own ``__init__``."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__name__}.{name}", cls._dz_recorder)

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls.__dict__.get("_dz_stub"):
            cls._dz_recorder.built.append(Built(cls.__name__, args, kwargs))
            return StubValue()
        return super().__call__(*args, **kwargs)


def _stub_init(self: Any, *args: Any, **kwargs: Any) -> None:
    pass


def _stub_getattr(self: Any, name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return StubValue()


def _stub_class(name: str, recorder: _Recorder) -> type:
    return _StubMeta(name.rpartition(".")[2] or name, (), {
        "_dz_stub": True, "_dz_recorder": recorder, "__init__": _stub_init, "__getattr__": _stub_getattr,
        "__qualname__": name})  # fmt: skip


# --- the engine's modules ------------------------------------------------------------------------------------


def _tolerant(fn: Any) -> Any:
    """A workspace function that needs what is stubbed (torch, the server's global arguments, a device) answers
    a stub value instead of raising: only the constructor's own code is held to what it raises."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            return StubValue()

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    call.__name__ = getattr(fn, "__name__", "function")
    return call


class _EngineModule(types.ModuleType):
    """A module of the engine: real pure definitions from the workspace where they exist, stubs elsewhere."""

    def __init__(self, name: str, importer: _Importer) -> None:
        super().__init__(name)
        self._dz_importer = importer

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        importer: _Importer = self.__dict__["_dz_importer"]
        if self.__name__.split(".")[0] == "sglang" and not importer.is_module(f"{self.__name__}.{attr}"):
            value: Any = _Lazy(importer, self.__name__, attr)  # resolved when used: most imports never are
        else:
            value = importer.definition(self.__name__, attr)
        setattr(self, attr, value)
        return value


class _Lazy:
    """A name imported from the engine, resolved on first use (a base class is always an engine stub)."""

    def __init__(self, importer: _Importer, module: str, name: str) -> None:
        self._dz = (importer, module, name)
        self._dz_value: Any = None

    def _resolve(self) -> Any:
        if self._dz_value is None:
            importer, module, name = self._dz
            self._dz_value = importer.definition(module, name)
        return self._dz_value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_dz"):
            raise AttributeError(name)
        return getattr(self._resolve(), name)

    def __getitem__(self, item: Any) -> Any:
        return self._resolve()[item]

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        importer, module, name = self._dz
        return (_stub_class(f"{module}.{name}", importer.recorder),)


class _Importer:
    def __init__(self, sglang_root: Path, recorder: _Recorder) -> None:
        self.python = sglang_root / "python"
        self.recorder = recorder
        self.modules: dict[str, _EngineModule] = {}

    def module(self, name: str) -> _EngineModule:
        if name not in self.modules:
            self.modules[name] = _EngineModule(name, self)
        return self.modules[name]

    def is_module(self, name: str) -> bool:
        return bool(self._files(name))

    def _files(self, module: str) -> list[Path]:
        base = self.python.joinpath(*module.split("."))
        return [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]

    def binds(self, module: str, name: str) -> bool:
        for path in self._files(module):
            try:
                if any(name in bound_names(n) for n in parse(path).body):
                    return True
            except PureCodeError:
                continue
        return False

    def _reexport(self, module: str, path: Path, tree: ast.Module, name: str) -> str | None:
        """The module a package's ``__init__`` takes ``name`` from (``from .common import *`` counts)."""
        if path.name != "__init__.py":
            return None
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                parts = module.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            if not source or source == module:
                continue
            if any(a.name == name and a.asname in (None, name) for a in node.names):
                return source
            if any(a.name == "*" for a in node.names) and self.binds(source, name):
                return source
        return None

    def definition(self, module: str, name: str) -> Any:
        """``module.name``: a pure definition of the workspace when there is one, else a stub (or a submodule)."""
        if module.split(".")[0] == "sglang":
            for path in self._files(module):
                try:
                    tree = parse(path)
                except PureCodeError:
                    continue
                source = self._reexport(module, path, tree, name)
                if source is not None:
                    return self.definition(source, name)
                node = next((n for n in tree.body if name in bound_names(n)), None)
                if isinstance(node, ast.ClassDef) and node.bases:
                    break  # an engine class (a torch module, a config): stubbed, not loaded
                if node is not None:
                    try:
                        value = load_definitions(path, [name])[name]
                    except PureCodeError:
                        break
                    return value if isinstance(value, type) or not callable(value) else _tolerant(value)
            if self._files(f"{module}.{name}"):
                return self.module(f"{module}.{name}")
        return _stub_class(f"{module}.{name}", self.recorder)

    def __call__(self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level:
            package = (globals or {}).get("__package__") or ""
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - (level - 1)])
            name = f"{base}.{name}" if name else base
        if name.split(".")[0] in _STDLIB:
            return builtins.__import__(name, globals, locals, fromlist, 0)
        if fromlist:
            return self.module(name)
        top = name.split(".")[0]
        parent = self.module(top)
        for part in name.split(".")[1:]:  # `import a.b.c` binds `a`, whose attributes lead to `c`
            child = self.module(f"{parent.__name__}.{part}")
            setattr(parent, part, child)
            parent = child
        return self.module(top)


def construct(sglang_root: Path, rel_path: str, class_name: str, /, **kwargs: Any) -> Construction:
    """Execute ``rel_path`` (a module of the workspace's SGLang tree) with the engine stubbed and call
    ``class_name(**kwargs)``. Raises ``PureCodeError`` when the file does not parse or lacks the class, and
    ``ConstructionError`` when the module or the constructor raises."""
    path = Path(sglang_root) / rel_path
    tree = parse(path)
    if not any(isinstance(n, ast.ClassDef) and n.name == class_name for n in tree.body):
        raise PureCodeError(f"cannot import name {class_name!r} from {path}", path=path)
    recorder = _Recorder()
    importer = _Importer(Path(sglang_root), recorder)
    module_name = rel_path.removeprefix("python/").removesuffix(".py").replace("/", ".")
    namespace: dict[str, Any] = {"__name__": module_name, "__file__": str(path),
                                 "__package__": module_name.rpartition(".")[0],
                                 "__builtins__": {**vars(builtins), "__import__": importer}}  # fmt: skip
    try:
        exec(compile(tree, str(path), "exec", flags=_FUTURE_ANNOTATIONS, dont_inherit=True), namespace)
        instance = namespace[class_name](**kwargs)
    except Exception as exc:
        raise ConstructionError(f"{type(exc).__name__}: {exc}", path=path, line=exception_line(exc, path),
                                kind=type(exc).__name__) from None  # fmt: skip
    return Construction(instance=instance, built=recorder.built)

