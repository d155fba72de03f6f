"""Tuning the MoE kernel selection with the engine's tuner (aiter's fmoe tuner, or the twin's)."""

from __future__ import annotations

import csv
import io
import re

from pydantic import Field

from .base import Cost, ToolInput, ToolResult, tool
from .context import ToolContext
from .diagnose import MoEShape

UNTUNED_COLUMNS = ["token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype", "q_dtype_a",
                   "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1"]  # fmt: skip
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def untuned_csv(shapes: list[MoEShape]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(UNTUNED_COLUMNS)
    for s in shapes:
        for token in TOKEN_BUCKETS:
            w.writerow([token, s.model_dim, s.inter_dim, s.expert, s.topk, s.act_type, s.dtype, s.q_dtype_a,
                        s.q_dtype_w, s.q_type, int(s.use_g1u1), int(s.doweight_stage1)])  # fmt: skip
    return buf.getvalue()


class TuneInput(ToolInput):
    shapes: list[MoEShape] = Field(min_length=1, description="MoE shapes to tune, e.g. from a launch's "
                                                             "moe_fallback_shapes")  # fmt: skip


class TuneResult(ToolResult):
    tuned_file: str = Field("", description="workspace path of the tuned CSV: point AITER_CONFIG_FMOE at it")
    env: dict[str, str] = {}
    output_tail: list[str] = []


@tool
def tune_moe(ctx: ToolContext, args: TuneInput) -> TuneResult:
    """Run the engine's MoE tuner for these shapes; it writes the tuned-selection CSV that
    AITER_CONFIG_FMOE must point to on the next launch."""
    ctx.sandbox.write_file("tuning/untuned_fmoe.csv", untuned_csv(args.shapes))
    untuned = ctx.sandbox.command_path("tuning/untuned_fmoe.csv")
    tuned = ctx.sandbox.command_path("tuning/tuned_fmoe.csv")
    argv = ctx.render(ctx.engine.tune_moe) + ["-i", untuned, "-o", tuned]
    result = ctx.sandbox.run(argv, env=ctx.engine_env(), timeout_s=4 * 3600)
    out = (result.stdout + result.stderr).strip().splitlines()
    n = ctx.next_id()
    log = ctx.run_dir / "logs" / f"tune-{n:03d}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(ctx.redactor.text("\n".join(out)))
    simulated = re.search(r"simulated tuning time ([\d.]+) min", "\n".join(out))
    seconds = float(simulated.group(1)) * 60 if simulated else result.wall_seconds
    cost = Cost(wall_seconds=result.wall_seconds, simulated_seconds=seconds if simulated else None,
                node_hours=seconds / 3600 / ctx.task.hardware.gpus)  # the tuner runs on one GPU  # fmt: skip
    if result.exit_code != 0:
        return TuneResult(ok=False, output_tail=out[-10:], cost=cost,
                          summary=f"tuner failed (exit {result.exit_code}): {(out or ['no output'])[-1]}")  # fmt: skip
    env = {"AITER_CONFIG_FMOE": "{workspace}/tuning/tuned_fmoe.csv"}  # rendered at launch: traces stay portable
    return TuneResult(tuned_file="tuning/tuned_fmoe.csv", env=env, output_tail=out[-5:], cost=cost,
                      summary=f"tuned {len(args.shapes)} shape(s); relaunch with AITER_CONFIG_FMOE={tuned}")  # fmt: skip
