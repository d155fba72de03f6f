"""Every layer kind holds and costs what SGLang 0.5.12 gives it: pools (``engine/pools.py``) and step costs
(``perf/attention.py``, ``perf/cost_model.py``), on the real published configs in ``scenarios/configs``.

Two kinds of test. Those that take the ``release`` fixture run the pinned release's own functions (compiled from
its source, with torch, transformers and the device replaced by stand-ins) beside the twin's, on the same configs,
and compare every number: the recurrent state's shape and bytes (``Mamba2StateShape.create``,
``mamba_cache_per_req``, ``Qwen3NextConfig``), the split of memory between states and KV
(``handle_max_mamba_cache``), the running-request cap (``_resolve_max_num_reqs``), the KV pool's bytes per token
(``DefaultPoolConfigurator``) and the hybrid sliding-window split (``HybridSWAPoolConfigurator``), and the lines the
release logs. The others check behaviour: which layers a pool counts, what a decode step reads as the context
grows, what a prefill computes.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import json
import math
import random
import re
import types
import typing
from pathlib import Path

import pytest

from sandboxes.twin.engine import pools
from sandboxes.twin.engine.memory import NotEnoughMemory, plan_memory
from sandboxes.twin.models.arch import MLA, ModelArch
from sandboxes.twin.models.description import described
from sandboxes.twin.perf import attention
from sandboxes.twin.perf.cost_model import ATTENTION_HALF_KEYS, CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.perf.simulator import simulate
from sandboxes.twin.perf.workload import DatasetSpec, build_requests
from sandboxes.twin.scenario import SCENARIO_DIR, load
from tests.twin.test_server_args_drift import Release

CONFIGS = SCENARIO_DIR / "configs"
GB = 1 << 30
# the MTP layers each checkpoint ships (its tensor names: each folder's tensor_names*.txt and SOURCE.md); the rest of
# each model is what the release builds of its config (models.description)
FACTS: dict[str, dict[str, object]] = {
    "Qwen--Qwen3-Next-80B-A3B-Instruct": {"mtp.num_layers": 1},  # mtp.layers.0.* (one MTP layer under mtp.)
    "Qwen--Qwen3.5-397B-A17B": {},  # config.json's mtp_num_hidden_layers
    "openai--gpt-oss-120b": {"mtp.num_layers": 0},
    "openai--gpt-oss-20b": {"mtp.num_layers": 0},
    "zai-org--GLM-5": {},  # config.json's num_nextn_predict_layers
    "deepseek-ai--DeepSeek-V3.2": {},
    "deepseek-ai--DeepSeek-R1": {},
    "Qwen--Qwen3-235B-A22B": {"mtp.num_layers": 0},
}
HYBRID_LINEAR = ["Qwen--Qwen3-Next-80B-A3B-Instruct", "Qwen--Qwen3.5-397B-A17B"]
SLIDING = ["openai--gpt-oss-120b", "openai--gpt-oss-20b"]


def config(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def arch(name: str) -> ModelArch:
    from sandboxes.twin.models.derive import stated_mtp_layers

    cfg = config(name)
    qc = cfg.pop("quantization_config", None)
    mtp = FACTS[name].get("mtp.num_layers", stated_mtp_layers(cfg))
    return described(cfg, quantization=qc, release="0.5.12", mtp_layers=mtp)


def with_arch(name: str):
    """The default scenario with ``name``'s layers: GLM-5.2's weights and MoE, another model's attention. Only
    attention terms are compared on it (scenarios built from real configs are the integrator's)."""
    sc = load()
    return dataclasses.replace(sc, model=dataclasses.replace(sc.model, derived=arch(name)))


# --- the release's own code, compiled ----------------------------------------------------------------------------

_FOREIGN = ("torch", "sglang", "transformers", "triton")


class _Strip(ast.NodeTransformer):
    """Drop imports of torch/sglang/transformers (module level and inside functions); the namespace has stand-ins."""

    def _keep(self, node: ast.Import | ast.ImportFrom) -> bool:
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        return not any(n.split(".")[0] in _FOREIGN for n in names)

    def visit_Import(self, node):
        return node if self._keep(node) else ast.Pass()

    def visit_ImportFrom(self, node):
        return node if self._keep(node) else ast.Pass()


def run_module(path: Path, namespace: dict) -> dict:
    """Execute a release module without its torch/sglang/transformers imports, in ``namespace``."""
    tree = _Strip().visit(ast.parse(path.read_text()))
    exec(compile(ast.fix_missing_locations(tree), str(path), "exec"), namespace)  # noqa: S102 (the release's source)
    return namespace


def functions(path: Path, names: list[str], namespace: dict) -> dict:
    """Compile the named top-level functions of a release module into ``namespace``."""
    tree = ast.parse(path.read_text())
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in nodes} == set(names), f"{path.name} no longer defines all of {names}"
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


class _DType:
    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"


