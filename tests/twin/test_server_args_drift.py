"""The twin resolves SGLang's defaults the way the pinned release does, read from the release itself.

``sandboxes/twin/engine/server_args.py`` copies what ``ServerArgs.__post_init__`` of the pinned SGLang release resolves
on a ROCm node (chunked prefill, CUDA-graph batch, static memory fraction, attention backend, page size, KV
dtype, speculative parameters and the running-request cap) and ``ServingConfig.max_running_per_rank`` copies
``ModelRunner._resolve_max_num_reqs``. These tests read the real ``server_args.py`` from the cached release
(``sandboxes.twin.workspace.release``) and fail when the copy drifts from it, two ways:

* by reading the source (``ast``): the GPU-memory tiers, every reserved-memory term, the architecture lists,
  the ``max_running_requests = 48`` of each speculative branch and its warning, the DP-attention division;
* by running the release's own methods (compiled from its source, with the device answering as a ROCm GPU and
  SGLang's imports replaced by stand-ins) next to the twin's, for each model on a grid of flags, GPUs and
  environments that holds every pair of them (``pairwise_grid``), and comparing every resolved value, every logged
  line and every error.

Then the launcher: speculative decoding without ``--max-running-requests`` shows ``max_running_requests=48`` in
its log and ``/server_info``, and the cap limits a loaded server.

Only when the release cannot be had (no cache, no registry) are the source tests skipped, with the reason.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import dataclasses
import functools
import itertools
import json
import random
import sys
import types
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sandboxes.twin.engine import server_args as twin
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.perf.simulator import simulate
from sandboxes.twin.perf.workload import DatasetSpec, build_requests
from sandboxes.twin.scenario import load
from tests.twin.conftest import running

SCENARIO = load("glm52_mi355x")
VERSION = SCENARIO.engine.version


# --- the release's source ----------------------------------------------------------------------------------------


def _fold(node: ast.AST) -> ast.AST:
    """Fold arithmetic on constants (``10 * 1024`` -> ``10240``) so terms compare by value, not spelling."""

    class Folder(ast.NodeTransformer):
        def visit_BinOp(self, n: ast.BinOp) -> ast.AST:
            self.generic_visit(n)
            if isinstance(n.left, ast.Constant) and isinstance(n.right, ast.Constant):
                try:
                    value = eval(compile(ast.Expression(body=n), "<fold>", "eval"))  # noqa: S307 (constants only)
                except Exception:
                    return n
                return ast.copy_location(ast.Constant(value=value), n)
            return n

    return Folder().visit(copy.deepcopy(node))


def _text(node: ast.AST) -> str:
    return ast.unparse(_fold(node))


def _template(node: ast.AST) -> str:
    """A logged string as a ``str.format`` template: f"... {self.x} ..." -> "... {x} ..."."""
    if isinstance(node, ast.Constant):
        return node.value
    assert isinstance(node, ast.JoinedStr), ast.unparse(node)
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(part.value)
        else:
            out.append("{" + ast.unparse(part.value).removeprefix("self.") + "}")
    return "".join(out)


class Release:
    """The pinned release's ``sglang/srt`` tree: its source as ``ast`` and its functions, compiled on demand."""

    def __init__(self, srt: Path):
        self.srt = srt
        self.sa_path = srt / "server_args.py"
        self.sa = ast.parse(self.sa_path.read_text())
        self.cls = next(n for n in self.sa.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
        self.methods = {n.name: n for n in self.cls.body if isinstance(n, ast.FunctionDef)}
        self.defaults: dict[str, Any] = {}
        for n in self.cls.body:
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
                try:
                    self.defaults[n.target.id] = ast.literal_eval(_fold(n.value))
                except ValueError:
                    self.defaults[n.target.id] = None  # a default_factory: nothing the twin resolves
        self._trees: dict[Path, ast.Module] = {}
        self.env_defaults = self._env_defaults()

    def tree(self, rel: str) -> ast.Module:
        path = self.srt / rel
        if path not in self._trees:
            self._trees[path] = ast.parse(path.read_text())
        return self._trees[path]

    def function(self, rel: str, name: str, cls: str | None = None) -> ast.FunctionDef:
        body = self.tree(rel).body
        if cls is not None:
            body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
        for n in body:
            if isinstance(n, ast.FunctionDef) and n.name == name:
                return n
        raise AssertionError(f"{rel}: no function {cls + '.' if cls else ''}{name} in SGLang {VERSION}")

    def compile(self, rel: str, name: str, namespace: dict, cls: str | None = None):
        """The release's function, compiled into ``namespace`` (its globals), decorators dropped."""
        node = copy.deepcopy(self.function(rel, name, cls))
        node.decorator_list = []
        code = compile(ast.Module(body=[node], type_ignores=[]), str(self.srt / rel), "exec")
        exec(code, namespace)  # noqa: S102 (the pinned release's own source)
        return namespace[name]

    def _env_defaults(self) -> dict[str, Any]:
        out = {}
        for n in ast.walk(self.tree("environ.py")):
            if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                    and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                    and n.value.func.id.startswith("Env") and n.value.args):  # fmt: skip
                with contextlib.suppress(ValueError):
                    out[n.targets[0].id] = (n.value.func.id, ast.literal_eval(n.value.args[0]))
        return out

    def list_in_if(self, method: str, marker: str) -> set[str]:
        """The string list of the ``if <x> in [...]`` in ``method`` that contains ``marker``."""
        for n in ast.walk(self.methods[method]):
            if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.In):
                seq = n.comparators[0]
                if isinstance(seq, (ast.List, ast.Tuple, ast.Set)):
                    values = {e.value for e in seq.elts if isinstance(e, ast.Constant)}
                    if marker in values:
                        return values
        raise AssertionError(f"no architecture list with {marker} in ServerArgs.{method}")


