"""Write a scenario for any model from its real ``config.json``: ``python -m sandboxes.twin scenario``.

``generate(config, index=..., quantization=..., hardware=..., release=...)`` reads the architecture from the
config (``config_reader.read_arch``), finds the model class and its draft class through the pinned release's own
registry and ``ModelConfig._config_draft_model`` (``engine/loading/build.py``), and answers what config.json leaves
open (``model.facts``) and how the checkpoint names and stores the model (``model.checkpoint``):

1. from the checkpoint's real index when one is given (a ``model.safetensors.index.json``, or a listing of
   ``name<TAB>shape<TAB>dtype`` lines): the tensor names say which modules exist and how they are named, the
   dtypes (a listing's) which dtype the norms, routers and scales are stored in, and a linear with no scale
   tensor beside it is one the vendor kept unquantized;
2. else from the parameters of the SGLang class built with ``build_model`` (a sink, a q/k norm, a
   shared_expert_gate, a router bias exist as engine parameters where the checkpoint has them);
3. else the question stays open: one ``# QUESTION`` line per fact in the file, and ``generate`` says which.

It refuses, in one line naming the class and why, a config whose model class or draft class the release does not
register or cannot construct. The hardware presets and the calibration constants (engine and kernel properties,
the same for every model) are written with their sources. Every generated file cites the config and index it was
made from in its header comment.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
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


# --- the checkpoint's index ----------------------------------------------------------------------------------

_DTYPES = {"bfloat16": "BF16", "float32": "F32", "float16": "F16", "float8_e4m3fn": "F8_E4M3", "uint8": "U8",
           "int8": "I8"}  # fmt: skip


def read_index(path: Path) -> dict[str, str | None]:
    """Tensor name -> safetensors dtype (None when the file names only the shard): a
    ``model.safetensors.index.json`` (``weight_map``), or a listing of ``name[<TAB>shape<TAB>dtype...]`` lines."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        wm = data.get("weight_map")
        if not isinstance(wm, dict):
            raise GenerateError(f"{path}: no weight_map (is it a model.safetensors.index.json?)")
        return {k: (_DTYPES.get(v.get("dtype"), v.get("dtype")) if isinstance(v, dict) else None) for k, v in wm.items()}
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        parts = line.strip().split("\t")
        if not parts[0] or parts[0].startswith("#"):
            continue
        out[parts[0]] = _DTYPES.get(parts[2], parts[2]) if len(parts) > 2 else None
    if not out:
        raise GenerateError(f"{path}: no tensor names")
    return out


def _any(names: list[str], pattern: str) -> bool:
    rx = re.compile(pattern)
    return any(rx.search(n) for n in names)


def _dtype_of(index: Mapping[str, str | None], pattern: str) -> str | None:
    rx = re.compile(pattern)
    return next((d for n, d in index.items() if d and rx.search(n)), None)


def facts_from_names(names: list[str]) -> dict[str, Any]:
    """The model facts a checkpoint's tensor names settle (``config_reader.FACTS``)."""
    mtp_layers = {m.group(1) for n in names if (m := re.match(r"mtp\.layers\.(\d+)\.", n))}
    eh = {m.group(1) for n in names if (m := re.match(r"model\.layers\.(\d+)\.eh_proj\.", n))}
    return {
        "attention.sinks": _any(names, r"\.self_attn\.sinks$"),
        "attention.qk_norm": _any(names, r"\.self_attn\.[qk]_norm\.weight$"),
        "moe.expert_bias": _any(names, r"\.experts\.(\d+\.\w+\.bias|\w+_bias)$"),
        "moe.router_bias": _any(names, r"\.(mlp|block_sparse_moe)\.(router|gate)\.bias$"),
        "moe.correction_bias": _any(names, r"e_score_correction_bias$"),
        "moe.shared_expert_gate": _any(names, r"\.shared_expert_gate\.weight$"),
        "mtp.num_layers": len(mtp_layers) or len(eh),
    }


