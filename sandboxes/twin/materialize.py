"""Materialise a twin workspace: the checkpoint's metadata and the SGLang source the twin's engine reads.

``materialize(scenario, dest)`` writes::

    dest/model/config.json                      HF-style config with a Quark quantization_config
    dest/model/model.safetensors.index.json     every parameter's dtype and shape (no tensor data)
    dest/model/tokenizer_config.json, generation_config.json
    dest/sglang/README.twin
    dest/sglang/python/sglang/srt/layers/quantization/quark/utils.py    should_ignore_layer()
    dest/sglang/<model.mtp.draft_model_file>                            the NextN draft model's naming
    dest/sglang/<engine.jit_kernels[].source>                           JIT kernel sources
    dest/sglang/<engine.moe_config_reader>                              tuned-fmoe CSV reader
    dest/sglang/<engine.default_moe_config>                             the tuned-fmoe CSV the image ships
    dest/.twin/scenario.yaml                                            the scenario used

Everything in ``dest/sglang`` is live: the twin imports or preprocesses these files at launch, so an agent
that edits them changes what the simulated engine does. Nothing here knows what a fix looks like.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import moe_csv
from . import scenario as scenario_mod
from .checkpoint import ModelDims, checkpoint_modules, param_specs, quantizable, tensor_bytes
from .scenario import JitKernel, MoEShape, Scenario

SIMULATED = "dayzero MI355X twin (simulated)"
QUARK_UTILS = "python/sglang/srt/layers/quantization/quark/utils.py"
MANAGED = ("model", "sglang", ".twin")


class MaterializeError(RuntimeError):
    pass


@dataclass
class MaterializeResult:
    dest: Path
    model_dir: Path
    sglang_root: Path
    scenario_copy: Path
    num_params: int
    total_bytes: int
    files: list[Path] = field(default_factory=list)


# --- the Quark export side: which checkpoint modules were stored unquantized ------------------------------


class _ReferenceMatcher:
    """Quark/SGLang exclude semantics: an exact name, or ``re:<pattern>`` matched with ``re.match``."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.exact: set[str] = set()
        self.patterns: list[re.Pattern[str]] = []
        for e in entries:
            if e.startswith("re:"):
                self.patterns.append(re.compile(e[3:]))
            else:
                self.exact.add(e)

    def __call__(self, name: str) -> bool:
        return name in self.exact or any(p.match(name) for p in self.patterns)


