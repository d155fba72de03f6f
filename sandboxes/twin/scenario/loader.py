"""Read a scenario YAML file into ``format.Scenario``: every problem one located line, ``file:line: field``.

``load(name_or_path)`` parses with line numbers (a small typed builder over PyYAML's nodes), reads the files a
scenario names (a model's ``config.json``, a published ``quantization_config``; paths relative to the scenario),
derives what a config-driven scenario leaves to its config, and checks what a scenario must not say (a flag that
is not SGLang's, a weight format with no peak, ...). The scenario and the JSON files it names are read only when
they are regular files of at most ``SCENARIO_MAX_BYTES`` (``/dev/zero``, a FIFO, a directory are refused unread),
as YAML whose aliases cannot expand past a bound (``safe_input``); a file none of whose top-level keys is a
scenario's section is refused as not a scenario, and no message quotes a key or value that is not a plain name
(``scenario: /etc/shadow`` does not print its first line). Standard library and PyYAML only.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from ..safe_input import InputFileError, MiB, compose_yaml, construct_yaml, plain, read_text, shown
from ..shipped_yaml import is_shipped
from . import hardware
from .format import ATTENTION_KINDS, DefectSpec, MTPSpec, Scenario, ScenarioError

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
DEFAULT_SCENARIO = "glm52_mi355x"
# what a scenario may answer that the release's classes cannot: whether the checkpoint ships the MTP layers its
# draft class would load
FACTS = {"mtp.num_layers": "how many MTP (next-token prediction) layers the checkpoint ships (0: none)"}
SCENARIO_MAX_BYTES = 4 * MiB  # a scenario file, and each JSON config it names (the shipped ones: under 100 KB)
MAX_REF_CHARS = 4096  # the path of a JSON config a scenario names


def resolve(name_or_path: str | Path) -> Path:
    """A scenario name (a file in ``scenarios/``) or a path to a YAML file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ScenarioError(f"{p}: no such scenario file")
        return p
    candidate = SCENARIO_DIR / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = ", ".join(sorted(q.stem for q in SCENARIO_DIR.glob("*.yaml")))
        raise ScenarioError(f"{name_or_path}: unknown scenario (known: {known})")
    return candidate


def available() -> list[str]:
    return sorted(q.stem for q in SCENARIO_DIR.glob("*.yaml"))


def load(name_or_path: str | Path = DEFAULT_SCENARIO) -> Scenario:
    path = resolve(name_or_path)
    try:
        text = read_text(path, SCENARIO_MAX_BYTES)
        node = compose_yaml(text, shipped=is_shipped(text, SCENARIO_DIR))
    except InputFileError as exc:
        raise ScenarioError(f"{path}{f':{exc.line}' if exc.line else ''}: {exc}") from None
    if node is None or not isinstance(node, yaml.MappingNode):
        raise ScenarioError(f"{path}:1: a scenario is a mapping of sections")
    sections = [f.name for f in dataclasses.fields(Scenario) if f.name not in ("path", "lines")]
    if not any(isinstance(k, yaml.ScalarNode) and k.value in sections for k, _ in node.value):
        raise ScenarioError(f"{path}:1: not a scenario file (none of its top-level keys is a scenario's section: "
                            f"{', '.join(sections)})")  # fmt: skip
    lines: dict[str, int] = {}
    scenario = _build(Scenario, node, str(path), "", lines)
    scenario = dataclasses.replace(scenario, path=str(path), lines=lines)
    scenario = _read_configs(scenario)
    scenario = _fill_hardware(scenario)
    _check(scenario)
    return _derive(scenario)


