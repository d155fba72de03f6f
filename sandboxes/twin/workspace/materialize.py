"""Materialise a twin workspace: the checkpoint's metadata and the SGLang source the twin's engine reads.

``materialize(scenario, dest)`` writes::

    dest/model/config.json                      HF-style config with a Quark quantization_config
    dest/model/model.safetensors.index.json     every parameter's dtype and shape (no tensor data)
    dest/model/tokenizer_config.json, generation_config.json
    dest/sglang/python/sglang/...               the real SGLang release the scenario pins (``engine.version``),
                                                the wheel's ``sglang/`` package in the repository layout, with
                                                the scenario's defects applied as edits of its real files
    dest/aiter/<engine.moe_config_reader>       aiter's tuned-fmoe CSV reader (the twin's excerpt)
    dest/aiter/<engine.default_moe_config>      the tuned-fmoe CSV the image ships
    dest/.twin/scenario.yaml, source.json       the scenario used; where the SGLang tree came from

The release comes from the package registry through ``release.py`` (cached per user). With no registry
reachable, the bundled excerpt (``bundled_sglang/``: a few hand-written files at their real paths) stands in,
and materialize says so on one line. Everything in ``dest/sglang`` is live: the twin runs its pure functions
and compiles its JIT kernel sources at launch, so an agent that edits them changes what the simulated engine
does. Nothing here knows what a fix looks like.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import sys
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import cache_files
from .. import scenario as scenario_mod
from ..engine import moe_csv
from ..models.draft_checkpoint import DraftLayoutError, draft_tensors
from ..models.dtypes import tensor_bytes
from ..models.quantization import quark_export_config
from ..scenario import MoEShape, Scenario
from . import release

SIMULATED = "dayzero digital twin (simulated)"


def simulated_label(sc: Scenario) -> str:
    """What every file the twin writes for a scenario says of itself (the scenario's hardware, never another's)."""
    return f"dayzero digital twin of {sc.hardware.name} (simulated)"
MANAGED = ("model", "draft", "sglang", "aiter", ".twin")


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
    provenance: str = ""  # where the SGLang tree came from (release wheel, or the bundled excerpt)
    simulated: str = SIMULATED  # the label the workspace's files carry
    defect_edits: list[str] = field(default_factory=list)


# --- model/ --------------------------------------------------------------------------------------------------


def build_config(sc: Scenario) -> dict[str, Any]:
    """The checkpoint's ``config.json`` for scenario ``sc``."""
    cfg: dict[str, Any] = {"_comment": f"{simulated_label(sc)}: checkpoint metadata only, no tensor data",
                           **sc.model.hf_config}  # fmt: skip
    if sc.quantization.config:  # as the vendor published it
        cfg["quantization_config"] = json.loads(sc.quantization.config)
    else:
        qc = quark_export_config(sc.quantization.weight_format, sc.exclude_entries())
        if qc is not None:
            cfg["quantization_config"] = qc
    cfg["dayzero_twin"] = {"simulated": True, "scenario": sc.name}
    return cfg


