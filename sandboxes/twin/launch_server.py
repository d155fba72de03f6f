"""``python -m sandboxes.twin.launch_server``: the twin's stand-in for ``python3 -m sglang.launch_server``.

It accepts SGLang's flags, prints SGLang-like start-up logs and then either serves or crashes, for the
mechanical reasons the real engine would, given what is in the workspace files at that moment:

1. weight loading asks the workspace's own Quark exclude matcher which modules stay unquantized and compares
   every parameter of the checkpoint index with what the engine built, by running the workspace's own model class
   and its ``load_weights`` (``engine/loading``);
2. memory: weights, KV pool, activations and graphs against the GPU (``memory.py``);
3. JIT kernels switched on by the flags are preprocessed by the real ``cpp`` (``jit.py``);
4. the MoE kernel selection is looked up in the CSV ``AITER_CONFIG_FMOE`` points to, with the workspace's
   reader; a shape without an entry runs on the slow fallback path.

Once up, every generation request is scheduled with the others on the engine's continuous batching
(``engine/live_scheduler.py``), so any client measures a load-aware server. Simulated time is compressed by
``TWIN_TIME_SCALE`` (wall seconds per simulated second, default 0.002).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .engine import faults, jit, memory, messages, moe_csv, server_args, tracebacks
from .engine.http_api import ServerState, make_server
from .engine.live_scheduler import LiveScheduler
from .engine.loading import loader, weights_cache
from .engine.loading.platform import Platform
from .engine.loading.stat_memo import StatMemo
from .perf.cost_model import CostModel, scored_draft_tokens, single_stream_tpot
from .perf.serving_config import ServingConfig, with_engine_environment
from .scenario import Scenario, ScenarioError, load

if TYPE_CHECKING:
    from .engine import serving_faults

READY_LINE = messages.READY
SIMULATED_NOTE = "dayzero digital twin (simulated engine, no GPU used)"
BANNER = ("dayzero digital twin of a {hardware} node: SIMULATED SGLang ROCm engine (no GPU is used; timings come "
          "from a model)")
DEFAULT_TIME_SCALE = 0.002

log = logging.getLogger("sglang.twin")
aiter_log = logging.getLogger("aiter")  # aiter logs through its own handler: "[aiter] <message>"


class LaunchError(RuntimeError):
    """Start-up failed; ``log`` is what SGLang would have printed (a traceback or an error message)."""

    def __init__(self, message: str, log_text: str = ""):
        super().__init__(message)
        self.log_text = log_text


class SchedulerError(LaunchError):
    """A scheduler process failed while starting: SGLang logs its traceback as one error message."""


class WarmupCrash(SchedulerError):
    """The scheduler failed on the server's warm-up request, after the HTTP server came up."""


@dataclass
class Workspace:
    model_dir: Path
    sglang_root: Path
    scenario: Scenario
    model_config: dict


def time_scale(variable: str = "TWIN_TIME_SCALE", default: float = DEFAULT_TIME_SCALE) -> float:
    try:
        return max(float(os.environ.get(variable, default)), 0.0)
    except ValueError:
        return default


def startup_time_scale() -> float:
    """Wall seconds per simulated second of the start-up (``TWIN_STARTUP_TIME_SCALE``, default the serving's
    ``TWIN_TIME_SCALE``): a live comparison serves at a scale the host can follow and need not start that slowly."""
    return time_scale("TWIN_STARTUP_TIME_SCALE", time_scale())


def find_workspace(args) -> Workspace:
    model_dir = Path(args.model_path)
    if not (model_dir / "config.json").exists():
        raise LaunchError(
            f"OSError: {model_dir} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{args.model_path}/tree/main' for available files."
        )
    root = Path(args.sglang_root) if args.sglang_root else model_dir.parent / "sglang"
    scenario_file = os.environ.get("TWIN_SCENARIO") or model_dir.parent / ".twin" / "scenario.yaml"
    try:
        scenario = load(scenario_file)
    except ScenarioError as exc:
        raise LaunchError(f"twin scenario: {exc}") from None
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise LaunchError(f"json.decoder.JSONDecodeError: {exc} (in {model_dir / 'config.json'})") from None
    return Workspace(model_dir=model_dir, sglang_root=root, scenario=scenario, model_config=config)


