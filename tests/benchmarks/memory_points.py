"""Print the twin's memory outside the static pool beside public SGLang start-up logs and out-of-memory reports.

    python -m tests.benchmarks.memory_points

``data/memory_points.yaml`` holds what public logs measured: ``Capture cuda graph end ... mem usage`` (the graphs'
pool) per model, TP and captured batch sizes (``kind: graph``), and out-of-memory reports of a prefill chunk
(``kind: activation``). For each graph point with a real config here, the twin's pool (``engine/activations.py``)
is printed beside the measured one, with its two derived terms (the largest batch's activations and logits) and
what the measurement leaves beyond them: the median of those residuals is the pool's overhead the twin charges
(``GRAPH_POOL_OVERHEAD_BYTES``). Then the activation points: what the twin's plan leaves and needs for the
reported configuration, and whether it would fail where the report failed. Then the transfer set's cells whose
plans the twin refused before (``data/transfer_points.yaml``, ``--chunked-prefill-size`` set): whether they start.
GPUs are not part of the graph terms (the twin's plan is computed on the point's GPU where the twin has it, else on
MI300X, which changes only the static pool, not printed here).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.benchmarks.transfer_points import REPO, config_folder
from tests.benchmarks.transfer_points import points as transfer_points

DATA = Path(__file__).with_name("data") / "memory_points.yaml"
GIB = 1024**3
HARDWARE = {"mi300x", "mi325x", "mi355x"}


def capture_max_bs(listed: int) -> int | None:
    """The largest batch of the release's default capture list (``ServerArgs._generate_cuda_graph_batch_sizes``,
    no speculation) that has ``listed`` sizes."""
    for top in range(1, 4097):
        sizes = (
            [1, 2, 4, 8, 12]
            + list(range(16, 257, 8))
            + list(range(272, 512, 16))
            + list(range(512, top + 1, 32))
        )
        sizes = [b for b in sizes if b <= top]
        if len(sizes) == listed and sizes[-1] == top:
            return top
    return None


def _gpu(point: dict[str, Any]) -> str:
    name = str(point.get("gpu") or "").lower().replace(" ", "")
    return next((h for h in HARDWARE if h in name), "mi300x")


def _scenario(model: str, gpu: str, cache: Path) -> tuple[Any, str]:
    """The scenario the documented command writes for the model's real config, the GPU and the pinned release."""
    from sandboxes.twin.scenario.format import ScenarioError
    from sandboxes.twin.scenario.loader import load

    name = model.split(" ")[0]
    folder = config_folder(name)
    if folder is None:
        return None, f"no config.json of {name} here"
    out = cache / f"{folder.name}-{gpu}.yaml"
    if not out.is_file():
        proc = subprocess.run([sys.executable, "-m", "sandboxes.twin", "scenario", "--config",
                               str(folder / "config.json"), "--hardware", gpu, "-o", str(out)],
                              capture_output=True, text=True, cwd=REPO)  # fmt: skip
        if proc.returncode not in (0, 3):
            return None, "scenario refused: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:150]
    try:
        return load(out), ""
    except ScenarioError as exc:
        return None, f"scenario has an open question: {str(exc)[-150:]}"


def graph_rows(rows: list[dict[str, Any]], cache: Path) -> list[float]:
    from sandboxes.twin.engine import activations as act
    from sandboxes.twin.perf.serving_config import ServingConfig

    residuals: dict[tuple[Any, ...], float] = {}  # per model, TP, largest batch and figure (a log quoted twice: once)
    print(
        "graph pool (GB): measured | twin = activations + logits + overhead | measured - activations - logits"
    )
    for p in rows:
        label = f"{p['model']} tp{p.get('tp') or 1} ({p.get('gpu') or 'GPU not stated'})"
        bs = p.get("cuda_graph_max_bs") or (
            capture_max_bs(p["bs_list_len"]) if p.get("bs_list_len") else None
        )
        if bs is None:
            print(f"  {label:70s} not used: its largest captured batch is not stated")
            continue
        key = (p["model"], p.get("tp"), bs, p["graph_end_usage_gb"])
        if key in residuals:
            print(f"  {label:70s} the same measurement as above")
            continue
        sc, why = _scenario(p["model"], _gpu(p), cache)
        if sc is None:
            print(f"  {label:70s} not used: {why}")
            continue
        cfg = ServingConfig(tp_size=int(p.get("tp") or 1), cuda_graph_max_bs=int(bs))
        activations, logits = act.graph_batch_bytes(sc.model.arch, cfg, sc.model.vocab_size)
        twin = act.graph_pool_bytes(sc.model.arch, cfg, sc.model.vocab_size)
        measured = float(p["graph_end_usage_gb"])
        residual = measured - (activations + logits) / GIB
        residuals[key] = residual
        print(f"  {label:70s} bs {bs:4d}  {measured:5.2f} | {twin / GIB:5.2f} = {activations / GIB:.2f} + "
              f"{logits / GIB:.2f} + {act.GRAPH_POOL_OVERHEAD_BYTES / GIB:.2f} (x{twin / GIB / measured:.2f}) | "
              f"{residual:5.2f}")  # fmt: skip
    if residuals:
        print(f"  median residual {statistics.median(residuals.values()):.2f} GB over {len(residuals)} points "
              f"(the twin charges {act.GRAPH_POOL_OVERHEAD_BYTES / GIB:.2f})")  # fmt: skip
    return list(residuals.values())