def checkpoint_params(dims: ModelDims, weight_format: str, exclude: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{param_name: {"dtype", "shape"}}`` for the whole checkpoint, in checkpoint order."""
    excluded = _ReferenceMatcher(exclude)
    out: dict[str, dict[str, Any]] = {}
    for module in checkpoint_modules(dims):
        fmt = "bf16"
        if quantizable(module) and weight_format != "bf16" and not excluded(module.name):
            fmt = weight_format
        for suffix, dtype, shape in param_specs(module, fmt):
            out[f"{module.name}.{suffix}"] = {"dtype": dtype, "shape": list(shape)}
    return out


# --- model/ --------------------------------------------------------------------------------------------------


def _quark_config(weight_format: str, exclude: list[str]) -> dict[str, Any] | None:
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
        raise MaterializeError(f"unknown weight_format {weight_format!r}")
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


def build_config(sc: Scenario) -> dict[str, Any]:
    """The checkpoint's ``config.json`` for scenario ``sc``."""
    m, a, moe = sc.model, sc.model.attention, sc.model.moe
    vocab = m.vocab_size
    cfg: dict[str, Any] = {
        "_comment": f"{SIMULATED}: checkpoint metadata only, no tensor data",
        "architectures": [m.architecture],
        "model_type": m.model_type,
        "hidden_size": m.hidden_size,
        "num_hidden_layers": m.num_hidden_layers,
        "num_nextn_predict_layers": 1 if m.mtp else 0,
        "vocab_size": vocab,
        "num_attention_heads": a.num_heads,
        "num_key_value_heads": a.num_heads,
        "q_lora_rank": a.q_lora_rank or None,
        "kv_lora_rank": a.kv_lora_rank,
        "qk_nope_head_dim": a.qk_nope_head_dim,
        "qk_rope_head_dim": a.qk_rope_head_dim,
        "v_head_dim": a.v_head_dim,
        "head_dim": a.qk_rope_head_dim,
        "n_routed_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k,
        "moe_intermediate_size": moe.intermediate_size,
        "n_shared_experts": moe.num_shared_experts,
        "first_k_dense_replace": m.first_k_dense_replace,
        "intermediate_size": m.dense_intermediate_size or moe.intermediate_size * max(1, moe.top_k),
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "max_position_embeddings": m.max_position_embeddings,
        "rope_theta": 1000000,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": vocab - 100,
        "eos_token_id": [vocab - 99, vocab - 92, vocab - 90],
        "pad_token_id": vocab - 99,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "transformers_version": "4.57.1",
    }
    if a.sparse_topk > 0:
        cfg["index_topk"] = a.sparse_topk
        cfg["index_n_heads"] = a.indexer_heads
        cfg["index_head_dim"] = a.indexer_head_dim
    qc = _quark_config(sc.quantization.weight_format, sc.exclude_entries())
    if qc is not None:
        cfg["quantization_config"] = qc
    twin: dict[str, Any] = {"simulated": True, "scenario": sc.name}
    if m.mtp and m.mtp.checkpoint_prefix != f"model.layers.{m.num_hidden_layers}":
        twin["mtp_layer_index"] = m.mtp.layer_index
        twin["mtp_checkpoint_prefix"] = m.mtp.checkpoint_prefix
    cfg["dayzero_twin"] = twin
    return cfg


def _tokenizer_config(sc: Scenario) -> dict[str, Any]:
    return {
        "_comment": f"{SIMULATED}: no tokenizer files; the twin counts tokens itself",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 202752,
        "bos_token": "[gMASK]",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "do_lower_case": False,
        "remove_space": False,
    }


def _generation_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "_comment": SIMULATED,
        "_from_model_config": True,
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"],
        "pad_token_id": cfg["pad_token_id"],
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 0.95,
        "transformers_version": cfg["transformers_version"],
    }


# --- sglang/ source excerpt ---------------------------------------------------------------------------------

_QUARK_UTILS_SRC = '''\
# {simulated}: excerpt of SGLang's AMD Quark helpers. The simulated engine imports
# should_ignore_layer() from this file when it builds a Quark-quantized model.
# SPDX-License-Identifier: Apache-2.0
"""Helpers for checkpoints quantized with AMD Quark."""

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Optional


def should_ignore_layer(
    layer_name: Optional[str],
    ignore: Iterable[str],
    fused_mapping: Mapping[str, list[str]] = MappingProxyType({{}}),
) -> bool:
    """Return True when the module ``layer_name`` must stay unquantized.

    ``ignore`` is the checkpoint's ``quantization_config["exclude"]`` list. QuarkConfig.get_quant_method()
    calls this with the prefix of every linear / FusedMoE module as the engine names it (for a FusedMoE
    the whole expert group, e.g. ``model.layers.5.mlp.experts``). An entry matches when it is equal to
    the module name, or, when it starts with ``re:``, when the rest is a regular expression that
    ``re.match``es the name (anchored at the start of the name only).

    Fused modules (``gate_up_proj``) do not exist in the checkpoint: ``fused_mapping`` lists their shards
    (``{{"gate_up_proj": ["gate_proj", "up_proj"]}}``); every shard must get the same answer.
    """
    if layer_name is None:
        return False

    proj_name = layer_name.rsplit(".", 1)[-1]
    shard_names = fused_mapping.get(proj_name)
    if not shard_names:
        return check_equal_or_regex_match(layer_name, ignore)

    base = layer_name[: len(layer_name) - len(proj_name)]
    answers = {{check_equal_or_regex_match(base + shard, ignore) for shard in shard_names}}
    if len(answers) != 1:
        raise ValueError(
            f"Found different quantization schemes for {{list(shard_names)}} in {{layer_name}}. "
            "SGLang requires all to use the same scheme."
        )
    return answers.pop()


def check_equal_or_regex_match(layer_name: str, targets: Iterable[str]) -> bool:
    """True if any target equals ``layer_name`` or is a ``re:`` pattern matching it."""
    for target in targets:
        if target.startswith("re:"):
            if re.match(target[3:], layer_name):
                return True
        elif target == layer_name:
            return True
    return False
'''

