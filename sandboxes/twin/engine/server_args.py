"""SGLang's ``launch_server`` command line as the release parses it, and the defaults the pinned release resolves.

The command line is parsed by the release's own parser (``parse``, ``build_parser``): ``ServerArgs.add_cli_args``
of the workspace's ``python/sglang/srt/server_args.py`` (``--sglang-root``, else ``sglang/`` beside the model;
the pinned release from the per-user cache when there is no workspace tree), run as written by
``release_cli``. So every flag, alias, type, choice and default is the release's, an unknown flag or a bad value
fails exactly as the release's argparse does (usage, message, exit 2), and the release's own ``from_cli_args``
names the fields (``--tp-size`` is ``tp_size``). The one flag SGLang does not have is the twin's ``--sglang-root``.
A flag the twin does not model is accepted and reported (``CommandLine.unmodelled``, ``MODELLED_ARGS``).

``None`` defaults are resolved afterwards by ``resolve``, the way ``ServerArgs.__post_init__`` of the pinned
release (SGLang 0.5.12, ``python/sglang/srt/server_args.py``; "sa:N" below is a line of that file) resolves
them on a ROCm/HIP node: it needs what SGLang asks the device and the model, so the launcher calls it once the
workspace and its scenario are known (``Platform``: per-GPU memory and gfx architecture from the scenario;
``ModelInfo``: ``config.json``). Each ``handle_*`` step below mirrors the release's method of the same name,
in the release's order, keeps only what changes performance or memory in the twin's model, and logs the
release's own warning lines verbatim. ``tests/twin/test_server_args_drift.py`` runs the release's methods
next to these and fails when they drift apart.

Consistency problems SGLang finds while resolving raise ``InvalidServerArgs`` (the launcher prints them the
way a ``ValueError``/``AssertionError`` in ``ServerArgs.__post_init__`` ends SGLang's traceback);
``check_platform`` raises ``ServerArgsError`` for what only fails on the node (GPU count, CUDA-only kernels).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import release_cli

RELEASE = "0.5.12"  # the release whose ServerArgs.__post_init__ this module follows

CUDA_ONLY_ATTENTION = {"fa3", "fa4", "flashinfer", "flashmla", "cutlass_mla", "trtllm_mla", "trtllm_mha"}
CUDA_ONLY_MOE = {"deep_gemm", "flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutlass",
                 "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass"}  # fmt: skip

# --- the release's constants (tests/twin/test_server_args_drift.py compares each with the real source) ---------

# gpu_mem is in MiB (get_amdgpu_memory_capacity: rocminfo pool size / 1024); the thresholds are N * 1024
MIB = 1024
# _handle_gpu_memory_settings (sa:1424-1488): (gpu_mem below, chunked_prefill_size, cuda_graph_max_bs when
# tp_size < 4, when tp_size >= 4); the last tier (None) is everything from 160 GiB up (B200, MI300X, MI355X).
GPU_MEMORY_TIERS: list[tuple[int | None, int, int, int]] = [
    (20 * MIB, 2048, 8, 8),
    (35 * MIB, 2048, 24, 80),
    (60 * MIB, 4096, 32, 160),
    (90 * MIB, 8192, 256, 512),
    (160 * MIB, 8192, 256, 512),
    (None, 16384, 512, 512),
]
GRAPH_BS_LARGE_TP = 4  # "cuda_graph_max_bs ... if tp < 4 else ..."
UNKNOWN_GPU_MEMORY_DEFAULTS = (4096, 160)  # gpu_mem is None (sa:1484-1488)
# the reserved-memory estimate behind the default mem_fraction_static (sa:1540-1589), MiB
RESERVED_BASE_MIB = 512  # "Constant meta data (e.g., from attention backend)"
RESERVED_PER_PREFILL_TOKEN = 1.5  # activations: max(chunked_prefill_size, 2048) * 1.5
RESERVED_MIN_PREFILL_TOKENS = 2048
RESERVED_PER_GRAPH_BS = 2  # cuda graphs: cuda_graph_max_bs * 2
RESERVED_PER_TP_PP_OVER_8 = 1024  # tp_size * pp_size / 8 * 1024
RESERVED_DP_ATTN_PER_GRAPH_BS_DP = 3  # cuda_graph_max_bs * dp_size * 3
RESERVED_DP_ATTN_LARGE_GRAPH_BS = 300  # above this cuda_graph_max_bs ...
RESERVED_DP_ATTN_LARGE_PER_GRAPH_BS_DP = 1.5  # ... another cuda_graph_max_bs * dp_size * 1.5
RESERVED_PIECEWISE_PER_TOKEN_SIZE = 8  # piecewise graphs (not MLA): len(piecewise_cuda_graph_tokens) * 8
RESERVED_PIECEWISE_MLA_MIB = 1.5 * 1024  # piecewise graphs with an MLA backend
RESERVED_FLOOR_ABOVE_MIB = 60 * 1024  # on GPUs above 60 GiB ...
RESERVED_FLOOR_MIB = 10 * 1024  # ... at least 10 GiB is kept outside the static pool
RESERVED_SPEC_STANDALONE_MIB = 6 * 1024  # standalone draft model and its graphs
RESERVED_SPEC_EAGLE_MIB = 4 * 1024  # EAGLE/EAGLE3 (MTP) draft and its graphs; NGRAM has no draft model
MEM_FRACTION_DIGITS = 3  # round((gpu_mem - reserved_mem) / gpu_mem, 3)
UNKNOWN_GPU_MEM_FRACTION = 0.88
PIECEWISE_MLA_MAX_TOKENS = 2048  # sa:1520-1521
AITER_LONG_CONTEXT = 8192  # sa:2805-2807: attention_backend == "aiter" and context_len > 8192 ...
AITER_LONG_CONTEXT_MEM_FACTOR = 0.85  # ... mem_fraction_static *= 0.85 (also when given on the command line)
SPEC_MAX_RUNNING_REQUESTS = 48  # sa:3742-3746 (EAGLE, EAGLE3, STANDALONE), sa:3852-3856 (NGRAM)
SPEC_MAX_RUNNING_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. "
    "You can override this by explicitly setting --max-running-requests."
)
DP_ATTN_CHUNK_WARNING = (  # sa:3071-3073, the trailing space included
    "DP attention is enabled. The chunked prefill size is adjusted to {chunked_prefill_size} to avoid MoE kernel issues. "
)
NGRAM_DEFAULT_DRAFT_TOKENS = 12  # sa:3862
NGRAM_MAX_BFS_BREADTH = 10  # ServerArgs.speculative_ngram_max_bfs_breadth (sa:602), becomes the topk
DEFAULT_SPEC_PARAMS = (3, 1, 4)  # auto_choose_speculative_params (sa:7929) for every architecture but these:
SPEC_PARAMS_BY_ARCH = {
    "LlamaForCausalLM": (5, 4, 8),
    "Grok1ForCausalLM": (5, 4, 8),
    "Grok1VForCausalLM": (5, 4, 8),
}
DP_ATTN_SCHEDULE_CONSERVATIVENESS = 0.3  # sa:3068
AITER_MLA_HEADS_PER_GPU = (128, 16)  # _get_default_attn_backend (sa:2635-2640): aiter MLA, else triton

# --- which architectures the release treats how (copied from the release, checked by the drift test) ----------

# configs/model_config.py:599-619 and the elif branches after it: attention_arch = AttentionArch.MLA
MLA_ARCHITECTURES = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV3ForCausalLMNextN",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN",
    "DotsVLMForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration",
    "MistralLarge3ForCausalLMEagle", "KimiK25ForConditionalGeneration", "Eagle3DeepseekV2ForCausalLM",
    "MiniCPM3ForCausalLM", "DeepseekVL2ForCausalLM", "KimiVLForConditionalGeneration", "KimiLinearForCausalLM",
    "BailingMoeV2_5ForCausalLM", "BailingMoeForCausalLMNextN", "SarvamMLAForCausalLM",
})  # fmt: skip
# configs/model_config.py:102-114 is_deepseek_nsa: one of these with an index_topk in config.json (DSA)
NSA_ARCHITECTURES = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN", "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
})  # fmt: skip
# sa:1786-1793: the DeepSeek branch of _handle_model_specific_adjustments (DSA, NSA backend, page size, ...)
DEEPSEEK_ARCHITECTURES = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
    "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
})  # fmt: skip
# sa:3781-3794: MTP models whose draft is the model itself (speculative_draft_model_path defaults to model_path)
MTP_SELF_DRAFT_ARCHITECTURES = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
})  # fmt: skip

# --- what the twin decides where the release has nothing to say ------------------------------------------------

# The twin's fictional models (Orion, Vega) are DeepSeek-style MLA MoE models that 0.5.12 does not know. A
# release that served them would list them beside their closest relative (as it lists GlmMoeDsaForCausalLM
# beside DeepSeek V3.2), so an architecture the release does not know, whose config.json has a kv_lora_rank,
# is resolved as this stand-in: the DSA one when config.json has an index_topk, the MLA one otherwise.
UNKNOWN_MLA_ARCHITECTURE_STANDIN = {"dsa": "DeepseekV32ForCausalLM", "mla": "DeepseekV3ForCausalLM"}
# What the SGLang ROCm image (lmsysorg/sglang:v0.5.12-rocm700-mi35x) changes, where a scenario might one day
# say otherwise: its Dockerfile exports SGLANG_USE_AITER=1 (os.environ still wins), and its ROCm 7.0 base
# ships Triton 3.4, below the 3.5.0 that aiter's preshuffle paged-MQA kernel needs: DSA models get page size 1.
ROCM_IMAGE_ENV = {"SGLANG_USE_AITER": "1"}
ROCM_IMAGE_TRITON_VERSION = "3.4.0"
# ServerArgs fields the twin resolves or reads, with the release's defaults (sa:340-850), for arguments made
# without the release's parser (``device``: what _handle_missing_default_values makes of its None).
INTERNAL_DEFAULTS: dict[str, Any] = {
    "pp_size": 1,
    "nnodes": 1,
    "device": "cuda",  # get_device() on ROCm: torch's HIP build answers as "cuda"
    "prefill_attention_backend": None,
    "decode_attention_backend": None,
    "nsa_prefill_backend": None,
    "nsa_decode_backend": None,
    "disable_piecewise_cuda_graph": False,
    "piecewise_cuda_graph_max_tokens": None,
    "schedule_conservativeness": 1.0,
    "speculative_draft_model_revision": None,
    "speculative_ngram_max_bfs_breadth": NGRAM_MAX_BFS_BREADTH,
}

Log = Callable[[str, str], None]  # (level, message)


class ServerArgsError(ValueError):
    """A combination of flags SGLang rejects."""

    kind = "ValueError"


class InvalidServerArgs(ServerArgsError):
    """Raised while resolving (``ServerArgs.__post_init__``), before any scheduler exists; ``kind`` is the
    exception type SGLang raises there (``ValueError``, ``AssertionError``, ``RuntimeError``)."""

    def __init__(self, message: str, kind: str = "ValueError"):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Platform:
    """What ``ServerArgs`` asks the device on a ROCm node."""

    gpu_memory_mib: float | None  # get_device_memory_capacity(): the smallest GPU, MiB
    device_capability: tuple[int, int]  # torch.cuda.get_device_capability(): gfx950 -> (9, 5)

    @classmethod
    def from_hardware(cls, hardware: Any) -> Platform:
        return cls(
            gpu_memory_mib=float(hardware.memory_gb) * MIB,
            device_capability=gfx_capability(hardware.gfx_arch),
        )


def gfx_capability(gfx_arch: str) -> tuple[int, int]:
    """HIP's (major, minor) for a gfx target, as torch reports it: gfx942 -> (9, 4), gfx950 -> (9, 5)."""
    digits = gfx_arch.lower().removeprefix("gfx")
    try:
        return int(digits[:-2]), int(digits[-2], 16)
    except (ValueError, IndexError):
        return 9, 0