def _tokenizer_config(sc: Scenario) -> dict[str, Any]:
    return {
        "_comment": f"{simulated_label(sc)}: no tokenizer files; the twin counts tokens itself",
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
    """generation_config.json: the token ids the config has (a real config may lack some; then so does this)."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    out: dict[str, Any] = {"_comment": SIMULATED, "_from_model_config": True}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = cfg.get(key, text.get(key))
        if value is not None:
            out[key] = value
    out.update(do_sample=True, temperature=1.0, top_p=0.95)
    if cfg.get("transformers_version"):
        out["transformers_version"] = cfg["transformers_version"]
    return out


def _evidence(sc: Scenario) -> Any:
    """The scenario's published index or listing, as evidence of how the vendor spells the checkpoint's names."""
    from ..models.stored import read_evidence

    if not sc.model.index:
        return None
    try:
        return read_evidence(Path(sc.model.index), complete=not sc.model.index_partial)
    except (OSError, ValueError) as exc:
        raise MaterializeError(f"{sc.where('model.index')}: {exc}") from None


_CHECKPOINTS: dict[tuple[str, bool], dict[str, dict[str, Any]]] = {}


def checkpoint_tensors(sc: Scenario, *, with_mtp: bool = True) -> dict[str, dict[str, Any]]:
    """Every tensor of the scenario's checkpoint (``{name: {"dtype", "shape"}}`` in checkpoint order): names the
    pinned release's loaders accept, spelled as the published index spells them where there is one, shapes its
    layers build, stored as the quantization config says (``models.release_checkpoint``). ``with_mtp=False``: the
    model's own layers, its MTP layers apart. Raises ``MaterializeError`` with the release's reason."""
    from ..models.release_checkpoint import CheckpointError, checkpoint

    key = (_index_cache_key(sc), with_mtp)
    if key in _CHECKPOINTS:
        return _CHECKPOINTS[key]
    inputs = scenario_mod.description_inputs(sc)
    try:
        made = checkpoint(inputs["config"], quantization=inputs["quantization"], release=inputs["release"],
                          mtp_layers=inputs["mtp_layers"] if with_mtp else 0, evidence=_evidence(sc),
                          arch=sc.model.arch, stored_unquantized=sc.quantization.stored_unquantized)  # fmt: skip
    except CheckpointError as exc:
        where = "model.config" if sc.model.config else "model"
        raise MaterializeError(f"{sc.where(where)}: SGLang {sc.engine.version}: {exc}") from None
    _CHECKPOINTS[key] = made
    return made


def index_text(sc: Scenario) -> tuple[str, int, int]:
    """``model.safetensors.index.json`` for scenario ``sc``: its text, its number of tensors and their bytes."""
    params = checkpoint_tensors(sc)
    total = sum(tensor_bytes(p["dtype"], p["shape"]) for p in params.values())
    index = {
        "metadata": {
            "total_size": total,
            "simulated": True,
            "note": f"{simulated_label(sc)}: tensor metadata only (dtype, shape); the tensors are not stored",
        },
        "weight_map": params,
    }
    return json.dumps(index, separators=(",", ":")) + "\n", len(params), total


# indexes kept in the per-user cache, the least recently used going first: a test session materialises about 40
# models, and a 100k-tensor index (10 MB) is kept gzipped in 0.6 MB (0.02 s to compress, as long to expand)
INDEX_CACHE_KEEP = 64


def index_cache() -> Path:
    return release.cache_dir() / "checkpoint-index"


def _index_cache_key(sc: Scenario) -> str:
    """What the index is computed from: what the model's description is (``models.description.key``: the config,
    the quantization config, the release, the MTP layers, the twin's code), the published index it follows, and the
    label the file carries."""
    from ..models import description

    inputs = scenario_mod.description_inputs(sc)
    digest = hashlib.sha256(description.key(inputs["config"], inputs["quantization"], inputs["release"],
                                            inputs["mtp_layers"]).encode())  # fmt: skip
    digest.update(json.dumps([simulated_label(sc), sc.model.index_partial, list(sc.quantization.stored_unquantized)]).encode())
    if sc.model.index:
        digest.update(Path(sc.model.index).read_bytes())
    return digest.hexdigest()[:32]


def write_index(sc: Scenario, dest: Path) -> tuple[int, int]:
    """Write the checkpoint's index to ``dest``; returns its number of tensors and their bytes.

    Every workspace of a scenario holds the same index (about a second and a half to compute for a 100k-tensor
    model), so it is remembered in the per-user cache (``release.cache_dir()``, beside the SGLang releases) under
    the hash of everything it is computed from, and copied from there. A cache that cannot be read or written is
    simply not used."""
    folder = index_cache()
    try:
        key = _index_cache_key(sc)
    except OSError:
        key = None
    if key is not None:
        text, sizes = folder / f"{key}.json.gz", folder / f"{key}.sizes.json"
        try:
            counts = json.loads(sizes.read_text())
            dest.write_bytes(gzip.decompress(text.read_bytes()))
            os.utime(sizes)  # recently used: the last to go
            return int(counts["num_params"]), int(counts["total"])
        except (OSError, ValueError, KeyError, TypeError, EOFError, zlib.error):  # gzip's: a cut or corrupt entry
            pass
    body, num_params, total = index_text(sc)
    dest.write_text(body)
    if key is not None:
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            # the index first, then its sizes: the sizes say it is whole (each under a name of its own, renamed)
            cache_files.write_atomic(text, gzip.compress(body.encode(), compresslevel=1, mtime=0))
            cache_files.write_atomic(sizes, json.dumps({"num_params": num_params, "total": total}))
            cache_files.remove_stale_tmps(folder, 3600)
            for old in cache_files.least_recent(folder.glob("*.sizes.json"))[:-INDEX_CACHE_KEEP]:
                old.unlink(missing_ok=True)  # the sizes first: a reader then finds no entry, never half of one
                for suffix in (".json.gz", ".json"):  # .json: an entry of the uncompressed cache before it
                    old.with_name(old.name.removesuffix(".sizes.json") + suffix).unlink(missing_ok=True)
    return num_params, total


# --- sglang/: the real release, or the bundled excerpt ------------------------------------------------------

BUNDLED = Path(__file__).parent / "bundled_sglang"
SGLANG_PACKAGE = "python/sglang"  # where the wheel's ``sglang/`` package lies in the repository layout
GUARD_OPEN = re.compile(r"^\s*#\s*(?:ifndef\s+USE_ROCM|if\s+!\s*defined\s*\(?\s*USE_ROCM\s*\)?)\s*$")
GUARD_ELSE = re.compile(r"^\s*#\s*(?:else|elif\b.*)\s*$")
GUARD_END = re.compile(r"^\s*#\s*endif\b")
NESTED_OPEN = re.compile(r"^\s*#\s*if")

_BUNDLED_KERNEL = """\
// dayzero twin: a hand-written stand-in for the JIT kernel {name} of SGLang {version}, used only when the real
// release could not be downloaded. It includes what the scenario says the real source includes. Not SGLang's code.
#pragma once

#include <sgl_kernel/utils.cuh>

{includes}

__global__ void {ident}_kernel(const int32_t* __restrict__ in, int32_t* __restrict__ out, int n) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}}
"""


def copy_release(sc: Scenario, sglang_root: Path) -> str:
    """Put the pinned release's source under ``sglang_root/python/sglang``; returns where it came from.

    Falls back to the bundled excerpt (a few hand-written files at their real paths) when the release cannot
    be downloaded, and says so on one line on stderr.
    """
    got = release.release_tree(sc.engine.version)
    dest = sglang_root / SGLANG_PACKAGE
    if isinstance(got, release.ReleaseTree):
        shutil.copytree(got.package, dest, dirs_exist_ok=True)
        return f"release: sglang=={sc.engine.version} ({got.wheel.name}, the wheel's sglang/ under python/)"
    print(f"twin: the SGLang {sc.engine.version} release is not available ({got.reason}); using the bundled "
          "excerpt of its source (a few hand-written files at their real paths)", file=sys.stderr)
    shutil.copytree(BUNDLED, sglang_root, dirs_exist_ok=True)
    for kernel in sc.engine.jit_kernels:  # a kernel the bundle lacks: a stand-in with the scenario's includes
        path = sglang_root / kernel.source
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_BUNDLED_KERNEL.format(
                name=kernel.name, version=sc.engine.version, ident=re.sub(r"\W", "_", kernel.name),
                includes="\n".join(f"#include <{h}>" for h in kernel.includes)))
    return f"bundled excerpt of sglang {sc.engine.version} ({got.reason})"


def _include_line(lines: list[str], header: str) -> int | None:
    pat = re.compile(rf"^\s*#\s*include\s*[<\"]{re.escape(header)}[>\"]")
    return next((i for i, ln in enumerate(lines) if pat.match(ln)), None)


def _enclosing_guard(lines: list[str], at: int) -> int | None:
    """Index of the ``#ifndef USE_ROCM`` whose first branch holds line ``at`` (None when unguarded)."""
    depth = 0
    for i in range(at - 1, -1, -1):
        ln = lines[i]
        if GUARD_END.match(ln):
            depth += 1
        elif NESTED_OPEN.match(ln):
            if depth:
                depth -= 1
                continue
            return i if GUARD_OPEN.match(ln) else None
        elif GUARD_ELSE.match(ln) and not depth:
            return None  # in an #else branch: the ROCm side
    return None


