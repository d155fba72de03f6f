"""Weight loads remembered per workspace: a launch loads the checkpoint again only when something it reads changed.

Loading walks every tensor of the checkpoint's index through the workspace's own name mapping and exclude
matching (about a second for a 100k-tensor model), and a run launches the same workspace a dozen times, mostly
with the files the load reads unchanged: an agent's patch to a JIT kernel, or a pristine file put back, leaves
the weight load as it was. The outcome of a load (the report, or the error and the log SGLang would print)
depends only on the arguments and on files, so an entry is found in two steps:

- its key: the arguments, the scenario's contents, and which files exist in the model folder and the SGLang
  tree (a file that appears or disappears can change what an import or a lookup finds);
- the files the load opened under those folders (an audit hook on ``open`` records them while it runs), each
  with the hash of its contents: the entry answers only while every one of them still has those contents.

So an edit of any file the load reads computes it again, and an edit of any other file does not. Entries live in
the workspace's ``.twin/`` (out of the tools' reach); a cache that cannot be read or written is simply not used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import pure_code, tracebacks
from .weights import WeightLoadError, WeightLoadReport, WorkspaceImportError

KEEP = 32  # entries per workspace; the least recently used go first
_ERRORS = {cls.__name__: cls for cls in (WeightLoadError, WorkspaceImportError)}


class CacheKey(str):
    """The key of a load's arguments, the scenario and the files that exist; ``scope``: the folders and files
    whose reads an entry depends on (absolute paths)."""

    scope: tuple[str, ...] = ()


def _listing(folder: Path) -> list[str]:
    """The relative path of every file and folder under ``folder``, git's own files left out (no ``stat``)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        rel = os.path.relpath(dirpath, folder)
        out.extend(os.path.join(rel, name) for name in dirnames)
        out.extend(os.path.join(rel, name) for name in sorted(filenames))
    return out


def _content(path: str) -> str | None:
    """The hash of the file's contents (None when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def cache_key(inputs: dict[str, Any], folders: list[Path], files: list[Path]) -> CacheKey:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode())
    for folder in folders:
        digest.update(json.dumps([str(folder), _listing(folder)]).encode())
    for f in files:
        digest.update(json.dumps([str(f), _content(str(f))]).encode())
    key = CacheKey(digest.hexdigest()[:32])
    key.scope = tuple(os.path.abspath(p) for p in (*folders, *files))
    return key


# --- what a load reads ----------------------------------------------------------------------------------------

_RECORDING: list[set[str]] = []
_HOOKED = False


def _audit(event: str, args: tuple) -> None:
    if _RECORDING and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        _RECORDING[-1].add(os.path.abspath(os.fsdecode(args[0])))


def _recorded(load: Callable[[], WeightLoadReport], opened: set[str]) -> WeightLoadReport:
    """``load()``, with every file it opens added to ``opened``, and every file it parsed from memory as well
    (this process's caches of parsed and rendered sources would otherwise hide a second load's reads)."""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True
    tracebacks._lines.cache_clear()  # the source lines a traceback quotes are read again, and so recorded
    _RECORDING.append(opened)
    try:
        return load()
    finally:
        _RECORDING.pop()
        opened.update(os.path.abspath(p) for p in pure_code.parsed_files())  # read now or by an earlier load


def _in_scope(path: str, scope: Iterable[str]) -> bool:
    return any(path == s or path.startswith(s + os.sep) for s in scope)


# --- entries ------------------------------------------------------------------------------------------------


def remembered(cache_dir: Path | None, key: str, load: Callable[[], WeightLoadReport]) -> WeightLoadReport:
    """``load()``'s outcome, from ``cache_dir`` when an entry of ``key`` whose files are unchanged is there (an
    error is raised again as it was)."""
    contents: dict[str, str | None] = {}

    def same(reads: dict[str, str | None]) -> bool:
        for path, h in reads.items():
            if path not in contents:
                contents[path] = _content(path)
            if contents[path] != h:
                return False
        return True

    for entry in _entries(cache_dir, key):
        try:
            data = json.loads(entry.read_text())
            if not same(data["reads"]):
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used: the last to go
        if "error" in data:
            e = data["error"]
            raise _ERRORS.get(e["kind"], WeightLoadError)(e["summary"], e["log"], param=e["param"],
                                                         checkpoint_param=e["checkpoint_param"], draft=e["draft"])  # fmt: skip
        return WeightLoadReport(**data["report"])
    opened: set[str] = set()
    scope = getattr(key, "scope", ()) or ()
    cache_root = os.path.abspath(cache_dir) if cache_dir else None

    def reads() -> dict[str, str | None]:
        kept = sorted(p for p in opened if (_in_scope(p, scope) if scope else True)
                      and not (cache_root and _in_scope(p, [cache_root])))  # fmt: skip
        return {p: _content(p) for p in kept}

    try:
        report = _recorded(load, opened)
    except WeightLoadError as exc:
        _store(cache_dir, key, reads(), {"error": {"kind": type(exc).__name__, "summary": exc.summary, "log": exc.log,
                                                  "param": exc.param, "checkpoint_param": exc.checkpoint_param,
                                                  "draft": exc.draft}})  # fmt: skip
        raise
    _store(cache_dir, key, reads(), {"report": dataclasses.asdict(report)})
    return report


def _entries(cache_dir: Path | None, key: str) -> list[Path]:
    if cache_dir is None:
        return []
    try:
        return sorted(cache_dir.glob(f"{key}-*.json"))
    except OSError:
        return []


def _store(cache_dir: Path | None, key: str, reads: dict[str, str | None], data: dict[str, Any]) -> None:
    if cache_dir is None:
        return
    name = hashlib.sha256(json.dumps(reads, sort_keys=True).encode()).hexdigest()[:16]
    entry = cache_dir / f"{key}-{name}.json"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"reads": reads, **data}))
        os.replace(tmp, entry)
        old = sorted(cache_dir.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for p in old[:-KEEP]:
            p.unlink(missing_ok=True)
    except OSError:
        pass
