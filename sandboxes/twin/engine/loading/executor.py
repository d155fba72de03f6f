"""Run the workspace's own SGLang code without torch or a GPU: the import hook behind the twin's model loading.

The twin builds the engine's model the way SGLang does, by running the workspace's model class, and loads the
checkpoint through that class's own ``load_weights``. Those files import torch and half the engine, so
``Executor`` imports them through a hook that decides, module by module, what they get:

* **real**: the model and config code (``sglang.srt.models.*``, ``sglang.srt.configs.*``) and the quantization
  configs that decide which layer is quantized how (``REAL_MODULES``) are executed as written, compiled with
  their workspace paths, so a traceback through them names the real file and line and an agent's edit of them
  takes effect;
* **simulated**: what stands for the node and the engine's kernels (``Platform``): the parallel state, the server
  arguments, the platform checks, and SGLang's layer classes (``layers``: parameters and weight loaders);
* **pure**: any other function of the workspace is its real definition, executed with its module's imports
  going through this same hook; when it fails on something stubbed it answers a stub, unless the failure came
  through real model code (a model's error is never swallowed);
* **library**: ``transformers`` is the real library (``hf_library``): configs, ``AutoConfig`` and its registry;
  only what needs torch there is a stub;
* **stub**: everything else (torch beyond ``fake_torch``, triton, aiter, kernels) is a ``StubValue``: callable,
  indexable, falsy, answering every attribute.

Standard library and transformers only.
"""

from __future__ import annotations

import abc
import ast
import builtins
import contextlib
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import fake_torch, hf_library
from .platform import ABSENT, Platform
from .pure_code import PureCodeError, _closure, bound_names, named_code, parse
from .stubs import StubValue

_STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
_FUTURE_ANNOTATIONS = __import__("__future__").annotations.compiler_flag
# executed as written (prefixes of module names)
REAL_PACKAGES = ("sglang.srt.models.", "sglang.srt.configs.", "sglang.srt.layers.quantization.",
                 "sglang.srt.utils.hf_transformers.")  # the last: how 0.5.12+ make a config (get_config)
CONFIG_LOADER = "sglang.srt.utils.hf_transformers.config"  # where 0.5.12+ define get_config (a release naming none)
# third-party libraries the engine's code uses that are pure Python and installed with the twin (transformers
# requires them): the real ones (``packaging.version.parse(torch.__version__)``)
REAL_LIBRARIES = frozenset({"packaging", "numpy"})
# under a real package, but what the twin provides instead (its names come from ``simulated``): the model
# registry imports every model file at import time; the twin's registry builds a class when it is asked for
NOT_REAL = frozenset({"sglang.srt.models.registry"})
REAL_MODULES = (
    "sglang.srt.configs",  # the package: its __init__ imports every config class the registry names
    "sglang.srt.layers.quantization",  # QUANTIZATION_METHODS: every method the release has, by its name
    # the layers whose constructors make the parameters and whose weight_loaders check what is loaded
    "sglang.srt.layers.linear",
    "sglang.srt.layers.parameter",
    "sglang.srt.layers.vocab_parallel_embedding",
    "sglang.srt.layers.layernorm",
    "sglang.srt.layers.moe.fused_moe_triton.layer",
    "sglang.srt.layers.radix_attention",
    "sglang.srt.layers.attention.nsa.nsa_indexer",  # a sparse-MLA layer's indexer (0.5.12's name)
    "sglang.srt.layers.attention.dsa.dsa_indexer",  # the same indexer, as 0.5.13 names its folder
    "sglang.srt.layers.attention.fla.layernorm_gated",  # Gated DeltaNet's output norm (its weight is in the checkpoint)
    "sglang.srt.layers.attention.fla.fused_norm_gate",  # the same norm, fused, when piecewise CUDA graphs are off
    "sglang.srt.layers.attention.mamba.mamba",  # mamba_v2_sharded_weight_loader: how a conv1d weight is loaded
    "sglang.srt.layers.attention.vision",  # a vision tower's attention (qkv_proj, proj)
    "sglang.srt.layers.conv",  # a vision tower's patch embedding (Conv2dLayer, Conv3dLayer)
    "sglang.srt.model_loader.weight_utils",
    # the quantization configs that decide which layer is quantized how, and their methods' create_weights
    "sglang.srt.layers.quantization.base_config",
    "sglang.srt.layers.quantization.fp8",
    "sglang.srt.layers.quantization.mxfp4",
    "sglang.srt.layers.quantization.utils",
    "sglang.srt.layers.quantization.unquant",
    "sglang.srt.models.utils",
)


