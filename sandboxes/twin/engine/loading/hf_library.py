"""``transformers`` as the workspace's code sees it: the real library, with only what needs torch stood in for.

The release makes a model's config with ``transformers`` (``AutoConfig``, the per-model config classes and their
nested text / vision / per-block configs, with their defaults) and registers its own classes into it; the twin
does the same with the real library, the version the pinned release requires, installed beside the twin. What
the library cannot give without torch (its model classes, ``transformers.activations``, anything whose module
imports torch) is a stub class, as every other engine class the twin does not simulate is; the library reports
those itself (an object of its ``DummyObject`` metaclass, or a module whose import fails for want of torch).

transformers keeps its model-type registry (``AutoConfig.register``) in the process: each executor gets its own
(``isolated_registry``), so a class one workspace registers never answers for another workspace's copy.

A name the library keeps for torch (it serves its placeholder without it: ``ROPE_INIT_FUNCTIONS``, ``ACT2FN``) is
its real definition, executed on the twin's torch as the workspace's engine code is (``definition``, the
executor's); a class among them (a model class) is a stub class there, as every engine class is.

The library's advice that PyTorch is missing, and that an image processor falls back for want of torchvision, are
true of the twin's process and never printed on a node, so they are not printed here either.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import logging
import os
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# library warnings about backends the twin's process lacks and a node has (torch, torchvision)
_ABSENT_BACKEND_WARNINGS = ("PyTorch was not found", "requires torchvision (not installed)", "requires torch (not installed)")


class _NodeOnlyFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in _ABSENT_BACKEND_WARNINGS)


def library() -> types.ModuleType:
    """The real ``transformers`` package (imported once per process, without its advice about torch)."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a node's configs are local files; the twin never downloads
    root = logging.getLogger("transformers")
    if not any(isinstance(f, _NodeOnlyFilter) for f in root.filters):
        root.addFilter(_NodeOnlyFilter())
    import transformers

    for handler in logging.getLogger("transformers").handlers:
        if not any(isinstance(f, _NodeOnlyFilter) for f in handler.filters):
            handler.addFilter(_NodeOnlyFilter())  # records of the library's child loggers pass the root's handler
    return transformers


def version() -> str:
    """The installed library's version (what a cached result of the config's parsing depends on)."""
    try:
        from importlib.metadata import version as dist_version

        return dist_version("transformers")
    except Exception:
        return "absent"


def _needs_torch(value: Any) -> bool:
    from transformers.utils.import_utils import DummyObject

    return isinstance(value, DummyObject) or isinstance(type(value), DummyObject)


def source_root() -> Path:
    """The folder of the installed library's source (``transformers/``)."""
    return Path(library().__file__).parent


@functools.lru_cache(maxsize=1)
def torch_names() -> dict[str, str]:
    """Name -> the submodule that defines it, for every name the library's ``__init__`` lists in its import
    structure (``_import_structure["modeling_rope_utils"] = [...]``): where a name it serves as a placeholder
    without torch really lives."""
    tree = ast.parse((source_root() / "__init__.py").read_text())
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        target, values = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, values = node.targets[0], node.value
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute) and node.value.func.attr in ("extend", "append")):  # fmt: skip
            target, values = node.value.func.value, (node.value.args[0] if node.value.args else None)
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                and target.value.id == "_import_structure" and isinstance(target.slice, ast.Constant)):  # fmt: skip
            continue
        names = values.elts if isinstance(values, ast.List | ast.Tuple) else [values]
        for n in names:
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                out.setdefault(n.value, str(target.slice.value))
    return out


Definition = Callable[[str, str], Any]  # (module, name) -> the name's definition run on the twin's torch


class _Bridge(types.ModuleType):
    """A module of the library: its attributes as the library has them; where the library keeps one for torch,
    its definition on the twin's torch (a stub class for a class)."""

    def __init__(self, real: types.ModuleType, stub: Callable[[str], Any], bridges: dict[str, Any],
                 definition: Definition | None) -> None:  # fmt: skip
        super().__init__(real.__name__)
        self.__dict__["_dz_real"] = real
        self.__dict__["_dz_stub"] = stub
        self.__dict__["_dz_bridges"] = bridges
        self.__dict__["_dz_definition"] = definition
        self.__path__ = list(getattr(real, "__path__", []))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name not in ("__version__",):
            raise AttributeError(name)
        real, stub = self.__dict__["_dz_real"], self.__dict__["_dz_stub"]
        definition = self.__dict__["_dz_definition"]
        qualified = f"{real.__name__}.{name}"
        try:
            value = getattr(real, name)
        except AttributeError:
            sub = bridge(qualified, stub, self.__dict__["_dz_bridges"], definition, missing_ok=True)
            if sub is None:
                raise
            value = sub
        except Exception:  # the library's lazy import of the name failed (it needs torch)
            return stub(qualified)
        if isinstance(value, types.ModuleType):
            return bridge(value.__name__, stub, self.__dict__["_dz_bridges"], definition)
        if _needs_torch(value) or value is None:
            home = torch_names().get(name) if real.__name__ == "transformers" else None
            if home is not None and definition is not None and not isinstance(value, type):
                return definition(f"transformers.{home}", name)
            if value is None:
                return value
            return stub(qualified)
        return value


def bridge(name: str, stub: Callable[[str], Any], bridges: dict[str, Any], definition: Definition | None = None,
           *, missing_ok: bool = False) -> Any:  # fmt: skip
    """The module ``name`` of the library as workspace code imports it (``bridges``: the executor's made ones;
    ``definition``: how the executor runs a definition on its torch). A module whose import needs torch is a stub
    module; a module the library does not have raises as import does (``missing_ok``: None instead)."""
    if name in bridges:
        return bridges[name]
    library()
    try:
        real = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("torch", "torchvision", "torchaudio"):
            bridges[name] = _torch_stub_module(name, stub)
            return bridges[name]
        if missing_ok:
            return None
        raise
    except ImportError:  # an import of the module needs what the twin stands in for
        bridges[name] = _torch_stub_module(name, stub)
        return bridges[name]
    bridges[name] = _Bridge(real, stub, bridges, definition)
    return bridges[name]


def _torch_stub_module(name: str, stub: Callable[[str], Any]) -> types.ModuleType:
    from .stubs import stub_package

    return stub_package(name, stub)


@contextlib.contextmanager
def isolated_registry(own: dict[str, Any]) -> Iterator[None]:
    """While the block runs, ``AutoConfig``'s registered model types are ``own`` (the executor's), not those of
    every executor the process made before."""
    library()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    saved = CONFIG_MAPPING._extra_content
    CONFIG_MAPPING._extra_content = own
    try:
        yield
    finally:
        CONFIG_MAPPING._extra_content = saved