@pytest.fixture(scope="module")
def release(release_package: Path) -> Release:
    return Release(release_package / "srt")


def test_the_twin_follows_the_scenarios_release():
    assert twin.RELEASE == VERSION


# --- the source, read ------------------------------------------------------------------------------------------------


def _eval_const(node: ast.AST) -> Any:
    return ast.literal_eval(_fold(node))


def _assigned(stmts: list[ast.stmt], attr: str) -> Any:
    for s in stmts:
        if (isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Attribute)
                and s.targets[0].attr == attr):  # fmt: skip
            return _eval_const(s.value)
    return None


def _graph_bs(stmts: list[ast.stmt]) -> tuple[int, int]:
    """cuda_graph_max_bs of one tier: (tp_size < N, tp_size >= N), from `if self.cuda_graph_max_bs is None:`."""
    guard = next(s for s in stmts if isinstance(s, ast.If) and "cuda_graph_max_bs" in ast.unparse(s.test))
    value = _assigned(guard.body, "cuda_graph_max_bs")
    if value is not None:
        return value, value
    split = next(s for s in guard.body if isinstance(s, ast.If))
    assert ast.unparse(split.test) == f"self.tp_size < {twin.GRAPH_BS_LARGE_TP}", ast.unparse(split.test)
    return _assigned(split.body, "cuda_graph_max_bs"), _assigned(split.orelse, "cuda_graph_max_bs")


def _chunk(stmts: list[ast.stmt]) -> int:
    guard = next(s for s in stmts if isinstance(s, ast.If) and "chunked_prefill_size" in ast.unparse(s.test))
    return _assigned(guard.body, "chunked_prefill_size")


def test_gpu_memory_tiers_match_the_release(release):
    method = release.methods["_handle_gpu_memory_settings"]
    top = next(
        s for s in method.body if isinstance(s, ast.If) and ast.unparse(s.test) == "gpu_mem is not None"
    )
    tiers, node = [], top.body[0]
    while True:
        assert isinstance(node, ast.If)
        test = _text(node.test)
        assert test.startswith("gpu_mem < "), test
        tiers.append((int(test.removeprefix("gpu_mem < ")), _chunk(node.body), *_graph_bs(node.body)))
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        tiers.append((None, _chunk(node.orelse), *_graph_bs(node.orelse)))
        break
    assert tiers == twin.GPU_MEMORY_TIERS
    assert (_chunk(top.orelse), *set(_graph_bs(top.orelse))) == twin.UNKNOWN_GPU_MEMORY_DEFAULTS


def test_reserved_memory_terms_match_the_release(release):
    """Every statement and condition of the reserved-memory estimate behind the default mem_fraction_static."""
    method = release.methods["_handle_gpu_memory_settings"]
    block = next(
        s
        for s in method.body
        if isinstance(s, ast.If) and _text(s.test) == "self.mem_fraction_static is None"
    )
    found = []
    for n in ast.walk(ast.Module(body=block.body, type_ignores=[])):
        if isinstance(n, (ast.Assign, ast.AugAssign)) and "reserved_mem" in ast.unparse(
            n.targets[0] if isinstance(n, ast.Assign) else n.target
        ):
            found.append(_text(n))
        if isinstance(n, ast.If) and "model_config" not in ast.unparse(n.test):
            found.append("if " + _text(n.test))
    t = twin
    expected = [
        f"reserved_mem = {t.RESERVED_BASE_MIB}",
        "if self.chunked_prefill_size > 0",
        f"reserved_mem += max(self.chunked_prefill_size, {t.RESERVED_MIN_PREFILL_TOKENS}) * {t.RESERVED_PER_PREFILL_TOKEN}",
        f"reserved_mem += max(self.max_prefill_tokens, {t.RESERVED_MIN_PREFILL_TOKENS}) * {t.RESERVED_PER_PREFILL_TOKEN}",
        f"reserved_mem += self.cuda_graph_max_bs * {t.RESERVED_PER_GRAPH_BS}",
        f"reserved_mem += self.tp_size * self.pp_size / 8 * {t.RESERVED_PER_TP_PP_OVER_8}",
        "if self.enable_dp_attention",
        "if not self.disable_piecewise_cuda_graph",
        f"if gpu_mem is not None and gpu_mem > {t.RESERVED_FLOOR_ABOVE_MIB}",
        "if self.speculative_algorithm is not None",
        f"reserved_mem += self.cuda_graph_max_bs * self.dp_size * {t.RESERVED_DP_ATTN_PER_GRAPH_BS_DP}",
        f"if self.cuda_graph_max_bs > {t.RESERVED_DP_ATTN_LARGE_GRAPH_BS}",
        f"reserved_mem += self.cuda_graph_max_bs * self.dp_size * {t.RESERVED_DP_ATTN_LARGE_PER_GRAPH_BS_DP}",
        "if not self.use_mla_backend()",
        f"reserved_mem += len(self.piecewise_cuda_graph_tokens) * {t.RESERVED_PIECEWISE_PER_TOKEN_SIZE}",
        f"reserved_mem += {t.RESERVED_PIECEWISE_MLA_MIB}",
        f"reserved_mem = max(reserved_mem, {t.RESERVED_FLOOR_MIB})",
        "if self.speculative_algorithm == 'STANDALONE'",
        f"reserved_mem += {t.RESERVED_SPEC_STANDALONE_MIB}",
        "if self.speculative_algorithm != 'NGRAM'",
        f"reserved_mem += {t.RESERVED_SPEC_EAGLE_MIB}",
    ]
    assert sorted(found) == sorted(expected)
    fraction = next(
        s
        for s in block.body
        if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "self.mem_fraction_static"
    )
    assert _text(fraction.value) == (
        f"round((gpu_mem - reserved_mem) / gpu_mem, {t.MEM_FRACTION_DIGITS}) if gpu_mem is not None "
        f"else {t.UNKNOWN_GPU_MEM_FRACTION}"
    )