@dataclass(frozen=True)
class ModelInfo:
    """What ``ServerArgs`` reads from the model's ``config.json`` (``ModelConfig``)."""

    architecture: str  # config.json architectures[0]
    effective_architecture: str  # what the release's architecture lists are checked with (see the stand-in)
    attention_arch: str  # "MLA" or "MHA"
    index_topk: int | None
    total_num_kv_heads: int
    context_len: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context_length: int | None = None) -> ModelInfo:
        archs = config.get("architectures") or [""]
        arch = str(archs[0])
        effective = arch
        known = (
            arch
            in MLA_ARCHITECTURES | NSA_ARCHITECTURES | DEEPSEEK_ARCHITECTURES | MTP_SELF_DRAFT_ARCHITECTURES
        )
        if not known and config.get("kv_lora_rank") is not None:
            effective = UNKNOWN_MLA_ARCHITECTURE_STANDIN[
                "dsa" if config.get("index_topk") is not None else "mla"
            ]
        heads = config.get("num_attention_heads") or 1
        kv_heads = next((config[k] for k in ("n_head_kv", "num_kv_heads", "num_key_value_heads",
                                              "multi_query_group_num", "num_attention_groups")
                         if config.get(k) is not None), heads)  # fmt: skip
        return cls(
            architecture=arch,
            effective_architecture=effective,
            attention_arch="MLA" if effective in MLA_ARCHITECTURES else "MHA",
            index_topk=config.get("index_topk"),
            total_num_kv_heads=int(kv_heads),
            context_len=int(context_length or config.get("max_position_embeddings") or 131072),
        )

    @property
    def use_mla(self) -> bool:
        return self.attention_arch == "MLA"

    @property
    def is_deepseek_nsa(self) -> bool:
        return self.effective_architecture in NSA_ARCHITECTURES and self.index_topk is not None

    def get_num_kv_heads(self, tp_size: int) -> int:
        return max(1, self.total_num_kv_heads // tp_size)


# --- the command line: the release's own parser -----------------------------------------------------------------

TWIN_ONLY_HELP = ("(twin only: SGLang has no such flag) The SGLang source tree whose mechanisms the engine runs, "
                  "and whose server_args.py parses this command line; defaults to ../sglang beside the model.")  # fmt: skip
RELEASE_SERVER_ARGS = f"python/{release_cli.FILE}"  # under a workspace's sglang/ tree


class ReleaseSourceMissing(ServerArgsError):
    """No release source to read the command line with: neither a workspace tree nor the cached release."""

    kind = "FileNotFoundError"


def _tree_arguments(argv: list[str]) -> tuple[str | None, str | None]:
    """``--sglang-root`` and ``--model-path`` as given (before the release's parser exists)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    pre.add_argument("--sglang-root")
    pre.add_argument("--model-path", "--model")
    try:
        known, _ = pre.parse_known_args(argv)
    except argparse.ArgumentError:
        return None, None
    return known.sglang_root, known.model_path


def release_root(argv: list[str] | None = None) -> Path:
    """The python root (the folder holding ``sglang/``) of the release whose ``server_args.py`` parses
    ``argv``: the workspace's (``--sglang-root``, else ``sglang/`` beside the model, as ``find_workspace``
    looks), else the pinned release ``RELEASE`` from the per-user cache (downloaded as a workspace's is). Raises
    ``ReleaseSourceMissing`` with one line saying what is missing."""
    sglang_root, model_path = _tree_arguments(list(argv or []))
    candidates = [Path(sglang_root)] if sglang_root else []
    if model_path:
        candidates.append(Path(model_path).parent / "sglang")
    for root in candidates:
        if (root / RELEASE_SERVER_ARGS).is_file():
            return root / "python"
    from ..workspace.release import release_tree

    tree = release_tree(RELEASE)
    if not hasattr(tree, "root") or not (tree.root / release_cli.FILE).is_file():  # Unavailable
        where = " or ".join(str(r / RELEASE_SERVER_ARGS) for r in candidates) or "no workspace tree"
        raise ReleaseSourceMissing(
            f"cannot read SGLang's server arguments: no {where}, and the pinned SGLang {RELEASE} is not available "
            f"({getattr(tree, 'reason', 'no server_args.py in it')}); python -m sandboxes.twin.workspace.release "
            f"{RELEASE} fetches it"
        )  # fmt: skip
    return tree.root


def release_command_line(python_root: Path) -> release_cli.ReleaseCli:
    """The release's command line of the tree at ``python_root`` (``release_cli.load``; ``ServerArgsError``)."""
    try:
        return release_cli.load(python_root)
    except FileNotFoundError as exc:
        raise ReleaseSourceMissing(f"cannot read SGLang's server arguments: {exc}") from None
    except release_cli.ReleaseCliError as exc:
        raise ServerArgsError(f"cannot read SGLang's server arguments from {exc.path}: {exc}") from None


def build_parser(python_root: Path | None = None) -> argparse.ArgumentParser:
    """The release's own ``launch_server`` parser (``prepare_server_args``: every flag, alias, type, choice and
    default of its ``ServerArgs.add_cli_args``), from the tree at ``python_root`` (default: the pinned
    release), plus the twin's own ``--sglang-root``."""
    cli = release_command_line(python_root if python_root is not None else release_root())
    return _with_twin_flags(cli.parser())


def _with_twin_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--sglang-root", type=str, default=None, help=TWIN_ONLY_HELP)
    return parser


@dataclass
class CommandLine:
    """A parsed command line: ``args`` has every ``ServerArgs`` field of the release (``from_cli_args``) and
    the twin's ``sglang_root``; ``defaults`` and ``options`` are each field's release default and flag."""

    args: argparse.Namespace
    defaults: dict[str, Any]
    options: dict[str, str]
    source: Path  # the server_args.py whose parser parsed it

    def changed(self) -> dict[str, Any]:
        """The fields whose parsed value is not the release's default (what the command line set)."""
        values = vars(self.args)
        return {k: values[k] for k, d in self.defaults.items() if k in values and values[k] != d}

    def unmodelled(self, modelled: Iterable[str]) -> dict[str, Any]:
        """The flags set to other than their default that nothing in the twin reads (``modelled``: the field
        names it does), flag -> value: accepted, and without simulated effect."""
        known = set(modelled)
        return {self.options.get(k, "--" + k.replace("_", "-")): v for k, v in self.changed().items()
                if k not in known}  # fmt: skip


def parse_command_line(argv: list[str]) -> CommandLine:
    """Parse ``argv`` as the release does (``prepare_server_args``): ``--config`` merged by its own merger, its
    parser's errors exactly as argparse prints them (usage, message, exit 2), then ``from_cli_args``'s renames
    (``tensor_parallel_size`` -> ``tp_size``). Raises ``ServerArgsError`` when there is no release to read."""
    root = release_root(argv)
    cli = release_command_line(root)
    parser = _with_twin_flags(cli.parser())
    try:
        argv = cli.merge_config(parser, list(argv))
    except release_cli.ReleaseCliError as exc:
        raise ServerArgsError(str(exc)) from None
    except Exception as exc:  # the release's merger refusing the file (its ValueError, yaml's errors)
        raise InvalidServerArgs(str(exc), type(exc).__name__) from None
    raw = parser.parse_args(argv)
    values = cli.server_args(raw)
    for name in MODELLED_ARGS - values.keys():  # a field an older release does not have: its feature is absent
        values[name] = None
    values["sglang_root"] = raw.sglang_root
    return CommandLine(args=argparse.Namespace(**values), defaults=cli.defaults(), options=cli.option_of(),
                       source=cli.source)  # fmt: skip


def parse(argv: list[str]) -> argparse.Namespace:
    """``parse_command_line(argv).args``. Defaults the release resolves later stay ``None`` until ``resolve``
    knows the node and the model."""
    return parse_command_line(argv).args


# The ServerArgs fields the twin's own code reads: what a flag can change in the simulation. Everything else the
# release accepts is accepted too, and reported as having no simulated effect (``CommandLine.unmodelled``; a
# scenario's JIT kernels and injected faults may name more: ``launch_server.modelled_args``).
# tests/twin/test_release_flags.py reads the twin's code and fails when this drifts from what it reads.
MODELLED_ARGS = frozenset({
    # resolve (ServerArgs.__post_init__) and check
    "attention_backend", "chunked_prefill_size", "cuda_graph_max_bs", "decode_attention_backend", "device",
    "disable_cuda_graph", "disable_overlap_schedule", "disable_piecewise_cuda_graph", "disable_radix_cache",
    "dp_size", "enable_dp_attention", "enable_mixed_chunk", "kv_cache_dtype", "max_prefill_tokens",
    "max_running_requests", "max_total_tokens", "mem_fraction_static", "model_path", "moe_runner_backend",
    "nnodes", "nsa_decode_backend", "nsa_prefill_backend", "page_size", "piecewise_cuda_graph_max_tokens",
    "pp_size", "prefill_attention_backend", "schedule_conservativeness", "speculative_algorithm",
    "speculative_draft_model_path", "speculative_eagle_topk", "speculative_ngram_max_bfs_breadth",
    "speculative_num_draft_tokens", "speculative_num_steps", "tp_size",
    # the launcher: the workspace, the release's ModelConfig checks, the serving configuration, where it listens
    "context_length", "disable_custom_all_reduce", "dist_timeout", "enable_aiter_allreduce_fusion", "host", "port",
    "quantization", "served_model_name", "watchdog_timeout",
    # the HTTP layer and the model build
    "enable_cache_report", "preferred_sampling_params", "tokenizer_path", "trust_remote_code", "weight_version",
})  # fmt: skip


def resolve(
    args: argparse.Namespace,
    model: ModelInfo,
    platform: Platform,
    env: Mapping[str, str] | None = None,
    check_args: bool = True,
) -> list[tuple[str, str]]:
    """Resolve every default in place, as ``ServerArgs.__post_init__`` (sa:856) does on ROCm; then ``check``
    (unless ``check_args`` is false).

    Returns the (level, message) lines the release logs while doing so. ``env`` is the process environment
    (default ``os.environ``), over what the ROCm image sets (``ROCM_IMAGE_ENV``)."""
    env = {**ROCM_IMAGE_ENV, **(os.environ if env is None else env)}
    lines: list[tuple[str, str]] = []

    def log(level: str, message: str) -> None:
        lines.append((level, message))

    if args.tp_size < 1 or args.dp_size < 1:
        raise InvalidServerArgs("tp_size and dp_size must be positive")
    for name, value in INTERNAL_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, value)
    handle_missing_default_values(args)
    handle_piecewise_cuda_graph(args)
    handle_gpu_memory_settings(args, platform.gpu_memory_mib, model.use_mla)
    handle_model_specific_adjustments(args, model, platform, env, log)
    handle_attention_backend_compatibility(args, model, log)
    handle_kv4_compatibility(args)
    handle_page_size(args)
    handle_data_parallelism(args, log)
    handle_speculative_decoding(args, model, env, log)
    if check_args:
        check(args)
    return lines


