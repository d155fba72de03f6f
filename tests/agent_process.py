"""``agent`` commands for the tests, each in its own process forked from an interpreter that has already
imported the agent's libraries, instead of a fresh ``python -c "from agent.cli import app; app()" ARGS``.

A fresh interpreter spends about a second importing LangGraph, openai, pydantic's models and the twin before it
reads its arguments, and the suite starts about 150 commands that way. ``run_cli`` gives each command what a
fresh process gets (its own process and pid, ``argv``, working folder, environment, stdin/stdout/stderr, exit
code or killing signal, atexit handlers and threads joined at exit) but forks it from a per-test-process fork
server (``serve``), which imported the libraries once and runs nothing else. ``agent.cli`` itself is imported
in each command, after its environment is set (its console reads ``COLUMNS`` and colour settings when made).

Where a fork cannot be faithful, a fresh interpreter runs the command: with ``fresh=True``, when the environment
changes what an interpreter reads at start-up (``PYTHON*``, locale), for every command under
``DAYZERO_TESTS_FRESH=1``, and when the server is gone or unreachable. A test of what the process looks like from
outside (``/proc/<pid>/environ``, its parent, signals sent to its group) starts its own with ``subprocess``. The
forks share one hash seed, the server's.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMAND = "from agent.cli import app; app()"  # what a user's `agent` runs, and what a fresh process is given

# what the agent's commands import that costs time, imported once by the server (agent.cli is not among them)
PRELOAD = ("typer", "rich.console", "rich.table", "rich.progress", "pydantic", "yaml", "openai", "langgraph.graph",
           "langgraph.checkpoint.sqlite", "agent.graph", "agent.run", "agent.prior", "agent.trace",
           "agent.inspector.audit", "agent.inspector.replay", "sandboxes.local", "sandboxes.select", "tasks.spec",
           "tools.expert", "tools.bench", "tools.evals", "tools.server", "tools.trials")  # fmt: skip
_STARTUP_ENV = ("PYTHON", "LC_", "LANG")  # what an interpreter reads once, when it starts

_server: tuple[int, subprocess.Popen, str] | None = None  # (owner pid, server process, socket path)
_forked_cpu = 0.0


def forked_cpu() -> float:
    """CPU seconds of the finished commands this process forked (theirs and their children's), which
    ``getrusage(RUSAGE_CHILDREN)`` does not count: the fork server, not this process, is their parent's parent."""
    return _forked_cpu


def run_cli(args: Sequence[str], *, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
            timeout: float = 600, fresh: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
    """``agent ARGS`` in ``cwd`` with ``env`` (else this process's environment), its output captured as text, as
    ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)`` would return it."""
    env, cwd = dict(os.environ if env is None else env), os.getcwd() if cwd is None else cwd
    cmd = [sys.executable, "-c", COMMAND, *args]
    fresh = fresh or bool(os.environ.get("DAYZERO_TESTS_FRESH"))  # every command fresh, to compare
    server = None if fresh or not _same_startup(env) else _running_server()
    def in_a_fresh_interpreter() -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    if server is None:
        return in_a_fresh_interpreter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:  # fmt: skip
        request = json.dumps({"argv": list(args), "cwd": os.fspath(cwd), "env": env}).encode()
        try:
            conn.connect(server)
            socket.send_fds(conn, [len(request).to_bytes(8, "big")], [0, out.fileno(), err.fileno()])
            conn.sendall(request)
            started = _line(conn)
        except OSError:
            started = ""
        if not started:  # the server went away or could not fork: the command never started, so start it fresh
            return in_a_fresh_interpreter()
        pid = int(started)
        conn.settimeout(timeout)
        try:
            line = _line(conn)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(cmd, timeout, _read(out), _read(err)) from None
        if not line:
            raise RuntimeError("the tests' fork server for agent commands stopped")
        code, cpu = line.split()
        global _forked_cpu
        _forked_cpu += float(cpu)
        return subprocess.CompletedProcess(cmd, int(code), _read(out), _read(err))


def _line(conn: socket.socket) -> str:
    """One line the waiter sent ("" if it closed the connection first)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode()


def _read(f) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


def _same_startup(env: Mapping[str, str]) -> bool:
    """Whether ``env`` agrees with this process's environment on what an interpreter reads when it starts."""
    def startup(e: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in e.items() if k.startswith(_STARTUP_ENV)}
    return startup(env) == startup(os.environ)


def _running_server() -> str | None:
    """The socket of this process's fork server, started on first use (None if it cannot start)."""
    global _server
    if _server is not None and _server[0] == os.getpid() and _server[1].poll() is None:
        return _server[2]
    path = os.path.join(tempfile.mkdtemp(prefix="dz-fork-"), "s")
    proc = subprocess.Popen([sys.executable, "-c", f"import tests.agent_process as s; s.serve({path!r})"],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)  # fmt: skip
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        proc.wait()
        return None
    _server = (os.getpid(), proc, path)
    atexit.register(_stop, proc)
    return path


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


# --- the fork server's side ---------------------------------------------------------------------------------------


def serve(path: str) -> None:
    """Import ``PRELOAD``, then fork a process for each request on the socket at ``path`` until the process
    that started this one is gone (or SIGTERM)."""
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork would copy a process whose other threads do not exist in it
        raise SystemExit("a preloaded module started a thread; cannot fork safely")
    owner = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    listener.settimeout(1.0)
    print("ready", flush=True)
    while os.getppid() == owner:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:  # the finished waiters
                pass
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        sys.stdout.flush()
        if os.fork() == 0:
            listener.close()
            _wait_for_one(conn)
            os._exit(0)
        conn.close()


def _wait_for_one(conn: socket.socket) -> None:
    """A waiter: fork the command, tell the client its pid, then its exit code (negative: the killing signal)."""
    conn.settimeout(None)
    header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    size, data = int.from_bytes(header, "big"), b""
    while len(data) < size:
        data += conn.recv(size - len(data))
    request = json.loads(data)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    _, status, usage = os.wait4(pid, 0)  # its usage with its reaped children's (its engines)
    conn.sendall(f"{os.waitstatus_to_exitcode(status)} {usage.ru_utime + usage.ru_stime}\n".encode())


def _command(request: dict, fds: list[int]) -> None:
    """The command's own process: become what ``python -c COMMAND ARGV`` would be, run it, exit as it would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-c", *request["argv"]]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code = 0
    try:
        exec(COMMAND, {"__name__": "__main__"})
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:  # noqa: BLE001  (what the interpreter does with an uncaught exception)
        traceback.print_exc()
        code = 1
    with contextlib.suppress(BaseException):
        threading._shutdown()  # the interpreter joins non-daemon threads, then runs atexit handlers
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
