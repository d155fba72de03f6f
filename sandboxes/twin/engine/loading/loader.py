"""Load the checkpoint into the engine the way the pinned release does, by running the release's own code.

``load_weights(model_dir, sglang_root, with_draft=..., tp_size=...)`` builds the model with the workspace's model
class (``build``), then feeds the checkpoint to that class's own ``load_weights``, as ``DefaultModelLoader`` does:
every tensor of ``model.safetensors.index.json`` (name, dtype and shape; the twin's index carries them where a real
one names shard files) as a shape-only tensor. Whatever the class does with names (stacked and expert mappings,
the MTP layer's renaming, ``hf_to_sglang_mapper``) and whatever its layers' weight loaders check (shapes, packed
formats, the quantization each layer was built with: Quark's exclude list matched by the workspace's
``should_ignore_layer``) is the release's code, run as written. For speculative decoding the draft model the
release picks for the architecture is built and loaded the same way.

Routed experts are sampled: every expert of a layer meets the same parameter the same way, so the first and the
last expert of each projection are loaded and the others counted as loaded alike.

A failure is the engine's crash: ``WeightLoadError`` whose ``log`` is the traceback SGLang prints, with the
scheduler's frames above the model code's (the real lines of the workspace's files) and the failing statement.
Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tracebacks import (
    AUX_CAPTURE,
    DRAFT_WORKER,
    EAGLE3_SHARE_EMBED,
    EAGLE_SHARE_HEAD,
    FUTURE,
    IMAGE_PYTHON_LIB,
    RUNNER_INIT,
    RUNNER_LOAD,
    SCHEDULER_START,
    TARGET_WORKER,
    Frame,
    render,
)
from . import fake_torch
from .build import BuildError, build_model
from .executor import ExecutionError, Executor
from .platform import Platform

MAX_LISTED = 50
_EXPERT = re.compile(r"^(.*\.experts\.)(\d+)(\..*)$")


class WeightLoadError(RuntimeError):
    """The engine failed while building the model or loading its weights; ``log`` is what SGLang prints.

    ``param``, ``checkpoint_param`` and ``draft`` say what failed, for the twin's own tests; nothing a real
    engine prints is added to the log because of them."""

    def __init__(self, summary: str, log: str, *, param: str | None = None, checkpoint_param: str | None = None,
                 draft: bool = False) -> None:  # fmt: skip
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
    unquantized_modules: list[str] = field(default_factory=list)  # engine linears built unquantized by the exclusions
    not_loaded: list[str] = field(default_factory=list)  # engine parameters no checkpoint weight filled
    log_lines: list[str] = field(default_factory=list)  # warnings the loader printed (real forms)
    target_class: str = ""  # the model class that loaded the checkpoint (file:class)
    draft_class: str = ""
    draft_layers: int = 0  # a separate draft checkpoint's decoder layers (0: the model drafts with its own layers)

    @property
    def target_bytes(self) -> int:
        return sum(self.target_bytes_by_category.values())

    @property
    def draft_bytes(self) -> int:
        return sum(self.draft_bytes_by_category.values())

    @property
    def total_bytes(self) -> int:
        return self.target_bytes + self.draft_bytes


# --- what a checkpoint tensor is for (the cost model's categories) ------------------------------------------


def category(name: str) -> str:
    """The part of the model a checkpoint tensor belongs to, by the conventions checkpoints name them with."""
    if "embed_tokens" in name or name.endswith("wte.weight"):
        return "embedding"
    if name.startswith("lm_head") or "shared_head.head" in name:
        return "lm_head"
    if ".indexer." in name:
        return "indexer"
    if "shared_expert" in name:
        return "shared_experts"
    if ".experts." in name:
        return "routed_experts"
    if re.search(r"\.(mlp|block_sparse_moe)\.(gate|router)\.", name) or "e_score_correction_bias" in name:
        return "router"
    if any(part in name for part in ("eh_proj", "enorm", "hnorm", "shared_head.norm", "pre_fc_norm", "mtp.fc.")):
        return "mtp"
    if name.endswith(("norm.weight", "norm.bias", "layernorm.weight", "layernorm.bias")):
        return "norm"
    if any(part in name for part in (".self_attn.", ".linear_attn.", ".attention.")):
        return "attention"
    if ".mlp." in name:
        return "dense_mlp"
    return "other"


# --- the checkpoint as the loader iterates it -------------------------------------------------------------


Entry = tuple[str, str, list[int], int]  # a checkpoint tensor as loaded: name, dtype, shape, how many it stands for


def sampled_entries(weight_map: dict[str, dict[str, Any]]) -> list[Entry]:
    """The checkpoint's tensors as the loader iterates them, ``(name, dtype, shape, weight)`` in checkpoint order:
    of each group of experts (``...experts.<id>.<tail>``) the first and the last, each standing for its share of
    the group (``weight``); every other tensor as itself."""
    entries: list[Entry] = []
    groups: dict[str, list[str]] = {}
    split: dict[str, tuple[str, str, str]] = {}
    for name in weight_map:
        head, sep, rest = name.partition(".experts.")
        if not sep:
            continue
        number, dot, tail = rest.partition(".")
        if dot and number.isdigit():
            key = head + ".experts.*." + tail
            groups.setdefault(key, []).append(number)
            split[name] = (key, number, tail)
    keep = {key: ({ids[0], ids[-1]}, len(ids)) for key, ids in groups.items()}
    for name, meta in weight_map.items():
        weight = 1
        if name in split:
            key, number, _ = split[name]
            kept, n = keep[key]
            if number not in kept:
                continue
            weight = n // len(kept) + (1 if number == min(kept) and n % len(kept) else 0)
        entries.append((name, str(meta.get("dtype", "BF16")), list(meta.get("shape") or []), weight))
    return entries


class _Checkpoint:
    """``(name, tensor)`` pairs in checkpoint order; counts what each consumed tensor stands for."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries  # ``sampled_entries``: read, never changed (the target and its MTP draft share it)
        self.consumed: dict[str, int] = {}  # checkpoint name -> the bytes it stands for
        self.used: set[str] = set()

    def __iter__(self) -> Iterator[tuple[str, fake_torch.Tensor]]:
        for name, dtype, shape, weight in self.entries:
            tensor = fake_torch.Tensor(shape, fake_torch.DTYPES[fake_torch.SAFETENSORS.get(dtype, "bfloat16")],
                                       fake_torch.HOST)  # safetensors' tensors are read into host memory
            tensor.checkpoint_name = name  # type: ignore[attr-defined]
            nbytes = fake_torch.math.prod(shape) * tensor.dtype.itemsize if shape else tensor.dtype.itemsize
            self.consumed[name] = nbytes * weight
            yield name, tensor

    def bytes_by_category(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, nbytes in self.consumed.items():
            if name in self.used:
                c = category(name)
                out[c] = out.get(c, 0) + nbytes
        return out


def _track_copies(checkpoint: _Checkpoint, loaded_params: set[int]) -> Any:
    """Make ``copy_`` record which checkpoint tensor went into which parameter (through views of either)."""
    original = fake_torch.Tensor.copy_

    def copy_(self: fake_torch.Tensor, other: Any, non_blocking: bool = False) -> Any:
        result = original(self, other, non_blocking)
        root = getattr(self, "_root", self)
        loaded_params.add(id(root))
        src = getattr(other, "_root", other)
        name = getattr(src, "checkpoint_name", None)
        if name is not None:
            checkpoint.used.add(name)
        return result

    return original, copy_


# --- a failure as SGLang prints it ---------------------------------------------------------------------------

_STDLIB_LINES = {(f.file.rsplit("/", 1)[-1], f.func): f for f in FUTURE}


def _frames(exc: BaseException, root: Path) -> list[Frame]:
    """The frames of ``exc``'s traceback that the real engine would print: the workspace's code (its real
    lines) and the standard library's (as the image's Python numbers them); the twin's own frames are dropped."""
    out: list[Frame] = []
    tb = exc.__traceback__
    workspace = str(root) + "/"
    while tb is not None:
        code = tb.tb_frame.f_code
        path = code.co_filename
        if path.startswith(workspace):
            text = ""
            with contextlib.suppress(OSError, IndexError):
                text = Path(path).read_text(errors="replace").splitlines()[tb.tb_lineno - 1].strip()
            out.append(Frame(path[len(workspace):], code.co_name, text, tb.tb_lineno, exact=True))
        elif path.startswith(sys.prefix) or path.startswith(sys.base_prefix):
            known = _STDLIB_LINES.get((path.rsplit("/", 1)[-1], code.co_name))
            if known is not None:
                out.append(known)
            elif "/lib/python" in path:
                rel = path.split("/lib/python", 1)[1].split("/", 1)[1]
                out.append(Frame(f"{IMAGE_PYTHON_LIB}/{rel}", code.co_name, "", tb.tb_lineno))
        tb = tb.tb_next
    return out


def _exception_line(exc: BaseException) -> str:
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ in ("builtins", "__main__") else f"{cls.__module__}.{cls.__qualname__}"
    if cls.__module__.startswith(("sandboxes.", "fake_torch")):
        name = cls.__qualname__
    text = str(exc)
    if isinstance(exc, KeyError) and exc.args:
        text = repr(exc.args[0])
    return f"{name}: {text}" if text else name


def _render(root: Path, head: list[Frame], exc: BaseException) -> str:
    """Python's traceback of ``exc`` (and of what it was raised from or during) under ``head``."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if cur.__cause__ is not None:
            chain.append((cur, "\nThe above exception was the direct cause of the following exception:\n"))
            cur = cur.__cause__
        elif cur.__context__ is not None and not cur.__suppress_context__:
            chain.append((cur, "\nDuring handling of the above exception, another exception occurred:\n"))
            cur = cur.__context__
        else:
            chain.append((cur, ""))
            cur = None
    parts: list[str] = []
    for i, (e, _) in enumerate(reversed(chain)):
        frames = head + _frames(e, root) if i == len(chain) - 1 else _frames(e, root)
        tail = _exception_line(e).splitlines()
        if isinstance(e, SyntaxError) and e.filename:  # Python shows where the parser stopped, not a frame
            text = (e.text or "").rstrip("\n")
            stripped = text.lstrip()
            caret = " " * max((e.offset or 1) - 1 - (len(text) - len(stripped)), 0) + "^"
            tail = [f'  File "{e.filename}", line {e.lineno}', f"    {stripped}", f"    {caret}", f"SyntaxError: {e.msg}"]
        parts.append(render(root, frames, tail))
        joiner = list(reversed(chain))[i + 1][1] if i + 1 < len(chain) else ""
        if joiner:
            parts.append(joiner)
    return "\n".join(parts)


def _culprits(exc: BaseException, param_names: dict[int, str]) -> tuple[str | None, str | None]:
    """(engine parameter, checkpoint tensor) the failing frame was loading, from its locals (for the twin's own
    tests: the real engine prints neither)."""
    param = checkpoint = None
    tb = exc.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        for value in local.values():
            if isinstance(value, fake_torch.Tensor):
                root = value.__dict__.get("_root", value)
                if id(root) in param_names:
                    param = param_names[id(root)]
                name = root.__dict__.get("checkpoint_name")
                if name is not None:
                    checkpoint = name
        tb = tb.tb_next
    return param, checkpoint


def _failure(root: Path, head: list[Frame], exc: BaseException, *, draft: bool,
             param_names: dict[int, str] | None = None) -> WeightLoadError:  # fmt: skip
    cause = exc.cause if isinstance(exc, BuildError) and exc.cause is not None else exc
    imported = isinstance(cause, ExecutionError)
    while isinstance(cause, ExecutionError):  # a module importing a module that failed: the innermost failure
        cause = cause.cause
    summary = _exception_line(cause)
    cls = WorkspaceImportError if imported or isinstance(cause, SyntaxError | ImportError) else WeightLoadError
    if isinstance(exc, BuildError) and exc.cause is None:
        return cls(str(exc), render(root, head, [f"ValueError: {exc}"]), draft=draft)
    param, checkpoint = _culprits(cause, param_names or {})
    return cls(summary, _render(root, head, cause), draft=draft, param=param, checkpoint_param=checkpoint)


# --- loading -------------------------------------------------------------------------------------------------


def _read_json(path: Path, root: Path, what: str, text: str | None = None) -> Any:
    config_frames = SCHEDULER_START[:1] + [
        Frame("python/sglang/srt/managers/scheduler.py", "__init__", "self.init_model_config()", 0)]
    try:
        return json.loads(path.read_text() if text is None else text)
    except FileNotFoundError:
        msg = f"OSError: {path.parent} does not appear to have a file named {path.name}."
        raise WeightLoadError(f"{what}: {path} not found", render(root, config_frames, [msg])) from None
    except json.JSONDecodeError as exc:
        tail = [f"json.decoder.JSONDecodeError: {exc}", "", "During handling of the above exception, another "
                "exception occurred:", "", f"OSError: It looks like the config file at '{path}' is not a valid JSON file."]  # fmt: skip
        raise WeightLoadError(f"{what}: {path} is not valid JSON ({exc})", render(root, config_frames, tail)) from None


class _LogCapture(logging.Handler):
    """The warnings the release's loggers print while the model is built and loaded."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("sglang"):
            self.lines.append(record.getMessage())


def quant_format(config: dict[str, Any]) -> str:
    """``mxfp4`` / ``fp8`` / ``bf16``: the checkpoint's weight format, as its quantization config says."""
    qc = config.get("quantization_config") or {}
    method = str(qc.get("quant_method", "")).lower()
    if not qc:
        return "bf16"
    if method == "mxfp4":
        return "mxfp4"
    weight = ((qc.get("global_quant_config") or {}).get("weight") or {}) if method == "quark" else {}
    dtype = str(weight.get("dtype", "")).lower()
    if dtype in ("fp4", "mxfp4", "fp4_e2m1"):
        return "mxfp4"
    return "fp8"


def _unquantized(model: Any, quantized: bool) -> list[str]:
    """The modules the quantization config left unquantized (their quant method is an ``Unquantized*Method``)."""
    if not quantized:
        return []
    out = []
    for name, module in model.named_modules():
        d = module.__dict__
        method = d.get("quant_method") or d.get("_modules", {}).get("quant_method")
        kind = type(method).__name__
        if kind.startswith("Unquantized") and ("Linear" in kind or "FusedMoE" in kind):
            out.append(name)
    return out


@dataclass
class _Loaded:
    model: Any
    bytes_by_category: dict[str, int]
    missing: list[str]
    unquantized: list[str]
    model_class: str  # file:class


def _load_one(executor: Executor, root: Path, config: dict[str, Any], entries: list[Entry], *, draft: bool,
              report: WeightLoadReport, eagle3: bool = False, model_dir: Path | None = None) -> _Loaded:  # fmt: skip
    worker = DRAFT_WORKER if draft else TARGET_WORKER
    try:
        built = build_model(executor, config, draft=draft, model_dir=model_dir)
    except (BuildError, ExecutionError, Exception) as exc:  # the constructor (or an import it needed) raised
        raise _failure(root, SCHEDULER_START + worker + RUNNER_INIT, exc, draft=draft) from None
    checkpoint = _Checkpoint(entries)
    loaded: set[int] = set()
    original, copy_ = _track_copies(checkpoint, loaded)
    param_names: dict[int, str] = {}
    for name, param in built.model.named_parameters():
        param._root = param  # type: ignore[attr-defined]
        param_names[id(param)] = name
        _sample_fused_experts(param)
    _mark_views()
    fake_torch.Tensor.copy_ = copy_  # type: ignore[method-assign]
    try:
        built.model.load_weights(iter(checkpoint))
    except Exception as exc:
        raise _failure(root, SCHEDULER_START + worker + RUNNER_LOAD, exc, draft=draft, param_names=param_names) from None
    finally:
        fake_torch.Tensor.copy_ = original  # type: ignore[method-assign]
    report.num_tensors += sum(w for _, _, _, w in checkpoint.entries)
    # a parameter the release marks as optional in a checkpoint (a KV cache method's k_scale/v_scale) is not missing
    missing = [n for n, p in built.model.named_parameters()
               if id(p) not in loaded and not p.__dict__.get("_skip_weight_check")]  # fmt: skip
    if draft:  # the draft worker hands the draft the target's embedding, and LM head (EAGLEWorker.__init__)
        # EAGLE3 keeps its own LM head over its draft vocabulary unless the class asks for the target's
        own_head = eagle3 and not getattr(built.model, "load_lm_head_from_target", False)
        method, frame = ("set_embed", EAGLE3_SHARE_EMBED) if own_head else ("set_embed_and_head", EAGLE_SHARE_HEAD)
        missing = [n for n in missing if not (n.endswith("embed_tokens.weight") or (n.startswith("lm_head.")
                                                                                   and not own_head))]  # fmt: skip
        if not callable(getattr(built.model, method, None)):  # a class that is no draft (e.g. no MTP head)
            line = f"AttributeError: '{type(built.model).__name__}' object has no attribute '{method}'"
            raise WeightLoadError(line, render(root, SCHEDULER_START + DRAFT_WORKER[:3] + [frame], [line]), draft=True)
    unquantized = _unquantized(built.model, bool(config.get("quantization_config")))
    return _Loaded(built.model, checkpoint.bytes_by_category(), missing, unquantized,
                   f"{built.model_class.file}:{built.model_class.name}")


def _capture_aux_states(root: Path, target: Any, draft_config: dict[str, Any]) -> None:
    """EAGLE3: the target's runner asks its model to capture the hidden states the draft's ``fc`` fuses, at the
    layers the draft's ``eagle_config`` names (``ModelRunner.init_aux_hidden_state_capture``), by the model class's
    own method."""
    eagle_config = draft_config.get("eagle_config") or {}
    if not eagle_config.get("use_aux_hidden_state", True):
        return
    capture = getattr(target, "set_eagle3_layers_to_capture", None)
    if not callable(capture):
        line = f"AttributeError: '{type(target).__name__}' object has no attribute 'set_eagle3_layers_to_capture'"
        raise WeightLoadError(line, render(root, SCHEDULER_START + TARGET_WORKER + AUX_CAPTURE, [line]))
    try:
        capture(eagle_config.get("eagle_aux_hidden_state_layer_ids"))
    except Exception as exc:
        raise _failure(root, SCHEDULER_START + TARGET_WORKER + AUX_CAPTURE, exc, draft=False) from None


def _checkpoint_entries(path: Path, root: Path) -> list[Entry]:
    """``sampled_entries`` of the index at ``path``, kept in the per-user cache by the index's contents (and this
    module's: how it samples): an index of 100k tensors is parsed and sampled once per user, not at every cold load
    (0.4 s to parse GLM-5's, 0.25 s to sample it)."""
    import hashlib

    from ... import cache_files
    from ...workspace.release import cache_dir

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        _read_json(path, root, "model.safetensors.index.json")  # raises as the engine does
        raise
    key = hashlib.sha256(raw + _SAMPLING).hexdigest()[:40]
    text = raw.decode(errors="replace")
    return cache_files.marshalled(cache_dir() / "checkpoint-entries" / f"{key}.bin", lambda: sampled_entries(
        _weight_map(_read_json(path, root, "model.safetensors.index.json", text))))


_SAMPLING = Path(__file__).read_bytes()  # a change to how entries are sampled is a new cache key


def _weight_map(index: Any) -> dict[str, Any]:
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, dict) for v in list(weight_map.values())[:1]):
        raise WeightLoadError("model.safetensors.index.json has no tensor metadata",
                              "RuntimeError: model.safetensors.index.json: weight_map must map names to "
                              "{dtype, shape} (dayzero twin, simulated checkpoint)")  # fmt: skip
    return weight_map