def visible_gpus(scenario: Scenario) -> int:
    visible = os.environ.get("HIP_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return len([d for d in visible.split(",") if d.strip()])
    return scenario.hardware.num_gpus


def load_workspace_module(root: Path, rel: str, name: str) -> ModuleType:
    path = root / rel
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.exists():
        raise LaunchError(f"ModuleNotFoundError: No module named '{rel[:-3].replace('/', '.')}'")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def moe_selection(ws: Workspace, scale: float) -> bool:
    """Look the model's MoE shape up in the tuned CSV the environment names; log aiter's lines. A model without
    routed experts runs no fused-MoE kernel: nothing to look up (True: no untuned path)."""
    sc = ws.scenario
    if sc.model.moe is None:
        return True
    aiter_root = ws.model_dir.parent / "aiter"  # the image's aiter tree (workspace aiter/)
    csv_path = os.environ.get("AITER_CONFIG_FMOE") or str(aiter_root / sc.engine.default_moe_config)
    try:
        reader = load_workspace_module(aiter_root, sc.engine.moe_config_reader, "twin_ws_moe_reader")
        rows = reader.load_tuned_fmoe(csv_path) if Path(csv_path).exists() else []
    except LaunchError:
        raise
    except Exception as exc:  # a broken reader or CSV is the engine's crash, with its traceback
        raise LaunchError(f"{type(exc).__name__}: {exc} (reading {csv_path})") from None
    m = sc.model
    dtype = sc.quantization.weight_format
    # aiter's fused_moe key as the image's aiter (cu_num first, before aiter keyed by gfx in June 2026) logs it,
    # through aiter's own logger ("[aiter] " + message, no SGLang prefix); the activation is a pybind11 enum
    key = (
        f"({moe_csv.cu_count(sc.hardware.gfx_arch)}, {{token}}, {m.hidden_size}, {m.moe.intermediate_size}, {m.moe.num_experts}, {m.moe.top_k}, "
        f"<ActivationType.Silu: 0>, 'torch.bfloat16', '{moe_csv.dtype_code(dtype)}', "
        f"'{moe_csv.dtype_code(dtype)}', '{moe_csv.quant_type(dtype)}', True, False)"
    )
    tuned = True
    for token in (1, 64, 1024, 16384):
        row = reader.lookup_tuned_fmoe(
            rows, token=token, model_dim=m.hidden_size, inter_dim=m.moe.intermediate_size,
            expert=m.moe.num_experts, topk=m.moe.top_k, q_dtype_w=moe_csv.dtype_code(dtype),
        )
        if row is None:
            tuned = False
            aiter_log.info(f"[fused_moe] using 2stage default for {key.format(token=token)} ")
        else:
            tag = f"(kernelName1='{row.get('kernelName1')}', kernelName2='{row.get('kernelName2')}')"
            aiter_log.info(f"[fused_moe] using 2stage {tag} for {key.format(token=token)} ")
    return tuned


def resolve_server_args(args, ws: Workspace) -> server_args.ModelInfo:
    """``ServerArgs.__post_init__``: resolve the ``None`` defaults for this node (the scenario's GPUs) and this
    model (its ``config.json``), logging the release's lines. Raises ``server_args.InvalidServerArgs``."""
    model = server_args.ModelInfo.from_config(ws.model_config, args.context_length)
    platform = server_args.Platform.from_hardware(ws.scenario.hardware)
    for level, message in server_args.resolve(args, model, platform):
        getattr(log, level)(message)
    return model


def model_config_fields(sglang_root: Path) -> frozenset[str]:
    """The ServerArgs fields the release's ``ModelConfig.from_server_args`` reads (``server_args.<field>`` in
    the workspace's ``configs/model_config.py``); empty when the file cannot be read."""
    from .engine.loading.pure_code import PureCodeError, parse

    try:
        tree = parse(sglang_root / "python/sglang/srt/configs/model_config.py")
    except PureCodeError:
        return frozenset()
    import ast

    fn = next((f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "ModelConfig" for f in c.body
               if isinstance(f, ast.FunctionDef) and f.name == "from_server_args"), None)  # fmt: skip
    return frozenset(n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                     and n.value.id == "server_args") if fn else frozenset()  # fmt: skip


def release_model_checks(args, ws: Workspace, defaults: Mapping[str, Any] | None = None) -> None:
    """What ``ServerArgs.__post_init__`` checks through ``get_model_config()`` (its first step the twin models,
    ``_handle_piecewise_cuda_graph``, makes the ``ModelConfig``): the release's own ``ModelConfig``, run as
    written by the executor on this checkpoint with these arguments, so that its checks refuse what the release
    refuses, with its message and exception type (``--quantization fp8`` on an MXFP4 checkpoint:
    ``_verify_quantization``'s ``ValueError``). It costs about a second the first time in a process, so it runs
    when the command line sets a field ``ModelConfig.from_server_args`` reads; with all of those at their
    defaults the same ModelConfig is made, and checked, when the scheduler loads the weights. The outcome is remembered (``loading.model_checks``)."""
    from .engine.loading import model_checks
    from .engine.loading.platform import Platform as Node

    read = model_config_fields(ws.sglang_root)
    given = {k: v for k, v in vars(args).items() if k in read and k != "model_path"}
    if defaults is not None and all(defaults.get(k) == v for k, v in given.items()):
        return
    hw = ws.scenario.hardware
    node = Node(gfx_arch=hw.gfx_arch, memory_gb=hw.memory_gb, device_name=f"AMD Instinct {hw.name}",
                server_args=dict(vars(args)), sglang_root=ws.sglang_root)  # fmt: skip
    model_checks.check(vars(args), read, node, ws.sglang_root, ws.model_dir, lambda level, line: getattr(log, level)(line))


def modelled_args(sc: Scenario) -> frozenset[str]:
    """The fields the twin reads for this scenario: ``server_args.MODELLED_ARGS`` and the flags its JIT kernels
    and injected worker faults are triggered by."""
    flags = {k.when.flag for k in sc.engine.jit_kernels}
    flags |= {wf.when.flag for wf in sc.defects.worker_faults if wf.when is not None}
    return server_args.MODELLED_ARGS | flags


def _shown(flag: str, value: Any) -> str:
    return flag if value is True else f"{flag} {value}"


def serving_config(args, ws: Workspace, moe_tuned: bool) -> ServingConfig:
    return config_from_args(args, ws.scenario.quantization.weight_format, ws.model_config, moe_tuned)


def config_from_args(args, weight_format: str, model_config: Mapping[str, Any], moe_tuned: bool,
                     environ: Mapping[str, str] = os.environ) -> ServingConfig:  # fmt: skip
    """What the engine serves with these resolved server arguments, for a checkpoint of ``weight_format`` whose
    config.json is ``model_config`` (``environ``: the engine's environment, which sets what SGLang reads from it:
    ``perf.serving_config.with_engine_environment``)."""
    kv_cache_dtype = "bf16" if args.kv_cache_dtype == "bfloat16" else args.kv_cache_dtype  # the same cache
    context_len = args.context_length or model_config.get("max_position_embeddings", 131072)
    return with_engine_environment(ServingConfig(
        tp_size=args.tp_size, dp_size=args.dp_size, enable_dp_attention=args.enable_dp_attention,
        weight_format=weight_format, kv_cache_dtype=kv_cache_dtype,
        attention_backend=args.attention_backend, moe_runner_backend=args.moe_runner_backend,
        moe_tuned=moe_tuned, speculative_algorithm=args.speculative_algorithm,
        speculative_num_steps=args.speculative_num_steps or 0,
        speculative_eagle_topk=args.speculative_eagle_topk or 1,
        speculative_num_draft_tokens=args.speculative_num_draft_tokens or 0,
        enable_aiter_allreduce_fusion=args.enable_aiter_allreduce_fusion and not args.enable_dp_attention,
        chunked_prefill_size=args.chunked_prefill_size, max_running_requests=args.max_running_requests,
        cuda_graph_max_bs=args.cuda_graph_max_bs, disable_cuda_graph=args.disable_cuda_graph,
        disable_radix_cache=args.disable_radix_cache, page_size=args.page_size,
        mem_fraction_static=args.mem_fraction_static, enable_mixed_chunk=args.enable_mixed_chunk,
        disable_overlap_schedule=args.disable_overlap_schedule,
        context_length=context_len, schedule_conservativeness=args.schedule_conservativeness,
        disable_custom_all_reduce=args.disable_custom_all_reduce,
        quick_reduce_quantization=environ.get("ROCM_QUICK_REDUCE_QUANTIZATION", "NONE"),
        watchdog_timeout=args.watchdog_timeout, dist_timeout=args.dist_timeout,
    ), environ)  # fmt: skip


# server arguments that cannot change what the model is built from or how it loads (where it listens, logs)
_NOT_FOR_LOADING = ("host", "port", "model_path", "sglang_root", "served_model_name", "log_level", "api_key")


def load_weights(ws: Workspace, args) -> loader.WeightLoadReport:
    """The checkpoint loaded into the workspace's engine, or the outcome of the last identical load (nothing it
    reads changed since: ``weights_cache``)."""
    hw = ws.scenario.hardware
    server_args_used = {k: v for k, v in sorted(vars(args).items()) if k not in _NOT_FOR_LOADING}
    attn_tp = args.tp_size // args.dp_size if args.enable_dp_attention else args.tp_size
    with_draft = bool(args.speculative_algorithm) and args.speculative_algorithm != "NGRAM"  # NGRAM has no model
    draft_path = getattr(args, "speculative_draft_model_path", None)
    draft_dir = Path(draft_path) if with_draft and draft_path else None
    if draft_dir is not None and draft_dir.resolve() == ws.model_dir.resolve():
        draft_dir = None  # the model drafts for itself (its MTP layer)
    inputs = {"with_draft": with_draft, "tp_size": args.tp_size, "attn_tp_size": attn_tp, "dp_size": args.dp_size,
              "gfx_arch": hw.gfx_arch, "memory_gb": hw.memory_gb, "eagle3": args.speculative_algorithm == "EAGLE3",
              "separate_draft": draft_dir is not None}  # fmt: skip  (its folder is in the key's scope below)
    twin_dir = ws.model_dir.parent / ".twin"
    scenario_file = Path(os.environ.get("TWIN_SCENARIO") or twin_dir / "scenario.yaml")
    scenarios = list(dict.fromkeys([scenario_file, twin_dir / "scenario.yaml"]))
    memo = StatMemo(twin_dir / "stat-memo.json" if twin_dir.is_dir() else None)  # what an unchanged workspace holds
    key = weights_cache.cache_key(inputs, [ws.model_dir, ws.sglang_root, *([draft_dir] if draft_dir else [])], scenarios,
                                  memo)  # fmt: skip
    cache_dir = twin_dir / "weights-cache" if twin_dir.is_dir() else None

    node = Platform(gfx_arch=hw.gfx_arch, memory_gb=hw.memory_gb, device_name=f"AMD Instinct {hw.name}",
                    dp_size=args.dp_size, enable_dp_attention=args.enable_dp_attention,
                    server_args=server_args_used)  # fmt: skip

    def load() -> loader.WeightLoadReport:
        return loader.load_weights(ws.model_dir, ws.sglang_root, with_draft=with_draft, tp_size=args.tp_size,
                                   attn_tp_size=attn_tp, platform=node, draft_dir=draft_dir,
                                   eagle3=inputs["eagle3"])  # fmt: skip

    # the server arguments the model code reads decide an entry; the others (the KV cache's dtype, the benchmark's
    # limits) leave the load as it was
    try:
        return weights_cache.remembered(cache_dir, key, load, args=server_args_used, args_read=lambda: node.args_read,
                                        memo=memo)  # fmt: skip
    finally:
        memo.save()


def start(args, command_line: server_args.CommandLine | None = None) -> tuple[ServerState, float]:
    """Everything before serving. Returns the HTTP state and the simulated start-up seconds. ``command_line``:
    what the arguments were parsed from (its flags the twin does not model are reported)."""
    scale = time_scale()
    ws = find_workspace(args)
    sc = ws.scenario
    log.info(BANNER.format(hardware=sc.hardware.name))
    log.info(f"scenario={sc.name} ({sc.description}); engine image {sc.engine.image} (simulated)")
    unmodelled = command_line.unmodelled(modelled_args(sc)) if command_line is not None else {}
    release_model_checks(args, ws, command_line.defaults if command_line is not None else None)
    model_info = resolve_server_args(args, ws)
    log.info(f"server_args=ServerArgs({', '.join(f'{k}={v!r}' for k, v in vars(args).items())})")
    if unmodelled:
        log.warning(f"{SIMULATED_NOTE}: these flags are accepted, as SGLang {sc.engine.version} accepts them, but "
                    f"have no simulated effect in the twin: {', '.join(_shown(f, v) for f, v in unmodelled.items())}")  # fmt: skip
    server_args.check_platform(args, visible_gpus(sc))
    log.info("Init torch distributed begin.")
    if args.tp_size > 1:  # the TP group's all-reduce path (GroupCoordinator.__init__, dispatch_custom_allreduce)
        log.info(messages.AR_NCCL if args.disable_custom_all_reduce else messages.AR_AITER)
    log.info("Init torch distributed ends. elapsed=1.20 s, mem usage=0.62 GB")
    avail = memory.free_before_weights_gb(sc.hardware.memory_gb)
    log.info(f"Load weight begin. avail mem={avail:.2f} GB")
    try:
        report = load_weights(ws, args)
    except loader.WeightLoadError as exc:
        raise SchedulerError(str(exc), exc.log) from None
    for line in report.log_lines:
        log.warning(line)
    moe_tuned = moe_selection(ws, scale)
    cfg = serving_config(args, ws, moe_tuned)
    if report.draft_class and report.draft_class == report.target_class:
        cfg = dataclasses.replace(cfg, draft_is_target=True)
    if report.draft_layers:
        cfg = dataclasses.replace(cfg, draft_weight_bytes=report.draft_bytes, draft_layers=report.draft_layers)
    # a separate draft checkpoint is priced by its bytes (draft_weight_bytes); an MTP draft by its layer's
    drafted = {} if report.draft_layers else dict(report.draft_bytes_by_category)
    model = CostModel(sc, cfg, report.target_bytes_by_category, drafted)
    try:
        plan = memory.plan_memory(model, report.draft_bytes)
    except memory.NotEnoughMemory as exc:
        chain = tracebacks.SCHEDULER_START + tracebacks.TARGET_WORKER + tracebacks.MEMORY_POOL
        raise SchedulerError(f"RuntimeError: {exc}",
                             tracebacks.render(ws.sglang_root, chain, [f"RuntimeError: {exc}"])) from None
    except memory.OutOfMemory as exc:  # weights, activations or graph buffers do not fit the GPU
        chain = tracebacks.SCHEDULER_START + tracebacks.TARGET_WORKER + tracebacks.GRAPH_CAPTURE
        raise SchedulerError(f"torch.OutOfMemoryError: {exc}",
                             tracebacks.render(ws.sglang_root, chain, [f"torch.OutOfMemoryError: {exc}"])) from None
    weights_gb = plan.weight_bytes_per_gpu / memory.GIB
    load_s = weights_gb * sc.startup.per_gb_weights_seconds
    quant = ws.model_config.get("quantization_config") or {}
    quant_str = f"quant={quant.get('quant_method', 'quantized')}, " if quant else ""  # get_quantization_config_log_str
    log.info(
        f"Load weight end. elapsed={load_s:.2f} s, type={sc.model.architecture}, {quant_str}"
        f"avail mem={avail - weights_gb:.2f} GB, mem usage={weights_gb:.2f} GB."
    )
    log.info(f"Using KV cache dtype: {'torch.bfloat16' if cfg.kv_cache_dtype in ('auto', 'bf16') else 'torch.float8_e4m3fn'}")
    for line in plan.pools.log_lines():  # the pools by layer kind, as the release prints them (engine/pools.py)
        log.info(line)
    try:
        kernels = jit.compile_jit_kernels(sc, ws.sglang_root, vars(args), log.info)
    except jit.JitCompileError as exc:
        raise SchedulerError(exc.summary, exc.log) from None
    graph_bs = [] if cfg.disable_cuda_graph else [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if b <= cfg.cuda_graph_max_bs]
    graph_s = len(graph_bs) * sc.startup.cuda_graph_seconds_per_bs * (1 + (cfg.speculative_num_steps or 0) / 2)
    if graph_bs:
        log.info(f"Capture cuda graph begin. This can take up to several minutes. avail mem={plan.free_bytes / memory.GIB + plan.graph_bytes / memory.GIB:.2f} GB")
        log.info(f"Capture cuda graph bs {graph_bs}")
        log.info(f"Capture cuda graph end. Time elapsed: {graph_s:.2f} s. mem usage={plan.graph_bytes / memory.GIB:.2f} GB. avail mem={plan.free_bytes / memory.GIB:.2f} GB.")
    warmup_crash = check_draft_tree(ws, cfg, plan.free_bytes / memory.GIB)
    context_len = model_info.context_len
    # per DP rank, as SGLang's scheduler reports it (ServingConfig.max_running_per_rank)
    max_running = cfg.max_running_per_rank(plan.max_total_num_tokens, context_len, plan.max_mamba_cache_size)
    if max_running <= 0:
        raise LaunchError("AssertionError: max_running_request is zero", "AssertionError: max_running_request is zero")
    log.info(
        f"max_total_num_tokens={plan.max_total_num_tokens}, chunked_prefill_size={cfg.chunked_prefill_size}, "
        f"max_prefill_tokens={args.max_prefill_tokens}, max_running_requests={max_running}, "
        f"context_len={context_len}, available_gpu_mem={plan.free_bytes / memory.GIB:.2f} GB"
    )
    startup_s = sc.startup.base_seconds + load_s + graph_s
    time.sleep(startup_s * startup_time_scale())
    accuracy = sc.accuracy.get(sc.quantization.weight_format, 0.9)
    if cfg.kv_cache_dtype.startswith("fp8"):
        accuracy -= sc.accuracy.get("kv_fp8_penalty", 0.0)
    twin = {
        "simulated": True,
        "scenario": sc.name,
        "hardware": f"{sc.hardware.num_gpus}x {sc.hardware.name}",
        "scenario_path": str(Path(sc.path).resolve()),
        "quantization": sc.quantization.weight_format,
        "serving_config": cfg.to_dict(),
        "max_total_num_tokens": plan.max_total_num_tokens,
        "max_mamba_cache_size": plan.max_mamba_cache_size,
        "weight_bytes": dict(report.target_bytes_by_category),
        "draft_weight_bytes": drafted,  # the MTP layer the draft class loaded, by category ({}: none)
        "model_class": report.target_class,  # file:Class the release built: a forward pass's frames run its code
        "draft_model_class": report.draft_class,  # file:Class of the draft the release built ("" without one)
        "moe_kernels": "tuned" if moe_tuned else "fallback",
        "startup_seconds_simulated": round(startup_s, 1),
        "time_scale": scale,
        "version": sc.engine.version,
        "jit_kernels": kernels,
        # flags set on the command line that nothing the twin simulates reads: accepted, without effect
        "unmodelled_flags": {flag: _jsonable(value) for flag, value in unmodelled.items()},
        "server_args_source": str(command_line.source) if command_line is not None else None,
        "pid": os.getpid(),  # where an injected fault (faults.py) finds the server to kill
        # one GPU's memory as the plan left it: what a step under load may use (engine/serving_faults.py)
        "memory": {"gpu_bytes": plan.gpu_bytes, "static_bytes": plan.weight_bytes_per_gpu + plan.kv_pool_bytes_per_gpu,
                   "graph_bytes": plan.graph_bytes, "activation_bytes": plan.activation_bytes,
                   "free_bytes": plan.free_bytes, "activation_per_token": plan.activation_per_token},
    }
    state = ServerState(
        model_path=args.model_path,
        served_model_name=args.served_model_name or sc.model.served_name,
        server_args=vars(args) | {"max_total_num_tokens": plan.max_total_num_tokens},
        internal_states={
            "avg_spec_accept_length": round(model.accept_length(), 3) if cfg.speculative else None,
            "memory_usage": {"weight": round(weights_gb, 2), "kvcache": round(plan.kv_pool_bytes_per_gpu / memory.GIB, 2),
                             "token_capacity": plan.max_total_num_tokens, "graph": round(plan.graph_bytes / memory.GIB, 2)},
            "effective_max_running_requests_per_dp": max_running,
        },
        twin=twin,
        accuracy=max(0.0, min(1.0, accuracy)),
        tpot_s=single_stream_tpot(model, 1024),
        ttft_s=model.prefill(64, [(0, 64)]).total + model.request_latency(64),
        time_scale=scale,
        context_length=context_len,
        ready=threading.Event(),
        # every generation request is served by the engine's schedulers, in scaled wall time
        live=LiveScheduler(model, plan.max_total_num_tokens, scale, plan.max_mamba_cache_size),
    )  # fmt: skip
    if warmup_crash:
        raise WarmupCrash(messages.TOPK_OUT_OF_RANGE, warmup_crash)
    return state, startup_s


def check_draft_tree(ws: Workspace, cfg: ServingConfig, avail_gb: float) -> str:
    """An EAGLE draft tree that verifies more tokens than its draft scores (``scored_draft_tokens``) makes
    ``torch.topk`` fail in ``organize_draft_results`` the first time the draft runs: during the draft's CUDA-graph
    capture (raised here), or, when the draft runs eagerly (one draft step, or graphs disabled), at the first
    decode, the server's warm-up request (returned: the traceback the warm-up ends in)."""
    if not cfg.speculative or cfg.speculative_eagle_topk <= 1:
        return ""
    if cfg.speculative_num_draft_tokens - 1 <= scored_draft_tokens(cfg.speculative_num_steps, cfg.speculative_eagle_topk):
        return ""
    if cfg.disable_cuda_graph or cfg.speculative_num_steps <= 1:
        return tracebacks.render(ws.sglang_root, tracebacks.DRAFT_EAGER, [messages.TOPK_OUT_OF_RANGE])
    log.info(messages.DRAFT_GRAPH_BEGIN.format(m=avail_gb))
    error = messages.TOPK_OUT_OF_RANGE.removeprefix("RuntimeError: ")
    failed = messages.CAPTURE_FAILED.format(error=error, advice=messages.CAPTURE_FAILED_ADVICE).rstrip("\n")
    text = "\n".join([
        tracebacks.render(ws.sglang_root, tracebacks.DRAFT_CAPTURE, [messages.TOPK_OUT_OF_RANGE]),
        tracebacks.CHAINED,
        tracebacks.render(ws.sglang_root, tracebacks.SCHEDULER_START + tracebacks.DRAFT_CAPTURE_FAILED,
                          [f"Exception: {failed}"]),
    ])  # fmt: skip
    raise SchedulerError(f"Exception: Capture cuda graph failed: {error}", text)


def _jsonable(value: Any) -> Any:
    """A flag's value as /server_info can carry it (JSON's types; anything else by its text)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


_PRINT = threading.Lock()


def print_engine_lines(lines: list[serving_faults.Printed]) -> None:
    """Print what the engine's processes print, each the way its process writes it: a scheduler's logger with its
    rank prefix (``[time DP1 TP3] ...``), the launcher's logger (``[time] ...``), or a runtime's bare stderr line."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    text = "".join(
        f"{p.text}\n" if p.who == "raw" else f"[{stamp}{p.who.removeprefix('rank:')}] {p.text}\n"
        if p.who.startswith("rank:") else f"[{stamp}] {p.text}\n" for p in lines)
    handler = logging.getLogger().handlers[0] if logging.getLogger().handlers else None
    with _PRINT:  # one write, under the log handler's lock: no access-log line lands inside a traceback
        if handler is not None:
            handler.acquire()
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        finally:
            if handler is not None:
                handler.release()


