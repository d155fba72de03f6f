"""The checkpoint of a model as its vendor would have exported it for the pinned release: ``checkpoint(...)``.

Every tensor name is one the release's own loaders accept (``stored``: the model class's ``load_weights`` and,
when the checkpoint ships an MTP layer, the draft class's), or the published index's names when one is given.
Every shape is what the release's layer classes build at TP 1. How each module is *stored* follows the vendor's
quantization config read the way the vendor's tool reads it (``quantization.Scheme``: Quark's ``exclude``, the fp8
quantizers' ``modules_to_not_convert``, native MXFP4's experts only), matched against the checkpoint's own names:
a module the vendor quantized is stored as the release builds it quantized (the exclusions set aside), any other
as the release builds it unquantized. That is what a naming mismatch between an exclude list and the engine's
names needs: the checkpoint stores a module unquantized under its name, and the engine decides with its own.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import hashlib
import json
import os
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .quantization import Scheme
from .scratch import ReleaseUnavailable, scratch
from .stored import Evidence, Stored, StoredError, pattern, stored_tensors


class CheckpointError(ValueError):
    """The checkpoint cannot be derived (one line, with the release's reason)."""


def _without_exclusions(qc: Mapping[str, Any]) -> dict[str, Any]:
    """The quantization config with its vendor's list of modules kept unquantized emptied: every module the
    method quantizes, built quantized (what the vendor's list then keeps unquantized is chosen by name)."""
    out = copy.deepcopy(dict(qc))
    for key in ("exclude", "modules_to_not_convert", "ignored_layers"):
        if out.get(key):
            out[key] = []
    return out


_NATURAL = re.compile(r"(\d+)")


def natural(name: str) -> list[Any]:
    """Sort key: names in the order a sharded checkpoint walks them (numbers as numbers)."""
    return [int(p) if p.isdigit() else p for p in _NATURAL.split(name)]


def _module(name: str) -> str:
    """The module a tensor belongs to (``...q_proj.weight`` -> ``...q_proj``; fused ``..._blocks`` as is)."""
    head, _, tail = name.rpartition(".")
    return head if head and tail in ("weight", "bias", "weight_scale", "weight_scale_inv", "input_scale", "qweight",
                                     "qzeros", "scales", "g_idx", "weight_packed", "weight_shape") else name  # fmt: skip


def _built(executor: Any, config: dict[str, Any], model_dir: Path, *, draft: bool) -> Any:
    """The model built from ``config`` in a folder of its own (the release caches a config by its folder)."""
    from ..engine.loading.build import build_model

    folder = model_dir / ("quantized" if "quantization_config" in config else "plain")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return build_model(executor, config, draft=draft, model_dir=folder)


def latent_splits(arch: Any) -> Any:
    """How a packed latent projection's rows divide among its checkpoint parts: MLA's ``q_a_proj`` (the query's
    low rank) and ``kv_a_proj_with_mqa`` (the latent and the rope key), the ranks the release's ``ModelConfig``
    gives; nothing for any other packed module (the rows are then split evenly, which only their shapes show)."""
    from .arch import MLA

    mla = next((la.attention for la in arch.layers if isinstance(la.attention, MLA)), None) if arch else None

    def split(owner: Any, param: Any, parts: int) -> list[int] | None:
        if mla is None or parts != 2 or not mla.q_lora_rank:
            return None
        return [mla.q_lora_rank, mla.kv_lora_rank + mla.qk_rope_head_dim]

    return split


# how the builds are asked for: first with the release's own switch off its fusion of a shared expert into the routed
# ones (the vendor stores it apart, so the loader then names it as the checkpoint does), then as the release
# defaults (a quantization the release cannot build unfused)
_PLATFORMS = ({"disable_shared_experts_fusion": True}, {})


def _forms(root: Path, model_dir: Path, plain_config: dict[str, Any], quant_config: dict[str, Any] | None,
           quantization: Mapping[str, Any] | None, *, draft: bool, kw: dict[str, Any],
           executors: dict[int, Any]) -> tuple[list[Stored], list[Stored]]:  # fmt: skip
    """(the tensors of the model built quantized, built plain): every module quantized; else, where the release
    cannot build a module quantized, as published; else (it cannot build it quantized at all: it fails at start-up
    there too) the plain form alone. A draft is built in the process its target was built in (``executors``, one
    per platform), as the engine builds it: a class attribute the target's constructor fills (a
    ``packed_modules_mapping``) is what the draft's loader then finds."""
    from ..engine.loading.build import BuildError
    from ..engine.loading.executor import ExecutionError, Executor
    from ..engine.loading.platform import Platform

    fallback: tuple[list[Stored], list[Stored]] | None = None
    for n, server_args in enumerate(_PLATFORMS):
        if n not in executors:
            executors[n] = Executor(root, Platform(server_args=dict(server_args)))
        executor = executors[n]
        fused_moe = executor.module("sglang.srt.layers.moe.fused_moe_triton.layer").FusedMoE
        folder = model_dir / f"platform-{n}"
        try:
            plain = _built(executor, plain_config, folder, draft=draft).model
        except (BuildError, ExecutionError):
            if n + 1 < len(_PLATFORMS):
                continue
            raise
        quant = None
        attempts = [(quant_config, folder), (dict(plain_config, quantization_config=dict(quantization or {})),
                                             folder / "as-published")] if quant_config else []  # fmt: skip
        for attempt, where in attempts:
            try:
                quant = _built(executor, attempt, where, draft=draft).model
                break
            except (BuildError, ExecutionError):
                continue
        made = (stored_tensors(quant, fused_moe, **kw) if quant is not None else [], stored_tensors(plain, fused_moe, **kw))
        if quant is not None or not quant_config:
            return made
        fallback = fallback or made
    assert fallback is not None
    return fallback


# checkpoints kept in the per-user cache, the least recently used going first (a test session derives about 60)
KEEP = 128
_MADE: dict[str, dict[str, dict[str, Any]]] = {}  # this process's, by key
# the last derivation's target tensors (quantized, plain), by the key of its checkpoint without MTP layers: a
# derivation with them builds the target first, and one without, asked next, needs nothing more (``generate``
# asks for both); only the last is kept, a model's Stored lists being large
_TARGETS: dict[str, tuple[list[Stored], list[Stored]]] = {}


def checkpoint(config: Mapping[str, Any], *, quantization: Mapping[str, Any] | None, release: str,
               mtp_layers: int | None = 0, evidence: Evidence | None = None, scale_dtype: str = "F32",
               arch: Any = None, stored_unquantized: list[str] | tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """``{name: {"dtype", "shape"}}`` of the whole checkpoint in checkpoint order (``arch``: the model's
    description, for how packed latent projections divide; ``stored_unquantized``: modules the vendor stored
    unquantized beyond what its quantization config names, Quark-style entries). Raises ``CheckpointError``.

    A derivation takes seconds to most of a minute, and every process that prices or serves the model needs it
    (``generate`` then each workspace, a served twin, each test worker): it is kept, gzipped, in the per-user
    cache (``$DAYZERO_CACHE/checkpoints``) under the hash of everything it is derived from."""
    listing = _listing(evidence)
    k = _key(config, quantization, release, mtp_layers, listing, scale_dtype, arch, stored_unquantized)
    if k in _MADE:
        return _MADE[k]
    from .. import cache_files

    kept = cache() / f"{k}.json.gz"

    def found() -> dict[str, dict[str, Any]] | None:
        with contextlib.suppress(OSError, ValueError, EOFError, zlib.error):
            got = json.loads(gzip.decompress(kept.read_bytes()))
            if isinstance(got, dict):
                os.utime(kept)  # recently used
                return got
        return None

    def made() -> dict[str, dict[str, Any]]:
        own = _key(config, quantization, release, 0, listing, scale_dtype, arch, stored_unquantized)
        got = _derived(config, quantization=quantization, release=release, mtp_layers=mtp_layers,
                       evidence=evidence, scale_dtype=scale_dtype, arch=arch, stored_unquantized=stored_unquantized,
                       own=own)  # fmt: skip
        _keep(kept, got)
        return got

    _MADE[k] = cache_files.made_once(kept, found, made)
    return _MADE[k]


def cache() -> Path:
    from ..workspace.release import cache_dir

    return cache_dir() / "checkpoints"


def _listing(evidence: Evidence | None) -> str | None:
    """The published index's part of the key (hashed once: 100k names for a large model)."""
    if evidence is None:
        return None
    return hashlib.sha256(json.dumps([evidence.complete, sorted(evidence.names.items())]).encode()).hexdigest()


def _key(config: Mapping[str, Any], quantization: Mapping[str, Any] | None, release: str, mtp_layers: int | None,
         listing: str | None, scale_dtype: str, arch: Any, stored_unquantized: Any) -> str:  # fmt: skip
    from . import description

    digest = hashlib.sha256(description.key(config, quantization, release, mtp_layers).encode())
    digest.update(json.dumps([scale_dtype, _read_of(arch), list(stored_unquantized), listing]).encode())
    return digest.hexdigest()[:32]


def _read_of(arch: Any) -> Any:
    """What a derivation reads of the model's description: whether there is one, whether it has an MTP head, the
    latent ranks of its first MLA layer (``latent_splits``)."""
    from .arch import MLA

    if arch is None:
        return None
    mla = next((la.attention for la in arch.layers if isinstance(la.attention, MLA)), None)
    ranks = None if mla is None else [mla.q_lora_rank, mla.kv_lora_rank, mla.qk_rope_head_dim]
    return [getattr(arch, "mtp", None) is not None, ranks]


def _keep(path: Path, made: dict[str, dict[str, Any]]) -> None:
    """Write the derivation into the cache (a cache that cannot be written costs the next process a derivation)."""
    from .. import cache_files

    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        cache_files.write_atomic(path, gzip.compress(json.dumps(made, separators=(",", ":")).encode(), compresslevel=1,
                                                     mtime=0))  # fmt: skip
        cache_files.remove_stale_tmps(path.parent, 3600)  # what a killed writer left
        for old in cache_files.least_recent(path.parent.glob("*.json.gz"))[:-KEEP]:
            old.unlink(missing_ok=True)
            cache_files.lock_path(old).unlink(missing_ok=True)  # a derivation long finished: no one waits on it


def _derived(config: Mapping[str, Any], *, quantization: Mapping[str, Any] | None, release: str,
             mtp_layers: int | None, evidence: Evidence | None, scale_dtype: str, arch: Any,
             stored_unquantized: list[str] | tuple[str, ...], own: str) -> dict[str, dict[str, Any]]:  # fmt: skip
    """The checkpoint derived (``own``: the key of the same checkpoint without MTP layers)."""
    splits = latent_splits(arch)
    from ..engine.loading.build import BuildError
    from ..engine.loading.executor import ExecutionError
    from .description import reason

    text_dtype = str((config.get("text_config") or {}).get("torch_dtype") or config.get("torch_dtype")
                     or config.get("dtype") or "bfloat16")  # fmt: skip
    dtype = {"float32": "F32", "float16": "F16"}.get(text_dtype, "BF16")
    scheme = Scheme(quantization, scale_dtype=scale_dtype, dtype=dtype, stored_unquantized=stored_unquantized)
    plain_config = {k: v for k, v in dict(config).items() if k != "quantization_config"}
    quant_config = dict(plain_config, quantization_config=_without_exclusions(quantization)) if quantization else None
    # the MTP layers through the draft class that loads them; a model the release drafts with no class of its own
    # (its config counts MTP modules the release does not serve) has none to load
    has_draft = bool(mtp_layers) and (arch is None or getattr(arch, "mtp", None) is not None)
    forms: list[tuple[list[Stored], list[Stored]]] = []  # (quantized, plain) per model: target, draft
    try:
        if not has_draft and own in _TARGETS:  # the model's own layers, as a derivation with its MTP layers found
            forms.append(_TARGETS[own])
        else:
            with scratch(release, plain_config) as (root, model_dir):
                executors: dict[int, Any] = {}
                for draft in (False, True) if has_draft else (False,):
                    target = frozenset(t.name for pair in forms for form in pair for t in form)
                    forms.append(_forms(root, model_dir, plain_config, quant_config, quantization, draft=draft,
                                        kw={"checkpoint_dtype": dtype, "evidence": evidence, "draft": draft,
                                            "splits": splits, "avoid": target}, executors=executors))  # fmt: skip
            _TARGETS.clear()
            _TARGETS[own] = forms[0]
    except ReleaseUnavailable as exc:
        raise CheckpointError(str(exc)) from None
    except (BuildError, ExecutionError, StoredError) as exc:
        raise CheckpointError(reason(exc)) from None
    from ..engine.loading.loader import category

    out: dict[str, dict[str, Any]] = {}
    for quantized, plain in forms:
        # both builds have one module tree: a tensor is known by the engine module, shard and expert it fills
        def key(t: Stored) -> tuple[Any, ...]:
            return (t.param.rpartition(".")[0], repr(t.shard), repr(t.expert))

        by_q: dict[tuple[Any, ...], list[Stored]] = {}
        for t in quantized:
            by_q.setdefault(key(t), []).append(t)
        by_p: dict[tuple[Any, ...], list[Stored]] = {}
        for t in plain:
            by_p.setdefault(key(t), []).append(t)
        # a module whose two builds fill it in other pieces (fused experts stored whole when quantized) is
        # decided as a whole: its quantized or its plain tensors, never some of each
        keys_q: dict[str, list[tuple[Any, ...]]] = {}
        for k in by_q:
            keys_q.setdefault(k[0], []).append(k)
        keys_p: dict[str, list[tuple[Any, ...]]] = {}
        for k in by_p:
            keys_p.setdefault(k[0], []).append(k)
        whole = [m for m, ks in keys_q.items() if not set(ks) & set(keys_p.get(m, ()))]
        for m in whole:
            p_keys, q_keys = keys_p.get(m, []), keys_q[m]
            names = [t for k in (p_keys or q_keys) for t in (by_p.get(k) or by_q.get(k) or [])]
            if names and scheme.quantizes(_module(names[0].name), category(names[0].name)):
                for k in p_keys:
                    by_p.pop(k)
            else:
                for k in q_keys:
                    by_q.pop(k)
        for k in list(by_p) + [k for k in by_q if k not in by_p]:
            p_tensors, q_tensors = by_p.get(k, []), by_q.get(k, [])
            # the vendor decided by the checkpoint's name of the module (its plain weight's)
            names = p_tensors or q_tensors
            module = _module(names[0].name)
            vendor_quantized = scheme.quantizes(module, category(names[0].name))
            if evidence is not None and evidence.complete and q_tensors and p_tensors:
                # the model's own index says how the vendor stored it: with the quantized form's extra tensors
                extra = {t.name for t in q_tensors} - {t.name for t in p_tensors}
                if extra:
                    vendor_quantized = any(n in evidence.names for n in extra)
            if vendor_quantized and q_tensors:
                chosen = q_tensors
            elif p_tensors:
                chosen = p_tensors
            elif any(pk in by_p for pk in keys_p.get(k[0], ())):
                # a piece only the quantized build has (a fused scale of per-expert weights) of a module the vendor
                # kept unquantized: the plain build's pieces are the module's whole storage
                chosen = []
            else:
                chosen = q_tensors
            for t in chosen:
                if t.name not in out and t.param:
                    out[t.name] = {"dtype": t.dtype, "shape": list(t.shape)}
    if evidence is not None:
        _add_unloaded(out, evidence, [t for pair in forms for form in pair for t in form])
    return {name: out[name] for name in sorted(out, key=natural)}




def _add_unloaded(out: dict[str, dict[str, Any]], evidence: Evidence, built: list[Stored]) -> None:
    """The names of the model's own index that no loader of the release reaches (an MTP layer's copy of the
    embedding, a buffer the engine computes): they are on disk all the same. A listing's shape and dtype where it
    gives them, else those of the tensor whose name ends the same way (two name pieces at least); a name with
    neither is left out (its bytes are not known). Another checkpoint's listing (``complete`` false) adds only
    names of a layer this checkpoint has (an MTP layer's copy of the embedding), with this checkpoint's shapes."""
    pending = [name for name in evidence.names if name not in out]
    if not pending:
        return
    ends: dict[str, Stored] = {}
    layers = {m.group(0) for n in out if (m := re.match(r".*\.\d+\.", n))}
    built_patterns = {pattern(t.name) for t in built}  # names the vendor's storage decided against are not added
    for t in built:
        parts = t.name.split(".")
        for k in range(2, len(parts) + 1):
            ends.setdefault(".".join(parts[-k:]), t)
    for name in pending:
        dtype, shape = evidence.names[name]
        if pattern(name) in built_patterns and not evidence.complete:
            continue
        if not evidence.complete:
            m = re.match(r".*\.\d+\.", name)
            if m is None or m.group(0) not in layers:
                continue
            dtype, shape = None, None  # the listing's shape and storage are its own model's
        elif dtype and shape is not None:
            out[name] = {"dtype": dtype, "shape": list(shape)}
            continue
        parts = name.split(".")
        like = next((ends[".".join(parts[-k:])] for k in range(len(parts), 1, -1) if ".".join(parts[-k:]) in ends), None)
        if like is None and evidence.names[name][1] is not None:  # a tensor the listing gives the same shape
            twin = next((n for n, (_, sh) in evidence.names.items() if n in out and sh == evidence.names[name][1]), None)
            if twin is not None:
                like = Stored(twin, out[twin]["dtype"], tuple(out[twin]["shape"]), "")
        if like is not None:
            out[name] = {"dtype": dtype or like.dtype, "shape": list(shape if shape is not None else like.shape)}
