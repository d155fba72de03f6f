"""Which checkpoint tensor a weight-loading crash is about, when the log does not name it.

An engineer reading ``AssertionError`` from a layer's ``weight_loader`` looks at where it raised (which layer
class owns that ``weight_loader``: the workspace's own source at the frame's line), whether the draft model was
loading (then only the checkpoint's extra layer is loaded), the two shapes and dtypes when the loader printed
them, and the checkpoint's weight index: which tensors of that layer class are stored unquantized (the exclude
list keeps them so) with that shape and dtype. The loader walks the checkpoint in order, so the first such
tensor is the one it stopped at. ``find_suspects`` does that and says how sure it is:

* ``named``: the log names the parameter (a KeyError, a loader that prints it);
* ``unique``: one tensor fits everything the log and the index say;
* ``likely``: several fit; the first in load order is the likely one;
* ``none``: nothing fits (the crash is probably something else).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel, Field

from .diagnose import Diagnosis
from .parsed import json_value, python_ast

# which checkpoint modules each of SGLang's linear layer classes loads (the last name component; for FusedMoE a
# routed expert's projection)
_CLASS_MODULES: dict[str, Callable[[str], bool]] = {
    "MergedColumnParallelLinear": lambda m: m.rsplit(".", 1)[-1] in ("gate_proj", "up_proj") and ".experts." not in m,
    "QKVParallelLinear": lambda m: m.rsplit(".", 1)[-1] in ("q_proj", "k_proj", "v_proj"),
    "FusedMoE": lambda m: re.search(r"\.experts\.\d+\.", m) is not None,
    "RowParallelLinear": lambda m: m.rsplit(".", 1)[-1] in ("o_proj", "down_proj") and ".experts." not in m,
    "ColumnParallelLinear": lambda m: m.rsplit(".", 1)[-1] in ("q_b_proj", "kv_b_proj", "q_proj"),
}
_UNQUANTIZED = ("BF16", "F16", "F32")
_SUFFIX = re.compile(r"\.(weight|weight_scale|bias|weight_scale_inv|input_scale)$")
_LOADERS = ("weight_loader", "_load_w13", "_load_w2", "_weight_loader_impl", "default_weight_loader")


class Suspects(BaseModel):
    confidence: Literal["named", "unique", "likely", "none"]
    layer_class: str | None = Field(None, description="the engine layer class whose loader raised")
    candidates: list[str] = Field(default_factory=list, description="checkpoint tensors, in load order")
    reason: str = ""


def _raising_class(read: Callable[[str], str | None], diag: Diagnosis) -> str | None:
    """The class that defines the innermost loader frame's function, read from the workspace source."""
    for frame in reversed(diag.frames):
        if frame.function not in _LOADERS:
            continue
        source = read(frame.file)
        if source is None:
            return None
        try:
            tree = python_ast(source)
        except SyntaxError:
            return None
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            if cls.lineno <= frame.line <= (cls.end_lineno or cls.lineno):
                return cls.name
        return None
    return None


_LAYER = re.compile(r"^model\.layers\.(\d+)\.", re.M)


def layers_from(names: Iterable[str], at_least: int = 0) -> list[int]:
    """The decoder layers (``model.layers.<N>.``) the checkpoint's tensor names hold, from ``at_least`` up: one
    regular-expression pass over the joined names, not one call per name (an index holds a hundred thousand)."""
    return sorted({n for n in map(int, _LAYER.findall("\n".join(names))) if n >= at_least})


_MTP_WORD = re.compile(r"(^|\.)(mtp|nextn)[a-z_]*(\.|$)", re.IGNORECASE)
_ANY_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def num_layers(config: dict) -> int:
    """The model's own decoder layers (a wrapper's language model's, for a vision-language config)."""
    inner = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return int(config.get("num_hidden_layers") or inner.get("num_hidden_layers") or 0)


def mtp_names(names: Iterable[str], config: dict) -> list[str]:
    """The checkpoint names of its MTP layers: under a module named for MTP or NextN layers (``mtp.layers.0``,
    ``model.mtp_layers.0``), or in a decoder layer beyond the model's own (``model.layers.<num_hidden_layers>``)."""
    n = num_layers(config)
    out = []
    for name in names:
        if _MTP_WORD.search(name):
            out.append(name)
            continue
        m = _ANY_LAYER.search(name)
        if m and n and int(m.group(1)) >= n:
            out.append(name)
    return out


def _fits_shape(stored: list[int], shape: list[int]) -> bool:
    """A tensor of ``shape`` can be what the log's ``stored`` sizes describe: the same shape, or, where the log
    gave one dimension's size (a broadcast error: ``The size of tensor a (2048) must match ... b (4096)``), a
    shape holding that size."""
    if len(stored) == 1 and len(shape) > 1:
        return stored[0] in shape
    return list(stored) == list(shape)


def find_suspects(diag: Diagnosis, config: dict, weight_map: dict, read: Callable[[str], str | None]) -> Suspects:
    """``weight_map``: the index's name -> {dtype, shape} (a real index maps names to shard files: then only
    names and the exclude list are used). ``read(path)`` returns a workspace file's text or None."""
    if diag.checkpoint_parameter or diag.parameter:
        return Suspects(confidence="named", candidates=[diag.checkpoint_parameter or diag.parameter or ""],
                        reason="the log names it")  # fmt: skip
    layer_class = _raising_class(read, diag)
    n_layers = num_layers(config)
    names = list(weight_map)
    if diag.draft_model and n_layers:  # the draft loads only the checkpoint's MTP layer(s)
        names = mtp_names(names, config)
    fits = _CLASS_MODULES.get(layer_class or "", lambda m: True)
    out, why = [], [f"raised in {layer_class or 'an unknown class'}'s loader"]
    if diag.draft_model:
        why.append(f"the draft loads layer(s) >= {n_layers}")
    for name in names:
        meta = weight_map[name] if isinstance(weight_map[name], dict) else {}
        module = _SUFFIX.sub("", name)
        if not name.endswith(".weight") or not fits(module):
            continue
        dtype, shape = meta.get("dtype"), meta.get("shape")
        if dtype is not None and dtype not in _UNQUANTIZED:
            continue  # a quantized tensor meets a quantized parameter: not this mismatch
        if diag.checkpoint_shape and shape and not _fits_shape(list(diag.checkpoint_shape), list(shape)):
            continue
        out.append(name)
    if diag.checkpoint_shape:
        why.append(f"stored {diag.checkpoint_shape}")
    why.append("unquantized in the checkpoint")
    order = sorted(out, key=_natural)
    confidence: Literal["unique", "likely", "none"] = "unique" if len(order) == 1 else "likely" if order else "none"
    return Suspects(confidence=confidence, layer_class=layer_class, candidates=order[:20], reason="; ".join(why))


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def suspects_in_workspace(diag: Diagnosis, read: Callable[[str], str | None], config_path: str) -> Suspects | None:
    """``find_suspects`` with the checkpoint's config and weight index read from the workspace."""
    text = read(config_path)
    index = read(config_path.rsplit("/", 1)[0] + "/model.safetensors.index.json")
    if text is None or index is None:
        return None
    try:
        config, weight_map = json.loads(text), json_value(index).get("weight_map", {})
    except ValueError:
        return None
    return find_suspects(diag, config, weight_map, read)