_DRAFT_MODEL_SRC = '''\
# {simulated}: excerpt of SGLang's NextN (MTP) draft model for {arch}.
# The torch modules are elided. The simulated engine reads NEXTN_MODEL_PREFIX and NEXTN_DECODER_PREFIX from
# this file to name the draft model's modules, and calls remap_weight_name() for every checkpoint weight
# of the MTP layer.
# SPDX-License-Identifier: Apache-2.0
"""Inference-only {arch} NextN speculative decoding (MTP draft model)."""

import logging
from typing import Iterable, Tuple

logger = logging.getLogger(__name__)

# The inner model of the draft model is registered as ``model``: embed_tokens, enorm, hnorm, eh_proj and
# shared_head live there. The MTP transformer layer is registered on it as a decoder submodule, so every
# module of that layer (attention, MoE, shared experts, norms) is named under NEXTN_DECODER_PREFIX, and
# quantization decisions (quant_config.get_quant_method -> should_ignore_layer) are asked for those names.
NEXTN_MODEL_PREFIX = "{model_prefix}"
NEXTN_DECODER_PREFIX = "{decoder_prefix}"

# In the checkpoint the MTP layer is stored as one more layer after the last decoder layer.
NEXTN_CHECKPOINT_PREFIX = "{checkpoint_fmt}"

# MTP-specific weights: loaded onto the inner model rather than onto the decoder layer.
NEXTN_SPEC_WEIGHT_NAMES = ("shared_head.norm", "eh_proj", "enorm", "hnorm")


def remap_weight_name(name: str, nextn_layer_id: int) -> str:
    """Map a checkpoint weight name of the MTP layer to the draft model's parameter name.

    ``{example_ckpt}.eh_proj.weight``                      -> ``{model_prefix}.eh_proj.weight``
    ``{example_ckpt}.mlp.shared_experts.up_proj.weight``   -> ``{decoder_prefix}.mlp.shared_experts.up_proj.weight``
    """
    prefix = NEXTN_CHECKPOINT_PREFIX.format(layer_id=nextn_layer_id)
    if not name.startswith(prefix + "."):
        raise ValueError(f"{{name}} is not a weight of NextN layer {{nextn_layer_id}} ({{prefix}})")
    rest = name[len(prefix) + 1 :]
    for spec_name in NEXTN_SPEC_WEIGHT_NAMES:
        if rest.startswith(spec_name + "."):
            return f"{{NEXTN_MODEL_PREFIX}}.{{rest}}"
    return f"{{NEXTN_DECODER_PREFIX}}.{{rest}}"


class {model_class}:
    """Inner model of the draft: embeddings, the two input norms, eh_proj, one decoder layer, the head norm."""

    def __init__(self, config, quant_config=None, prefix: str = NEXTN_MODEL_PREFIX):
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.enorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.hnorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.decoder = {layer_class}(
            config,
            layer_id=config.num_hidden_layers,
            quant_config=quant_config,
            is_nextn=True,
            prefix=NEXTN_DECODER_PREFIX,
        )
        self.shared_head = SharedHead(config.hidden_size, eps=config.rms_norm_eps)


class {causal_class}:
    """The draft model SGLang builds for --speculative-algorithm EAGLE/NEXTN."""

    def __init__(self, config, quant_config=None, prefix: str = ""):
        self.config = config
        self.quant_config = quant_config
        self.model = {model_class}(config, quant_config, prefix=NEXTN_MODEL_PREFIX)
        # lm_head and embed_tokens are shared with the target model after loading.

    def load_weights(self, weights: Iterable[Tuple[str, "torch.Tensor"]]):
        params_dict = dict(self.named_parameters())
        nextn_layer_id = self.config.num_hidden_layers
        nextn_prefix = NEXTN_CHECKPOINT_PREFIX.format(layer_id=nextn_layer_id)
        for name, loaded_weight in weights:
            if not name.startswith(nextn_prefix + "."):
                continue  # target-model weights
            name = remap_weight_name(name, nextn_layer_id)
            param = params_dict[name]
            weight_loader = getattr(param, "weight_loader", default_weight_loader)
            weight_loader(param, loaded_weight)


EntryClass = [{causal_class}]
'''