class ExecutionError(RuntimeError):
    """A workspace module could not be executed (``cause`` is what it raised)."""

    def __init__(self, module: str, path: Path, cause: BaseException) -> None:
        super().__init__(f"{module}: {type(cause).__name__}: {cause}")
        self.module, self.path, self.cause = module, path, cause


def _deterministic_futures() -> tuple[types.ModuleType, types.ModuleType]:
    """``concurrent.futures`` as the model code sees it: the standard library's, with its thread pool running one
    task at a time in submission order and ``as_completed`` answering in that order too. The real loader runs many
    weight loaders at once and reports whichever failure completes first; the twin reports the first in
    checkpoint order, every time (same frames: the work still runs in a pool thread)."""
    import concurrent.futures as real

    futures = types.ModuleType("concurrent.futures")
    futures.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})

    class ThreadPoolExecutor(real.ThreadPoolExecutor):
        def __init__(self, max_workers: int | None = None, *args: Any, **kwargs: Any) -> None:
            super().__init__(1, *args, **kwargs)

    def as_completed(fs: Any, timeout: float | None = None) -> Any:
        for f in list(fs):
            real.wait([f], timeout=timeout)
            yield f

    futures.ThreadPoolExecutor = ThreadPoolExecutor
    futures.as_completed = as_completed
    package = types.ModuleType("concurrent")
    package.futures = futures
    package.__path__ = []
    return package, futures


_CONCURRENT, _FUTURES = _deterministic_futures()


def _stub_result(fn: Any) -> Callable[[], Any]:
    """What a function of the engine that needs what is stubbed answers instead: a stub value, or a tuple of them
    when its annotation says it returns a tuple (``-> Tuple[torch.Tensor, torch.Tensor]``), so unpacking works."""
    annotation = getattr(fn, "__annotations__", {}).get("return") if callable(fn) else None
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        for head in ("Tuple[", "tuple["):
            if text.startswith(head) and text.endswith("]") and "..." not in text:
                inner, depth, count = text[len(head) : -1], 0, 1
                for ch in inner:
                    depth += ch == "["
                    depth -= ch == "]"
                    count += ch == "," and depth == 0
                return lambda: tuple(StubValue() for _ in range(count))
    return StubValue


_BACKEND_CHECKS = ("is_torch_available", "is_torchvision_available", "is_torchaudio_available")


def _backend_guard(node: ast.stmt) -> bool:
    """An ``if`` whose test asks whether a backend the twin stands in for is installed, and whose body imports."""
    if not isinstance(node, ast.If) or not node.body:
        return False
    asked = {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
             for n in ast.walk(node.test) if isinstance(n, ast.Call)}  # fmt: skip
    return bool(asked & set(_BACKEND_CHECKS)) and all(isinstance(n, ast.Import | ast.ImportFrom) for n in node.body)


def _definitions(path: Path, names: list[str]) -> ast.Module:
    """The file's imports (each allowed to fail: an optional dependency the image lacks) and the named top-level
    definitions with everything they use."""
    tree = parse(path)
    imports: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue  # compiled with the annotations flag instead
        if _backend_guard(node):  # `if is_torch_available(): import torch`: the twin stands in for that backend
            node = ast.Module(body=list(node.body), type_ignores=[])
            for inner in node.body:
                guard = ast.Try(body=[inner], handlers=[ast.ExceptHandler(type=ast.Name("Exception", ast.Load()),
                                name=None, body=[ast.Pass()])], orelse=[], finalbody=[])  # fmt: skip
                imports.append(ast.copy_location(guard, inner))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom) or (
                isinstance(node, ast.Try) and any(isinstance(n, ast.Import | ast.ImportFrom) for n in node.body)):
            guard = ast.Try(body=[node], handlers=[ast.ExceptHandler(type=ast.Name("Exception", ast.Load()),
                            name=None, body=[ast.Pass()])], orelse=[], finalbody=[])  # fmt: skip
            imports.append(ast.copy_location(guard, node))
    return ast.fix_missing_locations(ast.Module(body=imports + _closure(tree, names, path), type_ignores=[]))


