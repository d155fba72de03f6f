"""The report's figures, kept by what they are drawn from.

Drawing them is most of ``agent review``'s time (3.5 of its 5 CPU-seconds on the default task's run), and a run
reviewed again, or a copy of it, draws the same figures. Each PNG is kept in the per-user cache
(``$DAYZERO_CACHE/plots``, default ``~/.cache/dayzero``) under the hash of the report's data, the figure's name,
the plotting code and matplotlib's version: anything that could change a pixel is in the key, so an entry is never
stale. The least recently used go beyond ``KEEP``; a cache that cannot be read or written is simply not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import matplotlib

from sandboxes.twin import cache_files
from sandboxes.twin.workspace.release import cache_dir

from . import plots
from .report import RunReport

KEEP = 256  # figures (about 60 KB each)


def folder() -> Path:
    return cache_dir() / "plots"


def _code_digest() -> bytes:
    return hashlib.sha256(Path(plots.__file__).read_bytes() + matplotlib.__version__.encode()).digest()


def rendered(report: RunReport, with_data_only: bool = False) -> dict[str, bytes]:
    """:func:`agent.inspector.plots.render_plots`, each figure drawn only when the cache does not hold it."""
    base = hashlib.sha256(_code_digest() + report.model_dump_json().encode())
    out: dict[str, bytes] = {}
    written = False
    for name, draw in plots.PLOTS.items():
        if with_data_only and not plots.HAS_DATA[name](report):
            continue
        key = base.copy()
        key.update(name.encode())
        entry = folder() / f"{key.hexdigest()[:32]}.png"
        try:
            out[name] = entry.read_bytes()
            os.utime(entry)  # recently used: the last to go
            continue
        except OSError:
            pass
        out[name] = draw(report)
        with contextlib.suppress(OSError):
            entry.parent.mkdir(parents=True, exist_ok=True)
            cache_files.write_atomic(entry, out[name])
            written = True
    if written:
        _evict()
    return out


def _evict() -> None:
    with contextlib.suppress(OSError):
        cache_files.remove_stale_tmps(folder(), 3600)
        entries = []
        for p in folder().glob("*.png"):
            with contextlib.suppress(OSError):  # evicted by another process meanwhile
                entries.append((p.stat().st_mtime_ns, p))
        for _, old in sorted(entries)[:-KEEP]:
            old.unlink(missing_ok=True)