TORCH = types.SimpleNamespace(
    float32=_DType("float32", 4), bfloat16=_DType("bfloat16", 2), float16=_DType("float16", 2),
    float8_e4m3fn=_DType("float8_e4m3fn", 1), float8_e5m2=_DType("float8_e5m2", 1), uint8=_DType("uint8", 1),
    int32=_DType("int32", 4), int64=_DType("int64", 8),
)  # fmt: skip
TORCH._utils = types.SimpleNamespace(_element_size=lambda dtype: dtype.itemsize)
KV_DTYPE = {"auto": TORCH.bfloat16, "fp8_e4m3": TORCH.float8_e4m3fn}


def ns(obj):
    """A parsed config.json as attributes (``hasattr``/``getattr`` as on a PretrainedConfig)."""
    if isinstance(obj, dict):
        return types.SimpleNamespace(**{k: ns(v) for k, v in obj.items()})
    return obj


class Sglang:
    """The pieces of the release these tests run, compiled once per session."""

    def __init__(self, release: Release):
        srt = release.srt
        self.release = release
        self.tp = 1
        self.logged: list[str] = []
        logger = types.SimpleNamespace(info=self.logged.append, warning=self.logged.append, debug=lambda m: None)
        envs = types.SimpleNamespace(**{k: types.SimpleNamespace(get=lambda v=v: v[1])
                                        for k, v in release.env_defaults.items()})  # fmt: skip
        util = functions(srt / "distributed/utils.py", ["divide", "ensure_divisibility"], {})
        self.mamba = run_module(srt / "configs/mamba_utils.py", {
            "__name__": __name__, "torch": TORCH, "divide": util["divide"], "envs": envs})  # fmt: skip
        self.mamba["logger"] = logger
        qwen = run_module(srt / "configs/qwen3_next.py", {
            "__name__": __name__, "PretrainedConfig": object,
            "logging": types.SimpleNamespace(get_logger=lambda name: logger), "is_cpu": lambda: False,
            "adjust_tp_num_heads_if_necessary": None, "get_attention_tp_size": lambda: self.tp,
            **{k: self.mamba[k] for k in ("Mamba2CacheParams", "Mamba2StateShape", "mamba2_state_dtype")},
        })  # fmt: skip
        self.qwen3_next_config = qwen["Qwen3NextConfig"]
        mc = srt / "configs/model_config.py"
        mimo = next(n for n in ast.parse(mc.read_text()).body if isinstance(n, ast.Assign)
                    and getattr(n.targets[0], "id", "") == "MIMO_V2_MODEL_ARCHS")  # fmt: skip
        self.model_config = functions(mc, ["_hf_arch", "_hf_attr", "is_deepseek_nsa", "is_deepseek_v4",
                                           "get_nsa_index_head_dim", "is_hybrid_swa_model", "get_hybrid_layer_ids"],
                                      {"List": list, "Optional": typing.Optional, "PretrainedConfig": object,
                                       "MIMO_V2_MODEL_ARCHS": ast.literal_eval(mimo.value)})  # fmt: skip
        cls = next(n for n in ast.parse(mc.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "ModelConfig")
        methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)
                   and n.name in ("get_total_num_kv_heads", "get_num_kv_heads", "get_swa_num_kv_heads")]  # fmt: skip
        self.kv_heads = {}
        exec(compile(ast.Module(body=methods, type_ignores=[]), str(mc), "exec"), self.kv_heads)  # noqa: S102
        nsa = next(n for n in ast.parse((srt / "mem_cache/memory_pool.py").read_text()).body
                   if isinstance(n, ast.ClassDef) and n.name == "NSATokenToKVPool")  # fmt: skip
        nsa_attrs = {t.id: eval(compile(ast.Expression(n.value), "nsa", "eval"), {"torch": TORCH})  # noqa: S307
                     for n in nsa.body if isinstance(n, ast.Assign) for t in n.targets}  # fmt: skip
        self.pool_configurator = run_module(srt / "model_executor/pool_configurator.py", {
            "__name__": __name__, "torch": TORCH, "envs": envs, "get_attention_tp_size": lambda: self.tp,
            "NSATokenToKVPool": types.SimpleNamespace(**nsa_attrs), "is_float4_e2m1fn_x2": lambda dtype: False,
            "get_compress_state_ring_size": None,
            **{k: self.model_config[k] for k in ("get_nsa_index_head_dim", "is_deepseek_nsa", "is_deepseek_v4")},
        })  # fmt: skip
        self.pool_configurator["logger"] = logger
        self.mixin = run_module(srt / "model_executor/model_runner_kv_cache_mixin.py", {
            "__name__": __name__, "is_npu": lambda: False, "is_hip": lambda: True})["ModelRunnerKVCacheMixin"]  # fmt: skip

    # --- stand-ins for the release's runtime objects, from a config ---

    def hf_configs(self, cfg: dict) -> tuple[types.SimpleNamespace, types.SimpleNamespace]:
        top = ns(cfg)
        return top, getattr(top, "text_config", top)

    def qwen_config(self, cfg: dict):
        """``Qwen3NextConfig`` (or Qwen3.5's text config, its subclass) holding ``cfg``'s fields."""
        text = cfg.get("text_config", cfg)
        obj = object.__new__(self.qwen3_next_config)
        obj.__dict__.update(text)
        return obj

    def runner_model_config(self, cfg: dict):
        """``ModelConfig``'s fields the pools read; ``head_dim``/``v_head_dim`` as ``_derive_model_shapes`` takes
        them for a non-MLA model."""
        hf, text = self.hf_configs(cfg)
        head_dim = getattr(text, "head_dim", text.hidden_size // text.num_attention_heads)
        mc = types.SimpleNamespace(hf_config=hf, hf_text_config=text, head_dim=head_dim,
                                   v_head_dim=getattr(text, "v_head_dim", head_dim),
                                   kv_lora_rank=getattr(text, "kv_lora_rank", None),
                                   qk_rope_head_dim=getattr(text, "qk_rope_head_dim", None))  # fmt: skip
        mc.swa_head_dim = getattr(text, "swa_head_dim", mc.head_dim)
        mc.swa_v_head_dim = getattr(text, "swa_v_head_dim", mc.swa_head_dim)
        for name, fn in self.kv_heads.items():
            if isinstance(fn, types.FunctionType):
                setattr(mc, name, types.MethodType(fn, mc))
        swa, full = self.model_config["get_hybrid_layer_ids"](hf.architectures, text)
        mc.swa_attention_layer_ids, mc.full_attention_layer_ids = swa, full
        return mc


@pytest.fixture(scope="module")
def sglang(release_package: Path) -> Sglang:
    return Sglang(Release(release_package / "srt"))


# --- linear attention: the state pool ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HYBRID_LINEAR)
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("ssm_flag", [None, "bfloat16"])
def test_recurrent_state_per_request_is_the_releases(sglang, name, tp, ssm_flag):
    """``Qwen3NextConfig.mamba2_cache_params`` (the layers, ``Mamba2StateShape.create``'s shapes, the dtypes of
    ``mamba2_state_dtype``) and its ``mamba_cache_per_req``, beside the twin's on the same config and TP degree."""
    a = arch(name)
    cfg = ServingConfig(tp_size=tp, mamba_ssm_dtype=ssm_flag)
    sglang.tp = tp
    if ssm_flag:  # --mamba-ssm-dtype sets SGLANG_MAMBA_SSM_DTYPE, which the release reads first
        env = sglang.mamba["envs"].SGLANG_MAMBA_SSM_DTYPE
        old, env.get = env.get, lambda: ssm_flag
    try:
        params = sglang.qwen_config(config(name)).mamba2_cache_params
    finally:
        if ssm_flag:
            env.get = old
    assert params.layers == a.attention_layers("linear")
    state = pools.linear_state(a.layers[0].attention, tp, pools.ssm_dtype(a.layers[0].attention, cfg))
    assert [tuple(s) for s in params.shape.conv] == [state.conv_shape]
    assert tuple(params.shape.temporal) == state.temporal_shape
    assert (params.dtype.conv.name, params.dtype.temporal.name) == (state.conv_dtype, state.ssm_dtype)
    assert params.mamba_cache_per_req == pools.mamba_cache_per_req(a, cfg)


def test_a_state_that_does_not_divide_over_the_gpus_fails_as_the_release_does(sglang):
    a = arch("Qwen--Qwen3-Next-80B-A3B-Instruct")  # 32 value heads
    sglang.tp = 3
    with pytest.raises(AssertionError) as release_error:
        sglang.qwen_config(config("Qwen--Qwen3-Next-80B-A3B-Instruct")).mamba2_cache_params  # noqa: B018
    with pytest.raises(pools.PoolError) as twin_error:
        pools.mamba_cache_per_req(a, ServingConfig(tp_size=3))
    assert str(twin_error.value) == str(release_error.value)


MAMBA_GRID = list(itertools.product(
    [0.5, 40.0, 151.7],  # GB left for the pools
    [None, 48, 300],  # --max-running-requests (48: what speculative decoding sets)
    [False, True],  # --disable-radix-cache
    [None, 500],  # --max-mamba-cache-size
    [(1, False), (4, True)],  # (dp_size, enable_dp_attention)
    [0.9, 0.3],  # --mamba-full-memory-ratio
    [0, 4],  # speculative draft tokens
))  # fmt: skip


@pytest.mark.parametrize("name", HYBRID_LINEAR)
def test_state_slots_and_the_memory_left_for_kv_are_the_releases(sglang, name):
    """``handle_max_mamba_cache`` (with ``_profile_available_bytes``'s rest) against ``pools.mamba_slots``, over
    the memory, the running-request limit, the radix cache, an explicit slot count, DP attention, the memory ratio
    and speculative decoding's intermediate states."""
    a = arch(name)
    for rest, mrr, no_radix, slots, (dp, dpa), ratio, draft in MAMBA_GRID:
        if draft and mrr is None:
            continue  # the release asserts a limit under speculative decoding (the twin sets 48)
        cfg = ServingConfig(tp_size=8, dp_size=dp, enable_dp_attention=dpa, max_running_requests=mrr,
                            disable_radix_cache=no_radix, max_mamba_cache_size=slots, mamba_full_memory_ratio=ratio,
                            speculative_algorithm="EAGLE" if draft else None, speculative_num_draft_tokens=draft)  # fmt: skip
        sglang.tp = cfg.gpus_per_rank
        server_args = types.SimpleNamespace(
            max_running_requests=mrr, disable_radix_cache=no_radix, max_mamba_cache_size=slots, dp_size=dp,
            enable_dp_attention=dpa, mamba_full_memory_ratio=ratio, speculative_num_draft_tokens=draft or None,
        )  # fmt: skip
        runner = types.SimpleNamespace(
            mambaish_config=types.SimpleNamespace(mamba2_cache_params=sglang.qwen_config(config(name)).mamba2_cache_params),
            server_args=server_args, dp_size=dp if dpa else 1,
            spec_algorithm=types.SimpleNamespace(is_none=lambda d=draft: not d),
        )  # fmt: skip
        left = sglang.mixin.handle_max_mamba_cache(runner, rest)
        assert pools.mamba_slots(a, cfg, rest) == (server_args.max_mamba_cache_size, left), (rest, mrr, no_radix,
                                                                                              slots, dp, ratio, draft)


def test_state_slots_cap_the_running_requests_as_the_release_does(sglang):
    """``_resolve_max_num_reqs`` with a mamba pool (``_calculate_mamba_ratio``: one slot per request without the
    radix cache, three with it, more with extra buffers) against ``ServingConfig.max_running_per_rank``."""
    for mrr, no_radix, strategy, no_overlap, slots, (dp, dpa), capacity in itertools.product(
        [None, 48, 5000], [False, True], ["no_buffer", "extra_buffer"], [False, True], [0, 100, 7899, 50_000],
        [(1, False), (4, True)], [300_000, 6_898_586],
    ):
        server_args = types.SimpleNamespace(
            max_running_requests=mrr, disable_radix_cache=no_radix, disable_overlap_schedule=no_overlap,
            max_mamba_cache_size=slots, enable_mamba_extra_buffer=lambda s=strategy: s == "extra_buffer",
        )  # fmt: skip
        runner = types.SimpleNamespace(server_args=server_args, dp_size=dp if dpa else 1, mambaish_config=object(),
                                       model_config=types.SimpleNamespace(context_len=262144))  # fmt: skip
        runner._calculate_mamba_ratio = types.MethodType(sglang.mixin._calculate_mamba_ratio, runner)
        cfg = ServingConfig(tp_size=8, dp_size=dp, enable_dp_attention=dpa, max_running_requests=mrr,
                            disable_radix_cache=no_radix, mamba_scheduler_strategy=strategy,
                            disable_overlap_schedule=no_overlap)  # fmt: skip
        expected = sglang.mixin._resolve_max_num_reqs(runner, capacity)
        assert cfg.max_running_per_rank(capacity, 262144, slots) == expected


def test_the_simulated_server_runs_no_more_requests_than_state_slots_allow():
    """A rank whose recurrent-state slots allow 6 requests (18 slots, three per request with the radix cache)
    never runs a seventh, however many arrive at once and however much KV is free."""
    sc = load()
    model = CostModel(sc, ServingConfig(tp_size=8))
    rng = random.Random(5)
    reqs = build_requests(DatasetSpec("random-ids", num_prompts=40, random_input_len=500, random_output_len=50,
                                      random_range_ratio=1.0), rng)  # fmt: skip
    arrivals = [0.0] * len(reqs)
    capped = simulate(model, reqs, arrivals, kv_capacity=10**7, mamba_cache_size=18)
    free = simulate(model, reqs, arrivals, kv_capacity=10**7)
    assert capped.peak_running == 6
    assert free.peak_running > 6


# --- the KV pools -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [name for name in FACTS if name not in SLIDING])
@pytest.mark.parametrize("tp", [1, 4, 8])
@pytest.mark.parametrize("dtype", ["auto", "fp8_e4m3"])
def test_kv_bytes_per_token_are_the_releases(sglang, name, tp, dtype):
    """``DefaultPoolConfigurator`` (its layer count: the full-attention layers of a hybrid linear model, every
    layer otherwise; ``_compute_cell_size``) beside ``pools.kv_cell_bytes``, for every model that is not a
    hybrid sliding-window one (those: the next test)."""
    a, cfg = arch(name), ServingConfig(tp_size=tp, kv_cache_dtype=dtype)
    assert not pools.is_hybrid_swa(a, cfg)
    sglang.tp = tp
    mc = sglang.runner_model_config(config(name))
    linear = a.attention_layers("linear")
    mambaish = types.SimpleNamespace(full_attention_layer_ids=[i for i in range(a.num_hidden_layers) if i not in linear])
    runner = types.SimpleNamespace(
        mambaish_config=mambaish if linear else None, start_layer=0, end_layer=a.num_hidden_layers,
        num_effective_layers=a.num_hidden_layers, model_config=mc, kv_cache_dtype=KV_DTYPE[dtype],
        use_mla_backend=isinstance(a.layers[0].attention, MLA) if not linear else False,
        spec_algorithm=types.SimpleNamespace(is_dflash=lambda: False), is_draft_worker=False,
    )  # fmt: skip
    cell = sglang.pool_configurator["DefaultPoolConfigurator"](runner)._cell_size
    assert pools.kv_cell_bytes(a, cfg) == cell


@pytest.mark.parametrize("name", SLIDING)
@pytest.mark.parametrize("tp", [1, 4, 8])
@pytest.mark.parametrize("dtype", ["auto", "fp8_e4m3"])
@pytest.mark.parametrize("ratio", [0.8, 0.25])
def test_hybrid_sliding_window_pools_are_the_releases(sglang, name, tp, dtype, ratio):
    """``HybridSWAPoolConfigurator.calculate_pool_sizes`` (layer ids from the release's ``get_hybrid_layer_ids``)
    beside ``pools.size_pools``: the same full and SWA tokens from the same bytes, and the same line."""
    a, cfg = arch(name), ServingConfig(tp_size=tp, kv_cache_dtype=dtype, swa_full_tokens_ratio=ratio)
    assert sglang.model_config["is_hybrid_swa_model"](config(name)["architectures"]) and pools.is_hybrid_swa(a, cfg)
    sglang.tp = tp
    mc = sglang.runner_model_config(config(name))
    assert mc.swa_attention_layer_ids == a.sliding_window_layers
    assert mc.full_attention_layer_ids == a.full_attention_layers
    runner = types.SimpleNamespace(model_config=mc, kv_cache_dtype=KV_DTYPE[dtype],
                                   server_args=types.SimpleNamespace(swa_full_tokens_ratio=ratio))  # fmt: skip
    configurator = sglang.pool_configurator["HybridSWAPoolConfigurator"](runner)
    for available in (3 * GB, 57_123_456_789, 150 * GB):
        sglang.logged.clear()
        release = configurator.calculate_pool_sizes(available, 1)
        twin = pools.size_pools(a, cfg, available, 131072)
        assert (twin.max_total_num_tokens, twin.swa_max_total_num_tokens) == (
            release.full_max_total_num_tokens, release.swa_max_total_num_tokens)
        assert configurator._cell_size == pytest.approx(twin.token_bytes, rel=1e-15)
        assert twin.log_lines()[0] == sglang.logged[-1]


def test_the_release_lists_the_hybrid_sliding_window_architectures(sglang):
    tree = ast.parse((sglang.release.srt / "configs/model_config.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "is_hybrid_swa_model")
    listed = {arch for arch in pools.HYBRID_SWA_ARCHITECTURES
              if sglang.model_config["is_hybrid_swa_model"]([arch])}  # fmt: skip
    assert listed == pools.HYBRID_SWA_ARCHITECTURES
    names = {e.value for n in ast.walk(fn) if isinstance(n, ast.Set) for e in n.elts if isinstance(e, ast.Constant)}
    assert names <= pools.HYBRID_SWA_ARCHITECTURES  # and nothing the release lists is missing here
    assert not sglang.model_config["is_hybrid_swa_model"](["Qwen3NextForCausalLM", "GlmMoeDsaForCausalLM"])


def _templates(path: Path, marker: str) -> list[re.Pattern]:
    """Every f-string in ``path`` containing ``marker``, as a regex whose groups are its formatted values."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and marker in v.value
                                                   for v in node.values):  # fmt: skip
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else "(.+?)" for v in node.values]
            out.append(re.compile("".join(parts)))
    assert out, f"{path.name}: no line with {marker!r}"
    return out


@pytest.mark.parametrize("name,flags", [
    ("Qwen--Qwen3-Next-80B-A3B-Instruct", {}),
    ("Qwen--Qwen3-Next-80B-A3B-Instruct", {"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4,
                                           "max_running_requests": 48, "disable_radix_cache": True}),
    ("openai--gpt-oss-120b", {}), ("zai-org--GLM-5", {}), ("Qwen--Qwen3-235B-A22B", {}),
])  # fmt: skip
def test_the_pool_lines_are_the_releases_lines(sglang, name, flags):
    """Every line the twin prints for its pools matches one of the release's f-strings for that line."""
    srt = sglang.release.srt
    templates = {
        "Mamba Cache is allocated.": _templates(srt / "mem_cache/memory_pool.py", "Mamba Cache is allocated."),
        "KV Cache is allocated.": _templates(srt / "mem_cache/memory_pool.py", "KV Cache is allocated."),
        "SWAKVPool mem usage": _templates(srt / "mem_cache/swa_memory_pool.py", "SWAKVPool mem usage"),
        "Use sliding window memory pool": _templates(srt / "model_executor/pool_configurator.py",
                                                     "Use sliding window memory pool"),
    }  # fmt: skip
    plan = pools.size_pools(arch(name), ServingConfig(tp_size=8, **flags), 150 * GB, 131072)
    lines = plan.log_lines() + plan.draft_log_lines()
    assert len(plan.draft_log_lines()) == (1 if flags else 0)  # the draft worker's one-layer pool
    for line in lines:
        key = next(k for k in templates if line.startswith(k))
        assert any(t.fullmatch(line) for t in templates[key]), line


def test_the_linear_scan_chunk_is_the_releases(sglang):
    source = (sglang.release.srt / "layers/attention/fla/chunk.py").read_text()
    assert re.search(rf"^CHUNK_SIZE = {attention.FLA_CHUNK_SIZE}$", source, re.M)


# --- what the pools hold, from the logged lines ---------------------------------------------------------------------

_NUM = r"([\d.]+)"


def _logged(lines: list[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for line in lines:
        for key, pattern in (("mamba", rf"max_mamba_cache_size: (\d+), conv_state size: {_NUM}GB, ssm_state size: {_NUM}GB"),
                             ("kv", rf"#tokens: (\d+), K size: {_NUM} GB, V size: {_NUM} GB"),
                             ("mla", rf"#tokens: (\d+), KV size: {_NUM} GB"),
                             ("swa", r"full_layer_tokens=(\d+), swa_layer_tokens=(\d+)")):  # fmt: skip
            m = re.search(pattern, line)
            if m:
                out.setdefault(key, []).extend(float(x) for x in m.groups())
    return out


@pytest.mark.parametrize("name", HYBRID_LINEAR)
@pytest.mark.parametrize("tp,rest_gb", [(8, 151.7), (4, 90.0), (2, 33.3)])
def test_a_hybrid_linear_models_logged_pools_add_up_as_the_release_computes_them(name, tp, rest_gb):
    """From the lines alone: the states take ``mamba_full_memory_ratio`` (0.9) of what the KV pool takes, the two
    together what was left for them, and the KV pool's tokens are its bytes over the full-attention layers' K and
    V (12 of Qwen3-Next's 48 layers, 15 of Qwen3.5's 60) on this GPU; the slots are ``int(rest * 0.9 / 1.9 //
    per request)``, and a request's state is written out from the config."""
    a = arch(name)
    cfg = ServingConfig(tp_size=tp)
    plan = pools.size_pools(a, cfg, rest_gb * GB, 262144)
    got = _logged(plan.log_lines())
    slots, conv_gb, ssm_gb = got["mamba"]
    tokens, k_gb, v_gb = got["kv"]
    text = config(name).get("text_config", config(name))
    full_layers = text["num_hidden_layers"] // text["full_attention_interval"]
    kv_per_token = full_layers * 2 * max(1, text["num_key_value_heads"] // tp) * text["head_dim"] * 2
    linear_layers = text["num_hidden_layers"] - full_layers
    conv = (text["linear_num_value_heads"] * text["linear_value_head_dim"]
            + 2 * text["linear_num_key_heads"] * text["linear_key_head_dim"]) // tp * (text["linear_conv_kernel_dim"] - 1) * 2
    ssm = text["linear_num_value_heads"] // tp * text["linear_value_head_dim"] * text["linear_key_head_dim"] * 4
    per_request = linear_layers * (conv + ssm)
    assert slots == int(rest_gb * 0.9 / (1 + 0.9) * GB // per_request)
    assert (conv_gb + ssm_gb) / (k_gb + v_gb) == pytest.approx(0.9, abs=0.002)
    # both pools fill what was left, the mamba pool with one padding slot beyond its size
    assert conv_gb + ssm_gb + k_gb + v_gb == pytest.approx(rest_gb + per_request / GB, abs=0.03)
    assert tokens == pytest.approx((k_gb + v_gb) * GB / kv_per_token, rel=1e-3)
    assert plan.max_running_requests == slots // 3  # the radix cache keeps three slots per running request


@pytest.mark.parametrize("name", SLIDING)
def test_a_hybrid_sliding_window_models_logged_pools_add_up(name):
    """The SWA pool holds 0.8 of the full pool's tokens; both pools' K and V are what was left for them; the
    sliding layers' pool is smaller than the full layers' by that ratio (as many layers of each)."""
    plan = pools.size_pools(arch(name), ServingConfig(tp_size=8), 120 * GB, 131072)
    lines = plan.log_lines()
    got = _logged(lines)
    full, swa = got["swa"]
    assert swa == int(full * 0.8)
    (swa_tokens, swa_k, swa_v, full_tokens, full_k, full_v) = got["kv"]
    assert (swa_tokens, full_tokens) == (swa, full)
    assert swa_k + swa_v + full_k + full_v == pytest.approx(120, abs=0.03)
    assert (swa_k + swa_v) / (full_k + full_v) == pytest.approx(0.8, abs=0.001)
    usage = float(re.search(r"SWAKVPool mem usage: ([\d.]+) GB", lines[-1]).group(1))
    assert usage == pytest.approx(swa_k + swa_v + full_k + full_v, abs=0.02)


def test_a_non_hybrid_models_sliding_layers_stay_in_the_one_pool():
    """Without the release's hybrid SWA pool (``--disable-hybrid-swa-memory``, or an architecture it does not
    list) every layer keeps every token: GPT-OSS then holds twice the full layers' KV per token."""
    a = arch("openai--gpt-oss-120b")
    hybrid = pools.kv_cell_bytes(a, ServingConfig(tp_size=8))
    one_pool = pools.kv_cell_bytes(a, ServingConfig(tp_size=8, disable_hybrid_swa_memory=True))
    full_only = 18 * 2 * 1 * 64 * 2  # 18 full layers, K and V of one KV head (8 over 8 GPUs), head_dim 64, bf16
    assert one_pool == 2 * full_only
    assert hybrid == pytest.approx(full_only * 1.8)
    assert pools.size_pools(a, ServingConfig(tp_size=8, disable_hybrid_swa_memory=True), 50 * GB, 131072).kind == "kv"


def test_glm5s_pool_is_its_latent_and_its_indexer_keys():
    """GLM-5 (MLA + DSA, 78 layers): 576 latent and rope elements and a 132-byte indexer key per layer, the same
    on every GPU of the group; the line is the MLA pool's one size."""
    a = arch("zai-org--GLM-5")
    for tp in (1, 8):
        assert pools.kv_cell_bytes(a, ServingConfig(tp_size=tp)) == 78 * (576 * 2 + 128 + 4)
        assert pools.kv_cell_bytes(a, ServingConfig(tp_size=tp, kv_cache_dtype="fp8_e4m3")) == 78 * (576 + 132)
    (line,) = pools.size_pools(a, ServingConfig(tp_size=8), 100 * GB, 202752).log_lines()
    tokens, size = _logged([line])["mla"]
    assert tokens == 100 * GB // (78 * 1284)
    assert size == pytest.approx(100, abs=0.01)


def test_state_slots_that_leave_no_kv_fail_as_the_release_does():
    """``--max-mamba-cache-size`` beyond the memory leaves the KV pool nothing: "Not enough memory"."""
    sc = with_arch("Qwen--Qwen3-Next-80B-A3B-Instruct")
    model = CostModel(sc, ServingConfig(tp_size=8, max_mamba_cache_size=10**6))
    with pytest.raises(NotEnoughMemory, match="Not enough memory"):
        plan_memory(model)
    plan = plan_memory(CostModel(sc, ServingConfig(tp_size=8, max_mamba_cache_size=800)))
    assert plan.max_mamba_cache_size == 800 and plan.max_total_num_tokens > 0
    assert "state pool" in plan.summary()


# --- step costs by kind ------------------------------------------------------------------------------------------------


def _terms(name: str, batch: int, context: int, **flags) -> dict[str, float]:
    model = CostModel(with_arch(name), ServingConfig(tp_size=8, **flags))
    return model.decode_terms(batch, batch * context, model.tokens_per_verify())


def test_a_sliding_window_layers_decode_read_stops_growing_past_the_window():
    """GPT-OSS: 18 full layers read every key, 18 sliding layers at most their 128. Below the window the read
    grows with all 36 layers; past it with the 18 full layers only."""
    bw = CostModel(load(), ServingConfig(tp_size=8)).bw
    per_key = 1 * 2 * 64 * 2  # K and V of one KV head per GPU, head_dim 64, bf16

    def kv(context):
        return _terms("openai--gpt-oss-120b", 4, context)["kv_reads"] * bw

    assert kv(100) - kv(50) == pytest.approx(4 * 36 * 50 * per_key)
    assert kv(5000) - kv(1000) == pytest.approx(4 * 18 * 4000 * per_key)
    assert kv(1000) == pytest.approx(4 * (18 * 1000 + 18 * 128) * per_key)
    assert _terms("openai--gpt-oss-120b", 4, 5000)["state_reads"] == 0.0


def test_the_recurrent_state_is_read_and_written_every_decode_step():
    """Qwen3-Next: each of the 36 linear layers reads and writes one request's state (conv + SSM on this GPU) every
    step, whatever the context; a verify step of 4 draft tokens writes 4 intermediate states and copies the
    accepted one back (7 states). Only the 12 full-attention layers read KV."""
    bw = CostModel(load(), ServingConfig(tp_size=8)).bw
    state = (8192 // 8 * 3 * 2) + (32 // 8 * 128 * 128 * 4)  # conv (bf16) + SSM (fp32) per layer per GPU
    for context in (1_000, 100_000):
        t = _terms("Qwen--Qwen3-Next-80B-A3B-Instruct", 16, context)
        assert t["state_reads"] * bw == pytest.approx(16 * 2 * 36 * state)
        assert t["kv_reads"] * bw == pytest.approx(16 * 12 * context * 1 * 2 * 256 * 2)
    spec = _terms("Qwen--Qwen3-Next-80B-A3B-Instruct", 16, 1_000, speculative_algorithm="EAGLE",
                  speculative_num_steps=3, speculative_num_draft_tokens=4, max_running_requests=48)  # fmt: skip
    assert spec["state_reads"] * bw == pytest.approx(16 * 7 * 36 * state)
    # the state is part of the memory the step waits for
    model = CostModel(with_arch("Qwen--Qwen3-Next-80B-A3B-Instruct"), ServingConfig(tp_size=8))
    t = model.decode_terms(256, 256 * 1000)
    assert model.decode(256, 256 * 1000).decode == max(t["weight_reads"] + t["kv_reads"] + t["state_reads"],
                                                       t["compute"])  # fmt: skip


def test_dsa_reads_its_capped_keys_and_every_indexer_key():
    """GLM-5: past 2048 keys (``index_topk``) the latent read stops growing; the indexer still reads every
    earlier token's 132-byte key in each of the 78 layers."""
    bw = CostModel(load(), ServingConfig(tp_size=8)).bw

    def kv(context):
        return _terms("zai-org--GLM-5", 2, context)["kv_reads"] * bw

    assert kv(6000) - kv(3000) == pytest.approx(2 * 78 * 3000 * 132)
    assert kv(1000) == pytest.approx(2 * 78 * 1000 * (576 * 2 + 132))


def _dense_rate(model: CostModel, keys_per_query: float) -> float:
    """One GPU's FLOP rate for dense attention over ``keys_per_query`` keys (its kernel class, below its peak over
    few keys: ``cost_model.ATTENTION_HALF_KEYS``)."""
    return model.g * model.dense_attn_flops * keys_per_query / (keys_per_query + ATTENTION_HALF_KEYS)


def test_prefill_charges_the_linear_scan_per_token_and_full_attention_per_key():
    """Qwen3-Next prefill of N new tokens: 36 linear layers x N x the chunked scan's FLOPs (32 value heads,
    Dk = Dv = 128, chunks of 64, and the 4-tap convolution over 8192 channels), plus 12 GQA layers x N x N/2 keys
    x 2 x 16 heads x 2 x 256, each at its kernel class's rate."""
    model = CostModel(with_arch("Qwen--Qwen3-Next-80B-A3B-Instruct"), ServingConfig(tp_size=8))
    scan = 32 * (6 * 64 * 128 + 4 * 64 * 128 + 6 * 128 * 128) + 2 * 8192 * 4
    per_key = 2 * 16 * 2 * 256
    for n in (1000, 8000):
        want = 36 * n * scan / (model.g * model.linear_attn_flops) + 12 * n * (n / 2) * per_key / _dense_rate(model, n / 2)
        assert model.prefill(n, [(0, n)]).prefill_attention == pytest.approx(want)
    # a prefix: the scan continues from the stored state (new tokens only), attention reads the prefix too
    want = 36 * 1000 * scan / (model.g * model.linear_attn_flops) + 12 * 1000 * 7500 * per_key / _dense_rate(model, 7500)
    assert model.prefill(1000, [(7000, 1000)]).prefill_attention == pytest.approx(want)


def test_a_sliding_window_prefill_attends_at_most_the_window():
    model = CostModel(with_arch("openai--gpt-oss-120b"), ServingConfig(tp_size=8))
    per_key = 2 * 64 * 2 * 64  # 64 heads, head_dim 64, QK and PV
    keys = 18 * 4000 * 12_000 + 18 * 4000 * 128
    got = model.prefill(4000, [(10_000, 4000)]).prefill_attention
    assert got == pytest.approx(keys * per_key / _dense_rate(model, keys / 36 / 4000))


def test_dense_mla_prefill_runs_in_mha_form_and_decode_absorbed():
    """DeepSeek-R1 (dense MLA, 128 heads): an extend batch costs ``2 H (qk_nope + qk_rope + v)`` = 81,920 FLOPs
    per key (SGLang's aiter backend runs extends in MHA form), 3.4x less than the absorbed form's ``2 H (2
    kv_lora_rank + qk_rope)`` = 278,528 a decode step pays per key; a cached prefix is up-projected once per
    extend (``2 kv_lora_rank H (qk_nope + v)`` per key). GLM-5's sparse MLA stays absorbed in both phases."""
    dense = next(g for g in attention.layer_groups(arch("deepseek-ai--DeepSeek-R1"), ServingConfig(tp_size=8), 1.0))
    assert (dense.prefill_flops_per_key, dense.flops_per_key) == (81_920, 278_528)
    assert dense.flops_per_key / dense.prefill_flops_per_key == pytest.approx(3.4)
    assert dense.prefix_flops_per_key == 2 * 512 * 128 * 256 and not dense.sparse
    sparse = next(g for g in attention.layer_groups(arch("zai-org--GLM-5"), ServingConfig(tp_size=8), 1.0))
    assert sparse.sparse and sparse.prefill_flops_per_key == sparse.flops_per_key and sparse.prefix_flops_per_key == 0
    model = CostModel(with_arch("deepseek-ai--DeepSeek-R1"), ServingConfig(tp_size=8))
    n = 8192
    want = 61 * n * (n / 2) * 81_920 / _dense_rate(model, n / 2)
    assert model.prefill(n, [(0, n)]).prefill_attention == pytest.approx(want)
    with_prefix = model.prefill(1000, [(7000, 1000)]).prefill_attention
    up = 61 * 7000 * dense.prefix_flops_per_key
    assert with_prefix == pytest.approx((61 * 1000 * 7500 * 81_920 + up) / _dense_rate(model, 7500))


def test_layer_groups_follow_the_configs_layers():
    groups = attention.layer_groups(arch("Qwen--Qwen3.5-397B-A17B"), ServingConfig(tp_size=8), 2.0)
    assert sorted((g.attention.name, g.count) for g in groups) == [("gqa", 15), ("linear", 45)]
    assert {g.attention.name: g.key_cap for g in attention.layer_groups(arch("openai--gpt-oss-20b"),
                                                                         ServingConfig(), 2.0)} == {
        "gqa+swa+sinks": 128, "gqa+sinks": math.inf}  # fmt: skip
    # Qwen3.5's config says its SSM state is float32; the flag overrides it
    a = arch("Qwen--Qwen3.5-397B-A17B").layers[0].attention
    assert a.ssm_dtype == "float32"
    assert pools.linear_state(a, 8, pools.ssm_dtype(a, ServingConfig(mamba_ssm_dtype="bfloat16"))).ssm_bytes * 2 == (
        pools.linear_state(a, 8).ssm_bytes)