# --- the steps of ServerArgs.__post_init__ the twin models -------------------------------------------------------


def handle_missing_default_values(a: Any) -> None:
    """sa:1165, what the twin reads: the device (get_device() on ROCm: torch's HIP build answers "cuda")."""
    if a.device is None:
        a.device = INTERNAL_DEFAULTS["device"]
    a.device = a.device.split(":")[0]


def handle_piecewise_cuda_graph(a: Any) -> None:
    """sa:1301. Piecewise CUDA graphs are off on non-CUDA hardware (sa:1320-1322): always, on ROCm."""
    a.disable_piecewise_cuda_graph = True


def gpu_memory_defaults(gpu_mem: float | None, tp_size: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) for a GPU of ``gpu_mem`` MiB (sa:1424-1488)."""
    if gpu_mem is None:
        return UNKNOWN_GPU_MEMORY_DEFAULTS
    for below, chunk, small_tp_bs, large_tp_bs in GPU_MEMORY_TIERS:
        if below is None or gpu_mem < below:
            return chunk, small_tp_bs if tp_size < GRAPH_BS_LARGE_TP else large_tp_bs
    raise AssertionError("unreachable: the last tier has no bound")


def piecewise_cuda_graph_tokens(max_tokens: int) -> list[int]:
    """_generate_piecewise_cuda_graph_tokens (sa:1657)."""
    sizes = (
        list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1024 + 1, 64))
        + list(range(1280, 4096 + 1, 256)) + list(range(4608, max_tokens + 1, 512))
    )  # fmt: skip
    return [s for s in sizes if s <= max_tokens]


def reserved_memory_mib(a: Any, gpu_mem: float | None, use_mla: bool) -> float:
    """What the default ``mem_fraction_static`` keeps outside the static pool, MiB (sa:1540-1582)."""
    reserved = RESERVED_BASE_MIB
    if a.chunked_prefill_size > 0:
        reserved += max(a.chunked_prefill_size, RESERVED_MIN_PREFILL_TOKENS) * RESERVED_PER_PREFILL_TOKEN
    else:
        reserved += max(a.max_prefill_tokens, RESERVED_MIN_PREFILL_TOKENS) * RESERVED_PER_PREFILL_TOKEN
    reserved += a.cuda_graph_max_bs * RESERVED_PER_GRAPH_BS
    reserved += a.tp_size * a.pp_size / 8 * RESERVED_PER_TP_PP_OVER_8
    if a.enable_dp_attention:
        reserved += a.cuda_graph_max_bs * a.dp_size * RESERVED_DP_ATTN_PER_GRAPH_BS_DP
        if a.cuda_graph_max_bs > RESERVED_DP_ATTN_LARGE_GRAPH_BS:
            reserved += a.cuda_graph_max_bs * a.dp_size * RESERVED_DP_ATTN_LARGE_PER_GRAPH_BS_DP
    if not a.disable_piecewise_cuda_graph:
        if not use_mla:
            reserved += (
                len(piecewise_cuda_graph_tokens(a.piecewise_cuda_graph_max_tokens))
                * RESERVED_PIECEWISE_PER_TOKEN_SIZE
            )
        else:
            reserved += RESERVED_PIECEWISE_MLA_MIB
    if gpu_mem is not None and gpu_mem > RESERVED_FLOOR_ABOVE_MIB:
        reserved = max(reserved, RESERVED_FLOOR_MIB)
    if a.speculative_algorithm is not None:
        # the release tests the flag as given: NEXTN is only renamed to EAGLE later (sa:3569-3573)
        if a.speculative_algorithm == "STANDALONE":
            reserved += RESERVED_SPEC_STANDALONE_MIB
        elif a.speculative_algorithm != "NGRAM":
            reserved += RESERVED_SPEC_EAGLE_MIB
    return reserved


def handle_gpu_memory_settings(a: Any, gpu_mem: float | None, use_mla: bool) -> None:
    """sa:1401. chunked_prefill_size and cuda_graph_max_bs by GPU memory, then mem_fraction_static from them."""
    chunk, graph_bs = gpu_memory_defaults(gpu_mem, a.tp_size)
    if a.chunked_prefill_size is None:
        a.chunked_prefill_size = chunk
    if a.cuda_graph_max_bs is None:
        a.cuda_graph_max_bs = graph_bs
    if (
        a.piecewise_cuda_graph_max_tokens is None
    ):  # sa:1514-1533 (only used with piecewise graphs: not on ROCm)
        a.piecewise_cuda_graph_max_tokens = PIECEWISE_MLA_MAX_TOKENS if use_mla else a.chunked_prefill_size
        if a.max_total_tokens is not None:
            a.piecewise_cuda_graph_max_tokens = min(a.piecewise_cuda_graph_max_tokens, a.max_total_tokens)
        if "llama-2" in a.model_path.lower():
            a.piecewise_cuda_graph_max_tokens = min(a.piecewise_cuda_graph_max_tokens, 4096)
    if a.mem_fraction_static is None:
        reserved = reserved_memory_mib(a, gpu_mem, use_mla)
        a.mem_fraction_static = (
            round((gpu_mem - reserved) / gpu_mem, MEM_FRACTION_DIGITS)
            if gpu_mem is not None
            else UNKNOWN_GPU_MEM_FRACTION
        )


def _env_flag(env: Mapping[str, str], name: str, default: str = "false") -> bool:
    """sglang.srt.utils.get_bool_env_var."""
    return env.get(name, default).lower() in ("true", "1")


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def aiter_can_use_preshuffle_paged_mqa(env: Mapping[str, str]) -> bool:
    """layers/attention/nsa/utils.py:20, on ROCm with the image's Triton (``ROCM_IMAGE_TRITON_VERSION``)."""
    if not _env_flag(env, "SGLANG_USE_AITER"):
        return False
    if _env_flag(env, "SGLANG_NSA_HIP_DISABLE_PRESHUFFLE"):
        return False
    if _env_flag(env, "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS"):
        return True
    return _version_tuple(ROCM_IMAGE_TRITON_VERSION) >= (3, 5, 0)