def _sample_fused_experts(param: Any) -> None:
    """A checkpoint that stores a layer's experts fused (one tensor) is loaded by the model's own loop over every
    expert id, one ``FusedMoE.weight_loader`` call each. As with per-expert checkpoints (``_Checkpoint``), the first
    and the last routed expert are loaded and those between, which meet the same parameter the same way, are
    counted as loaded alike: the parameter's loader skips them (shared experts fused after the routed ones are
    loaded)."""
    loader = param.__dict__.get("weight_loader")
    owner = getattr(loader, "__self__", None)
    if owner is None or not any(c.__name__ == "FusedMoE" for c in type(owner).__mro__):
        return
    routed = getattr(owner, "_num_global_routed", None) or getattr(owner, "num_experts", 0)

    def sampled(p: Any, loaded_weight: Any, *args: Any, **kwargs: Any) -> Any:
        # FusedMoE.weight_loader(param, loaded_weight, weight_name, shard_id, expert_id, ...), however a model's
        # loader passes them (positionally or by name)
        expert_id = kwargs.get("expert_id", args[2] if len(args) > 2 else None)
        if isinstance(expert_id, int) and 0 < expert_id < routed - 1:
            return None  # the release's weight_loader returns None too
        return loader(p, loaded_weight, *args, **kwargs)

    param.weight_loader = sampled


