"""Print the twin beside public SGLang measurements it was never fitted to (issue 41's check set), every point run
from the model's real config by the documented command and driven with the published server and client commands.

    python -m tests.benchmarks.transfer_points                    # every check point of data/transfer_points.yaml
    python -m tests.benchmarks.transfer_points --id cookbook-dsv3-mi300x-c1 --set derive --cross-check

Per point: ``python -m sandboxes.twin scenario --config <config.json> --hardware <gpu> --release <release>`` (the
real config from ``data/transfer_configs/`` or the repository's other config folders; its published index when
there is one), a workspace of it (``materialize``), the twin's ``launch_server`` with the published flags and engine
environment, then the twin's ``bench_serving`` with the published client flags; its record beside the published
figures. Nothing here is fitted: the ratios say how far the mechanisms carry. A point that cannot be run (no config,
no wheel for its release, a client the twin does not have) is one line with the reason, and counted.
Figures: every published throughput (tok/s, whole server or per GPU) and TPOT; ratio = twin / published.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data") / "transfer_points.yaml"
CONFIG_DIRS = (Path(__file__).with_name("data") / "transfer_configs", REPO / "sandboxes/twin/scenarios/configs",
               REPO / "tests/fixtures/unseen_configs")  # fmt: skip
INDEX = "model.safetensors.index.json"
WITHIN = 0.15
READY = "The server is fired up and ready to roll!"
# the published figure -> the twin's bench record field, and how it scales (whole server or per GPU)
THROUGHPUT = {"output_tok_s": ("output_throughput", False), "total_tok_s": ("total_throughput", False),
              "output_tok_s_gpu": ("output_throughput", True), "total_tok_s_gpu": ("total_throughput", True)}  # fmt: skip
LATENCY = {"median_tpot_ms": "median_tpot_ms", "mean_tpot_ms": "mean_tpot_ms"}
_RELEASE = re.compile(r"^(\d+\.\d+\.\d+(?:\.post\d+)?)\b")


@dataclass
class Row:
    """One point's outcome: the figures compared, or why it did not run."""

    point: dict[str, Any]
    skipped: str = ""
    failed: str = ""
    note: str = ""  # what was run otherwise than published, and why
    ratios: dict[str, tuple[float, float]] = field(default_factory=dict)  # figure: (twin, published)

    @property
    def label(self) -> str:
        p = self.point
        conc = p["client"].get("max_concurrency") or p["client"].get("batch_size")
        return f"{p['id']} ({p['gpu']}, {p.get('release')}, c{conc})"


def points(path: Path = DATA) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text())["points"]


def release_of(point: dict[str, Any]) -> str | None:
    """The SGLang release a point ran, when it names a published one (``main@...`` and nightlies have no wheel)."""
    m = _RELEASE.match(str(point.get("release") or ""))
    return m.group(1) if m else None


def config_folder(model: str) -> Path | None:
    name = model.replace("/", "--")
    return next((d / name for d in CONFIG_DIRS if (d / name / "config.json").is_file()), None)


