"""Reading an engine's log: why did it crash, and which MoE shapes ran on a fallback path.

Classification is by the mechanisms' own messages (PyTorch, the C preprocessor, argparse, HIP, RCCL, aiter),
never by model names, so it applies to any model the engine can load.
"""

from __future__ import annotations

import bisect
import re
from typing import Literal

from pydantic import BaseModel, Field

from . import config_errors, log_lines
from .base import ToolInput, ToolResult, tool
from .context import ToolContext

Category = Literal[
    "weight_shape_mismatch", "compile_error", "out_of_memory", "invalid_flag", "hang_timeout",
    "collective_error", "port_in_use", "worker_crash", "kernel_unavailable", "unsupported_quantization",
    "missing_op", "graph_capture_error", "tokenizer_error", "unknown",
]  # fmt: skip
# The last five are failures of what the engine runs on rather than of its configuration or weights:
#   kernel_unavailable        a kernel library (aiter, CK, hipBLASLt/rocBLAS) has no kernel for this problem on this
#                             GPU: no instance for the shape, none built for the arch, or its kernel files would not
#                             load; the remedy is another path for the same work (another MoE runner, attention backend)
#   unsupported_quantization  the checkpoint's quantization scheme is one the GPU or the release cannot run
#   missing_op                the installed kernel library was built without an op the engine calls
#   graph_capture_error       the GPU runtime refused an operation while a graph was being captured
#   tokenizer_error           the tokenizer would not load, or has no chat template the server needs
KernelPath = Literal["moe", "gemm", "attention"]
# Which memory ran out; the fix goes the opposite way for the first and the third:
#   startup_kv  the static pool leaves no room for the KV cache at start-up: raise --mem-fraction-static (or more GPUs)
#   weights     the weights alone do not fit one GPU: more GPUs per rank (--tp-size)
#   runtime     an allocation outside the static pool failed (activations, CUDA-graph capture, a forward pass): lower
#               --mem-fraction-static, then --cuda-graph-max-bs / --chunked-prefill-size
#   kv_pool     the engine's own KV-cache or request-slot pool ran dry while serving: fewer running requests
#   serving     the allocator failed in a forward pass while serving requests (its transient memory grew past what
#               the static pool left): lower --mem-fraction-static, or fewer running requests
MemoryPhase = Literal["startup_kv", "weights", "runtime", "kv_pool", "serving"]


class Frame(BaseModel):
    """One frame of a Python traceback in the log."""

    file: str
    line: int
    function: str
    code: str | None = Field(None, description="the source line Python printed under the frame")


class Diagnosis(BaseModel):
    category: Category
    summary: str
    parameter: str | None = Field(None, description="engine parameter that failed to load, when the log names it")
    checkpoint_parameter: str | None = None
    checkpoint_shape: list[int] | None = None
    engine_shape: list[int] | None = None
    checkpoint_dtype: str | None = None
    engine_dtype: str | None = None
    loader: str | None = Field(None, description="the function that raised while loading, file:line function")
    model_file: str | None = Field(None, description="the model source whose load_weights was running")
    draft_model: bool = Field(False, description="the failure happened while building or loading the draft model")
    component: Literal["main_model", "draft_model", "kernel_build", "scheduler"] | None = Field(None, description=(
        "the part of the engine whose frames raised it: a kernel's build (a compile error), the draft model's code "
        "(only when the launch loads a draft), the main model's (a model file's frames), else the scheduler's "
        "(its frames raised, no model's); None when the log holds no frames that say"))
    file: str | None = Field(None, description="source file the error points at")
    line: int | None = None
    header: str | None = Field(None, description="missing include")
    symbol: str | None = Field(None, description="undeclared type or identifier a compile error names")
    flag: str | None = Field(None, description="offending command-line flag")
    value: str | None = Field(None, description="for invalid_flag: the refused value, when the message names it")
    target: str | None = Field(None, description="the GPU target (gfx id) a compiler driver or kernel library names")
    library: str | None = Field(None, description="the kernel library that has no kernel or op for the problem")
    kernel: str | None = Field(None, description="the kernel or op the library names")
    kernel_path: KernelPath | None = Field(
        None, description="for kernel_unavailable: which of the engine's paths has no kernel (another backend for it "
        "is the remedy)")
    quantization: str | None = Field(None, description="for unsupported_quantization: the scheme refused")
    memory_phase: MemoryPhase | None = Field(None, description="for out_of_memory: which memory ran out (MemoryPhase)")
    mem_fraction_static: float | None = Field(
        None, description="the --mem-fraction-static the engine ran with, as its OOM message (else its ServerArgs line) "
        "prints it")
    min_mem_fraction_static: float | None = Field(
        None, description="the smallest --mem-fraction-static the engine says leaves room for the KV cache")
    tried_bytes: int | None = Field(None, description="for an allocator OOM: what the failing allocation asked for")
    free_bytes: int | None = Field(None, description="for an allocator OOM: what the device had free then")
    capacity_bytes: int | None = Field(None, description="for an allocator OOM: the device's total capacity")
    running_requests: int | None = Field(
        None, description="the running requests the engine last reported before the failure (its decode log)")
    max_running_requests: int | None = Field(
        None, description="the most requests the engine said it would run at once (its start-up line)")
    avail_before_weights_gb: float | None = Field(
        None, description="the memory free when the weights began to load, which the static fraction is taken of")
    collective_library: str | None = Field(
        None, description="for a collective failure: 'rccl' when the collective library's own words report it (an "
        "NCCL/RCCL error, a ProcessGroupNCCL work timing out); None when only the engine saw it stop")
    worker: str | None = Field(None, description="for a crashed worker: the process the launcher names")
    exit_code: int | None = Field(None, description="for a crashed worker: its exit code (-6: aborted)")
    frames: list[Frame] = Field(default_factory=list, description="the traceback's frames, outermost first")
    evidence: list[str] = Field(default_factory=list, description="the log lines this rests on")


class MoEShape(BaseModel):
    """A fused-MoE problem shape as aiter keys its tuned selections."""

    model_dim: int
    inter_dim: int
    expert: int
    topk: int
    act_type: str = "ActivationType.Silu"
    dtype: str = "torch.bfloat16"
    q_dtype_a: str = ""
    q_dtype_w: str = ""
    q_type: str = ""
    use_g1u1: bool = True
    doweight_stage1: bool = False

    def key(self) -> tuple:
        return (self.model_dim, self.inter_dim, self.expert, self.topk, self.q_dtype_w)


_SIZE = r"torch\.Size\(\[([\d,\s]*)\]\)"
# the weight loaders' own messages: SGLang's model_loader/weight_utils.py and layers/linear.py, vLLM's likewise
_DEFAULT_LOADER = re.compile(rf"Attempted to load weight \({_SIZE}(?:, dtype=([\w.]+))?\) into parameter \({_SIZE}(?:, dtype=([\w.]+))?\)")
_TRIED = re.compile(rf"Tried to load weights of size {_SIZE}\s*to a parameter (?:shard of id \S+ )?(?:of )?size {_SIZE}")
_REPLICATED = re.compile(rf"param\.shape={_SIZE} param\.dtype=([\w.]+) loaded_weight\.shape={_SIZE} loaded_weight\.dtype=([\w.]+)")
_PARAM_DATA = re.compile(rf"param_data\.shape={_SIZE}(?: !=)? loaded_weight\.shape={_SIZE}")
# PyTorch's load_state_dict, one line per parameter under its "Error(s) in loading state_dict for <Module>:" header
# (the header may be cut off a pasted excerpt): the name is the module's own, which is the checkpoint's key as well
_STATE_DICT = re.compile(rf"size mismatch for ([\w.]+): copying a param with shape {_SIZE} from checkpoint, the shape in "
                         rf"current model is {_SIZE}")  # fmt: skip
