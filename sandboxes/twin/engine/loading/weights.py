"""Weight loading, mechanically: build the engine's parameters and load the checkpoint's metadata into them.

``load_weights(model_dir, sglang_root, with_draft=..., tp_size=...)`` follows what SGLang 0.5.12 does for a
Quark checkpoint of a DeepSeek-style model, minus the tensors:

1. read ``config.json`` (dimensions; ``quantization_config.exclude``) and every tensor's dtype and shape from
   ``model.safetensors.index.json``;
2. decide, module by module, which linears stay unquantized by running the *workspace's own*
   ``should_ignore_layer`` (``layers/quantization/quark/utils.py``) on the engine's module names, with the
   fused modules SGLang builds for Quark (``gate_up_proj``, ``fused_qkv_a_proj_with_mqa``) and their shards;
3. for the draft model (speculative decoding), first map the exclude list through the draft class's own
   ``hf_to_sglang_mapper`` (the workspace's ``WeightsMapper`` from ``models/utils.py``, as
   ``model_loader/loader.py`` does), drop quantization for the whole layer when the mapped layer prefix is
   excluded (as ``DeepseekV3ForCausalLMNextN.__init__`` does), and name the MTP layer's modules as the
   DeepSeek loader renames them (``model.layers.<N>`` -> the decoder prefix, the MTP-only weights -> ``model``);
4. load every checkpoint tensor into its parameter the way its layer class's ``weight_loader`` does: narrow
   to this tensor-parallel rank, then compare shapes. A mismatch raises what that loader raises, verbatim
   (``sandboxes/twin/engine/messages.py``); equal shapes load even when the dtype differs (``copy_`` converts), just
   as in the real engine.

The workspace files are read, not imported (they import torch): ``pure_code`` runs just the pure functions.
So editing them, or ``config.json``, changes the outcome; the twin never looks for a particular fix.
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...models.catalogue import (
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
from .. import messages
from ..tracebacks import (
    DEEPSEEK_LOAD,
    DRAFT_WORKER,
    FUTURE,
    NEXTN_LOAD,
    RUNNER_INIT,
    RUNNER_LOAD,
    SCHEDULER_START,
    TARGET_WORKER,
    Frame,
    render,
)
from .pure_code import PureCodeError, class_attribute, definition_line, load_definitions, parsed_files
from .stubbed_init import ConstructionError, construct
from .stubbed_init import StubValue as _StubValue

QUARK_UTILS = "python/sglang/srt/layers/quantization/quark/utils.py"
MODEL_UTILS = "python/sglang/srt/models/utils.py"
LINEAR_PY = "python/sglang/srt/layers/linear.py"
WEIGHT_UTILS = "python/sglang/srt/model_loader/weight_utils.py"
FUSED_MOE_PY = "python/sglang/srt/layers/moe/fused_moe_triton/layer.py"
VOCAB_PY = "python/sglang/srt/layers/vocab_parallel_embedding.py"
DEFAULT_DRAFT = ("python/sglang/srt/models/deepseek_nextn.py", "DeepseekV3ForCausalLMNextN")
# model_loader/loader.py adds these for every Quark checkpoint: fused module -> its checkpoint shards; a GQA
# model's class declares its fused qkv_proj in its own packed_modules_mapping
QUARK_PACKED_MODULES = {"gate_up_proj": ["gate_proj", "up_proj"],
                        "fused_qkv_a_proj_with_mqa": ["q_a_proj", "kv_a_proj_with_mqa"],
                        "qkv_proj": ["q_proj", "k_proj", "v_proj"]}  # fmt: skip
STACKED = {"gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
           "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2)}
# MTP-only weights the DeepSeek loader puts on the draft's inner model instead of its decoder layer
NEXTN_SPEC_WEIGHT_NAMES = ("shared_head.norm", "eh_proj", "enorm", "hnorm")
TORCH_DTYPES = {"BF16": "torch.bfloat16", "F16": "torch.float16", "F32": "torch.float32", "U8": "torch.uint8",
                "I8": "torch.int8", "F8_E4M3": "torch.float8_e4m3fn"}  # fmt: skip
MAX_LISTED = 50


class WeightLoadError(RuntimeError):
    """The engine failed while building the model or loading its weights; ``log`` is what SGLang prints.

    ``param``, ``checkpoint_param`` and ``draft`` say what really failed, for the twin's own tests; nothing a
    real engine prints is added to the log because of them.
    """

    def __init__(self, summary: str, log: str, *, param: str | None = None, checkpoint_param: str | None = None,
                 draft: bool = False) -> None:
        super().__init__(summary)
        self.summary = summary
        self.log = log
        self.param = param
        self.checkpoint_param = checkpoint_param
        self.draft = draft


class WorkspaceImportError(WeightLoadError):
    """A workspace source file the engine imports is broken (syntax error, missing name, ...)."""


@dataclass
class WeightLoadReport:
    quant_format: str
    with_draft: bool
    num_tensors: int = 0
    target_bytes_by_category: dict[str, int] = field(default_factory=dict)
    draft_bytes_by_category: dict[str, int] = field(default_factory=dict)
    unquantized_modules: list[str] = field(default_factory=list)  # engine linears built bf16 by the exclude list
    not_loaded: list[str] = field(default_factory=list)  # engine parameters no checkpoint weight filled
    log_lines: list[str] = field(default_factory=list)  # warnings the loader printed (real forms)

    @property
    def target_bytes(self) -> int:
        return sum(self.target_bytes_by_category.values())

    @property
    def draft_bytes(self) -> int:
        return sum(self.draft_bytes_by_category.values())

    @property
    def total_bytes(self) -> int:
        return self.target_bytes + self.draft_bytes


# --- the engine's layers ------------------------------------------------------------------------------------

# layer classes, by the loader they use
MERGED = "MergedColumnParallelLinear"
QKV = "QKVParallelLinear"
COLUMN = "ColumnParallelLinear"
ROW = "RowParallelLinear"
REPLICATED = "ReplicatedLinear"
FUSED_QKV_A = "fused_qkv_a"  # ReplicatedLinear loaded from the concatenation of its two checkpoint weights
FUSED_MOE = "FusedMoE"
VOCAB = "VocabParallelEmbedding"
DEFAULT = "default"  # norms and other parameters with default_weight_loader


def _layer_class(module: Module, fuse_qkv_a: bool, gqa: bool = False) -> str:
    local = module.local or module.name
    last = local.rsplit(".", 1)[-1]
    if module.fused_moe:
        return FUSED_MOE
    if module.kind == "embedding" or module.name == "lm_head":
        return VOCAB
    if module.kind not in (LINEAR, "plain_linear", "router"):
        return DEFAULT
    if last in ("gate_proj", "up_proj"):
        return MERGED
    if last in ("q_proj", "k_proj", "v_proj") and gqa:
        return QKV
    if last in ("q_a_proj", "kv_a_proj_with_mqa") and fuse_qkv_a:
        return FUSED_QKV_A
    if last in ("o_proj", "down_proj"):
        return ROW
    if last in ("q_b_proj", "kv_b_proj", "q_proj"):
        return COLUMN
    return REPLICATED


def _engine_module_name(name: str, layer_class: str) -> tuple[str, int | None]:
    """(engine module name, shard index) of a checkpoint module name."""
    base, _, last = name.rpartition(".")
    if layer_class in (MERGED, QKV):
        fused, shard = STACKED[last]
        return f"{base}.{fused}", shard
    if layer_class == FUSED_QKV_A:
        return f"{base}.fused_qkv_a_proj_with_mqa", ["q_a_proj", "kv_a_proj_with_mqa"].index(last)
    return name, None


@dataclass
class _Param:
    """One engine parameter (this rank's shape)."""

    dtype: str
    shape: list[int]
    fmt: str
    category: str
    layer_class: str
    shard_rows: dict[int, int] = field(default_factory=dict)  # merged/fused: shard id -> its rows on this rank
    loaded: bool = False


def _shard(shape: tuple[int, ...], layer_class: str, tp: int) -> list[int]:
    s = list(shape)
    if layer_class in (COLUMN, MERGED, QKV, VOCAB) and s:
        s[0] = max(1, s[0] // tp)
    elif layer_class == ROW and len(s) == 2 and s[1] > 1:
        s[1] = max(1, s[1] // tp)
    return s


class _Engine:
    """The engine's parameters, built module by module with the workspace's quantization decisions."""

    def __init__(self, fmt: str, decide: Any, tp: int, attn_tp: int, fuse_qkv_a: bool, gqa: bool = False,
                 head_dim: int = 0) -> None:  # fmt: skip
        self.gqa, self.head_dim = gqa, head_dim
        self.fmt = fmt
        self.decide = decide  # engine module name -> True when it stays unquantized
        self.tp, self.attn_tp = tp, attn_tp
        self.fuse_qkv_a = fuse_qkv_a
        self.params: dict[str, _Param] = {}
        self.unquantized: list[str] = []
        self.modules: dict[str, str] = {}  # checkpoint-named module -> engine module (for loading)

    def tp_for(self, module: Module) -> int:
        return self.attn_tp if ".self_attn." in f".{module.local or module.name}" else self.tp

    def add(self, modules: list[Module]) -> None:
        experts: dict[str, list[Module]] = {}
        for module in modules:
            cls = _layer_class(module, self.fuse_qkv_a, self.gqa)
            if cls == FUSED_MOE:
                experts.setdefault(module.fused_moe or "", []).append(module)
                continue
            engine_name, shard = _engine_module_name(module.name, cls)
            fmt = "bf16"
            if module.kind == LINEAR and self.fmt != "bf16":
                fmt = "bf16" if self.decide(engine_name) else self.fmt
            if fmt == "bf16" and module.kind == LINEAR and self.fmt != "bf16" and engine_name not in self.unquantized:
                self.unquantized.append(engine_name)
            tp = self.tp_for(module)
            for suffix, dtype, shape in param_specs(module, fmt):
                key = f"{engine_name}.{suffix}"
                rows = _shard(shape, cls, tp)
                if cls == QKV and shard and self.head_dim:  # fewer KV heads than ranks: each rank keeps one
                    rows[0] = max(rows[0], self.head_dim)
                if shard is None:
                    self.params[key] = _Param(dtype, rows, fmt, module.category, cls)
                    continue
                p = self.params.get(key)
                if p is None:
                    p = self.params[key] = _Param(dtype, [0, *rows[1:]], fmt, module.category, cls)
                p.shape[0] += rows[0] if cls in (MERGED, QKV) else shape[0]
                p.shard_rows[shard] = rows[0] if cls in (MERGED, QKV) else shape[0]
        for moe_name, group in experts.items():
            self._add_fused_moe(moe_name, group)

    def _add_fused_moe(self, moe_name: str, group: list[Module]) -> None:
        fmt = self.fmt if self.fmt != "bf16" and not self.decide(moe_name) else "bf16"
        if fmt == "bf16" and self.fmt != "bf16":
            self.unquantized.append(moe_name)
        n = len({m.name.rsplit(".", 2)[-2] for m in group})
        gate = next(m for m in group if m.name.endswith("gate_proj"))
        down = next(m for m in group if m.name.endswith("down_proj"))
        inter = gate.shape[0] // self.tp
        for suffix, dtype, shape in param_specs(gate._replace(shape=(inter, gate.shape[1])), fmt):
            self.params[f"{moe_name}.w13_{suffix}"] = _Param(dtype, [n, 2 * shape[0], *shape[1:]], fmt,
                                                              gate.category, FUSED_MOE)  # fmt: skip
        for suffix, dtype, shape in param_specs(down._replace(shape=(down.shape[0], inter)), fmt):
            self.params[f"{moe_name}.w2_{suffix}"] = _Param(dtype, [n, *shape], fmt, down.category, FUSED_MOE)


# --- loading ------------------------------------------------------------------------------------------------


@dataclass
class _Failure:
    tail: list[str]  # the exception line(s)
    frames: list[Frame]  # the frames below do_load_weights (thread pool + the layer's weight_loader)
    summary: str


def _size(shape: list[int]) -> str:
    return f"torch.Size([{', '.join(str(d) for d in shape)}])"


def _narrow(shape: list[int], dim: int, size: int) -> list[int]:
    out = list(shape)
    if dim < len(out):
        out[dim] = min(out[dim], size)
    return out


def _load_into(p: _Param, name: str, dtype: str, shape: list[int], shard: int | None,
               expert: tuple[int, int] | None) -> _Failure | None:  # fmt: skip
    """Check one checkpoint tensor against its parameter the way the layer's weight_loader does."""
    cls = p.layer_class
    if cls == FUSED_MOE:
        assert expert is not None
        _, shard_id = expert  # w1/w3 rows [0, i) and [i, 2i) of w13; w2 whole
        if ".w13_" in name:
            rows = p.shape[1] // 2
            want = [rows, *p.shape[2:]]
            got = _narrow(shape, 0, rows)
        else:
            want = list(p.shape[1:])
            got = _narrow(shape, 1, want[1]) if len(want) > 1 else list(shape)
        if got == want:
            return None
        dim = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), 0)
        msg = messages.TENSOR_SIZE_MISMATCH.format(a=want[dim], b=got[dim], dim=dim)
        return _Failure([f"RuntimeError: {msg}"], [
            Frame(FUSED_MOE_PY, "weight_loader", "self._weight_loader_impl(", 0, cls=FUSED_MOE),
            Frame(FUSED_MOE_PY, "_weight_loader_impl", "self._load_model_weight_or_group_weight_scale(", 0),
            Frame(FUSED_MOE_PY, "_load_model_weight_or_group_weight_scale", "self._load_w13(" if ".w13_" in name
                  else "self._load_w2(", 0),
            Frame(FUSED_MOE_PY, "_load_w13" if ".w13_" in name else "_load_w2", "expert_data.copy_(loaded_weight)", 0),
        ], msg)  # fmt: skip
    if cls in (MERGED, QKV) and shard is not None:
        want = [p.shard_rows[shard], *p.shape[1:]]
        got = _narrow(shape, 0, p.shard_rows[shard])
        if got == want:
            return None
        return _Failure(["AssertionError"], [Frame(LINEAR_PY, "weight_loader",
                                                   "assert param_data.shape == loaded_weight.shape",
                                                   725 if cls == MERGED else 1168, cls=cls, last=True)],
                        "AssertionError")  # fmt: skip
    if cls in (COLUMN, VOCAB):
        got = _narrow(shape, 0, p.shape[0])
        if got == p.shape:
            return None
        if cls == VOCAB:
            return _Failure(["AssertionError"], [Frame(VOCAB_PY, "weight_loader",
                                                       "assert param.data.shape == loaded_weight.shape", 440,
                                                       cls=VOCAB)],
                            "AssertionError")  # fmt: skip
        msg = messages.COLUMN_SHAPE.format(param=_size(p.shape), loaded=_size(got))
        return _Failure([f"AssertionError: {msg}"], [Frame(LINEAR_PY, "weight_loader", "assert (", 432, cls=COLUMN)], msg)
    if cls == ROW:
        got = _narrow(shape, 1, p.shape[1]) if len(shape) == 2 and len(p.shape) == 2 else list(shape)
        if got == p.shape:
            return None
        msg = messages.ROW_SHAPE.format(param=_size(p.shape), loaded=_size(got))
        return _Failure([f"AssertionError: {msg}"], [Frame(LINEAR_PY, "weight_loader", "assert (", 1485, cls=ROW)], msg)
    if cls in (REPLICATED, FUSED_QKV_A):
        if shape == p.shape:
            return None
        msg = messages.REPLICATED_SHAPE.format(param=_size(p.shape), param_dtype=TORCH_DTYPES.get(p.dtype, p.dtype),
                                               loaded=_size(shape), loaded_dtype=TORCH_DTYPES.get(dtype, dtype))  # fmt: skip
        return _Failure([f"AssertionError: {msg}"], [Frame(LINEAR_PY, "weight_loader", "assert (", 272, cls=REPLICATED)], msg)
    if shape == p.shape:
        return None
    msg = messages.DEFAULT_LOADER.format(loaded=_size(shape), param=_size(p.shape))
    return _Failure([f"AssertionError: {msg}"],
                    [Frame(WEIGHT_UTILS, "default_weight_loader", "assert param.size() == loaded_weight.size(), (", 1300)],
                    msg)  # fmt: skip


def _expert_target(name: str) -> tuple[str, int, int] | None:
    """``mlp.experts.{e}.{gate,up,down}_proj.<suffix>`` -> (engine param, expert id, shard id)."""
    parts = name.split(".")
    try:
        i = parts.index("experts")
        e = int(parts[i + 1])
    except (ValueError, IndexError):
        return None
    proj, suffix = parts[i + 2], ".".join(parts[i + 3:])
    which = {"gate_proj": ("w13", 0), "up_proj": ("w13", 1), "down_proj": ("w2", 0)}.get(proj)
    if which is None:
        return None
    base = ".".join(parts[: i + 1])
    return f"{base}.{which[0]}_{suffix}", e, which[1]


class _Loader:
    """Walks the checkpoint in order and loads each tensor, as ``do_load_weights`` does."""

    def __init__(self, root: Path, engine: _Engine, frames: list[Frame], report: WeightLoadReport,
                 by_cat: dict[str, int], *, draft: bool) -> None:  # fmt: skip
        self.root, self.engine, self.frames, self.report, self.by_cat, self.draft = \
            root, engine, frames, report, by_cat, draft  # fmt: skip
        self.qkv_cache: dict[str, tuple[str, list[int]]] = {}
        # routed experts: every expert's tensor of one projection meets the same parameter the same way, so an
        # outcome is computed once per (layer, projection, dtype, shape) and reused for the other experts
        self.expert_ok: dict[tuple[str, str, str, tuple[int, ...]], tuple[_Param, int]] = {}

    def fail(self, f: _Failure, engine_name: str, ckpt: str, threaded: bool = True) -> WeightLoadError:
        frames = self.frames + (FUTURE if threaded else []) + f.frames
        return WeightLoadError(f.summary, render(self.root, frames, f.tail), param=engine_name,
                               checkpoint_param=ckpt, draft=self.draft)  # fmt: skip

    def load(self, ckpt: str, name: str, meta: dict[str, Any]) -> None:
        dtype, shape = meta.get("dtype", ""), list(meta.get("shape") or [])
        at = name.find(".mlp.experts.")
        key = None
        if at >= 0:
            number_end = name.find(".", at + 13)
            key = (name[:at], name[number_end:], dtype, tuple(shape))
            seen = self.expert_ok.get(key)
            if seen is not None:  # the same projection of another expert: loads as the first one did
                self.report.num_tensors += 1
                self.by_cat[seen[0].category] = self.by_cat.get(seen[0].category, 0) + seen[1]
                return
        params = self.engine.params
        self.report.num_tensors += 1
        module, _, suffix = name.rpartition(".")
        last = module.rpartition(".")[2]
        expert = _expert_target(name) if at >= 0 else None
        stacked = STACKED.get(last) if expert is None and (last in ("gate_proj", "up_proj") or self.engine.gqa) else None
        if stacked is not None:  # stacked_params_mapping
            target = f"{module.rpartition('.')[0]}.{stacked[0]}.{suffix}"
            p = params.get(target)
            if p is None:
                raise WeightLoadError(f"KeyError: '{target}'", render(
                    self.root, self.frames[:-1] + [Frame(self.frames[-1].file, "do_load_weights",
                                                         "param = params_dict[name]", 237)],
                    [f"KeyError: '{target}'"]), param=target, checkpoint_param=ckpt, draft=self.draft)  # fmt: skip
            failure = _load_into(p, target, dtype, shape, stacked[1], None)
            if failure:
                raise self.fail(failure, target, ckpt)
            self._mark(p, dtype, shape)
            return
        if expert is not None:  # expert_params_mapping: a missing parameter is skipped silently
            target, eid, sid = expert
            p = params.get(target)
            if p is None:
                return
            failure = _load_into(p, target, dtype, shape, None, (eid, sid))
            if failure:
                raise self.fail(failure, target, ckpt)
            self._mark(p, dtype, shape)
            if key is not None:
                self.expert_ok[key] = (p, tensor_bytes(dtype, shape))
            return
        if last in ("q_a_proj", "kv_a_proj_with_mqa") and self.engine.fuse_qkv_a:
            base = module.rpartition(".")[0]
            other = "kv_a_proj_with_mqa" if last == "q_a_proj" else "q_a_proj"
            key = f"{base}.{other}.{suffix}"
            if key not in self.qkv_cache:
                self.qkv_cache[f"{module}.{suffix}"] = (dtype, shape)
                return
            first = self.qkv_cache.pop(key)
            parts = [first, (dtype, shape)] if last == "kv_a_proj_with_mqa" else [(dtype, shape), first]
            (d0, s0), (_d1, s1) = parts
            if s0[1:] != s1[1:]:
                msg = messages.CAT_SIZES.format(expected=s0[1], got=s1[1])
                raise WeightLoadError(msg, render(self.root, self.frames[:-1] + [
                    Frame(self.frames[-1].file, "do_load_weights", "fused_weight = torch.cat(", 330)],
                    [f"RuntimeError: {msg}"]), param=f"{base}.fused_qkv_a_proj_with_mqa.{suffix}",
                    checkpoint_param=ckpt, draft=self.draft)  # fmt: skip
            fused = [s0[0] + s1[0], *s0[1:]]
            target = f"{base}.fused_qkv_a_proj_with_mqa.{suffix}"
            p = params.get(target)
            if p is None:
                raise WeightLoadError(f"KeyError: '{target}'", render(self.root, self.frames[:-1] + [
                    Frame(self.frames[-1].file, "do_load_weights", "param = params_dict[param_name]", 341)],
                    [f"KeyError: '{target}'"]), param=target, checkpoint_param=ckpt, draft=self.draft)  # fmt: skip
            failure = _load_into(p, target, d0, fused, None, None)
            if failure:
                raise self.fail(failure, target, ckpt)
            self._mark(p, d0, fused)
            return
        p = params.get(name)
        if p is None:
            self.report.log_lines.append(messages.NOT_IN_PARAMS_DICT.format(name=name))
            return
        failure = _load_into(p, name, dtype, shape, None, None)
        if failure:
            raise self.fail(failure, name, ckpt)
        self._mark(p, dtype, shape)

    def _mark(self, p: _Param, dtype: str, shape: list[int]) -> None:
        """A loaded tensor: the whole model's bytes of it (every rank together) count for its category."""
        p.loaded = True
        self.by_cat[p.category] = self.by_cat.get(p.category, 0) + tensor_bytes(dtype, shape)


# --- workspace code -----------------------------------------------------------------------------------------


def _workspace_error(root: Path, rel: str, exc: PureCodeError, frames: list[Frame], what: str) -> WorkspaceImportError:
    name = rel.removeprefix("python/").removesuffix(".py").replace("/", ".")
    if exc.kind == "ModuleNotFoundError":
        tail = [f"ModuleNotFoundError: No module named '{name}'"]
    elif exc.kind == "SyntaxError":
        tail = [f'  File "{root / rel}", line {exc.line}', f"SyntaxError: {exc.message}"]
    elif exc.kind == "ImportError":
        tail = [f"ImportError: {exc.message}"]
    else:
        tail = [f'  File "{root / rel}", line {exc.line}, in <module>', exc.message]
    return WorkspaceImportError(f"{what}: {tail[-1]}", render(root, frames, tail))


def _should_ignore(root: Path, frames: list[Frame]) -> Any:
    try:
        ns = load_definitions(root / QUARK_UTILS, ["should_ignore_layer"])
    except PureCodeError as exc:
        raise _workspace_error(root, QUARK_UTILS, exc, frames, "Quark utils") from None
    return ns["should_ignore_layer"]


def _draft_mapper(root: Path, draft_file: str, draft_class: str, frames: list[Frame]) -> Any:
    """The draft model class's ``hf_to_sglang_mapper`` (None when the class has none)."""
    try:
        ns = load_definitions(root / MODEL_UTILS, ["WeightsMapper"])
        found, mapper = class_attribute(root / draft_file, draft_class, "hf_to_sglang_mapper", ns)
    except PureCodeError as exc:
        rel = MODEL_UTILS if exc.path == root / MODEL_UTILS else draft_file
        raise _workspace_error(root, rel, exc, frames, "draft model") from None
    return mapper if found else None


def _decider(root: Path, should_ignore: Any, exclude: list[str], frames: list[Frame], draft: bool) -> Any:
    cache: dict[str, bool] = {}

    def decide(engine_name: str) -> bool:
        hit = cache.get(engine_name)
        if hit is None:
            try:
                hit = bool(should_ignore(engine_name, exclude, QUARK_PACKED_MODULES))
            except Exception as exc:  # the workspace's matcher raised (e.g. a bad regex in the exclude list)
                line = definition_line(root / QUARK_UTILS, "should_ignore_layer")
                tail = [f"{type(exc).__name__}: {exc}"]
                where = [Frame(LINEAR_PY, "__init__", "self.quant_method = quant_config.get_quant_method(", 0),
                         Frame("python/sglang/srt/layers/quantization/quark/quark.py", "get_quant_method",
                               "if should_ignore_layer(", 80),
                         Frame(QUARK_UTILS, "should_ignore_layer", "", line)]  # fmt: skip
                raise WeightLoadError(f"should_ignore_layer({engine_name!r}) raised {type(exc).__name__}: {exc}",
                                      render(root, frames + where, tail), param=engine_name, draft=draft) from None
            cache[engine_name] = hit
        return hit

    return decide


# --- config -------------------------------------------------------------------------------------------------


def _read_json(path: Path, root: Path, what: str) -> Any:
    config_frames = SCHEDULER_START[:1] + [
        Frame("python/sglang/srt/managers/scheduler.py", "__init__", "self.init_model_config()", 0)]
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        msg = f"OSError: {path.parent} does not appear to have a file named {path.name}."
        raise WeightLoadError(f"{what}: {path} not found", render(root, config_frames, [msg])) from None
    except json.JSONDecodeError as exc:
        tail = [f"json.decoder.JSONDecodeError: {exc}", "", "During handling of the above exception, another "
                "exception occurred:", "", f"OSError: It looks like the config file at '{path}' is not a valid JSON file."]  # fmt: skip
        raise WeightLoadError(f"{what}: {path} is not valid JSON ({exc})", render(root, config_frames, tail)) from None


def _scenario_draft(model_dir: Path) -> tuple[str, str, str]:
    """(draft model file, class, decoder prefix) from the workspace's scenario, else DeepSeek's NextN."""
    scenario_file = model_dir.parent / ".twin" / "scenario.yaml"
    if scenario_file.is_file():
        from ... import scenario as scenario_mod

        try:
            sc = scenario_mod.load(scenario_file)
        except scenario_mod.ScenarioError:
            sc = None
        if sc is not None and sc.model.mtp is not None:
            m = sc.model.mtp
            return m.draft_model_file, m.draft_model_class, m.engine_prefix
    return DEFAULT_DRAFT[0], DEFAULT_DRAFT[1], "model.decoder"


def load_weights(model_dir: Path, sglang_root: Path, *, with_draft: bool, tp_size: int = 1, attn_tp_size: int | None = None,
                 draft: tuple[str, str, str] | None = None) -> WeightLoadReport:  # fmt: skip
    """Load the checkpoint in ``model_dir`` into the engine built from the workspace ``sglang_root``.

    ``draft`` is (draft model file relative to ``sglang_root``, its class, the prefix it registers the MTP
    decoder layer under); it defaults to what the workspace's ``.twin/scenario.yaml`` names. Raises
    ``WeightLoadError`` whose ``.log`` is the traceback SGLang prints.
    """
    model_dir, root = Path(model_dir), Path(sglang_root)
    tp = max(1, tp_size)
    attn_tp = max(1, attn_tp_size or tp)
    cfg = _read_json(model_dir / "config.json", root, "config.json")
    try:
        dims = ModelDims.from_config(cfg)
        fmt = quant_format_from_config(cfg)
        exclude = exclude_from_config(cfg)
    except (KeyError, ValueError, TypeError) as exc:
        raise WeightLoadError(f"config.json: {exc}", f"{type(exc).__name__}: {exc}") from None
    index = _read_json(model_dir / "model.safetensors.index.json", root, "model.safetensors.index.json")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, dict) for v in list(weight_map.values())[:1]):
        raise WeightLoadError("model.safetensors.index.json has no tensor metadata",
                              "RuntimeError: model.safetensors.index.json: weight_map must map names to "
                              "{dtype, shape} (dayzero twin, simulated checkpoint)")  # fmt: skip
    report = WeightLoadReport(quant_format=fmt, with_draft=with_draft)
    target_init = SCHEDULER_START + TARGET_WORKER + RUNNER_INIT
    fuse_qkv_a = dims.q_lora_rank > 0
    gqa = dims.attention_kind == "gqa"

    # target model
    should_ignore = _should_ignore(root, target_init) if fmt != "bf16" else (lambda *a, **k: True)
    engine = _Engine(fmt, _decider(root, should_ignore, exclude, target_init, False), tp, attn_tp, fuse_qkv_a, gqa, dims.head_dim)
    engine.add(list(checkpoint_modules(dims, include_mtp=False)))
    loader = _Loader(root, engine, SCHEDULER_START + TARGET_WORKER + RUNNER_LOAD + DEEPSEEK_LOAD, report,
                     report.target_bytes_by_category, draft=False)  # fmt: skip
    n_layers = dims.num_hidden_layers
    for name, meta in weight_map.items():
        if name.startswith("model.layers.") and dims.mtp_layer_index is not None:
            layer = name.split(".")[2]
            if layer.isdigit() and int(layer) >= n_layers:
                continue  # NextNDisabledConfig: the target model skips the MTP layer
        if dims.mtp_checkpoint_prefix and name.startswith(dims.mtp_checkpoint_prefix + "."):
            continue
        loader.load(name, name, meta)
    report.unquantized_modules = engine.unquantized[:]
    missing = [n for n, p in engine.params.items() if not p.loaded]

    if with_draft:
        missing += _load_draft(root, cfg, dims, fmt, exclude, should_ignore, weight_map,
                               draft or _scenario_draft(model_dir), tp, attn_tp, fuse_qkv_a, report)  # fmt: skip
    report.not_loaded = missing[:MAX_LISTED]
    return report


