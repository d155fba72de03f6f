"""``LocalSandbox``: the workspace is a directory on this host and the engine runs as local subprocesses.

Every server and command starts in a new session (its own process group), so stopping signals the whole
group: the engine and whatever workers it forked. A server's group leader is only reaped once its group is
gone, so its pid (the group id) cannot be reused meanwhile and a signal never reaches a process this sandbox
did not start.

What a killed agent left running is found again by a random token of the workspace (``.dayzero-token``, out of
the tools' reach) that every server and command carries in its environment, and by the pid *and* start time the
process record holds: a pid, a command line or a record the model could write is never enough to be killed.

The engine runs unconfined on this host (it executes the workspace's Python, as SGLang does), so its
environment is an allow-list of the host's: locale, paths, and the engine's own families (``HIP_*``,
``SGLANG_*``, ``TWIN_*``...), never a secret (``*_API_KEY``, ``*TOKEN*``, ``*SECRET*``, ``OPENAI_*``). The
task's and the call's variables are added on top.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import git

from sandboxes import git_packs, isolation, provenance
from sandboxes.base import (
    CommandResult,
    FileEntry,
    PathOutsideWorkspace,
    ReadyResult,
    Sandbox,
    SandboxError,
    ServerHandle,
    is_control,
)

AUTHOR_NAME = "dayzero"
AUTHOR_EMAIL = "dayzero@localhost"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": AUTHOR_NAME,
    "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
    "GIT_COMMITTER_NAME": AUTHOR_NAME,
    "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
}
_POLL_S = 0.1
WORKSPACE_ENV = "DAYZERO_WORKSPACE"  # set on every server and command: the workspace it belongs to
TOKEN_ENV = "DAYZERO_SANDBOX_TOKEN"  # with the workspace's random token: how a later sandbox knows its own

# The host environment the engine and its commands see: these names and families, minus anything secret.
_HOST_ENV = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "TERM",
             "HOSTNAME", "DAYZERO_CACHE", "DAYZERO_SGLANG_SOURCE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"}  # fmt: skip
_HOST_PREFIXES = ("LC_", "TWIN_", "HIP_", "ROCR_", "ROCM_", "HSA_", "AMD_", "SGLANG_", "NCCL_", "RCCL_", "MIOPEN_",
                  "AITER_", "PYTORCH_", "TORCH_", "TRITON_", "HF_", "XDG_")  # fmt: skip
_SECRET = re.compile(r"(_API_KEY$|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|^OPENAI_|^AWS_|^ANTHROPIC_)", re.I)


def is_secret(name: str) -> bool:
    """A variable the engine never inherits from the host (an API key, a token, a secret)."""
    return bool(_SECRET.search(name))


def host_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of the host's environment an engine process inherits: the allow-list, never a secret."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items()
            if (k in _HOST_ENV or k.startswith(_HOST_PREFIXES)) and not is_secret(k)}  # fmt: skip


@dataclass
class _Server:
    proc: subprocess.Popen
    handle: ServerHandle
    log_offset: int  # the log's size before the start: older runs' lines are not this server's
    exit_code: int | None = None
    stopped: bool = False


class LocalSandbox(Sandbox):
    def __init__(self, root: Path, *, run_id: str = "local", host: str = "127.0.0.1"):
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()
        self.python = sys.executable
        self.run_id = run_id
        self.host = host
        self._servers: dict[str, _Server] = {}
        self._lock = threading.RLock()
        self.id = uuid.uuid4().hex[:12]
        self.token = self._workspace_token()
        _LIVE.add(self)

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalSandbox(root={str(self.root)!r}, run_id={self.run_id!r})"

    # --- workspace ------------------------------------------------------------------------------------------

    def prepare(self, sources: Mapping[str, Path]) -> dict[str, Path]:
        repos: dict[str, Path] = {}
        for name, source in sources.items():
            if not name or "/" in name or "\\" in name or name in (".", "..", ".git"):
                raise SandboxError(f"source name {name!r}: give a plain directory name (no '/', not '.git')")
            source = Path(source)
            if not source.is_dir():
                raise SandboxError(f"source {name!r}: {source} is not a directory")
            dest = self.root / name
            if dest.is_symlink():
                raise SandboxError(
                    f"{name!r}: {dest} is a symlink; the workspace copy must be a real directory"
                )
            in_place = source.resolve() == dest.resolve()
            (dest / ".git" / "index.lock").unlink(missing_ok=True)  # left by a process killed mid-commit
            if _has_commit(dest):
                repos[name] = dest  # prepared before (a resumed run): leave it, edits included, as it is
                continue
            origin = provenance.detect(source)  # before the copy, which leaves an upstream checkout's .git out
            if not in_place:
                if dest.exists():  # a copy interrupted before its first commit: redo it from the source
                    shutil.rmtree(dest)
                shutil.copytree(source, dest, symlinks=True, ignore=self._copy_ignore(dest))
            trailers = "\n".join(origin.trailers())
            # named by what it is (the trailers say where that was read), never by a path of this machine
            self._first_commit(dest, f"pristine upstream: {name} ({origin.label()})\n\n{trailers}\n")
            repos[name] = dest
        return repos

    def _copy_ignore(self, dest: Path):
        """Leave out git metadata, and the workspace itself when it lies inside the source."""
        skip = {self.root, dest.resolve()}

        def ignore(directory: str, names: list[str]) -> set[str]:
            out = {n for n in names if n == ".git"}
            base = Path(directory)
            for n in names:
                p = base / n
                if not p.is_symlink() and p.resolve() in skip:
                    out.add(n)
            return out

        return ignore

    @staticmethod
    def _first_commit(dest: Path, message: str) -> None:
        repo = git.Repo.init(dest)
        with repo.config_writer() as cfg:  # later commits in this repo work without a global git config
            cfg.set_value("user", "name", AUTHOR_NAME)
            cfg.set_value("user", "email", AUTHOR_EMAIL)
            cfg.set_value("commit", "gpgsign", "false")
        key = git_packs.listing_key(dest)  # the same source as an earlier run's: its objects are written already
        seeded = key is not None and git_packs.seed(Path(repo.git_dir), key)
        repo.git.add("--all", "--force")  # everything, .gitignore'd files included: the pristine state
        repo.git.commit("--allow-empty", "--no-verify", "--quiet", "-m", message, env=_GIT_ENV)
        if key is not None and not seeded:
            git_packs.keep(dest, key)
        # what running the engine leaves behind (bytecode caches) is never part of a patch
        (Path(repo.git_dir) / "info").mkdir(exist_ok=True)
        (Path(repo.git_dir) / "info" / "exclude").write_text("__pycache__/\n*.pyc\n")
        repo.close()

    def read_file(self, path: str) -> str:
        full = self.resolve(path)
        if full.is_dir():
            raise SandboxError(f"{path!r} is a directory; list it instead")
        try:
            with open(full, encoding="utf-8", newline="") as f:  # line endings as they are on disk
                return f.read()
        except FileNotFoundError:
            raise SandboxError(f"{path!r}: no such file in the workspace") from None
        except UnicodeDecodeError:
            raise SandboxError(f"{path!r} is not UTF-8 text") from None

    def write_file(self, path: str, text: str) -> None:
        full = self.check_writable(path)
        if full.is_dir():
            raise SandboxError(f"{path!r} is a directory")
        full.parent.mkdir(parents=True, exist_ok=True)
        # written beside and renamed over: a process killed mid-write leaves the old file or the new, never a
        # truncated one (a resumed run then finds its edit made, or not made)
        tmp = full.with_name(f".{full.name}.dayzero-tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        if full.exists():
            os.chmod(tmp, full.stat().st_mode & 0o7777)
        os.replace(tmp, full)

    def list_files(self, path: str = ".", pattern: str = "**/*") -> list[FileEntry]:
        base = self.resolve(path)
        if not base.is_dir():
            raise SandboxError(f"{path!r} is not a directory in the workspace")
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise PathOutsideWorkspace(f"pattern {pattern!r}: give a relative pattern without '..'")
        match, dirs_only = _glob_matcher(pattern)
        entries: list[FileEntry] = []
        for dirpath, dirnames, filenames in os.walk(base):  # does not descend into symlinked directories
            here = Path(dirpath)
            top = here == self.root  # the sandbox's control paths sit at the top: never listed
            dirnames[:] = sorted(d for d in dirnames if d != ".git" and not (top and is_control(d)))
            for name in dirnames + ([] if dirs_only else sorted(filenames)):
                if name == ".git" or (top and is_control(name)):
                    continue
                p = here / name
                if not match(p.relative_to(base).as_posix()):
                    continue
                if p.is_symlink():
                    target = p.resolve()
                    if target != self.root and self.root not in target.parents:
                        continue  # a link out of the workspace: neither listed nor stat'ed
                    if self.is_control_path(target):
                        continue  # a link to the sandbox's control data
                try:
                    st, is_dir = p.stat(), p.is_dir()
                except OSError:  # a dangling link
                    continue
                if dirs_only and not is_dir:
                    continue
                entries.append(
                    FileEntry(
                        path=p.relative_to(self.root).as_posix(),
                        size=0 if is_dir else st.st_size,
                        is_dir=is_dir,
                    )
                )
        entries.sort(key=lambda e: e.path)
        return entries

    # --- processes ------------------------------------------------------------------------------------------

    def free_port(self) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def start_server(
        self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, port: int
    ) -> ServerHandle:
        argv = _argv(argv)
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # Python engines print through a pipe-less file: unbuffered, so the ready line shows up as it happens.
        full_env = self._environment(env, PYTHONUNBUFFERED="1")
        with open(log_path, "ab", buffering=0) as log:
            offset = log.tell()
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=self.root,
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=isolation.engine_preexec,  # root's engine cannot read the agent's memory
                )
            except OSError as exc:
                raise SandboxError(f"could not start {argv[0]!r}: {exc}") from None
        handle = ServerHandle(
            id=uuid.uuid4().hex, argv=argv, host=self.host, port=port, log_path=log_path, pid=proc.pid
        )
        with self._lock:
            self._servers[handle.id] = _Server(proc=proc, handle=handle, log_offset=offset)
            self._record_servers()
        return handle

    def _environment(self, env: Mapping[str, str] | None, **defaults: str) -> dict[str, str]:
        """What a server or command runs with: the host's allow-list, the caller's variables, and the markers
        that make it findable as this workspace's (set last: a caller cannot override them)."""
        return {**defaults, **host_environment(), **dict(env or {}), WORKSPACE_ENV: str(self.root),
                TOKEN_ENV: self.token}  # fmt: skip

    # --- what a killed agent left running ---------------------------------------------------------------------

    def _workspace_token(self) -> str:
        """The workspace's random token, created once (atomically: concurrent sandboxes agree on it)."""
        path = self.root / ".dayzero-token"
        with contextlib.suppress(OSError):
            if token := path.read_text().strip():
                return token
        tmp = self.root / f".dayzero-token.{uuid.uuid4().hex}"
        tmp.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)  # fails if another sandbox made it first; then theirs is the token
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return path.read_text().strip()

    # A record of the live server groups survives this process: if the agent is killed, the next sandbox on the
    # same workspace stops what it left running. An entry is acted on only if the process still has the start
    # time recorded and carries the workspace's token: a record rewritten by someone else kills nothing foreign.
    @property
    def _record(self) -> Path:
        return self.root / ".dayzero-servers.json"

    def _record_servers(self) -> None:
        live = {str(s.proc.pid): {"start": process_start_time(s.proc.pid), "argv": s.handle.argv}
                for s in self._servers.values() if not s.stopped}  # fmt: skip
        with _locked(self.root / ".dayzero-servers.lock"):
            record = self._read_record()
            record[self.id] = live
            record = {sid: servers for sid, servers in record.items() if servers}
            tmp = self._record.with_name(f".dayzero-servers.{self.id}.tmp")
            tmp.write_text(json.dumps(record))
            os.replace(tmp, self._record)

    def _read_record(self) -> dict[str, dict]:
        try:
            record = json.loads(self._record.read_text())
        except (OSError, ValueError):
            return {}
        return {sid: servers for sid, servers in record.items() if isinstance(servers, dict)} if isinstance(record, dict) else {}

    def _is_ours(self, pid: int) -> bool:
        """A live group leader carrying this workspace's token in the environment it was started with."""
        try:
            if os.getpgid(pid) != pid:
                return False
            environ = _environ(pid)
        except (OSError, ValueError):
            return False
        return f"{TOKEN_ENV}={self.token}".encode() in environ

    def reap_stale(self) -> list[int]:
        """Stop server and command groups an earlier (killed) sandbox on this workspace left running; return
        their pids. Called by the holder of the run lock (``claim``), so no other sandbox on it is live."""
        mine = {os.getpid()} | {s.proc.pid for s in self._servers.values()}
        reaped: list[int] = []
        for sid, servers in self._read_record().items():
            if sid == self.id:
                continue
            for pid_text, entry in servers.items():
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    pid = int(pid_text)
                    if pid in mine or entry.get("start") is None or process_start_time(pid) != entry["start"]:
                        continue  # gone, or the pid now names another process
                    if self._is_ours(pid):
                        _killpg(pid, signal.SIGKILL)
                        reaped.append(pid)
        # a server started just before the kill may not have made it into the record: the token in its
        # environment still names it (and no process this workspace did not start carries it)
        for proc_dir in Path("/proc").glob("[0-9]*"):
            pid = int(proc_dir.name)
            if pid not in mine and pid not in reaped and self._is_ours(pid):
                _killpg(pid, signal.SIGKILL)
                reaped.append(pid)
        with self._lock, _locked(self.root / ".dayzero-servers.lock"):
            live = {str(s.proc.pid): {"start": process_start_time(s.proc.pid), "argv": s.handle.argv}
                    for s in self._servers.values() if not s.stopped}  # fmt: skip
            self._record.write_text(json.dumps({self.id: live} if live else {}))
        return reaped

    def _own(self, handle: ServerHandle) -> _Server:
        server = self._servers.get(handle.id)
        if server is None or server.proc.pid != handle.pid:
            raise SandboxError(
                f"server {handle.id} (pid {handle.pid}) was not started by this sandbox; refusing"
            )
        return server

    def wait_ready(self, handle: ServerHandle, ready_line: str, timeout_s: float) -> ReadyResult:
        server = self._own(handle)
        start = time.monotonic()
        deadline = start + timeout_s
        needle = ready_line.encode()
        offset, tail, seen = server.log_offset, b"", False
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an http_proxy
        host = "127.0.0.1" if handle.host in ("0.0.0.0", "") else handle.host
        health = f"http://{host}:{handle.port}/health"
        while True:
            code = self._peek_exit(server)
            if server.stopped or code is not None:
                return ReadyResult(state="exited", wall_seconds=time.monotonic() - start, exit_code=code)
            if not seen:
                with contextlib.suppress(OSError), open(handle.log_path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                    offset += len(chunk)
                    seen = needle in tail + chunk
                    tail = (tail + chunk)[-max(len(needle) - 1, 1) :]
            if seen:
                remaining = deadline - time.monotonic()
                try:
                    with opener.open(health, timeout=min(2.0, max(remaining, 0.1))) as r:
                        if r.status == 200:
                            return ReadyResult(state="ready", wall_seconds=time.monotonic() - start)
                except (urllib.error.URLError, OSError, ValueError):
                    pass
            if not seen and _full(handle.log_path):
                # the server cannot write its ready line (nor anything else): waiting out the start-up timeout
                # would only hide the disk; the run stops on its infrastructure, and resumes once there is room
                raise OSError(errno.ENOSPC, "No space left on device (the server's log cannot grow)",
                              str(handle.log_path))  # fmt: skip
            if time.monotonic() >= deadline:
                return ReadyResult(state="timeout", wall_seconds=time.monotonic() - start)
            time.sleep(min(_POLL_S, max(deadline - time.monotonic(), 0)))

    @staticmethod
    def _peek_exit(server: _Server) -> int | None:
        """The leader's exit code if it has exited, without reaping it (its pid keeps naming the group)."""
        if server.proc.returncode is not None or not hasattr(os, "waitid"):
            return server.proc.poll()
        try:
            info = os.waitid(os.P_PID, server.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return server.proc.poll()
        if info is None or info.si_pid == 0:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def stop_server(self, handle: ServerHandle, grace_s: float = 10.0) -> int | None:
        with self._lock:
            server = self._own(handle)
            if server.stopped:
                return server.exit_code
            proc, pgid = server.proc, server.proc.pid
            if proc.returncode is None:  # leader not reaped: the group id is still ours to signal
                _killpg(pgid, signal.SIGTERM)
                deadline = time.monotonic() + grace_s
                while time.monotonic() < deadline:
                    if self._peek_exit(server) is not None and not _group_members(pgid, exclude=pgid):
                        break
                    time.sleep(0.05)
                else:
                    _killpg(pgid, signal.SIGKILL)
                if self._peek_exit(server) is not None:
                    _killpg(pgid, signal.SIGKILL)  # workers that outlived their leader, before the reap
            try:
                proc.wait(timeout=max(grace_s, 5.0))
            except subprocess.TimeoutExpired:
                _killpg(pgid, signal.SIGKILL)
                proc.wait()
            server.exit_code, server.stopped = proc.returncode, True
            self._record_servers()
            return server.exit_code

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout_s: float = 600.0,
        cwd: str | None = None,
    ) -> CommandResult:
        argv = _argv(argv)
        workdir = self.resolve(cwd) if cwd else self.root
        if not workdir.is_dir():
            raise SandboxError(f"cwd {cwd!r} is not a directory in the workspace")
        full_env = self._environment(env)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
                preexec_fn=isolation.engine_preexec,
            )
        except OSError as exc:
            raise SandboxError(f"could not run {argv[0]!r}: {exc}") from None
        try:
            out, err = proc.communicate(timeout=timeout_s)
            return CommandResult(
                argv=argv,
                exit_code=proc.returncode,
                stdout=out,
                stderr=err,
                wall_seconds=time.monotonic() - start,
            )
        except subprocess.TimeoutExpired:
            if proc.returncode is None:
                _killpg(proc.pid, signal.SIGKILL)
            try:
                out, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # something outside the group holds the pipes open
                proc.kill()
                out, err = "", ""
                for stream in (proc.stdout, proc.stderr):
                    with contextlib.suppress(OSError):
                        stream.close()
                proc.wait()
            return CommandResult(
                argv=argv,
                exit_code=None,
                stdout=out or "",
                stderr=err or "",
                wall_seconds=time.monotonic() - start,
                timed_out=True,
            )

    def close(self) -> None:
        with self._lock:
            servers = [s for s in self._servers.values() if not s.stopped]
        for server in servers:
            with contextlib.suppress(Exception):
                self.stop_server(server.handle, grace_s=5.0)
        self.release()


