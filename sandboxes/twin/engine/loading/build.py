"""Build the engine's model the way the pinned SGLang release builds it, from the workspace's own code.

``build_model(executor, config)`` follows ``model_loader/loader.py``: the model class the release's registry
maps ``config.json``'s ``architectures`` to (each ``models/*.py`` file's ``EntryClass``), the config object the
release makes of ``config.json`` (its own ``get_config``, run as written: the real transformers' ``AutoConfig``
with the release's registered config classes, nested configs as objects with their defaults), the quantization config ``quantization_config`` names
(``QuarkConfig``, ``Fp8Config``, ``Mxfp4Config``... run as written) with the class's ``hf_to_sglang_mapper``
applied to it, and then ``model_class(config=..., quant_config=...)``. For the draft model of speculative
decoding, ``ModelConfig._config_draft_model`` of the workspace rewrites the architecture first, as the draft
worker does. Standard library and transformers only.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import fake_torch
from .executor import ExecutionError, Executor

MODELS = "python/sglang/srt/models"
CONFIGS = "python/sglang/srt/configs"
MODEL_CONFIG = "sglang.srt.configs.model_config"


class BuildError(RuntimeError):
    """The model could not be built; ``cause`` is what the workspace's code raised (None: the twin's own
    finding, e.g. an architecture the release does not register)."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class ModelClass:
    architecture: str
    module: str  # e.g. sglang.srt.models.deepseek_v2
    name: str  # the class

    @property
    def file(self) -> str:
        """Its source relative to the SGLang root (``python/sglang/srt/models/...``)."""
        return "python/" + self.module.replace(".", "/") + ".py"


_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\w+)", re.M)


def _entry_classes(text: str) -> list[str]:
    """The names a model file's ``EntryClass = X`` / ``EntryClass = [X, Y]`` registers (read, not imported)."""
    m = _ENTRY.search(text)
    if not m:
        return []
    return re.findall(r"\b([A-Za-z_]\w*)\b", m.group(1))


@functools.lru_cache(maxsize=8)
def _registry(models_dir: str, stamp: tuple[tuple[str, float], ...]) -> dict[str, ModelClass]:
    out: dict[str, ModelClass] = {}
    for path in sorted(Path(models_dir).glob("*.py")):
        try:
            names = _entry_classes(path.read_text(errors="replace"))
        except OSError:
            continue
        module = f"sglang.srt.models.{path.stem}"
        for name in names:
            out.setdefault(name, ModelClass(name, module, name))
    return out


def registry(sglang_root: Path, *, package: Path | None = None) -> dict[str, ModelClass]:
    """Architecture name -> its class, as the release's ``ModelRegistry`` collects them (``EntryClass``), of the
    tree at ``sglang_root`` (or of the unpacked ``sglang`` ``package``)."""
    models = Path(package) / "srt" / "models" if package is not None else Path(sglang_root) / MODELS
    stamp = tuple((p.name, p.stat().st_mtime) for p in sorted(models.glob("*.py")))
    return _registry(str(models), stamp)


def resolve(sglang_root: Path, architectures: list[str]) -> ModelClass:
    """The class for the first of ``architectures`` the release registers (``ModelRegistry.resolve_model_cls``)."""
    known = registry(sglang_root)
    for arch in architectures:
        if arch in known:
            return known[arch]
    raise BuildError(f"Model architectures {architectures} are not supported for now. Supported architectures: "
                     f"dict_keys({sorted(known)!r})")  # fmt: skip


@contextlib.contextmanager
def _model_folder(config: Mapping[str, Any], model_dir: Path | None) -> Iterator[Path]:
    """The folder the release reads ``config.json`` from: the checkpoint's own, else a scratch one holding it."""
    if model_dir is not None:
        yield Path(model_dir)
        return
    with tempfile.TemporaryDirectory(prefix="dz-config-") as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(dict(config)))
        yield Path(tmp)


