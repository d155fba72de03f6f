"""Bytes of a checkpoint tensor by its safetensors dtype: ``tensor_bytes("BF16", [4096, 4096])``."""

from __future__ import annotations

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1, "I32": 4, "I64": 8, "BOOL": 1}


def tensor_bytes(dtype: str, shape: tuple[int, ...] | list[int]) -> int:
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n