def unguard_include(path: Path, header: str) -> bool:
    """Make ``#include <header>`` in ``path`` unconditional (the defect); False when it already is."""
    lines = path.read_text().splitlines(keepends=True)
    at = _include_line(lines, header)
    if at is None:
        raise MaterializeError(f"{path.name} does not include <{header}>")
    guard = _enclosing_guard(lines, at)
    if guard is None:
        return False
    line = lines.pop(at)
    lines.insert(guard, line)
    path.write_text("".join(lines))
    return True


def apply_defects(sc: Scenario, sglang_root: Path) -> list[str]:
    """The scenario's defects as edits of real files of the tree; returns what was changed."""
    defects = sc.defects.unguarded_includes
    where: dict[int, tuple[str, int]] = {}  # defect -> (file, line of its include in the file as released)
    for i, d in enumerate(defects):
        path = sglang_root / d.file
        if not path.is_file():
            raise MaterializeError(f"{sc.where(f'defects.unguarded_includes[{i}].file')}: {d.file} is not a file "
                                   f"of the SGLang {sc.engine.version} tree")
        at = _include_line(path.read_text().splitlines(), d.header)
        if at is None:
            raise MaterializeError(f"{sc.where(f'defects.unguarded_includes[{i}].header')}: {path.name} does not "
                                   f"include <{d.header}>")
        where[i] = (d.file, at)
    # A file's includes are moved in the file's own order: each lands just above its guard, below those moved
    # before it, so several headers of one guard leave it in the order they had inside it, whatever the list's.
    outcome: dict[int, str] = {}
    for i in sorted(where, key=lambda k: where[k]):
        d = defects[i]
        changed = unguard_include(sglang_root / d.file, d.header)
        outcome[i] = f"{d.file}: <{d.header}> " + ("moved out of its USE_ROCM guard" if changed
                                                    else "unguarded as released")
    done = [outcome[i] for i in range(len(defects))]
    for i, k in enumerate(sc.engine.jit_kernels):
        path = sglang_root / k.source
        if not path.is_file():
            raise MaterializeError(f"{sc.where(f'engine.jit_kernels[{i}].source')}: {k.source} is not a file of "
                                   f"the SGLang {sc.engine.version} tree")
        text = path.read_text()
        for h in k.includes:
            if _include_line(text.splitlines(), h) is None:
                raise MaterializeError(f"{sc.where(f'engine.jit_kernels[{i}].includes')}: {k.source} does not "
                                       f"include <{h}>")
    _check_classes(sc, sglang_root)
    return done