def set_default_nsa_kv_cache_dtype(a: Any, major: int, log: Log) -> None:
    """sa:1677."""
    user_set = a.nsa_prefill_backend is not None or a.nsa_decode_backend is not None
    if user_set and a.kv_cache_dtype == "auto":
        log("warning", "When specifying --nsa-prefill-backend or --nsa-decode-backend, you should also explicitly set --kv-cache-dtype (e.g., 'fp8_e4m3' or 'bfloat16'). DeepSeek V3.2 defaults to FP8 KV cache which may not be compatible with all backends.")  # fmt: skip
    if a.kv_cache_dtype == "auto":
        a.kv_cache_dtype = "fp8_e4m3" if major >= 10 else "bfloat16"
        log("warning", f"Setting KV cache dtype to {a.kv_cache_dtype} for DeepSeek DSA on SM{major} device.")
    if a.kv_cache_dtype == "bf16":
        a.kv_cache_dtype = "bfloat16"
    if a.kv_cache_dtype not in ("bfloat16", "fp8_e4m3"):
        raise InvalidServerArgs(
            "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype", "AssertionError"
        )


def set_default_nsa_backends(a: Any, major: int, log: Log) -> None:
    """sa:1705 on HIP: tilelang for both when neither is given, else the release's defaults for the one not
    given. (``--enable-hisparse``'s own defaults, apply_hisparse_nsa_backend_defaults, are not modelled: that
    flag is reported as having no simulated effect.)"""
    user_set_prefill = a.nsa_prefill_backend is not None
    user_set_decode = a.nsa_decode_backend is not None
    if not user_set_prefill and not user_set_decode:
        a.nsa_prefill_backend = "tilelang"
        a.nsa_decode_backend = "tilelang"
    else:
        fp8 = a.kv_cache_dtype == "fp8_e4m3"
        prefill, decode = (("trtllm", "trtllm") if major >= 10 else ("flashmla_kv", "flashmla_kv")) if fp8 else (
            ("flashmla_sparse", "trtllm") if major >= 10 else ("flashmla_sparse", "fa3"))  # fmt: skip
        if not user_set_prefill:
            a.nsa_prefill_backend = prefill
        if not user_set_decode:
            a.nsa_decode_backend = decode
    log(
        "warning",
        f"Set NSA backends for {a.kv_cache_dtype} KV Cache: prefill={a.nsa_prefill_backend}, decode={a.nsa_decode_backend}.",
    )


