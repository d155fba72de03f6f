"""The simulated node as the engine's code sees it: a ROCm GPU, the parallel state, the server's arguments.

``Platform(...)`` answers what model and layer code asks while it is built and loaded: ``torch.version.hip``
and ``torch.cuda.get_device_properties(0).gcnArchName`` (so the release's own ``is_hip()``, ``mxfp_supported()``
and ``is_gfx95_supported()`` run as written and decide), the tensor-, attention- and pipeline-parallel sizes
and ranks of the rank being built, ``get_global_server_args()`` (the launch's arguments), and the layer
offloader ``make_layers`` wraps layers with. ``Platform.modules()`` is what the executor installs; packages the
ROCm image does not ship are ``ABSENT`` (importing one raises, as ``import torch_npu`` does on that image).
Standard library only.
"""

from __future__ import annotations

import ast
import copy
import functools
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import fake_torch
from .stubs import StubValue

# packages of other platforms, missing from the SGLang ROCm image: optional-import checks must see them missing
ABSENT = ("torch_npu", "torchada", "habana_frameworks", "intel_extension_for_pytorch", "flashinfer", "deep_gemm",
          "torch_musa", "mindspore", "ascend", "kt_kernel", "flash_mla", "mooncake", "nixl", "sgl_kernel_npu",
          "cutlass", "cuda", "tilelang", "fast_hadamard_transform", "xgrammar", "outlines")  # fmt: skip
# gfx architecture -> (compute capability as torch on ROCm reports it, compute units)
GFX = {"gfx950": ((9, 5), 256), "gfx942": ((9, 4), 304), "gfx90a": ((9, 0), 110)}


def release_server_arg_defaults(sglang_root: Any) -> dict[str, Any]:
    """Every field of the release's ``ServerArgs`` dataclass whose default is a literal, as written there."""
    if sglang_root is None:
        return {}
    path = Path(sglang_root) / "python" / "sglang" / "srt" / "server_args.py"
    try:
        return copy.deepcopy(_literal_defaults(path.read_text()))  # the values may be lists: the caller's own
    except (OSError, SyntaxError):
        return {}


