"""The git objects of pristine sources, kept between runs as packs.

A workspace's first commit stores every file of its source as a git object. For an SGLang release that is
thousands of small files, each compressed and written on its own: most of a new run's set-up time. The objects
are the same in every run made from the same source, so after a first commit they are kept as one pack in the
per-user cache (``$DAYZERO_CACHE/git-packs/``, default ``~/.cache/dayzero``), under a key made of the source's
file listing (paths and sizes). A later first commit of a source with the same listing starts from a copy of
that pack, and git writes only the objects the pack lacks (a file whose content differs at the same size).

The pack is copied into the repository, never shared with it, so a workspace stays whole when the cache is
deleted. The cache only ever saves time: a pack that matches nothing is unused, and a cache that cannot be
written is skipped. Sources over ``MAX_BYTES`` (a real checkpoint's weights) are never kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from sandboxes.twin.workspace import release

MAX_BYTES = 512 * 2**20  # a source larger than this is not worth a second copy in the cache
STALE_PARTIAL_S = 3600  # a pack still being written after this long was left by a process that died
_PACK_SUFFIXES = (".pack", ".idx")


def cache_root() -> Path:
    """Where the packs are kept: ``git-packs`` in the per-user cache (``$DAYZERO_CACHE``, default
    ``~/.cache/dayzero``), beside the SGLang releases."""
    return release.cache_dir() / "git-packs"


def listing_key(root: Path) -> str | None:
    """A key for the tree under ``root`` (its ``.git`` left out): a hash of every path with its size, or of its
    target for a symlink. None when the tree is larger than ``MAX_BYTES``."""
    entries: list[str] = []
    total = 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        base = Path(directory)
        for name in (*files, *(d for d in dirs if (base / d).is_symlink())):
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                entries.append(f"{rel}\0->{os.readlink(path)}")
                continue
            size = path.stat().st_size
            total += size
            entries.append(f"{rel}\0{size}")
        if total > MAX_BYTES:
            return None
    return hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()[:32]


def seed(git_dir: Path, key: str) -> bool:
    """Copy the kept pack for ``key`` into the repository at ``git_dir``; False when none is kept."""
    kept = cache_root() / key
    files = [p for p in kept.glob("pack-*") if p.suffix in _PACK_SUFFIXES] if kept.is_dir() else []
    if len(files) != len(_PACK_SUFFIXES):
        return False
    dest = git_dir / "objects" / "pack"
    dest.mkdir(parents=True, exist_ok=True)
    try:
        for p in sorted(files, key=lambda p: p.suffix != ".pack"):  # the index last: git reads a pack by it
            shutil.copyfile(p, dest / p.name)
    except OSError:
        for p in files:
            (dest / p.name).unlink(missing_ok=True)
        return False
    return True


def keep(work_tree: Path, key: str) -> None:
    """Keep the trees and blobs of ``HEAD`` in the repository at ``work_tree`` as the pack for ``key`` (not its
    commit, which names one run). Written beside and renamed into place: a reader sees a whole pack or none."""
    root = cache_root()
    if (root / key).is_dir():
        return
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale_partials(root)
        objects = _tree_objects(work_tree)
        with tempfile.TemporaryDirectory(dir=root, prefix=".partial-") as tmp:
            subprocess.run(["git", "pack-objects", "--quiet", "--window=0", str(Path(tmp) / "pack")],
                           cwd=work_tree, input=objects, check=True, capture_output=True, text=True)  # fmt: skip
            with contextlib.suppress(OSError):  # another run kept it meanwhile: theirs stays
                os.rename(tmp, root / key)
                os.mkdir(tmp)  # for the context manager's clean-up


def _remove_stale_partials(root: Path) -> None:
    """Delete the half-written packs a killed process left (``.partial-*`` folders over an hour old)."""
    now = time.time()
    for partial in root.glob(".partial-*"):
        with contextlib.suppress(OSError):
            if now - partial.stat().st_mtime > STALE_PARTIAL_S:
                shutil.rmtree(partial)


def _tree_objects(work_tree: Path) -> str:
    """The names of ``HEAD``'s root tree and of every tree and blob under it, one per line."""
    def git_out(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=work_tree, check=True, capture_output=True, text=True).stdout

    root_tree = git_out("rev-parse", "HEAD^{tree}").strip()
    return root_tree + "\n" + git_out("ls-tree", "-r", "-t", "--object-only", "HEAD")
