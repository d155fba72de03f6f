"""A checkpoint's quantization, as its published ``quantization_config`` says (each vendor's own style).

``weight_format(qc)`` reads the format of the quantized weights from a quantization_config: AMD Quark
(``quant_method: quark``, the format in ``global_quant_config.weight.dtype``), fp8 (``quant_method: fp8``:
DeepSeek's, Qwen's, Zhipu's block-scaled exports), native MXFP4 (``quant_method: mxfp4``: gpt-oss). Standard
library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

METHODS = ("quark", "fp8", "mxfp4")


class QuantizationError(ValueError):
    """A quantization_config the twin cannot read (one line)."""


def weight_format(qc: Mapping[str, Any] | None) -> str:
    """``mxfp4`` / ``fp8`` / ``bf16`` for a quantization_config (None: an unquantized checkpoint)."""
    if not qc:
        return "bf16"
    method = str(qc.get("quant_method", "")).lower()
    if method == "mxfp4":
        return "mxfp4"
    if method == "fp8":
        return "fp8"
    if method == "quark":
        weight = ((qc.get("global_quant_config") or {}).get("weight") or {})
        dtype = str(weight.get("dtype", "")).lower()
        if dtype in ("fp4", "mxfp4", "fp4_e2m1"):
            return "mxfp4"
        if dtype.startswith("fp8"):
            return "fp8"
        raise QuantizationError(f"quantization_config: Quark weight dtype {dtype!r} is not one the twin simulates")
    raise QuantizationError(f"quantization_config: quant_method {method!r} is not one the twin simulates "
                            f"(it knows {', '.join(METHODS)})")  # fmt: skip


def quark_exclude(qc: Mapping[str, Any] | None) -> list[str]:
    """A Quark config's exclude list (empty for other methods)."""
    if not qc or str(qc.get("quant_method", "")).lower() != "quark":
        return []
    return [str(x) for x in (qc.get("exclude") or [])]


# --- which modules a vendor's quantizer left unquantized, matched as that vendor's tooling matches its list ----


class Matcher:
    """A vendor's list of modules kept unquantized, matched the way its own tooling reads it.

    ``quark`` (AMD Quark's ``exclude``; SGLang's ``check_equal_or_regex_match``): an exact module name, or
    ``re:<regex>`` matched with ``re.match``; an entry naming a parent module (a whole layer) covers what is under
    it. ``transformers`` (``modules_to_not_convert`` / ``ignored_layers`` of the fp8 and mxfp4 quantizers,
    ``quantizers_utils.should_convert_module``): an entry matches a module it matches as a regular expression from
    the start, a module it is a dotted prefix of, or a module whose name ends with it (``"gate"`` matches
    ``model.layers.0.block_sparse_moe.gate``; ``model.layers.*.self_attn`` every layer's attention)."""

    def __init__(self, entries: list[str], style: str) -> None:
        import re

        self.style = style
        self.entries = list(entries)
        self.exact: set[str] = set()
        self.patterns: list[Any] = []
        self._plain: tuple[str, ...] | None = None
        for e in self.entries:
            if style == "quark":
                if e.startswith("re:"):
                    self.patterns.append(re.compile(e[3:]))
                else:
                    self.exact.add(e)
            elif re.escape(e) == e.replace(".", r"\."):  # a plain name: prefix and suffix lookups, no regex
                self.exact.add(e)
            else:
                try:
                    self.patterns.append(re.compile(e))
                except re.error:
                    self.exact.add(e)

    def __call__(self, name: str) -> bool:
        if self.style == "quark":
            if name in self.exact or any(p.match(name) for p in self.patterns):
                return True
            parts = name.split(".")
            return any(".".join(parts[:k]) in self.exact for k in range(1, len(parts)))
        # a plain entry matches as re.match does from the start (any prefix of the name) or as a suffix; a tuple
        # of them asks str.startswith/endswith once each (this is asked for every module of a model)
        if self._plain is None:
            self._plain = tuple(self.exact)
        if name.startswith(self._plain) or name.endswith(self._plain):
            return True
        return any(p.match(name) or name.endswith(p.pattern) for p in self.patterns)