_VIEW_METHODS = ("narrow", "view", "reshape", "__getitem__", "t", "transpose", "unsqueeze", "squeeze", "chunk", "split",
                 "contiguous", "to", "flatten", "permute")  # fmt: skip


def _mark_views() -> None:
    """Views of a tensor know the tensor they view (``_root``), so a copy into a narrowed parameter counts for it."""
    if getattr(fake_torch.Tensor, "_dz_views", False):
        return
    for method in _VIEW_METHODS:
        fn = getattr(fake_torch.Tensor, method)

        def wrapped(self: Any, *args: Any, _fn: Any = fn, **kwargs: Any) -> Any:
            out = _fn(self, *args, **kwargs)
            root = self.__dict__.get("_root", self)
            for item in out if isinstance(out, tuple) else (out,):
                if isinstance(item, fake_torch.Tensor) and item is not self:
                    item.__dict__["_root"] = root
            return out

        setattr(fake_torch.Tensor, method, wrapped)
    fake_torch.Tensor._dz_views = True  # type: ignore[attr-defined]


BUNDLED_NOTE = ("dayzero digital twin (simulated): this workspace holds the bundled excerpt of SGLang, which has no "
                "model code; loading weights runs the release's own model classes, so it needs the release "
                "(materialize the workspace where `pip download sglang==VERSION --no-deps` can reach a registry)")


