"""Parsed forms of the texts a run reads again and again, memoised by content.

A run reads the same workspace files at every crash it diagnoses and every fix it drafts: the checkpoint's weight
index (10 MB of JSON for a 78-layer MoE, 0.3 s to parse), the engine's model files and ``server_args.py`` (an
``ast.parse`` each). Keyed by the text itself, an edited file is a new entry and never a stale one, whatever its
modification time says. The objects returned are shared between callers: read them, never change them.
"""

from __future__ import annotations

import ast
import functools
import json
from typing import Any


@functools.lru_cache(maxsize=128)
def python_ast(text: str) -> ast.Module:
    """``ast.parse(text)`` (a ``SyntaxError`` is raised again on every call: nothing is kept for it)."""
    return ast.parse(text)


@functools.lru_cache(maxsize=4)
def json_value(text: str) -> Any:
    """``json.loads(text)`` (a ``ValueError`` is raised again on every call)."""
    return json.loads(text)