# PyTorch's own, meaningful only while a loader runs: copy_ into a parameter, and slice assignment
_TENSOR_SIZE = re.compile(r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")
_EXPANDED = re.compile(r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\)")
_KEY_ERROR = re.compile(r"^KeyError: '([^']+)'", re.M)
_BARE_ASSERT = re.compile(r"^[ \t]*AssertionError\s*$", re.M)  # quoted tracebacks are often indented
_ASSERT_CODE = re.compile(r"^\s+assert\b.*")
_RAISED_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(?:Error|Exception)\b")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b(?::|\s*$)")
# compilers: clang/hipcc ('x' file not found; unknown type name) and gcc (x: No such file or directory). Newer
# clang wraps a long diagnostic onto the next line, and pasted logs may indent it, hence the \s around the message.
_CLANG_MISSING = re.compile(r"^[ \t]*(\S+?):(\d+):\d+: fatal error:\s*'([^']+)' file not found", re.M)
# gcc prints "fatal error: x.h: No such file or directory" in the user's locale ("没有那个文件或目录", "Aucun fichier ou
# dossier de ce type", "Datei oder Verzeichnis nicht gefunden", ...), and may translate "fatal error" itself
_FATAL = r"(?:fatal error|致命错误|schwerwiegender Fehler|erreur fatale|errore fatale|error fatal|erro fatal)"
_GCC_MISSING = re.compile(rf"^[ \t]*(\S+?):(\d+):(?:\d+:)? {_FATAL}[:：]\s*([^:：\s]+)[:：] *(?:No such file or directory"
                          r"|[^\x00-\x7f]|Datei |Aucun |File o |No existe |Arquivo |Nie ma )", re.M)  # fmt: skip
_UNDECLARED = re.compile(r"^[ \t]*(\S+?):(\d+):\d+: error:\s*(unknown type name|use of undeclared identifier) '([^']+)'",
                         re.M)  # fmt: skip
_COMPILE = re.compile(r"^[ \t]*(\S+?):(\d+):(?:\d+:)? (?:fatal )?error:[ \t]*\n?[ \t]*(\S.*)$", re.M)
# the compiler driver's own errors, which name no source position: an offload target it refuses (an unknown or
# malformed gfx id, feature combinations that conflict), a HIP option given to the host compiler, a ROCm component it
# cannot find. The build failed before any source was compiled, for the target, not for a line of code.
_DRIVER = re.compile(r"^[ \t]*(?:[^\s:]*[/\\])?((?:amd)?clang(?:\+\+)?(?:-\d+)?|hipcc(?:\.bin)?|[cg]\+\+|gcc|cc|nvcc|"
                     r"ld\.lld|lld|ld)(?:\.exe)?: (?:fatal )?error: (\S.*)$", re.M)  # fmt: skip
# the compiler's count when the error lines themselves were cut off the excerpt (or went to another stream)
_ERRORS_GENERATED = re.compile(r"^[ \t]*(\d+) errors? generated(?: when compiling for ([^\s.]+))?\.?[ \t]*$", re.M)
_GFX = re.compile(r"(?<![A-Za-z0-9])(gfx\d{2,4}[a-z]?)(?![a-z0-9])")  # also in a file name: TensileLibrary_lazy_gfx942
_ARGPARSE = re.compile(r"error: (unrecognized arguments: (\S+).*|argument (--[\w-]+)(?:/\S+)?: (.+))$", re.M)
# Out of memory, by the messages' own words, most specific first; each kind says which memory ran out (MemoryPhase).
# SGLang's start-up KV-cache checks: the 0.5.14+ ValueError of _profile_available_bytes (model_runner_kv_cache_mixin.py,
# mem_cache/kv_cache_configurator.py from 0.5.16), the older MemoryPoolConfig check (pool_configurator.py), the hybrid
# (mamba) and SWA pool checks; vLLM's two start-up KV-cache checks
_OOM_STARTUP_KV = re.compile(r"Loaded weights leave no GPU memory for the KV cache|Not enough memory\. Please try to "
                             r"increase --mem-fraction-static|Not enough GPU memory for hybrid|state cache is too small "
                             r"to serve any requests|leaves no room for the full KV pool|No available memory for the "
                             r"cache blocks|larger than the maximum number of tokens that can be stored in KV cache")
# SGLang's own pools running dry while serving (mem_cache/allocation.py, mem_cache/common.py before)
_OOM_KV_POOL = re.compile(r"\b(?:Prefill|Decode) out of memory\b|\balloc_req_slots runs out of memory\b")
# a CUDA-graph capture the allocator failed (SGLang wraps any capture error; only an OOM one is a memory problem)
_OOM_CAPTURE = re.compile(r"\bCapture \w+ graph failed:.*(?:out of memory|OutOfMemoryError)", re.I)
# the allocator's own (torch "CUDA/HIP out of memory", HIP's "out of memory" error), and any other OOM wording
_OOM = re.compile(r"(out of memory|Not enough memory|OutOfMemoryError)", re.I)
_OOM_KINDS: tuple[tuple[str, re.Pattern], ...] = (
    ("startup_kv", _OOM_STARTUP_KV), ("kv_pool", _OOM_KV_POOL), ("capture", _OOM_CAPTURE), ("allocator", _OOM),
)  # fmt: skip
_FRACTION_NAMED = re.compile(r"(?:--mem-fraction-static[= ]|\bmem_fraction_static=|Current value: )(\d*\.?\d+)")
_FRACTION_MIN = re.compile(r"Raise --mem-fraction-static above (\d*\.?\d+)")
_WEIGHTS_BEGIN = re.compile(r"\bLoad weight begin\b")
_WEIGHTS_END = re.compile(r"\bLoad weight end\b")
_CAPTURE_BEGIN = re.compile(r"\bCapture\b.*\bgraph\b.*\bbegin\b", re.I)
_CAPTURE_FRAME = re.compile(r"capture|graph_runner|cuda_graph|init_device_graphs", re.I)
# the collective libraries' own errors; HSA_STATUS_ERROR_* is the ROCm runtime aborting a queue (a memory fault,
# an illegal instruction), which any kernel can cause, so it is no evidence of a collective failure
# Their INFO lines (NCCL_DEBUG=INFO, RCCL prints "NCCL" too) are progress reports, never evidence of a failure.
_COLLECTIVE = re.compile(r"((?:NCCL|RCCL) [Ee]rror\b|\bnccl(?:InternalError|SystemError|UnhandledCudaError|InvalidUsage|"
                         r"RemoteError)\b|Watchdog caught collective|(?:Test )?(?:NCCL|RCCL) failure|"
                         r"failure detected by watchdog at work sequence id)")  # fmt: skip
