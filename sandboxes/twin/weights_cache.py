"""Weight loads remembered per workspace: a launch loads the checkpoint again only when something it reads changed.

Loading walks every tensor of the checkpoint's index through the workspace's own name mapping and exclude
matching (about a second for a 100k-tensor model), and a run launches the same workspace a dozen times with the
files unchanged. The outcome of a load (the report, or the error and the log SGLang would print) depends only on
the arguments and on files: the model folder, the workspace's SGLang tree and the scenario. The key holds each
of those files' path, size, modification time and inode, so any edit, patch, checkout or restore of a file
computes the load again. Entries live in the workspace's ``.twin/`` (out of the tools' reach); a cache that cannot
be read or written is simply not used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .weights import WeightLoadError, WeightLoadReport, WorkspaceImportError

KEEP = 32  # entries per workspace; the oldest go first
_ERRORS = {cls.__name__: cls for cls in (WeightLoadError, WorkspaceImportError)}


def _signature(folder: Path) -> list[tuple[str, int, int, int]]:
    """(path, size, mtime, inode) of every file under ``folder``, git's own files left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            out.append((os.path.relpath(path, folder), st.st_size, st.st_mtime_ns, st.st_ino))
    return out


def cache_key(inputs: dict[str, Any], folders: list[Path], files: list[Path]) -> str:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode())
    for folder in folders:
        digest.update(json.dumps([str(folder), _signature(folder)]).encode())
    for f in files:
        st = f.stat() if f.is_file() else None
        digest.update(json.dumps([str(f), st and (st.st_size, st.st_mtime_ns, st.st_ino)]).encode())
    return digest.hexdigest()[:32]


def remembered(cache_dir: Path | None, key: str, load: Callable[[], WeightLoadReport]) -> WeightLoadReport:
    """``load()``'s outcome, from ``cache_dir`` when ``key`` is there (an error is raised again as it was)."""
    entry = cache_dir / f"{key}.json" if cache_dir else None
    try:
        data = json.loads(entry.read_text()) if entry and entry.is_file() else None
    except (OSError, ValueError):
        data = None
    if data is not None:
        if "error" in data:
            e = data["error"]
            raise _ERRORS.get(e["kind"], WeightLoadError)(e["summary"], e["log"], param=e["param"],
                                                         checkpoint_param=e["checkpoint_param"], draft=e["draft"])  # fmt: skip
        return WeightLoadReport(**data["report"])
    try:
        report = load()
    except WeightLoadError as exc:
        _store(entry, {"error": {"kind": type(exc).__name__, "summary": exc.summary, "log": exc.log, "param": exc.param,
                                 "checkpoint_param": exc.checkpoint_param, "draft": exc.draft}})  # fmt: skip
        raise
    _store(entry, {"report": dataclasses.asdict(report)})
    return report


def _store(entry: Path | None, data: dict[str, Any]) -> None:
    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, entry)
        old = sorted(entry.parent.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for p in old[:-KEEP]:
            p.unlink(missing_ok=True)
    except OSError:
        pass
