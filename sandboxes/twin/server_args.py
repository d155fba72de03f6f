"""SGLang's ``launch_server`` command line, as the twin accepts it.

Flag names, types, choices and defaults follow SGLang's ``ServerArgs`` (0.5.x). ``None`` defaults are
resolved the way SGLang resolves them for GPUs with more than 160 GB (chunked prefill 16384, CUDA-graph
batch sizes up to 512). An unknown flag or a bad value fails exactly as argparse does: usage, message, exit 2.
Consistency problems that SGLang finds after parsing raise ``ServerArgsError`` at start-up.
"""

from __future__ import annotations

import argparse
from typing import Any

KV_CACHE_DTYPES = ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]
SPECULATIVE_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
ATTENTION_BACKENDS = [
    "triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla",
    "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
]  # fmt: skip
MOE_RUNNER_BACKENDS = [
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_trtllm_routed",
    "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass",
]  # fmt: skip
CUDA_ONLY_ATTENTION = {"fa3", "fa4", "flashinfer", "flashmla", "cutlass_mla", "trtllm_mla", "trtllm_mha"}
CUDA_ONLY_MOE = {"deep_gemm", "flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutlass",
                 "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass"}  # fmt: skip

DEFAULT_CHUNKED_PREFILL = 16384
DEFAULT_CUDA_GRAPH_MAX_BS = 512
DEFAULT_MEM_FRACTION = 0.90


class ServerArgsError(ValueError):
    """A combination of flags SGLang rejects at start-up."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m sglang.launch_server")
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", type=str, required=True,
      help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.")
    a("--sglang-root", type=str, default=None,
      help="(twin) The SGLang source tree whose mechanisms the engine runs; defaults to ../sglang.")
    a("--tokenizer-path", type=str, default=None)
    a("--served-model-name", type=str, default=None)
    a("--trust-remote-code", action="store_true")
    a("--host", type=str, default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    a("--enable-dp-attention", action="store_true")
    a("--quantization", type=str, default=None)
    a("--kv-cache-dtype", type=str, default="auto", choices=KV_CACHE_DTYPES)
    a("--context-length", type=int, default=None)
    a("--mem-fraction-static", type=float, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--max-total-tokens", type=int, default=None)
    a("--chunked-prefill-size", type=int, default=None)
    a("--max-prefill-tokens", type=int, default=16384)
    a("--enable-mixed-chunk", action="store_true")
    a("--page-size", type=int, default=None)
    a("--cuda-graph-max-bs", type=int, default=None)
    a("--disable-cuda-graph", action="store_true")
    a("--disable-radix-cache", action="store_true")
    a("--attention-backend", type=str, default=None, choices=ATTENTION_BACKENDS)
    a("--moe-runner-backend", type=str, default="auto", choices=MOE_RUNNER_BACKENDS)
    a("--speculative-algorithm", type=str, default=None, choices=SPECULATIVE_ALGORITHMS)
    a("--speculative-draft-model-path", type=str, default=None)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-num-draft-tokens", type=int, default=None)
    a("--enable-aiter-allreduce-fusion", action="store_true")
    a("--random-seed", type=int, default=None)
    a("--log-level", type=str, default="info")
    a("--watchdog-timeout", type=float, default=300)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse like SGLang (argparse exits 2 on unknown flags and bad values), then resolve defaults."""
    args = build_parser().parse_args(argv)
    resolve_defaults(args)
    check(args)
    return args


def resolve_defaults(args: argparse.Namespace) -> None:
    if args.chunked_prefill_size is None:
        args.chunked_prefill_size = DEFAULT_CHUNKED_PREFILL
    if args.cuda_graph_max_bs is None:
        args.cuda_graph_max_bs = DEFAULT_CUDA_GRAPH_MAX_BS
    if args.mem_fraction_static is None:
        args.mem_fraction_static = DEFAULT_MEM_FRACTION
    if args.page_size is None:
        args.page_size = 1
    if args.attention_backend is None:
        args.attention_backend = "aiter"
    if args.speculative_algorithm == "NEXTN":
        args.speculative_algorithm = "EAGLE"
    if args.speculative_algorithm and args.speculative_num_steps is None:
        if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None:
            raise ServerArgsError(
                "speculative_eagle_topk and speculative_num_draft_tokens must be None when "
                "speculative_num_steps is None"
            )
        args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = 3, 1, 4
    if args.speculative_algorithm:
        if args.speculative_eagle_topk is None:
            args.speculative_eagle_topk = 1
        if args.speculative_eagle_topk == 1 or args.speculative_num_draft_tokens is None:
            args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    if args.kv_cache_dtype == "bfloat16":
        args.kv_cache_dtype = "bf16"
    if args.enable_dp_attention and args.dp_size == 1:
        args.enable_dp_attention = False


def check(args: argparse.Namespace) -> None:
    """The checks SGLang makes after parsing that do not depend on the hardware."""
    if args.tp_size < 1 or args.dp_size < 1:
        raise ServerArgsError("tp_size and dp_size must be positive")
    if args.enable_dp_attention and args.tp_size % args.dp_size != 0:
        raise ServerArgsError(f"tp_size ({args.tp_size}) must be divisible by dp_size ({args.dp_size})")
    if args.speculative_algorithm and args.enable_mixed_chunk:
        raise ServerArgsError("enable_mixed_chunk is required for speculative decoding")
    if args.speculative_algorithm and args.speculative_num_steps < 1:
        raise ServerArgsError("speculative_num_steps must be at least 1")
    if args.chunked_prefill_size > 0 and args.chunked_prefill_size % args.page_size != 0:
        raise ServerArgsError("chunked_prefill_size must be divisible by page_size")
    if not 0.0 < args.mem_fraction_static < 1.0:
        raise ServerArgsError(f"mem_fraction_static must be in (0, 1), got {args.mem_fraction_static}")
    if args.max_running_requests is not None and args.max_running_requests < 1:
        raise ServerArgsError("max_running_requests must be positive")
    if args.speculative_algorithm and args.speculative_eagle_topk > 1 and args.page_size > 1:
        raise ServerArgsError(
            "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for "
            "paged attention backends. This combination is only supported for the 'flashinfer' backend."
        )


def check_platform(args: argparse.Namespace, num_gpus: int) -> None:
    """Checks against the node: GPU count and ROCm-only kernels."""
    used = args.tp_size if args.enable_dp_attention else args.tp_size * args.dp_size
    if used > num_gpus:
        raise ServerArgsError(
            f"tp_size * dp_size = {used} GPUs requested but only {num_gpus} are visible "
            "(HIP_VISIBLE_DEVICES). Reduce --tp-size or --dp-size."
        )
    if args.attention_backend in CUDA_ONLY_ATTENTION:
        raise ServerArgsError(f"attention backend {args.attention_backend!r} is not supported on ROCm (HIP)")
    if args.moe_runner_backend in CUDA_ONLY_MOE:
        raise ServerArgsError(f"MoE runner backend {args.moe_runner_backend!r} requires CUDA; not available on ROCm")


def as_dict(args: argparse.Namespace) -> dict[str, Any]:
    return dict(vars(args))