# a GPU runtime fault that kills the process running the kernel (ROCr's fault handler, HSA's queue abort, HIP's and
# CUDA's illegal access)
_RUNTIME_FAULT = re.compile(r"(Memory access fault by GPU node-\d+[^\n]*|\bHSA_STATUS_ERROR_\w+|"
                            r"(?:HIP|CUDA) error: an illegal memory access was encountered)")  # fmt: skip
# ... in one worker of a multi-process engine: the launcher names the dead child (SGLang's SubprocessWatchdog), the
# scheduler's own handler reports it, or the lines carry a rank's or a worker's prefix
_DEAD_CHILD = re.compile(r"Subprocess (\S+) \(pid=\d+\) crashed with exit code (-?\d+)")
_WORKER_LINES = re.compile(r"Scheduler hit an exception|WorkerProc hit an exception|EngineCore encountered a fatal error|"
                           r"/srt/managers/scheduler\.py\", line \d+ in \w+")  # the last: a scheduler's faulthandler dump
_WORKER_STREAM = re.compile(r"\[rank\d+\]:|\((?:VllmWorker|Worker_TP|Worker|EngineCore)[^)]*pid=\d+")
# the allocator's figures ("Tried to allocate 2.36 GiB. GPU 6 has a total capacity of 288.00 GiB of which 1.41 GiB is
# free"), the engine's last report of its running batch, and the memory its static fraction is taken of
_SIZE_UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_OOM_FIGURES = re.compile(r"Tried to allocate ([\d.]+) (bytes|KiB|MiB|GiB)\. GPU \d+ has a total capac\w* of ([\d.]+) "
                          r"(bytes|KiB|MiB|GiB) of which ([\d.]+) (bytes|KiB|MiB|GiB) is free")  # fmt: skip
_RUNNING = re.compile(r"#running-req: (\d+)|\bnum_running_reqs=(\d+)")
_AVAIL_BEFORE = re.compile(r"\bLoad weight begin\. avail mem=([\d.]+) GB")
_MAX_RUNNING = re.compile(r"\bmax_running_requests=(\d+), context_len=")  # the scheduler's start-up line
# a forward pass of a server at work (the schedulers' and engine cores' serving loops), and what only start-up runs
_SERVING_FRAME = re.compile(r"^(run_batch|event_loop_overlap|event_loop_normal|forward_batch_generation|forward_step|"
                            r"exposed_step|forward_decode_batch|forward_prefill_batch|execute_model|step_with_batch_queue|"
                            r"run_busy_loop|_process_engine_step)$")  # fmt: skip
_STARTUP_FRAME = re.compile(r"capture|profile_run|_dummy_run|_dummy_sampler_run|determine_available_memory|"
                            r"init_device_graphs|_initialize_kv_caches|load_model|warmup", re.I)  # fmt: skip
_SERVING_LINE = re.compile(r"The server is fired up and ready to roll|\b(?:Decode|Prefill) batch[.,] |"
                           r"Dumping scheduler output for model execution")  # fmt: skip
_COLLECTIVE_INFO = re.compile(r"\b(?:NCCL|RCCL) INFO\b")
# SGLang's scheduler watchdog: a forward pass (or a rank) stopped making progress
# another process holds a port the server binds: uvicorn's HTTP port, torch.distributed's store, ZMQ's sockets
_PORT_TAKEN = re.compile(r"\[Errno 98\][^\n]*|\(errno: 98 - Address already in use\)|ZMQError: Address already in use[^\n]*")
_HANG = re.compile(r"(\b[Ww]atchdog timeout \(self\.watchdog_timeout=[^)]*\))")
# torch's ProcessGroupNCCL heartbeat monitor: its watchdog thread itself hung inside a NCCL/CUDA call (a kernel that
# never returned), so no collective failed: the process stopped making progress
_PG_WATCHDOG_HANG = re.compile(r"(ProcessGroupNCCL's watchdog got stuck for \d+ seconds[^.]*|Heartbeat monitor timed out![^.]*)")
# ranks called different collectives (torch's ProcessGroupWrapper under TORCH_DISTRIBUTED_DEBUG=DETAIL): the
# program's own words, not the library's
_COLLECTIVE_MISMATCH = re.compile(r"(Detected mismatch between collectives on ranks\.?[^\n]{0,160})")
# the collective library's WARN lines (RCCL prints "NCCL" too); only those that report a failure are evidence,
# RCCL also warns of settings that merely "can lead to" trouble (NUMA balancing, iommu=pt)
_COLLECTIVE_WARN = re.compile(r"\b(?:NCCL|RCCL) WARN\b\s*(.*)")
_WARN_FAILURE = re.compile(r"\b(?:fail\w*|error|errno|mismatch\w*|refused|closed|abort\w*|timed out|timeout|"
                           r"unable|cannot|could not|invalid|unhandled|no such)\b", re.I)
# What the engine runs on (the Category notes): the libraries' and runtimes' own words.
# an op torch's registry lacks (the installed kernel library was built without it), or has no kernel of for the backend
_MISSING_OP = re.compile(r"'_OpNamespace' '(\w+)' object has no attribute '(\w+)'|"
                         r"Could not run '(\w+)::(\w+)' with arguments from the '\w+' backend")  # fmt: skip
# a quantization scheme the GPU (its capability) or the release (its methods, its platform's list) cannot run
_QUANT_REFUSED = re.compile(r"[Tt]he quantization method ([\w-]+) is not supported for the current GPU[^\n]*|"
                            r"Quantization scheme is not supported for[^\n]*|"
                            r"Unknown quantization method: ([\w-]+)[^\n]*|"
                            r"\b([\w-]+) quantization is (?:currently )?not supported (?:in|on|for) [^\n]*")  # fmt: skip
# the GPU runtime refusing an operation on a stream being captured into a graph (HIP's words, and CUDA's)
_CAPTURE_REFUSED = re.compile(r"operation not permitted when stream is capturing|operation not permitted on an event "
                              r"last recorded in a capturing stream|\b(?:hip|cuda)Error(?:StreamCapture\w*|CapturedEvent)\b|"
                              r"operation would make the legacy stream depend on a capturing blocking stream")  # fmt: skip
# the tokenizer: no chat template where the server needs one (transformers' words), a tokenizer.json the installed
# tokenizers library cannot read (written by a newer one), a tokenizer that is not there
_TOKENIZER = re.compile(r"Cannot use chat template functions because tokenizer\.chat_template is not set[^\n]*|"
                        r"data did not match any variant of untagged enum ModelWrapper[^\n]*|"
                        r"Can't load tokenizer for [^\n]*")  # fmt: skip
# a kernel library with no kernel for the problem, in its own words (composable_kernel's instance check, aiter's
# dispatch, an op refusing its arguments) ...
_NO_KERNEL = re.compile(r"device_gemm with the specified compilation parameters does not support this \w+ problem|"
                        r"Unsupported kernel config\b[^\n]*|\binvalid argument for (\w+)")  # fmt: skip