_MOE_READER_SRC = '''\
# {simulated}: excerpt of the ROCm MoE runner's tuned-kernel selection. The simulated engine
# calls load_tuned_fmoe() / lookup_tuned_fmoe() from this file to pick the fused-MoE kernels.
# SPDX-License-Identifier: Apache-2.0
"""Tuned fused-MoE kernel selections (aiter's tuned_fmoe CSV).

aiter benchmarks candidate 2-stage MoE kernels per (CU count, token count, MoE shape, quantization) and
stores the winner in a CSV; ``AITER_CONFIG_FMOE`` points at the file to use. A shape with no tuned row
runs the heuristic (untuned) path.
"""

import csv
import os
from typing import Mapping, Optional

FMOE_CSV_COLUMNS = {columns}
INT_COLUMNS = ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "use_g1u1",
               "doweight_stage1", "block_m", "ksplit", "run_1stage")
FLOAT_COLUMNS = ("us1", "err1", "us2", "err2", "us", "tflops", "bw")
DEFAULT_TUNED_FMOE = "{default_csv}"


def tuned_fmoe_path(environ: Optional[Mapping[str, str]] = None) -> str:
    """The CSV to read: ``$AITER_CONFIG_FMOE`` if set, else the file the image ships."""
    env = os.environ if environ is None else environ
    return env.get("AITER_CONFIG_FMOE") or DEFAULT_TUNED_FMOE


def load_tuned_fmoe(csv_path: str) -> list:
    """Read a tuned-fmoe CSV into a list of row dicts (numeric columns converted; ``#`` lines skipped)."""
    with open(csv_path, newline="") as f:
        lines = [line for line in f if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(lines)
    missing = [c for c in FMOE_CSV_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise KeyError(f"{{csv_path}}: tuned fmoe CSV lacks column(s) {{missing}}")
    rows = []
    for rec in reader:
        row = dict(rec)
        for col in INT_COLUMNS:
            row[col] = int(float(row[col]))
        for col in FLOAT_COLUMNS:
            row[col] = float(row[col]) if row[col] not in (None, "") else 0.0
        rows.append(row)
    return rows


def lookup_tuned_fmoe(rows, *, token: int, model_dim: int, inter_dim: int, expert: int, topk: int,
                      q_dtype_w: str) -> Optional[dict]:
    """The tuned row for this MoE call, or None (heuristic path).

    The shape must match exactly (model_dim, inter_dim, expert, topk, q_dtype_w). Among its rows the token
    bucket is the smallest tuned token count >= ``token``, else the largest one; when several rows share a
    bucket the last one wins (re-tuned rows are appended).
    """
    same_shape = [
        r for r in rows
        if r["model_dim"] == model_dim and r["inter_dim"] == inter_dim and r["expert"] == expert
        and r["topk"] == topk and r["q_dtype_w"] == q_dtype_w
    ]
    if not same_shape:
        return None
    buckets = sorted({{r["token"] for r in same_shape}})
    bucket = next((t for t in buckets if t >= token), buckets[-1])
    return [r for r in same_shape if r["token"] == bucket][-1]
'''

_README = """\
{simulated}

This directory is the twin's excerpt of the SGLang source tree inside {image}
(SGLang {version}). It is not SGLang: the files hold only the mechanisms the simulated engine uses, at the
paths SGLang has them, and the twin reads them at launch. Editing a file here changes what the simulated
engine does, exactly as patching the installed package would on a real node.

Files:
{files}
"""

