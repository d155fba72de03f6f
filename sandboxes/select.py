"""Choosing where a task runs (``sandbox: auto|local|docker``) and laying out its workspace.

``auto`` means Docker with the real SGLang image where an AMD GPU (``/dev/kfd``) and a Docker engine exist,
otherwise the digital twin as local processes. The choice comes with one line saying why (and, for local
processes, that the engine's code runs unconfined on this host). Opening a workspace takes its run lock first:
a second process opening a live run's workspace is refused before anything in it is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tasks.spec import TaskSpec

from .base import Sandbox, SandboxError

# said once, where the sandbox is chosen (the console's first line and the trace's run_started event)
UNCONFINED = "engine code runs unconfined on this host (no container), with an environment free of the agent's secrets"


@dataclass(frozen=True)
class SandboxChoice:
    kind: str  # local | docker
    engine: str  # sglang | twin
    reason: str


def has_amd_gpu() -> bool:
    return Path("/dev/kfd").exists()


def has_docker() -> bool:
    from .docker import docker_available

    return docker_available() is None


def choose(task: TaskSpec, requested: str | None = None) -> SandboxChoice:
    kind = requested or task.sandbox.kind
    spec = task.sandbox.docker
    if kind == "docker":
        if getattr(task.engines, spec.engine) is None:
            raise SandboxError(f"sandbox.docker.engine is {spec.engine!r} but the task defines no engines.{spec.engine}")
        from .docker import docker_available

        if why := docker_available():
            raise SandboxError(f"--sandbox docker: {why}")
        return SandboxChoice("docker", spec.engine, f"sandbox: Docker containers of {spec.image} running "
                                                    f"{'the digital twin (simulated)' if spec.engine == 'twin' else 'SGLang'} (as asked)")  # fmt: skip
    if kind == "local":
        if task.engines.twin is None:
            raise SandboxError("--sandbox local runs the twin, but the task defines no 'engines.twin'")
        return SandboxChoice("local", "twin", "sandbox: local processes running the digital twin (as asked); "
                                              f"{UNCONFINED}")  # fmt: skip
    gpu = has_amd_gpu()
    docker_ok = gpu and has_docker()
    if gpu and docker_ok and task.engines.sglang is not None:
        return SandboxChoice("docker", "sglang", f"sandbox: Docker with {spec.image} on this node's AMD GPUs "
                                                 "(/dev/kfd and a Docker engine found)")  # fmt: skip
    if task.engines.twin is None:
        raise SandboxError("no AMD GPU with Docker here, and the task defines no 'engines.twin' to fall back to")
    why = "no /dev/kfd (no AMD GPU)" if not gpu else "no Docker engine"
    return SandboxChoice("local", "twin", f"sandbox: the digital twin as local processes ({why} on this machine; "
                                          f"every figure is simulated); {UNCONFINED}")  # fmt: skip


def open_workspace(task: TaskSpec, choice: SandboxChoice, root: Path, run_id: str) -> tuple[Sandbox, dict[str, Path]]:
    """The sandbox for ``choice`` with its workspace prepared (materialised first for the twin)."""
    from .local import LocalSandbox

    if choice.kind == "docker":
        from .docker import DockerSandbox

        sandbox: Sandbox = DockerSandbox(root, task.sandbox.docker, run_id=run_id)
    else:
        sandbox = LocalSandbox(root, run_id=run_id)
    try:
        sandbox.claim()  # before materialising, preparing or reaping: a live run's workspace is left as it is
    except SandboxError:
        sandbox.close()
        raise
    if choice.engine == "twin":
        from .twin.workspace.materialize import materialize

        done = root / ".dayzero-materialized"  # written last: a run killed while materialising starts over
        if not done.exists():
            materialize(task.workspace.twin.scenario, root, force=True)
            done.write_text(task.workspace.twin.scenario + "\n")
        sources = {"model": root / "model", "sglang": root / "sglang"}
        if (root / "draft").is_dir():  # the scenario's separate draft checkpoint
            sources["draft"] = root / "draft"
    else:
        sources = {name: Path(path) for name, path in task.workspace.sources.items()}
    return sandbox, sandbox.prepare(sources)