# ... or a refusal raised in the library's own code (its package directory in the raising frame's path)
_KERNEL_LIBRARY = re.compile(r"[/\\](aiter|composable_kernel|ck_tile|sgl_kernel)[/\\]")
# the GEMM libraries that found no kernels for the GPU (their kernel files not there, or not loadable); a line that is
# followed by the library's fallback to another path was only a warning
_BLAS_NO_KERNELS = re.compile(r"\b(rocblaslt|hipBLASLt|rocBLAS) error: (?:Could not load|Cannot read|Could not "
                              r"initialize)\b[^\n]*")  # fmt: skip
_BLAS_FALLBACK = re.compile(r"\bfalling back to\b", re.I)
# which of the engine's paths the kernel served, by the words of the message and then of the frames
_PATH_WORDS: tuple[tuple[KernelPath, re.Pattern], ...] = (
    ("moe", re.compile(r"moe|expert", re.I)),
    ("attention", re.compile(r"attn|attention|(?<![a-z])f?mha|(?<![a-z])mla|flash", re.I)),
    ("gemm", re.compile(r"gemm|matmul|blas|tensile", re.I)),
)  # fmt: skip
# a ValueError is a configuration (flag) problem only when it names a server argument: a --flag, a parallel size
# (SGLang's "tp_size * dp_size = 16 GPUs requested ..."), or it was raised by the argument validation itself
# ... a ValueError, or an assertion or NotImplementedError with a message (SGLang's ServerArgs asserts many of its
# refusals: an algorithm a model class cannot run, an attention backend a configuration cannot use)
_VALUE_ERROR = re.compile(r"\b(?:ValueError|ServerArgsError|(?:AssertionError|NotImplementedError)(?=:\s*\S))\b:?\s*(.*)$")
# a backend the message refuses by its enum value (vLLM's "Selected backend AttentionBackendEnum.FLASHINFER is not valid
# for this configuration"): the enum's class names the argument that selected it (attention_backend)
_BACKEND_VALUE = re.compile(r"\b([A-Z][A-Za-z]*Backend)(?:Enum)?\.([A-Z][A-Z0-9_]*)\b")
_REFUSAL = re.compile(r"\bnot (?:valid|supported|compatible|allowed)\b|\bunsupported\b|\bdoes(?: not|n't) support\b|"
                      r"\bcannot be used\b|\bincompatible\b", re.I)  # fmt: skip
_FLAG_NAME = re.compile(r"(--[a-z][\w-]*|\b(?:tp|dp|pp|ep|cp|sp|attn_tp|moe_dense_tp|moe_ep)_size\b|"
                        r"\b(?:tensor|pipeline|data)[ _-]parallel[ _-]size\b)")  # fmt: skip
_ARGS_FILES = ("server_args.py", "arg_utils.py")
_RECORD_CONTINUES = re.compile(r"\s*(?:During handling|The above exception|\[|(?:DEBUG|INFO|WARNING|ERROR)\b)")
# aiter's MoE-shape lines (its selection line and its untuned notices); tools/moe_lines.py reads them field by field
_FALLBACK = re.compile(r"\[fused_moe\] |Fmoe tuning not support for ")
_ERROR_LINE = re.compile(r"^[\w.]*(?:Error|Exception)\b: |\bHSA_STATUS_ERROR_\w+|\bHIP error: |Memory access fault|"
                         r"^\s+Value error, ")  # the last: pydantic's message under its ValidationError
_LOADING = ("load_weights", "do_load_weights", "weight_loader", "load_model", "default_weight_loader")
_LOADING_NAME = re.compile(r"(?:^|_)load(?:_|$)|weight_loader|load_weights")
_DRAFT_HINTS = re.compile(r"nextn|_mtp|eagle|draft", re.I)
_ENGINE_PATH_TAIL = 3  # a frame's engine-side name: its last path components (srt/speculative/eagle_worker.py)


def _in_draft(frame: Frame) -> bool:
    """Whether a frame is the draft model's own code (the speculative worker, a NextN / MTP model file, a function
    that builds or loads the draft), by its function and the engine-side tail of its path only: the folders a
    checkout, a run or a test lives in (``runs/mtp-sweep/...``) say nothing of which model raised."""
    tail = "/".join(frame.file.replace("\\", "/").split("/")[-_ENGINE_PATH_TAIL:])
    return bool(_DRAFT_HINTS.search(tail) or _DRAFT_HINTS.search(frame.function))

