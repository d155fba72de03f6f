"""Write a scenario for any model from its real ``config.json``: ``python -m sandboxes.twin scenario``.

``generate(config, index=..., quantization=..., hardware=..., release=...)`` describes the model by what the pinned
release builds of it (``models.description``: its ``ModelConfig`` through the real transformers, the class its
registry names, the layers that class builds) and derives the checkpoint its loaders accept
(``models.release_checkpoint``), spelled as the published index spells it when ``--index`` gives one (a
``model.safetensors.index.json`` or a ``name<TAB>shape<TAB>dtype`` listing). It refuses, in one line with the
release's own reason, a model the release cannot serve (a refused quantization, an architecture it would serve only
through its Transformers fallback, a config that needs the checkpoint's own code). The one fact a config and the
release may leave open, whether the checkpoint ships the MTP layer the release's draft class loads, is settled by
the index (the draft's names in it) or the config's own count; else it stays a ``# QUESTION`` line in the file and
``generate`` says so. The hardware presets and the calibration constants (engine and kernel properties, the same
for every model) are written with their sources. Every generated file cites what it was made from in its header.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import shipped_yaml
from .hardware import known as known_sheets
from .hardware import preset
from .loader import SCENARIO_DIR

# --- hardware presets -----------------------------------------------------------------------------------------

# AMD's data sheets (data/hardware/<key>.yaml, ``hardware.preset``): MI300X, MI325X, MI355X
HARDWARE: dict[str, dict[str, Any]] = {key: preset(key) for key in known_sheets()}


class GenerateError(ValueError):
    """The scenario cannot be written (one line)."""


@dataclass
class Generated:
    path: Path
    questions: list[str] = field(default_factory=list)  # one line per open fact
    target_class: str = ""
    draft_class: str = ""
    sources: dict[str, str] = field(default_factory=dict)  # fact -> where its answer came from
    kinds: str = ""  # the model's layers, as the release builds them (ModelArch.describe)
    tensors: int = 0  # the checkpoint's tensors and bytes
    bytes: int = 0
    index_missing: list[str] = field(default_factory=list)  # a complete index's names the checkpoint lacks
    index_extra: list[str] = field(default_factory=list)  # the checkpoint's names a complete index lacks


# --- the scenario file ---------------------------------------------------------------------------------------


def _rel(path: Path, out_dir: Path) -> str:
    """``path`` as the scenario file names it: relative to the file's folder (absolute on another drive)."""
    try:
        return os.path.relpath(Path(path).resolve(), out_dir.resolve())
    except ValueError:
        return str(Path(path).resolve())


def _yaml_value(v: Any) -> str:
    return json.dumps(v)


def _defaults() -> dict[str, Any]:
    return shipped_yaml.load(SCENARIO_DIR / "glm52_mi355x.yaml")


def _index_mtp(evidence: Any, checkpoint_with_mtp: dict[str, Any], checkpoint_without: dict[str, Any]) -> bool:
    """Whether the index holds the MTP layer the release's draft class loads: most of the names its loader takes
    for the draft (the target's loader takes none of them) are among the index's, as spelled there."""
    from ..models.stored import pattern

    draft_only = [n for n in checkpoint_with_mtp if n not in checkpoint_without]
    if not draft_only:
        return False
    listed = evidence.patterns
    return sum(pattern(n) in listed for n in draft_only) * 2 >= len(draft_only)


