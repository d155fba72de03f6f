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
# quantization_config.quant_method -> (module, class) of the release's config class (layers/quantization/__init__.py)
QUANT_CONFIGS = {
    "quark": ("sglang.srt.layers.quantization.quark.quark", "QuarkConfig"),
    "fp8": ("sglang.srt.layers.quantization.fp8", "Fp8Config"),
    "mxfp4": ("sglang.srt.layers.quantization.mxfp4", "Mxfp4Config"),
}


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


def registry(sglang_root: Path) -> dict[str, ModelClass]:
    """Architecture name -> its class, as the release's ``ModelRegistry`` collects them (``EntryClass``)."""
    models = Path(sglang_root) / MODELS
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


CONFIG_LOADER = "sglang.srt.utils.hf_transformers.config"  # the release's get_config (model_config.py calls it)


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
    with executor.hf_registry(), _model_folder(config, model_dir) as folder:
        try:
            loader = executor.module(CONFIG_LOADER)
            obj = loader.get_config(str(folder), trust_remote_code=trust)
        except ExecutionError as exc:
            raise BuildError(f"{CONFIG_LOADER}: {type(exc.cause).__name__}: {exc.cause}", exc.cause) from exc
        except Exception as exc:
            raise BuildError(f"config.json: {type(exc).__name__}: {exc}", exc) from exc
    _torch_dtypes(obj, executor.torch["torch"])
    return obj


def quant_config(executor: Executor, config: Mapping[str, Any], model_cls: Any = None) -> Any:
    """The release's quantization config for ``quantization_config`` (None for an unquantized checkpoint), made as
    ``model_loader/loader.py`` ``_get_quantization_config`` makes it: the model class's ``packed_modules_mapping``
    (Quark adds the fused ``gate_up_proj`` and ``fused_qkv_a_proj_with_mqa``) handed to ``from_config`` with it."""
    qc = config.get("quantization_config")
    if qc is None and isinstance(config.get("text_config"), Mapping):
        qc = config["text_config"].get("quantization_config")
    if not qc:
        return None
    method = str(qc.get("quant_method", ""))
    if method not in QUANT_CONFIGS:
        raise BuildError(f"the twin does not simulate quantization method {method!r} (it knows "
                         f"{', '.join(QUANT_CONFIGS)})")  # fmt: skip
    packed = getattr(model_cls, "packed_modules_mapping", None) if model_cls is not None else None
    if not isinstance(packed, dict):
        packed = {}
    if method == "quark":
        packed.update({"gate_up_proj": ["gate_proj", "up_proj"],
                       "fused_qkv_a_proj_with_mqa": ["q_a_proj", "kv_a_proj_with_mqa"]})  # fmt: skip
    hf_quant_config = dict(qc)
    hf_quant_config["packed_modules_mapping"] = packed
    module, name = QUANT_CONFIGS[method]
    cls = getattr(executor.module(module), name)
    return cls.from_config(hf_quant_config)


def draft_architecture(executor: Executor, config_obj: Any) -> Any:
    """Run the workspace's ``ModelConfig._config_draft_model`` on ``config_obj`` (it renames the architecture to
    the draft class and sets what the draft needs, e.g. ``num_nextn_predict_layers``)."""
    model_config = executor.module(MODEL_CONFIG)
    holder = type("DraftModelConfig", (), {})()
    holder.is_draft_model = True
    holder.hf_config = config_obj
    model_config.ModelConfig._config_draft_model(holder)
    return config_obj


def draft_class_of(sglang_root: Path, config: Mapping[str, Any]) -> str:
    """The architecture the release's draft worker builds for a model of ``config`` (its own
    ``ModelConfig._config_draft_model``; the model's own architecture when it renames nothing)."""
    executor = Executor(Path(sglang_root))
    obj = hf_config(executor, config)
    draft_architecture(executor, obj)
    archs = getattr(obj, "architectures", None) or config.get("architectures") or [""]
    return str(archs[0])


@dataclass
class Built:
    model: Any
    model_class: ModelClass
    quant_config: Any
    config: Any


def build_model(executor: Executor, config: Mapping[str, Any], *, draft: bool = False,
                model_dir: Path | None = None) -> Built:
    """Construct the target (or the draft) model of ``config`` (read from ``model_dir`` when given, as the release
    reads it). Raises ``BuildError``."""
    obj = hf_config(executor, config, model_dir)
    if draft:
        draft_architecture(executor, obj)
    archs = list(getattr(obj, "architectures", None) or config.get("architectures") or [])
    cls_ref = resolve(executor.root, archs)
    module = executor.module(cls_ref.module)
    cls = getattr(module, cls_ref.name)
    quant = quant_config(executor, config, cls)
    mapper = getattr(cls, "hf_to_sglang_mapper", None)
    if mapper is not None and quant is not None and hasattr(quant, "apply_weight_name_mapper"):
        quant.apply_weight_name_mapper(mapper)  # model_loader/loader.py _get_quantization_config
    model = cls(config=obj, quant_config=quant)
    return Built(model=model, model_class=cls_ref, quant_config=quant, config=obj)