def _shape(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def _tail(lines: list[str], pattern: re.Pattern, n: int = 3) -> list[str]:
    return [ln for ln in lines if pattern.search(ln)][-n:]


def _entries(log: str) -> list[tuple[str, str]]:
    return log_lines.entries(log)


def _frames(entries: list[tuple[str, str]], lo: int, hi: int, source: str | None) -> list[Frame]:
    """The traceback frames in ``entries[lo:hi]`` written by ``source`` (any stream when None), each with the
    source line Python printed under it."""
    frames: list[Frame] = []
    pending: Frame | None = None
    for src, body in entries[lo:hi]:
        if source is not None and src != source:
            continue
        if m := _FRAME.match(body):
            pending = Frame(file=m.group(1), line=int(m.group(2)), function=m.group(3))
            frames.append(pending)
        elif pending is not None and body.strip() and not _CARETS.match(body):
            pending.code = body.strip() if body[:1].isspace() else None
            pending = None
    return frames


def _frames_before(entries: list[tuple[str, str]], idx: int, source: str | None = None) -> list[Frame]:
    """The frames of the traceback whose exception line is ``entries[idx]``: back to its header (or to an earlier
    exception line, or the start of the excerpt), from the same stream only (``source``, default that line's)."""
    source = entries[idx][0] if source is None else source
    lo = 0
    for j in range(idx - 1, -1, -1):
        src, body = entries[j]
        if src != source:
            continue
        if _TRACEBACK in body or _EXCEPTION_LINE.match(body):
            lo = j + 1
            break
    return _frames(entries, lo, idx, source)


def frames_of(log: str) -> list[Frame]:
    """The frames of the last Python traceback in ``log`` (of every frame, when it prints no header)."""
    entries = _entries(log)
    for j in range(len(entries) - 1, -1, -1):
        if _TRACEBACK in entries[j][1]:
            return _frames(entries, j + 1, len(entries), entries[j][0])
    return _frames(entries, 0, len(entries), None)


def _is_loading(function: str) -> bool:
    return function in _LOADING or bool(_LOADING_NAME.search(function))


def _model_file(frames: list[Frame]) -> str | None:
    """The model source whose load_weights ran: the outermost one under models/, not vLLM's shared helpers."""
    model = [f.file for f in frames if f.function == "load_weights" and "/models/" in f.file
             and not f.file.endswith("/models/utils.py")]  # fmt: skip
    return model[0] if model else None


def _unraised_asserts(entries: list[tuple[str, str]]) -> list[tuple[int, re.Match]]:
    """``assert`` statements a traceback ends on with no exception line after them in their stream (the excerpt,
    or the stream, stops there; another record follows): the failing assert is itself the error."""
    found: list[tuple[int, re.Match]] = []
    for i, (src, body) in enumerate(entries):
        if not (m := _ASSERT_CODE.match(body)):
            continue
        before = [b for s, b in entries[:i] if s == src and b.strip() and not _CARETS.match(b)]
        if not before or not _FRAME.match(before[-1]):
            continue  # not the source line of a frame
        after = [b for s, b in entries[i + 1:] if s == src and b.strip() and not _CARETS.match(b)]
        rest = [b for b in after if not b[:1].isspace() or _RAISED_LINE.match(b) or _FRAME.match(b)]
        if not rest or not (_RAISED_LINE.match(rest[0]) or _FRAME.match(rest[0])):
            found.append((i, m))
    return found


def _weight_match(entries: list[tuple[str, str]]) -> tuple[str, re.Match, list[Frame]] | None:
    """The first loader failure in the log: (kind, the message's match, the frames of its traceback).

    The loaders' own messages are enough on their own; PyTorch's generic ones (a size mismatch in copy_, a KeyError,
    a bare AssertionError) count only when the traceback that raised them is inside a weight loader."""
    text = "\n".join(body for _, body in entries)
    starts = [0]
    for _, body in entries:
        starts.append(starts[-1] + len(body) + 1)
    kinds = (("default", _DEFAULT_LOADER), ("tried", _TRIED), ("replicated", _REPLICATED), ("state_dict", _STATE_DICT),
             ("param_data", _PARAM_DATA), ("tensor_size", _TENSOR_SIZE), ("expanded", _EXPANDED),
             ("key", _KEY_ERROR), ("assert", _BARE_ASSERT))  # fmt: skip
    for kind, pattern in kinds:
        for m in pattern.finditer(text):
            idx = bisect.bisect_right(starts, m.start()) - 1
            frames = _frames_before(entries, idx)
            raised = frames[-1] if frames else None
            loading = any(_is_loading(f.function) for f in frames)
            if kind in ("default", "tried", "replicated", "state_dict"):
                return kind, m, frames
            if kind in ("param_data", "tensor_size", "expanded") and loading:
                return kind, m, frames
            if kind == "key" and raised is not None and _is_loading(raised.function) and (
                "." in m.group(1) or "param" in (raised.code or "")
            ):
                return kind, m, frames
            if kind == "assert" and raised is not None and (
                raised.function in ("weight_loader", "default_weight_loader")
                or (_is_loading(raised.function) and re.search(r"\bshape\b|\bsize\(\)", raised.code or ""))
            ):
                return kind, m, frames
    for idx, m in _unraised_asserts(entries):
        frames = _frames_before(entries, idx + 1, entries[idx][0]) if idx + 1 < len(entries) else \
            _frames(entries, 0, idx + 1, entries[idx][0])
        raised = frames[-1] if frames else None
        if raised is not None and raised.code and (
            raised.function in ("weight_loader", "default_weight_loader")
            or (_is_loading(raised.function) and re.search(r"\bshape\b|\bsize\(\)", raised.code))
        ):
            return "assert", m, frames
    return None


def _weight_failure(entries: list[tuple[str, str]], draft: bool | None) -> Diagnosis | None:
    """A failure while the engine built or loaded the model's weights, by the loaders' own messages; the draft
    model's when its frames are the draft's and the launch loads one (``draft``: None when unknown)."""
    found = _weight_match(entries)
    if found is None:
        return None
    kind, m, frames = found
    d = Diagnosis(category="weight_shape_mismatch", summary="", frames=frames, evidence=[m.group(0)])
    if kind == "default":
        d.checkpoint_shape, d.checkpoint_dtype = _shape(m.group(1)), m.group(2)
        d.engine_shape, d.engine_dtype = _shape(m.group(3)), m.group(4)
    elif kind == "tried":
        d.checkpoint_shape, d.engine_shape = _shape(m.group(1)), _shape(m.group(2))
    elif kind == "replicated":
        d.engine_shape, d.engine_dtype = _shape(m.group(1)), m.group(2)
        d.checkpoint_shape, d.checkpoint_dtype = _shape(m.group(3)), m.group(4)
    elif kind == "param_data":
        d.engine_shape, d.checkpoint_shape = _shape(m.group(1)), _shape(m.group(2))
    elif kind in ("tensor_size", "expanded"):
        # copy_/assignment into the parameter: a (the target) is the engine's, b the checkpoint's; one dimension
        d.engine_shape, d.checkpoint_shape = [int(m.group(1))], [int(m.group(2))]
    elif kind == "state_dict":
        d.parameter, d.checkpoint_shape, d.engine_shape = m.group(1), _shape(m.group(2)), _shape(m.group(3))
    elif kind == "key":
        d.parameter = m.group(1)
    raised = frames[-1] if frames else None
    if raised is not None:
        d.loader = f"{raised.file}:{raised.line} {raised.function}"
        if kind == "assert" and raised.code:
            d.evidence = [raised.code, "AssertionError"]
    d.model_file = _model_file(frames)
    d.draft_model = draft is not False and any(_in_draft(f) for f in frames)
    d.component = "draft_model" if d.draft_model else "main_model"
    whose = "the draft model's" if d.draft_model else "the main model's"
    subject = f"{whose} {d.parameter}" if d.parameter else f"{whose} parameter the log does not name"
    shapes = ""
    if d.checkpoint_shape is not None:
        shapes = (f": checkpoint {d.checkpoint_dtype or ''} {d.checkpoint_shape} vs engine "
                  f"{d.engine_dtype or ''} {d.engine_shape}").replace("  ", " ")
    where = f" (raised in {d.loader})" if d.loader else ""
    d.summary = f"weight loading failed for {subject}{shapes}{where}"
    return d


def _flag_value_error(entries: list[tuple[str, str]]) -> Diagnosis | None:
    """The last configuration check that failed (a ValueError, or a pydantic ``Value error, ...`` under its
    ValidationError), as an invalid_flag when it names a server argument (a --flag, a parallel size, or the Python
    parameter behind a flag, tools/config_errors.py) or the argument checks raised it; None when the last such error
    is no configuration problem."""
    bodies = [body for _, body in entries]
    checks = [(idx, m.group(1), False) for idx, body in enumerate(bodies) if (m := _VALUE_ERROR.search(body))]
    checks += [(idx, message, True) for idx, message in config_errors.validation_messages(bodies)]
    if not checks:
        return None
    idx, message, pydantic = max(checks)
    if pydantic:  # the traceback ends at pydantic's own validator; the config class it validated says enough
        header = next(j for j in range(idx, -1, -1) if "validation error" in bodies[j])
        frames = _frames_before(entries, header)
        config_context, by_args = True, False
    else:
        frames = _frames_before(entries, idx)
        by_args = bool(frames) and frames[-1].file.endswith(_ARGS_FILES)
        config_context = by_args or (bool(frames) and config_errors.is_config_file(frames[-1].file))
    body = bodies[idx].strip()
    flag, value = _blamed_flag(message, config_context)
    if not (flag or pydantic):  # a message Python printed over several lines: the rest of it
        whole = _message_lines(entries, idx, message)
        flag, value = _blamed_flag(whole, config_context)
        body = body[: len(body) - len(message)] + whole if flag else body
    if not (flag or by_args):
        return None  # the last check that failed is no configuration problem
    return Diagnosis(category="invalid_flag", flag=flag, value=value, summary=f"rejected configuration: {body[-200:]}",
                     evidence=[body], frames=frames)  # fmt: skip


def _blamed_flag(message: str, config_context: bool) -> tuple[str | None, str | None]:
    """(the flag a refusal blames, the value it refuses): a --flag or parallel size it names, the Python parameter
    behind a flag (tools/config_errors.py), or a backend it refuses by its enum value."""
    if named := _FLAG_NAME.search(message):
        return (named.group(1) if named.group(1).startswith("--") else config_errors.as_flag(named.group(1))), None
    if parameter := config_errors.blamed_parameter(message, config_context=config_context):
        return config_errors.as_flag(parameter), None
    if (m := _BACKEND_VALUE.search(message)) and _REFUSAL.search(message):
        return config_errors.as_flag(re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1))), m.group(2)
    return None, None