def handle_model_specific_adjustments(
    a: Any, model: ModelInfo, platform: Platform, env: Mapping[str, str], log: Log
) -> None:
    """sa:1751, the DeepSeek branch (sa:1786-1967) on ROCm; other model families change nothing the twin models."""
    if model.effective_architecture not in DEEPSEEK_ARCHITECTURES:
        return
    if model.is_deepseek_nsa:  # DeepSeek V3.2 / GLM-5: DSA
        threshold = env.get("SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD")
        if threshold is not None:
            log("warning", f"Dense attention kv len threshold is manually set to {int(threshold)} for DSA. Caution: This may cause performance regression if the threshold is larger than the index topk of model.")  # fmt: skip
        else:
            log("warning", f"Set dense attention kv len threshold to model index_topk={model.index_topk} for DeepSeek with DSA.")  # fmt: skip
        if (
            a.attention_backend is None
            and a.prefill_attention_backend is None
            and a.decode_attention_backend is None
        ):
            a.attention_backend = "nsa"
            log("info", "Use nsa attention backend for DeepSeek with DSA.")
        if a.dp_size < a.tp_size:
            log(
                "warning",
                f"DSA with TP mode is active, dp_size={a.dp_size}, tp_size={a.tp_size}, "
                f"attn_tp_size={a.tp_size}, attention weights will be sharded across {a.tp_size} ranks.",
            )
        if not aiter_can_use_preshuffle_paged_mqa(env):
            a.page_size = 1
            log(
                "warning",
                "Setting page size to 1 for DeepSeek DSA on ROCm "
                "(aiter preshuffle paged-MQA path unavailable: "
                "needs Triton>=3.5.0 or AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS=1).",
            )
        else:
            a.page_size = 64
            log("warning", "Setting page size to 64 for DeepSeek DSA.")
        major = platform.device_capability[0]
        set_default_nsa_kv_cache_dtype(a, major, log)
        set_default_nsa_backends(a, major, log)
    # MoE backend for DeepSeek on HIP: the release only logs (the switch itself is commented out, sa:1962-1967)
    if not a.enable_dp_attention and a.nnodes == 1:
        log("info", "Enable Aiter AllReduce Fusion for DeepseekV3ForCausalLM")


