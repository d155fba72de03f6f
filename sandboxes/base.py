"""The one interface the agent's tools act through, whatever runs the engine (local processes, Docker).

A sandbox owns a *workspace*: one git repository per source (an SGLang checkout, the model's checkpoint
config, ...), each starting with the pristine upstream state as its first commit. Tools read, list and
write files inside the workspace only; they start and stop the engine's server from an argv list and an
environment; they run commands (the benchmark, the MoE tuner) with a timeout. Implementations:
``sandboxes.local.LocalSandbox`` (subprocesses) and, later, a Docker one; no tool may depend on which.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field


class SandboxError(RuntimeError):
    """An operation the sandbox refused or could not do (the message says which and why)."""


class PathOutsideWorkspace(SandboxError):
    """A path that is absolute, climbs out with ``..`` or resolves through a symlink to outside."""


class CommandResult(BaseModel):
    argv: list[str]
    exit_code: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    wall_seconds: float
    timed_out: bool = False


class ServerHandle(BaseModel):
    """A server the sandbox started (and the only kind it will stop)."""

    id: str
    argv: list[str]
    host: str
    port: int
    log_path: Path
    pid: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class ReadyResult(BaseModel):
    state: str = Field(description="ready | exited | timeout")
    wall_seconds: float
    exit_code: int | None = None


class FileEntry(BaseModel):
    path: str  # relative to the workspace root, POSIX style
    size: int
    is_dir: bool


class Sandbox(ABC):
    """Where the engine runs. Paths given to file operations are relative to the workspace root."""

    root: Path  # the workspace root on the host (the agent's view)
    python: str = "python3"  # the interpreter commands use for ``{python}``
    bind_host: str = "127.0.0.1"  # the address a server binds (``{host}``); the agent connects to handle.host
    trial: int | None = None  # the trial a started server belongs to (for labels), set by the caller

    @property
    def command_root(self) -> str:
        """The workspace root as the engine's commands see it (the host path, or a mount in a container)."""
        return str(self.root)

    def command_path(self, path: str) -> str:
        """A workspace-relative path as the engine's commands see it."""
        self.resolve(path)
        return f"{self.command_root.rstrip('/')}/{path}"

    # --- workspace --------------------------------------------------------------------------------------------

    @abstractmethod
    def prepare(self, sources: Mapping[str, Path]) -> dict[str, Path]:
        """Copy each source into ``root/<name>`` and make it a git repository whose first commit is the
        pristine upstream state. Returns name -> repository path."""

    @abstractmethod
    def read_file(self, path: str) -> str: ...

    @abstractmethod
    def write_file(self, path: str, text: str) -> None: ...

    @abstractmethod
    def list_files(self, path: str = ".", pattern: str = "**/*") -> list[FileEntry]: ...

    def resolve(self, path: str) -> Path:
        """``root/path`` after checking it stays inside the workspace (no absolute paths, no ``..`` escape,
        no symlink pointing outside)."""
        if not path or path.startswith(("/", "\\")) or Path(path).is_absolute():
            raise PathOutsideWorkspace(f"{path!r}: absolute paths are refused; give a path inside the workspace")
        parts = PurePosixPath(path.replace("\\", "/")).parts
        if ".." in parts:
            raise PathOutsideWorkspace(f"{path!r}: '..' is refused; give a path inside the workspace")
        full = (self.root / path).resolve()
        root = self.root.resolve()
        if full != root and root not in full.parents:
            raise PathOutsideWorkspace(f"{path!r} resolves outside the workspace (through a symlink)")
        return full

    # --- processes ------------------------------------------------------------------------------------------

    @abstractmethod
    def free_port(self) -> int: ...

    @abstractmethod
    def start_server(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, port: int) -> ServerHandle:
        """Start the engine's server; its output streams to ``log_path`` on the host."""

    @abstractmethod
    def wait_ready(self, handle: ServerHandle, ready_line: str, timeout_s: float) -> ReadyResult:
        """Until the log shows ``ready_line`` and ``/health`` answers 200, the process exits, or timeout."""

    @abstractmethod
    def stop_server(self, handle: ServerHandle, grace_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; only servers this sandbox started. Returns the exit code."""

    @abstractmethod
    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout_s: float = 600.0,
            cwd: str | None = None) -> CommandResult:  # fmt: skip
        """Run a command to completion (the benchmark, the tuner); ``cwd`` is workspace-relative."""

    @abstractmethod
    def close(self) -> None:
        """Stop every server this sandbox started."""