# CUDA-only headers -> the ROCm header a guarded include uses instead.
HIP_EQUIVALENTS = {
    "cuda_runtime.h": "hip/hip_runtime.h",
    "cuda_runtime_api.h": "hip/hip_runtime_api.h",
    "cuda.h": "hip/hip_runtime.h",
    "cuda_fp16.h": "hip/hip_fp16.h",
    "cuda_bf16.h": "hip/hip_bf16.h",
    "cuda_fp8.h": "hip/hip_fp8.h",
    "cooperative_groups.h": "hip/hip_cooperative_groups.h",
}


def is_cuda_only(header: str) -> bool:
    return header.startswith(("cuda", "cub", "thrust"))


def hip_equivalent(header: str) -> str:
    if header in HIP_EQUIVALENTS:
        return HIP_EQUIVALENTS[header]
    if header.startswith(("cub/", "cub.", "thrust/")):
        return "hipcub/hipcub.hpp"
    return "hip/hip_runtime.h"


def _include_block(kernel: JitKernel, unguarded: set[tuple[str, str]]) -> str:
    lines: list[str] = []
    for header in kernel.includes:
        if (kernel.source, header) in unguarded:
            lines.append(f"#include <{header}>")
        elif is_cuda_only(header):
            lines += ["#ifndef USE_ROCM", f"#include <{header}>", "#else", f"#include <{hip_equivalent(header)}>",
                      "#endif"]
        elif header.startswith(("hip/", "hipcub/", "rocprim/")):
            lines += ["#ifdef USE_ROCM", f"#include <{header}>", "#endif"]
        else:
            lines.append(f"#include <{header}>")
    return "\n".join(lines)


_KERNEL_SRC = """\
// {simulated}: excerpt of an SGLang JIT kernel source. The simulated engine
// preprocesses this file for ROCm (USE_ROCM defined) when --{flag_dashed} enables it.
// SPDX-License-Identifier: Apache-2.0
//
// {name}: per-step metadata for multi-step speculative decoding,
// computed for all draft steps in one launch instead of one small kernel per step.

{includes}

namespace sglang {{
namespace speculative {{

// For request `bid` and draft step `s`: the KV length the step attends to and the cumulative KV offsets
// (one row of cu_seqlens_k per step) that the attention backend consumes.
template <int kMaxSteps, typename IdxT>
__device__ __forceinline__ void compute_step_metadata(const IdxT* __restrict__ seq_lens,
                                                      IdxT* __restrict__ step_seq_lens,
                                                      IdxT* __restrict__ cu_seqlens_k,
                                                      int num_steps, int topk, int bid, int bs) {{
  const IdxT base = seq_lens[bid];
  for (int s = 0; s < kMaxSteps; ++s) {{
    if (s >= num_steps) break;
    const IdxT len = base + static_cast<IdxT>((s + 1) * topk);
    step_seq_lens[s * bs + bid] = len;
    cu_seqlens_k[s * (bs + 1) + bid + 1] = len;
  }}
}}

template <int kMaxSteps, typename IdxT>
__global__ void {ident}_kernel(const IdxT* __restrict__ seq_lens, IdxT* __restrict__ step_seq_lens,
                                IdxT* __restrict__ cu_seqlens_k, int num_steps, int topk, int bs) {{
  const int bid = blockIdx.x * blockDim.x + threadIdx.x;
  if (bid >= bs) return;
  compute_step_metadata<kMaxSteps, IdxT>(seq_lens, step_seq_lens, cu_seqlens_k, num_steps, topk, bid, bs);
}}

}}  // namespace speculative
}}  // namespace sglang
"""


def kernel_source(kernel: JitKernel, unguarded: set[tuple[str, str]]) -> str:
    ident = re.sub(r"\W", "_", kernel.name)
    return _KERNEL_SRC.format(
        simulated=SIMULATED,
        flag_dashed=kernel.when.flag.replace("_", "-"),
        name=kernel.name,
        ident=ident,
        includes=_include_block(kernel, unguarded),
    )