def test_speculative_branches_cap_running_requests_at_48_with_the_same_warning(release):
    """``max_running_requests = 48`` and its warning in the EAGLE/EAGLE3/STANDALONE branch and the NGRAM one."""
    method = release.methods["_handle_speculative_decoding"]
    capped = {}
    for n in ast.walk(method):
        if not isinstance(n, ast.If):
            continue
        test = ast.unparse(n.test)
        if test not in ("self.speculative_algorithm in ('EAGLE', 'EAGLE3', 'STANDALONE')",
                        "self.speculative_algorithm == 'NGRAM'"):  # fmt: skip
            continue
        guard = next(
            s
            for s in n.body
            if isinstance(s, ast.If) and ast.unparse(s.test) == "self.max_running_requests is None"
        )
        value = _assigned(guard.body, "max_running_requests")
        call = next(
            s.value
            for s in guard.body
            if isinstance(s, ast.Expr) and ast.unparse(s.value.func) == "logger.warning"
        )
        capped[test] = (
            value,
            _template(_fold(call.args[0]))
            if not isinstance(call.args[0], ast.Constant)
            else call.args[0].value,
        )
    assert len(capped) == 2, capped
    for value, warning in capped.values():
        assert value == twin.SPEC_MAX_RUNNING_REQUESTS == 48
        assert warning == twin.SPEC_MAX_RUNNING_WARNING
    assert twin.SPEC_MAX_RUNNING_WARNING == (
        "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
        "setting --max-running-requests."
    )


def test_dp_attention_divides_the_chunk_with_the_same_warning(release):
    method = release.methods["_handle_data_parallelism"]
    block = next(
        s for s in method.body if isinstance(s, ast.If) and ast.unparse(s.test) == "self.enable_dp_attention"
    )
    texts = [ast.unparse(s) for s in block.body]
    assert "self.chunked_prefill_size = self.chunked_prefill_size // self.dp_size" in texts
    assert (
        f"self.schedule_conservativeness = self.schedule_conservativeness * {twin.DP_ATTN_SCHEDULE_CONSERVATIVENESS}"
        in texts
    )
    call = next(
        s.value
        for s in block.body
        if isinstance(s, ast.Expr) and ast.unparse(s.value.func) == "logger.warning"
    )
    assert _template(call.args[0]) == twin.DP_ATTN_CHUNK_WARNING


def test_architecture_lists_match_the_release(release):
    assert (
        release.list_in_if("_handle_model_specific_adjustments", "GlmMoeDsaForCausalLM")
        == twin.DEEPSEEK_ARCHITECTURES
    )
    assert (
        release.list_in_if("_handle_speculative_decoding", "GlmMoeDsaForCausalLM")
        == twin.MTP_SELF_DRAFT_ARCHITECTURES
    )
    nsa = release.function("configs/model_config.py", "is_deepseek_nsa")
    assert {c.value for c in ast.walk(nsa) if isinstance(c, ast.Constant) and isinstance(c.value, str)} == (
        twin.NSA_ARCHITECTURES | {"index_topk"}
    )
    assert _mla_architectures(release) == twin.MLA_ARCHITECTURES
    auto = release.function("server_args.py", "auto_choose_speculative_params")
    by_arch = {}
    for n in ast.walk(auto):
        if isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and ast.unparse(n.test.left) == "arch":
            ret = next(s for s in n.body if isinstance(s, ast.Return))
            for e in n.test.comparators[0].elts:
                by_arch[e.value] = ast.literal_eval(ret.value)
    assert {a: p for a, p in by_arch.items() if p != twin.DEFAULT_SPEC_PARAMS} == twin.SPEC_PARAMS_BY_ARCH
    returns = [ast.literal_eval(n.value) for n in ast.walk(auto) if isinstance(n, ast.Return)]
    assert set(returns) == {twin.DEFAULT_SPEC_PARAMS, *twin.SPEC_PARAMS_BY_ARCH.values()}


@functools.cache
def _mla_architectures(release: Release) -> frozenset[str]:
    """Every architecture ModelConfig gives AttentionArch.MLA (the branches that set it)."""
    out: set[str] = set()
    for n in ast.walk(release.tree("configs/model_config.py")):
        if isinstance(n, ast.If) and any(
            ast.unparse(s) == "self.attention_arch = AttentionArch.MLA" for s in n.body
        ):
            for c in ast.walk(n.test):
                if (
                    isinstance(c, ast.Constant)
                    and isinstance(c.value, str)
                    and c.value.endswith(("CausalLM", "Generation", "NextN", "Eagle"))
                ):
                    out.add(c.value)
    return frozenset(out)


def test_the_parsed_fields_are_the_releases_with_its_defaults(release):
    """The twin's command line is the release's: every ServerArgs field, each at the dataclass's literal default
    when no flag is given (but for the store_true flags whose field's default is computed, as in the release)."""
    args = vars(twin.parse(["--model-path", "/m"]))
    fields = {n.target.id for n in release.cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert set(args) - {"sglang_root"} <= fields
    literal = {k: v for k, v in release.defaults.items() if v is not None}
    drifted = {k: (args[k], v) for k, v in literal.items() if k in args and args[k] != v}
    assert not drifted, drifted
    for name, value in twin.INTERNAL_DEFAULTS.items():
        if name == "device":  # None in the dataclass; _handle_missing_default_values sets get_device() = "cuda"
            continue
        assert release.defaults[name] == value, name


def test_the_twin_resolves_in_the_release_order(release):
    calls = [ast.unparse(s.value.func).removeprefix("self._") for s in release.methods["__post_init__"].body
             if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)]  # fmt: skip
    resolve = next(n for n in ast.parse(Path(twin.__file__).read_text()).body
                   if isinstance(n, ast.FunctionDef) and n.name == "resolve")  # fmt: skip
    steps = [
        ast.unparse(s.value.func)
        for s in resolve.body
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
    ]
    positions = [calls.index(step) for step in steps]  # each twin step is a real one ...
    assert positions == sorted(positions)  # ... in the release's order


