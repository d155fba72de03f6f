"""The real SGLang release a scenario pins: downloaded once from the package registry, cached, unpacked.

``release_tree(version)`` returns the directory that holds the release's ``sglang/`` package (the Python
tree of the wheel, with its JIT kernel sources), downloading it with
``pip download sglang==VERSION --no-deps --only-binary=:all:`` into a per-user cache the first time. Every
later call is a cache hit. When no registry is reachable it returns ``None`` with the reason, and the caller
falls back to the bundled excerpt.

The cache lives in ``$DAYZERO_CACHE`` (default ``~/.cache/dayzero``) under ``sglang/<version>/``: the wheel as
downloaded and ``tree/`` unpacked from it. Compiled extension modules (``*.so``) are left out of the tree: they
are platform-specific binaries, not source. ``DAYZERO_SGLANG_SOURCE=bundled`` skips the registry on purpose.

Processes sharing the cache: one downloads and unpacks at a time (an ``flock`` on ``.lock`` in the version's
folder), the others wait and find it done. The wheel is downloaded into a private folder and renamed into the
cache whole; the tree is unpacked beside ``tree/`` and renamed; ``tree.complete``, written last (and removed
first when a tree is replaced), says a tree is whole. A wheel that cannot be unpacked is downloaded again.

Standard library only (the twin also runs inside a minimal image).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .. import cache_files

PACKAGE = "sglang"
DOWNLOAD_TIMEOUT_S = 600
SKIPPED_SUFFIXES = (".so", ".pyd", ".dylib")


@dataclass(frozen=True)
class ReleaseTree:
    """An unpacked release: ``root/sglang/`` is the package; ``wheel`` is the file it came from."""

    version: str
    root: Path
    wheel: Path

    @property
    def package(self) -> Path:
        return self.root / PACKAGE

    def describe(self) -> str:
        return f"SGLang {self.version} from {self.wheel.name}"


@dataclass(frozen=True)
class Unavailable:
    """Why the real release could not be had (the one line the twin prints before falling back)."""

    version: str
    reason: str


def cache_dir() -> Path:
    return Path(os.environ.get("DAYZERO_CACHE") or Path.home() / ".cache" / "dayzero")


def _release_dir(version: str) -> Path:
    return cache_dir() / PACKAGE / version


def cached(version: str) -> ReleaseTree | None:
    """The unpacked release if it is already in the cache (never touches the network)."""
    d = _release_dir(version)
    tree, marker = d / "tree", d / "tree.complete"
    wheels = sorted(d.glob(f"{PACKAGE}-{version}-*.whl"))
    if marker.is_file() and (tree / PACKAGE).is_dir() and wheels:
        return ReleaseTree(version, tree, wheels[0])
    return None


def _download(version: str, into: Path) -> Path | str:
    """The wheel, downloaded into a private folder beside ``into`` and renamed into it whole: a download a killed
    process left is never taken for the wheel (the caller holds the lock, so any such folder is stale)."""
    into.mkdir(parents=True, exist_ok=True)
    for stale in into.glob(f".download.*.{cache_files.PARTIAL}"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = cache_files.tmp_name(into / "download", cache_files.PARTIAL)
    tmp.mkdir()
    try:
        cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={version}", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", str(tmp)]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"pip download failed: {exc}"
        wheels = sorted(tmp.glob(f"{PACKAGE}-{version}-*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr or proc.stdout).strip().splitlines()
            return f"pip download {PACKAGE}=={version}: " + (last[-1] if last else f"exit {proc.returncode}")
        wheel = into / wheels[0].name
        os.replace(wheels[0], wheel)
        return wheel
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def unpack(wheel: Path, dest: Path) -> None:
    """Unpack the wheel's ``sglang/`` package (sources only) into ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.startswith(PACKAGE + "/") or info.is_dir() or name.endswith(SKIPPED_SUFFIXES):
                continue
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def _unpack_tree(wheel: Path, d: Path) -> str | None:
    """Unpack ``wheel`` as ``d/tree`` (beside it first, then renamed); the reason when it cannot be (the wheel
    is then deleted). The caller holds the lock."""
    tmp = d / "tree.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(d / "tree", ignore_errors=True)
    try:
        unpack(wheel, tmp)
    except (OSError, zipfile.BadZipFile) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        wheel.unlink(missing_ok=True)
        return f"{wheel.name} could not be unpacked: {exc}"
    tmp.rename(d / "tree")
    return None


def release_tree(version: str) -> ReleaseTree | Unavailable:
    """The unpacked release ``version``, downloading and unpacking it on first use."""
    hit = cached(version)
    if hit is not None:
        return hit
    if os.environ.get("DAYZERO_SGLANG_SOURCE", "").lower() == "bundled":
        return Unavailable(version, "DAYZERO_SGLANG_SOURCE=bundled")
    d = _release_dir(version)
    d.mkdir(parents=True, exist_ok=True)
    with cache_files.locked(d / ".lock"):  # one downloader at a time; the others then find the cache
        hit = cached(version)
        if hit is not None:
            return hit
        (d / "tree.complete").unlink(missing_ok=True)  # the tree is about to change: no reader may take it whole
        wheels = sorted(d.glob(f"{PACKAGE}-{version}-*.whl"))
        wheel, fresh = (wheels[0], False) if wheels else (_download(version, d), True)
        failure = wheel if isinstance(wheel, str) else _unpack_tree(wheel, d)
        if failure is not None and not fresh:  # the cached wheel is damaged: once more, from the registry
            wheel = _download(version, d)
            failure = wheel if isinstance(wheel, str) else _unpack_tree(wheel, d)
        if failure is not None:
            return Unavailable(version, failure)
        cache_files.write_atomic(d / "tree.complete", wheel.name + "\n")
    return ReleaseTree(version, d / "tree", wheel)


if __name__ == "__main__":  # python -m sandboxes.twin.workspace.release VERSION: warm the cache
    got = release_tree(sys.argv[1] if len(sys.argv) > 1 else "0.5.12")
    print(got.root if isinstance(got, ReleaseTree) else f"unavailable: {got.reason}")
    sys.exit(0 if isinstance(got, ReleaseTree) else 1)