def _compiled(path: Path, names: list[str] | None = None) -> types.CodeType:
    """``path`` compiled as the executor runs it (whole, or just ``names`` with what they use), kept like a .pyc in
    the per-user cache by the file's contents (not its place: every run's workspace holds the release's files
    somewhere new), named after ``path``: a file of the release compiles once per user, an edited one again."""
    import hashlib

    from ... import cache_files
    from ...workspace.release import cache_dir

    data = path.read_bytes()
    salt = f"{sys.version}\0{','.join(sorted(names)) if names is not None else '*'}".encode()
    key = hashlib.sha256(data + salt).hexdigest()[:40]

    def make() -> types.CodeType:
        tree = parse(path) if names is None else _definitions(path, names)  # a syntax error raises PureCodeError
        return compile(tree, str(path), "exec", flags=_FUTURE_ANNOTATIONS, dont_inherit=True)

    return named_code(cache_files.marshalled(cache_dir() / "compiled" / f"{key}.bin", make), str(path))


class _StubMeta(abc.ABCMeta):
    """Stub classes: attributes are more stubs, calls return stub values. A workspace class deriving from one is a
    real class (a fake ``nn.Module``): calling it runs its own ``__init__``."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return stub_class(f"{cls.__qualname__}.{name}")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __setitem__(cls, item: Any, value: Any) -> None:
        pass  # a registry of the engine's the twin does not simulate (``ALL_ATTENTION_FUNCTIONS["sglang"] = ...``)

    def register(cls, *args: Any, **kwargs: Any) -> Any:  # not ABCMeta's: AutoConfig.register(name, cls)
        return StubValue()

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls.__dict__.get("_dz_stub"):
            return StubValue()
        return super().__call__(*args, **kwargs)

    def __instancecheck__(cls, instance: Any) -> bool:
        if cls.__dict__.get("_dz_stub"):
            return False  # nothing the twin builds is an instance of an engine class it does not simulate
        return super().__instancecheck__(instance)

    def __subclasscheck__(cls, subclass: Any) -> bool:
        if cls.__dict__.get("_dz_stub"):
            return False
        return super().__subclasscheck__(subclass)


def _stub_getattr(self: Any, name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return fake_torch.Module.__getattr__(self, name)
    except AttributeError:
        return StubValue()


def stub_class(name: str) -> type:
    """A class standing for an engine class the twin does not simulate (a fake ``nn.Module``, so a real class
    deriving from it still registers its parameters)."""
    return _StubMeta(name.rpartition(".")[2] or name, (fake_torch.Module,), {
        "_dz_stub": True, "__getattr__": _stub_getattr, "__qualname__": name,
        "__init__": lambda self, *a, **k: fake_torch.Module.__init__(self)})  # fmt: skip


class _Lazy:
    """A name imported from a workspace module that is neither real nor simulated, resolved when first used
    (most imports of a model file are never used while it is built and loaded)."""

    def __init__(self, executor: Executor, module: str, name: str) -> None:
        self._dz = (executor, module, name)
        self._dz_value: Any = None
        self._dz_done = False

    def _resolve(self) -> Any:
        if not self._dz_done:
            executor, module, name = self._dz
            self._dz_value = executor.definition(module, name)
            self._dz_done = True
        return self._dz_value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_dz"):
            raise AttributeError(name)
        return getattr(self._resolve(), name)

    def __getitem__(self, item: Any) -> Any:
        return self._resolve()[item]

    def __iter__(self) -> Any:
        return iter(self._resolve())

    def __bool__(self) -> bool:
        return bool(self._resolve())

    def __eq__(self, other: Any) -> bool:
        return self._resolve() == other

    __hash__ = object.__hash__

    # a constant of the engine (``torch_release >= (2, 7)``, ``x in SUPPORTED``) compares as its value
    def __lt__(self, other: Any) -> bool:
        return self._resolve() < other

    def __le__(self, other: Any) -> bool:
        return self._resolve() <= other

    def __gt__(self, other: Any) -> bool:
        return self._resolve() > other

    def __ge__(self, other: Any) -> bool:
        return self._resolve() >= other

    def __contains__(self, item: Any) -> bool:
        return item in self._resolve()

    def __len__(self) -> int:
        return len(self._resolve())

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        value = self._resolve()
        return (value,) if isinstance(value, type) else (stub_class(f"{self._dz[1]}.{self._dz[2]}"),)

    def __instancecheck__(self, instance: Any) -> bool:
        value = self._resolve()
        return isinstance(value, type) and isinstance(instance, value)


class _TolerantClass:
    """A plain class of the engine (no base class): constructed as written when it can be, a stub value when its
    constructor needs what is stubbed; its class attributes and methods likewise."""

    def __init__(self, cls: type, construct: Callable[..., Any], executor: Executor) -> None:
        self._dz = (cls, construct, executor)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._dz[1](*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_dz"):
            raise AttributeError(name)
        cls, _, executor = self._dz
        value = getattr(cls, name)
        return executor._tolerant(value) if callable(value) and not isinstance(value, type) else value

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (self._dz[0],)

    def __instancecheck__(self, instance: Any) -> bool:
        return isinstance(instance, self._dz[0])


class _EngineModule(types.ModuleType):
    """A workspace module seen from model code: simulated names, submodules, pure definitions, stubs."""

    def __init__(self, name: str, executor: Executor) -> None:
        super().__init__(name)
        self._dz_executor = executor

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr.startswith("_dz"):
            raise AttributeError(attr)
        executor: Executor = self.__dict__["_dz_executor"]
        value = executor.attribute(self.__name__, attr)
        setattr(self, attr, value)
        return value


def _stub_module(name: str) -> types.ModuleType:
    from .stubs import stub_package

    module = stub_package(name, stub_class)  # a package: ``import a.b`` of a stubbed ``a`` works
    module.__version__ = "3.4.0"  # what packages look up at import time (triton's version checks)
    return module


def config_loader(python: Path) -> str | None:
    """The module that defines the ``get_config`` the release's ``ModelConfig`` calls: the one ``model_config.py``
    imports it from, followed through re-exports (0.5.12's ``hf_transformers_utils`` is a shim over the
    ``hf_transformers`` package); None when the release has no such import."""
    imported = _imported_from(python, "sglang.srt.configs.model_config", "get_config")
    return _defining(python, imported, "get_config", depth=4) if imported else None


def _module_tree(python: Path, module: str) -> tuple[ast.Module, bool] | None:
    base = python.joinpath(*module.split("."))
    for path, package in ((base.with_suffix(".py"), False), (base / "__init__.py", True)):
        try:
            return ast.parse(path.read_text()), package
        except (OSError, SyntaxError):
            continue
    return None


def _imported_from(python: Path, module: str, name: str) -> str | None:
    found = _module_tree(python, module)
    for node in ast.walk(found[0]) if found else ():
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and any(a.name == name for a in node.names):
            return node.module
    return None


def _defining(python: Path, module: str, name: str, depth: int) -> str:
    """``module`` when it defines ``name``, else the module it takes ``name`` (or ``*``) from that does."""
    found = _module_tree(python, module)
    if found is None or depth == 0:
        return module
    tree, package = found
    if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name for n in tree.body):
        return module
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(a.name in (name, "*") for a in node.names):
            if node.level:  # relative: from the package (an __init__) or the module's parent
                parts = module.split(".")
                parent = parts if package else parts[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                source = ".".join(parent + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source and source != module:
                return _defining(python, source, name, depth - 1)
    return module


class Executor:
    """The import hook and the modules it has made, for one workspace (``sglang_root/python/sglang``) on one
    simulated ``platform``. ``simulated`` adds to what the platform provides (module name -> names);
    ``real`` extends ``REAL_MODULES``."""

    def __init__(self, sglang_root: Path, platform: Platform | None = None,
                 simulated: Mapping[str, Mapping[str, Any]] | None = None, real: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.root = Path(sglang_root)
        self.python = self.root / "python"
        self.platform = platform or Platform()
        if self.platform.sglang_root is None:
            self.platform.sglang_root = self.root
        self.simulated = self.platform.modules()
        for name, names in (simulated or {}).items():
            self.simulated.setdefault(name, {}).update(names)
        self.real_modules = set(REAL_MODULES) | set(real)
        # the module whose get_config the release's ModelConfig calls, run as written (0.5.7-0.5.11:
        # hf_transformers_utils; 0.5.12+: the hf_transformers package's config module)
        self.config_loader = config_loader(self.python) or CONFIG_LOADER
        self.real_modules.add(self.config_loader)
        self.modules: dict[str, types.ModuleType] = {}
        self.torch = fake_torch.build_modules(stub_class, cuda=self.platform.cuda())
        self.transformers_modules: dict[str, Any] = {}  # the real library's modules as workspace code sees them
        self.transformers_registry: dict[str, Any] = {}  # the model types this workspace's code registers
        self.executed: list[Path] = []  # every workspace file run as written (what a result depends on)

    # --- what a module is ---------------------------------------------------------------------------------

    @property
    def transformers(self) -> Any:
        """The ``transformers`` package as the workspace's code imports it (``hf_library``)."""
        return hf_library.bridge("transformers", stub_class, self.transformers_modules, self.definition)

    def hf_registry(self) -> Any:
        """A context in which transformers' ``AutoConfig`` knows the model types this workspace registers."""
        return hf_library.isolated_registry(self.transformers_registry)

    def files(self, module: str) -> list[Path]:
        parts = module.split(".")
        if parts[0] == "transformers":  # the library's own source (a definition it keeps for torch)
            base = hf_library.source_root().joinpath(*parts[1:])
        else:
            base = self.python.joinpath(*parts)
        return [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]

    def is_real(self, module: str) -> bool:
        if module in NOT_REAL:
            return False
        return module in self.real_modules or module.startswith(REAL_PACKAGES)

    def module(self, name: str) -> types.ModuleType:
        """The module model code gets for ``import name``."""
        if name in self.modules:
            return self.modules[name]
        files = self.files(name)
        if files and self.is_real(name):
            return self._execute(name, files[0])
        module = _EngineModule(name, self)
        self.modules[name] = module
        return module

    def _execute(self, name: str, path: Path) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__file__ = str(path)
        module.__package__ = name if path.name == "__init__.py" else name.rpartition(".")[0]
        if path.name == "__init__.py":
            module.__path__ = [str(path.parent)]
        module.__dict__["__builtins__"] = {**vars(builtins), "__import__": self}
        for attr, value in self.simulated.get(name, {}).items():
            module.__dict__[attr] = value
        self.modules[name] = module
        # dataclasses and typing look classes' modules up by name while a class statement runs; the real
        # sglang package is never installed beside the twin, so the name is free (the last executor's wins)
        sys.modules[name] = module
        try:
            code = _compiled(path)
            self.executed.append(path)
            exec(code, module.__dict__)
        except PureCodeError as exc:
            self.modules.pop(name, None)
            raise ExecutionError(name, path, getattr(exc, "syntax_error", exc)) from None
        except Exception as exc:
            self.modules.pop(name, None)
            raise ExecutionError(name, path, exc) from exc
        for attr, value in self.simulated.get(name, {}).items():  # the twin's stand-ins win over the file's
            module.__dict__[attr] = value
        return module

    def attribute(self, module: str, attr: str) -> Any:
        """``module.attr`` for a module that is not real."""
        simulated = self.simulated.get(module)
        if simulated is not None and attr in simulated:
            return simulated[attr]
        fallback = self.platform.fallback(module, attr)
        if fallback is not None:
            return fallback
        if self.files(f"{module}.{attr}"):
            return self.module(f"{module}.{attr}")
        return _Lazy(self, module, attr)

    def definition(self, module: str, name: str) -> Any:
        """A workspace definition: re-exports followed, a function or constant as written (its module's imports
        through this hook), an engine class the twin does not simulate as a stub."""
        simulated = self.simulated.get(module)
        if simulated is not None and name in simulated:
            return simulated[name]
        for path in self.files(module):
            try:
                tree = parse(path)
            except PureCodeError:
                continue
            source = self._reexport(module, path, tree, name)
            if source is not None:
                return self.attribute(source, name) if not self.is_real(source) else getattr(self.module(source), name)
            node = next((n for n in tree.body if name in bound_names(n)), None)
            if node is None:
                continue
            if isinstance(node, ast.ClassDef) and node.bases:
                break  # an engine class (a torch module, a config): stubbed, not run
            try:
                value = self._load(path, module, [name])[name]
            except PureCodeError:
                break
            return value if not callable(value) or isinstance(value, StubValue) else self._tolerant(value)
        return stub_class(f"{module}.{name}")

    def _reexport(self, module: str, path: Path, tree: ast.Module, name: str) -> str | None:
        """The module ``module`` takes ``name`` from by importing it (``from .x import name``; in a package's
        ``__init__``, ``from .x import *`` too), if it does."""
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
            if any(a.name == "*" for a in node.names) and self._provides(source, name, {module}):
                return source
        return None

    def _provides(self, module: str, name: str, seen: set[str]) -> bool:
        """Whether ``module`` binds ``name`` itself or takes it from another module by import."""
        if module in seen:
            return False
        seen.add(module)
        for path in self.files(module):
            try:
                tree = parse(path)
            except PureCodeError:
                continue
            if any(name in bound_names(n) for n in tree.body):
                return True
            if self._reexport(module, path, tree, name) is not None:
                return True
        return False

    def _load(self, path: Path, module: str, names: list[str]) -> dict[str, Any]:
        """The named top-level definitions of ``path`` and what they use, with the file's imports."""
        holder = types.ModuleType(module)
        holder.__file__ = str(path)
        holder.__package__ = module if path.name == "__init__.py" else module.rpartition(".")[0]
        holder.__dict__["__builtins__"] = {**vars(builtins), "__import__": self}
        sys.modules.setdefault(module, holder)  # dataclasses look the module up while its classes are made
        try:
            code = _compiled(path, names)
            exec(code, holder.__dict__)
        except PureCodeError:
            raise
        except Exception as exc:
            raise PureCodeError(f"{type(exc).__name__}: {exc}", path=path) from None
        return holder.__dict__

    def _tolerant(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        stub = _stub_result(fn)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                real = {str(p) for p in self.executed}
                tb = exc.__traceback__
                while tb is not None:
                    if tb.tb_frame.f_code.co_filename in real:
                        raise  # code run as written failed (a model, a layer's loader): that is the engine's error
                    tb = tb.tb_next
                return stub()

        call.__wrapped__ = fn  # type: ignore[attr-defined]
        call.__name__ = getattr(fn, "__name__", "function")
        if isinstance(fn, type):  # a class of the engine's machinery: built as written when it can be
            return _TolerantClass(fn, call, self)
        return call

    # --- the hook ------------------------------------------------------------------------------------------

    def __call__(self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level:
            package = (globals or {}).get("__package__") or ""
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - (level - 1)])
            name = f"{base}.{name}" if name else base
        top = name.split(".")[0]
        if top == "concurrent":
            return _FUTURES if fromlist and name == "concurrent.futures" else _CONCURRENT
        if top in _STDLIB or top in REAL_LIBRARIES:
            return builtins.__import__(name, globals, locals, fromlist, 0)
        if top in ABSENT:
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        if top == "torch":
            if fromlist:
                return self.torch.get(name) or self._stub(name)
            return self.torch["torch"]
        if top == "transformers":
            return hf_library.bridge(name if fromlist else top, stub_class, self.transformers_modules, self.definition)
        if top == "sglang":
            if fromlist:
                return self.module(name)
            parent = self.module("sglang")
            for part in name.split(".")[1:]:  # `import a.b.c` binds `a`, whose attributes lead to `c`
                child = self.module(f"{parent.__name__}.{part}")
                with contextlib.suppress(AttributeError):
                    setattr(parent, part, child)
                parent = child
            return self.module("sglang")
        return self._stub(name if fromlist else top)

    def _stub(self, name: str) -> types.ModuleType:
        if name not in self.modules:
            self.modules[name] = _stub_module(name)
            for attr, value in self.simulated.get(name, {}).items():  # a kernel the twin answers with real shapes
                setattr(self.modules[name], attr, value)
        return self.modules[name]
