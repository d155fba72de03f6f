"""Entries of the per-user caches written so that processes sharing a cache never see or break each other's work.

Several processes use one cache at once (two ``agent twin image``, the test suite's workers, two runs): each
entry is written under a name no other process uses (``tmp_name``: pid and random) and renamed into place, so
a reader finds a whole entry or none; an entry that is expensive to make (a root filesystem, an unpacked
release) is made once, under an exclusive ``flock`` on a lock file beside it (``locked``), and the others wait
for it and use it. What a killed process left half-written is removed by the next one that takes the lock
(``build_dir``), unmounting first whatever is still mounted under it (a killed ``debootstrap`` leaves
``proc/`` and ``dev/`` mounted: deleting through them would delete the host's files).

Standard library only (the twin also runs inside a minimal image).
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

COMPLETE = ".dayzero-complete"  # the marker file a finished folder entry holds: written last, before the rename
PARTIAL = "partial"  # the suffix of a folder being built
TMP = "tmp"  # the suffix of a file being written
T = TypeVar("T")


def tmp_name(path: Path, suffix: str = TMP) -> Path:
    """A hidden name beside ``path`` that no other process or thread picks: its pid and a random token."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.{suffix}")


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``path`` whole or not at all: into a file of its own beside it, then renamed over it."""
    tmp = tmp_name(path)
    try:
        with open(tmp, "xb") as f:  # "x": never into a file another process is writing
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def marshalled(entry: Path, make: Callable[[], Any]) -> Any:
    """The value cached in the file ``entry`` (``marshal``'s format: code objects, lists, tuples, dicts of plain
    values), else ``make()``, kept there for the next process (``write_atomic``; a cache that cannot be written
    costs only the next process a ``make()``)."""
    try:
        return marshal.loads(entry.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    value = make()
    with contextlib.suppress(OSError):
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(entry, marshal.dumps(value))
    return value


def made_once(entry: Path, read: Callable[[], T | None], make: Callable[[], T]) -> T:
    """What ``read()`` finds of ``entry``, else ``make()`` (which keeps it there), made by one process at a time:
    a process that finds another making the same entry (test workers starting on one model, two runs) waits for it
    and reads what it made, instead of making it a second time. A lock that cannot be taken (a read-only cache)
    only costs the wait: the entry is made without it."""
    found = read()
    if found is not None:
        return found
    with contextlib.ExitStack() as held:
        with contextlib.suppress(OSError):
            held.enter_context(locked(lock_path(entry)))
        found = read()
        return found if found is not None else make()


def least_recent(paths: Iterable[Path]) -> list[Path]:
    """``paths`` from the least recently used (by modification time), those another process deleted meanwhile left
    out: what a cache evicts first."""
    seen = []
    for p in paths:
        with contextlib.suppress(OSError):
            seen.append((p.stat().st_mtime_ns, p))
    return [p for _, p in sorted(seen)]


def remove_stale_tmps(folder: Path, older_than_s: float) -> None:
    """Delete the files a killed writer left in ``folder`` (``tmp_name`` files older than ``older_than_s``)."""
    now = time.time()
    for tmp in folder.glob(f".*.{TMP}"):
        with contextlib.suppress(OSError):
            if now - tmp.lstat().st_mtime > older_than_s:
                tmp.unlink()


def lock_path(entry: Path) -> Path:
    """The lock file of ``entry``: beside it (never inside, which is renamed and deleted)."""
    return entry.with_name(entry.name + ".lock")


@contextlib.contextmanager
def locked(path: Path, on_wait: Callable[[], object] | None = None) -> Iterator[int]:
    """Hold an exclusive ``flock`` on the file ``path`` (created if need be); yields its descriptor, which a child
    process given it (``pass_fds``) holds too, so a child that outlives its killed parent still keeps others out.
    ``on_wait()`` is called once if another process holds it. Not re-entrant: a process that takes the same lock
    again waits for itself. The lock goes with the process: a killed holder's lock is free at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # releases the lock (unless a child still holds the descriptor)


def is_complete(entry: Path) -> bool:
    return (entry / COMPLETE).is_file()


def build_dir(entry: Path, build: Callable[[Path], None], *, log: Callable[[str], object] = lambda _: None) -> Path:
    """The folder ``entry``, built by ``build(tmp)`` into a private folder beside it and renamed into place with
    its ``COMPLETE`` marker. The caller holds ``locked(lock_path(entry))``: so nothing else is building it, and a
    ``.partial`` folder or an entry without its marker is what a killed process left (removed first)."""
    if is_complete(entry):
        return entry
    for stale in entry.parent.glob(f".{entry.name}.*.{PARTIAL}"):
        log(f"removing {stale}: left half-built by a process that stopped")
        try:
            remove_tree(stale)
        except OSError as exc:  # something stays mounted there: left as it is, never deleted through
            log(f"left {stale}: {exc}")
    if entry.exists() or entry.is_symlink():  # half-built, or built in place by an older dayzero
        log(f"removing {entry}: it was never completed")
        aside = tmp_name(entry, PARTIAL)
        os.rename(entry, aside)
        with contextlib.suppress(OSError):  # what stays is removed (or reported) on the next build
            remove_tree(aside)
    tmp = tmp_name(entry, PARTIAL)
    tmp.mkdir(parents=True)
    try:
        build(tmp)
        unmount_under(tmp)
        (tmp / COMPLETE).write_text(f"{os.getpid()} {time.time():.6f} {secrets.token_hex(8)}\n")
        os.rename(tmp, entry)
    except BaseException:
        remove_tree(tmp)
        raise
    return entry


def build_dir_once(entry: Path, build: Callable[[Path], None], **kw) -> Path:
    """``build_dir`` under the entry's lock: the first process builds, the others wait and find it built."""
    if is_complete(entry):
        return entry
    with locked(lock_path(entry)):
        return build_dir(entry, build, **kw)


# --- mounts: a killed debootstrap leaves proc/, sys/ and the host's dev/ nodes mounted in its target -------------


def mounts_under(path: Path) -> list[str]:
    """The mount points at or under ``path`` (from ``/proc/self/mountinfo``), deepest first."""
    root = os.path.realpath(path)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        point = _unescape(fields[4])
        if point == root or point.startswith(root + os.sep):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def unmount_under(path: Path) -> None:
    """Unmount whatever is mounted under ``path``; raises OSError if something stays mounted."""
    for point in mounts_under(path):
        with contextlib.suppress(OSError):
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    left = mounts_under(path)
    if left:
        raise OSError(f"still mounted under {path}: {', '.join(left)} (unmount them, then delete {path})")


def remove_tree(path: Path) -> None:
    """Delete ``path``, never through a mount: what is mounted under it is unmounted first, and if that fails the
    folder is left as it is (OSError)."""
    if not (path.exists() or path.is_symlink()):
        return
    unmount_under(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