def _message_lines(entries: list[tuple[str, str]], idx: int, first: str) -> str:
    """The message of the exception at ``entries[idx]`` with the lines it continues on (up to three of its stream's
    next lines, until a blank line, a traceback's own line or another exception)."""
    source, parts = entries[idx][0], [first]
    for src, body in entries[idx + 1 : idx + 4]:
        if (src != source or not body.strip() or _FRAME.match(body) or _CARETS.match(body) or _TRACEBACK in body
                or _EXCEPTION_LINE.match(body) or _RECORD_CONTINUES.match(body)):  # fmt: skip
            break
        parts.append(body.strip())
    return " ".join(parts)


def _allocation_phase(entries: list[tuple[str, str]], idx: int, line: str) -> MemoryPhase:
    """Whether the allocator's OOM at ``entries[idx]`` hit while the weights loaded, after (activations, graphs), or
    in a forward pass of a server at work: by the traceback that raised it, else by the last phase the log announced
    before it."""
    if re.search(r"\b[Ww]eights do not fit\b", line):
        return "weights"
    frames = _frames_before(entries, idx) or frames_of("\n".join(body for _, body in entries[: idx + 1]))
    if any(_CAPTURE_FRAME.search(f.function) or _CAPTURE_FRAME.search(f.file.rsplit("/", 1)[-1]) for f in frames):
        return "runtime"
    startup = any(_STARTUP_FRAME.search(f.function) for f in frames)
    if not startup and (any(_SERVING_FRAME.match(f.function) for f in frames)
                        or any(_SERVING_LINE.search(body) for _, body in entries[:idx])):  # fmt: skip
        return "serving"
    if any(_is_loading(f.function) or "/model_loader/" in f.file for f in frames):
        return "weights"
    for _, body in reversed(entries[:idx]):
        if _WEIGHTS_BEGIN.search(body):
            return "weights"  # loading began and had not ended
        if _WEIGHTS_END.search(body) or _CAPTURE_BEGIN.search(body):
            return "runtime"
    return "runtime"


def _memory_failure(entries: list[tuple[str, str]], lines: list[str], frames: list[Frame]) -> Diagnosis | None:
    """An out-of-memory failure: the decisive line (the most specific message, its last occurrence), which memory
    ran out, and the static fraction the engine names."""
    for kind, pattern in _OOM_KINDS:
        hits = [i for i, (_, body) in enumerate(entries) if pattern.search(body)]
        if not hits:
            continue
        if kind == "allocator":  # the allocator's own message ("Tried to allocate ...") over lines that mention it
            hits = [i for i in hits if "Tried to allocate" in entries[i][1]] or hits
        idx = hits[-1]
        line = entries[idx][1].strip()
        if kind == "capture":
            phase: MemoryPhase = "runtime"
        elif kind == "allocator":
            phase = "startup_kv" if "increase --mem-fraction-static" in line else _allocation_phase(entries, idx, line)
        else:
            phase = kind  # type: ignore[assignment]
        d = Diagnosis(category="out_of_memory", summary=f"out of memory: {line[:300]}", memory_phase=phase,
                      evidence=_tail(lines, pattern), frames=frames)  # fmt: skip
        if m := _FRACTION_NAMED.search(line):
            d.mem_fraction_static = float(m.group(1))
        else:  # the value the engine resolved, from its ServerArgs line (an unset flag prints None there)
            for _, body in reversed(entries[:idx]):
                if "ServerArgs(" in body and (m := re.search(r"\bmem_fraction_static=(\d*\.?\d+)", body)):
                    d.mem_fraction_static = float(m.group(1))
                    break
        if m := _FRACTION_MIN.search(line):
            d.min_mem_fraction_static = float(m.group(1))
        if m := _OOM_FIGURES.search(line):
            d.tried_bytes = round(float(m.group(1)) * _SIZE_UNITS[m.group(2)])
            d.capacity_bytes = round(float(m.group(3)) * _SIZE_UNITS[m.group(4)])
            d.free_bytes = round(float(m.group(5)) * _SIZE_UNITS[m.group(6)])
        for _, body in reversed(entries[:idx]):
            if m := _RUNNING.search(body):
                d.running_requests = int(m.group(1) or m.group(2))
                break
        for _, body in entries[:idx]:
            if m := _AVAIL_BEFORE.search(body):
                d.avail_before_weights_gb = float(m.group(1))
                break
        for _, body in entries[:idx]:
            if m := _MAX_RUNNING.search(body):
                d.max_running_requests = int(m.group(1))
                break
        return d
    return None


def _worker_crash(entries: list[tuple[str, str]], lines: list[str], frames: list[Frame]) -> Diagnosis | None:
    """One worker of a multi-process engine died of a GPU runtime fault (its kernel faulted, or the runtime
    reported an illegal access): the fault's own line, and the engine's word that a worker is gone (the launcher
    naming the dead child, the scheduler's handler) or its workers' prefixes. A runtime fault in a program with no
    such structure is left unknown: nothing here says what to change."""
    fault = next((m for _, body in entries if (m := _RUNTIME_FAULT.search(body))), None)
    if fault is None:
        return None
    dead = next((m for _, body in entries if (m := _DEAD_CHILD.search(body))), None)
    engine = dead is not None or any(_WORKER_LINES.search(body) or _WORKER_STREAM.search(src) for src, body in entries)
    if not engine:
        return None
    d = Diagnosis(category="worker_crash", frames=frames, evidence=_tail(lines, _RUNTIME_FAULT, 1) + _tail(lines, _DEAD_CHILD, 1),
                  summary=f"a worker process died: {fault.group(1).strip()[:200]}")  # fmt: skip
    if dead is not None:
        d.worker, d.exit_code = dead.group(1), int(dead.group(2))
        d.summary = f"worker {d.worker} died (exit code {d.exit_code}): {fault.group(1).strip()[:200]}"
    return d