# --- the source, run -----------------------------------------------------------------------------------------------


class Logger:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def _log(self, level: str, msg: str, *args: Any) -> None:
        self.lines.append((level, msg % args if args else msg))

    def warning(self, msg: str, *args: Any) -> None:
        self._log("warning", msg, *args)

    def info(self, msg: str, *args: Any) -> None:
        self._log("info", msg, *args)

    def debug(self, msg: str, *args: Any) -> None:
        pass

    def error(self, msg: str, *args: Any) -> None:
        self._log("error", msg, *args)


class EnvVar:
    """One ``sglang.srt.environ.envs`` field, over a plain mapping."""

    def __init__(self, name: str, kind: str, default: Any, environ: dict[str, str]):
        self.name, self.kind, self.default, self.environ = name, kind, default, environ

    def get(self) -> Any:
        raw = self.environ.get(self.name)
        if raw is None:
            return self.default
        if self.kind == "EnvBool":
            return raw.lower() in ("true", "1", "yes", "y")
        if self.kind == "EnvInt":
            return int(raw)
        return raw

    def is_set(self) -> bool:
        return self.name in self.environ

    def set(self, value: Any) -> None:
        self.environ[self.name] = str(value)


class Envs:
    def __init__(self, defaults: dict[str, tuple[str, Any]], environ: dict[str, str]):
        self._defaults, self._environ = defaults, environ

    def __getattr__(self, name: str) -> EnvVar:
        kind, default = self._defaults[name]
        return EnvVar(name, kind, default, self._environ)