def naming_from_names(index: Mapping[str, str | None]) -> dict[str, Any]:
    """The ``model.checkpoint`` facts a checkpoint's tensor names (and a listing's dtypes) settle."""
    names = list(index)
    main = [n for n in names if not n.startswith("mtp.")]
    mtp = [n for n in names if n.startswith("mtp.")]
    out: dict[str, Any] = {}
    out["prefix"] = "model.language_model" if _any(names, r"^model\.language_model\.") else "model"
    if _any(names, r"\.experts\."):
        out["moe_block"] = "block_sparse_moe" if _any(names, r"\.block_sparse_moe\.") else "mlp"
        out["router"] = "router" if _any(names, r"\.(mlp|block_sparse_moe)\.router\.") else "gate"

        def style(ns: list[str]) -> str | None:
            if _any(ns, r"\.experts\.\d+\."):
                return "per_expert"
            if _any(ns, r"\.experts\.(gate_up_proj|down_proj)"):
                return "fused"
            return None

        out["experts"] = style(main) or style(names)
        if mtp and style(mtp) and style(mtp) != out["experts"]:
            out["mtp_experts"] = style(mtp)
        if _any(names, r"\.experts\.\d+\.w[123]\."):
            out["expert_names"] = "w1_w3_w2"
        elif _any(names, r"\.experts\.\d+\.(gate|up|down)_proj\."):
            out["expert_names"] = "gate_up_down"
    if _any(names, r"\.shared_experts\."):
        out["shared_expert"] = "shared_experts"
    elif _any(names, r"\.shared_expert\."):
        out["shared_expert"] = "shared_expert"
    if _any(names, r"\.linear_attn\.in_proj_qkvz\."):
        out["linear_attention"] = "qkvz_ba"
    elif _any(names, r"\.linear_attn\.in_proj_qkv\."):
        out["linear_attention"] = "qkv_z_b_a"
    if _any(names, r"\.self_attn\.[qkv]_proj\.bias$"):
        out["o_proj_bias"] = _any(names, r"\.self_attn\.o_proj\.bias$")
    eh = sorted({int(m.group(1)) for n in names if (m := re.match(r"model\.layers\.(\d+)\.eh_proj\.", n))})
    if _any(names, r"^mtp\.fc\."):
        out["mtp"] = "mtp"
    elif eh:
        out["mtp"], out["mtp_layer"] = "layer", eh[0]
        out["mtp_embeddings"] = _any(names, rf"^model\.layers\.{eh[0]}\.(embed_tokens|shared_head\.head)\.")
    else:
        out["mtp"] = "none"
    out["rotary_inv_freq"] = _any(names, r"\.rotary_emb\.inv_freq$")
    out["vision"] = "qwen3_vl" if _any(names, r"^model\.visual\.blocks\.") else "none"
    dtypes: dict[str, str] = {}
    for key, pattern in (("norm", r"\.input_layernorm\.weight$"), ("router", r"\.(gate|router)\.weight$"),
                         ("scale", r"\.weight_scale_inv$"), ("linear_norm", r"\.linear_attn\.norm\.weight$"),
                         ("linear_state", r"\.linear_attn\.A_log$")):  # fmt: skip
        d = _dtype_of(index, pattern)
        if d:
            dtypes[key] = d
    if dtypes.get("linear_norm") == dtypes.get("norm"):
        dtypes.pop("linear_norm", None)
    if dtypes.get("linear_state") == dtypes.get("norm"):
        dtypes.pop("linear_state", None)
    if dtypes:
        out["dtypes"] = dtypes
    return out


def unlisted_unquantized(index: Mapping[str, str | None], modules: list[Any], scheme: Any) -> list[str]:
    """Linears the vendor stored unquantized though its quantization config would quantize them: in the index
    with a ``weight`` and no scale beside it (or a bf16 ``weight`` where the listing gives dtypes). Only asked when
    the index itself is quantized (it has scales)."""
    from ..models.catalogue import LINEAR

    if not any(n.endswith(("weight_scale_inv", "weight_scale", "_scales")) for n in index):
        return []
    out = []
    for t in modules:
        if t.kind != LINEAR or not scheme.quantizes(t.name, t.category) or f"{t.name}.weight" not in index:
            continue
        scaled = any(f"{t.name}.{s}" in index for s in ("weight_scale_inv", "weight_scale"))
        dtype = index[f"{t.name}.weight"]
        if not scaled and dtype in (None, "BF16", "F16", "F32"):
            out.append(t.name)
    return out


# --- the engine's parameters ---------------------------------------------------------------------------------


def _release_root(version: str, tmp: Path) -> Path:
    """An SGLang root (``python/sglang``) for the pinned release's cached tree."""
    from ..workspace import release

    got = release.release_tree(version)
    if not isinstance(got, release.ReleaseTree):
        raise GenerateError(f"the SGLang {version} release is not available ({got.reason}): the scenario command "
                            "reads the model class from it")  # fmt: skip
    root = tmp / "sglang"
    (root / "python").mkdir(parents=True)
    (root / "python" / "sglang").symlink_to(got.package)
    return root


