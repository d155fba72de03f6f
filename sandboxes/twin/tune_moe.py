"""``python -m sandboxes.twin.tune_moe``: the twin's stand-in for aiter's fused-MoE tuner.

For each requested shape and token-count bucket it "measures" a set of candidate 2-stage kernels (block
sizes, k-split) with the scenario's cost model plus deterministic per-candidate variation, keeps the fastest,
and writes the rows to the CSV that ``AITER_CONFIG_FMOE`` reads (merging with rows already there for other
shapes). Shapes come from ``--shape`` flags or an aiter-style untuned CSV (``-i``). Tuning time on the real
node is simulated and reported; the wall time is a fraction of a second.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

from .engine import moe_csv
from .scenario import ScenarioError, load

TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
BLOCK_M = (16, 32, 64, 128)
KSPLIT = (0, 2, 4)
SECONDS_PER_CANDIDATE = 1.8  # simulated wall time aiter spends compiling and timing one candidate


def _jitter(*parts: object) -> float:
    """A stable factor in [0.9, 1.25) for one candidate: the 'measurement' differs per kernel."""
    h = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return 0.9 + 0.35 * int.from_bytes(h[:4], "big") / 2**32


def _kernel_names(block_m: int, dtype: str) -> tuple[str, str]:
    q = "FP4X2" if dtype == "mxfp4" else ("FP8" if dtype == "fp8" else "B16")
    stage1 = f"moe_ck2stages_gemm1_256x{block_m}x128x128_1x4_MulABScaleShuffled_v3_Nswizzle0_Quant3_silu_{q}_{q}_B16"
    stage2 = f"moe_ck2stages_gemm2_256x{block_m}x128x128_1x4_MulABScaleShuffled_v3_Nswizzle0_Quant3_{q}_{q}_B16"
    return stage1, stage2


def measure(shape: dict, token: int, peak_tflops: float, bandwidth: float) -> dict:
    """Time every candidate for one bucket; return the winning row."""
    e, k = shape["expert"], shape["topk"]
    flops = 2 * token * k * 3 * shape["model_dim"] * shape["inter_dim"]
    bytes_per_param = {"mxfp4": 0.53, "fp8": 1.0, "bf16": 2.0}[shape["dtype"]]
    touched = e * (1 - (1 - k / e) ** token)
    weight_bytes = touched * 3 * shape["model_dim"] * shape["inter_dim"] * bytes_per_param
    best = None
    for block_m in BLOCK_M:
        for ksplit in KSPLIT:
            fit = 1.0 if block_m <= max(16, token * k / e * 4) else 1.3  # oversized tiles waste work
            eff = 0.42 * fit * (1.08 if ksplit and token < 64 else 1.0)
            t = max(flops / (peak_tflops * 1e12 * eff), weight_bytes / (bandwidth * 0.8)) * 1e6 + 4.0
            t *= _jitter(shape["model_dim"], shape["inter_dim"], e, k, token, block_m, ksplit)
            if best is None or t < best[0]:
                best = (t, block_m, ksplit)
    t, block_m, ksplit = best
    k1, k2 = _kernel_names(block_m, shape["dtype"])
    return {
        "cu_num": shape["cu_num"], "token": token, "model_dim": shape["model_dim"],
        "inter_dim": shape["inter_dim"], "expert": e, "topk": k, "act_type": "ActivationType.Silu",
        "dtype": "torch.bfloat16", "q_dtype_a": moe_csv.dtype_code(shape["dtype"]),
        "q_dtype_w": moe_csv.dtype_code(shape["dtype"]), "q_type": moe_csv.quant_type(shape["dtype"]),
        "use_g1u1": 1, "doweight_stage1": 0, "block_m": block_m, "ksplit": ksplit,
        "us1": round(t * 0.62, 4), "kernelName1": k1, "err1": 0.0, "us2": round(t * 0.38, 4),
        "kernelName2": k2, "err2": 0.0, "us": round(t, 4), "run_1stage": 0,
        "tflops": round(flops / (t * 1e-6) / 1e12, 2), "bw": round(weight_bytes / (t * 1e-6) / 1e9, 2),
    }  # fmt: skip


def parse_shape(text: str) -> dict:
    """``model_dim=6144,inter_dim=2048,expert=256,topk=8,dtype=mxfp4``"""
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    try:
        shape = {k: int(fields[k]) for k in ("model_dim", "inter_dim", "expert", "topk")}
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(
            f"bad --shape {text!r}: expected model_dim=N,inter_dim=N,expert=N,topk=N[,dtype=mxfp4|fp8|bf16]"
        ) from None
    shape["dtype"] = fields.get("dtype", "mxfp4")
    if shape["dtype"] not in ("mxfp4", "fp8", "bf16"):
        raise argparse.ArgumentTypeError(f"bad dtype {shape['dtype']!r} in --shape")
    return shape


def shapes_from_untuned(path: str) -> list[dict]:
    """Shapes of an aiter-style untuned CSV, each with the token buckets its rows list."""
    shapes: dict[tuple, dict] = {}
    for row in moe_csv.read_rows(path):
        dtype = moe_csv.dtype_from_code(str(row.get("q_dtype_w", ""))) or "mxfp4"
        shape = {"model_dim": int(row["model_dim"]), "inter_dim": int(row["inter_dim"]),
                 "expert": int(row["expert"]), "topk": int(row["topk"]), "dtype": dtype}  # fmt: skip
        entry = shapes.setdefault(tuple(shape.values()), {**shape, "tokens": []})
        if row.get("token") not in ("", None):
            entry["tokens"].append(int(row["token"]))
    return list(shapes.values())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 aiter/csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py",
                                description="Tune fused-MoE kernel selections (simulated twin).")
    p.add_argument("--shape", action="append", type=parse_shape, default=[], help="a MoE shape to tune")
    p.add_argument("-i", "--untune_file", default=None, help="aiter-style CSV of shapes to tune")
    p.add_argument("-o", "--tune_file", default=None, help="output CSV (default: $AITER_CONFIG_FMOE)")
    p.add_argument("--scenario", default=os.environ.get("TWIN_SCENARIO", "glm52_mi355x"),
                   help="twin scenario whose hardware is 'measured' (name or path)")
    p.add_argument("--tokens", default=None, help="comma-separated token buckets (default: 1..16384)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = args.tune_file or os.environ.get("AITER_CONFIG_FMOE")
    if not out:
        print("error: no output file: pass -o/--tune_file or set AITER_CONFIG_FMOE", file=sys.stderr)
        return 2
    try:
        scenario = load(args.scenario)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shapes = list(args.shape)
    if args.untune_file:
        shapes += shapes_from_untuned(args.untune_file)
    if not shapes:
        print("error: nothing to tune: pass --shape or -i/--untune_file", file=sys.stderr)
        return 2
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else list(TOKEN_BUCKETS)
    hw = scenario.hardware
    cu = moe_csv.cu_count(hw.gfx_arch)
    print(f"[aiter] fmoe tuner (SIMULATED by the dayzero digital twin of {hw.name}: timings come from a model)")
    rows = []
    measured = 0
    for shape in shapes:
        shape = dict(shape, cu_num=cu)
        peak = hw.peak_tflops.get(shape["dtype"], hw.peak_tflops["bf16"])
        shape_tokens = sorted(set(shape.pop("tokens", None) or tokens))
        measured += len(shape_tokens)
        for token in shape_tokens:
            row = measure(shape, token, peak, hw.memory_bandwidth_tbs * 1e12)
            rows.append(row)
            print(f"[aiter] tuned cu_num={cu} token={token} model_dim={shape['model_dim']} "
                  f"inter_dim={shape['inter_dim']} expert={shape['expert']} topk={shape['topk']} "
                  f"dtype={shape['dtype']}: {row['kernelName1']} + {row['kernelName2']} {row['us']:.1f} us")  # fmt: skip
    keys = {(r["cu_num"], r["token"], r["model_dim"], r["inter_dim"], r["expert"], r["topk"], r["q_dtype_w"])
            for r in rows}  # fmt: skip
    kept = []
    if Path(out).exists():
        for r in moe_csv.read_rows(out):
            key = (r.get("cu_num"), r.get("token"), r.get("model_dim"), r.get("inter_dim"), r.get("expert"),
                   r.get("topk"), r.get("q_dtype_w"))  # fmt: skip
            if key not in keys:
                kept.append(r)
    moe_csv.write_rows(out, kept + rows)
    candidates = measured * len(BLOCK_M) * len(KSPLIT)
    minutes = candidates * SECONDS_PER_CANDIDATE / 60
    print(f"[aiter] wrote {len(rows)} tuned rows ({len(kept)} kept) to {out}; "
          f"{candidates} candidates measured, simulated tuning time {minutes:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