def default_attention_backend(a: Any, model: ModelInfo) -> str:
    """_get_default_attn_backend (sa:2579), HIP branches."""
    if not model.use_mla:
        return "aiter"
    head_num = model.get_num_kv_heads(a.tp_size)
    return "aiter" if head_num in AITER_MLA_HEADS_PER_GPU else "triton"


def handle_attention_backend_compatibility(a: Any, model: ModelInfo, log: Log) -> None:
    """sa:2648, what applies on ROCm."""
    if a.attention_backend is None:
        a.attention_backend = default_attention_backend(a, model)
        log("info", f"Attention backend not specified. Use {a.attention_backend} backend by default.")
    if a.attention_backend == "torch_native":
        log("warning", "Cuda graph is disabled because of using torch native attention backend")
        a.disable_cuda_graph = True
    if a.attention_backend == "flex_attention":
        log("warning", "Cuda graph is disabled because of using torch Flex Attention backend")
        a.disable_cuda_graph = True
        if a.speculative_algorithm is not None:
            raise InvalidServerArgs(
                "Speculative decoding is currently not supported with Flex Attention backend",
                "AssertionError",
            )
    if a.attention_backend == "flashmla":
        log("warning", "FlashMLA only supports a page_size of 64, change page_size to 64.")
        a.page_size = 64
    if a.attention_backend == "cutlass_mla":
        log("warning", "Cutlass MLA only supports a page_size of 128, change page_size to 128.")
        a.page_size = 128
    if a.attention_backend == "trtllm_mla":
        raise InvalidServerArgs("TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). Please use a different backend.")  # fmt: skip
    if a.attention_backend == "trtllm_mha":
        raise InvalidServerArgs("TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100). Please use a different prefill backend.")  # fmt: skip
    if a.attention_backend == "fa3" and a.kv_cache_dtype == "fp8_e5m2":
        log(
            "warning",
            "FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention backend to triton.",
        )
        a.attention_backend = "triton"
    if a.attention_backend == "aiter" and model.context_len > AITER_LONG_CONTEXT:
        a.mem_fraction_static *= AITER_LONG_CONTEXT_MEM_FACTOR
    if a.attention_backend == "dual_chunk_flash_attn":
        log(
            "warning",
            "Mixed chunk and radix cache are disabled when using dual-chunk flash attention backend",
        )
        a.enable_mixed_chunk = False
        a.disable_radix_cache = True
    if a.attention_backend == "intel_xpu":
        if model.use_mla:
            raise InvalidServerArgs("intel_xpu backend is only supported on decode for MLA models, please set --decode-attention-backend to intel_xpu and do not set --attention-backend or --prefill-attention-backend to intel_xpu for prefill instead use triton.")  # fmt: skip
        if a.page_size not in (64, 128):
            log("warning", f"Intel XPU attention backend only supports page_sizes of [64, 128], changing page_size from {a.page_size} to 128.")  # fmt: skip
            a.page_size = 128