def _json_ref(sc: Scenario, where: str, ref: Any) -> dict[str, Any]:
    """A mapping given inline, or read from a JSON file named relative to the scenario."""
    if isinstance(ref, dict):
        return ref
    if not isinstance(ref, str) or len(ref) > MAX_REF_CHARS:
        raise ScenarioError(f"{sc.where(where)}: expected a path to a JSON file (at most {MAX_REF_CHARS} characters) "
                            f"or a mapping, got {shown(ref)}")  # fmt: skip
    path = Path(ref) if Path(ref).is_absolute() else Path(sc.path).parent / ref
    try:
        data = json.loads(read_text(path, SCENARIO_MAX_BYTES))
    except InputFileError as exc:
        raise ScenarioError(f"{sc.where(where)}: {ref}: {exc}") from None
    except json.JSONDecodeError as exc:  # its message quotes nothing of the file: where, and what was expected
        raise ScenarioError(f"{sc.where(where)}: {ref} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ScenarioError(f"{sc.where(where)}: {ref} nests too deeply to be a config") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{sc.where(where)}: {ref} holds no JSON object")
    return data


def _read_configs(sc: Scenario) -> Scenario:
    """A config-driven scenario: the model's fields read from its config.json, the quantization's from its
    published quantization_config (their JSON texts kept, so the scenario stays a value)."""
    from ..models.quantization import QuantizationError, quark_exclude, weight_format

    m, q = sc.model, sc.quantization
    if m.config is not None:
        config = _json_ref(sc, "model.config", m.config)
        published = config.pop("quantization_config", None)
        if q.config is None and not q.weight_format and published:  # the config's own quantization_config
            q = dataclasses.replace(q, config=published)
        m = dataclasses.replace(m, config=json.dumps(config, sort_keys=True))
    unknown = sorted(set(m.facts) - set(FACTS))
    if unknown:
        raise ScenarioError(f"{sc.where('model.facts')}: {shown(unknown[0])} is not a fact a scenario answers (the "
                            f"release's classes describe the model; the facts are: {', '.join(FACTS)})")  # fmt: skip
    if m.index:
        path = Path(m.index) if Path(m.index).is_absolute() else Path(sc.path).parent / m.index
        if len(m.index) > MAX_REF_CHARS or not path.is_file():
            raise ScenarioError(f"{sc.where('model.index')}: {shown(m.index)} is not a file (the checkpoint's "
                                "model.safetensors.index.json or a tensor listing, relative to the scenario)")  # fmt: skip
        m = dataclasses.replace(m, index=str(path.resolve()))
    if m.draft is not None:
        draft_config = _json_ref(sc, "model.draft.config", m.draft.config)
        if not isinstance(draft_config.get("architectures"), list) or not draft_config["architectures"]:
            raise ScenarioError(f"{sc.where('model.draft.config')}: names no architectures (the class SGLang "
                                "loads the draft with)")
        m = dataclasses.replace(m, draft=dataclasses.replace(m.draft, config=json.dumps(draft_config, sort_keys=True)))
    if q.config is not None:
        qc = _json_ref(sc, "quantization.config", q.config)
        try:
            fmt = weight_format(qc)
        except QuantizationError as exc:
            raise ScenarioError(f"{sc.where('quantization.config')}: {exc}") from None
        q = dataclasses.replace(q, config=json.dumps(qc, sort_keys=True), weight_format=fmt,
                                exclude=tuple(quark_exclude(qc)) or q.exclude)  # fmt: skip
    return dataclasses.replace(sc, model=m, quantization=q)


def description_inputs(sc: Scenario) -> dict[str, Any]:
    """What the model's description depends on (``models.description.described``'s arguments but the workspace):
    the config, the checkpoint's quantization config, the release, the MTP layers the checkpoint ships."""
    from ..models.derive import stated_mtp_layers
    from ..models.quantization import QuantizationError, quark_export_config

    m, q = sc.model, sc.quantization
    config = m.hf_config
    try:
        qc = json.loads(q.config) if q.config else quark_export_config(q.weight_format, list(sc.exclude_entries()))
    except QuantizationError as exc:
        raise ScenarioError(f"{sc.where('quantization')}: {exc}") from None
    if m.config is None:
        mtp_layers: int | None = 1 if m.mtp else 0
    else:
        mtp_layers = m.facts.get("mtp.num_layers")
        if mtp_layers is None:
            mtp_layers = stated_mtp_layers(config)
    return {"config": config, "quantization": qc, "release": sc.engine.version, "mtp_layers": mtp_layers}


