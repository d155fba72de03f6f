"""Weight loading, mechanically: build the engine's parameters and load the checkpoint's metadata into them.

``load_weights(model_dir, sglang_root, with_draft=...)`` does what SGLang's loader does, minus the tensors:

1. read ``model_dir/config.json`` (dimensions, ``quantization_config`` with its ``exclude`` list) and the
   parameter metadata in ``model_dir/model.safetensors.index.json``;
2. build the engine's modules: the target model (layers ``0..N-1``, embeddings, final norm, ``lm_head``)
   and, with the draft model, the MTP layer named the way the workspace's draft model file names it
   (``NEXTN_MODEL_PREFIX`` / ``NEXTN_DECODER_PREFIX``). Every quantizable linear asks the workspace's
   ``should_ignore_layer(module_name, exclude)`` whether it stays bf16; a layer's routed experts are one
   FusedMoE module (``<layer>.mlp.experts``) and ask once. A linear that is not ignored gets the packed
   parameters of the checkpoint's format (see ``checkpoint.param_specs``);
3. walk the checkpoint in its order: the target model takes every weight of layers ``< N`` (and the
   top-level ones) under its own name and skips the MTP layer; the draft model takes the MTP layer's
   weights, renamed by the workspace's ``remap_weight_name``. The first weight whose dtype or shape differs
   from its parameter (or that has no parameter) stops the load with ``WeightLoadError``, whose ``log`` is
   the traceback SGLang would print.

The workspace files are imported by path, so editing them (or ``config.json``) changes the outcome; the
twin never looks for a particular fix. Standard library only.
"""

from __future__ import annotations

import importlib.util
import json
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from .checkpoint import (
    LINEAR,
    ModelDims,
    Module,
    checkpoint_modules,
    exclude_from_config,
    layer_modules,
    param_specs,
    quant_format_from_config,
    tensor_bytes,
)

QUARK_UTILS = "python/sglang/srt/layers/quantization/quark/utils.py"
WEIGHT_UTILS = "python/sglang/srt/model_loader/weight_utils.py"
TORCH_DTYPES = {
    "BF16": "torch.bfloat16",
    "F16": "torch.float16",
    "F32": "torch.float32",
    "U8": "torch.uint8",
    "I8": "torch.int8",
    "F8_E4M3": "torch.float8_e4m3fn",
}
MAX_LISTED = 50


class WeightLoadError(RuntimeError):
    """The engine failed while building the model or loading its weights; ``log`` is SGLang-like output."""

    def __init__(self, summary: str, log: str, *, param: str | None = None, checkpoint_param: str | None = None,
                 draft: bool = False) -> None:
        super().__init__(summary)
        self.summary = summary
        self.log = log
        self.param = param
        self.checkpoint_param = checkpoint_param
        self.draft = draft


class WorkspaceImportError(WeightLoadError):
    """A workspace source file could not be imported (syntax error, missing name, ...)."""


@dataclass
class WeightLoadReport:
    quant_format: str
    with_draft: bool
    num_tensors: int = 0
    target_bytes_by_category: dict[str, int] = field(default_factory=dict)
    draft_bytes_by_category: dict[str, int] = field(default_factory=dict)
    unquantized_modules: list[str] = field(default_factory=list)  # engine linears built bf16 by the exclude list
    not_loaded: list[str] = field(default_factory=list)  # engine parameters no checkpoint weight filled
    log_lines: list[str] = field(default_factory=list)

    @property
    def target_bytes(self) -> int:
        return sum(self.target_bytes_by_category.values())

    @property
    def draft_bytes(self) -> int:
        return sum(self.draft_bytes_by_category.values())

    @property
    def total_bytes(self) -> int:
        return self.target_bytes + self.draft_bytes


# --- SGLang-like tracebacks ---------------------------------------------------------------------------------

_Frame = tuple[str, int, str, str]  # (path relative to the sglang root, line, function, source line)

_SCHEDULER = "python/sglang/srt/managers/scheduler.py"
_RUNNER = "python/sglang/srt/model_executor/model_runner.py"
_LOADER = "python/sglang/srt/model_loader/loader.py"

