"""A trial as a maintainer reruns it: the real engine's commands in the task's image, from a folder laid out like
the run's workspace, with nothing of this machine in them.

A run may have measured on the digital twin, with commands that start the twin from this machine's clone of
dayzero; those reproduce nothing upstream. What a maintainer runs is the task's real engine (``engines.sglang``:
``python3 -m sglang.launch_server ...``, ``python3 -m sglang.bench_serving ...``) in the task's image, the way the
Docker sandbox starts it (``sandboxes/docker.py``: the workspace mounted at ``workspace_mount``, the task's mounts
over the image's own copies, AMD's device recipe, the engine on a published port). The workspace is the current
folder (``"$PWD"``); the trial's flags and environment are the ones it launched with, and the benchmark's workload
arguments the ones that measured it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from tasks.spec import DockerSpec, EngineSpec, TaskSpec
from tools.context import fill_placeholders, flags_to_argv

PORT = 30000  # the port the commands use (the run's own ports were random free ones)
OUTPUT = "bench.jsonl"  # where the benchmark writes its record
CONTAINER = "dayzero-check"  # the server's container, which the benchmark runs in
HERE = '"$PWD"'  # the folder laid out like the run's workspace


class Reference(str):
    """A variable of the caller's own environment (``$HF_TOKEN``): a secret's stand-in, never its value."""


class EngineCommands(BaseModel):
    """How the real engine runs: its argv templates and the image they run in."""

    engine: EngineSpec
    docker: DockerSpec = Field(default_factory=DockerSpec)
    in_image: bool = Field(True, description="the image runs this engine (else the commands run on the host)")

    @property
    def root(self) -> str:
        """What ``{workspace}`` is where the engine runs."""
        return self.docker.workspace_mount if self.in_image else "."

    def values(self, **extra: str) -> dict[str, str]:
        host = "0.0.0.0" if self.in_image and self.docker.network == "bridge" else "127.0.0.1"
        return {"workspace": self.root, "python": "python3", "host": host, "port": str(PORT), **extra}

    def launch(self, flags: Mapping[str, Any]) -> list[str]:
        """The engine's launch with ``flags`` (a flag value may name ``{workspace}``, e.g. a draft checkpoint)."""
        values = self.values()
        return [fill_placeholders(p, values) for p in self.engine.launch + flags_to_argv(dict(flags))]

    def bench(self, workload_args: list[str]) -> list[str]:
        values = self.values(base_url=f"http://127.0.0.1:{PORT}", output_file=OUTPUT)
        return [fill_placeholders(p, values) for p in self.engine.benchmark] + list(workload_args)

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        values = self.values()
        return {k: v if isinstance(v, Reference) else fill_placeholders(v, values) for k, v in env.items()}

    def server_lines(self, flags: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
        """The shell line that starts the server (in the image: a container named ``dayzero-check``)."""
        argv, env = self.launch(flags), self.env(env)
        if not self.in_image:
            return [_env_line(env, argv)]
        d = self.docker
        opts: list[str] = ["docker", "run", "--rm", "--name", CONTAINER]
        for dev in d.devices:
            opts += ["--device", dev]
        for group in d.group_add:
            opts += ["--group-add", group]
        if d.ipc_mode:
            opts += ["--ipc", d.ipc_mode]
        opts += ["--shm-size", d.shm_size]
        for cap in d.cap_add:
            opts += ["--cap-add", cap]
        for sec in d.security_opt:
            opts += ["--security-opt", sec]
        opts += ["--network", "host"] if d.network == "host" else ["-p", f"127.0.0.1:{PORT}:{PORT}"]
        mounts = [(HERE, d.workspace_mount)] + [(_host_path(h), inner) for h, inner in d.mounts.items()]
        parts = [shlex.join(opts)]
        parts += [f"-v {h}:{shlex.quote(inner)}" for h, inner in mounts]
        parts.append(f"-w {shlex.quote(d.workspace_mount)}")
        parts += [_env_flag(k, v) for k, v in env.items()]
        parts += [shlex.quote(d.image), shlex.join(argv)]
        return [" \\\n    ".join(parts)]

    def bench_line(self, workload_args: list[str], env: Mapping[str, str]) -> str:
        argv = self.bench(workload_args)
        if not self.in_image:
            return _env_line(self.env(env), argv)
        return shlex.join(["docker", "exec", CONTAINER, *argv])


def _host_path(host: str) -> str:
    """A task mount's host side from the folder laid out like the workspace (``{workspace}/sglang`` ->
    ``"$PWD/sglang"``); another host path is the task's own layout of the node, as the task names it."""
    if host.startswith("{workspace}"):
        return '"$PWD' + host.removeprefix("{workspace}") + '"'
    return shlex.quote(host)


def _env_flag(key: str, value: str) -> str:
    if isinstance(value, Reference):
        return f'-e {key}="{value}"'
    return f"-e {shlex.quote(f'{key}={value}')}"


def _env_line(env: Mapping[str, str], argv: list[str]) -> str:
    quoted = [f'{k}="{v}"' if isinstance(v, Reference) else f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return " ".join(["env", *quoted, shlex.join(argv)]) if quoted else shlex.join(argv)


def real_engine(task: TaskSpec | None) -> EngineCommands | None:
    """The task's real engine (``engines.sglang``) and the image it runs in, or None when the task has none."""
    if task is None or task.engines.sglang is None:
        return None
    docker = task.sandbox.docker
    return EngineCommands(engine=task.engines.sglang, docker=docker, in_image=docker.engine == "sglang")


def workload_args(template: list[str] | None, command: list[str]) -> list[str]:
    """A recorded benchmark command's workload arguments: what follows the engine's template (which names the
    server and the output file); without the template, what follows ``--output-file VALUE``."""
    if template is not None and len(command) >= len(template):
        return command[len(template):]
    if "--output-file" in command[:-1]:
        return command[command.index("--output-file") + 2:]
    return []