def missing_code(folder: Path) -> list[str]:
    """The checkpoint's own code files its config names (``auto_map``) that its folder here lacks: a launch with
    ``--trust-remote-code`` would need them (they are the model vendor's code, not kept in this repository)."""
    config = json.loads((folder / "config.json").read_text())
    auto = config.get("auto_map") or {}
    files = {str(v).split("--")[-1].split(".")[0] + ".py" for v in auto.values() if isinstance(v, str)}
    return sorted(f for f in files if not (folder / f).is_file())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenario_for(point: dict[str, Any], folder: Path | None, cache: Path) -> tuple[Path | None, str]:
    """The scenario the documented command writes for the point's model (its config ``folder``), GPU and release
    (once per triple)."""
    release = release_of(point)
    if folder is None:
        return None, f"no config.json of {point['model']} here"
    if release is None:
        return None, f"release {point.get('release')!r} has no published wheel"
    out = cache / f"{folder.name}-{point['gpu']}-{release}.yaml"
    if out.is_file():
        return out, ""
    cmd = [sys.executable, "-m", "sandboxes.twin", "scenario", "--config", str(folder / "config.json"),
           "--hardware", point["gpu"], "--release", release, "-o", str(out)]  # fmt: skip
    if (folder / INDEX).is_file():
        cmd += ["--index", str(folder / INDEX)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode not in (0, 3):  # 3: written with open questions (their defaults stand)
        return None, "scenario refused: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
    return out, ""


@contextlib.contextmanager
def served(ws: Path, flags: list[str], env: dict[str, str], log: Path) -> Iterator[tuple[str | None, str]]:
    """The twin serving the workspace with the published flags: (its URL, "") once ready, or (None, why)."""
    port = _free_port()
    argv = [sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(ws / "model"), "--sglang-root",
            str(ws / "sglang"), "--host", "127.0.0.1", "--port", str(port), *flags]  # fmt: skip
    full = {**os.environ, "TWIN_TIME_SCALE": "0", **env}
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=full, cwd=REPO)
    try:
        while proc.poll() is None and READY not in log.read_text(errors="replace"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)
        if READY in log.read_text(errors="replace"):
            yield f"http://127.0.0.1:{port}", ""
        else:
            errors = [ln for ln in log.read_text(errors="replace").splitlines() if "Error" in ln or "error:" in ln]
            yield None, f"launch exited {proc.returncode}: " + (errors[-1].strip()[:220] if errors else "no error line")
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def client_flags(client: dict[str, Any]) -> list[str] | str:
    """The published bench_serving flags, or why the twin's client cannot drive them."""
    if not str(client.get("tool", "")).startswith(("bench_serving", "benchmark_serving")):
        return f"client {client.get('tool')!r} is not bench_serving"
    dataset = client.get("dataset") or "sharegpt"
    if dataset not in ("random", "random-ids"):
        return f"dataset {dataset!r} (the twin's client draws random prompts only without the file)"
    flags = ["--backend", str(client.get("backend") or "sglang"), "--dataset-name", dataset,
             "--random-input-len", str(client["isl"]), "--random-output-len", str(client["osl"])]  # fmt: skip
    if client.get("num_prompts"):
        flags += ["--num-prompts", str(client["num_prompts"])]
    if client.get("max_concurrency"):
        flags += ["--max-concurrency", str(client["max_concurrency"])]
    if client.get("request_rate") not in (None, "inf", float("inf")):
        flags += ["--request-rate", str(client["request_rate"])]
    if client.get("random_range_ratio") is not None:
        flags += ["--random-range-ratio", str(client["random_range_ratio"])]
    return flags