class _QuarkConfig:
    """What the draft's constructor sees of SGLang's ``QuarkConfig``: its name, its exclude list and the
    mapper hook the model loader calls (``QuarkConfig.apply_weight_name_mapper`` maps the list in place)."""

    def __init__(self, exclude: list[str]) -> None:
        self.exclude_layers = list(exclude)
        self.packed_modules_mapping = dict(QUARK_PACKED_MODULES)

    def get_name(self) -> str:
        return "quark"

    def apply_weight_name_mapper(self, mapper: Any) -> None:
        self.exclude_layers = mapper.apply_list(self.exclude_layers)

    def __getattr__(self, name: str) -> Any:  # the rest of QuarkConfig is not the twin's business
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubValue()


class _HFConfig:
    """``config.json`` as the transformers config object the constructor reads (attributes)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.__dict__.update(cfg)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubValue()


def _draft_layer_quant(root: Path, cfg: dict[str, Any], draft_file: str, draft_class: str, decoder_prefix: str,
                       exclude: list[str], frames: list[Frame]) -> tuple[bool, list[str]]:  # fmt: skip
    """(whole layer unquantized, exclude list its modules are asked with) for the draft's decoder layer.

    As the engine does it: the model loader maps the exclude list through the class's ``hf_to_sglang_mapper``,
    then the workspace's draft class constructor runs (``stubbed_init``) and builds the decoder layer with
    whatever quantization config its own code chose (``None`` when the exclude list names the whole layer).
    """
    cache = _DraftInitCache(root, [draft_file, draft_class, decoder_prefix, exclude, cfg])
    hit = cache.get()
    if hit is not None:
        return hit
    mapper = _draft_mapper(root, draft_file, draft_class, frames)
    quant = _QuarkConfig(exclude)
    if mapper is not None:  # model_loader/loader.py: quant_config.apply_weight_name_mapper(...)
        quant.apply_weight_name_mapper(mapper)
    try:
        built = construct(root, draft_file, draft_class, config=_HFConfig(cfg), quant_config=quant)
    except PureCodeError as exc:
        raise _workspace_error(root, draft_file, exc, frames, "draft model") from None
    except ConstructionError as exc:
        tail = [f'  File "{root / draft_file}", line {exc.line}, in __init__', exc.message]
        raise WeightLoadError(f"draft model {draft_class}.__init__: {exc.message}",
                              render(root, frames, tail), draft=True) from None  # fmt: skip
    layer = built.built_at(decoder_prefix)
    layer_quant = layer.kwargs.get("quant_config", quant) if layer is not None else quant
    result = (True, []) if layer_quant is None else (False, list(getattr(layer_quant, "exclude_layers", None) or []))
    cache.put(result)
    return result


class _DraftInitCache:
    """The draft constructor's outcome, remembered in the workspace's ``.twin/`` with the content hash of every
    source file parsed to get it: the same inputs and the same code give the same outcome, and any edit of
    those files (or other inputs) computes it again. Saves a launch the parsing of the engine's modules."""

    def __init__(self, root: Path, inputs: list[Any]) -> None:
        twin = root.parent / ".twin"
        self.path = twin / "draft-init-cache.json" if twin.is_dir() else None
        self.key = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()

    def _entries(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text()) if self.path and self.path.is_file() else {}
        except (OSError, ValueError):
            return {}

    @staticmethod
    def _digest(path: str) -> str | None:
        try:
            return hashlib.sha1(Path(path).read_bytes()).hexdigest()
        except OSError:
            return None

    def get(self) -> tuple[bool, list[str]] | None:
        entry = self._entries().get(self.key)
        if not entry or any(self._digest(f) != h for f, h in entry["files"].items()):
            return None
        return bool(entry["whole"]), list(entry["exclude"])

    def put(self, result: tuple[bool, list[str]]) -> None:
        if self.path is None:
            return
        files = {str(p): self._digest(str(p)) for p in parsed_files()}
        entries = self._entries()
        entries[self.key] = {"files": files, "whole": result[0], "exclude": result[1]}
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(dict(list(entries.items())[-16:])))
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)