def _derive(sc: Scenario) -> Scenario:
    """The model as the pinned release builds it (``models.description``: derived once, then kept), and, for a
    model given by its config, the hand-written fields read from it. A model the release cannot build is refused
    with the release's reason."""
    from ..models.description import DescriptionError, described
    from ..models.legacy import spec_fields

    m = sc.model
    inputs = description_inputs(sc)
    config = inputs["config"]
    folder = Path(sc.path).parent
    try:
        arch = described(**inputs, workspace=folder if folder.name == ".twin" else None)
    except DescriptionError as exc:
        where = "model.config" if m.config is not None else (
            "model.architecture" if "registers no model class" in str(exc) else "model")
        raise ScenarioError(f"{sc.where(where)}: SGLang {sc.engine.version} cannot serve this model: {exc}") from None
    if inputs["mtp_layers"] is None and arch.mtp is not None:
        raise ScenarioError(f"{sc.where('model.config')}: model.facts.mtp.num_layers: config.json does not say how "
                            "many MTP (next-token prediction) layers the checkpoint ships, and SGLang "
                            f"{sc.engine.version} can draft this model with its MTP class ({arch.mtp.draft_class or 'its draft class'}): "
                            "set model.facts.mtp.num_layers (0: none), or give the checkpoint's "
                            "model.safetensors.index.json to `python -m sandboxes.twin scenario`")  # fmt: skip
    if m.config is not None:
        mtp = m.mtp
        if arch.mtp is not None:
            mtp = dataclasses.replace(mtp or MTPSpec(), layer_index=arch.num_hidden_layers,
                                      checkpoint_prefix=(mtp.checkpoint_prefix if mtp and mtp.checkpoint_prefix
                                                         else f"model.layers.{arch.num_hidden_layers}"))  # fmt: skip
        m = dataclasses.replace(m, mtp=mtp, **spec_fields(arch, config))
    return dataclasses.replace(sc, model=dataclasses.replace(m, derived=arch))


def _fill_hardware(sc: Scenario) -> Scenario:
    """The GPU's fields the scenario does not write, from the spec sheet it names (``hardware.spec_sheet``)."""
    hw = sc.hardware
    if not hw.spec_sheet:
        return sc
    given = {k.split(".", 1)[1] for k in sc.lines if k.startswith("hardware.") and k.count(".") == 1}
    try:
        return dataclasses.replace(sc, hardware=hardware.fill(hw, given))
    except KeyError as exc:
        raise ScenarioError(f"{sc.where('hardware.spec_sheet')}: {exc.args[0]}") from None


# --- what a scenario must not say: checked after parsing, each problem one located line ------------------

WEIGHT_FORMATS = ("mxfp4", "fp8", "bf16")
MOE_DTYPES = ("mxfp4", "fp8", "bf16")


def _check(sc: Scenario) -> None:
    def fail(where: str, problem: str) -> typing.NoReturn:
        raise ScenarioError(f"{sc.where(where)}: {problem}")

    if sc.model.config is None:
        _check_hand_written(sc.model, fail)
    for name in ("name", "gfx_arch", "memory_gb", "memory_bandwidth_tbs"):
        if not getattr(sc.hardware, name):
            fail(f"hardware.{name}", "required field is missing (or name a spec_sheet: "
                 f"{', '.join(hardware.known())})")
    fmt = sc.quantization.weight_format
    if fmt not in WEIGHT_FORMATS:
        fail("quantization.weight_format", f"unknown format {shown(fmt)} (expected one of {', '.join(WEIGHT_FORMATS)})")
    for table, where in ((sc.hardware.peak_tflops, "hardware.peak_tflops"),
                         (sc.calibration.gemm_efficiency, "calibration.gemm_efficiency"), (sc.accuracy, "accuracy")):
        if fmt not in table:
            fail(where, f"has no entry for the weight format {shown(fmt)}")
    for field_name in ("exclude", "stored_unquantized"):
        for i, entry in enumerate(getattr(sc.quantization, field_name)):
            if entry.startswith("re:"):
                try:
                    re.compile(entry[3:])
                except re.error as exc:
                    fail(f"quantization.{field_name}[{i}]", f"bad regular expression {entry[3:83]!r}: {exc}")
    for i, shape in enumerate(sc.defects.tuned_moe_shapes):
        if shape.dtype not in MOE_DTYPES:
            fail(f"defects.tuned_moe_shapes[{i}].dtype",
                 f"unknown MoE dtype {shown(shape.dtype)} (expected one of {', '.join(MOE_DTYPES)})")
    flags = _sglang_flags(sc.engine.version)
    for i, kernel in enumerate(sc.engine.jit_kernels):
        if kernel.when.flag not in flags:
            fail(f"engine.jit_kernels[{i}].when.flag", f"{shown(kernel.when.flag)} is not an SGLang server argument")
    _check_serving_defects(sc.defects, sc.hardware.num_gpus, flags, fail)