def handle_kv4_compatibility(a: Any) -> None:
    """sa:2870: an FP4 KV cache on anything but CUDA."""
    if a.kv_cache_dtype == "fp4_e2m1":
        raise InvalidServerArgs("KV4 is not tested on non-CUDA platforms.", "RuntimeError")


def handle_page_size(a: Any) -> None:
    """sa:2949."""
    if a.page_size is None:
        a.page_size = 1


def handle_data_parallelism(a: Any, log: Log) -> None:
    """sa:3062. Under DP attention every rank prefills its own chunk: the chunk is divided by dp_size."""
    if a.dp_size == 1:
        a.enable_dp_attention = False
    if a.enable_dp_attention:
        a.schedule_conservativeness = a.schedule_conservativeness * DP_ATTN_SCHEDULE_CONSERVATIVENESS
        if a.tp_size % a.dp_size != 0:
            raise InvalidServerArgs(
                f"tp_size ({a.tp_size}) must be divisible by dp_size ({a.dp_size})", "AssertionError"
            )
        a.chunked_prefill_size = a.chunked_prefill_size // a.dp_size
        log("warning", DP_ATTN_CHUNK_WARNING.format(chunked_prefill_size=a.chunked_prefill_size))


def auto_choose_speculative_params(a: Any, model: ModelInfo) -> tuple[int, int, int]:
    """sa:7929."""
    if a.speculative_algorithm == "STANDALONE":
        return DEFAULT_SPEC_PARAMS
    return SPEC_PARAMS_BY_ARCH.get(model.effective_architecture, DEFAULT_SPEC_PARAMS)


