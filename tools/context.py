"""What every tool call can see: the task, the chosen engine, the sandbox, the run, and live tool state."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.secrets import Redactor, configured_secrets
from sandboxes.base import Sandbox, ServerHandle
from sandboxes.executors import InlineExecutor
from tasks.spec import EngineSpec, TaskSpec

ENGINE_LOCALE = {"LC_ALL": "C", "LANG": "C"}


@dataclass
class ServerState:
    handle: ServerHandle
    flags: dict[str, Any]
    env: dict[str, str]
    info: dict[str, Any] = field(default_factory=dict)  # /server_info once up
    pristine: list[str] = field(default_factory=list)  # the workspace files it was launched with as released


@dataclass
class ToolContext:
    task: TaskSpec
    engine_name: str  # "twin" | "sglang"
    engine: EngineSpec
    sandbox: Sandbox
    run_id: str
    run_dir: Path
    repos: dict[str, Path] = field(default_factory=dict)  # source name -> git repository in the workspace
    server: ServerState | None = None
    last_log: Path | None = None
    baseline_accuracy: float | None = None
    trial: int = 0
    task_path: str = ""
    executor: Any = field(default_factory=lambda: InlineExecutor())  # runs independent trials (run_trials)
    expert: Any = None  # the reasoning behind the propose_* tools (tools.expert.Expert), supplied by the agent
    redactor: Redactor | None = None  # what the tools' own files mask (agent/secrets.py); default: the task's
    _counter: itertools.count | None = None

    def __post_init__(self) -> None:
        if self.redactor is None:  # a trial's context, or a test's: the task's secrets and the LLM key
            self.redactor = Redactor(configured_secrets(self.task))

    def next_id(self) -> int:
        """The number of a call's files (server and tuner logs, benchmark records, trials), after every number the
        run's folder holds: a resumed run's calls never write over (or append to) an earlier process's files."""
        if self._counter is None:
            self._counter = itertools.count(last_file_id(self.run_dir) + 1)
        return next(self._counter)

    def placeholders(self, **extra: Any) -> dict[str, str]:
        values = {"python": self.sandbox.python, "workspace": self.sandbox.command_root, "host": self.sandbox.bind_host}
        values.update({k: str(v) for k, v in extra.items()})
        return values

    def render(self, template: list[str], **extra: Any) -> list[str]:
        """``template`` with every known ``{placeholder}`` filled in; any other text, braces included (a JSON flag
        value), is left as it is."""
        values = self.placeholders(**extra)
        return [fill_placeholders(part, values) for part in template]

    def render_value(self, text: str, **extra: Any) -> str:
        return fill_placeholders(text, self.placeholders(**extra))

    def launch_argv(self, flags: dict[str, Any], **extra: Any) -> list[str]:
        """The engine's launch command with these flags, rendered (a flag value may name ``{workspace}``, e.g. a
        draft checkpoint's path)."""
        return self.render(self.engine.launch + flags_to_argv(flags), **extra)

    def engine_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The engine's environment: the C locale first (compilers then report in English, as the diagnosis
        reads them), then the engine's, the task's and the call's own variables."""
        env = {**ENGINE_LOCALE, **self.engine.env, **self.task.resolved_env(), **(extra or {})}
        return {k: self.render_value(v) for k, v in env.items()}

    def node_fraction(self, flags: dict[str, Any] | None = None) -> float:
        """Share of the node a configuration occupies (for node-hours): ``flags``', else the running server's."""
        if flags is None:
            flags = self.server.flags if self.server else {}
        tp, dp = int(flags.get("tp-size", 1) or 1), int(flags.get("dp-size", 1) or 1)
        gpus = tp if flags.get("enable-dp-attention") else tp * dp
        return min(1.0, gpus / self.task.hardware.gpus)


# the files next_id numbers: logs/server-007.log, logs/tune-003.log, bench/006-single_stream.jsonl,
# trials/<run-id>-t031-2/
_NUMBERED = {"logs": re.compile(r"^[a-z_]+-(\d+)\.log$"), "bench": re.compile(r"^(\d+)-"),
             "trials": re.compile(r"-t(\d+)-\d+$")}  # fmt: skip


def last_file_id(run_dir: Path) -> int:
    """The highest number of a call's files under ``run_dir`` (0 for none)."""
    ids = [0]
    for folder, pattern in _NUMBERED.items():
        if (run_dir / folder).is_dir():
            ids += [int(m.group(1)) for p in (run_dir / folder).iterdir() if (m := pattern.search(p.name))]
    return max(ids)


FlagValue = int | float | str | bool | None


def flags_to_argv(flags: dict[str, FlagValue]) -> list[str]:
    """``{"tp-size": 4, "enable-x": True, "y": None}`` -> ``["--tp-size", "4", "--enable-x"]``."""
    argv: list[str] = []
    for name, value in flags.items():
        flag = "--" + name.lstrip("-").replace("_", "-")
        if value is None or value is False:
            continue
        argv += [flag] if value is True else [flag, str(value)]
    return argv


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def fill_placeholders(text: str, values: dict[str, str]) -> str:
    """``text`` with each ``{name}`` of ``values`` replaced; unknown names and other braces left as they are."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)
