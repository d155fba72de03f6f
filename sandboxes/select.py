"""Choosing where a task runs (``sandbox: auto|local|docker``) and laying out its workspace.

``auto`` means Docker with the real SGLang image where an AMD GPU (``/dev/kfd``) and a Docker engine exist,
otherwise the MI355X digital twin as local processes. The choice comes with one line saying why.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tasks.spec import TaskSpec

from .base import Sandbox, SandboxError


@dataclass(frozen=True)
class SandboxChoice:
    kind: str  # local | docker
    engine: str  # sglang | twin
    reason: str


def has_amd_gpu() -> bool:
    return Path("/dev/kfd").exists()


def has_docker() -> bool:
    return shutil.which("docker") is not None and (Path("/var/run/docker.sock").exists() or "DOCKER_HOST" in os.environ)


def choose(task: TaskSpec, requested: str | None = None) -> SandboxChoice:
    kind = requested or task.sandbox.kind
    if kind == "docker":
        raise SandboxError("the Docker sandbox is not built yet; use --sandbox local (the twin) for now")
    if kind == "local":
        if task.engines.twin is None:
            raise SandboxError("--sandbox local runs the twin, but the task defines no 'engines.twin'")
        return SandboxChoice("local", "twin", "sandbox: local processes running the MI355X digital twin (as asked)")
    gpu, docker = has_amd_gpu(), has_docker()
    if gpu and docker and task.engines.sglang is not None:
        raise SandboxError("an AMD GPU and a Docker engine are here, but the Docker sandbox is not built yet; "
                           "pass --sandbox local to use the twin")  # fmt: skip
    if task.engines.twin is None:
        raise SandboxError("no AMD GPU with Docker here, and the task defines no 'engines.twin' to fall back to")
    why = "no /dev/kfd (no AMD GPU)" if not gpu else "no Docker engine"
    return SandboxChoice("local", "twin", f"sandbox: the MI355X digital twin as local processes ({why} on this machine; "
                                          "every figure is simulated)")  # fmt: skip


def open_workspace(task: TaskSpec, choice: SandboxChoice, root: Path, run_id: str) -> tuple[Sandbox, dict[str, Path]]:
    """The sandbox for ``choice`` with its workspace prepared (materialised first for the twin)."""
    from .local import LocalSandbox

    sandbox = LocalSandbox(root, run_id=run_id)
    if choice.engine == "twin":
        from .twin.materialize import materialize

        if not (root / "model").exists():
            materialize(task.workspace.twin.scenario, root, force=True)
        sources = {"model": root / "model", "sglang": root / "sglang"}
    else:
        sources = {name: Path(path) for name, path in task.workspace.sources.items()}
    return sandbox, sandbox.prepare(sources)