def generate(config_path: Path, out: Path, *, index_path: Path | None = None, quantization_path: Path | None = None,
             hardware: str = "mi355x", release: str = "0.5.12", name: str | None = None,
             draft_config_path: Path | None = None, index_partial: bool = False) -> Generated:  # fmt: skip
    """Write the scenario for the model of ``config_path`` to ``out`` (``draft_config_path``: the config.json of a
    separate draft checkpoint served with it, e.g. an EAGLE3 head; ``index_partial``: the index is another
    checkpoint's, used for how names are spelled). Raises ``GenerateError`` (one line, the release's reason) for a
    model the release cannot serve; returns the open questions (the file holds them too)."""
    from ..models.derive import stated_mtp_layers
    from ..models.description import DescriptionError, described
    from ..models.quantization import (
        METHODS,
        QuantizationError,
        from_hf_quant_config,
        is_hf_quant_config,
        weight_format,
    )
    from ..models.release_checkpoint import CheckpointError, checkpoint
    from ..models.stored import read_evidence

    if hardware not in HARDWARE:
        raise GenerateError(f"unknown hardware {hardware!r} (known: {', '.join(HARDWARE)})")
    try:
        config = json.loads(Path(config_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GenerateError(f"{config_path}: cannot read a config.json: {exc}") from None
    if not isinstance(config, dict):
        raise GenerateError(f"{config_path}: holds no JSON object")
    qc = None
    side = Path(config_path).parent / "hf_quant_config.json"
    if quantization_path is None and "quantization_config" not in config and side.is_file():
        quantization_path = side  # the release reads a ModelOpt checkpoint's side file from the model's folder
    if quantization_path is not None:
        try:
            qc = json.loads(Path(quantization_path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise GenerateError(f"{quantization_path}: cannot read a quantization_config: {exc}") from None
        if is_hf_quant_config(qc):
            try:
                qc = from_hf_quant_config(release, config, qc)
            except QuantizationError as exc:
                raise GenerateError(f"{quantization_path}: {exc}") from None
        elif isinstance(qc, dict):
            qc = qc.get("quantization_config", qc)
    qc = qc if qc is not None else config.get("quantization_config")
    try:
        fmt = weight_format(qc)
    except QuantizationError:
        fmt = str((qc or {}).get("quant_method", "quantized"))  # served as the release serves it
    plain = {k: v for k, v in config.items() if k != "quantization_config"}
    evidence = None
    if index_path is not None:
        try:
            evidence = read_evidence(Path(index_path), complete=not index_partial)
        except (OSError, ValueError) as exc:
            raise GenerateError(f"{index_path}: {exc}") from None
    result = Generated(path=Path(out))
    archs = config.get("architectures") or (config.get("text_config") or {}).get("architectures") or []
    if not archs:
        raise GenerateError(f"{config_path}: no 'architectures' list naming the model class")

    # the model as the release builds it; whether the checkpoint ships the MTP layer its draft class loads
    stated = stated_mtp_layers(plain)
    stated_qc = qc or (config.get("text_config") or {}).get("quantization_config")  # a wrapper's language model's
    method = str((stated_qc or {}).get("quant_method", "")).lower()
    unsimulated = bool(stated_qc) and method not in METHODS  # a method the release may run, the twin has no kernels for
    twin_lacks = (f"SGLang {release} reads {method} checkpoints, which the twin does not simulate (it simulates "
                  f"{', '.join(METHODS)}: their weights' bytes and kernels)")  # fmt: skip
    try:
        arch = described(plain, quantization=qc, release=release, mtp_layers=stated)
    except DescriptionError as exc:
        if unsimulated and not str(exc).startswith("ValueError"):  # the release's own checks raise ValueError
            raise GenerateError(f"{twin_lacks}; building the model with it ended in {exc}") from None
        raise GenerateError(f"SGLang {release} cannot serve {archs[0]}: {exc}") from None
    if unsimulated:
        raise GenerateError(f"{twin_lacks}: no scenario for {archs[0]}")
    mtp_layers = stated
    if arch.mtp is not None and stated is None:
        if evidence is not None:
            try:
                with_mtp = checkpoint(plain, quantization=qc, release=release, mtp_layers=1, evidence=evidence,
                                      arch=arch)  # fmt: skip
                without = checkpoint(plain, quantization=qc, release=release, mtp_layers=0, evidence=evidence,
                                     arch=arch)  # fmt: skip
            except CheckpointError as exc:
                raise GenerateError(f"SGLang {release}: {exc}") from None
            mtp_layers = 1 if _index_mtp(evidence, with_mtp, without) else 0
            result.sources["mtp.num_layers"] = "index"
        else:
            result.questions.append(f"model.facts.mtp.num_layers: config.json does not say whether the checkpoint "
                                    f"ships the MTP layer SGLang {release} drafts this model with "
                                    f"({arch.mtp.draft_class}); give --index, or set it (0: none)")  # fmt: skip
    elif stated is not None:
        result.sources["mtp.num_layers"] = "config"
    if mtp_layers is not None and mtp_layers != stated:
        arch = described(plain, quantization=qc, release=release, mtp_layers=mtp_layers)
    known = _release_registry(release)
    ref = known.get(archs[0])
    result.target_class = f"{ref.file}:{ref.name}" if ref else archs[0]
    if draft_config_path is not None:
        result.draft_class = _separate_draft_class(Path(draft_config_path), known, release)
    elif arch.mtp is not None and mtp_layers:
        draft = known.get(arch.mtp.draft_class)
        result.draft_class = f"{draft.file}:{draft.name}" if draft else arch.mtp.draft_class

    # the checkpoint: what it holds, and against the index where one is given
    try:
        tensors = checkpoint(plain, quantization=qc, release=release, mtp_layers=mtp_layers or 0, evidence=evidence,
                             arch=arch)  # fmt: skip
    except CheckpointError as exc:
        raise GenerateError(f"SGLang {release}: {exc}") from None
    result.tensors = len(tensors)
    result.bytes = sum(_tensor_bytes(t) for t in tensors.values())
    result.kinds = arch.describe()
    if evidence is not None and evidence.complete:
        result.index_missing = sorted(set(evidence.names) - set(tensors))
        result.index_extra = sorted(set(tensors) - set(evidence.names))
    _write(result, Path(out), config_path=Path(config_path), index_path=index_path, quantization_path=quantization_path,
           qc=qc, fmt=fmt, mtp_layers=mtp_layers, arch=arch, hardware=hardware, release=release, name=name,
           draft_class=result.draft_class, draft_config_path=draft_config_path, index_partial=index_partial)  # fmt: skip
    return result


def _tensor_bytes(meta: dict[str, Any]) -> int:
    from ..models.dtypes import tensor_bytes

    return tensor_bytes(meta["dtype"], meta["shape"])


def _release_registry(release: str) -> dict[str, Any]:
    """The pinned release's model registry (its ``EntryClass`` names)."""
    from ..engine.loading.build import registry
    from ..workspace import release as releases

    tree = releases.release_tree(release)
    if not isinstance(tree, releases.ReleaseTree):
        raise GenerateError(f"the SGLang {release} release is not available ({tree.reason})")
    return registry(Path("."), package=tree.package)


def _separate_draft_class(path: Path, known: Mapping[str, Any], release: str) -> str:
    """The class the release loads a separate draft checkpoint with (its config's ``architectures``), refused in
    one line when the release does not register it or the twin cannot write its checkpoint."""
    from ..models.draft_checkpoint import DraftLayoutError, draft_tensors

    try:
        draft_config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GenerateError(f"{path}: cannot read a draft config.json: {exc}") from None
    archs = draft_config.get("architectures") or [""]
    if archs[0] not in known:
        raise GenerateError(f"{path}: SGLang {release} registers no model class {archs[0]!r} for the draft")
    try:
        draft_tensors(draft_config)
    except DraftLayoutError as exc:
        raise GenerateError(f"{path}: {exc}") from None
    return f"{known[archs[0]].file}:{archs[0]}"


def _write(result: Generated, out: Path, *, config_path: Path, index_path: Path | None, quantization_path: Path | None,
           qc: Any, fmt: str, mtp_layers: int | None, arch: Any, hardware: str, release: str, name: str | None,
           draft_class: str, draft_config_path: Path | None = None, index_partial: bool = False) -> None:  # fmt: skip
    d = _defaults()
    hw = HARDWARE[hardware]
    out_dir = out.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    served = name or Path(config_path).resolve().parent.name.replace("--", "/")
    scen_name = out.stem
    L: list[str] = []
    L.append(f"# Generated by `python -m sandboxes.twin scenario` (dayzero digital twin, simulated): {arch.describe()}.")
    L.append(f"# Sources: config.json {_rel(config_path, out_dir)}")
    index_note = "(another checkpoint's: how names are spelled)" if index_partial else ""
    L.append(f"#          index       {_rel(index_path, out_dir) + ' ' + index_note if index_path else '(none: names from the release' + chr(39) + 's loaders)'}")  # noqa: E501
    if quantization_path:
        L.append(f"#          quantization_config {_rel(quantization_path, out_dir)}")
    if draft_config_path:
        L.append(f"#          draft       {_rel(draft_config_path, out_dir)} (a separate draft checkpoint)")
    L.append(f"#          model class {result.target_class}" + (f", draft class {draft_class}" if draft_class else "")
             + f" (SGLang {release}'s registry)")  # fmt: skip
    L.append(f"#          checkpoint  {result.tensors} tensors, {result.bytes / 1e9:.2f} GB as the release's loaders take them")
    L.append(f"#          hardware    {hw['source']}")
    if result.questions:
        L.append("# OPEN QUESTIONS (answer each below, where it says QUESTION, then load the scenario):")
        L.extend(f"#   {q}" for q in result.questions)
    L.append("# Format: docs/twin-scenarios.md.")
    L.append(f"name: {scen_name}")
    description = f"{served} ({fmt}) on 8x AMD Instinct {hw['name']}, SGLang {release} (generated from its config.json)"
    L.append(f"description: {_yaml_value(description)}")
    L.append("")
    L.append("model:")
    L.append(f"  served_name: {_yaml_value(served)}")
    L.append(f"  config: {_yaml_value(_rel(config_path, out_dir))}")
    if index_path is not None:
        L.append(f"  index: {_yaml_value(_rel(index_path, out_dir))}")
        if index_partial:
            L.append("  index_partial: true                 # another checkpoint's index: its spelling, not its tensors")
    if mtp_layers is not None and (arch.mtp is not None or result.sources.get("mtp.num_layers") == "index"):
        L.append("  facts:")
        L.append(f"    mtp.num_layers: {mtp_layers}  # from the {result.sources.get('mtp.num_layers', 'config')}")
    elif mtp_layers is None and arch.mtp is not None:
        L.append("  facts:")
        L.append(f"    mtp.num_layers: null   # QUESTION mtp.num_layers: does the checkpoint ship {arch.mtp.draft_class}'s "
                 "MTP layer? (a count; 0: none)")
    if draft_config_path is not None:
        L.append("  draft:                             # a separate draft checkpoint (--speculative-draft-model-path)")
        L.append(f"    config: {_yaml_value(_rel(draft_config_path, out_dir))}")
        L.append("    # assumption: the default scenario's acceptance; fit both to the draft's published acceptance length")
        L.append(f"    acceptance_rate: {d['model']['mtp']['acceptance_rate']}")
        L.append(f"    acceptance_decay: {d['model']['mtp']['acceptance_decay']}")
    if arch.mtp is not None and mtp_layers:
        L.append("  mtp:                               # assumption: the default scenario's acceptance, not measured for this model")  # noqa: E501
        L.append(f"    acceptance_rate: {d['model']['mtp']['acceptance_rate']}")
        L.append(f"    acceptance_decay: {d['model']['mtp']['acceptance_decay']}")
    L.append("")
    if quantization_path:
        L.append("quantization:")
        L.append(f"  config: {_yaml_value(_rel(quantization_path, out_dir))}   # as the vendor published it")
    elif qc:
        L.append("quantization: {}                   # the quantization_config of config.json, as published")
    else:
        L.append("quantization:")
        L.append("  weight_format: bf16                # config.json has no quantization_config")
    L.append("")
    L.append("hardware:")
    L.append(f"  spec_sheet: {hardware}               # data/hardware/{hardware}.yaml, AMD's data sheet")
    for k in ("name", "gfx_arch", "num_gpus", "memory_gb", "memory_bandwidth_tbs"):
        L.append(f"  {k}: {_yaml_value(hw[k])}")
    L.append(f"  peak_tflops: {_yaml_value(hw['peak_tflops'])}" + (f"   # {hw['note']}" if hw.get("note") else ""))
    L.append(f"  interconnect_gbs: {hw['interconnect_gbs']}")
    L.append("")
    L.append("engine:")
    L.append(f"  image: {hw['image'].format(version=release)}")
    L.append(f"  version: {_yaml_value(release)}")
    L.append(f"  moe_config_reader: {d['engine']['moe_config_reader']}")
    L.append(f"  default_moe_config: {d['engine']['default_moe_config']}")
    L.append("")
    L.append("defects: {}                          # none: the release as it ships")
    L.append("")
    acc = dict(d["accuracy"])
    acc.setdefault("bf16", acc.get("fp8"))
    L.append("accuracy:                          # assumption: the default scenario's figures, not measured for this model")
    L.extend(f"  {k}: {v}" for k, v in acc.items())
    L.append("")
    L.append("startup:                           # the default scenario's (engine start-up, per GB of weights, per graph)")
    for k, v in d["startup"].items():
        L.append(f"  {k}: {v}")
    L.append("")
    L.append("calibration:                       # the default scenario's constants: engine and kernel properties, "
             "the same for every model")
    for k, v in d["calibration"].items():
        L.append(f"  {k}: {_yaml_value(v)}")
    out.write_text("\n".join(L) + "\n")