def _require_release(root: Path) -> None:
    """The twin runs the release's model code; the bundled excerpt (an offline stand-in) has none."""
    source = root.parent / ".twin" / "source.json"
    try:
        bundled = json.loads(source.read_text()).get("sglang", "").startswith("bundled excerpt")
    except (OSError, ValueError, AttributeError):
        bundled = False
    if bundled:
        raise WeightLoadError(BUNDLED_NOTE, BUNDLED_NOTE)


def load_weights(model_dir: Path, sglang_root: Path, *, with_draft: bool, tp_size: int = 1,
                 attn_tp_size: int | None = None, platform: Platform | None = None, draft_dir: Path | None = None,
                 eagle3: bool = False, **_ignored: Any) -> WeightLoadReport:  # fmt: skip
    """Load the checkpoint in ``model_dir`` into the engine built from the workspace ``sglang_root``; with
    ``with_draft``, the draft too: from ``draft_dir`` (a separate draft checkpoint) or else the model's own (its
    MTP layer). ``eagle3``: the EAGLE3 algorithm (the target captures the draft's aux hidden states).

    Raises ``WeightLoadError`` whose ``.log`` is the traceback SGLang prints."""
    model_dir, root = Path(model_dir), Path(sglang_root)
    config = _read_json(model_dir / "config.json", root, "config.json")
    entries = _checkpoint_entries(model_dir / "model.safetensors.index.json", root)
    draft_config, draft_entries = config, entries
    if with_draft and draft_dir is not None and Path(draft_dir).resolve() != model_dir.resolve():
        draft_config = _read_json(Path(draft_dir) / "config.json", root, "config.json")
        draft_entries = _checkpoint_entries(Path(draft_dir) / "model.safetensors.index.json", root)
    _require_release(root)
    platform = platform or Platform()
    platform.tp_size = max(1, tp_size)
    platform.attn_tp_size = attn_tp_size
    report = WeightLoadReport(quant_format=quant_format(config), with_draft=with_draft)
    capture = _LogCapture()
    logging.getLogger().addHandler(capture)
    try:
        executor = Executor(root, platform)
        target = _load_one(executor, root, config, entries, draft=False, report=report, model_dir=model_dir)
        report.target_bytes_by_category, report.target_class = target.bytes_by_category, target.model_class
        report.unquantized_modules = target.unquantized
        missing = target.missing
        if with_draft and eagle3:
            _capture_aux_states(root, target.model, draft_config)
        if with_draft:
            drafted = _load_one(executor, root, draft_config, draft_entries, draft=True, report=report, eagle3=eagle3,
                                model_dir=Path(draft_dir) if draft_config is not config else model_dir)
            report.draft_bytes_by_category, report.draft_class = drafted.bytes_by_category, drafted.model_class
            if draft_config is not config:
                report.draft_layers = int(draft_config.get("num_hidden_layers") or 1)
            report.unquantized_modules += drafted.unquantized
            missing += drafted.missing
    finally:
        logging.getLogger().removeHandler(capture)
    report.not_loaded = missing[:MAX_LISTED]
    report.log_lines = capture.lines
    return report
