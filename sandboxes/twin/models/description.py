"""A model's ``ModelArch`` as the pinned release builds it, kept once derived: ``described(config, ...)``.

Deriving a model (``derive``) runs the release's ``ModelConfig`` and builds its classes (a few seconds); every
twin process that loads a scenario needs the result. So it is kept as JSON under a key of everything it depends
on (the config and quantization config texts, the release's version, the MTP layer count asked for, the twin's
code, the transformers version), in the per-user cache (``$DAYZERO_CACHE/models``) and, when a scenario is
materialised, in the workspace's ``.twin/models/`` (a container, which has no per-user cache nor a registry to
download the release from, reads it there). Standard library only, but for the derivation itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import arch as arch_mod
from .arch import MTP, ModelArch

FORMAT = 2  # the JSON's layout
_KINDS = {cls.__name__: cls for cls in (arch_mod.MLA, arch_mod.GQA, arch_mod.LinearAttention, arch_mod.DenseMLP,
                                        arch_mod.MoE)}  # fmt: skip


class DescriptionError(ValueError):
    """The release cannot build the model, or builds nothing the twin can read (one line, the release's words)."""


# --- JSON ---------------------------------------------------------------------------------------------------


def _part(value: Any) -> Any:
    if value is None:
        return None
    out = {"kind": type(value).__name__}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        out[f.name] = [[tp, conv, list(t)] for tp, conv, t in v] if f.name == "states" else v
    return out


def _unpart(data: Any) -> Any:
    if data is None:
        return None
    data = dict(data)
    cls = _KINDS[data.pop("kind")]
    if "states" in data:
        data["states"] = tuple((int(tp), int(conv), tuple(t)) for tp, conv, t in data["states"])
    return cls(**data)


def to_json(a: ModelArch) -> dict[str, Any]:
    layer = lambda x: {"attention": _part(x.attention), "mlp": _part(x.mlp)}  # noqa: E731
    return {
        "format": FORMAT, "architecture": a.architecture, "model_type": a.model_type, "hidden_size": a.hidden_size,
        "vocab_size": a.vocab_size, "layers": [layer(x) for x in a.layers],
        "max_position_embeddings": a.max_position_embeddings, "tie_word_embeddings": a.tie_word_embeddings,
        "mtp": None if a.mtp is None else {"num_layers": a.mtp.num_layers, "layer": layer(a.mtp.layer),
                                           "draft_class": a.mtp.draft_class},
        "torch_dtype": a.torch_dtype, "notes": list(a.notes),
        "layer_params": [dataclasses.asdict(p) for p in a.layer_params],
        "embedding_params": a.embedding_params, "lm_head_params": a.lm_head_params,
    }  # fmt: skip


def from_json(data: Mapping[str, Any]) -> ModelArch:
    if data.get("format") != FORMAT:
        raise ValueError("another format")
    layer = lambda x: arch_mod.Layer(attention=_unpart(x["attention"]), mlp=_unpart(x["mlp"]))  # noqa: E731
    mtp = data.get("mtp")
    return ModelArch(
        architecture=data["architecture"], model_type=data["model_type"], hidden_size=int(data["hidden_size"]),
        vocab_size=int(data["vocab_size"]), layers=tuple(layer(x) for x in data["layers"]),
        max_position_embeddings=int(data["max_position_embeddings"]),
        tie_word_embeddings=bool(data["tie_word_embeddings"]),
        mtp=None if mtp is None else MTP(num_layers=int(mtp["num_layers"]), layer=layer(mtp["layer"]),
                                         draft_class=str(mtp.get("draft_class", ""))),
        torch_dtype=str(data["torch_dtype"]), notes=tuple(data.get("notes") or ()),
        layer_params=tuple(arch_mod.LayerParams(**p) for p in data.get("layer_params") or ()),
        embedding_params=int(data.get("embedding_params") or 0), lm_head_params=int(data.get("lm_head_params") or 0),
    )  # fmt: skip


# --- the key and the places ---------------------------------------------------------------------------------


def key(config: Mapping[str, Any], quantization: Mapping[str, Any] | None, release: str,
        mtp_layers: int | None) -> str:  # fmt: skip
    from ..engine.loading.weights_cache import _code

    text = json.dumps([FORMAT, dict(config), quantization, release, mtp_layers, _code()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def user_cache() -> Path:
    from ..workspace.release import cache_dir

    return cache_dir() / "models"


def _read(path: Path) -> ModelArch | None:
    try:
        return from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(path: Path, a: ModelArch) -> None:
    from .. import cache_files

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache_files.write_atomic(path, json.dumps(to_json(a)))
    except OSError:
        pass  # a cache that cannot be written costs the next process a derivation


# --- deriving -----------------------------------------------------------------------------------------------


def _derived(config: Mapping[str, Any], quantization: Mapping[str, Any] | None, release: str,
             mtp_layers: int | None) -> ModelArch:  # fmt: skip
    from ..engine.loading.build import BuildError
    from ..engine.loading.executor import ExecutionError, Executor
    from .derive import DeriveError, derive
    from .scratch import ReleaseUnavailable, scratch

    full = dict(config)
    if quantization:
        full["quantization_config"] = dict(quantization)
    try:
        with scratch(release, full) as (root, model_dir):
            try:
                return derive(Executor(root), full, model_dir=model_dir, mtp_layers=mtp_layers)
            except (BuildError, ExecutionError, DeriveError) as exc:
                raise DescriptionError(reason(exc, str(model_dir))) from None
    except ReleaseUnavailable as exc:
        raise DescriptionError(str(exc)) from None


def reason(exc: BaseException, model_dir: str = "") -> str:
    """What the release said, in one line (the innermost cause; the scratch folder's path as ``<model>``)."""
    cause: Any = exc
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    if model_dir:
        text = text.replace(model_dir, "<model>")
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


def described(config: Mapping[str, Any], *, quantization: Mapping[str, Any] | None = None, release: str,
              mtp_layers: int | None = None, workspace: Path | None = None) -> ModelArch:  # fmt: skip
    """The model of ``config`` (its quantization config apart) as SGLang ``release`` builds it, from a kept copy
    when there is one (``workspace``: a workspace's ``.twin`` folder holding copies too), else derived and kept.
    Raises ``DescriptionError``."""
    from .. import cache_files

    k = key(config, quantization, release, mtp_layers)
    places = ([Path(workspace) / "models" / f"{k}.json"] if workspace is not None else []) + [user_cache() / f"{k}.json"]

    def found() -> ModelArch | None:
        return next((a for a in map(_read, places) if a is not None), None)

    def made() -> ModelArch:
        a = _derived(config, quantization, release, mtp_layers)
        _write(places[-1], a)
        return a

    return cache_files.made_once(places[-1], found, made)


def keep(config: Mapping[str, Any], folder: Path, *, quantization: Mapping[str, Any] | None = None, release: str,
         mtp_layers: int | None = None) -> Path:  # fmt: skip
    """Derive (or find) the model's description and keep a copy in ``folder`` (a workspace's ``.twin``)."""
    made = described(config, quantization=quantization, release=release, mtp_layers=mtp_layers)
    path = Path(folder) / "models" / f"{key(config, quantization, release, mtp_layers)}.json"
    _write(path, made)
    return path