def _collective_failure(entries: list[tuple[str, str]], lines: list[str], frames: list[Frame]) -> Diagnosis | None:
    """A collective that failed: ranks that called different collectives (torch's own check), else the library's
    own words (an NCCL/RCCL error, a ProcessGroupNCCL work that failed or timed out, a WARN line reporting a
    failure)."""
    text = "\n".join(body for _, body in entries)
    if m := _COLLECTIVE_MISMATCH.search(text):
        return Diagnosis(category="collective_error", summary=f"ranks ran different collectives: {m.group(1)}",
                         evidence=_tail(lines, _COLLECTIVE_MISMATCH), frames=frames)  # fmt: skip
    if m := _COLLECTIVE.search(text):
        # the library's own words over the watchdog's report that a work failed
        specific = [x for x in _COLLECTIVE.finditer(text) if not x.group(1).startswith("failure detected")]
        m = specific[0] if specific else m
        return Diagnosis(category="collective_error", summary=f"collective communication error ({m.group(1)})",
                         evidence=_tail(lines, _COLLECTIVE), frames=frames, collective_library="rccl")  # fmt: skip
    warns = [w.group(0) for _, body in entries if (w := _COLLECTIVE_WARN.search(body)) and _WARN_FAILURE.search(w.group(1))]
    if warns:
        return Diagnosis(category="collective_error", summary=f"collective communication error ({warns[-1][:200]})",
                         evidence=warns[-3:], frames=frames, collective_library="rccl")  # fmt: skip
    return None


def _kernel_path(text: str, frames: list[Frame]) -> KernelPath | None:
    for where in [text] + [f"{f.function} {f.file.rsplit('/', 1)[-1]}" for f in reversed(frames)]:
        for path, words in _PATH_WORDS:
            if words.search(where):
                return path
    return None


def _platform_failure(entries: list[tuple[str, str]], lines: list[str], frames: list[Frame]) -> Diagnosis | None:
    """A failure of what the engine runs on (the Category notes), by the decisive line's own words: an op the kernel
    library lacks, a quantization scheme refused, the tokenizer, a graph capture the runtime refused, a kernel
    library with no kernel for the problem (its own message, or a refusal raised in its code)."""
    for _, body in entries:
        if m := _MISSING_OP.search(body):
            library, op = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            return Diagnosis(category="missing_op", library=library, symbol=op, frames=frames, evidence=[body.strip()],
                             summary=f"the installed {library} has no op {op}: {body.strip()[:200]}")  # fmt: skip
    for pattern, category in ((_QUANT_REFUSED, "unsupported_quantization"), (_TOKENIZER, "tokenizer_error"),
                              (_CAPTURE_REFUSED, "graph_capture_error")):  # fmt: skip
        hits = [(body, m) for _, body in entries if (m := pattern.search(body))]
        if not hits:
            continue
        body, m = hits[0]
        d = Diagnosis(category=category, frames=frames, evidence=_tail(lines, pattern),  # type: ignore[arg-type]
                      summary={"unsupported_quantization": "a quantization scheme this GPU or release cannot run",
                               "tokenizer_error": "the tokenizer failed",
                               "graph_capture_error": "the GPU runtime refused an operation during graph capture",
                               }[category] + f": {body.strip()[:240]}")  # fmt: skip
        if category == "unsupported_quantization":
            d.quantization = next((g for g in m.groups() if g), None)
        return d
    for i, (_, body) in enumerate(entries):
        m = _NO_KERNEL.search(body)
        raised = None
        if m is None and _EXCEPTION_LINE.match(body.lstrip()) and _REFUSAL.search(body):
            raised = _frames_before(entries, i)
            if not (raised and _KERNEL_LIBRARY.search(raised[-1].file)):
                continue
        elif m is None:
            continue
        raised = raised if raised is not None else _frames_before(entries, i)
        where = next((lib.group(1) for f in reversed(raised) if (lib := _KERNEL_LIBRARY.search(f.file))), None)
        library = "ck" if m is not None and m.group(0).startswith("device_gemm") else \
            {"composable_kernel": "ck", "ck_tile": "ck"}.get(where or "", where)  # fmt: skip
        d = Diagnosis(category="kernel_unavailable", library=library, frames=raised or frames, evidence=[body.strip()],
                      kernel=m.group(1) if m is not None else None, kernel_path=_kernel_path(body, raised),
                      summary=f"no kernel for this problem in {library or 'the kernel library'}: {body.strip()[:240]}")
        return d
    return None


def _blas_without_kernels(entries: list[tuple[str, str]], lines: list[str], frames: list[Frame]) -> Diagnosis | None:
    """hipBLASLt's or rocBLAS' kernel files for the GPU not found or not loadable, when nothing else failed and the
    library did not go on with another path."""
    hits = [i for i, (_, body) in enumerate(entries) if _BLAS_NO_KERNELS.search(body)]
    if not hits or any(_BLAS_FALLBACK.search(body) for _, body in entries[hits[0]:]):
        return None
    m = _BLAS_NO_KERNELS.search(entries[hits[-1]][1])
    assert m is not None
    target = next((g.group(1) for i in hits if (g := _GFX.search(entries[i][1]))), None)
    library = "rocblas" if m.group(1) == "rocBLAS" else "hipblaslt"  # rocblaslt is hipBLASLt's own name for itself
    return Diagnosis(category="kernel_unavailable", library=library, target=target, kernel_path="gemm", frames=frames,
                     evidence=_tail(lines, _BLAS_NO_KERNELS),
                     summary=f"{library} has no usable kernels{f' for {target}' if target else ''}: {m.group(0)[:200]}")


def classify(log: str, *, timed_out: bool = False, draft: bool | None = None) -> Diagnosis:
    """Classify a failed start (or a failing run) from its log text. ``draft``: whether the launch loads a draft
    model (speculative decoding with a draft), when the caller knows: a launch without one never fails in it."""
    d = _classify(log, timed_out=timed_out, draft=draft)
    if d.component is None:
        d.component = _component(d, draft)
    return d


def _component(d: Diagnosis, draft: bool | None) -> str | None:
    """Which part of the engine raised ``d``, from its category and its frames (``Diagnosis.component``)."""
    if d.category == "compile_error":
        return "kernel_build"
    if not d.frames:
        return None
    if draft is not False and any(_in_draft(f) for f in d.frames):
        return "draft_model"
    if any("/srt/models/" in f.file.replace("\\", "/") for f in d.frames):  # the release's model files
        return "main_model"
    if "/managers/" in d.frames[-1].file.replace("\\", "/"):
        return "scheduler"
    return None