def _camel(model_type: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[_\-]", model_type) if p)


def draft_model_source(sc: Scenario) -> str:
    m = sc.model
    assert m.mtp is not None
    engine_prefix = m.mtp.engine_prefix
    model_prefix = engine_prefix.rpartition(".")[0] or "model"
    ckpt = m.mtp.checkpoint_prefix
    suffix = f".{m.mtp.layer_index}"
    checkpoint_fmt = ckpt[: -len(suffix)] + ".{layer_id}" if ckpt.endswith(suffix) else ckpt
    arch = m.architecture
    base = arch.removesuffix("ForCausalLM") or _camel(m.model_type)
    return _DRAFT_MODEL_SRC.format(
        simulated=SIMULATED,
        arch=arch,
        model_prefix=model_prefix,
        decoder_prefix=engine_prefix,
        checkpoint_fmt=checkpoint_fmt,
        example_ckpt=ckpt,
        model_class=f"{base}ModelNextN",
        layer_class=f"{base}DecoderLayer",
        causal_class=f"{arch}NextN",
    )


def moe_reader_source(sc: Scenario) -> str:
    cols = "(\n" + "".join(f"    {c!r},\n" for c in moe_csv.FMOE_CSV_COLUMNS) + ")"
    return _MOE_READER_SRC.format(simulated=SIMULATED, columns=cols, default_csv=sc.engine.default_moe_config)


def tuned_fmoe_rows(sc: Scenario, shapes: Iterable[MoEShape] | None = None) -> list[dict[str, Any]]:
    """Plausible tuned rows (token buckets 1..8192) for ``shapes`` (default: the image's tuned shapes)."""
    hw = sc.hardware
    cu = moe_csv.cu_count(hw.gfx_arch)
    bw_bytes = hw.memory_bandwidth_tbs * 1e12 * 0.75
    rows: list[dict[str, Any]] = []
    for shape in sc.defects.tuned_moe_shapes if shapes is None else shapes:
        code = moe_csv.dtype_code(shape.dtype)
        bytes_per_w = {"fp8": 1.0, "mxfp4": 0.5 + 1 / 32, "bf16": 2.0}[shape.dtype]
        peak = hw.peak_tflops.get(shape.dtype, hw.peak_tflops.get("bf16", 2500.0)) * 1e12 * 0.55
        tag = {"fp8": "F8_F8", "mxfp4": "FP4X2_FP4X2", "bf16": "B16_B16"}[shape.dtype]
        per_expert = 3 * shape.inter_dim * shape.model_dim * bytes_per_w
        for token in (2**k for k in range(14)):
            picks = token * shape.top_k
            active = shape.experts * (1 - (1 - 1 / shape.experts) ** picks)
            weight_bytes = active * per_expert
            act_bytes = token * shape.model_dim * 2 * 2 + picks * shape.inter_dim * 2
            flops = 2.0 * picks * 3 * shape.inter_dim * shape.model_dim
            t_mem = (weight_bytes + act_bytes) / bw_bytes * 1e6
            t_cmp = flops / peak * 1e6
            block_m = 32 if token <= 64 else 64 if token <= 1024 else 128
            us1 = (2 / 3) * max(t_mem, t_cmp) + 4.0
            us2 = (1 / 3) * max(t_mem, t_cmp) + 3.0
            us = us1 + us2
            quant = 1 if shape.dtype != "bf16" else 0
            rows.append({
                "cu_num": cu,
                "token": token,
                "model_dim": shape.model_dim,
                "inter_dim": shape.inter_dim,
                "expert": shape.experts,
                "topk": shape.top_k,
                "act_type": "ActivationType.Silu",
                "dtype": "torch.bfloat16",
                "q_dtype_a": code,
                "q_dtype_w": code,
                "q_type": moe_csv.quant_type(shape.dtype),
                "use_g1u1": 1,
                "doweight_stage1": 0,
                "block_m": block_m,
                "ksplit": 0,
                "us1": round(us1, 4),
                "kernelName1": f"moe_ck2stages_gemm1_256x{block_m}x128x128_1x4_{tag}_silu_v3_Quant{quant}",
                "err1": 0.0,
                "us2": round(us2, 4),
                "kernelName2": f"moe_ck2stages_gemm2_256x{block_m}x128x128_1x4_{tag}_v3_Quant{quant}_RoutedW1",
                "err2": 0.0,
                "us": round(us, 4),
                "run_1stage": 0,
                "tflops": round(flops / (us * 1e-6) / 1e12, 2),
                "bw": round((weight_bytes + act_bytes) / (us * 1e-6) / 1e9, 2),
            })
    return rows


# --- the whole workspace ------------------------------------------------------------------------------------


def _is_nonempty(p: Path) -> bool:
    return p.exists() and (not p.is_dir() or any(p.iterdir()))


def materialize(scenario: Scenario | str | Path, dest: str | Path, *, force: bool = False) -> MaterializeResult:
    """Write the workspace for ``scenario`` into ``dest`` (refuses a non-empty ``dest`` unless ``force``)."""
    sc = scenario if isinstance(scenario, Scenario) else scenario_mod.load(scenario)
    src_path = Path(sc.path) if sc.path else scenario_mod.resolve(sc.name)
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise MaterializeError(f"{dest}: exists and is not a directory")
    if _is_nonempty(dest):
        if not force:
            raise MaterializeError(f"{dest}: directory is not empty (use --force to overwrite the workspace)")
        for name in MANAGED:
            p = dest / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
    model_dir, sglang_root, twin_dir = dest / "model", dest / "sglang", dest / ".twin"
    for d in (model_dir, sglang_root, twin_dir):
        d.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    # model/
    cfg = build_config(sc)
    write(model_dir / "config.json", json.dumps(cfg, indent=2) + "\n")
    dims = ModelDims.from_spec(sc.model)
    params = checkpoint_params(dims, sc.quantization.weight_format, sc.exclude_entries())
    total = sum(tensor_bytes(p["dtype"], p["shape"]) for p in params.values())
    index = {
        "metadata": {
            "total_size": total,
            "simulated": True,
            "note": f"{SIMULATED}: tensor metadata only (dtype, shape); the tensors are not stored",
        },
        "weight_map": params,
    }
    write(model_dir / "model.safetensors.index.json", json.dumps(index, separators=(",", ":")) + "\n")
    write(model_dir / "tokenizer_config.json", json.dumps(_tokenizer_config(sc), indent=2) + "\n")
    write(model_dir / "generation_config.json", json.dumps(_generation_config(cfg), indent=2) + "\n")

    # sglang/
    write(sglang_root / QUARK_UTILS, _QUARK_UTILS_SRC.format(simulated=SIMULATED))
    if sc.model.mtp is not None:
        write(sglang_root / sc.model.mtp.draft_model_file, draft_model_source(sc))
    unguarded = {(u.file, u.header) for u in sc.defects.unguarded_includes}
    for kernel in sc.engine.jit_kernels:
        write(sglang_root / kernel.source, kernel_source(kernel, unguarded))
    write(sglang_root / sc.engine.moe_config_reader, moe_reader_source(sc))
    csv_path = sglang_root / sc.engine.default_moe_config
    write(csv_path, moe_csv.format_rows(tuned_fmoe_rows(sc)))
    listing = "\n".join(f"  {p.relative_to(sglang_root)}" for p in written if sglang_root in p.parents)
    write(sglang_root / "README.twin",
          _README.format(simulated=f"# {SIMULATED}", image=sc.engine.image, version=sc.engine.version,
                         files=listing))

    # .twin/
    scenario_copy = twin_dir / "scenario.yaml"
    shutil.copyfile(src_path, scenario_copy)
    written.append(scenario_copy)
    return MaterializeResult(dest, model_dir, sglang_root, scenario_copy, len(params), total, written)


def workspace_scenario(dest: str | Path) -> Scenario:
    """The scenario a workspace was materialised from (``dest/.twin/scenario.yaml``)."""
    return scenario_mod.load(Path(dest) / ".twin" / "scenario.yaml")


def human_bytes(n: float) -> str:
    if n <= 0:
        return "0 B"
    units = ["B", "KB", "MB", "GB", "TB"]
    k = min(int(math.log(n, 1024)), len(units) - 1)
    return f"{n / 1024**k:.1f} {units[k]}"
