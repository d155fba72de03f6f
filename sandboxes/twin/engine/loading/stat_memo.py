"""File hashes and folder listings remembered by their ``stat``, so that an unchanged workspace is not read again.

A launch decides whether a remembered weight load still holds (``weights_cache``) by hashing every file the load
read (about 300 files of the SGLang tree and the checkpoint's 10 MB index) and listing the model folder and the
SGLang tree (about 2,000 folders): 0.4 s a launch, every launch. ``StatMemo`` answers both from what it saw last
time while the ``stat`` of the file (size, modification time, inode) or of every folder (its modification time,
which changes when an entry is added, removed or renamed) is the same, as git's index does. Like git it does not
trust what it saw of a file or folder modified within ``RACY_NS`` of the moment it looked (an edit in the same
instant could leave the time unchanged): those are read again next time.

The memo is a JSON file in the workspace's ``.twin/`` (``None``: this process only); a memo that cannot be read
or written is simply not used. Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ... import cache_files

RACY_NS = 2_000_000_000  # what was modified this close to the moment it was looked at is looked at again


class StatMemo:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.files: dict[str, list[Any]] = {}  # absolute path -> [size, mtime_ns, ino, sha256]
        self.listings: dict[str, dict[str, Any]] = {}  # folder -> {"dirs": {folder: mtime_ns}, "listing": [...]}
        self._changed = False
        if path is not None:
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                data = json.loads(path.read_text())
                self.files = dict(data.get("files", {}))
                self.listings = dict(data.get("listings", {}))

    def content(self, path: str) -> str | None:
        """The sha256 of the file's contents (None when it cannot be read)."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        seen = self.files.get(path)
        if seen is not None and seen[:3] == [st.st_size, st.st_mtime_ns, st.st_ino]:
            return seen[3]
        now = time.time_ns()
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return None
        if st.st_mtime_ns < now - RACY_NS:
            self.files[path] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
            self._changed = True
        return digest

    def listing(self, folder: Path) -> list[str]:
        """The relative path of every file and folder under ``folder``, git's own files left out."""
        key = os.path.abspath(folder)
        seen = self.listings.get(key)
        if seen is not None and self._folders_unchanged(seen["dirs"]):
            return list(seen["listing"])
        now = time.time_ns()
        out: list[str] = []
        dirs: dict[str, int] = {}
        for dirpath, dirnames, filenames in os.walk(folder):
            with contextlib.suppress(OSError):
                dirs[dirpath] = os.stat(dirpath).st_mtime_ns
            dirnames[:] = sorted(d for d in dirnames if d != ".git")
            rel = os.path.relpath(dirpath, folder)
            out.extend(os.path.join(rel, name) for name in dirnames)
            out.extend(os.path.join(rel, name) for name in sorted(filenames))
        if dirs and max(dirs.values()) < now - RACY_NS:
            self.listings[key] = {"dirs": dirs, "listing": out}
            self._changed = True
        return out

    @staticmethod
    def _folders_unchanged(dirs: dict[str, int]) -> bool:
        for d, mtime in dirs.items():
            try:
                if os.stat(d).st_mtime_ns != mtime:
                    return False
            except OSError:
                return False
        return True

    def save(self) -> None:
        """Write what changed (atomically; another launch's write may win, which only costs it a re-read)."""
        if self.path is None or not self._changed:
            return
        with contextlib.suppress(OSError):  # a name of its own: two launches saving at once never mix their writes
            cache_files.write_atomic(self.path, json.dumps({"files": self.files, "listings": self.listings}))
            self._changed = False
