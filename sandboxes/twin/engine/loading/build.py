"""Build the engine's model the way the pinned SGLang release builds it, from the workspace's own code.

``build_model(executor, config)`` follows ``model_loader/loader.py``: the model class the release's registry
maps ``config.json``'s ``architectures`` to (each ``models/*.py`` file's ``EntryClass``), the config object the
release makes of ``config.json`` (its own config class where ``configs/`` registers one for the model type, else
transformers' generic config with the file's values), the quantization config ``quantization_config`` names
(``QuarkConfig``, ``Fp8Config``, ``Mxfp4Config``... run as written) with the class's ``hf_to_sglang_mapper``
applied to it, and then ``model_class(config=..., quant_config=...)``. For the draft model of speculative
decoding, ``ModelConfig._config_draft_model`` of the workspace rewrites the architecture first, as the draft
worker does. Standard library only.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .executor import Executor
from .pure_code import PureCodeError, parse

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


REGISTRY_FILE = "python/sglang/srt/utils/hf_transformers/common.py"


def _registered_config_names(executor: Executor) -> list[str]:
    """The class names ``_CONFIG_REGISTRY`` is built from (``{cls.model_type: cls for cls in [...]}``)."""
    try:
        tree = parse(executor.root / REGISTRY_FILE)
    except PureCodeError:
        return []
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "_CONFIG_REGISTRY" and node.value is not None:
            return [n.id for n in ast.walk(node.value) if isinstance(n, ast.Name) and n.id[:1].isupper()]
    return []


def config_class(executor: Executor, model_type: str) -> Any:
    """The release's own config class for ``model_type`` (``_CONFIG_REGISTRY``), or None (transformers')."""
    package = executor.module("sglang.srt.configs")
    for name in _registered_config_names(executor):
        try:
            cls = getattr(package, name)
            value = cls._resolve() if hasattr(cls, "_resolve") else cls
        except Exception:
            continue
        if isinstance(value, type) and getattr(value, "model_type", None) == model_type:
            return value
    return None


def hf_config(executor: Executor, config: Mapping[str, Any]) -> Any:
    """``config.json`` as the config object the model class receives."""
    values = {k: v for k, v in config.items() if k != "quantization_config"}
    cls = config_class(executor, str(config.get("model_type", "")))
    if cls is None:
        cls = executor.transformers.PretrainedConfig
    try:
        obj = cls(**values)
    except Exception as exc:
        raise BuildError(f"config.json: {cls.__name__}: {type(exc).__name__}: {exc}", exc) from exc
    if config.get("quantization_config") is not None:
        obj.quantization_config = dict(config["quantization_config"])
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


def build_model(executor: Executor, config: Mapping[str, Any], *, draft: bool = False) -> Built:
    """Construct the target (or the draft) model of ``config``. Raises ``BuildError``."""
    obj = hf_config(executor, config)
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