@functools.lru_cache(maxsize=8)
def _literal_defaults(text: str) -> dict[str, Any]:
    """``release_server_arg_defaults`` of a ``server_args.py`` text (by text: every workspace holds a copy)."""
    tree = ast.parse(text)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"), None)
    out: dict[str, Any] = {}
    for node in cls.body if cls else []:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            try:
                out[node.target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


@dataclass
class Platform:
    gfx_arch: str = "gfx950"
    memory_gb: float = 288.0
    device_name: str = "AMD Instinct MI355X"
    tp_size: int = 1
    tp_rank: int = 0
    attn_tp_size: int | None = None  # with DP attention, the attention group's size (tp / dp)
    dp_size: int = 1
    enable_dp_attention: bool = False
    moe_ep_size: int = 1
    server_args: dict[str, Any] = field(default_factory=dict)
    sglang_root: Any = None  # the workspace's tree: ServerArgs' own field defaults come from its server_args.py
    args_read: set[str] = field(default_factory=set)  # the server arguments model code has read (for the cache)

    @property
    def attention_tp_size(self) -> int:
        return self.attn_tp_size or self.tp_size

    def device_properties(self) -> Any:
        capability, units = GFX.get(self.gfx_arch, ((9, 4), 304))
        return types.SimpleNamespace(
            gcnArchName=f"{self.gfx_arch}:sramecc+:xnack-", name=self.device_name, major=capability[0],
            minor=capability[1], total_memory=int(self.memory_gb * 1024**3), multi_processor_count=units,
            L2_cache_size=4 * 1024**2,
        )  # fmt: skip

    def cuda(self) -> types.ModuleType:
        """``torch.cuda`` of a ROCm build with this GPU."""
        cuda = types.ModuleType("torch.cuda")
        props = self.device_properties()
        cuda.is_available = lambda: True
        cuda.device_count = lambda: max(self.tp_size, 1)
        cuda.current_device = lambda: 0
        cuda.get_device_properties = lambda *a, **k: props
        cuda.get_device_capability = lambda *a, **k: (props.major, props.minor)
        cuda.get_device_name = lambda *a, **k: props.name
        cuda.mem_get_info = lambda *a, **k: (props.total_memory, props.total_memory)

        def getattr_(name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return StubValue()

        cuda.__getattr__ = getattr_  # type: ignore[attr-defined]
        return cuda

    def server_args_object(self) -> Any:
        """What ``get_global_server_args()`` returns: the launch's arguments (every field the release's parser
        gives) over the release's literal defaults (for a load made without a command line); any other field
        answers a stub."""
        values = release_server_arg_defaults(self.sglang_root)
        values.update(self.server_args)
        values.setdefault("tp_size", self.tp_size)
        values.setdefault("dp_size", self.dp_size)
        values.setdefault("enable_dp_attention", self.enable_dp_attention)

        read = self.args_read

        class ServerArgs(types.SimpleNamespace):
            def __getattribute__(self, name: str) -> Any:
                if not name.startswith("__"):
                    read.add(name)
                return super().__getattribute__(name)

            def __getattr__(self, name: str) -> Any:
                if name.startswith("__"):
                    raise AttributeError(name)
                return StubValue()

        return ServerArgs(**values)

    def fallback(self, module: str, name: str) -> Any:
        """Any other parallel-state query of the engine (``get_<group>_world_size``, ``get_<group>_rank``): the
        groups not listed in ``modules`` (context parallel, MoE data parallel, ...) are of size 1 here."""
        if module.startswith(("sglang.srt.distributed", "sglang.srt.layers.dp_attention")):
            if name.startswith("get_") and name.endswith(("_world_size", "_size")):
                return lambda *a, **k: 1
            if name.startswith("get_") and name.endswith("_rank"):
                return lambda *a, **k: 0
        return None

    def modules(self) -> dict[str, dict[str, Any]]:
        """Module name -> the names the twin provides there instead of the workspace's definitions."""
        tp, rank, attn_tp = self.tp_size, self.tp_rank, self.attention_tp_size
        pp = types.SimpleNamespace(world_size=1, rank_in_group=0, rank=0, is_first_rank=True, is_last_rank=True,
                                   first_rank=0, last_rank=0, device_group=StubValue(), cpu_group=StubValue())  # fmt: skip
        tp_group = types.SimpleNamespace(world_size=tp, rank_in_group=rank, rank=rank, device_group=StubValue(),
                                         cpu_group=StubValue())  # fmt: skip
        attn_group = types.SimpleNamespace(world_size=attn_tp, rank_in_group=rank % attn_tp, rank=rank,
                                           device_group=StubValue(), cpu_group=StubValue())  # fmt: skip
        server_args = self.server_args_object()
        moe_tp = max(tp // max(self.moe_ep_size, 1), 1)
        parallel = {
            "get_tensor_model_parallel_world_size": lambda *a, **k: tp,
            "get_tensor_model_parallel_rank": lambda *a, **k: rank,
            "get_tp_group": lambda *a, **k: tp_group,
            "get_pp_group": lambda *a, **k: pp,
            "get_pp_indices": lambda n, *a, **k: (0, n),
            "get_pipeline_model_parallel_world_size": lambda *a, **k: 1,
            "get_moe_expert_parallel_world_size": lambda *a, **k: self.moe_ep_size,
            "get_moe_expert_parallel_rank": lambda *a, **k: 0,
            "get_moe_tensor_parallel_world_size": lambda *a, **k: moe_tp,
            "get_moe_tensor_parallel_rank": lambda *a, **k: 0,
            "get_world_group": lambda *a, **k: tp_group,
        }
        attention = {
            # read when asked: the twin asks the release's state accounting at each attention TP size in turn
            "get_attention_tp_size": lambda *a, **k: self.attention_tp_size,
            "get_attention_tp_rank": lambda *a, **k: rank % self.attention_tp_size,
            "get_attention_tp_group": lambda *a, **k: attn_group,
            "get_attention_dp_size": lambda *a, **k: self.dp_size if self.enable_dp_attention else 1,
            "get_attention_dp_rank": lambda *a, **k: 0,
            "get_attention_cp_size": lambda *a, **k: 1,
            "get_attention_cp_rank": lambda *a, **k: 0,
            "is_dp_attention_enabled": lambda *a, **k: self.enable_dp_attention,
            "get_local_attention_dp_size": lambda *a, **k: 1,
        }

        class _Offloader:  # utils/offloader.py's default: wraps nothing
            def wrap_modules(self, modules: Any, **kwargs: Any) -> list[Any]:
                return list(modules)

        server = {"get_global_server_args": lambda: server_args}
        return {
            # kernels whose results model code goes on to use: the shapes and dtypes the real kernel returns
            "aiter.ops.triton.quant": {"dynamic_mxfp4_quant": _dynamic_mxfp4_quant},
            # MLA's post-load step turns kv_b_proj's FP8 weight into the absorbed w_kc / w_vc (deepseek_weight_loader)
            "sglang.srt.layers.quantization.fp8_utils": {
                "block_quant_to_tensor_quant": _block_quant_to_tensor_quant,
                "block_quant_dequant": _block_quant_dequant,
                "channel_quant_to_tensor_quant": _channel_quant_to_tensor_quant,
                "normalize_e4m3fn_to_e4m3fnuz": _normalize_e4m3fn_to_e4m3fnuz,
            },
            "sglang.srt.distributed": parallel,
            "sglang.srt.distributed.parallel_state": parallel,
            "sglang.srt.layers.dp_attention": attention,
            "sglang.srt.server_args": server,
            "sglang.srt.utils.offloader": {"get_offloader": lambda: _Offloader()},
        }


def _dynamic_mxfp4_quant(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """aiter's ``dynamic_mxfp4_quant``: ``x [m, n]`` -> (packed fp4 ``uint8 [m, n/2]``, e8m0 scales ``uint8 [m, n/32]``),
    as DeepSeek's Quark MXFP4 post-load step (``quark_post_load_weights``) quantizes ``kv_b_proj`` on gfx950."""
    m, n = (int(d) for d in x.shape)
    return (fake_torch.empty(m, n // 2, dtype=fake_torch.DTYPES["uint8"]),
            fake_torch.empty(m, (n + 31) // 32, dtype=fake_torch.DTYPES["uint8"]))  # fmt: skip



def _tiles_match(x: Any, scale: Any, block_size: Any) -> tuple[int, int]:
    """The release's own checks: one scale per ``block_size`` tile of ``x``."""
    n, k = (int(d) for d in x.shape)
    bn, bk = int(block_size[0]), int(block_size[1])
    assert (n + bn - 1) // bn == int(scale.shape[0])
    assert (k + bk - 1) // bk == int(scale.shape[1])
    return n, k


def _block_quant_to_tensor_quant(x_q_block: Any, x_s: Any, block_size: Any) -> tuple[Any, Any]:
    """fp8_utils.block_quant_to_tensor_quant: the same FP8 tensor with one per-tensor scale."""
    n, k = _tiles_match(x_q_block, x_s, block_size)
    return fake_torch.empty(n, k, dtype=x_q_block.dtype), fake_torch.empty(1, dtype=fake_torch.DTYPES["float32"])


def _block_quant_dequant(x_q_block: Any, x_s: Any, block_size: Any, dtype: Any) -> Any:
    """fp8_utils.block_quant_dequant: the weight in ``dtype``."""
    n, k = _tiles_match(x_q_block, x_s, block_size)
    return fake_torch.empty(n, k, dtype=dtype)


def _channel_quant_to_tensor_quant(x_q_channel: Any, x_s: Any) -> tuple[Any, Any]:
    """fp8_utils.channel_quant_to_tensor_quant: the same tensor with one per-tensor scale."""
    return fake_torch.empty_like(x_q_channel), fake_torch.empty(1, dtype=fake_torch.DTYPES["float32"])


def _normalize_e4m3fn_to_e4m3fnuz(weight: Any, weight_scale: Any, input_scale: Any = None) -> tuple[Any, Any, Any]:
    """fp8_utils.normalize_e4m3fn_to_e4m3fnuz (gfx942's FP8): the bits reinterpreted, the scales doubled."""
    assert str(weight.dtype).endswith("float8_e4m3fn")
    return fake_torch.empty(*weight.shape, dtype=fake_torch.DTYPES["float8_e4m3fnuz"]), weight_scale, input_scale
