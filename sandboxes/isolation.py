"""Keeping the agent's secrets out of reach of the engine it runs as local processes.

An engine in the local sandbox inherits only an allow-listed environment (``sandboxes.local.host_environment``),
but on Linux any process may read the environment another process of its user started with, from
``/proc/<pid>/environ``: an engine's code could read the agent's API key from its parent. Three measures close
that path, as far as one process can:

- :func:`scrub_own_environment`: the agent overwrites, in its own memory, the values of secret variables in the
  environment block it was started with (what ``/proc/<pid>/environ`` shows). Python keeps its own copy
  (``os.environ``), which is what the agent itself reads;
- :func:`undumpable`: the agent marks itself not dumpable, so that ``/proc/<pid>/environ`` and ``/proc/<pid>/mem``
  of the agent can be read only with ``CAP_SYS_PTRACE``;
- :func:`engine_preexec`: an engine started by root gives up the capabilities that read another process's memory
  whatever its dumpability (``CAP_SYS_PTRACE``, ``CAP_SYS_ADMIN``, ``CAP_PERFMON``: measured, each alone grants it)
  and cannot get them back, so root does not read past the previous point either.

What a process cannot do is scrub its ancestors: a shell that was *started* with a key in its environment shows
it to every (ordinary) process of its user. :func:`exposed_in_ancestors` finds such a process, by asking a
process started as the engine is; the run says so on start-up and recommends the Docker sandbox, whose engine
sees no process of the host.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
# the capabilities any one of which lets a process read a non-dumpable process's /proc/<pid>/environ
_PROCESS_READERS = {"CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38}
_CAPABILITY_VERSION_3 = 0x20080522
_CAP_SYSCALLS = {"x86_64": (125, 126), "aarch64": (90, 91)}


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError):
        return ctypes.CDLL("libc.so.6", use_errno=True)
    return None


_LIBC = _load_libc()  # loaded here, in the parent: nothing is loaded between a fork and its exec


def _environment_block() -> tuple[int, int] | None:
    """Where this process's start-up environment lives in its memory (``env_start``, ``env_end`` of
    ``/proc/self/stat``, fields 50 and 51), or None where the kernel does not say."""
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces: field 3 on
    if len(fields) < 49:
        return None
    start, end = int(fields[47]), int(fields[48])
    return (start, end) if 0 < start < end else None


def scrub_own_environment(secret: Iterable[str] | None = None) -> list[str]:
    """Overwrite with NUL bytes the values of this process's start-up environment whose names are secret
    (``sandboxes.local.is_secret``) or whose values are in ``secret``; returns the names scrubbed. ``os.environ``
    keeps them: only what other processes can read of this one changes."""
    from sandboxes.local import is_secret

    block = _environment_block()
    if block is None:
        return []
    start, end = block
    values = {v.encode() for v in secret or () if v}
    data = ctypes.string_at(start, end - start)
    scrubbed, offset = [], 0
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and value and (is_secret(name.decode(errors="replace")) or value in values):
            ctypes.memset(start + offset + len(name) + 1, 0, len(value))
            scrubbed.append(name.decode(errors="replace"))
        offset += len(entry) + 1
    return scrubbed


def undumpable() -> bool:
    """Mark this process not dumpable (``prctl(PR_SET_DUMPABLE, 0)``); whether it took."""
    libc = _LIBC
    return bool(libc) and libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def protect_agent(secret: Iterable[str] | None = None) -> list[str]:
    """Both measures for the agent's own process: its secrets scrubbed from what others can read, and not
    dumpable. Returns the variables scrubbed."""
    scrubbed = scrub_own_environment(secret)
    undumpable()
    return scrubbed


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_process_readers() -> None:
    """Give up the capabilities of :data:`_PROCESS_READERS` for this process and every program it runs (the
    bounding set, then the current sets). Nothing to do for a process that is not root; errors are ignored (a
    kernel that refuses leaves root as it was)."""
    libc = _LIBC
    calls = _CAP_SYSCALLS.get(os.uname().machine)
    if libc is None or calls is None or os.geteuid() != 0:
        return
    for cap in _PROCESS_READERS.values():
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.syscall(calls[0], ctypes.byref(header), data) != 0:
        return
    for cap in _PROCESS_READERS.values():
        word, bit = data[cap // 32], ~(1 << (cap % 32)) & 0xFFFFFFFF
        word.effective &= bit
        word.permitted &= bit
        word.inheritable &= bit
    libc.syscall(calls[1], ctypes.byref(header), data)


def engine_preexec() -> None:
    """Run in each engine process between fork and exec (``subprocess.Popen(preexec_fn=...)``)."""
    drop_process_readers()


# run as an engine would be (same user, same preexec): which ancestors' start-up environments hold a secret; the
# secrets come on stdin (never argv or environment, which other processes can read), one per line
_PROBE = """
import os, sys
wanted = [line.encode() for line in sys.stdin.read().splitlines() if line]
pid = os.getppid()
while pid > 1:
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        environ = b""
    try:
        name = open(f"/proc/{pid}/comm").read().strip()
        parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        break
    if any(w in environ for w in wanted):
        print(f"{pid} ({name})")
    pid = parent
"""


def exposed_in_ancestors(values: Iterable[str], preexec: Callable[[], None] | None = engine_preexec) -> list[str]:
    """The processes above this one (``pid (name)``) whose start-up environment holds one of ``values`` and
    that an engine process (started with ``preexec``, as the local sandbox starts it) can read: what this
    process cannot scrub. Measured by such a process, not assumed. The probe's own parent is this process."""
    wanted = [v for v in values if v and len(v) >= 8 and "\n" not in v]
    if not wanted or not Path("/proc/self/environ").exists():
        return []
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], input="\n".join(wanted), capture_output=True,
                              text=True, timeout=30, env={"PATH": os.environ.get("PATH", "")},
                              preexec_fn=preexec)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return proc.stdout.split("\n")[:-1] if proc.returncode == 0 else []