def _torch_dtypes(obj: Any, torch: Any, seen: set[int] | None = None) -> None:
    """What ``PretrainedConfig.__init__`` does where torch is installed: a ``dtype`` given as a name becomes the
    torch dtype of that name, in the config and in each nested config."""
    seen = set() if seen is None else seen
    if id(obj) in seen or not hasattr(obj, "__dict__"):
        return
    seen.add(id(obj))
    value = obj.__dict__.get("dtype")
    if isinstance(value, str) and isinstance(getattr(torch, value, None), fake_torch.dtype):
        obj.__dict__["dtype"] = getattr(torch, value)
    for child in list(obj.__dict__.values()):
        if type(child).__module__.startswith(("transformers.", "sglang.")) and hasattr(child, "to_dict"):
            _torch_dtypes(child, torch, seen)


def hf_config(executor: Executor, config: Mapping[str, Any], model_dir: Path | None = None) -> Any:
    """``config.json`` as the config object the model class receives, made by the release's own ``get_config``
    (transformers' ``AutoConfig`` with the release's registered config classes, its per-model fix-ups) from
    ``model_dir`` (a scratch folder holding ``config`` when None). Raises ``BuildError`` with what it raised."""
    trust = bool(executor.platform.server_args.get("trust_remote_code", False))
    name = executor.config_loader
    with executor.hf_registry(), _model_folder(config, model_dir) as folder:
        try:
            obj = executor.module(name).get_config(str(folder), trust_remote_code=trust)
        except ExecutionError as exc:
            raise BuildError(f"{name}: {type(exc.cause).__name__}: {exc.cause}", exc.cause) from exc
        except Exception as exc:
            raise BuildError(f"config.json: {type(exc).__name__}: {exc}", exc) from exc
    _torch_dtypes(obj, executor.torch["torch"])
    return obj


LOADER = "sglang.srt.model_loader.loader"  # _get_quantization_config, _initialize_model
LOAD_CONFIG = "sglang.srt.configs.load_config"


def _raw(fn: Any) -> Any:
    """A workspace function as written, without the executor's tolerance of what is stubbed (a failure here is
    the engine's, never a stub value)."""
    fn = fn._resolve() if hasattr(fn, "_resolve") else fn
    return getattr(fn, "__wrapped__", fn)


class ReleaseRegistry:
    """``sglang.srt.models.registry.ModelRegistry`` as the release behaves: the classes each ``models/*.py`` file
    names in ``EntryClass`` (read, not all imported: a class is built when it is asked for), an architecture it
    does not list resolved to the release's Transformers fallback, the release's message for one it cannot serve."""

    TRANSFORMERS_FALLBACK = "TransformersForCausalLM"

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.classes = registry(executor.root)

    def get_supported_archs(self) -> Any:
        return self.classes.keys()

    def resolve_model_cls(self, architectures: Any) -> tuple[Any, str]:
        archs = [architectures] if isinstance(architectures, str) else list(architectures or [])
        known = [a for a in archs if a in self.classes]
        if len(known) != len(archs):
            known.append(self.TRANSFORMERS_FALLBACK)  # what the release's _normalize_archs appends
        for arch in known:
            if arch in self.classes:
                ref = self.classes[arch]
                return getattr(self.executor.module(ref.module), ref.name), arch
        raise ValueError(f"Model architectures {known} are not supported for now. Supported architectures: "
                         f"{self.classes.keys()}")  # fmt: skip


def _install_registry(executor: Executor) -> None:
    names = executor.simulated.setdefault("sglang.srt.models.registry", {})
    if "ModelRegistry" not in names:
        names["ModelRegistry"] = ReleaseRegistry(executor)


def release_model_config(executor: Executor, model_dir: Path, *, draft: bool = False) -> Any:
    """The release's ``ModelConfig.from_server_args`` for the checkpoint in ``model_dir`` with the launch's
    arguments (``Platform.server_args``): its config, its checks (quantization, dtype, ...) and its accounting
    (attention architecture, KV heads, hybrid layers). Raises ``BuildError`` with what the release raised."""
    _install_registry(executor)
    args = executor.platform.server_args_object()
    args.model_path = str(model_dir)
    with executor.hf_registry():
        try:
            model_config = executor.module(MODEL_CONFIG).ModelConfig
            made = model_config.from_server_args(args, model_path=str(model_dir), is_draft_model=draft)
        except ExecutionError:
            raise
        except Exception as exc:
            raise BuildError(f"{type(exc).__name__}: {exc}", exc) from exc
    _torch_dtypes(made.hf_config, executor.torch["torch"])
    return made


