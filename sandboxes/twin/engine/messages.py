"""Every message the twin prints that the real engine prints, as a template taken from the pinned release.

Each ``RealMessage`` names the file of the SGLang 0.5.12 wheel it comes from and the source text of the
format string there (``source``), so the drift test (``tests/twin/test_fidelity.py``) can find it in the real
release and fail when either side changes. ``docs/twin-fidelity.md`` lists them with the twin code that
prints each one. The templates use ``str.format`` fields where the real code interpolates values.
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RealMessage:
    name: str
    template: str  # what the twin prints (str.format fields)
    file: str  # path inside the sglang package of the pinned release
    source: str  # text that appears verbatim in that file (the format string as written there)
    printed_by: str  # twin code that prints it


# --- weight loading (python/sglang/srt/layers/linear.py, model_loader/weight_utils.py, ...) ----------------
DEFAULT_LOADER = "Attempted to load weight ({loaded}) into parameter ({param})"
REPLICATED_SHAPE = "param.shape={param} param.dtype={param_dtype} loaded_weight.shape={loaded} loaded_weight.dtype={loaded_dtype}"
COLUMN_SHAPE = "param_data.shape={param} != loaded_weight.shape={loaded}"
ROW_SHAPE = "param_data.shape={param} loaded_weight.shape={loaded}"
TENSOR_SIZE_MISMATCH = "The size of tensor a ({a}) must match the size of tensor b ({b}) at non-singleton dimension {dim}"
CAT_SIZES = "Sizes of tensors must match except in dimension 0. Expected size {expected} but got size {got} for tensor number 1 in the list."
NOT_IN_PARAMS_DICT = "{name} not found in params_dict."

# --- start-up and serving (python/sglang/srt/managers, entrypoints) ----------------------------------------
SCHEDULER_EXCEPTION = "Scheduler hit an exception: {traceback}"
DRAFT_GRAPH_BEGIN = "Capture draft cuda graph begin. This can take up to several minutes. avail mem={m:.2f} GB"
CAPTURE_FAILED = "Capture cuda graph failed: {error}\n{advice}"
CAPTURE_FAILED_ADVICE = (  # model_executor/cuda_graph_runner.py CUDA_GRAPH_CAPTURE_FAILED_MSG
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
# PyTorch's own check in topk (aten), not SGLang's text: what torch.topk raises when k exceeds the dimension
TOPK_OUT_OF_RANGE = "RuntimeError: selected index k out of range"
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
READY = "The server is fired up and ready to roll!"

# --- while serving (engine/serving_faults.py) -------------------------------------------------------------------
# the tokenizer manager's running-phase SIGQUIT handler, installed with loop.add_signal_handler: asyncio calls it
# without arguments, so signum and frame print as None
SIGQUIT_RUNNING = "SIGQUIT received. signum=None, frame=None. It usually means one child failed."
SUBPROCESS_CRASHED = "Subprocess {name} (pid={pid}) crashed with exit code {code}. Triggering SIGQUIT for cleanup..."
WATCHDOG_TIMEOUT = "{name} watchdog timeout (self.watchdog_timeout={timeout}, self.soft={soft})"
DECODE_BATCH = ("Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, {spec}"
                "cuda graph: {graph}, gen throughput (token/s): {throughput:.2f}, #queue-req: {queue}")
DECODE_BATCH_SPEC = "accept len: {accept:.2f}, accept rate: {rate:.2f}, "
AR_AITER = "[AR] Using AiterCustomAllreduce (AMD default)"
AR_NCCL = "[AR] All-reduce call path: NCCL (custom AR disabled)"

# --- what the runtime and PyTorch print under SGLang, not SGLang's own text ---------------------------------------
# (the forms of c10's CUDACachingAllocator.cpp, ProcessGroupNCCL.cpp and NCCLUtils, ROCr's fault handler and
# CPython's faulthandler, as real ROCm logs show them: tests/tools/data/real_logs/, tests/twin/test_serving_faults.py)
# PyTorch's allocator on ROCm (hipify turns "CUDA" into "HIP"), with the graphs' memory in private pools
HIP_OOM = (
    "HIP out of memory. Tried to allocate {tried}. GPU {gpu} has a total capacity of {total} of which {free} is free. "
    "Of the allocated memory {allocated} is allocated by PyTorch, with {private} allocated in private pools (e.g., "
    "CUDA Graphs), and {unallocated} is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
HIP_ILLEGAL_ACCESS = (
    "torch.AcceleratorError: HIP error: an illegal memory access was encountered\n"
    "Search for `hipErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__HIPRT__TYPES.html "
    "for more information.\n"
    "HIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing AMD_SERIALIZE_KERNEL=3\n"
    "Compile with `TORCH_USE_HIP_DSA` to enable device-side assertions."
)
MEMORY_ACCESS_FAULT = "Memory access fault by GPU node-{node} (Agent handle: {handle}) on address {address}. Reason: Unknown."
# ProcessGroupNCCL: WorkNCCL's operator<<, the watchdog's lines, its exception and std::terminate's report
WORK_NCCL = "WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={timeout})"
NCCL_WATCHDOG_CAUGHT = "[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
NCCL_FAILURE_DETECTED = ("[PG ID 2 PG GUID 3 Rank {rank}]  failure detected by watchdog at work sequence id: {seq} PG "
                         "status: last enqueued work: {seq}, last completed work: {completed}")
NCCL_NO_STACK_TRACE = ("Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. "
                       "You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.")
NCCL_FIRST_PG_DUMPING = "[PG ID 2 PG GUID 3 Rank {rank}] First PG on this rank to signal dumping."
NCCL_SOME_FAILED = ("[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
                    "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.")
NCCL_TAKING_DOWN = "[Rank {rank}] To avoid data inconsistency, we are taking the entire process down."
NCCL_WATCHDOG_TERMINATED = "[PG ID 2 PG GUID 3 Rank {rank}] Process group watchdog thread terminated with exception: {what}"
# an error RCCL reports asynchronously (checkForNCCLErrorsInternal: ncclGetErrorWithVersion, getNcclErrorDetailStr)
NCCL_ASYNC_ERROR = ("NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.6\n"
                    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device "
                    "error. \nLast error:\n")
NCCL_TERMINATE = "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  {what}"

REAL_MESSAGES: tuple[RealMessage, ...] = (
    RealMessage("default weight loader", DEFAULT_LOADER, "srt/model_loader/weight_utils.py",
                'f"Attempted to load weight ({loaded_weight.size()}) "', "weights._load_into"),
    RealMessage("ReplicatedLinear.weight_loader", REPLICATED_SHAPE, "srt/layers/linear.py",
                'f"{param.shape=} {param.dtype=} {loaded_weight.shape=} {loaded_weight.dtype=}"', "weights._load_into"),
    RealMessage("ColumnParallelLinear.weight_loader", COLUMN_SHAPE, "srt/layers/linear.py",
                'f"param_data.shape={param_data.shape} != loaded_weight.shape={loaded_weight.shape}"',
                "weights._load_into"),
    RealMessage("RowParallelLinear.weight_loader", ROW_SHAPE, "srt/layers/linear.py",
                'f"{param_data.shape=} {loaded_weight.shape=}"', "weights._load_into"),
    RealMessage("MergedColumnParallelLinear.weight_loader (bare AssertionError)", "AssertionError",
                "srt/layers/linear.py", "assert param_data.shape == loaded_weight.shape\n", "weights._load_into"),
    RealMessage("params_dict miss in the DeepSeek loader", NOT_IN_PARAMS_DICT,
                "srt/models/deepseek_common/deepseek_weight_loader.py", 'f"{name} not found in params_dict."',
                "weights._Loader.load"),
    RealMessage("nextn config check", "num_nextn_predict_layers is not in the config",
                "srt/models/deepseek_common/deepseek_weight_loader.py",
                '"num_nextn_predict_layers is not in the config"', "weights._load_draft"),
    RealMessage("KV pool too small", "Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                "mem_fraction_static={value}", "srt/model_executor/pool_configurator.py",
                '"Not enough memory. Please try to increase --mem-fraction-static."', "memory.plan_memory"),
    RealMessage("JIT loader failure", "Failed to compile JIT fused metadata copy kernel (forward_mode={mode}, "
                "has_real_page_table={page}, has_flashmla={flashmla}): {error}", "jit_kernel/fused_metadata_copy.py",
                'f"Failed to compile JIT fused metadata copy kernel "', "jit.compile_jit_kernels"),
    RealMessage("scheduler failure", SCHEDULER_EXCEPTION, "srt/managers/scheduler.py",
                'f"Scheduler hit an exception: {traceback}"', "launch_server.main"),
    RealMessage("child failed", SIGQUIT, "srt/entrypoints/engine.py",
                '"Received sigquit from a child process. It usually means the child failed."', "launch_server.main"),
    RealMessage("weights loaded", "Load weight end. elapsed={s:.2f} s, type={arch}, quant={method}, avail mem={a:.2f} GB, "
                "mem usage={u:.2f} GB.", "srt/model_executor/model_runner.py", 'f"Load weight end. "',
                "launch_server.start"),
    RealMessage("KV pool", "KV Cache is allocated. #tokens: {n}, KV size: {size:.2f} GB", "srt/mem_cache/memory_pool.py",
                'f"KV Cache is allocated. #tokens: {num_tokens}, KV size: {kv_size_GB:.2f} GB"', "launch_server.start"),
    RealMessage("KV cache dtype", "Using KV cache dtype: {dtype}", "srt/model_executor/model_runner.py",
                'f"Using KV cache dtype: {self.kv_cache_dtype}"', "launch_server.start"),
    RealMessage("graph capture", "Capture cuda graph begin. This can take up to several minutes. avail mem={m:.2f} GB",
                "srt/model_executor/model_runner.py",
                'f"Capture {graph_backend[self.device]} begin. This can take up to several minutes. avail mem={before_mem:.2f} GB"',
                "launch_server.start"),
    RealMessage("running-request limit", "max_total_num_tokens={n}, chunked_prefill_size={c}, max_prefill_tokens={p}, "
                "max_running_requests={r}, context_len={l}, available_gpu_mem={m:.2f} GB", "srt/managers/scheduler.py",
                'f"max_total_num_tokens={self.max_total_num_tokens}, "', "launch_server.start"),
    RealMessage("draft graph capture", DRAFT_GRAPH_BEGIN, "srt/speculative/eagle_worker.py",
                'f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={before_mem:.2f} GB"',
                "launch_server.start"),
    RealMessage("draft graph capture failed", CAPTURE_FAILED, "srt/speculative/eagle_draft_cuda_graph_runner.py",
                'f"Capture cuda graph failed: {e}', "launch_server.check_draft_tree"),
    RealMessage("capture advice", CAPTURE_FAILED_ADVICE.splitlines()[1], "srt/model_executor/cuda_graph_runner.py",
                '"1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)', "launch_server.check_draft_tree"),
    RealMessage("ready line", READY, "srt/entrypoints/http_server.py",
                '"The server is fired up and ready to roll!"', "launch_server.main"),
    RealMessage("SIGQUIT while serving", SIGQUIT_RUNNING, "srt/managers/tokenizer_manager.py",
                'f"SIGQUIT received. {signum=}, {frame=}. It usually means one child failed."', "serving_faults.render"),
    RealMessage("dead child", SUBPROCESS_CRASHED, "srt/utils/watchdog.py", 'f"Subprocess {name} (pid={proc.pid}) crashed "',
                "serving_faults.render"),
    RealMessage("dead child (exit code)", SUBPROCESS_CRASHED, "srt/utils/watchdog.py",
                'f"with exit code {proc.exitcode}. "', "serving_faults.render"),
    RealMessage("scheduler watchdog", WATCHDOG_TIMEOUT, "srt/utils/watchdog.py", 'f"{self.debug_name} watchdog timeout "',
                "serving_faults.render"),
    RealMessage("scheduler watchdog (values)", WATCHDOG_TIMEOUT, "srt/utils/watchdog.py",
                'f"({self.watchdog_timeout=}, {self.soft=})"', "serving_faults.render"),
    RealMessage("decode batch", DECODE_BATCH, "srt/observability/scheduler_metrics_mixin.py",
                'f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"', "serving_faults.render"),
    RealMessage("custom all-reduce", AR_AITER, "srt/distributed/device_communicators/custom_all_reduce.py",
                '"[AR] Using AiterCustomAllreduce (AMD default)"', "launch_server.start"),
    RealMessage("all-reduce through RCCL", AR_NCCL, "srt/distributed/parallel_state.py",
                '"[AR] All-reduce call path: NCCL (custom AR disabled)"', "launch_server.start"),
)