_HEAD: list[_Frame] = [
    (_SCHEDULER, 2899, "run_scheduler_process", "scheduler = Scheduler("),
    (_SCHEDULER, 338, "__init__", "self.init_model_worker()"),
]
_TARGET_WORKER: list[_Frame] = [
    (_SCHEDULER, 493, "init_model_worker", "self.tp_worker = TpModelWorker("),
]
_DRAFT_WORKER: list[_Frame] = [
    (_SCHEDULER, 507, "init_model_worker", "self.draft_worker = DraftWorkerClass("),
    ("python/sglang/srt/speculative/eagle_worker.py", 134, "__init__", "super().__init__("),
]
_RUNNER_CHAIN: list[_Frame] = [
    ("python/sglang/srt/managers/tp_worker.py", 247, "__init__", "self._model_runner = ModelRunner("),
    (_RUNNER, 330, "__init__", "self.initialize(min_per_gpu_memory)"),
    (_RUNNER, 412, "initialize", "self.load_model()"),
    (_RUNNER, 838, "load_model", "self.model = get_model("),
    ("python/sglang/srt/model_loader/__init__.py", 28, "get_model", "return loader.load_model("),
]
_LOAD_WEIGHTS: list[_Frame] = [
    (_LOADER, 611, "load_model", "self.load_weights_and_postprocess("),
    (_LOADER, 619, "load_weights_and_postprocess", "model.load_weights(weights)"),
]
_INIT_MODEL: list[_Frame] = [
    (_LOADER, 596, "load_model", "model = _initialize_model("),
]
_QUANT_IMPORT: list[_Frame] = [
    (_LOADER, 236, "_initialize_model", "quant_config = _get_quantization_config(model_config, load_config)"),
    (_LOADER, 207, "_get_quantization_config", "quant_config = get_quant_config(model_config, load_config)"),
    ("python/sglang/srt/model_loader/weight_utils.py", 168, "get_quant_config",
     "quant_cls = get_quantization_config(model_config.quantization)"),
    ("python/sglang/srt/layers/quantization/__init__.py", 181, "get_quantization_config",
     "from sglang.srt.layers.quantization.quark.quark import QuarkConfig"),
    ("python/sglang/srt/layers/quantization/quark/quark.py", 26, "<module>",
     "from sglang.srt.layers.quantization.quark.utils import deep_compare, should_ignore_layer"),
]
_MODEL_CLASS_IMPORT: list[_Frame] = [
    (_LOADER, 244, "_initialize_model", "model_class, _ = get_model_architecture(model_config)"),
    ("python/sglang/srt/model_loader/utils.py", 95, "get_model_architecture",
     "return ModelRegistry.resolve_model_cls(architectures)"),
    ("python/sglang/srt/models/registry.py", 58, "resolve_model_cls", "model_cls = self._try_load_model_cls(arch)"),
    ("python/sglang/srt/models/registry.py", 47, "_try_load_model_cls", "module = importlib.import_module(module_name)"),
    ("/usr/lib/python3.12/importlib/__init__.py", 90, "import_module",
     "return _bootstrap._gcd_import(name[level:], package, level)"),
]
_CONFIG_READ: list[_Frame] = [
    (_SCHEDULER, 2899, "run_scheduler_process", "scheduler = Scheduler("),
    (_SCHEDULER, 301, "__init__", "self.model_config = ModelConfig.from_server_args(server_args)"),
    ("python/sglang/srt/configs/model_config.py", 245, "from_server_args", "return ModelConfig("),
    ("python/sglang/srt/configs/model_config.py", 101, "__init__", "self.hf_config = get_config("),
    ("python/sglang/srt/utils/hf_transformers_utils.py", 233, "get_config", "config = AutoConfig.from_pretrained("),
]


def _frame_text(root: Path, frame: _Frame) -> str:
    path, line, func, code = frame
    if path.startswith("<"):
        return f'  File "{path}", line {line}, in {func}'
    full = path if path.startswith("/") else f"{root}/{path}"
    return f'  File "{full}", line {line}, in {func}\n    {code}'


def _traceback(root: Path, frames: list[_Frame], tail: list[str]) -> str:
    lines = ["Traceback (most recent call last):"]
    lines += [_frame_text(root, f) for f in frames]
    lines += tail
    return "\n".join(lines)


def _workspace_tail(root: Path, exc: BaseException) -> list[str]:
    """The frames of ``exc`` that lie in the workspace, then the exception line(s) as Python prints them."""
    out: list[str] = []
    try:
        root_res = root.resolve()
    except OSError:
        root_res = root
    for fs in traceback.extract_tb(exc.__traceback__):
        try:
            inside = Path(fs.filename).resolve().is_relative_to(root_res)
        except (OSError, ValueError):
            inside = False
        if inside:
            out.append(f'  File "{fs.filename}", line {fs.lineno}, in {fs.name}\n    {(fs.line or "").strip()}')
    out += [s.rstrip("\n") for s in traceback.format_exception_only(type(exc), exc)]
    return out


