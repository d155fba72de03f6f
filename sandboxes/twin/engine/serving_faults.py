"""Failures while serving: what makes the engine die (or hang) under load, and what it prints when it does.

The benchmark's simulation (``perf/simulator.py``) runs every scheduler step through a ``FaultWatch``. A step can
fail for three mechanical reasons, in the order a forward pass meets them:

1. a worker's kernel faults (``defects.worker_faults``): the process of one TP rank dies. A HIP memory-access fault
   aborts the process (the ROCm runtime's line, then Python's faulthandler), and SGLang's ``SubprocessWatchdog``
   in the launcher notices the dead child; a ``RuntimeError`` raised in the forward pass goes through the
   scheduler's own exception handler instead;
2. the step's all-reduce takes a path the node's image has a defect on (``defects.collective_faults``). Which path
   a step takes follows 0.5.12's dispatch on ROCm, from the flags served and the message size: aiter's fused
   all-reduce + RMSNorm (``--enable-aiter-allreduce-fusion``, messages up to 64 MiB, no DP attention), else the
   custom all-reduce (aiter's ``CustomAllreduce``, up to 64 MiB, unless ``--disable-custom-all-reduce``), else
   quick all-reduce (``ROCM_QUICK_REDUCE_QUANTIZATION``, within its size window), else RCCL. A hang is noticed by
   SGLang's scheduler watchdog (``--watchdog-timeout``) and, when the stuck collective is an RCCL call outside a
   CUDA graph (a ``ProcessGroupNCCL`` work), by PyTorch's NCCL watchdog (``--dist-timeout``, else 600 s):
   whichever fires first prints its lines and takes the server down; an error is raised by the RCCL call itself;
3. the step's transient memory does not fit (``step_memory``): the memory plan left ``free_bytes`` outside the
   static pool after the graphs and one prefill chunk's activations (``memory.plan_memory``). A step outside a CUDA
   graph (every prefill, a decode batch above ``--cuda-graph-max-bs``) allocates its activations and the logits of
   every row it returns (the gathered bf16 logits and their fp32 copy, ``LogitsProcessor._get_logits``); the
   allocator can reuse the prefill chunk's cached blocks, never the graph pool. A step that needs more dies in
   PyTorch's allocator, under the scheduler's traceback.

What the twin does not print: the scheduler watchdog's request dump and py-spy's stack dump (neither is text the
release writes), and RCCL's own WARN lines. Standard library only.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import messages, tracebacks
from .tracebacks import Frame

GIB = 1024**3
MIB = 1024**2

# --- the all-reduce path of a step, as SGLang 0.5.12 dispatches it on ROCm -----------------------------------------

ALLREDUCE_PATHS = ("aiter_allreduce_fusion", "custom_allreduce", "quick_allreduce", "rccl")
# layers/communicator.py apply_aiter_all_reduce_fusion: "total_bytes <= 8 * 1024 * 8192", "n <= 16384", tp != 6,
# no DP attention ("Aiter's should_custom_ar uses <= max_size/2 (64 MB); match that boundary.")
AITER_AR_MAX_BYTES = 8 * 1024 * 8192
FUSION_MAX_HIDDEN = 16384
FUSION_EXCLUDED_TP = 6
# device_communicators/quick_all_reduce.py: minimum sizes by (dtype, world size), in the order FP, INT8, INT6, INT4;
# bf16 inputs run the fp16 kernels unless ROCM_QUICK_REDUCE_CAST_BF16_TO_FP16=0; the maximum is 2 GiB by default
QR_LEVELS = ("FP", "INT8", "INT6", "INT4")
QR_MIN_BYTES = {
    ("fp16", 2): (1 * MIB, 2 * MIB, 2 * MIB, 1 * MIB),
    ("fp16", 4): (1 * MIB, 16 * MIB, 4 * MIB, 2 * MIB),
    ("fp16", 8): (16 * MIB, 4 * MIB, 4 * MIB, 2 * MIB),
}
QR_MAX_BYTES = 2 * GIB
QR_ARCHS = ("gfx94", "gfx95")  # qr_rocm_arch_available
ACTIVATION_BYTES = 2  # bf16 hidden states: what one token's all-reduce moves per element


def allreduce_paths(cfg: Any, hidden_size: int, tokens: int, gfx_arch: str) -> tuple[str, ...]:
    """The paths the all-reduces of a step with ``tokens`` tokens take (none for a TP group of one GPU).

    With ``--enable-aiter-allreduce-fusion`` a layer's all-reduce and the next RMSNorm run as one aiter kernel, which
    the custom all-reduce communicator provides (``GroupCoordinator.fused_allreduce_rmsnorm`` returns None without
    it); the last layer's all-reduce, and every one the fusion does not take, go the plain way: the custom all-reduce
    up to 64 MiB, else quick all-reduce within its window, else RCCL."""
    tp = int(cfg.tp_size)
    if tp <= 1 or tokens <= 0:
        return ()
    size = tokens * hidden_size * ACTIVATION_BYTES
    custom = not cfg.disable_custom_all_reduce
    paths: list[str] = []
    if (custom and cfg.enable_aiter_allreduce_fusion and not cfg.enable_dp_attention and tp != FUSION_EXCLUDED_TP
            and size <= AITER_AR_MAX_BYTES and hidden_size <= FUSION_MAX_HIDDEN):  # fmt: skip
        paths.append("aiter_allreduce_fusion")
    level = str(getattr(cfg, "quick_reduce_quantization", "NONE") or "NONE")
    qr_min = QR_MIN_BYTES.get(("fp16", tp))
    if custom and size <= AITER_AR_MAX_BYTES and size % 16 == 0:
        paths.append("custom_allreduce")
    elif (custom and level in QR_LEVELS and gfx_arch.startswith(QR_ARCHS) and qr_min
          and qr_min[QR_LEVELS.index(level)] <= size <= QR_MAX_BYTES):  # fmt: skip
        paths.append("quick_allreduce")
    else:
        paths.append("rccl")
    return tuple(paths)


def graph_step(cfg: Any, kind: str, batch: int) -> bool:
    """Whether a step replays a captured CUDA graph: decode batches up to ``--cuda-graph-max-bs`` (prefill and
    larger batches run eagerly)."""
    return kind == "decode" and not cfg.disable_cuda_graph and batch <= cfg.cuda_graph_max_bs


# --- transient memory of a step -------------------------------------------------------------------------------------

# LogitsProcessor._get_logits outside a graph: the all-gathered bf16 logits of every row, then their fp32 copy
# (``logits[:, : self.vocab_size].float()`` in _copy_logits_to_buffer), which is the allocation that fails
GATHERED_LOGITS_BYTES = 2
FP32_LOGITS_BYTES = 4
ROUND_LARGE = 2 * MIB  # the caching allocator rounds large allocations up to 2 MiB (kRoundLarge)


@dataclass(frozen=True)
class StepMemory:
    """The memory figures of one GPU a served configuration runs with (the launcher's plan, ``/server_info``)."""

    gpu_bytes: float
    static_bytes: float  # weights and the KV pool: the static fraction
    graph_bytes: float
    activation_bytes: float  # the prefill chunk's activations the plan reserved
    free_bytes: float  # what is left after them
    activation_per_token: float
    vocab_size: int

    @classmethod
    def from_twin(cls, memory: dict[str, Any], vocab_size: int) -> StepMemory:
        """From the plan a served twin publishes (``/server_info``'s ``memory``)."""
        return cls(gpu_bytes=float(memory["gpu_bytes"]), static_bytes=float(memory["static_bytes"]),
                   graph_bytes=float(memory["graph_bytes"]), activation_bytes=float(memory["activation_bytes"]),
                   free_bytes=float(memory["free_bytes"]),
                   activation_per_token=float(memory["activation_per_token"]), vocab_size=vocab_size)  # fmt: skip

    def demand(self, tokens: int, rows: int) -> tuple[float, float]:
        """(what an eager step with ``tokens`` tokens returning ``rows`` logits rows needs outside the static
        pool and the graphs, the size of its last allocation: the fp32 logits)."""
        last = math.ceil(rows * self.vocab_size * FP32_LOGITS_BYTES / ROUND_LARGE) * ROUND_LARGE
        return tokens * self.activation_per_token + rows * self.vocab_size * GATHERED_LOGITS_BYTES + last, last

    def figures(self) -> dict[str, float]:
        return {"gpu_bytes": self.gpu_bytes, "static_bytes": self.static_bytes, "graph_bytes": self.graph_bytes,
                "activation_bytes": self.activation_bytes, "free_bytes": self.free_bytes}

    def budget(self) -> float:
        """What a step may use: the free memory and the prefill chunk's cached blocks (not the graph pool)."""
        return self.free_bytes + self.activation_bytes


# --- a failure, as the simulation finds it ----------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str  # out_of_memory | collective_hang | collective_error | worker_crash
    at: float  # simulated seconds into the benchmark
    dp_rank: int
    step: str  # prefill | decode
    tokens: int
    rows: int
    batch: int  # running requests in the step
    graph: bool
    path: str | None = None  # the all-reduce path (collective faults)
    death_after: float | None = 0.0  # seconds from ``at`` until the server is gone (None: never)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


NCCL_DEFAULT_TIMEOUT_S = 600  # torch.distributed's default for NCCL process groups (10 minutes)
NCCL_DUMP_WAIT_S = 60  # the NCCL watchdog sleeps getDumpTimeout() * 4 (15 s * 4) before throwing
SUBPROCESS_POLL_S = 1.0  # SubprocessWatchdog's interval
WATCHDOG_KILL_DELAY_S = 5.0  # WatchdogRaw: "Wait for some time so that the parent process can print the error."


class FaultWatch:
    """Checks every step of the simulation against the node's defects and the memory plan."""

    def __init__(self, scenario: Any, cfg: Any, memory: StepMemory | None, server_args: dict | None = None):
        self.scenario = scenario
        self.cfg = cfg
        self.memory = memory
        self.server_args = dict(server_args or {})  # every resolved flag the server runs with (/server_info)
        self.hidden = scenario.model.hidden_size
        self.gfx = scenario.hardware.gfx_arch
        self.defects = scenario.defects
        self.eager_collectives = 0  # eager RCCL calls so far: the NCCL work sequence numbers
        self._paths: dict[int, tuple[str, ...]] = {}  # allreduce_paths per step size (the config is fixed)

    # the step's phases in the order a forward pass reaches them: kernels, all-reduces, logits
    def step(self, dp_rank: int, kind: str, tokens: int, rows: int, batch: int, at: float) -> Fault | None:
        cfg = self.cfg
        graph = graph_step(cfg, kind, batch)
        worker_faults = getattr(self.defects, "worker_faults", ())
        collective_faults = getattr(self.defects, "collective_faults", ())
        if not worker_faults and not collective_faults and self.memory is None:
            return None  # nothing can fail here (the per-step hot path of a simulation)
        base = {"at": at, "dp_rank": dp_rank, "step": kind, "tokens": tokens, "rows": rows, "batch": batch,
                "graph": graph}  # fmt: skip
        for wf in worker_faults:
            if (tokens >= wf.min_tokens and wf.rank < self.tp_per_group
                    and (wf.when is None or wf.when.fires(self._flag(wf.when.flag)))):  # fmt: skip
                return Fault(kind="worker_crash", **base, death_after=self._crash_death(wf),
                             detail={"rank": wf.rank, "error": wf.error})  # fmt: skip
        paths = self._paths.get(tokens)
        if paths is None:
            paths = self._paths[tokens] = allreduce_paths(cfg, self.hidden, tokens, self.gfx)
        eager_rccl = "rccl" in paths and not graph
        if eager_rccl:
            self.eager_collectives += 2 * self.scenario.model.num_hidden_layers
        for cf in collective_faults:
            if cf.allreduce not in paths or tokens < cf.min_tokens:
                continue
            path = cf.allreduce
            if cf.failure == "error" and path == "rccl" and not graph:
                return Fault(kind="collective_error", **base, path=path, death_after=self._nccl_error_death(),
                             detail={"seq": self.eager_collectives, "hidden": self.hidden, "noticed_by": "nccl"})  # fmt: skip
            if cf.failure == "hang":
                death, by = self._hang_death(path == "rccl" and not graph)
                return Fault(kind="collective_hang", **base, path=path, death_after=death,
                             detail={"noticed_by": by, "seq": self.eager_collectives, "hidden": self.hidden})  # fmt: skip
        if self.memory is not None and not graph:
            need, last = self.memory.demand(tokens, rows)
            if need > self.memory.budget():
                return Fault(kind="out_of_memory", **base, death_after=self._exception_death(),
                             detail={"need": need, "last": last, "budget": self.memory.budget(),
                                     "memory": self.memory.figures()})  # fmt: skip
        return None

    def _flag(self, name: str) -> Any:
        """A served flag's value, as the server resolved it (a defect's trigger names any SGLang flag)."""
        return self.server_args[name] if name in self.server_args else getattr(self.cfg, name, None)

    @property
    def tp_per_group(self) -> int:
        return int(self.cfg.tp_size)

    def _exception_death(self) -> float:
        """A scheduler's Python exception: its parent gets SIGQUIT (the launcher itself, or the DP controller, whose
        death the launcher's SubprocessWatchdog notices within a poll)."""
        return 0.0 if self.cfg.dp_size == 1 else SUBPROCESS_POLL_S

    def _nccl_error_death(self) -> float:
        """RCCL reports the error to the NCCL watchdog, which waits for the debug dump, then takes the process down
        (std::terminate); the launcher's SubprocessWatchdog notices within a poll."""
        return NCCL_DUMP_WAIT_S + SUBPROCESS_POLL_S

    def _crash_death(self, wf: Any) -> float | None:
        if wf.error != "memory_access_fault":
            return self._exception_death()
        if self.cfg.dp_size == 1:  # the launcher watches every scheduler process
            return SUBPROCESS_POLL_S
        # under a DP controller the launcher watches only the controller: the dead rank's peers wait in their next
        # collective until a watchdog fires. A replica of one GPU has no peer (under DP attention the MoE layers
        # still join every rank): nothing notices at all
        if not self.cfg.enable_dp_attention and self.cfg.tp_size <= 1:
            return None
        death, _ = self._hang_death(False)
        return death

    def _hang_death(self, eager_rccl: bool) -> tuple[float | None, str]:
        """(seconds until a stuck collective takes the server down, which watchdog notices it)."""
        wd = float(self.cfg.watchdog_timeout or 0)
        sglang = wd + WATCHDOG_KILL_DELAY_S + (0.0 if self.cfg.dp_size == 1 else SUBPROCESS_POLL_S) if wd > 0 else None
        nccl = None
        if eager_rccl:
            timeout = self.cfg.dist_timeout or NCCL_DEFAULT_TIMEOUT_S
            nccl = timeout + NCCL_DUMP_WAIT_S + SUBPROCESS_POLL_S
        if nccl is not None and (sglang is None or timeout < wd):
            return nccl, "nccl"
        if sglang is not None:
            return sglang, "scheduler"
        return None, "none"


# --- what the server prints -----------------------------------------------------------------------------------------

_SRT = "python/sglang/srt"
_SCHED = f"{_SRT}/managers/scheduler.py"
_RUNNER = f"{_SRT}/model_executor/model_runner.py"
_LOGITS = f"{_SRT}/layers/logits_processor.py"
_EAGLE = f"{_SRT}/speculative/eagle_worker.py"
# torch in the ROCm image, and the two kinds of frames it adds: a decorated function (torch.no_grad, SGLang's
# DynamicGradMode, both torch.utils._contextlib._DecoratorContextManager) and a module call (nn.Module.__call__)
TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
DECORATED = Frame(f"{TORCH}/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)", 120)
MODULE_CALL = [
    Frame(f"{TORCH}/nn/modules/module.py", "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)", 1773),
    Frame(f"{TORCH}/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)", 1784),
]


def _loop_frames(cfg: Any) -> list[Frame]:
    """The scheduler's event loop down to the TP worker's forward (0.5.12), through the EAGLE worker's verify when
    speculative decoding is on."""
    loop = "event_loop_normal" if cfg.disable_overlap_schedule else "event_loop_overlap"
    frames = [
        Frame(_SCHED, "run_scheduler_process", "scheduler.run_event_loop()", 4041),
        Frame(_SCHED, "run_event_loop", "dispatch_event_loop(self)", 1534, last=True),
        Frame(_SCHED, "dispatch_event_loop", f"scheduler.{loop}()", 3912 if cfg.disable_overlap_schedule else 3910),
        DECORATED,
        Frame(_SCHED, loop, "result = self.run_batch(batch)", 1552) if cfg.disable_overlap_schedule
        else Frame(_SCHED, loop, "batch_result = self.run_batch(batch)", 1594),
        # run_batch calls the worker in its overlap branch, or in the branch after it (the normal loop)
        Frame(_SCHED, "run_batch", "batch_result = self.model_worker.forward_batch_generation(",
              3076 if cfg.disable_overlap_schedule else 3039, last=bool(cfg.disable_overlap_schedule)),
    ]  # fmt: skip
    if cfg.speculative_algorithm:
        frames += [
            Frame(_EAGLE, "forward_batch_generation", "logits_output, verify_output, can_run_cuda_graph = self.verify(batch)",
                  496, cls="EAGLEWorker"),
            Frame(_EAGLE, "verify", "batch_result = self.target_worker.forward_batch_generation(", 960, cls="EAGLEWorker"),
        ]  # fmt: skip
    frames.append(Frame(f"{_SRT}/managers/tp_worker.py", "forward_batch_generation", "out = self.model_runner.forward(", 472))
    return frames


def _forward_frames(step: str) -> list[Frame]:
    """ModelRunner.forward down to the model's own forward."""
    call = "ret = self.forward_decode(" if step == "decode" else "ret, can_run_graph = self.forward_extend("
    inner = "forward_decode" if step == "decode" else "forward_extend"
    return [
        Frame(_RUNNER, "forward", "output = self._forward_raw(", 3323),
        Frame(_RUNNER, "_forward_raw", call, 3439 if step == "decode" else 3451),
        Frame(_RUNNER, inner, "return self.model.forward(", 3166 if step == "decode" else 3259, last=step != "decode"),
        DECORATED,
    ]


_DEEPSEEK_FORWARD = Frame(f"{_SRT}/models/deepseek_v2.py", "forward", "return self.logits_processor(", 2493,
                          cls="DeepseekV2ForCausalLM")  # fmt: skip


def model_forward(sglang_root: Path | None, model_class: str) -> Frame:
    """The frame of the served model's own forward where it computes the logits: ``model_class`` is the
    ``file:Class`` the release built (the class's forward, or that of the first base class that defines one, in
    its file or the file it imports the base from). DeepSeek V2's when none can be read."""
    import ast  # only here: a benchmark's process imports this module and rarely renders a fault

    file, _, name = model_class.partition(":")
    seen: set[tuple[str, str]] = set()
    while sglang_root and file and name and (file, name) not in seen:
        seen.add((file, name))
        try:
            text = (Path(sglang_root) / file).read_text()
            tree = ast.parse(text)
        except (OSError, SyntaxError, ValueError):
            break
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if cls is None:
            break
        forward = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
        if forward is not None:
            stmts = [n for n in ast.walk(forward) if isinstance(n, ast.Return | ast.Assign)
                     and "self.logits_processor(" in (ast.get_source_segment(text, n) or "")]  # fmt: skip
            if not stmts:
                break
            first = (ast.get_source_segment(text, stmts[0]) or "").splitlines()[0].strip()
            return Frame(file, "forward", first, stmts[0].lineno, cls=name)
        base = next((b.id for b in cls.bases if isinstance(b, ast.Name)), None)
        if base is None:
            break
        imported = next((n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module
                         and any(a.name == base and a.asname is None for a in n.names)), None)  # fmt: skip
        if imported:
            file = "python/" + imported.replace(".", "/") + ".py"
        name = base
    return _DEEPSEEK_FORWARD


def _logits_frames(sglang_root: Path | None = None, model_class: str = "") -> list[Frame]:
    """The served model's forward down to the fp32 copy of the logits, the allocation an eager step fails in."""
    return [
        model_forward(sglang_root, model_class),
        *MODULE_CALL,
        Frame(_LOGITS, "forward", "logits = self._get_logits(pruned_states, lm_head, logits_metadata)", 343,
              cls="LogitsProcessor"),
        Frame(_LOGITS, "_get_logits", "logits = self._copy_logits_to_buffer(logits, logits_metadata)", 875),
        Frame(_LOGITS, "_copy_logits_to_buffer", "logits = logits[:, : self.vocab_size].float()", 996),
    ]  # fmt: skip


# the scheduler watchdog's thread, asleep between its checks (utils/watchdog.py WatchdogRaw), most recent first
WATCHDOG_THREAD = [
    Frame(f"{_SRT}/utils/watchdog.py", "_watchdog_once", "time.sleep(self.watchdog_timeout / 2)", 147),
    Frame(f"{_SRT}/utils/watchdog.py", "_watchdog_thread", "self._watchdog_once()", 127),
    Frame(tracebacks.stdlib("threading.py"), "run", "self._target(*self._args, **self._kwargs)", 1012),
    Frame(tracebacks.stdlib("threading.py"), "_bootstrap_inner", "self.run()", 1075),
    Frame(tracebacks.stdlib("threading.py"), "_bootstrap", "self._bootstrap_inner()", 1032),
]


def step_frames(cfg: Any, step: str, sglang_root: Path | None = None, model_class: str = "") -> list[Frame]:
    """A forward pass's Python frames from the scheduler process down to the logits (through ``model_class``'s
    forward, ``file:Class``)."""
    return _loop_frames(cfg) + _forward_frames(step) + _logits_frames(sglang_root, model_class)


def format_size(size: float) -> str:
    """c10's format_size (CUDACachingAllocator.cpp): bytes, KiB, MiB or GiB with two decimals."""
    size = int(size)
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


@dataclass
class Printed:
    """One line the server prints: ``who`` is ``main`` (the launcher's logger), ``rank:<prefix>`` (a scheduler's
    logger, e.g. ``rank: TP3``) or ``raw`` (a runtime or C++ library writing to stderr, no SGLang prefix)."""

    who: str
    text: str


def rank_prefix(cfg: Any, dp_rank: int, tp_rank: int) -> str:
    """configure_scheduler_process's logger prefix (0.5.12): `` DP{d}`` under a DP controller, `` TP{t}`` for TP > 1."""
    prefix = f" DP{dp_rank}" if cfg.dp_size > 1 else ""
    return prefix + (f" TP{tp_rank}" if cfg.tp_size > 1 else "")


def _ranks(cfg: Any) -> list[int]:
    """The TP ranks of the group a step runs on (every DP replica is a full TP group; under DP attention the ranks
    share one)."""
    return list(range(int(cfg.tp_size)))


def _rng(fault: Fault, salt: str) -> random.Random:
    return random.Random(f"{salt}:{fault.kind}:{fault.at:.6f}:{fault.dp_rank}")


def render(fault: Fault, cfg: Any, sglang_root: Path, server_pid: int, model_class: str = "") -> list[Printed]:
    """The lines SGLang 0.5.12 (and the runtime under it) print when ``fault`` happens, in order (a forward pass
    through ``model_class``, the ``file:Class`` the release built)."""
    out: list[Printed] = []
    ranks = _ranks(cfg)
    if fault.step == "decode" and (stats := fault.detail.get("batch_stats")):
        out.append(Printed(f"rank:{rank_prefix(cfg, fault.dp_rank, 0)}", decode_batch_line(cfg, stats)))
    if fault.kind == "out_of_memory":
        for r in ranks:
            tb = tracebacks.render(sglang_root, step_frames(cfg, fault.step, sglang_root, model_class),
                                   [f"torch.OutOfMemoryError: {oom_message(fault, r)}"])
            out.append(Printed(f"rank:{rank_prefix(cfg, fault.dp_rank, r)}", messages.SCHEDULER_EXCEPTION.format(traceback=tb)))
        out += _launcher_after_exception(cfg, server_pid)
    elif fault.kind in ("collective_hang", "collective_error"):
        out += _collective_lines(fault, cfg, ranks, server_pid)
    elif fault.kind == "worker_crash":
        out += _crash_lines(fault, cfg, sglang_root, ranks, server_pid, model_class)
    return out


def decode_batch_line(cfg: Any, stats: dict[str, Any]) -> str:
    """The scheduler's periodic decode log line (every ``--decode-log-interval`` decode steps, 40 by default) for the
    batch running when the failure came."""
    spec = ""
    if cfg.speculative_algorithm:
        accept = float(stats.get("accept") or 1.0)
        drafts = max(int(cfg.speculative_num_draft_tokens or 1) - 1, 1)
        spec = messages.DECODE_BATCH_SPEC.format(accept=accept, rate=max(accept - 1.0, 0.0) / drafts)
    capacity = max(int(stats.get("capacity") or 1), 1)
    return messages.DECODE_BATCH.format(running=stats["running"], tokens=stats["tokens"],
                                        usage=stats["tokens"] / capacity, spec=spec, graph=bool(stats["graph"]),
                                        throughput=stats["throughput"], queue=stats["queue"])  # fmt: skip


def oom_message(fault: Fault, gpu: int) -> str:
    """PyTorch's allocator message on ROCm (``HIP out of memory. Tried to allocate ...``) for this step on ``gpu``."""
    need, last, budget = fault.detail["need"], fault.detail["last"], fault.detail["budget"]
    mem = fault.detail["memory"]
    held = need - last  # what the step had allocated before its last allocation
    free = max(budget - held, 0.0)
    # the caching allocator keeps the prefill chunk's blocks; what of them this step could not use stays reserved
    unallocated = max(mem["activation_bytes"] - held, 0.0)
    return messages.HIP_OOM.format(
        tried=format_size(last), gpu=gpu, total=format_size(mem["gpu_bytes"]), free=format_size(max(free - unallocated, 0.0)),
        allocated=format_size(mem["static_bytes"] + mem["graph_bytes"] + held), private=format_size(mem["graph_bytes"]),
        unallocated=format_size(unallocated))  # fmt: skip


def _launcher_after_exception(cfg: Any, server_pid: int) -> list[Printed]:
    """After a scheduler's exception it sends SIGQUIT to its parent: the launcher's running-phase handler prints
    and kills the process tree. Under a DP controller the controller dies of the signal first, which the launcher's
    SubprocessWatchdog notices."""
    out = []
    if cfg.dp_size > 1:
        out.append(Printed("main", messages.SUBPROCESS_CRASHED.format(name="scheduler_0", pid=server_pid + 1, code=-3)))
    out.append(Printed("main", messages.SIGQUIT_RUNNING))
    return out


def _glog(rank: int, when: float, line: int, text: str) -> str:
    """A PyTorch C++ error line as glog prints it under torch.distributed (``[rank3]:[E1202 ...cpp:NNN] ...``)."""
    return f"[rank{rank}]:[E1202 10:{int(when // 60) % 60:02d}:{when % 60:012.9f} ProcessGroupNCCL.cpp:{line}] {text}"


def _collective_lines(fault: Fault, cfg: Any, ranks: list[int], server_pid: int) -> list[Printed]:
    """A stuck or failed collective: SGLang's scheduler watchdog, or PyTorch's NCCL watchdog (an RCCL work of a
    ProcessGroupNCCL: a timeout, or an error RCCL reported), then the launcher."""
    out: list[Printed] = []
    by = fault.detail.get("noticed_by") or ("nccl" if fault.kind == "collective_error" else "scheduler")
    if by == "scheduler":
        wd = cfg.watchdog_timeout
        for r in ranks:
            out.append(Printed(f"rank:{rank_prefix(cfg, fault.dp_rank, r)}",
                               messages.WATCHDOG_TIMEOUT.format(name="Scheduler", timeout=_py_repr(wd), soft=False)))
        if cfg.dp_size > 1:
            out.append(Printed("main", messages.SUBPROCESS_CRASHED.format(name="scheduler_0", pid=server_pid + 1, code=-3)))
        out.append(Printed("main", messages.SIGQUIT_RUNNING))
        return out
    if by != "nccl":
        return out
    timeout_ms = int((cfg.dist_timeout or NCCL_DEFAULT_TIMEOUT_S) * 1000)
    seq = int(fault.detail.get("seq") or 1) + 1
    work = messages.WORK_NCCL.format(seq=seq, numel=int(fault.tokens) * int(fault.detail.get("hidden") or 0),
                                     timeout=timeout_ms)  # fmt: skip
    hang = fault.kind == "collective_hang"
    t = fault.at + (timeout_ms / 1000 if hang else 0.0)

    def what(r: int) -> str:
        if hang:
            return messages.NCCL_WATCHDOG_CAUGHT.format(rank=r, work=work, ran=timeout_ms + 12 + 7 * r)
        return messages.NCCL_ASYNC_ERROR

    for r in ranks:
        if hang:
            out.append(Printed("raw", _glog(r, t, 629, what(r))))
        out += [
            Printed("raw", _glog(r, t, 2252, messages.NCCL_FAILURE_DETECTED.format(rank=r, seq=seq, completed=seq - 1))),
            Printed("raw", _glog(r, t, 732, messages.NCCL_NO_STACK_TRACE)),
        ]
    out.append(Printed("raw", _glog(ranks[0], t, 2584, messages.NCCL_FIRST_PG_DUMPING.format(rank=ranks[0]))))
    t += NCCL_DUMP_WAIT_S
    for r in ranks:
        out += [
            Printed("raw", _glog(r, t, 684, messages.NCCL_SOME_FAILED.format(rank=r))),
            Printed("raw", _glog(r, t, 698, messages.NCCL_TAKING_DOWN.format(rank=r))),
            Printed("raw", _glog(r, t, 1896, messages.NCCL_WATCHDOG_TERMINATED.format(rank=r, what=what(r)))),
        ]
    r0 = ranks[0]
    terminated = messages.NCCL_WATCHDOG_TERMINATED.format(rank=r0, what=what(r0))
    out += [Printed("raw", line) for line in messages.NCCL_TERMINATE.format(what=terminated).splitlines()]
    name = "scheduler_0" if cfg.dp_size > 1 else f"scheduler_{r0}"
    out.append(Printed("main", messages.SUBPROCESS_CRASHED.format(name=name, pid=server_pid + 1 + r0, code=-6)))
    out.append(Printed("main", messages.SIGQUIT_RUNNING))
    return out


def _py_repr(value: Any) -> str:
    """How an f-string's ``{x=}`` prints the value: the default 300 stays an int (argparse does not convert a
    default), a value given on the command line is a float (type=float)."""
    return repr(value)


def _crash_lines(fault: Fault, cfg: Any, sglang_root: Path, ranks: list[int], server_pid: int,
                 model_class: str = "") -> list[Printed]:  # fmt: skip
    out: list[Printed] = []
    rank = int(fault.detail["rank"])
    if fault.detail.get("error") == "illegal_memory_access":  # raised in Python: the scheduler's own handler
        tb = tracebacks.render(sglang_root, step_frames(cfg, fault.step, sglang_root, model_class), messages.HIP_ILLEGAL_ACCESS.splitlines())
        out.append(Printed(f"rank:{rank_prefix(cfg, fault.dp_rank, rank)}", messages.SCHEDULER_EXCEPTION.format(traceback=tb)))
        return out + _launcher_after_exception(cfg, server_pid)
    # the ROCm runtime aborts the process: its line, then Python's faulthandler (every scheduler enables it)
    rng = _rng(fault, "crash")
    node = 2 + rank  # KFD numbers the CPU nodes first
    handle = f"0x{rng.randrange(0x55a000000000, 0x55ffffffffff):x}"
    address = f"0x{rng.randrange(0x7f0000000000, 0x7fffffffffff) & ~0xFFFFF:x}"
    out.append(Printed("raw", messages.MEMORY_ACCESS_FAULT.format(node=node, handle=handle, address=address)))
    out += [Printed("raw", "Fatal Python error: Aborted"), Printed("raw", "")]
    # faulthandler lists the Python threads, the newest first: the scheduler's watchdog thread, then the main
    # thread in its forward pass (the runtime's own thread, which aborted, has no Python frames)
    watchdog_thread = f"0x{rng.randrange(0x7f0000000000, 0x7fffffffffff) & ~0xFFF:016x}"
    main_thread = f"0x{rng.randrange(0x7f0000000000, 0x7fffffffffff) & ~0xFFF:016x}"
    out.append(Printed("raw", f"Thread {watchdog_thread} (most recent call first):"))
    for f in WATCHDOG_THREAD:
        path, line = tracebacks.locate(sglang_root, f)
        out.append(Printed("raw", f'  File "{path}", line {line} in {f.func}'))
    out += [Printed("raw", ""), Printed("raw", f"Thread {main_thread} (most recent call first):")]
    for f in reversed(step_frames(cfg, fault.step, sglang_root, model_class)):
        path, line = tracebacks.locate(sglang_root, f)
        out.append(Printed("raw", f'  File "{path}", line {line} in {f.func}'))
    if fault.death_after is None:  # nothing watches this process: its requests wait forever
        return out
    if cfg.dp_size == 1:
        name = f"scheduler_{rank}"
        out.append(Printed("main", messages.SUBPROCESS_CRASHED.format(name=name, pid=server_pid + 1 + rank, code=-6)))
        out.append(Printed("main", messages.SIGQUIT_RUNNING))
        return out
    # under a DP controller: the dead rank's peers wait in their next collective until the scheduler watchdog fires
    hang = Fault(kind="collective_hang", at=fault.at, dp_rank=fault.dp_rank, step=fault.step, tokens=fault.tokens,
                 rows=fault.rows, batch=fault.batch, graph=fault.graph, detail={"noticed_by": "scheduler"})
    return out + _collective_lines(hang, cfg, [r for r in ranks if r != rank], server_pid)