def _engine_params(root: Path, config: Mapping[str, Any], *, draft: bool) -> tuple[str, dict[str, tuple[int, ...]]]:
    """(class, {parameter name: shape}) of the model the release builds for ``config``; raises GenerateError."""
    from ..engine.loading.build import build_model
    from ..engine.loading.executor import Executor

    try:
        built = build_model(Executor(root), config, draft=draft)
    except Exception as exc:  # the release's own constructor (or an import it needed) raised
        cause = getattr(exc, "cause", None) or exc
        what = "draft class" if draft else "model class"
        archs = config.get("architectures") or ["?"]
        raise GenerateError(f"SGLang cannot construct the {what} for {archs[0]}: {type(cause).__name__}: "
                            f"{str(cause).splitlines()[0] if str(cause) else ''}") from None  # fmt: skip
    params = {n: tuple(p.shape) for n, p in built.model.named_parameters()}
    return built.model_class.name, params


def facts_from_engine(params: Mapping[str, tuple[int, ...]], arch_facts: list[str], config: Mapping[str, Any]) -> dict[str, Any]:
    """Model facts the engine's parameters settle: the release builds a parameter where the checkpoint has one."""
    names = list(params)
    out: dict[str, Any] = {}
    for fact in arch_facts:
        if fact == "attention.sinks":
            out[fact] = _any(names, r"\.self_attn\.sinks$") or _any(names, r"\.attn\.sinks$")
        elif fact == "attention.qk_norm":
            out[fact] = _any(names, r"\.[qk]_norm\.weight$")
        elif fact == "moe.expert_bias":
            out[fact] = _any(names, r"\.experts\.w(13|2)_weight_bias$")
        elif fact == "moe.router_bias":
            out[fact] = _any(names, r"\.(router|gate)\.bias$")
        elif fact == "moe.correction_bias":
            out[fact] = _any(names, r"e_score_correction_bias$")
        elif fact == "moe.shared_expert_gate":
            out[fact] = _any(names, r"\.shared_expert_gate\.weight$")
        elif fact == "attention.output_gate":
            c = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
            H, kv = int(c.get("num_attention_heads", 0)), int(c.get("num_key_value_heads", 0) or 0)
            hd = int(c.get("head_dim") or (int(c.get("hidden_size", 0)) // max(H, 1)))
            rows = next((s[0] for n, s in params.items() if re.search(r"(self_attn\.|\.)qkv_proj\.weight$", n)), None)
            if rows is not None and kv:
                if rows == 2 * H * hd + 2 * kv * hd:
                    out[fact] = True
                elif rows == H * hd + 2 * kv * hd:
                    out[fact] = False
    return out


def naming_from_engine(params: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """Naming facts the engine's parameter names settle (the release keeps the checkpoint's module names there)."""
    names = list(params)
    out: dict[str, Any] = {}
    if _any(names, r"\.experts\."):
        out["moe_block"] = "block_sparse_moe" if _any(names, r"\.block_sparse_moe\.") else "mlp"
        out["router"] = "router" if _any(names, r"\.mlp\.router\.") else "gate"
    if _any(names, r"\.shared_experts\."):
        out["shared_expert"] = "shared_experts"
    elif _any(names, r"\.shared_expert\."):
        out["shared_expert"] = "shared_expert"
    if _any(names, r"qkv_proj\.bias$"):
        out["o_proj_bias"] = _any(names, r"o_proj\.bias$")
    out["rotary_inv_freq"] = False  # a buffer the engine recomputes: only an index shows a checkpoint storing it
    if _any(names, r"^visual\.blocks\.\d+\.attn\.qkv_proj\.") and _any(names, r"^visual\.merger\.linear_fc1\."):
        out["vision"] = "qwen3_vl"  # the engine builds (and loads) Qwen3-VL's vision tower
    else:
        out["vision"] = "none"
    return out


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


def generate(config_path: Path, out: Path, *, index_path: Path | None = None, quantization_path: Path | None = None,
             hardware: str = "mi355x", release: str = "0.5.12", name: str | None = None,
             draft_config_path: Path | None = None) -> Generated:  # fmt: skip
    """Write the scenario for the model of ``config_path`` to ``out`` (``draft_config_path``: the config.json of a
    separate draft checkpoint served with it, e.g. an EAGLE3 head). Raises ``GenerateError`` (one line) for a
    model the release cannot serve; returns the open questions (the file holds them too)."""
    from ..engine.loading.build import draft_class_of, registry
    from ..models.catalogue import CheckpointQuestion, config_modules
    from ..models.config_reader import FACTS, ConfigError, open_questions, read_arch
    from ..models.quantization import QuantizationError, Scheme, weight_format
    from .format import CheckpointSpec

    if hardware not in HARDWARE:
        raise GenerateError(f"unknown hardware {hardware!r} (known: {', '.join(HARDWARE)})")
    try:
        config = json.loads(Path(config_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GenerateError(f"{config_path}: cannot read a config.json: {exc}") from None
    qc = None
    if quantization_path is not None:
        try:
            qc = json.loads(Path(quantization_path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise GenerateError(f"{quantization_path}: cannot read a quantization_config: {exc}") from None
        qc = qc.get("quantization_config", qc)
    qc = qc if qc is not None else config.get("quantization_config")
    try:
        fmt = weight_format(qc)
    except QuantizationError as exc:
        raise GenerateError(str(exc)) from None
    engine_config = dict(config)
    if qc:
        engine_config["quantization_config"] = qc
    index = read_index(index_path) if index_path is not None else None
    result = Generated(path=Path(out))
    archs = config.get("architectures") or (config.get("text_config") or {}).get("architectures") or []
    if not archs:
        raise GenerateError(f"{config_path}: no 'architectures' list naming the model class")

    with tempfile.TemporaryDirectory(prefix="dz-scenario-") as tmp:
        root = _release_root(release, Path(tmp))
        known = registry(root)
        if archs[0] not in known:
            raise GenerateError(f"SGLang {release} registers no model class {archs[0]!r}: it cannot serve this model")
        target_class, params = _engine_params(root, engine_config, draft=False)
        result.target_class = f"{known[archs[0]].file}:{target_class}"

        # model.facts: the index's names, else the engine's parameters, else a question
        facts: dict[str, Any] = {}
        try:
            open_facts = open_questions(config, {})
        except ConfigError as exc:
            raise GenerateError(f"{config_path}: {exc}") from None
        from_index = facts_from_names(list(index)) if index is not None else {}
        from_engine = facts_from_engine(params, open_facts, config)
        for fact in open_facts:
            if fact in from_index and fact != "attention.output_gate":
                facts[fact], result.sources[fact] = from_index[fact], "index"
            elif fact in from_engine:
                facts[fact], result.sources[fact] = from_engine[fact], "engine"
        questions = [f for f in open_facts if f not in facts]
        for q in questions:
            result.questions.append(f"model.facts.{q}: config.json does not say {FACTS[q]}")
        try:
            arch = read_arch(config, {**facts, **{q: False for q in questions}})
        except ConfigError as exc:
            raise GenerateError(f"{config_path}: {exc}") from None

        draft_class = ""
        if draft_config_path is not None:
            draft_class = result.draft_class = _separate_draft_class(Path(draft_config_path), known, release)
        elif arch.mtp is not None:
            draft = draft_class_of(root, engine_config)
            if draft not in known:
                raise GenerateError(f"SGLang {release} drafts {archs[0]} with {draft!r}, which it does not register: "
                                    "its MTP head cannot be served")  # fmt: skip
            draft_name, _ = _engine_params(root, engine_config, draft=True)
            draft_class = result.draft_class = f"{known[draft].file}:{draft_name}"

    # model.checkpoint: the index's names, else the engine's parameter names, else a question
    naming: dict[str, Any] = {}
    if index is not None:
        naming.update(naming_from_names(index))
        src = "index"
        if naming.get("vision") == "none" and naming_from_engine(params).get("vision") != "none":
            naming["vision"] = naming_from_engine(params)["vision"]  # a partial index; the engine loads the tower
            result.sources["checkpoint.vision"] = "engine"
    else:
        naming.update(naming_from_engine(params))
        src = "engine"
    if arch.mtp is None:
        naming["mtp"] = "none"
    for k in naming:
        result.sources.setdefault(f"checkpoint.{k}", src)
    scheme = Scheme(qc, scale_dtype=(naming.get("dtypes") or {}).get("scale", "F32"))
    ck_questions: list[str] = []
    probe = dict(naming)
    while True:
        try:
            spec = CheckpointSpec(**{k: (tuple(v) if k == "unquantized" else v) for k, v in probe.items()})
            modules = config_modules(arch, config, spec)
            break
        except CheckpointQuestion as q:
            ck_questions.append(q.fact)
            result.questions.append(f"model.checkpoint.{q.fact}: {q}".split(": set ")[0])
            probe[q.fact] = _placeholder(q.fact)
    if index is not None and qc:
        extra = unlisted_unquantized(index, modules, scheme)
        if extra:
            naming["unquantized"] = extra

    _write(result, Path(out), config_path=Path(config_path), index_path=index_path, quantization_path=quantization_path,
           config=config, qc=qc, fmt=fmt, facts=facts, fact_questions=questions, naming=naming,
           naming_questions=ck_questions, arch=arch, hardware=hardware, release=release, name=name,
           draft_class=draft_class, draft_config_path=draft_config_path)  # fmt: skip
    return result


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


def _placeholder(fact: str) -> Any:
    return {"moe_block": "mlp", "experts": "per_expert", "expert_names": "gate_up_down", "router": "gate",
            "shared_expert": "shared_experts", "linear_attention": "qkvz_ba", "o_proj_bias": False, "mtp": "none",
            "mtp_embeddings": False, "vision": "none"}[fact]  # fmt: skip


def _write(result: Generated, out: Path, *, config_path: Path, index_path: Path | None, quantization_path: Path | None,
           config: dict[str, Any], qc: Any, fmt: str, facts: dict[str, Any], fact_questions: list[str],
           naming: dict[str, Any], naming_questions: list[str], arch: Any, hardware: str, release: str,
           name: str | None, draft_class: str, draft_config_path: Path | None = None) -> None:  # fmt: skip
    d = _defaults()
    hw = HARDWARE[hardware]
    out_dir = out.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    served = name or Path(config_path).resolve().parent.name.replace("--", "/")
    scen_name = out.stem
    L: list[str] = []
    L.append(f"# Generated by `python -m sandboxes.twin scenario` (dayzero digital twin, simulated): {arch.describe()}.")
    L.append(f"# Sources: config.json {_rel(config_path, out_dir)}")
    L.append(f"#          index       {_rel(index_path, out_dir) if index_path else '(none: naming facts from the engine class)'}")  # noqa: E501
    if quantization_path:
        L.append(f"#          quantization_config {_rel(quantization_path, out_dir)}")
    if draft_config_path:
        L.append(f"#          draft       {_rel(draft_config_path, out_dir)} (a separate draft checkpoint)")
    L.append(f"#          model class {result.target_class}" + (f", draft class {draft_class}" if draft_class else "")
             + f" (SGLang {release}'s registry)")  # fmt: skip
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
    if facts or fact_questions:
        L.append("  facts:                             # what config.json leaves open")
        for k, v in facts.items():
            L.append(f"    {k}: {_yaml_value(v)}  # from the {result.sources.get(k)}")
        for k in fact_questions:
            L.append(f"    # QUESTION {k}: {_yaml_value(None)}")
    L.append("  checkpoint:                        # how the checkpoint names and stores it (docs/twin-scenarios.md)")
    for k, v in naming.items():
        if k in ("unquantized", "dtypes"):
            continue
        L.append(f"    {k}: {_yaml_value(v)}")
    for k in naming_questions:
        L.append(f"    # QUESTION {k}: ...        # {_question_text(k)}")
    if naming.get("dtypes"):
        L.append(f"    dtypes: {_yaml_value(naming['dtypes'])}   # as the index lists them")
    if naming.get("unquantized"):
        L.append("    unquantized:                     # stored without scales though the quantization config "
                 "does not list them")
        L.extend(f"      - {_yaml_value(u)}" for u in naming["unquantized"])
    if draft_config_path is not None:
        L.append("  draft:                             # a separate draft checkpoint (--speculative-draft-model-path)")
        L.append(f"    config: {_yaml_value(_rel(draft_config_path, out_dir))}")
        L.append("    # assumption: the default scenario's acceptance; fit both to the draft's published acceptance length")
        L.append(f"    acceptance_rate: {d['model']['mtp']['acceptance_rate']}")
        L.append(f"    acceptance_decay: {d['model']['mtp']['acceptance_decay']}")
    if arch.mtp is not None:
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


def _question_text(fact: str) -> str:
    from ..models.catalogue import CHECKPOINT_FACTS

    return CHECKPOINT_FACTS.get(fact, "")