def _check_classes(sc: Scenario, sglang_root: Path) -> None:
    """The release registers the model's architecture, and, for a model with an MTP head, the draft class its
    ``ModelConfig._config_draft_model`` picks for it (a tree without model code, the bundled excerpt, is not
    asked)."""
    from ..engine.loading.build import draft_class_of, registry

    known = registry(sglang_root)
    if len(known) < 10:
        return
    arch = sc.model.architecture
    if arch not in known:
        raise MaterializeError(f"{sc.where('model.architecture' if sc.model.config is None else 'model.config')}: "
                               f"SGLang {sc.engine.version} registers no model class {arch!r}")  # fmt: skip
    if sc.model.mtp is not None:
        # the description derived it from this release (its ModelConfig): asked again only without one
        described = getattr(getattr(sc.model.arch, "mtp", None), "draft_class", "")
        draft = described or draft_class_of(sglang_root, sc.model.hf_config)
        if draft not in known:
            raise MaterializeError(f"{sc.where('model.mtp')}: SGLang {sc.engine.version} drafts {arch} with "
                                   f"{draft!r}, which it does not register")  # fmt: skip
    if sc.model.draft is not None:
        draft = str((sc.model.draft.hf_config.get("architectures") or [""])[0])
        if draft not in known:
            raise MaterializeError(f"{sc.where('model.draft.config')}: SGLang {sc.engine.version} registers no "
                                   f"model class {draft!r} for the draft checkpoint")  # fmt: skip


