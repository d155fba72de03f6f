"""Helpers the sandbox tests share."""

from __future__ import annotations

from pathlib import Path


def make_source(path: Path, files: dict[str, str]) -> Path:
    """A source tree at ``path`` holding ``files`` (relative path -> text)."""
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return path
