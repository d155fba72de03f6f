"""The one interface the agent's tools act through, whatever runs the engine (local processes, Docker).

A sandbox owns a *workspace*: one git repository per source (an SGLang checkout, the model's checkpoint
config, ...), each starting with the pristine upstream state as its first commit. Tools read, list and
write files inside the workspace only; they start and stop the engine's server from an argv list and an
environment; they run commands (the benchmark, the MoE tuner) with a timeout. Implementations:
``sandboxes.local.LocalSandbox`` (subprocesses) and ``sandboxes.docker.DockerSandbox``; no tool may depend on
which.

The workspace also holds what the sandbox itself writes (its process record, its token, the run lock, the GPU
ledger, the twin's ground truth ``.twin/``): those are *control paths*, which no file operation of this
interface reads, writes or lists, so a tool (and the model behind it) cannot reach them.
"""

from __future__ import annotations

import fcntl
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field


class SandboxError(RuntimeError):
    """An operation the sandbox refused or could not do (the message says which and why)."""


class PathOutsideWorkspace(SandboxError):
    """A path that is absolute, climbs out with ``..`` or resolves through a symlink to outside."""


class ControlPathRefused(PathOutsideWorkspace):
    """A path to the sandbox's own control files (``.dayzero-*``, ``.twin/``), which tools never touch."""


class RunLocked(SandboxError):
    """The workspace is held by another live run (``agent resume`` of a run that is still running)."""


class SandboxUnavailable(SandboxError):
    """What runs the engine (the Docker engine) stopped answering mid-run. Not the configuration's failure:
    tools let it through, never recording it as a failed call; the run stops (exit 5) and ``agent resume``
    continues it once the engine is back."""


# Top-level workspace entries the sandbox (or the twin's materialiser) writes for itself: the process record and
# token, the run lock, the GPU ledger, pristine launch views, the twin's scenario (its ground truth).
CONTROL_PREFIX = ".dayzero"
CONTROL_NAMES = frozenset({".twin"})
# Readable, but written only by the engine's own commands: the benchmark's records are evidence.
READ_ONLY_NAMES = frozenset({".bench"})
RUN_LOCK = ".dayzero-run.lock"
# ``claim`` tries the lock this many times, this far apart, before it calls the holder live: a reader's probe
# (``run_lock_holder``) holds it for microseconds, a live run for as long as it lives
_CLAIM_TRIES = 5
_CLAIM_PAUSE_S = 0.02


def _recorded_pid(fd: int) -> int | None:
    """The pid the holder of the run lock wrote into it (``claim`` writes its own), None before it did."""
    text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def run_lock_holder(root: Path) -> int | None:
    """Whether a live process holds the run lock of the workspace ``root`` (the lock ``claim`` takes, the one that
    keeps a second ``agent resume`` off a live run), and its pid: the pid, 0 when it holds the lock but has not
    written its pid yet, None when no live process holds it (the run finished, was killed, or never claimed it).
    The kernel drops the lock with the process, so a killed run reads as not held whatever pid the file still
    names. Reading takes a shared lock for one non-blocking try and drops it at once (``claim`` retries past it),
    so viewers (``agent ui``) may ask as often as they like."""
    try:
        fd = os.open(root / RUN_LOCK, os.O_RDONLY)
    except OSError:  # no lock file: the workspace was never claimed
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _recorded_pid(fd) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def is_control(name: str) -> bool:
    """Whether a top-level workspace entry is one of the sandbox's own control paths."""
    return name.startswith(CONTROL_PREFIX) or name in CONTROL_NAMES


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
        no symlink pointing outside) and is not one of the sandbox's control paths (named, or reached through
        a symlink)."""
        if not path or path.startswith(("/", "\\")) or Path(path).is_absolute():
            raise PathOutsideWorkspace(f"{path!r}: absolute paths are refused; give a path inside the workspace")
        parts = PurePosixPath(path.replace("\\", "/")).parts
        if ".." in parts:
            raise PathOutsideWorkspace(f"{path!r}: '..' is refused; give a path inside the workspace")
        full = (self.root / path).resolve()
        root = self.root.resolve()
        if full != root and root not in full.parents:
            raise PathOutsideWorkspace(f"{path!r} resolves outside the workspace (through a symlink)")
        named = [p for p in parts if p != "."][:1]
        if (named and is_control(named[0])) or self.is_control_path(full):
            raise ControlPathRefused(
                f"{path!r} is the sandbox's own control data ({CONTROL_PREFIX}-*, {', '.join(sorted(CONTROL_NAMES))}/): "
                "tools cannot read, write or list it"
            )
        return full

    def check_writable(self, path: str) -> Path:
        """``resolve(path)`` for a write: also refuses the workspace root, ``.git`` metadata and the benchmark's
        records (readable evidence, written only by the benchmark itself)."""
        full = self.resolve(path)
        root = self.root.resolve()
        if full == root:
            raise SandboxError(f"{path!r} is the workspace root, not a file")
        rel = full.relative_to(root).parts
        if ".git" in rel:
            raise PathOutsideWorkspace(f"{path!r} is inside a .git directory; the repositories' metadata is off limits")
        if rel[0] in READ_ONLY_NAMES:
            raise PathOutsideWorkspace(f"{path!r}: {rel[0]}/ holds the benchmark's own records; tools only read it")
        return full

    def is_control_path(self, full: Path) -> bool:
        """Whether a resolved host path lies in one of the workspace's control paths."""
        root = self.root.resolve()
        try:
            rel = full.relative_to(root)
        except ValueError:
            return False
        return bool(rel.parts) and is_control(rel.parts[0])

    # --- the run lock ---------------------------------------------------------------------------------------

    _run_lock: int | None = None

    def claim(self) -> None:
        """Hold this workspace for this process until ``release`` (or until the process dies: the kernel drops
        the lock with it, so a killed run never blocks the next). Another live holder is refused, before the
        caller touches anything: a second ``agent resume`` of a live run stops here."""
        if self._run_lock is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / RUN_LOCK, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by child processes
        for attempt in range(_CLAIM_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt + 1 < _CLAIM_TRIES:  # a viewer's probe (run_lock_holder) holds it for a moment only
                    time.sleep(_CLAIM_PAUSE_S)
        else:
            holder = _recorded_pid(fd) or "unknown"
            os.close(fd)
            raise RunLocked(f"{self.root} is in use by a live run (pid {holder}); stop that process first, or wait "
                            "for it to finish (nothing was touched)") from None  # fmt: skip
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._run_lock = fd

    def release(self) -> None:
        """Let go of the run lock taken by ``claim`` (a no-op without one)."""
        fd, self._run_lock = self._run_lock, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

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
