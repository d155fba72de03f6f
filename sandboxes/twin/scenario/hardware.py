"""AMD Instinct spec sheets as data: ``data/hardware/<key>.yaml`` (MI300X, MI325X, MI355X), each with its source.

One definition of a node's GPU for every consumer: a scenario says ``hardware: {spec_sheet: mi325x}`` and the
loader fills what the scenario does not state itself (``fill``: a field the scenario writes wins, so a calibrated
scenario keeps its own figures); the scenario generator writes its ``hardware:`` block from a sheet (``preset``);
tests hold each task's accelerator against its scenario and sheet. A sheet's matrix peaks are the data sheet's and
must equal CUs x FLOPs per clock per CU x clock (``derived_tflops``). A GPU with no MX matrix cores (gfx942) runs
an MXFP4 checkpoint dequantized to FP8 (``mxfp4_runs_as``): its mxfp4 peak is the FP8 one. Standard library and
PyYAML only.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from .. import shipped_yaml

SHEETS_DIR = Path(__file__).resolve().parents[1] / "data" / "hardware"
NODE_GPUS = 8  # the OAM platforms these GPUs ship in: eight to a node


def known() -> list[str]:
    return sorted(p.stem for p in SHEETS_DIR.glob("*.yaml"))


@functools.lru_cache(maxsize=8)
def sheet(key: str) -> dict[str, Any]:
    """The spec sheet ``key`` (``mi300x``, ``mi325x``, ``mi355x``) as written, with ``peak_tflops`` completed by
    ``mxfp4_runs_as``."""
    path = SHEETS_DIR / f"{key.lower()}.yaml"
    if not path.is_file():
        raise KeyError(f"no spec sheet {key!r} (known: {', '.join(known())})")
    data = shipped_yaml.load(path)
    peaks = dict(data["peak_tflops"])
    if data.get("mxfp4_runs_as"):
        peaks["mxfp4"] = peaks[data["mxfp4_runs_as"]]
    return {**data, "peak_tflops": peaks}


def derived_tflops(key: str) -> dict[str, float]:
    """The matrix peaks from the sheet's CUs, FLOPs per clock per CU and clock, TFLOPS."""
    s = sheet(key)
    return {dtype: s["cu_count"] * per_cu * s["peak_engine_clock_mhz"] * 1e6 / 1e12
            for dtype, per_cu in s["flops_per_clock_per_cu"].items()}  # fmt: skip


def hardware_fields(key: str) -> dict[str, Any]:
    """``HardwareSpec``'s fields from the sheet: ``interconnect_gbs`` is one Infinity Fabric link's bandwidth (the
    cost model's all-reduce moves each peer's share over its own link)."""
    s = sheet(key)
    return {"name": s["name"], "gfx_arch": s["gfx_arch"], "num_gpus": NODE_GPUS, "memory_gb": float(s["memory_gb"]),
            "memory_bandwidth_tbs": float(s["memory_bandwidth_tbs"]), "peak_tflops": dict(s["peak_tflops"]),
            "interconnect_gbs": float(s["xgmi_link_gbs"]), "cu_count": int(s["cu_count"])}  # fmt: skip


def fill(hw: Any, given: set[str]) -> Any:
    """``hw`` (a ``HardwareSpec`` naming a ``spec_sheet``) with every field the scenario did not write (``given``:
    the field names it wrote) taken from the sheet."""
    if not hw.spec_sheet:
        return hw
    fields = hardware_fields(hw.spec_sheet)
    return dataclasses.replace(hw, **{k: v for k, v in fields.items() if k not in given})


def preset(key: str) -> dict[str, Any]:
    """What the scenario generator writes for a node of ``key``: the sheet's fields, its image and source."""
    s = sheet(key)
    note = None
    if s.get("mxfp4_runs_as"):
        note = (f"{s['gfx_arch']} has no MXFP4 matrix cores: an MXFP4 checkpoint is dequantized to "
                f"{s['mxfp4_runs_as'].upper()} in the kernels, so its peak is the {s['mxfp4_runs_as'].upper()} peak")
    return {**hardware_fields(key), "image": s["image"], "source": s["source"], "note": note}