def measure(point: dict[str, Any], cache: Path) -> Row:
    row = Row(point)
    if point.get("engine", "sglang") != "sglang":
        row.skipped = f"{point['engine']} (a cross-check of another engine)"
        return row
    bench = client_flags(point["client"])
    if isinstance(bench, str):
        row.skipped = bench
        return row
    folder = config_folder(point["model"])
    scenario, why = scenario_for(point, folder, cache)
    if scenario is None:
        row.skipped = why
        return row
    from sandboxes.twin.workspace.materialize import materialize

    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        ws = Path(tmp) / "ws"
        materialize(scenario, ws)
        server = point["server"]
        env = {str(k): str(v) for k, v in (server.get("env") or {}).items()}
        flags = [str(f) for f in server.get("flags") or []]
        if "--trust-remote-code" in flags and folder is not None and (lacking := missing_code(folder)):
            flags.remove("--trust-remote-code")  # the release's own config classes read config.json instead
            row.note = f"without --trust-remote-code ({', '.join(lacking)} not here)"
        with served(ws, flags, env, Path(tmp) / "server.log") as (url, why):
            if url is None:
                row.failed = why
                return row
            out = Path(tmp) / "bench.jsonl"
            proc = subprocess.run([sys.executable, "-m", "sandboxes.twin.bench_serving", "--base-url", url,
                                   "--output-file", str(out), *bench], capture_output=True, text=True, cwd=REPO)  # fmt: skip
            if proc.returncode != 0 or not out.is_file():
                row.failed = "bench exited " + str(proc.returncode) + ": " + (proc.stderr.strip().splitlines() or [""])[-1][:200]
                return row
            record = json.loads(out.read_text().splitlines()[-1])
    gpus = int(point.get("num_gpus") or 1)
    for name, published in (point.get("figures") or {}).items():
        if name in THROUGHPUT and published:
            key, per_gpu = THROUGHPUT[name]
            twin = float(record.get(key) or 0.0) / (gpus if per_gpu else 1)
            row.ratios[name] = (twin, float(published))
        elif name in LATENCY and published:
            row.ratios[name] = (float(record.get(LATENCY[name]) or float("nan")), float(published))
    return row


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def report(rows: list[Row]) -> None:
    ran = [r for r in rows if r.ratios]
    print(f"\n{len(rows)} points: {len(ran)} measured, {sum(bool(r.failed) for r in rows)} failed in the twin, "
          f"{sum(bool(r.skipped) for r in rows)} not run")  # fmt: skip
    for kind, names in (("throughput", THROUGHPUT), ("TPOT", LATENCY)):
        ratios = [t / p for r in ran for n, (t, p) in r.ratios.items() if n in names]
        if ratios:
            inside = sum(abs(x - 1) <= WITHIN for x in ratios)
            band = sum(0.67 <= x <= 1.5 for x in ratios)
            print(f"{kind:>10}: {inside} of {len(ratios)} within +-15 %, {band} within 0.67-1.5x, geometric mean "
                  f"{_geomean(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip
    groups: dict[str, list[float]] = defaultdict(list)
    for r in ran:
        p = r.point
        conc = p["client"].get("max_concurrency") or 0
        tags = [f"gpu {p['gpu']}", f"release {release_of(p)}",
                f"attention {p['server'].get('attention_backend') or 'default'}",
                "EP" if (p.get("parallel") or {}).get("ep", 1) > 1 else "no EP",
                "c1" if conc == 1 else ("c>=512" if conc >= 512 else "c2-511")]  # fmt: skip
        for tag in tags:
            groups[tag] += [t / pub for n, (t, pub) in r.ratios.items() if n in THROUGHPUT]
    print("throughput ratio by group (geometric mean, figures):")
    for tag in sorted(groups):
        print(f"  {tag:<28} {_geomean(groups[tag]):5.2f}x  ({len(groups[tag])})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--id", action="append", help="only this point (repeatable)")
    ap.add_argument("--set", default="check", choices=("check", "derive", "all"))
    ap.add_argument("--cross-check", action="store_true", help="also list the other engines' points")
    ap.add_argument("--cache", type=Path, default=None,
                    help="where scenarios and workspaces are made, kept between runs that name the same folder "
                         "(default: a new folder per run, so that no scenario an older twin wrote is measured)")  # fmt: skip
    args = ap.parse_args(argv)
    args.cache = args.cache or Path(tempfile.mkdtemp(prefix="dayzero-transfer-points-"))
    args.cache.mkdir(parents=True, exist_ok=True)
    chosen = [p for p in points() if (not args.id or p["id"] in args.id)
              and (args.set == "all" or p["set"] == args.set)
              and (args.cross_check or p.get("engine", "sglang") == "sglang")]  # fmt: skip
    print("Twin vs public SGLang measurements it was never fitted to (ratio = twin / published)")
    rows = []
    for p in chosen:
        row = measure(p, args.cache)
        rows.append(row)
        if row.skipped or row.failed:
            print(f"{row.label:<72} {'not run' if row.skipped else 'FAILED'}: {row.skipped or row.failed}")
        else:
            cells = "  ".join(f"{n} {t:.1f}/{pub:.1f}={t / pub:.2f}" for n, (t, pub) in row.ratios.items())
            print(f"{row.label:<72} {cells}" + (f"  [{row.note}]" if row.note else ""))
        sys.stdout.flush()
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
