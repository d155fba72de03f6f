"""The release's ``ModelConfig`` checks of the server arguments, run when ``ServerArgs`` runs them, remembered.

``ServerArgs.__post_init__`` makes the release's ``ModelConfig`` from the arguments in its first step the twin
models (``_handle_piecewise_cuda_graph`` calls ``get_model_config()``), so the checks ``ModelConfig`` makes of
the arguments against the checkpoint fail the launch there, before any scheduler: ``_verify_quantization``
refusing ``--quantization fp8`` for an MXFP4 checkpoint, the dtype and context-length checks. ``check`` runs the
workspace's own ``ModelConfig.from_server_args`` through the executor (``build.release_model_config``) and raises
what it raised as ``InvalidServerArgs`` (its message and exception type).

That costs a second or more (transformers and the release's config code are imported), so the outcome is kept
in the per-user cache like a weight load (``weights_cache``): by the arguments it reads, the engine's
environment and the twin's code, and answered only while every file it opened in the model folder and the
SGLang tree has the same contents; the lines the release logged meanwhile are printed again from the entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ... import cache_files
from ...workspace import release
from ..server_args import InvalidServerArgs
from . import weights_cache
from .platform import Platform
from .stat_memo import StatMemo

FOLDER = "model-checks"
KEEP = 512  # entries in the per-user cache (a few hundred bytes each)
FORMAT = 1


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith("sglang.twin"):
            self.lines.append((record.levelname.lower(), record.getMessage()))


def _run(node: Platform, sglang_root: Path, model_dir: Path) -> dict[str, Any]:
    """The check itself: {"error": [kind, message]} or {}, plus the lines the release logged."""
    from . import build
    from .executor import ExecutionError, Executor

    collect = _Collect()
    root = logging.getLogger()
    root.addHandler(collect)
    outcome: dict[str, Any] = {}
    try:
        build.release_model_config(Executor(sglang_root, node), model_dir)
    except build.BuildError as exc:
        cause = exc.cause if exc.cause is not None else exc
        outcome["error"] = [type(cause).__name__, str(cause)]
    except ExecutionError as exc:  # a workspace file that does not import
        outcome["error"] = [type(exc.cause).__name__, f"{exc.cause} ({exc.path})"]
    finally:
        root.removeHandler(collect)
    outcome["log"] = collect.lines
    return outcome


def check(args: Mapping[str, Any], read: frozenset[str], node: Platform, sglang_root: Path, model_dir: Path,
          log: Callable[[str, str], None]) -> None:  # fmt: skip
    """Run the release's ``ModelConfig`` checks of ``args`` (``read``: the fields ``from_server_args`` reads)
    for the checkpoint in ``model_dir``; raise ``InvalidServerArgs`` as the release raises. ``log(level, line)``
    prints the lines it logged when they come from the cache (a run prints its own)."""
    scope = (os.path.abspath(sglang_root), os.path.abspath(model_dir))
    inputs = {k: weights_cache._jsonable(args.get(k)) for k in sorted(read) if k != "model_path"}
    key = hashlib.sha256(json.dumps([FORMAT, inputs, node.gfx_arch, node.memory_gb, weights_cache._code(),
                                     weights_cache._environment([Path(s) for s in scope])],
                                    sort_keys=True, default=str).encode()).hexdigest()[:32]  # fmt: skip
    folder = release.cache_dir() / FOLDER
    memo = StatMemo()
    outcome = _cached(folder, key, scope, memo)
    if outcome is not None:
        for level, line in outcome["log"]:
            log(level, line)
    else:
        opened: set[str] = set()
        outcome = weights_cache._recorded(lambda: _run(node, sglang_root, model_dir), opened)  # type: ignore[arg-type]
        reads = sorted([*where, memo.content(p)] for p in opened if (where := weights_cache._where(p, scope)))
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            cache_files.write_atomic(folder / f"{key}.json", json.dumps({"reads": reads, "outcome": outcome}))
            for old in cache_files.least_recent(folder.glob("*.json"))[:-KEEP]:
                old.unlink(missing_ok=True)
    if "error" in outcome:
        kind, message = outcome["error"]
        raise InvalidServerArgs(message, kind)


def _cached(folder: Path, key: str, scope: tuple[str, str], memo: StatMemo) -> dict[str, Any] | None:
    entry = folder / f"{key}.json"
    try:
        data = json.loads(entry.read_text())
        for i, rel, digest in data["reads"]:
            if memo.content(os.path.join(scope[i], rel) if rel else scope[i]) != digest:
                return None
        outcome = data["outcome"]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    with contextlib.suppress(OSError):
        os.utime(entry)
    return outcome