def _find_line(path: Path, needle: str, fallback: str = "def load_weights") -> tuple[int, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 1, needle
    for wanted in (needle, fallback):
        for i, text in enumerate(lines, 1):
            if wanted in text:
                return i, text.strip()
    return 1, needle


# --- workspace modules --------------------------------------------------------------------------------------


def _dotted(rel: str) -> str:
    p = rel.removeprefix("python/").removesuffix(".py")
    return p.replace("/", ".")


def _import_workspace(root: Path, rel: str, frames: list[_Frame], what: str) -> ModuleType:
    path = root / rel
    name = _dotted(rel)
    boot = [("<frozen importlib._bootstrap>", 1387, "_gcd_import", ""),
            ("<frozen importlib._bootstrap>", 1360, "_find_and_load", ""),
            ("<frozen importlib._bootstrap>", 1331, "_find_and_load_unlocked", ""),
            ("<frozen importlib._bootstrap>", 935, "_load_unlocked", ""),
            ("<frozen importlib._bootstrap_external>", 999, "exec_module", ""),
            ("<frozen importlib._bootstrap>", 488, "_call_with_frames_removed", "")]
    if not path.is_file():
        summary = f"No module named '{name}' ({what}: {path} is missing)"
        log = _traceback(root, frames + boot[:3], [f"ModuleNotFoundError: No module named '{name}'"])
        raise WorkspaceImportError(summary, log)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkspaceImportError(f"cannot import {path}", f"ImportError: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # anything an edited file can raise at import time
        summary = f"Failed to import {name} ({what}): {type(exc).__name__}: {exc}"
        raise WorkspaceImportError(summary, _traceback(root, frames + boot, _workspace_tail(root, exc))) from None
    return module


def _require(module: ModuleType, attr: str, root: Path, rel: str, frames: list[_Frame], what: str) -> Any:
    if not hasattr(module, attr):
        msg = f"ImportError: cannot import name '{attr}' from '{_dotted(rel)}' ({root / rel})"
        raise WorkspaceImportError(f"{what}: {msg}", _traceback(root, frames, [msg]))
    return getattr(module, attr)


# --- the engine's parameters --------------------------------------------------------------------------------


class _EngineParam:
    __slots__ = ("dtype", "shape", "fmt", "category", "expert", "loaded")

    def __init__(self, dtype: str, shape: list[int], fmt: str, category: str, expert: bool) -> None:
        self.dtype = dtype
        self.shape = shape
        self.fmt = fmt
        self.category = category
        self.expert = expert
        self.loaded = False


class _Builder:
    """Creates engine parameters, asking the workspace matcher once per (FusedMoE or linear) module."""

    def __init__(self, root: Path, fmt: str, exclude: list[str], should_ignore: Any, frames: list[_Frame]):
        self.root = root
        self.fmt = fmt
        self.exclude = exclude
        self.should_ignore = should_ignore
        self.frames = frames
        self.cache: dict[str, bool] = {}
        self.unquantized: list[str] = []

    def ignored(self, module_name: str) -> bool:
        hit = self.cache.get(module_name)
        if hit is None:
            try:
                hit = bool(self.should_ignore(module_name, self.exclude))
            except Exception as exc:
                frames = self.frames + [
                    ("python/sglang/srt/layers/linear.py", 297, "__init__",
                     "self.quant_method = quant_config.get_quant_method(self, prefix=prefix)"),
                    ("python/sglang/srt/layers/quantization/quark/quark.py", 112, "get_quant_method",
                     "if should_ignore_layer(prefix, ignore=exclude_layers, fused_mapping=self.packed_modules_mapping):"),
                ]
                summary = f"should_ignore_layer({module_name!r}) raised {type(exc).__name__}: {exc}"
                raise WeightLoadError(summary, _traceback(self.root, frames, _workspace_tail(self.root, exc))) from None
            self.cache[module_name] = hit
            if hit:
                self.unquantized.append(module_name)
        return hit

    def add(self, params: dict[str, _EngineParam], modules: list[Module]) -> None:
        for module in modules:
            fmt = "bf16"
            if module.kind == LINEAR and self.fmt != "bf16":
                fmt = "bf16" if self.ignored(module.fused_moe or module.name) else self.fmt
            expert = module.fused_moe is not None
            for suffix, dtype, shape in param_specs(module, fmt):
                params[f"{module.name}.{suffix}"] = _EngineParam(dtype, list(shape), fmt, module.category, expert)


# --- loading ------------------------------------------------------------------------------------------------


def _size(shape: list[int]) -> str:
    return f"torch.Size([{', '.join(str(d) for d in shape)}])"


def _read_json(path: Path, root: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        msg = f"OSError: {path.parent} does not appear to have a file named {path.name}."
        raise WeightLoadError(f"{what}: {path} not found", _traceback(root, _CONFIG_READ, [msg])) from None
    except json.JSONDecodeError as exc:
        tail = [f"json.decoder.JSONDecodeError: {exc}",
                "",
                "During handling of the above exception, another exception occurred:",
                "",
                f"OSError: It looks like the config file at '{path}' is not a valid JSON file."]
        raise WeightLoadError(f"{what}: {path} is not valid JSON ({exc})", _traceback(root, _CONFIG_READ, tail)) from None


def _resolve_draft_file(model_dir: Path, dims: ModelDims, explicit: str | None) -> str:
    if explicit:
        return explicit
    scenario_file = model_dir.parent / ".twin" / "scenario.yaml"
    if scenario_file.is_file():
        from . import scenario as scenario_mod

        try:
            sc = scenario_mod.load(scenario_file)
        except scenario_mod.ScenarioError:
            sc = None
        if sc is not None and sc.model.mtp is not None:
            return sc.model.mtp.draft_model_file
    return f"python/sglang/srt/models/{dims.model_type}_nextn.py"


def _target_model_file(draft_file: str, dims: ModelDims) -> str:
    if "_nextn" in draft_file:
        return draft_file.replace("_nextn", "")
    return f"python/sglang/srt/models/{dims.model_type}.py"


def load_weights(model_dir: Path, sglang_root: Path, *, with_draft: bool,
                 draft_model_file: str | None = None) -> WeightLoadReport:
    """Load the checkpoint in ``model_dir`` into the engine built from the workspace ``sglang_root``.

    ``draft_model_file`` (relative to ``sglang_root``) defaults to the one named by the workspace's
    ``.twin/scenario.yaml``. Raises ``WeightLoadError`` (``.log`` holds the SGLang-like traceback).
    """
    model_dir, root = Path(model_dir), Path(sglang_root)
    cfg = _read_json(model_dir / "config.json", root, "config.json")
    try:
        dims = ModelDims.from_config(cfg)
        fmt = quant_format_from_config(cfg)
        exclude = exclude_from_config(cfg)
    except (KeyError, ValueError, TypeError) as exc:
        tail = [f"{type(exc).__name__}: {exc}"]
        raise WeightLoadError(f"config.json: {exc}", _traceback(root, _CONFIG_READ, tail)) from None
    index = _read_json(model_dir / "model.safetensors.index.json", root, "model.safetensors.index.json")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, dict) for v in list(weight_map.values())[:1]):
        raise WeightLoadError("model.safetensors.index.json has no tensor metadata",
                              "RuntimeError: model.safetensors.index.json: weight_map must map names to "
                              "{dtype, shape} (dayzero twin, simulated checkpoint)")

    report = WeightLoadReport(quant_format=fmt, with_draft=with_draft)
    log = report.log_lines
    target_frames = _HEAD + _TARGET_WORKER + _RUNNER_CHAIN
    draft_frames = _HEAD + _DRAFT_WORKER + _RUNNER_CHAIN

    should_ignore: Any = None
    if fmt != "bf16":
        mod = _import_workspace(root, QUARK_UTILS, target_frames + _INIT_MODEL + _QUANT_IMPORT, "Quark utils")
        should_ignore = _require(mod, "should_ignore_layer", root, QUARK_UTILS,
                                 target_frames + _INIT_MODEL + _QUANT_IMPORT, "Quark utils")
    target_file = _target_model_file(_resolve_draft_file(model_dir, dims, draft_model_file), dims)
    build_frames = target_frames + _INIT_MODEL + [
        (_LOADER, 262, "_initialize_model", "return model_class("),
        (target_file, 3012, "__init__", "self.model = model_cls(config, quant_config, prefix=add_prefix(\"model\", prefix))"),
    ]
    builder = _Builder(root, fmt, exclude, should_ignore, build_frames)

    # target model
    engine: dict[str, _EngineParam] = {}
    builder.add(engine, list(checkpoint_modules(dims, include_mtp=False)))
    log.append(f"Load weight begin. type={dims.architecture}, quantization={fmt}, "
               f"{len(builder.unquantized)} module(s) kept bf16 by the exclude list")
    mtp_prefix = (dims.mtp_checkpoint_prefix + ".") if dims.mtp_checkpoint_prefix else None
    n_layers = dims.num_hidden_layers
    weights_frames = target_frames + _LOAD_WEIGHTS
    by_cat = report.target_bytes_by_category
    for name, meta in weight_map.items():
        if name.startswith("model.layers."):
            end = name.find(".", 13)
            if end > 13 and name[13:end].isdigit() and int(name[13:end]) >= n_layers:
                continue  # the target model skips the MTP layer (and anything beyond its layers)
        if mtp_prefix is not None and name.startswith(mtp_prefix):
            continue
        _load_one(root, engine, name, name, meta, by_cat, weights_frames, target_file, draft=False)
        report.num_tensors += 1
    missing = [n for n, p in engine.items() if not p.loaded]

    if with_draft:
        _load_draft(root, dims, fmt, exclude, should_ignore, weight_map, model_dir, draft_model_file,
                    draft_frames, report, missing)
    report.unquantized_modules = builder.unquantized[:] + report.unquantized_modules
    report.not_loaded = missing[:MAX_LISTED]
    if missing:
        log.append(f"Warning: {len(missing)} parameter(s) were not initialized from the checkpoint, e.g. {missing[0]}")
    log.append(f"Load weight end. target {report.target_bytes / 2**30:.2f} GiB"
               + (f", draft {report.draft_bytes / 2**30:.2f} GiB" if with_draft else ""))
    return report


def _load_draft(root: Path, dims: ModelDims, fmt: str, exclude: list[str], should_ignore: Any,
                weight_map: dict[str, Any], model_dir: Path, draft_model_file: str | None,
                frames: list[_Frame], report: WeightLoadReport, missing: list[str]) -> None:
    draft_file = _resolve_draft_file(model_dir, dims, draft_model_file)
    draft_path = root / draft_file
    if dims.mtp_layer_index is None or dims.mtp_checkpoint_prefix is None:
        line, code = _find_line(draft_path, "nextn_layer_id =", "class ")
        tail = ["AssertionError: Only 1 nextn layer is supported (config.json: num_nextn_predict_layers is 0)"]
        raise WeightLoadError("the draft model needs num_nextn_predict_layers >= 1 in config.json",
                              _traceback(root, frames + _INIT_MODEL + [(draft_file, line, "__init__", code)], tail),
                              draft=True)
    module = _import_workspace(root, draft_file, frames + _INIT_MODEL + _MODEL_CLASS_IMPORT, "draft model")
    init_frames = frames + _INIT_MODEL + [(_LOADER, 262, "_initialize_model", "return model_class(")]
    model_prefix = _require(module, "NEXTN_MODEL_PREFIX", root, draft_file, init_frames, "draft model")
    decoder_prefix = _require(module, "NEXTN_DECODER_PREFIX", root, draft_file, init_frames, "draft model")
    remap = _require(module, "remap_weight_name", root, draft_file, init_frames, "draft model")
    line, code = _find_line(draft_path, "self.decoder =", "class ")
    builder = _Builder(root, fmt, exclude, should_ignore,
                       init_frames + [(draft_file, line, "__init__", code),
                                      ("python/sglang/srt/models/deepseek_v2.py", 2617, "__init__",
                                       "self.mlp = DeepseekV2MoE(")])
    engine: dict[str, _EngineParam] = {}
    index = dims.mtp_layer_index
    builder.add(engine, layer_modules(dims, index, str(decoder_prefix), mtp=True, mtp_only_prefix=str(model_prefix)))
    report.unquantized_modules.extend(builder.unquantized)
    report.log_lines.append(f"Load weight begin (draft model, NextN layer {index} -> {decoder_prefix}), "
                            f"{len(builder.unquantized)} module(s) kept bf16 by the exclude list")
    ckpt_prefix = dims.mtp_checkpoint_prefix + "."
    weights_frames = frames + _LOAD_WEIGHTS
    remap_line, remap_code = _find_line(draft_path, "remap_weight_name(name")
    for name, meta in weight_map.items():
        if not name.startswith(ckpt_prefix):
            continue
        try:
            engine_name = remap(name, index)
        except Exception as exc:
            tail = _workspace_tail(root, exc)
            raise WeightLoadError(
                f"remap_weight_name({name!r}) raised {type(exc).__name__}: {exc}",
                _traceback(root, weights_frames + [(draft_file, remap_line, "load_weights", remap_code)], tail),
                checkpoint_param=name, draft=True) from None
        _load_one(root, engine, str(engine_name), name, meta, report.draft_bytes_by_category, weights_frames,
                  draft_file, draft=True)
        report.num_tensors += 1
    missing.extend(n for n, p in engine.items() if not p.loaded)


def _loader_line(model_path: Path, draft: bool) -> tuple[int, str]:
    if draft:  # the draft model file is in the workspace: point at its real line
        return _find_line(model_path, "weight_loader(param, loaded_weight)")
    return 2999, "weight_loader(param, loaded_weight)"


def _load_one(root: Path, engine: dict[str, _EngineParam], engine_name: str, ckpt_name: str, meta: Any,
              by_cat: dict[str, int], frames: list[_Frame], model_file: str, *, draft: bool) -> None:
    param = engine.get(engine_name)
    if param is not None and meta.get("dtype") == param.dtype and meta.get("shape") == param.shape:
        param.loaded = True
        by_cat[param.category] = by_cat.get(param.category, 0) + tensor_bytes(param.dtype, param.shape)
        return
    model_path = root / model_file
    if param is None:
        line, code = _find_line(model_path, "params_dict[name]") if draft else (2986, "param = params_dict[name]")
        summary = (f"Failed to load checkpoint weight {ckpt_name}: the model has no parameter '{engine_name}'")
        log = summary + "\n" + _traceback(root, frames + [(model_file, line, "load_weights", code)],
                                          [f"KeyError: '{engine_name}'"])
        raise WeightLoadError(summary, log, param=engine_name, checkpoint_param=ckpt_name, draft=draft)
    c_dtype, c_shape = meta.get("dtype"), meta.get("shape")
    summary = (f"Failed to load parameter '{engine_name}' (checkpoint: {ckpt_name}, dtype {c_dtype}, "
               f"shape {list(c_shape or [])}; engine: {param.dtype} {param.shape} {param.fmt})")
    if param.expert and c_shape != param.shape:
        line, code = _loader_line(model_path, draft)
        layer = "python/sglang/srt/layers/moe/fused_moe_triton/layer.py"
        dim = next((i for i, (a, b) in enumerate(zip(c_shape, param.shape, strict=False)) if a != b), 0)
        tail_frames = [(model_file, line, "load_weights", code),
                       (layer, 763, "weight_loader", "self._weight_loader_impl("),
                       (layer, 954, "_weight_loader_impl", "self._load_model_weight_or_group_weight_scale("),
                       (layer, 498, "_load_model_weight_or_group_weight_scale", "self._load_w13("),
                       (layer, 571, "_load_w13", "expert_data.copy_(loaded_weight)")]
        msg = (f"RuntimeError: The size of tensor a ({param.shape[dim] if dim < len(param.shape) else '?'}) must "
               f"match the size of tensor b ({c_shape[dim] if dim < len(c_shape) else '?'}) at non-singleton "
               f"dimension {dim}")
        raise WeightLoadError(summary, summary + "\n" + _traceback(root, frames + tail_frames, [msg]),
                              param=engine_name, checkpoint_param=ckpt_name, draft=draft)
    line, code = _loader_line(model_path, draft)
    tail_frames = [(model_file, line, "load_weights", code),
                   (WEIGHT_UTILS, 1047, "default_weight_loader", "assert param.size() == loaded_weight.size(), (")]
    if c_shape != param.shape:
        msg = f"AssertionError: Attempted to load weight ({_size(c_shape or [])}) into parameter ({_size(param.shape)})"
    else:
        msg = (f"AssertionError: Attempted to load weight ({_size(c_shape)}, dtype={TORCH_DTYPES.get(c_dtype, c_dtype)}) "
               f"into parameter ({_size(param.shape)}, dtype={TORCH_DTYPES.get(param.dtype, param.dtype)})")
    raise WeightLoadError(summary, summary + "\n" + _traceback(root, frames + tail_frames, [msg]),
                          param=engine_name, checkpoint_param=ckpt_name, draft=draft)