# --- how a published quantization_config stores a linear ------------------------------------------------------

MXFP4_BLOCK = 32  # e2m1 values per e8m0 scale


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class Scheme:
    """The storage rule of one published quantization_config (``scheme(qc, scale_dtype)``).

    * AMD Quark (``quant_method: quark``): mxfp4 ``weight`` U8 ``[o, i/2]`` + ``weight_scale`` U8 ``[o, i/32]``;
      fp8 per_channel ``weight`` F8_E4M3 ``[o, i]`` + ``weight_scale`` F32 ``[o]``. Every linear but the ``exclude``
      list's.
    * fp8 with ``weight_block_size`` (DeepSeek, Qwen, GLM, Kimi, MiniMax): ``weight`` F8_E4M3 ``[o, i]`` +
      ``weight_scale_inv`` ``[ceil(o/b0), ceil(i/b1)]`` in the vendor's scale dtype. Every linear but
      ``modules_to_not_convert`` / ``ignored_layers``'s.
    * native MXFP4 (``quant_method: mxfp4``, gpt-oss): only the routed experts, fused per layer:
      ``<proj>_blocks`` U8 ``[E, o, i/32, 16]`` + ``<proj>_scales`` U8 ``[E, o, i/32]``; the rest bf16.
    * none: every tensor in the checkpoint's dtype."""

    def __init__(self, qc: Mapping[str, Any] | None, *, scale_dtype: str = "F32", dtype: str = "BF16",
                 stored_unquantized: list[str] | tuple[str, ...] = ()) -> None:
        self.qc = dict(qc or {})
        self.method = str(self.qc.get("quant_method", "")).lower() if qc else "none"
        self.format = weight_format(qc)
        self.dtype = dtype
        self.scale_dtype = scale_dtype
        block = self.qc.get("weight_block_size")
        self.block = (int(block[0]), int(block[1])) if isinstance(block, list | tuple) and len(block) == 2 else None
        if self.method == "quark":
            self.unconverted = Matcher(quark_exclude(qc), "quark")
        else:
            listed = self.qc.get("modules_to_not_convert") or self.qc.get("ignored_layers") or []
            self.unconverted = Matcher([str(x) for x in listed], "transformers")
        self.also_unquantized = Matcher(list(stored_unquantized), "quark")

    def quantizes(self, name: str, category: str) -> bool:
        if self.method == "none" or self.format == "bf16":
            return False
        if self.method == "mxfp4" and category != "routed_experts":
            return False
        return not self.unconverted(name) and not self.also_unquantized(name)

    def tensors(self, t: Any, quantized: bool) -> list[tuple[str, str, tuple[int, ...]]]:
        """``[(suffix, dtype, shape)]`` of module ``t`` (a linear, or fused experts ``[E, o, i]``): the suffix is
        appended to the module's name as is (``.weight``, ``_blocks``...)."""
        fused = len(t.shape) == 3
        lead, (o, i) = tuple(t.shape[:-2]), t.shape[-2:]
        bare = "" if fused else ".weight"
        if not quantized:
            return [(bare, self.dtype, t.shape)]
        if self.method == "mxfp4":
            if not fused:
                raise QuantizationError(f"{t.name}: native MXFP4 stores fused experts only")
            return [("_blocks", "U8", (*lead, o, _ceil(i, MXFP4_BLOCK), MXFP4_BLOCK // 2)),
                    ("_scales", "U8", (*lead, o, _ceil(i, MXFP4_BLOCK)))]  # fmt: skip
        if self.method == "quark":
            if self.format == "mxfp4":
                return [(f"{bare}", "U8", (*lead, o, _ceil(i, 2))),
                        (f"{bare}_scale" if fused else ".weight_scale", "U8", (*lead, o, _ceil(i, MXFP4_BLOCK)))]  # fmt: skip
            return [(bare, "F8_E4M3", t.shape), (f"{bare}_scale" if fused else ".weight_scale", "F32", (*lead, o))]
        if self.block is not None:
            b0, b1 = self.block
            return [(bare, "F8_E4M3", t.shape),
                    (f"{bare}_scale_inv" if fused else ".weight_scale_inv", self.scale_dtype,
                     (*lead, _ceil(o, b0), _ceil(i, b1)))]  # fmt: skip
        return [(bare, "F8_E4M3", t.shape), (f"{bare}_scale" if fused else ".weight_scale", "F32", (*lead, 1))]


def quark_export_config(weight_format: str, exclude: list[str]) -> dict[str, Any] | None:
    """The ``quantization_config`` of a Quark export in ``weight_format`` with ``exclude`` (a hand-written
    scenario's checkpoint, as AMD's Quark writes one); None for bf16."""
    if weight_format == "bf16":
        return None
    if weight_format == "mxfp4":
        weight: dict[str, Any] = {
            "dtype": "fp4",
            "is_dynamic": False,
            "qscheme": "per_group",
            "ch_axis": -1,
            "group_size": 32,
            "symmetric": None,
            "round_method": "half_even",
            "scale_format": "e8m0",
            "scale_calculation_mode": "even",
            "scale_type": "float",
            "mx_element_dtype": None,
            "observer_cls": "PerBlockMXObserver",
        }
        inputs = dict(weight, is_dynamic=True)
    elif weight_format == "fp8":
        weight = {
            "dtype": "fp8_e4m3",
            "is_dynamic": False,
            "qscheme": "per_channel",
            "ch_axis": 0,
            "group_size": None,
            "symmetric": None,
            "round_method": "half_even",
            "scale_type": "float",
            "observer_cls": "PerChannelMinMaxObserver",
        }
        inputs = dict(weight, is_dynamic=True, ch_axis=1, observer_cls="PerChannelMinMaxObserver")
    else:
        raise QuantizationError(f"unknown weight_format {weight_format!r}")
    return {
        "quant_method": "quark",
        "export": {
            "kv_cache_group": [],
            "min_kv_scale": 0.0,
            "pack_method": "reorder",
            "weight_format": "real_quantized",
            "weight_merge_groups": None,
        },
        "global_quant_config": {
            "weight": weight,
            "input_tensors": inputs,
            "output_tensors": None,
            "bias": None,
            "target_device": None,
        },
        "layer_quant_config": {},
        "layer_type_quant_config": {},
        "kv_cache_quant_config": {},
        "exclude": exclude,
        "algo_config": None,
        "quant_mode": "eager_mode",
        "version": "0.10",
    }


def is_hf_quant_config(data: Any) -> bool:
    """Whether ``data`` is a ModelOpt ``hf_quant_config.json`` (a producer and a ``quantization`` section), the
    side file a checkpoint carries instead of a ``quantization_config`` in its config.json."""
    return isinstance(data, Mapping) and isinstance(data.get("quantization"), Mapping) and "producer" in data


def from_hf_quant_config(release: str, config: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The quantization config the pinned release makes of a ModelOpt ``hf_quant_config.json`` beside
    ``config`` (its own ``ModelConfig._parse_modelopt_quant_config``: ``modelopt_fp4``, ``modelopt_fp8``, ...;
    None for an algorithm it does not read). Raises ``QuantizationError`` when the release is not at hand."""
    import types

    from ..engine.loading.build import MODEL_CONFIG, _raw
    from ..engine.loading.executor import Executor
    from .scratch import ReleaseUnavailable, scratch

    holder = types.SimpleNamespace(hf_config=types.SimpleNamespace(
        architectures=list(config.get("architectures") or []), model_type=config.get("model_type")))  # fmt: skip
    try:
        with scratch(release, config) as (root, _):
            parse = _raw(Executor(root).module(MODEL_CONFIG).ModelConfig._parse_modelopt_quant_config)
            made = parse(holder, dict(data))
    except ReleaseUnavailable as exc:
        raise QuantizationError(str(exc)) from None
    return dict(made) if made else None
