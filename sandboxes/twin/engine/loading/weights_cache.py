"""Weight loads remembered: a launch loads the checkpoint again only when something the load reads changed.

Loading walks every tensor of the checkpoint's index through the workspace's own name mapping and exclude
matching (about a second for a 100k-tensor model), and a run launches the same workspace a dozen times, mostly
with the files the load reads unchanged: an agent's patch to a JIT kernel, or a pristine file put back, leaves
the weight load as it was; and every workspace of a scenario starts with the same files. The outcome of a load
(the report, or the error and the log SGLang would print) depends only on the arguments, on files, and on where
those files are (the paths a traceback prints), so an entry is found in two steps:

- its key: the arguments, the engine's environment variables, the scenario's contents, which files exist in the
  model folder and the SGLang tree (a file that appears or disappears can change what an import or a lookup finds), and the twin's own code;
- the files the load opened in those folders (an audit hook on ``open`` records them while it runs), each with
  the hash of its contents: the entry answers only while every one of them has those contents still.

An edit of any file the load reads computes it again; an edit of any other file does not. The paths of the
folders are kept out of the outcome (each is written as a placeholder and put back on the way out), so a
workspace with the same files elsewhere, the next run's, finds the entry too: entries live in the workspace's
``.twin/`` (out of the tools' reach) and in the per-user cache (beside the SGLang releases). An outcome that
names the workspace in some other form is kept for its own folders only. A cache that cannot be read or
written is simply not used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ... import cache_files
from ...workspace import release
from .. import tracebacks
from . import pure_code
from .loader import WeightLoadError, WeightLoadReport, WorkspaceImportError
from .stat_memo import StatMemo

KEEP = 32  # entries per workspace; the least recently used go first
SHARED_KEEP = 2048  # entries in the per-user cache (about 50 KB each; the test suite alone makes several hundred)
_ERRORS = {cls.__name__: cls for cls in (WeightLoadError, WorkspaceImportError)}


def shared_cache() -> Path:
    """The per-user folder of entries any workspace with the same files can use."""
    return release.cache_dir() / "weight-loads"


class CacheKey(str):
    """The key of a load's arguments, the scenario's contents and which files exist, the same wherever the
    workspace is; ``scope``: the folders and files whose reads an entry depends on (absolute paths)."""

    scope: tuple[str, ...] = ()


def _given(path: Path) -> str:
    """How a path was given, where that is not just where it is: a relative path may be printed as given."""
    return "" if os.path.isabs(path) else str(path)


_CODE: list[str] = []


def _code() -> str:
    """The hash of the twin code a load runs (an entry computed by other code is not this code's outcome): the
    modules the load's, the description's and the checkpoint's entry points import, through the twin's own
    packages, and the function that builds a load's arguments (``code_scope``); and of the transformers version
    that makes the config. An edit of any other twin module (the performance model, the memory plan, the HTTP
    server) leaves every entry as it was."""
    if not _CODE:
        from . import code_scope
        from .hf_library import version

        digest = hashlib.sha256(repr((sys.version_info[:2], version())).encode())
        for path in code_scope.sources():
            digest.update(str(path.relative_to(code_scope.TWIN)).encode() + b"\0" + path.read_bytes())
        digest.update(code_scope.callers_source().encode())
        _CODE.append(digest.hexdigest())
    return _CODE[0]


# environment variables the release's load path reads (SGLANG_USE_AITER decides MoE padding, SGLANG_MOE_PADDING ...)
ENV_PREFIXES = ("SGLANG_", "AITER_", "ROCM_", "HIP_")


def _environment(folders: list[Path]) -> dict[str, str]:
    """Those variables, a path into the workspace (the folders' parent) written relative to it: a tuned-MoE file
    the next run's workspace holds at the same place is the same setting (what the load reads of it is in the
    entry's reads)."""
    roots = sorted({os.path.dirname(os.path.abspath(f)) for f in folders}, key=len, reverse=True)
    out = {}
    for k, v in os.environ.items():
        if k.startswith(ENV_PREFIXES):
            for root in roots:
                v = v.replace(root + os.sep, "{workspace}" + os.sep)
            out[k] = v
    return out


def cache_key(inputs: dict[str, Any], folders: list[Path], files: list[Path], memo: StatMemo | None = None) -> CacheKey:
    """``memo``: the workspace's listings and file hashes remembered by their stat (``stat_memo``)."""
    memo = memo or StatMemo()
    digest = hashlib.sha256(json.dumps([inputs, len(folders), _code(), _environment(folders)], sort_keys=True,
                                       default=str).encode())  # fmt: skip
    for folder in folders:
        digest.update(json.dumps([_given(folder), memo.listing(folder)]).encode())
    for f in files:
        digest.update(json.dumps([_given(f), memo.content(str(f))]).encode())
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
    """``load()``, with every file it opens added to ``opened``, and every file this process parsed as well
    (its caches of parsed and quoted sources would otherwise hide a second load's reads)."""
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


def _where(path: str, scope: tuple[str, ...]) -> tuple[int, str] | None:
    """(index in ``scope``, path relative to it) of a file in the scope, else None."""
    for i, s in enumerate(scope):
        if path == s:
            return i, ""
        if path.startswith(s + os.sep):
            return i, os.path.relpath(path, s)
    return None


# --- the paths in an outcome ----------------------------------------------------------------------------------


def _placeholder(i: int) -> str:
    return f"\0{i}\0"


def _map_strings(obj: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, list | tuple):
        return [_map_strings(v, fn) for v in obj]
    if isinstance(obj, dict):
        return {k: _map_strings(v, fn) for k, v in obj.items()}
    return obj


def _without_paths(outcome: dict[str, Any], scope: tuple[str, ...]) -> tuple[dict[str, Any], bool]:
    """``outcome`` with each scope path as its placeholder, and whether nothing else in it names the workspace
    (a parent folder, a resolved path): only then can it stand for a workspace elsewhere."""
    order = sorted(range(len(scope)), key=lambda i: -len(scope[i]))
    found: list[str] = []

    def strip(text: str) -> str:
        for i in order:
            text = text.replace(scope[i], _placeholder(i))
        found.append(text)
        return text

    out = _map_strings(outcome, strip)
    names = {os.path.dirname(s) for s in scope} | {p for s in scope for p in (os.path.realpath(s),
                                                                              os.path.dirname(os.path.realpath(s)))}  # fmt: skip
    names.discard("")
    return out, not any(n in text for n in names for text in found)


def _with_paths(outcome: dict[str, Any], scope: tuple[str, ...]) -> dict[str, Any]:
    def put(text: str) -> str:
        for i, s in enumerate(scope):
            text = text.replace(_placeholder(i), s)
        return text

    return _map_strings(outcome, put)


# --- entries ------------------------------------------------------------------------------------------------


def _answer(outcome: dict[str, Any]) -> WeightLoadReport:
    if "error" in outcome:
        e = outcome["error"]
        raise _ERRORS.get(e["kind"], WeightLoadError)(e["summary"], e["log"], param=e["param"],
                                                     checkpoint_param=e["checkpoint_param"], draft=e["draft"])  # fmt: skip
    return WeightLoadReport(**outcome["report"])


def remembered(cache_dir: Path | None, key: str, load: Callable[[], WeightLoadReport], *,
               args: dict[str, Any] | None = None, args_read: Callable[[], set[str]] | None = None,
               memo: StatMemo | None = None) -> WeightLoadReport:  # fmt: skip
    """``load()``'s outcome, from the workspace's ``cache_dir`` or the per-user cache when an entry of ``key``
    whose files are unchanged is there (an error is raised again as it was).

    ``args``: the server arguments of this launch; ``args_read()``: which of them the load's model code read
    (after it ran). An entry answers only a launch whose arguments have the values it read: the other flags (the
    KV cache's dtype, the benchmark's limits) leave the load as it was."""
    args = {k: _jsonable(v) for k, v in (args or {}).items()}
    memo = memo or StatMemo()
    scope = getattr(key, "scope", ())
    if not scope:
        return load()
    try:
        shared: Path | None = shared_cache()
    except (OSError, RuntimeError):  # no home folder
        shared = None
    contents: dict[str, str | None] = {}

    def same(reads: list[list[Any]]) -> bool:
        for i, rel, h in reads:
            path = os.path.join(scope[i], rel) if rel else scope[i]
            if path not in contents:
                contents[path] = memo.content(path)
            if contents[path] != h:
                return False
        return True

    for folder in (cache_dir, shared):
        for entry in _entries(folder, key):
            try:
                data = json.loads(entry.read_text())
                if not data["relocatable"] and data["scope"] != list(scope):
                    continue
                if not same(data["reads"]):
                    continue
                if any(args.get(name, _MISSING) != value for name, value in data.get("args", {}).items()):
                    continue
                outcome = _with_paths(data["outcome"], scope) if data["relocatable"] else data["outcome"]
            except (OSError, ValueError, KeyError, TypeError, IndexError):
                continue
            with contextlib.suppress(OSError):
                os.utime(entry)  # recently used: the last to go
            return _answer(outcome)

    opened: set[str] = set()

    def store(outcome: dict[str, Any]) -> None:
        reads = sorted([*where, memo.content(p)] for p in opened if (where := _where(p, scope)))
        stripped, relocatable = _without_paths(outcome, scope)
        used = sorted(args_read() if args_read is not None else args)
        conditions = {name: args.get(name, _MISSING) for name in used if name in args}
        data = {"scope": list(scope), "relocatable": relocatable, "reads": reads, "args": conditions,
                "outcome": stripped if relocatable else outcome}  # fmt: skip
        digest = hashlib.sha256(json.dumps([reads, conditions], sort_keys=True).encode()).hexdigest()[:16]
        name = f"{key}-{digest}.json"
        _store(cache_dir, name, data, KEEP)
        if relocatable:
            _store(shared, name, data, SHARED_KEEP)

    try:
        report = _recorded(load, opened)
    except WeightLoadError as exc:
        store({"error": {"kind": type(exc).__name__, "summary": exc.summary, "log": exc.log, "param": exc.param,
                         "checkpoint_param": exc.checkpoint_param, "draft": exc.draft}})  # fmt: skip
        raise
    store({"report": dataclasses.asdict(report)})
    return report


_MISSING = "\0missing"


def _jsonable(value: Any) -> Any:
    """An argument as an entry stores it (JSON's own types; anything else by its text)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def _entries(folder: Path | None, key: str) -> list[Path]:
    if folder is None:
        return []
    try:
        return sorted(folder.glob(f"{key}-*.json"))
    except OSError:
        return []


STALE_TMP_S = 3600  # a file still being written after this long was left by a process that died


def _store(folder: Path | None, name: str, data: dict[str, Any], keep: int) -> None:
    """Write the entry whole (a name of its own, renamed into place: concurrent writers of one entry never write
    into each other's file), then evict the least recently used beyond ``keep``. A reader whose entry is evicted
    meanwhile has read it whole or finds none (a miss); an entry another process evicts is simply skipped."""
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        cache_files.write_atomic(folder / name, json.dumps(data))
    except OSError:
        return
    with contextlib.suppress(OSError):
        cache_files.remove_stale_tmps(folder, STALE_TMP_S)
        for p in cache_files.least_recent(folder.glob("*.json"))[:-keep]:
            p.unlink(missing_ok=True)

