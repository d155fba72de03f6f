"""Faults the twin injects on request, for the agent's fault-injection tests: ``TWIN_FAULTS="name@n,..."``.

A fault fires at the n-th event of its kind (launch or benchmark) on one workspace, once, the way a real fault
happens at one point of a run. The counts live beside the scenario the twin serves (``.twin/faults/`` in a
workspace: the agent's control folder, out of its tools' reach) or in ``TWIN_FAULT_STATE``. The switch goes in the
task's engine environment, so a test sets it the way a user would set any engine variable.

Faults, the event they fire at, and the real fault they stand for:

- ``hang_before_ready`` (launch): the server never reports ready, like one stuck loading (the start-up timeout);
- ``slow_start`` (launch): start-up takes ``TWIN_SLOW_START_S`` more wall seconds (default 600);
- ``port_taken`` (launch): binding the port fails as uvicorn reports it (another process took the port);
- ``crash_mid_benchmark`` (benchmark): the server dies halfway through the benchmark; the requests after it fail;
- ``bench_hang`` (benchmark): the benchmark never finishes.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LAUNCH_FAULTS = ("hang_before_ready", "slow_start", "port_taken")
BENCH_FAULTS = ("crash_mid_benchmark", "bench_hang")
SIMULATED = "dayzero digital twin (simulated): injected fault"


class FaultSpecError(ValueError):
    """``TWIN_FAULTS`` names an unknown fault or a bad ordinal."""


def parse(spec: str) -> dict[str, int]:
    """``"crash_mid_benchmark@3,port_taken"`` -> {name: n} (n defaults to 1)."""
    faults: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, n = part.partition("@")
        if name not in LAUNCH_FAULTS + BENCH_FAULTS:
            raise FaultSpecError(f"TWIN_FAULTS: unknown fault {name!r} (known: {', '.join(LAUNCH_FAULTS + BENCH_FAULTS)})")
        try:
            faults[name] = int(n) if n else 1
        except ValueError:
            raise FaultSpecError(f"TWIN_FAULTS: {part!r}: the ordinal after @ must be a whole number") from None
        if faults[name] < 1:
            raise FaultSpecError(f"TWIN_FAULTS: {part!r}: the ordinal after @ starts at 1")
    return faults


def _count(state_dir: Path, kind: str) -> int:
    """Count one more event of ``kind`` and return its ordinal (atomic across processes)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / f"{kind}.count", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = int(f.read().strip() or 0) + 1
        f.seek(0)
        f.truncate()
        f.write(str(n))
    return n


def due(kind: str, scenario_file: str | Path | None) -> str | None:
    """The fault to inject at this event of ``kind`` ("launch" or "benchmark"), if any. Events are counted only
    while ``TWIN_FAULTS`` is set."""
    spec = os.environ.get("TWIN_FAULTS", "")
    if not spec:
        return None
    faults = parse(spec)
    names = LAUNCH_FAULTS if kind == "launch" else BENCH_FAULTS
    where = os.environ.get("TWIN_FAULT_STATE") or (Path(scenario_file).parent / "faults" if scenario_file else None)
    if where is None:
        return None
    n = _count(Path(where), kind)
    return next((name for name in names if faults.get(name) == n), None)