def _check_hand_written(m: Any, fail: Any) -> None:
    """A model written field by field (no config.json): what its fields must say."""
    for name in ("architecture", "model_type", "hidden_size", "num_hidden_layers", "vocab_size", "attention", "moe"):
        if not getattr(m, name):
            fail(f"model.{name}", "required field is missing (or give the model's config.json as model.config)")
    a = m.attention
    if a.kind not in ATTENTION_KINDS:
        fail("model.attention.kind", f"unknown attention kind {shown(a.kind)} (expected one of {', '.join(ATTENTION_KINDS)})")
    need = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if a.kind == "mla" else (
        "num_kv_heads", "head_dim")
    for name in need:
        if getattr(a, name) <= 0:
            fail(f"model.attention.{name}", f"{a.kind} attention needs a positive {name}")
    if a.kind == "gqa":
        if a.num_heads % a.num_kv_heads:
            fail("model.attention.num_kv_heads", f"num_heads ({a.num_heads}) is not a multiple of it")
        if a.sparse_topk or a.kv_lora_rank or a.q_lora_rank:
            fail("model.attention.kind", "gqa attention has no latent ranks or sparse indexer (those are MLA's)")
    if m.mtp is not None:
        if m.mtp.layer_index != m.num_hidden_layers:
            fail("model.mtp.layer_index", f"SGLang's NextN loader takes the MTP layer at num_hidden_layers "
                                          f"({m.num_hidden_layers}), not {m.mtp.layer_index}")
        want = f"model.layers.{m.mtp.layer_index}"
        if m.mtp.checkpoint_prefix != want:
            fail("model.mtp.checkpoint_prefix", f"SGLang's NextN loader reads the MTP layer from {want!r}")


COLLECTIVE_PATHS = ("aiter_allreduce_fusion", "custom_allreduce", "quick_allreduce", "rccl")
COLLECTIVE_FAILURES = ("hang", "error")
WORKER_ERRORS = ("memory_access_fault", "illegal_memory_access")


def _check_serving_defects(defects: DefectSpec, num_gpus: int, flags: set[str], fail: Any) -> None:
    """The defects that fail while serving (``collective_faults``, ``worker_faults``): known paths and errors, a
    rank the node has, a trigger on a real flag."""
    for i, cf in enumerate(defects.collective_faults):
        where = f"defects.collective_faults[{i}]"
        if cf.allreduce not in COLLECTIVE_PATHS:
            fail(f"{where}.allreduce", f"unknown all-reduce path {shown(cf.allreduce)} (expected one of "
                                       f"{', '.join(COLLECTIVE_PATHS)})")
        if cf.failure not in COLLECTIVE_FAILURES:
            fail(f"{where}.failure", f"unknown failure {shown(cf.failure)} (expected one of {', '.join(COLLECTIVE_FAILURES)})")
        if cf.failure == "error" and cf.allreduce != "rccl":
            fail(f"{where}.failure", "only RCCL reports an error (the custom all-reduce kernels wait: use hang)")
        if cf.min_tokens < 1:
            fail(f"{where}.min_tokens", "must be at least 1")
    for i, wf in enumerate(defects.worker_faults):
        where = f"defects.worker_faults[{i}]"
        if wf.error not in WORKER_ERRORS:
            fail(f"{where}.error", f"unknown error {shown(wf.error)} (expected one of {', '.join(WORKER_ERRORS)})")
        if not 0 <= wf.rank < num_gpus:
            fail(f"{where}.rank", f"the node has ranks 0 to {num_gpus - 1}, not {wf.rank}")
        if wf.min_tokens < 1:
            fail(f"{where}.min_tokens", "must be at least 1")
        if wf.when is not None and wf.when.flag not in flags:
            fail(f"{where}.when.flag", f"{shown(wf.when.flag)} is not an SGLang server argument")


