"""Failures of the machine a run stands on, told apart from failures of the engine and of the tools.

A full disk, a file system remounted read-only, an I/O error or an exhausted quota say nothing about the engine or
the configuration being tried: a launch that crashed because its log could not be written is not an engine crash,
and a policy that took it for one would draw the wrong conclusion (undo a fix it had verified, give up a
configuration). So :class:`~tools.runner.ToolRunner` lets such a failure through instead of recording it as the
call's result, and the run stops as on any infrastructure failure (exit 5, one line, resumable): the call is not
recorded, so ``agent resume`` makes it again once the machine is fixed.

A failure is the infrastructure's when

- the tool raised an ``OSError`` with one of :data:`INFRASTRUCTURE_ERRNOS`;
- a failed call's error or result quotes one of those errors (an engine, a benchmark or git printing
  ``[Errno 28] No space left on device`` or ``fatal: ... Read-only file system``), in the C library's words;
- a call failed while a file system it writes to (the run folder, the workspace) has no room left: a program
  that could not even write its log leaves no message to read.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable
from pathlib import Path

# errors of the storage under a run, not of what runs on it
INFRASTRUCTURE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT})
# a file system with less room than this, after a call failed, is why it failed
FULL_BELOW_BYTES = 1 << 20

_WORDS = {code: os.strerror(code) for code in INFRASTRUCTURE_ERRNOS}  # "No space left on device", ...
_QUOTED = re.compile("|".join(re.escape(w) for w in _WORDS.values()), re.IGNORECASE)


def is_infrastructure(exc: BaseException) -> bool:
    """Whether ``exc`` is an OS error of the storage (full, read-only, failing, over quota)."""
    return isinstance(exc, OSError) and exc.errno in INFRASTRUCTURE_ERRNOS


def quoted(text: str) -> OSError | None:
    """The infrastructure error ``text`` quotes (its last line that names one), as an ``OSError``, or None."""
    for line in reversed(text.splitlines()):
        if m := _QUOTED.search(line):
            code = next(c for c, w in _WORDS.items() if w.lower() == m.group(0).lower())
            return OSError(code, f"{_WORDS[code]} (reported as: {line.strip()[:300]})")
    return None


def full(paths: Iterable[Path]) -> OSError | None:
    """An ``ENOSPC`` naming the first of ``paths`` whose file system has less than :data:`FULL_BELOW_BYTES` free
    (for an unprivileged writer), or None."""
    for path in paths:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        if st.f_bavail * st.f_frsize < FULL_BELOW_BYTES:
            return OSError(errno.ENOSPC, _WORDS[errno.ENOSPC], str(path))
    return None
