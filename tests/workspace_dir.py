"""A policy's read-only view of a workspace (``PolicyContext.workspace``) over a plain directory, for tests that
drive the playbook's fixes without a sandbox: the same three calls as ``tools.expert``'s view of a sandbox."""

from __future__ import annotations

from pathlib import Path


class DirWorkspace:
    def __init__(self, root: Path) -> None:
        self.root = root

    def read_file(self, path: str) -> str:
        return (self.root / path).read_text()

    def exists(self, path: str) -> bool:
        return (self.root / path).exists()

    def glob(self, pattern: str) -> list[str]:
        return [p.relative_to(self.root).as_posix() for p in self.root.glob(pattern) if p.is_file()]