@dataclasses.dataclass
class RealModelConfig:
    """``ModelConfig`` as far as ServerArgs reads it."""

    hf_config: Any
    context_len: int
    attention_arch: str
    total_kv_heads: int
    is_multimodal: bool = False
    is_encoder_decoder: bool = False
    has_attention_sinks: bool = False
    is_piecewise_cuda_graph_disabled_model: bool = False

    def get_num_kv_heads(self, tensor_parallel_size: int) -> int:
        return max(1, self.total_kv_heads // tensor_parallel_size)


ROCM_FALSE = ["is_cuda", "is_npu", "is_cpu", "is_mps", "is_xpu", "is_musa", "is_sm90_supported", "is_sm100_supported",
              "is_sm120_supported", "is_blackwell_supported", "is_hopper_with_cuda_12_3", "is_flashinfer_available",
              "cpu_has_amx_support", "xpu_has_xmx_support", "is_triton_kernels_available", "check_gguf_file",
              "has_fp8_weights_in_checkpoint"]  # fmt: skip
POST_INIT_STEPS = [  # the release's __post_init__ steps the twin follows, in its order (see the order test)
    "_handle_piecewise_cuda_graph", "_handle_gpu_memory_settings", "_handle_model_specific_adjustments",
    "_handle_attention_backend_compatibility", "_handle_kv4_compatibility", "_handle_page_size",
    "_handle_data_parallelism", "_handle_speculative_decoding",
]  # fmt: skip
HELPERS = ["_generate_cuda_graph_batch_sizes", "_generate_cpu_graph_batch_sizes", "_generate_piecewise_cuda_graph_tokens",
           "_get_default_attn_backend", "_set_default_nsa_kv_cache_dtype", "_set_default_nsa_backends",
           "get_attention_backends", "is_attention_backend_not_set"]  # fmt: skip


class RealServerArgs:
    """The release's ServerArgs methods on a plain object: run one case with ``run``."""

    def __init__(self, release: Release, monkeypatch: pytest.MonkeyPatch):
        self.release = release
        self.g: dict[str, Any] = {"__builtins__": builtins, "logger": Logger(), "envs": None, "json": json}
        self.g.update({name: (lambda *a, **k: False) for name in ROCM_FALSE})
        self.g.update({
            "is_hip": lambda: True,
            "is_no_spec_infer_or_topk_one": lambda s: True,
            "get_device_name": lambda *a: "AMD Instinct MI355X",
            "get_device_sm": lambda: 95,
            "get_nvidia_driver_version": lambda: None,
            "get_linear_attn_spec_by_arch": lambda arch: None,
            "get_quantization_config": lambda cfg: (getattr(cfg, "quantization_config", None) or {}).get("quant_method"),
            "parse_connector_type": lambda path: "local",
            "ConnectorType": types.SimpleNamespace(INSTANCE="instance"),
            "LLAMA4_MODEL_ARCHS": [],
            "MIMO_V2_MODEL_ARCHS": [],
        })  # fmt: skip
        members = {name: release.compile("server_args.py", name, self.g, cls="ServerArgs")
                   for name in POST_INIT_STEPS + HELPERS}  # fmt: skip
        members["get_model_config"] = lambda s: s._model_config
        members["use_mla_backend"] = lambda s: s._model_config.attention_arch == "MLA"
        self.cls = type("ReleaseServerArgs", (), members)
        for name in ("_resolve_speculative_algorithm_alias", "auto_choose_speculative_params"):
            release.compile("server_args.py", name, self.g)
        self._install_modules(monkeypatch)

    def _install_modules(self, mp: pytest.MonkeyPatch) -> None:
        release, g = self.release, self.g

        def module(name: str, **attrs: Any) -> types.ModuleType:
            m = types.ModuleType(name)
            m.__path__ = []  # a package, so that submodules import
            m.__dict__.update(attrs)
            mp.setitem(sys.modules, name, m)
            return m

        for pkg in ("sglang", "sglang.srt", "sglang.srt.configs", "sglang.srt.layers", "sglang.srt.layers.attention",
                    "sglang.srt.layers.attention.nsa", "sglang.srt.arg_groups", "sglang.srt.speculative",
                    "sglang.srt.utils"):  # fmt: skip
            module(pkg)
        platform = types.SimpleNamespace(is_out_of_tree=lambda: False)
        module("sglang.srt.platforms", current_platform=platform)
        mc: dict[str, Any] = {"__builtins__": builtins}
        for name in ("_hf_arch", "_hf_attr", "is_deepseek_nsa", "get_nsa_index_topk"):
            release.compile("configs/model_config.py", name, mc)
        module(
            "sglang.srt.configs.model_config", get_mimo_v2_fused_qkv_expected_tp_size=lambda *a: None, **mc
        )
        self.triton = module("triton", __version__=twin.ROCM_IMAGE_TRITON_VERSION)
        common: dict[str, Any] = {"__builtins__": builtins, "os": __import__("os"), "logger": Logger(),
                                  "_warned_bool_env_var_keys": set()}  # fmt: skip
        release.compile("utils/common.py", "get_bool_env_var", common)
        nsa: dict[str, Any] = {"__builtins__": builtins, "is_hip": lambda: True, "triton": self.triton,
                               "get_bool_env_var": common["get_bool_env_var"]}  # fmt: skip
        release.compile("layers/attention/nsa/utils.py", "aiter_can_use_preshuffle_paged_mqa", nsa)
        module(
            "sglang.srt.layers.attention.nsa.utils",
            **{k: nsa[k] for k in ("aiter_can_use_preshuffle_paged_mqa",)},
        )
        hs: dict[str, Any] = {
            "__builtins__": builtins,
            "_hisparse_default_backend": lambda dtype: "flashmla_sparse",
        }
        release.compile("arg_groups/hisparse_hook.py", "apply_hisparse_nsa_backend_defaults", hs)
        module(
            "sglang.srt.arg_groups.hisparse_hook",
            apply_hisparse_nsa_backend_defaults=hs["apply_hisparse_nsa_backend_defaults"],
        )

        class SpeculativeAlgorithm:
            @staticmethod
            def from_string(name: str) -> Any:
                return types.SimpleNamespace(name=name)

        class CustomSpecAlgo:
            pass

        module("sglang.srt.speculative.spec_info", SpeculativeAlgorithm=SpeculativeAlgorithm)
        module("sglang.srt.speculative.spec_registry", CustomSpecAlgo=CustomSpecAlgo)
        module(
            "sglang.srt.utils.hf_transformers_utils",
            get_config=lambda *a, **k: types.SimpleNamespace(architectures=["DraftForCausalLM"]),
        )
        module("torch", cuda=types.SimpleNamespace(get_device_capability=lambda *a: g["_capability"]))

    def run(self, values: dict[str, Any], model: RealModelConfig, gpu_mem: float | None, capability: tuple[int, int],
            environ: dict[str, str], steps: list[str] = POST_INIT_STEPS) -> tuple[dict[str, Any], list, str | None]:  # fmt: skip
        obj = self.cls.__new__(self.cls)
        obj.__dict__.update(self.release.defaults)
        obj.__dict__.update(
            device="cuda", _quantization_explicitly_unset=False, _model_config=model, **values
        )
        logger = Logger()
        self.g.update(
            logger=logger, envs=Envs(self.release.env_defaults, dict(environ)), _capability=capability
        )
        error = None
        try:
            for step in steps:
                method = getattr(obj, step)
                method(gpu_mem) if step == "_handle_gpu_memory_settings" else method()
        except (ValueError, AssertionError, TypeError, RuntimeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        return obj.__dict__, logger.lines, error


def run_twin(values: dict[str, Any], info: twin.ModelInfo, gpu_mem: float | None, capability: tuple[int, int],
             environ: dict[str, str]) -> tuple[dict[str, Any], list, str | None]:  # fmt: skip
    args = twin.parse(["--model-path", values.get("model_path", "/models/m")])
    for k, v in values.items():
        setattr(args, k, v)
    error, lines = None, []
    try:
        lines = twin.resolve(args, info, twin.Platform(gpu_mem, capability), env=environ, check_args=False)
    except twin.InvalidServerArgs as exc:
        error = f"{exc.kind}: {exc}"
    return vars(args), lines, error


COMPARED = ["chunked_prefill_size", "cuda_graph_max_bs", "mem_fraction_static", "attention_backend", "page_size",
            "kv_cache_dtype", "max_running_requests", "speculative_algorithm", "speculative_num_steps",
            "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_draft_model_path",
            "enable_dp_attention", "disable_cuda_graph", "disable_radix_cache", "enable_mixed_chunk",
            "disable_overlap_schedule", "nsa_prefill_backend", "nsa_decode_backend", "schedule_conservativeness",
            "disable_piecewise_cuda_graph", "piecewise_cuda_graph_max_tokens"]  # fmt: skip

# (architecture, config.json) of models the release knows: DSA, MLA, MHA with long and short context
MODELS = {
    "glm5-dsa": {"architectures": ["GlmMoeDsaForCausalLM"], "kv_lora_rank": 512, "index_topk": 2048,
                 "num_attention_heads": 64, "num_key_value_heads": 64, "max_position_embeddings": 202752},
    "dsv32-dsa": {"architectures": ["DeepseekV32ForCausalLM"], "kv_lora_rank": 512, "index_topk": 2048,
                  "num_attention_heads": 128, "num_key_value_heads": 128, "max_position_embeddings": 163840},
    "dsv3-mla-128": {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512, "num_attention_heads": 128,
                     "num_key_value_heads": 128, "max_position_embeddings": 163840},
    "dsv3-mla-32": {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512, "num_attention_heads": 32,
                    "num_key_value_heads": 32, "max_position_embeddings": 131072},
    "qwen3-moe-mha": {"architectures": ["Qwen3MoeForCausalLM"], "num_attention_heads": 64, "num_key_value_heads": 4,
                      "max_position_embeddings": 40960},
    "llama-short": {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 8,
                    "max_position_embeddings": 8192},
}  # fmt: skip
FLAG_CASES: list[dict[str, Any]] = [
    {}, {"tp_size": 8}, {"tp_size": 4, "dp_size": 2}, {"tp_size": 2}, {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True},
    {"tp_size": 8, "dp_size": 2, "enable_dp_attention": True}, {"tp_size": 8, "speculative_algorithm": "EAGLE"},
    {"tp_size": 8, "speculative_algorithm": "NEXTN", "speculative_num_steps": 5, "speculative_eagle_topk": 1,
     "speculative_num_draft_tokens": 6},
    {"tp_size": 8, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
     "speculative_num_draft_tokens": 7},
    {"tp_size": 8, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 2, "speculative_eagle_topk": 4,
     "speculative_num_draft_tokens": 8},
    {"tp_size": 8, "speculative_algorithm": "STANDALONE"}, {"tp_size": 8, "speculative_algorithm": "NGRAM"},
    {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "speculative_algorithm": "EAGLE"},
    {"tp_size": 8, "speculative_algorithm": "EAGLE", "max_running_requests": 256},
    {"tp_size": 8, "speculative_algorithm": "EAGLE", "speculative_draft_model_path": "/models/draft"},
    {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3},
    {"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2},
    {"tp_size": 4, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 64}, {"chunked_prefill_size": -1},
    {"mem_fraction_static": 0.85}, {"kv_cache_dtype": "fp8_e4m3"}, {"kv_cache_dtype": "fp8_e5m2"},
    {"kv_cache_dtype": "bf16"}, {"kv_cache_dtype": "fp4_e2m1"}, {"attention_backend": "triton"},
    {"attention_backend": "aiter", "tp_size": 8}, {"attention_backend": "torch_native"},
    {"attention_backend": "flex_attention", "speculative_algorithm": "EAGLE"}, {"attention_backend": "flashmla"},
    {"attention_backend": "cutlass_mla"}, {"attention_backend": "trtllm_mla"}, {"attention_backend": "trtllm_mha"},
    {"attention_backend": "fa3", "kv_cache_dtype": "fp8_e5m2"}, {"attention_backend": "intel_xpu"},
    {"attention_backend": "dual_chunk_flash_attn"}, {"page_size": 16}, {"context_length": 4096},
    {"max_total_tokens": 1000, "model_path": "/models/llama-2-70b"}, {"tp_size": 3, "dp_size": 2, "enable_dp_attention": True},
    {"nsa_prefill_backend": "tilelang"}, {"nsa_decode_backend": "aiter", "kv_cache_dtype": "fp8_e4m3"},
    {"tp_size": 8, "speculative_algorithm": "EAGLE", "enable_mixed_chunk": True},
]  # fmt: skip
ENVIRONS = [
    ({"SGLANG_USE_AITER": "1"}, "3.4.0"),  # the ROCm image as the twin models it
    ({"SGLANG_USE_AITER": "1"}, "3.5.1"),  # a newer Triton: the preshuffle paged-MQA path
    ({"SGLANG_USE_AITER": "1", "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS": "1"}, "3.4.0"),
    ({"SGLANG_USE_AITER": "1", "SGLANG_NSA_HIP_DISABLE_PRESHUFFLE": "1"}, "3.5.1"),
    ({}, "3.5.1"),  # aiter off
    ({"SGLANG_USE_AITER": "1", "SGLANG_ENABLE_SPEC_V2": "false",
      "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "4096"}, "3.4.0"),
]  # fmt: skip
GPUS = [("MI355X", 288 * 1024, (9, 5)), ("MI300X", 192 * 1024, (9, 4)), ("80 GB", 80 * 1024, (9, 4)),
        ("48 GB", 48 * 1024, (9, 4)), ("unknown", None, (9, 5))]  # fmt: skip


def pairwise_grid(rotation: int) -> list[tuple[dict[str, Any], tuple[dict[str, str], str], tuple]]:
    """Every flag case with every environment, each pair on one GPU chosen so that every (flag case, GPU) and every
    (environment, GPU) pair is covered too: a covering array of strength 2, a fifth of the full product. The GPU of a
    (flag case, environment) pair is rotated by ``rotation`` (the model's index), so the models between them run
    other triples than one model alone would."""
    return [(flags, env, GPUS[(i + j + rotation) % len(GPUS)])
            for i, flags in enumerate(FLAG_CASES) for j, env in enumerate(ENVIRONS)]  # fmt: skip


def test_the_grid_covers_every_pair():
    for rotation in range(len(MODELS)):
        grid = pairwise_grid(rotation)
        flag_env = {(json.dumps(f, sort_keys=True), json.dumps(e)) for f, e, _ in grid}
        flag_gpu = {(json.dumps(f, sort_keys=True), g[0]) for f, _, g in grid}
        env_gpu = {(json.dumps(e), g[0]) for _, e, g in grid}
        assert len(flag_env) == len(FLAG_CASES) * len(ENVIRONS)
        assert len(flag_gpu) == len(FLAG_CASES) * len(GPUS) and len(env_gpu) == len(ENVIRONS) * len(GPUS)


def _real_model(release: Release, config: dict[str, Any], context_length: int | None) -> RealModelConfig:
    arch = config["architectures"][0]
    hf = types.SimpleNamespace(**{k: v for k, v in config.items()})
    hf.__dict__.setdefault("index_topk", None)
    hf.__dict__.setdefault("quantization_config", None)
    return RealModelConfig(
        hf_config=hf, context_len=context_length or config["max_position_embeddings"],
        attention_arch="MLA" if arch in _mla_architectures(release) else "MHA",
        total_kv_heads=config.get("num_key_value_heads", config["num_attention_heads"]),
    )  # fmt: skip


@pytest.mark.parametrize("model_name", list(MODELS))
def test_resolution_matches_the_release_run(release, monkeypatch, model_name):
    """Every value the twin resolves, every line it logs and every error it raises, against the release's own
    ServerArgs methods run on the same flags, GPU, model and environment."""
    real = RealServerArgs(release, monkeypatch)
    config = MODELS[model_name]
    mismatches = []
    for flags, (environ, triton), (gpu, gpu_mem, capability) in pairwise_grid(list(MODELS).index(model_name)):
        monkeypatch.setattr(twin, "ROCM_IMAGE_TRITON_VERSION", triton)
        real.triton.__version__ = triton
        for name in (
            "SGLANG_USE_AITER",
            "SGLANG_NSA_HIP_DISABLE_PRESHUFFLE",
            "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS",
        ):
            if name in environ:
                monkeypatch.setenv(name, environ[name])  # get_bool_env_var reads os.environ
            else:
                monkeypatch.delenv(name, raising=False)
        twin_env = (
            dict(environ) if environ else {"SGLANG_USE_AITER": "0"}
        )  # the twin adds the image's default
        values = {"model_path": "/models/m", **flags}
        info = twin.ModelInfo.from_config(config, values.get("context_length"))
        assert info.effective_architecture == config["architectures"][0]  # a model the release knows
        r_vals, r_lines, r_err = real.run(dict(values), _real_model(release, config, values.get("context_length")),
                                          gpu_mem, capability, environ)  # fmt: skip
        t_vals, t_lines, t_err = run_twin(dict(values), info, gpu_mem, capability, twin_env)
        where = f"{model_name} on {gpu}, Triton {triton}, env {environ}, flags {flags}"
        if (r_err is None) != (t_err is None) or (r_err and not _same_error(r_err, t_err)):
            mismatches.append(f"{where}: release error {r_err!r}, twin error {t_err!r}")
            continue
        if r_err:
            continue
        for key in COMPARED:
            if r_vals.get(key) != t_vals.get(key):
                mismatches.append(f"{where}: {key} release={r_vals.get(key)!r} twin={t_vals.get(key)!r}")
        if r_lines != t_lines:
            mismatches.append(f"{where}: log lines\n  release: {r_lines}\n  twin:    {t_lines}")
    assert not mismatches, f"{len(mismatches)} drifts, first ones:\n" + "\n".join(mismatches[:8])


def _same_error(real: str, mine: str | None) -> bool:
    """Same exception type; same message too, unless the release's assertion has none."""
    kind, _, message = real.partition(": ")
    mine_kind, _, mine_message = (mine or "").partition(": ")
    return kind == mine_kind and (not message or message == mine_message)


def test_unknown_mla_architectures_resolve_as_their_stand_in():
    """The twin's fictional models resolve exactly as the DeepSeek architecture standing in for them."""
    for scenario in ("vega_mi355x", "orion_mi300x"):
        from sandboxes.twin.workspace.materialize import build_config

        sc = load(scenario)
        config = build_config(sc)
        kind = "dsa" if config.get("index_topk") else "mla"
        standin = {**config, "architectures": [twin.UNKNOWN_MLA_ARCHITECTURE_STANDIN[kind]]}
        platform = twin.Platform.from_hardware(sc.hardware)
        for flags in (
            ["--tp-size", "8"],
            ["--tp-size", "2", "--dp-size", "4"],
            ["--speculative-algorithm", "EAGLE"],
        ):
            a, b = (twin.parse(["--model-path", "/m", *flags]) for _ in range(2))
            lines_a = twin.resolve(a, twin.ModelInfo.from_config(config), platform, env={})
            lines_b = twin.resolve(b, twin.ModelInfo.from_config(standin), platform, env={})
            assert vars(a) == vars(b) and lines_a == lines_b


def test_running_request_limit_per_rank_matches_the_release(release):
    """ServingConfig.max_running_per_rank against ModelRunner._resolve_max_num_reqs, and whose dp_size divides."""
    runner = (release.srt / "model_executor/model_runner.py").read_text()
    assert "self.dp_size = server_args.dp_size if server_args.enable_dp_attention else 1" in runner
    g: dict[str, Any] = {"__builtins__": builtins}
    resolve = release.compile("model_executor/model_runner_kv_cache_mixin.py", "_resolve_max_num_reqs", g,
                              cls="ModelRunnerKVCacheMixin")  # fmt: skip
    for mrr, dp, dpa, capacity, context in itertools.product(
        [None, 48, 256, 5000], [1, 2, 8], [False, True], [1000, 300_000, 1_777_470, 9_000_000], [8192, 202752]
    ):
        if dpa and dp == 1:
            continue
        runner_self = types.SimpleNamespace(
            server_args=types.SimpleNamespace(max_running_requests=mrr), model_config=types.SimpleNamespace(context_len=context),
            dp_size=dp if dpa else 1, mambaish_config=None,
        )  # fmt: skip
        cfg = ServingConfig(tp_size=8, dp_size=dp, enable_dp_attention=dpa, max_running_requests=mrr)
        assert cfg.max_running_per_rank(capacity, context) == resolve(runner_self, capacity), (
            mrr,
            dp,
            dpa,
            capacity,
        )


def test_scheduler_log_line_has_the_release_format(release):
    scheduler = (release.srt / "managers/scheduler.py").read_text()
    for piece in ('f"max_total_num_tokens={self.max_total_num_tokens}, "', 'f"max_running_requests={self.max_running_requests}, "',
                  'ret["effective_max_running_requests_per_dp"] = self.max_running_requests'):  # fmt: skip
        assert piece in scheduler


# --- what it does to a running server ----------------------------------------------------------------------------


def test_speculation_caps_running_requests_in_the_simulation():
    """48 running requests per server (or per replica); under DP attention 48 shared by the ranks."""
    rng = random.Random(1)
    reqs = build_requests(DatasetSpec("random-ids", num_prompts=300, random_input_len=2000, random_output_len=300,
                                      random_range_ratio=1.0), rng)  # fmt: skip
    arrivals = [0.0] * len(reqs)
    spec = dict(speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1,
                speculative_num_draft_tokens=4, context_length=202752)  # fmt: skip
    peaks = {}
    for name, layout, mrr in (("tp8-48", dict(tp_size=8), 48), ("tp8-256", dict(tp_size=8), 256),
                              ("dpa8-48", dict(tp_size=8, dp_size=8, enable_dp_attention=True), 48),
                              ("tp4dp2-48", dict(tp_size=4, dp_size=2), 48)):  # fmt: skip
        model = CostModel(SCENARIO, ServingConfig(**layout, **spec, max_running_requests=mrr))
        result = simulate(model, reqs, arrivals, 1_500_000)
        peaks[name] = (result.peak_running, sum(t.req.output_len for t in result.traces) / result.duration)
    assert peaks["tp8-48"][0] == 48 and peaks["tp8-256"][0] > 48
    assert peaks["tp8-256"][1] > peaks["tp8-48"][1]
    assert peaks["dpa8-48"][0] == 48 // 8  # per rank
    assert peaks["tp4dp2-48"][0] == 48  # per replica


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


HIGH_CONCURRENCY = ["--dataset-name", "random-ids", "--random-input-len", "2000", "--random-output-len", "300",
                    "--random-range-ratio", "1", "--num-prompts", "600", "--request-rate", "inf",
                    "--max-concurrency", "256"]  # fmt: skip


def test_speculative_decoding_without_a_limit_runs_48_requests(fixed_workspace, tmp_path):
    spec = ["--tp-size", "8", "--speculative-algorithm", "EAGLE"]
    with running(fixed_workspace, tmp_path / "spec.log", spec) as server:
        info = _get(server.url + "/server_info")
        capped = server.bench(tmp_path, *HIGH_CONCURRENCY)
    log = (tmp_path / "spec.log").read_text()
    assert twin.SPEC_MAX_RUNNING_WARNING in log
    assert "max_running_requests=48," in log
    assert info["max_running_requests"] == 48
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 48
    assert (
        info["speculative_num_steps"],
        info["speculative_eagle_topk"],
        info["speculative_num_draft_tokens"],
    ) == (3, 1, 4)
    assert info["mem_fraction_static"] == 0.894  # 288 GB, TP8, EAGLE: (294912 - 31232) / 294912

    with running(
        fixed_workspace, tmp_path / "spec256.log", [*spec, "--max-running-requests", "256"]
    ) as server:
        info = _get(server.url + "/server_info")
        wide = server.bench(tmp_path, *HIGH_CONCURRENCY)
    assert twin.SPEC_MAX_RUNNING_WARNING not in (tmp_path / "spec256.log").read_text()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 256
    assert capped["completed"] == wide["completed"] == 600
    # the cap queues requests in the server: lower throughput, longer time to first token
    assert capped["output_throughput"] < wide["output_throughput"]
    assert capped["median_ttft_ms"] > wide["median_ttft_ms"]


def test_dp_attention_shares_the_cap_and_divides_the_chunk(fixed_workspace, tmp_path):
    flags = ["--tp-size", "8", "--dp-size", "2", "--enable-dp-attention", "--speculative-algorithm", "EAGLE"]
    with running(fixed_workspace, tmp_path / "dpa.log", flags) as server:
        info = _get(server.url + "/server_info")
    log = (tmp_path / "dpa.log").read_text()
    assert (
        "DP attention is enabled. The chunked prefill size is adjusted to 8192 to avoid MoE kernel issues. "
        in log
    )
    assert "max_running_requests=24," in log  # 48 // dp_size per rank
    assert info["max_running_requests"] == 48 and info["chunked_prefill_size"] == 8192
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 24


def test_resolved_defaults_show_in_server_info(fixed_workspace, tmp_path):
    with running(fixed_workspace, tmp_path / "tp8.log", ["--tp-size", "8"]) as server:
        info = _get(server.url + "/server_info")
    log = (tmp_path / "tp8.log").read_text()
    expected = {"chunked_prefill_size": 16384, "cuda_graph_max_bs": 512, "mem_fraction_static": 0.908,
                "attention_backend": "nsa", "page_size": 1, "kv_cache_dtype": "bfloat16",
                "max_running_requests": None, "nsa_prefill_backend": "tilelang"}  # fmt: skip
    assert {k: info[k] for k in expected} == expected
    assert "Setting KV cache dtype to bfloat16 for DeepSeek DSA on SM9 device." in log
    assert "Use nsa attention backend for DeepSeek with DSA." in log