_MOE_READER_SRC = '''\
# {simulated}: the twin's excerpt of aiter's tuned fused-MoE selection (aiter is not on the package registry,
# so this is hand-written). The simulated engine calls load_tuned_fmoe() / lookup_tuned_fmoe() from this file.
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

def moe_reader_source(sc: Scenario) -> str:
    cols = "(\n" + "".join(f"    {c!r},\n" for c in moe_csv.FMOE_CSV_COLUMNS) + ")"
    return _MOE_READER_SRC.format(simulated=simulated_label(sc), columns=cols, default_csv=sc.engine.default_moe_config)


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
    model_dir, sglang_root, twin_dir, aiter_root = dest / "model", dest / "sglang", dest / ".twin", dest / "aiter"
    for d in (model_dir, sglang_root, twin_dir, aiter_root):
        d.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    # model/
    cfg = build_config(sc)
    write(model_dir / "config.json", json.dumps(cfg, indent=2) + "\n")
    num_params, total = write_index(sc, model_dir / "model.safetensors.index.json")
    written.append(model_dir / "model.safetensors.index.json")
    write(model_dir / "tokenizer_config.json", json.dumps(_tokenizer_config(sc), indent=2) + "\n")
    write(model_dir / "generation_config.json", json.dumps(_generation_config(cfg), indent=2) + "\n")

    # draft/: a separate draft checkpoint (an EAGLE3 head), when the scenario has one
    if sc.model.draft is not None:
        draft_dir = dest / "draft"
        draft_config = sc.model.draft.hf_config
        try:
            tensors = draft_tensors(draft_config)
        except DraftLayoutError as exc:
            raise MaterializeError(f"{sc.where('model.draft.config')}: {exc}") from None
        write(draft_dir / "config.json", json.dumps(draft_config, indent=2) + "\n")
        draft_total = sum(tensor_bytes(p["dtype"], p["shape"]) for p in tensors.values())
        write(draft_dir / "model.safetensors.index.json", json.dumps({
            "metadata": {"total_size": draft_total, "simulated": True,
                         "note": f"{simulated_label(sc)}: tensor metadata only (dtype, shape); the tensors are not stored"},
            "weight_map": tensors}, separators=(",", ":")) + "\n")  # fmt: skip

    # sglang/: the pinned release (or the bundled excerpt), then the scenario's defects as edits of its files
    provenance = copy_release(sc, sglang_root)
    edits = apply_defects(sc, sglang_root)
    written.extend(p for p in sorted(sglang_root.rglob("*")) if p.is_file())

    # aiter/: the MoE kernel selection aiter reads (aiter is a separate package in the image)
    write(aiter_root / sc.engine.moe_config_reader, moe_reader_source(sc))
    write(aiter_root / sc.engine.default_moe_config, moe_csv.format_rows(tuned_fmoe_rows(sc)))

    # .twin/
    scenario_copy = twin_dir / "scenario.yaml"
    shutil.copyfile(src_path, scenario_copy)
    written.append(scenario_copy)
    written.extend(_copy_referenced_json(sc, src_path, scenario_copy))
    # the model as the release builds it, for the twin's processes in this workspace (a container has no
    # per-user cache and no registry to fetch the release from)
    from ..models import description

    inputs = scenario_mod.description_inputs(sc)
    written.append(description.keep(inputs.pop("config"), twin_dir, **inputs))
    source_note = twin_dir / "source.json"
    source_note.write_text(json.dumps({"sglang": provenance, "version": sc.engine.version, "defects": edits},
                                      indent=2) + "\n")
    written.append(source_note)
    return MaterializeResult(dest, model_dir, sglang_root, scenario_copy, num_params, total, written,
                             provenance=provenance, defect_edits=edits, simulated=simulated_label(sc))


def _copy_referenced_json(sc: Scenario, src_path: Path, copy: Path) -> list[Path]:
    """The JSON files a config-driven scenario names (``model.config``, ``quantization.config``), copied beside
    the workspace's copy of the scenario, and the copy pointed at them, so that it loads on its own."""
    import yaml

    data = yaml.safe_load(src_path.read_text()) or {}
    lines = copy.read_text().splitlines(keepends=True)
    out: list[Path] = []
    for field_path in ("model.config", "quantization.config", "model.draft.config", "model.index"):
        ref: Any = data
        for part in field_path.split("."):
            ref = ref.get(part) if isinstance(ref, dict) else None
        if not isinstance(ref, str) or field_path not in sc.lines:
            continue
        src = Path(ref) if Path(ref).is_absolute() else src_path.parent / ref
        target = copy.parent / (f"{field_path}{''.join(src.suffixes[-2:]) or '.json'}" if field_path == "model.index"
                                else f"{field_path}.json")  # fmt: skip
        shutil.copyfile(src, target)
        out.append(target)
        at = sc.lines[field_path] - 1
        leaf = field_path.rsplit(".", 1)[1]
        lines[at] = re.sub(rf"({leaf}:\s*).*?(\s*(#.*)?)$", lambda m, t=target.name: f"{m.group(1)}{t}{m.group(2)}",
                           lines[at].rstrip("\n")) + "\n"  # fmt: skip
    copy.write_text("".join(lines))
    return out


def workspace_scenario(dest: str | Path) -> Scenario:
    """The scenario a workspace was materialised from (``dest/.twin/scenario.yaml``)."""
    return scenario_mod.load(Path(dest) / ".twin" / "scenario.yaml")


def human_bytes(n: float) -> str:
    if n <= 0:
        return "0 B"
    units = ["B", "KB", "MB", "GB", "TB"]
    k = min(int(math.log(n, 1024)), len(units) - 1)
    return f"{n / 1024**k:.1f} {units[k]}"