def serving_failure(state: ServerState, ws_root: Path, data: dict) -> None:
    """The benchmark's simulation reached a step this server cannot run (engine/serving_faults.py): after the time
    the engine takes to notice (scaled by TWIN_TIME_SCALE), print what it prints and go as it goes: the launcher's
    SIGQUIT handler kills the process tree (SIGKILL, itself included). A failure nothing notices leaves the server
    up but its scheduler silent."""
    from .engine import serving_faults  # only a server a benchmark breaks needs it

    fault = serving_faults.Fault.from_dict(data)
    cfg = ServingConfig.from_dict(state.twin["serving_config"])
    lines = serving_faults.render(fault, cfg, ws_root, os.getpid(), state.twin.get("model_class", ""))
    state.stalled.set()  # from now on the scheduler answers nothing
    if fault.death_after is None:
        print_engine_lines(lines)
        return
    time.sleep(max(fault.death_after, 0.0) * state.time_scale)
    print_engine_lines(lines)
    log.error(f"{SIMULATED_NOTE}: the server failed while serving ({fault.kind})")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[%(asctime)s TP0] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    aiter_handler = logging.StreamHandler(sys.stdout)
    aiter_handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))  # aiter/__init__.py's format
    aiter_log.handlers[:] = [aiter_handler]
    aiter_log.propagate = False
    aiter_log.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    for name, value in server_args.ROCM_IMAGE_ENV.items():  # the image's Dockerfile ENV: the release's code reads it
        os.environ.setdefault(name, value)
    try:
        command_line = server_args.parse_command_line(sys.argv[1:] if argv is None else argv)
    except server_args.ServerArgsError as exc:
        log.error(f"{exc.kind}: {exc}")
        return 1
    args = command_line.args
    try:
        state, startup_s = start(args, command_line)
    except SchedulerError as exc:  # scheduler.run_scheduler_process logs the traceback, the parent gets SIGQUIT
        if isinstance(exc, WarmupCrash):  # uvicorn came up; the warm-up request's decode is what failed
            print(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)", flush=True)
        log.error(messages.SCHEDULER_EXCEPTION.format(traceback=exc.log_text))
        log.error(messages.SIGQUIT)
        log.error(f"{SIMULATED_NOTE}: the launch failed")
        return 1
    except (LaunchError, server_args.ServerArgsError) as exc:
        text = getattr(exc, "log_text", "") or ""
        if text:
            print(text, flush=True)
        # ServerArgs raises ValueError (or an AssertionError, ...: InvalidServerArgs.kind) while resolving
        kind = f"{exc.kind}: " if isinstance(exc, server_args.ServerArgsError) else ""
        log.error(f"{kind}{exc}")
        log.error(f"{SIMULATED_NOTE}: the launch failed")
        return 1
    try:
        fault = faults.due("launch", state.twin["scenario_path"])
    except faults.FaultSpecError as exc:
        log.error(f"{exc} ({SIMULATED_NOTE})")
        return 1
    if fault == "port_taken":  # uvicorn's own words when another process holds the port
        print(f"ERROR:    [Errno 98] error while attempting to bind on address ('{args.host}', {args.port}): "
              "address already in use", flush=True)
        log.error(f"{faults.SIMULATED}: port_taken")
        return 1
    if fault in ("hang_before_ready", "slow_start"):
        # the handler first: whoever reads the line below may stop the server at once
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        log.info(f"{faults.SIMULATED}: {fault}")
        wait = None if fault == "hang_before_ready" else float(os.environ.get("TWIN_SLOW_START_S", "600"))
        if stopping.wait(wait):
            return 0
    root = Path(args.sglang_root) if args.sglang_root else Path(args.model_path).parent / "sglang"
    state.on_fault = lambda data: threading.Thread(target=serving_failure, args=(state, root, data), daemon=True).start()
    server = make_server(state, args.host, args.port)
    host, port = server.server_address[:2]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    # uvicorn logs through its own handler ("INFO:     ..."), the warm-up request as an access-log line
    print(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", flush=True)
    print(f'INFO:     127.0.0.1:{port + 1} - "POST /generate HTTP/1.1" 200 OK', flush=True)
    state.ready.set()
    log.info(f"{READY_LINE} (simulated start-up {startup_s:.0f} s on {state.twin['scenario']})")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    log.info(f"{SIMULATED_NOTE}: shutting down (SIGTERM).")
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
