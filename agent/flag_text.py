"""Configurations as a person types them: ``--tp-size 4 --dp-size 2``, never ``{'tp-size': 4, 'dp-size': 2}``.

The trace keeps flags as JSON objects and some rationales quote them as Python dicts; what the terminal shows
(``agent show``, the live panel) reads them as the engine's command line instead.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from typing import Any

from tools.context import flags_to_argv


def flags_text(flags: dict[str, Any] | None, env: dict[str, str] | None = None) -> str:
    """``AITER_X=1 --tp-size 4 --enable-dp-attention``: the environment, then the flags (true ones bare, false or
    unset ones left out), shell-quoted."""
    assignments = [f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items() if v not in ("", None)]
    argv = flags_to_argv({str(k): v for k, v in (flags or {}).items()})
    return " ".join(assignments + [shlex.quote(a) for a in argv]) or "(engine defaults)"


def _literal_dict(text: str) -> dict[str, Any] | None:
    """``text`` as a dict literal (Python's or JSON's) whose keys are strings, else None."""
    for parse in (ast.literal_eval, json.loads):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            return value
    return None


_FLAG_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")  # an engine flag's name: tp-size, enable-dp-attention


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _as_text(value: dict[str, Any]) -> str:
    """A dict of engine flags (dashed names, scalar values) as a command line; any other as ``key=value`` items
    (nested values the same way)."""
    if all(_is_scalar(v) for v in value.values()) and any(_FLAG_NAME.fullmatch(k) for k in value):
        return flags_text(value)
    return " ".join(f"{k}={_value_text(v)}" for k, v in value.items())


def _value_text(value: Any) -> str:
    if isinstance(value, dict):
        return f"({_as_text(value)})" if value else "(none)"
    if isinstance(value, list):
        return ", ".join(_value_text(v) for v in value)
    return str(value)


def dicts_as_flags(text: str) -> str:
    """``text`` with every dict literal in it (``{'tp-size': 8, 'dp-size': 4}``) written as flags
    (``--tp-size 8 --dp-size 4``); other braces (a ``{workspace}`` placeholder) stay as they are."""
    out, i = [], 0
    while (start := text.find("{", i)) >= 0:
        depth, end = 0, -1
        for j in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                end = j
                break
        if end < 0:
            break
        value = _literal_dict(text[start : end + 1])
        out.append(text[i:start] + (_as_text(value) if value is not None else text[start : end + 1]))
        i = end + 1
    return "".join(out) + text[i:]


def input_text(args: dict[str, Any], limit: int | None = 120) -> str:
    """A tool call's input on one line: a ``flags``/``env`` pair as a command line, other values as ``key=value``
    (a dict as flags, a list comma-joined); a value longer than ``limit`` characters (None: no bound) is cut,
    saying how long it was."""
    parts = []
    if isinstance(args.get("flags"), dict) or isinstance(args.get("env"), dict):
        parts.append(flags_text(args.get("flags") or {}, args.get("env") or {}))
    for key, value in args.items():
        if key in ("flags", "env") and isinstance(value, dict):
            continue
        shown = _as_text(value) if isinstance(value, dict) and value else _value_text(value)
        shown = " ".join(shown.split())  # one line (a file's content, a diff)
        if limit is not None and len(shown) > limit:
            shown = f"{shown[:limit]}... ({len(shown)} characters)"
        parts.append(f"{key}={shown}")
    return " ".join(parts)