def load_config(executor: Executor) -> Any:
    """The release's ``LoadConfig`` with its defaults (``load_format=auto``)."""
    return executor.module(LOAD_CONFIG).LoadConfig()


def quant_config(executor: Executor, model_config: Any) -> Any:
    """The release's quantization config of the checkpoint (None when unquantized), made by its own
    ``_get_quantization_config``: the model class's packed modules, the device capability and dtype checks, the
    class's ``hf_to_sglang_mapper`` applied."""
    with executor.hf_registry():
        return _raw(executor.module(LOADER)._get_quantization_config)(model_config, load_config(executor))


def draft_class_of(sglang_root: Path, config: Mapping[str, Any]) -> str:
    """The architecture the release's draft worker builds for a model of ``config`` (its own
    ``ModelConfig._config_draft_model``; the model's own architecture when it renames nothing)."""
    executor = Executor(Path(sglang_root))
    with _model_folder(config, None) as folder:
        model_config = release_model_config(executor, folder, draft=True)
    archs = getattr(model_config.hf_config, "architectures", None) or config.get("architectures") or [""]
    return str(archs[0])


@dataclass
class Built:
    model: Any
    model_class: ModelClass
    quant_config: Any
    config: Any  # the hf_config the class received
    model_config: Any = None  # the release's ModelConfig it was made from


def _initialized(executor: Executor, model_config: Any) -> tuple[Any, Any]:
    """The model and its quantization config, made by ``_initialize_model`` under
    ``set_default_torch_dtype(model_config.dtype)`` as ``DefaultModelLoader.load_model`` calls it (a parameter made
    without a dtype, a norm's weight, gets the model's). 0.5.12+ pass it the quantization config
    ``_get_quantization_config`` made; earlier releases make it inside, and what that call returned is kept."""
    previous = fake_torch.default_dtype()
    dtype = model_config.dtype if isinstance(model_config.dtype, fake_torch.dtype) else previous
    fake_torch.set_default_dtype(dtype)
    loader = executor.module(LOADER)
    init = _raw(loader._initialize_model)
    try:
        if "quant_config" in inspect.signature(init).parameters:
            quant = quant_config(executor, model_config)
            return init(model_config, load_config(executor), quant), quant
        made: list[Any] = []
        make = _raw(loader._get_quantization_config)

        def keeping(*args: Any, **kwargs: Any) -> Any:
            made.append(make(*args, **kwargs))
            return made[-1]

        init.__globals__["_get_quantization_config"] = keeping
        try:
            model = init(model_config, load_config(executor))
        finally:
            init.__globals__["_get_quantization_config"] = make
        return model, made[-1] if made else None
    finally:
        fake_torch.set_default_dtype(previous)


def build_model(executor: Executor, config: Mapping[str, Any], *, draft: bool = False,
                model_dir: Path | None = None) -> Built:
    """Construct the target (or the draft) model of the checkpoint in ``model_dir`` (a scratch folder holding
    ``config`` when None) as the release's loader does: ``ModelConfig`` from the launch's arguments, its
    ``_get_quantization_config`` and ``_initialize_model``. Raises ``BuildError``."""
    with _model_folder(config, model_dir) as folder:
        model_config = release_model_config(executor, folder, draft=draft)
        try:
            with executor.hf_registry():
                _, arch = ReleaseRegistry(executor).resolve_model_cls(model_config.hf_config.architectures)
                model, quant = _initialized(executor, model_config)
        except ExecutionError:
            raise  # a workspace file that does not import: the loader shows it as the import error it is
        except Exception as exc:
            raise BuildError(f"{type(exc).__name__}: {exc}", exc) from exc
    ref = registry(executor.root).get(arch) or ModelClass(arch, type(model).__module__, type(model).__name__)
    return Built(model=model, model_class=ref, quant_config=quant, config=model_config.hf_config,
                 model_config=model_config)
