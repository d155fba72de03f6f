"""The workspace's ``sglang`` package, importable by the release's own client without the engine's libraries.

The release's ``bench_serving.py`` is a client: aiohttp, requests, numpy, transformers' tokenizers. But it imports
two names from modules that belong to the engine (``FAKE_BOOTSTRAP_HOST`` from ``srt/disaggregation/utils.py``,
``NetworkAddress`` from ``srt/utils/network.py``), and those modules import torch, zmq and psutil as they start;
the package's own ``__init__`` imports the whole frontend. ``install`` puts a finder in front of Python's import
system for ``sglang`` and its submodules, from the workspace tree (``python_root`` holds ``sglang/``):

* every module runs as written, with the libraries installed here;
* a module that cannot run because a library it imports is not installed here (``ModuleNotFoundError`` naming a
  module that is not the workspace's) becomes a *definitions module*: each name a client takes from it is the
  workspace's own definition of that name, run with what it imports from the workspace
  (``engine.loading.pure_imports``), so ``NetworkAddress`` is the release's class, not one written here. A
  package that cannot run keeps its ``__path__``, so its submodules still import as written;
* anything else a module raises is the client's failure and is raised.

``fallbacks`` names every module that fell back, with the library it lacked (what a record says it ran with).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from ..engine.loading.pure_imports import PureImports
from ..engine.loading.stubs import StubValue

PACKAGE = "sglang"


class DefinitionsModule(types.ModuleType):
    """A workspace module whose names are its definitions, loaded on first use (``PureImports.value``)."""

    def __init__(self, name: str, importer: PureImports, path: Path, package_dir: Path | None) -> None:
        super().__init__(name)
        self.__file__ = str(path)
        self._dz_importer = importer
        if package_dir is not None:
            self.__path__ = [str(package_dir)]

    def __getattr__(self, attr: str) -> Any:
        if attr == "__all__":  # ``from module import *``: every public definition that loads without the engine
            names = [n for n in self._dz_importer.star_names(self.__name__)
                     if not isinstance(self._dz_importer.value(self.__name__, n), StubValue)]
            self.__all__ = names
            return names
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = self._dz_importer.value(self.__name__, attr)
        if isinstance(value, StubValue):
            raise ImportError(f"cannot import name {attr!r} from {self.__name__!r} without the engine's libraries "
                              f"(the twin's client loads the workspace's definitions of {self.__file__})")  # fmt: skip
        setattr(self, attr, value)
        return value


class _Loader(importlib.abc.Loader):
    def __init__(self, finder: ReleaseFinder, path: Path, package_dir: Path | None) -> None:
        self.finder, self.path, self.package_dir = finder, path, package_dir

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        source = self.path.read_text(encoding="utf-8")
        code = compile(source, str(self.path), "exec")
        try:
            exec(code, module.__dict__)  # noqa: S102 (the workspace's own source, as Python would run it)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if not missing or missing == PACKAGE:
                raise
            self.finder.fallbacks[module.__name__] = missing
            fallback = DefinitionsModule(module.__name__, self.finder.importer, self.path, self.package_dir)
            sys.modules[module.__name__] = fallback  # what the import statement then hands out


class ReleaseFinder(importlib.abc.MetaPathFinder):
    """Finds ``sglang`` and its submodules in the workspace tree under ``python_root``."""

    def __init__(self, python_root: Path) -> None:
        self.root = Path(python_root)
        self.importer = PureImports(self.root)
        self.fallbacks: dict[str, str] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        base = self.root.joinpath(*fullname.split("."))
        if (base / "__init__.py").is_file():
            loader = _Loader(self, base / "__init__.py", base)
            spec = importlib.util.spec_from_file_location(fullname, base / "__init__.py", loader=loader,
                                                          submodule_search_locations=[str(base)])  # fmt: skip
        elif base.with_suffix(".py").is_file():
            loader = _Loader(self, base.with_suffix(".py"), None)
            spec = importlib.util.spec_from_file_location(fullname, base.with_suffix(".py"), loader=loader)
        else:
            return None
        return spec


def install(python_root: Path) -> ReleaseFinder:
    """Make ``import sglang...`` import the workspace tree under ``python_root`` (first on the finder list); an
    ``sglang`` imported before is forgotten. Returns the finder (its ``fallbacks``)."""
    _forget()
    finder = ReleaseFinder(python_root)
    sys.meta_path.insert(0, finder)
    return finder


def uninstall(finder: ReleaseFinder) -> None:
    """Undo ``install``: the finder gone, and every ``sglang`` module it imported forgotten."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    _forget()


def _forget() -> None:
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