def _sglang_flags(version: str) -> set[str]:
    """The ServerArgs fields of SGLang ``version`` (its own parser, when the release is in the per-user cache;
    never downloaded here), else those the twin models."""
    from ..engine import server_args
    from ..workspace.release import cached

    tree = cached(version)
    if tree is not None:
        try:
            return set(server_args.release_command_line(tree.root).fields)
        except server_args.ServerArgsError:
            pass
    return set(server_args.MODELLED_ARGS)


# --- a small typed builder over YAML nodes, so that every error carries its line --------------------------


def _fail(file: str, node: yaml.Node, where: str, problem: str) -> typing.NoReturn:
    raise ScenarioError(f"{file}:{node.start_mark.line + 1}: {where or '(top)'}: {problem}")


def _scalar(node: yaml.Node, file: str = "", where: str = "") -> Any:
    try:
        return construct_yaml(node)
    except InputFileError as exc:  # a tag PyYAML's safe loader does not know, a number of thousands of digits
        _fail(file, node, where, str(exc))


def _key(node: yaml.Node) -> str:
    """A key for a message: itself when a plain name, else what it is (it may be a line of any file)."""
    if isinstance(node, yaml.ScalarNode) and plain(node.value):
        return node.value
    return f"(a key of {len(node.value)} characters)" if isinstance(node, yaml.ScalarNode) else "(a key that is not a name)"


def _build(tp: Any, node: yaml.Node, file: str, where: str, lines: dict[str, int] | None = None) -> Any:
    if lines is not None and where:
        lines.setdefault(where, node.start_mark.line + 1)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null") and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        last: ScenarioError | None = None
        for a in inner:
            try:
                return _build(a, node, file, where, lines)
            except ScenarioError as exc:
                last = exc
        assert last is not None
        raise last
    if tp is Any:
        return _scalar(node, file, where)
    if dataclasses.is_dataclass(tp):
        if not isinstance(node, yaml.MappingNode):
            _fail(file, node, where, f"expected a mapping for {tp.__name__}")
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp) if f.name not in ("path", "lines")}
        values: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            sub = f"{where}.{_key(key_node)}" if where else _key(key_node)
            if key not in fields:
                _fail(file, key_node, sub, f"unknown field (expected one of: {', '.join(fields)})")
            values[key] = _build(hints[key], value_node, file, sub, lines)
        for name, f in fields.items():
            missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if missing and name not in values:
                _fail(file, node, f"{where}.{name}" if where else name, "required field is missing")
        return tp(**values)
    if origin is tuple or origin is list:
        if not isinstance(node, yaml.SequenceNode):
            _fail(file, node, where, "expected a list")
        item_tp = args[0]
        return tuple(_build(item_tp, n, file, f"{where}[{i}]", lines) for i, n in enumerate(node.value))
    if origin is dict:
        if not isinstance(node, yaml.MappingNode):
            _fail(file, node, where, "expected a mapping")
        for k, _ in node.value:
            if not isinstance(k, yaml.ScalarNode):
                _fail(file, k, f"{where}.{_key(k)}", "a key is a name, not a list or mapping")
        return {k.value: _build(args[1], v, file, f"{where}.{k.value}" if plain(k.value) else f"{where}.{_key(k)}",
                                lines) for k, v in node.value}  # fmt: skip
    if not isinstance(node, yaml.ScalarNode):
        _fail(file, node, where, f"expected a {tp.__name__}")
    value = _scalar(node, file, where)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        _fail(file, node, where, f"expected {tp.__name__}, got {shown(value)}")
    return value