FULL_BYTES = 64 << 10  # a file system with less free than this takes no more log lines


def _full(path: Path) -> bool:
    """Whether the file system holding ``path`` is full (for an unprivileged writer)."""
    try:
        st = os.statvfs(Path(path).parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < FULL_BYTES


def _argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, str | bytes) or not argv:
        raise SandboxError("argv must be a non-empty list of strings (no shell)")
    return [str(a) for a in argv]


def _has_commit(path: Path) -> bool:
    if not (path / ".git").exists():
        return False
    try:
        with git.Repo(path) as repo:
            return repo.head.is_valid()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False


def process_start_time(pid: int) -> int | None:
    """When a process started (clock ticks since boot, /proc/<pid>/stat field 22); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _environ(pid: int) -> list[bytes]:
    """The environment a process was started with. A process caught inside ``execve`` shows none for a moment
    (its new memory is mapped before its environment is): that is read again, briefly."""
    for _ in range(50):
        data = Path(f"/proc/{pid}/environ").read_bytes()
        if data or not _exists(pid):
            break
        time.sleep(0.01)
    return data.split(b"\0")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive ``flock`` on ``path`` for the block (between sandboxes and processes sharing a workspace)."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_members(pgid: int, exclude: int) -> list[int]:
    """Live (non-zombie) processes in group ``pgid``, from /proc; empty where /proc is unavailable."""
    members = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == exclude:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(pid)
    return members


def _glob_matcher(pattern: str):
    """A full-path matcher for a pathlib-style glob: ``*``, ``?`` and ``[...]`` within one path segment,
    ``**`` for any number of segments. Returns ``(match, dirs_only)``; a trailing ``**`` (or ``/``) matches
    directories only, as in ``Path.glob``."""
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    dirs_only = pattern.endswith("/") or (bool(parts) and parts[-1] == "**")
    if not parts:
        return (lambda rel: False), dirs_only
    if parts[-1] == "**":
        parts[-1] = "*"
        parts.insert(-1, "**")
    rx = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            rx += "(?:[^/]+/)*"
        else:
            rx += _segment_regex(part) + ("" if last else "/")
    compiled = re.compile(rx + r"\Z", re.DOTALL)
    return (lambda rel: compiled.match(rel) is not None), dirs_only


def _segment_regex(seg: str) -> str:
    out, i, n = "", 0, len(seg)
    while i < n:
        c = seg[i]
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            j = i + 1
            if j < n and seg[j] == "!":
                j += 1
            if j < n and seg[j] == "]":
                j += 1
            j = seg.find("]", j)
            if j == -1:
                out += re.escape(c)
            else:
                body = seg[i + 1 : j].replace("\\", "\\\\")
                out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
                i = j
        else:
            out += re.escape(c)
        i += 1
    return out


_LIVE: weakref.WeakSet[LocalSandbox] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for sandbox in list(_LIVE):
        with contextlib.suppress(Exception):
            sandbox.close()