def _plan(sc: Any, flags: dict[str, Any]) -> Any:
    from sandboxes.twin.engine.memory import plan_memory
    from sandboxes.twin.perf.cost_model import CostModel
    from sandboxes.twin.perf.serving_config import ServingConfig

    return plan_memory(CostModel(sc, ServingConfig(**flags)))


def activation_rows(rows: list[dict[str, Any]], cache: Path) -> None:
    from sandboxes.twin.engine import activations as act
    from sandboxes.twin.engine.memory import OutOfMemory
    from sandboxes.twin.perf.serving_config import ServingConfig

    print("\nprefill activations: the report | the twin's chunk activations and what its plan leaves")
    for p in rows:
        label = (
            f"{p['model']} tp{p.get('tp') or 1} chunk {p.get('chunked_prefill_size')} ({p.get('gpu') or '?'})"
        )
        gpu = _gpu(p)
        if gpu not in str(p.get("gpu") or "").lower().replace(" ", "") or not p.get("chunked_prefill_size"):
            print(f"  {label:70s} not used: no GPU the twin has, or no chunk size")
            continue
        sc, why = _scenario(p["model"], gpu, cache)
        if sc is None:
            print(f"  {label:70s} not used: {why}")
            continue
        flags = {"tp_size": int(p["tp"]), "chunked_prefill_size": int(p["chunked_prefill_size"]),
                 "mem_fraction_static": float(p["mem_fraction_static"]),
                 "cuda_graph_max_bs": int(p.get("cuda_graph_max_bs") or 512)}  # fmt: skip
        chunk = act.prefill_bytes(sc.model.arch, ServingConfig(**flags), flags["chunked_prefill_size"]) / GIB
        try:
            plan = _plan(sc, flags)
            verdict = f"plan leaves {(plan.free_bytes + plan.activation_bytes) / GIB:.2f} GB for it: starts"
        except OutOfMemory as exc:
            verdict = f"refused at start-up: {str(exc)[:60]}"
        print(f"  {label:70s} reported: tried {p.get('tried_to_allocate_gib')} GiB with "
              f"{p.get('graph_end_avail_gb')} GB free after graphs | twin chunk {chunk:.2f} GB, {verdict}")  # fmt: skip


def transfer_rows(cache: Path) -> None:
    from sandboxes.twin.engine.memory import NotEnoughMemory, OutOfMemory

    print("\ntransfer cells with --chunked-prefill-size (they ran as published)")
    seen = set()
    for p in transfer_points():
        flags = list(p["server"]["flags"])
        if "--chunked-prefill-size" not in flags:
            continue

        def value(f: str, d: Any = None, flags: list[str] = flags) -> Any:
            return flags[flags.index(f) + 1] if f in flags else d

        key = (p["model"], p["gpu"], tuple(flags))
        if key in seen:
            continue
        seen.add(key)
        sc, why = _scenario(p["model"], p["gpu"], cache)
        label = f"{p['model']} {p['gpu']} tp{value('--tp', value('--tp-size', 1))}"
        if sc is None:
            print(f"  {label:60s} not used: {why}")
            continue
        cfg = {"tp_size": int(value("--tp", value("--tp-size", 1))),
               "chunked_prefill_size": int(value("--chunked-prefill-size")),
               "mem_fraction_static": float(value("--mem-fraction-static", 0.88))}  # fmt: skip
        try:
            plan = _plan(sc, cfg)
            print(f"  {label:60s} starts: chunk activations {plan.activation_bytes / GIB:.2f} GB, graphs "
                  f"{plan.graph_bytes / GIB:.2f} GB, {plan.free_bytes / GIB:.2f} GB left")  # fmt: skip
        except (OutOfMemory, NotEnoughMemory) as exc:
            print(f"  {label:60s} REFUSED: {str(exc)[:100]}")


def main() -> int:
    rows = yaml.safe_load(DATA.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        graph_rows([r for r in rows if r["kind"] == "graph"], cache)
        activation_rows([r for r in rows if r["kind"] == "activation"], cache)
        transfer_rows(cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