def _classify(log: str, *, timed_out: bool, draft: bool | None) -> Diagnosis:
    lines = log.splitlines()
    entries = _entries(log)
    text = "\n".join(body for _, body in entries)  # the log without the launchers' line prefixes
    frames = frames_of(log)
    if (d := _weight_failure(entries, draft)) is not None:
        return d
    if m := _CLANG_MISSING.search(text) or _GCC_MISSING.search(text):
        return Diagnosis(category="compile_error", file=m.group(1), line=int(m.group(2)), header=m.group(3).strip(),
                         summary=f"{m.group(1)}:{m.group(2)}: missing header {m.group(3).strip()}",
                         evidence=[m.group(0)], frames=frames)  # fmt: skip
    if m := _UNDECLARED.search(text):
        return Diagnosis(category="compile_error", file=m.group(1), line=int(m.group(2)), symbol=m.group(4),
                         summary=f"{m.group(1)}:{m.group(2)}: {m.group(3)} '{m.group(4)}'",
                         evidence=[m.group(0)], frames=frames)  # fmt: skip
    if m := _COMPILE.search(text):
        return Diagnosis(category="compile_error", file=m.group(1), line=int(m.group(2)),
                         summary=f"compile error in {m.group(1)}:{m.group(2)}: {m.group(3)}", evidence=[m.group(0)],
                         frames=frames)  # fmt: skip
    if m := _DRIVER.search(text):
        target = _GFX.search(m.group(2))
        return Diagnosis(category="compile_error", target=target.group(1) if target else None,
                         summary=f"compiler driver error ({m.group(1)}): {m.group(2).strip()[:240]}",
                         evidence=_tail(lines, _DRIVER), frames=frames)  # fmt: skip
    if m := _ERRORS_GENERATED.search(text):
        target = _GFX.search(m.group(2) or "")
        return Diagnosis(category="compile_error", target=target.group(1) if target else None,
                         summary=f"{m.group(0).strip()} (the errors themselves are not in the log)",
                         evidence=_tail(lines, _ERRORS_GENERATED), frames=frames)  # fmt: skip
    if m := _PORT_TAKEN.search(text):
        return Diagnosis(category="port_in_use", summary=f"a port the server binds is taken by another process: "
                         f"{m.group(0).strip()}", evidence=_tail(lines, _PORT_TAKEN))  # fmt: skip
    if m := _ARGPARSE.search(text):
        flag = m.group(2) or m.group(3)
        return Diagnosis(category="invalid_flag", flag=flag, summary=f"invalid flag: {m.group(1)}", evidence=[m.group(0)])
    # the collective libraries' INFO lines are progress reports; nothing below may rest on them
    quiet = [(src, body) for src, body in entries if not _COLLECTIVE_INFO.search(body)]
    quiet_text = "\n".join(body for _, body in quiet)
    quiet_lines = [ln for ln in lines if not _COLLECTIVE_INFO.search(ln)]
    if (d := _platform_failure(quiet, quiet_lines, frames)) is not None:
        return d
    if (d := _worker_crash(quiet, quiet_lines, frames)) is not None:
        return d  # before what the dead worker's peers then report (a collective that lost a rank, a watchdog)
    if (d := _memory_failure(quiet, quiet_lines, frames)) is not None:
        return d
    if (d := _collective_failure(quiet, quiet_lines, frames)) is not None:
        return d
    if m := _HANG.search(quiet_text) or _PG_WATCHDOG_HANG.search(quiet_text):
        return Diagnosis(category="hang_timeout", summary=f"the engine stopped making progress: {m.group(1)}",
                         evidence=_tail(quiet_lines, m.re), frames=frames)  # fmt: skip
    if (d := _flag_value_error(quiet)) is not None:
        return d
    if (d := _blas_without_kernels(quiet, quiet_lines, frames)) is not None:
        return d
    if timed_out:
        return Diagnosis(category="hang_timeout", summary="the server did not become ready before the timeout",
                         evidence=quiet_lines[-3:] or lines[-3:])  # fmt: skip
    # the exception or runtime-abort line itself, else any line that mentions an error; a bare AssertionError says
    # nothing without the assert statement it stopped at
    err = [i for i, (_, body) in enumerate(quiet) if _ERROR_LINE.search(body)] or [
        i for i, (_, body) in enumerate(quiet) if re.search(r"Error|[Ee]xception|error:", body)
    ]
    summary = quiet[err[-1]][1].strip() if err else "no error line found"
    if err and _BARE_ASSERT.match(summary) and (raised := _frames_before(quiet, err[-1])) and raised[-1].code:
        summary = f"{summary} at {raised[-1].file}:{raised[-1].line} {raised[-1].function}: {raised[-1].code}"
    return Diagnosis(category="unknown", summary=summary[:300], evidence=[quiet[i][1] for i in err[-3:]],
                     frames=frames)  # fmt: skip


def moe_fallbacks(log: str) -> list[MoEShape]:
    """MoE shapes that ran aiter's untuned default path, deduplicated, from its ``[fused_moe] using ... default for
    (...)`` lines and untuned notices in any format aiter has printed (tools/moe_lines.py). Lines of no known
    format are left out here; ``moe_lines.unparsed_lines(log)`` lists them. Lines are read through their prefixes
    and a terminal's wraps (tools/log_lines.py): a key tuple cut at the screen's width is one line again."""
    from .moe_lines import untuned_shapes  # moe_lines imports MoEShape from here

    return untuned_shapes("\n".join(body for _, body in _entries(log) if _FALLBACK.search(body)))


def workspace_relative(ctx: ToolContext, d: Diagnosis) -> Diagnosis:
    """Point file paths in a diagnosis at the workspace (the paths the source tools take).

    A path under the sandbox is made relative to it; a path of an installed SGLang tree elsewhere (for example
    ``/sgl-workspace/sglang/python/sglang/...`` in the ROCm image) is mapped onto the workspace's own copy.
    """
    roots = {str(ctx.sandbox.root.resolve()).rstrip("/") + "/", ctx.sandbox.command_root.rstrip("/") + "/"}

    def rel(path: str | None) -> str | None:
        if not path:
            return path
        for root in roots:
            if path.startswith(root):
                return path[len(root):]
        for repo in ctx.repos:
            for marker in (f"/{repo}/", "/python/"):
                cut = path.rfind(marker)
                if cut >= 0:
                    tail = path[cut + len(marker):] if marker != "/python/" else "python/" + path[cut + 8:]
                    candidate = f"{repo}/{tail}"
                    try:
                        if ctx.sandbox.resolve(candidate).is_file():
                            return candidate
                    except Exception:  # a path the sandbox refuses is not the workspace's
                        pass
        return path

    d.file = rel(d.file)
    d.model_file = rel(d.model_file)
    if d.loader:
        where, _, func = d.loader.partition(" ")
        path, _, line = where.rpartition(":")
        d.loader = f"{rel(path)}:{line} {func}".rstrip()
    for f in d.frames:
        f.file = rel(f.file) or f.file
    for root in roots:
        d.summary = d.summary.replace(root, "")
        d.evidence = [line.replace(root, "") for line in d.evidence]
    return d


class DiagnoseInput(ToolInput):
    log_path: str | None = Field(None, description="a log under the run directory; default: the last server log")
    text: str | None = Field(None, description="log text to classify instead of a file")


class DiagnoseResult(ToolResult):
    diagnosis: Diagnosis
    moe_fallback_shapes: list[MoEShape] = []


@tool(idempotent=True)
def diagnose_crash(ctx: ToolContext, args: DiagnoseInput) -> DiagnoseResult:
    """Classify why the engine failed (weight shape mismatch, compile error, out of memory, invalid flag,
    hang, collective error, port in use, crashed worker, a kernel library without a kernel for the problem, an
    unsupported quantization, a missing op, a refused graph capture, a tokenizer failure, unknown) and extract the
    parameter, shapes, file, line, header, flag or refused value, gfx target, library and kernel path."""
    text = args.text
    if text is None:
        path = ctx.run_dir / args.log_path if args.log_path else ctx.last_log
        if path is None or not path.exists():
            return DiagnoseResult(ok=False, summary="no server log yet: launch first",
                                  diagnosis=Diagnosis(category="unknown", summary="no log"))  # fmt: skip
        text = path.read_text(errors="replace")
    d = workspace_relative(ctx, classify(text))
    return DiagnoseResult(summary=d.summary, diagnosis=d, moe_fallback_shapes=moe_fallbacks(text))