def handle_speculative_decoding(a: Any, model: ModelInfo, env: Mapping[str, str], log: Log) -> None:
    """sa:3551: EAGLE/EAGLE3/STANDALONE (NEXTN is EAGLE) and NGRAM."""
    if a.speculative_algorithm is not None:
        a.speculative_algorithm = a.speculative_algorithm.upper()
    if a.speculative_algorithm == "NEXTN":  # _resolve_speculative_algorithm_alias (sa:319)
        a.speculative_algorithm = "EAGLE"
    if a.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        if a.speculative_algorithm == "STANDALONE" and a.enable_dp_attention:
            raise InvalidServerArgs(
                "Currently standalone speculative decoding does not support dp attention."
            )
        if a.max_running_requests is None:
            a.max_running_requests = SPEC_MAX_RUNNING_REQUESTS
            log("warning", SPEC_MAX_RUNNING_WARNING)
        reason = None
        if (
            a.speculative_eagle_topk is not None
            and a.speculative_eagle_topk > 1
            and not a.disable_overlap_schedule
        ):
            a.disable_overlap_schedule = True
            reason = "spec v2 currently only supports topk = 1"
        elif not _env_flag(env, "SGLANG_ENABLE_SPEC_V2", "true") and not a.disable_overlap_schedule:
            a.disable_overlap_schedule = True
            reason = "SGLANG_ENABLE_SPEC_V2=False"
        if a.disable_overlap_schedule:
            log("warning", "Spec v1 is used for eagle/eagle3/standalone speculative decoding because %s." % (reason or "overlap schedule is disabled"))  # fmt: skip
        else:
            log("warning", "Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.")
        if a.enable_mixed_chunk:  # sa:3773-3777
            a.enable_mixed_chunk = False
            log("warning", "Mixed chunked prefill is disabled because of using eagle speculative decoding.")
        if model.effective_architecture in MTP_SELF_DRAFT_ARCHITECTURES:
            if a.speculative_draft_model_path is None:
                a.speculative_draft_model_path = a.model_path
            elif model.effective_architecture not in (
                "MistralLarge3ForCausalLM",
                "PixtralForConditionalGeneration",
            ):
                log("warning", "DeepSeek MTP does not require setting speculative_draft_model_path.")
        if a.speculative_num_steps is None:
            if a.speculative_eagle_topk is not None or a.speculative_num_draft_tokens is not None:
                raise InvalidServerArgs(
                    "speculative_eagle_topk and speculative_num_draft_tokens must be None when "
                    "speculative_num_steps is None", "AssertionError",
                )  # fmt: skip
            a.speculative_num_steps, a.speculative_eagle_topk, a.speculative_num_draft_tokens = (
                auto_choose_speculative_params(a, model)
            )
        if a.speculative_eagle_topk is None:
            # the release compares None with 1 here and dies with this TypeError (sa:3829-3838)
            raise InvalidServerArgs(
                "'>' not supported between instances of 'NoneType' and 'int'", "TypeError"
            )
        if a.speculative_eagle_topk == 1 and a.speculative_num_draft_tokens != a.speculative_num_steps + 1:
            log("warning", "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1")  # fmt: skip
            a.speculative_num_draft_tokens = a.speculative_num_steps + 1
        if (
            a.speculative_eagle_topk > 1
            and a.page_size > 1
            and a.attention_backend not in ("flashinfer", "fa3")
        ):
            raise InvalidServerArgs(
                "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for "
                "paged attention backends. This combination is only supported for the 'flashinfer' backend."
            )
    if a.speculative_algorithm == "NGRAM":
        if a.max_running_requests is None:
            a.max_running_requests = SPEC_MAX_RUNNING_REQUESTS
            log("warning", SPEC_MAX_RUNNING_WARNING)
        a.disable_overlap_schedule = True
        a.enable_mixed_chunk = False
        a.speculative_eagle_topk = a.speculative_ngram_max_bfs_breadth
        if a.speculative_num_draft_tokens is None:
            a.speculative_num_draft_tokens = NGRAM_DEFAULT_DRAFT_TOKENS
            log("warning", "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. You can override this by explicitly setting --speculative-num-draft-tokens.")  # fmt: skip
        log("warning", "The overlap scheduler and mixed chunked prefill are disabled because of using ngram speculative decoding.")  # fmt: skip
        if a.speculative_eagle_topk > 1 and a.page_size > 1 and a.attention_backend != "flashinfer":
            raise InvalidServerArgs(
                f"speculative_eagle_topk({a.speculative_eagle_topk}) > 1 with page_size({a.page_size}) > 1 is unstable "
                "and produces incorrect results for paged attention backends. "
                "This combination is only supported for the 'flashinfer' backend."
            )
        if a.enable_dp_attention:
            raise InvalidServerArgs("Currently ngram speculative decoding does not support dp attention.")


def check(args: argparse.Namespace) -> None:
    """check_server_args (sa:7229) and the twin's own sanity checks, on resolved arguments."""
    if args.tp_size < 1 or args.dp_size < 1:
        raise InvalidServerArgs("tp_size and dp_size must be positive")
    if args.enable_dp_attention and args.tp_size % args.dp_size != 0:
        raise InvalidServerArgs(f"tp_size ({args.tp_size}) must be divisible by dp_size ({args.dp_size})")
    if args.speculative_algorithm and args.enable_mixed_chunk:
        # check_server_args (sa:7278-7282); never reached: speculative decoding switched mixed chunk off above
        raise InvalidServerArgs("enable_mixed_chunk is required for speculative decoding", "AssertionError")
    if args.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE") and args.speculative_num_steps < 1:
        raise InvalidServerArgs("speculative_num_steps must be at least 1")
    if args.chunked_prefill_size > 0 and args.chunked_prefill_size % args.page_size != 0:
        raise InvalidServerArgs("chunked_prefill_size must be divisible by page_size", "AssertionError")
    if not 0.0 < args.mem_fraction_static < 1.0:
        raise InvalidServerArgs(f"mem_fraction_static must be in (0, 1), got {args.mem_fraction_static}")
    if args.max_running_requests is not None and args.max_running_requests < 1:
        raise InvalidServerArgs("max_running_requests must be positive")


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
        raise ServerArgsError(
            f"MoE runner backend {args.moe_runner_backend!r} requires CUDA; not available on ROCm"
        )


def as_dict(args: argparse.Namespace) -> dict[str, Any]:
    return dict(vars(args))