def _load_draft(root: Path, cfg: dict[str, Any], dims: ModelDims, fmt: str, exclude: list[str], should_ignore: Any,
                weight_map: dict[str, Any], draft: tuple[str, str, str], tp: int, attn_tp: int, fuse_qkv_a: bool,
                report: WeightLoadReport) -> list[str]:  # fmt: skip
    draft_file, draft_class, decoder_prefix = draft
    init = SCHEDULER_START + DRAFT_WORKER + RUNNER_INIT
    if dims.mtp_layer_index is None:  # DeepseekV2WeightLoaderMixin._initialize_nextn_conf
        raise WeightLoadError("num_nextn_predict_layers is not in the config", render(
            root, SCHEDULER_START + DRAFT_WORKER + RUNNER_LOAD + NEXTN_LOAD + DEEPSEEK_LOAD[:1] + [
                Frame(DEEPSEEK_LOAD[1].file, "do_load_weights", "nextn_conf = self._initialize_nextn_conf(is_nextn)", 116),
                Frame(DEEPSEEK_LOAD[1].file, "_initialize_nextn_conf",
                      'raise ValueError("num_nextn_predict_layers is not in the config")', 389)],
            ["ValueError: num_nextn_predict_layers is not in the config"]), draft=True)  # fmt: skip
    if not (root / draft_file).is_file():
        name = draft_file.removeprefix("python/").removesuffix(".py").replace("/", ".")
        raise WorkspaceImportError(f"No module named '{name}'", render(root, init, [
            f"ModuleNotFoundError: No module named '{name}'"]))  # fmt: skip
    nextn_layer = dims.mtp_layer_index if dims.num_hidden_layers != 1 else 0
    ckpt_prefix = dims.mtp_checkpoint_prefix or f"model.layers.{nextn_layer}"
    init_frames = init + [Frame(draft_file, "__init__", "self.model = ", 0)]
    whole, layer_exclude = (False, list(exclude))
    if fmt != "bf16":
        whole, layer_exclude = _draft_layer_quant(root, cfg, draft_file, draft_class, decoder_prefix, exclude, init)
    decide = _decider(root, should_ignore, layer_exclude, init_frames, True)
    engine = _Engine("bf16" if whole else fmt, decide, tp, attn_tp, fuse_qkv_a, dims.attention_kind == "gqa",
                     dims.head_dim)
    model_prefix = decoder_prefix.rpartition(".")[0] or "model"
    engine.add(layer_modules(dims, dims.mtp_layer_index, decoder_prefix, mtp=True, mtp_only_prefix=model_prefix))
    report.unquantized_modules.extend(engine.unquantized)
    loader = _Loader(root, engine, SCHEDULER_START + DRAFT_WORKER + RUNNER_LOAD + NEXTN_LOAD + DEEPSEEK_LOAD, report,
                     report.draft_bytes_by_category, draft=True)  # fmt: skip
    for name, meta in weight_map.items():
        if not name.startswith(ckpt_prefix + "."):
            continue
        if "shared_head.head" in name or "embed_tokens" in name:
            continue  # shared with the target model
        rest = name[len(ckpt_prefix):]
        to = model_prefix if any(s in name for s in NEXTN_SPEC_WEIGHT_NAMES) else decoder_prefix
        loader.load(name, to + rest, meta)
    return [n for n, p in engine.params.items() if not p.loaded]
