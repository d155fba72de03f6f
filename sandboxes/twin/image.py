"""Build the twin's Docker image without pulling anything: a minimal Debian root filesystem (debootstrap, with
python3, python3-yaml and cpp) plus the twin's package and the libraries it imports (``libraries``: the real
transformers and what it requires, copied from this installation), imported into Docker.

    agent twin image                       # -> dayzero-twin:latest
    python -m sandboxes.twin.image --tag dayzero-twin:latest

The root filesystem is cached (``$DAYZERO_CACHE/twin-rootfs``, default ``~/.cache/dayzero``) and never changed
once built: debootstrap runs in a private folder beside it, which is renamed into place with a marker when it is
complete; the twin's package is added to the tar sent to ``docker import``, not to the cache. A whole build holds
an exclusive lock (``twin-rootfs.lock`` beside the cache), so a second ``agent twin image`` started at once
waits, then finds the root filesystem built and the image already imported from the same files (its label
``org.dayzero.twin-build``), and only says so. A half-built root filesystem that a killed build left is removed
by the next build, whatever a killed debootstrap left mounted in it unmounted first. Needs root (debootstrap) and
a Docker engine.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import py_compile
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker

from sandboxes.twin import cache_files, libraries
from sandboxes.twin.workspace import release

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # sandboxes/
DEFAULT_TAG = "dayzero-twin:latest"
ROOTFS_NAME = "twin-rootfs"
SUITE = "bookworm"
PACKAGES = "python3,python3-yaml,cpp"
INSTALL = "opt/dayzero"  # where the package lies in the image (PYTHONPATH)
LIBRARIES = INSTALL + "/lib"  # where the libraries it imports lie (PYTHONPATH, after the package)
BUILD_LABEL = "org.dayzero.twin-build"  # the hash of what the image was made from
CHANGES = [f"ENV PYTHONPATH=/{INSTALL}:/{LIBRARIES}", "ENV PYTHONUNBUFFERED=1", "WORKDIR /workspace",
           'LABEL org.dayzero.simulated="true"', "CMD [\"python3\", \"-m\", \"sandboxes.twin\", \"scenarios\"]"]  # fmt: skip


class ImageError(RuntimeError):
    pass


def default_rootfs() -> Path:
    """``twin-rootfs`` in the per-user cache (``$DAYZERO_CACHE``, default ``~/.cache/dayzero``)."""
    return release.cache_dir() / ROOTFS_NAME


def debootstrap(target: Path, log: Callable[[str], object] = print, lock_fd: int | None = None) -> None:
    """A minimal Debian with ``PACKAGES`` into the empty folder ``target``. ``lock_fd``: the cache's lock, which
    debootstrap holds too, so that a debootstrap outliving a killed ``agent twin image`` keeps the next build out
    of its folder until it ends."""
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed (apt-get install -y debootstrap)")
    log(f"debootstrap --variant=minbase --include={PACKAGES} {SUITE} {target}  (about a minute)")
    proc = subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(target)],
                          capture_output=True, text=True, pass_fds=() if lock_fd is None else (lock_fd,))  # fmt: skip
    if proc.returncode != 0:
        raise ImageError(f"debootstrap failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    missing = [p for p in ("usr/bin/python3", "usr/bin/cpp") if not (target / p).exists()]
    if missing:
        raise ImageError(f"debootstrap left no {', '.join(missing)} in {target}")


def _waiting(path: Path, log: Callable[[str], object]) -> Callable[[], object]:
    return lambda: log(f"waiting for another build of {path} to finish")


def rootfs(path: Path | None = None, log: Callable[[str], object] = print) -> Path:
    """The cached root filesystem, built first if it is not complete (under its lock)."""
    path = path or default_rootfs()
    with cache_files.locked(cache_files.lock_path(path), on_wait=_waiting(path, log)) as fd:
        return _rootfs(path, log, fd)


def _rootfs(path: Path, log: Callable[[str], object], lock_fd: int) -> Path:
    return cache_files.build_dir(path, lambda tmp: debootstrap(tmp, log, lock_fd), log=log)


def _package_files() -> list[Path]:
    """The twin's package as the image holds it (no bytecode)."""
    files = [PACKAGE_ROOT / "__init__.py"]
    for p in sorted((PACKAGE_ROOT / "twin").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            files.append(p)
    return files


def image_python(base: Path) -> tuple[int, int] | None:
    """The version of the root filesystem's Python (the folder of its standard library), None when it has none."""
    for lib in sorted(base.glob("usr/lib/python3.*")):
        match = re.fullmatch(r"python3\.(\d+)", lib.name)
        if match and (lib / "os.py").is_file():
            return 3, int(match.group(1))
    return None


def _bytecode(base: Path) -> bool:
    """Whether the image gets the package's bytecode: compiled here, so only for the Python this one is."""
    return image_python(base) == sys.version_info[:2]


def write_bytecode(dest: Path) -> list[tuple[Path, str]]:
    """The package compiled for this Python into ``dest``: (file, name in the image) per module. Every engine
    process of a container would otherwise compile the twin from source (0.7 s of each start, measured in the
    image). The files are checked against their source's hash, not its time: the image's clock and times say
    nothing about the copy the tar holds."""
    out = []
    for src in _package_files():
        if src.suffix != ".py":
            continue
        rel = src.relative_to(PACKAGE_ROOT)
        cached = Path(importlib.util.cache_from_source(str(rel)))
        target = dest / cached
        target.parent.mkdir(parents=True, exist_ok=True)
        py_compile.compile(str(src), cfile=str(target), dfile=f"/{INSTALL}/sandboxes/{rel.as_posix()}", doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)  # fmt: skip
        out.append((target, f"./{INSTALL}/sandboxes/{cached.as_posix()}"))
    return out


def build_id(base: Path) -> str:
    """What an image is made from: this root filesystem (its marker names one build), the package's files, the
    image's settings and whether it holds their bytecode (for which Python)."""
    digest = hashlib.sha256((base / cache_files.COMPLETE).read_bytes() + json.dumps(CHANGES).encode())
    digest.update(f"bytecode:{sys.implementation.cache_tag if _bytecode(base) else None}".encode())
    digest.update("\n".join(libraries.describe(libraries.distributions())).encode())
    for p in _package_files():
        digest.update(p.relative_to(PACKAGE_ROOT).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def library_files(base: Path) -> list[tuple[Path, str]]:
    """The libraries the twin imports, as (file here, name in the image). Their compiled parts (tokenizers,
    numpy, ...) are built for this Python, so the image's must be the same version."""
    theirs = image_python(base)
    if theirs != sys.version_info[:2]:
        shown = "none" if theirs is None else f"{theirs[0]}.{theirs[1]}"
        raise ImageError(f"the root filesystem's Python is {shown} and this one is {sys.version_info[0]}."
                         f"{sys.version_info[1]}: the libraries the twin imports (transformers, tokenizers, numpy) "
                         "are copied from this installation, so build the image with a Python of the image's version")
    try:
        return [(path, f"./{LIBRARIES}/{rel}") for path, rel in libraries.files(libraries.distributions())]
    except libraries.MissingLibrary as exc:
        raise ImageError(str(exc)) from None


def write_tar(base: Path, dest: Path) -> None:
    """The image's files: the root filesystem (less its marker and any older copy of the package), the
    package under ``/opt/dayzero/sandboxes`` and its libraries under ``/opt/dayzero/lib``, owned by root."""
    ours = ("./" + INSTALL, "./" + cache_files.COMPLETE, "./workspace")

    def rootfs_member(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if any(ti.name == o or ti.name.startswith(o + "/") for o in ours) else ti

    def owned_by_root(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        return ti

    def package_member(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
        leaf = ti.name.rsplit("/", 1)[-1]
        if leaf == "__pycache__" or leaf.endswith(".pyc"):
            return None  # this machine's own bytecode, for whatever Python made it
        return owned_by_root(ti)

    with tarfile.open(dest, "w") as tar:
        tar.add(base, arcname=".", filter=rootfs_member)
        for folder in (INSTALL, INSTALL + "/sandboxes", "workspace"):
            ti = tarfile.TarInfo("./" + folder)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(ti)
        tar.add(PACKAGE_ROOT / "__init__.py", arcname=f"./{INSTALL}/sandboxes/__init__.py", filter=package_member)
        tar.add(PACKAGE_ROOT / "twin", arcname=f"./{INSTALL}/sandboxes/twin", filter=package_member)
        made: set[str] = {"./" + INSTALL}
        for path, name in library_files(base):
            parts = name.split("/")
            for i in range(3, len(parts)):
                folder = "/".join(parts[:i])
                if folder not in made:
                    made.add(folder)
                    ti = tarfile.TarInfo(folder)
                    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                    tar.addfile(owned_by_root(ti))
            tar.add(path, arcname=name, filter=owned_by_root)
        if _bytecode(base):
            with tempfile.TemporaryDirectory(prefix="dayzero-bytecode-") as tmp:
                compiled = write_bytecode(Path(tmp))
                for folder in sorted({name.rsplit("/", 1)[0] for _, name in compiled}):
                    ti = tarfile.TarInfo(folder)
                    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                    tar.addfile(owned_by_root(ti))
                for path, name in compiled:
                    tar.add(path, arcname=name, filter=owned_by_root)


def build(tag: str = DEFAULT_TAG, rootfs_dir: Path | None = None, log: Callable[[str], object] = print) -> str:
    """Build and import the image; returns its id. The whole build holds the root filesystem's lock: a second
    build waits, and imports nothing when the image already has the files this one would import."""
    rootfs_dir = rootfs_dir or default_rootfs()
    with cache_files.locked(cache_files.lock_path(rootfs_dir), on_wait=_waiting(rootfs_dir, log)) as fd:
        base = _rootfs(rootfs_dir, log, fd)
        made_of = build_id(base)
        client = docker.from_env()
        try:
            image = client.images.get(tag)
            if image.labels.get(BUILD_LABEL) == made_of:
                log(f"{tag} is up to date (built from the same files)")
                return image.id
        except docker.errors.ImageNotFound:
            pass
        with tempfile.TemporaryDirectory(prefix="dayzero-image-") as tmp:
            tar_path = Path(tmp) / "image.tar"
            write_tar(base, tar_path)
            log(f"importing {tag}")
            repo, _, version = tag.partition(":")
            client.api.import_image(src=str(tar_path), repository=repo, tag=version or "latest",
                                    changes=[*CHANGES, f'LABEL {BUILD_LABEL}="{made_of}"'])  # fmt: skip
        return client.images.get(tag).id


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sandboxes.twin.image", description=__doc__.splitlines()[0])
    p.add_argument("--tag", default=DEFAULT_TAG)
    p.add_argument("--rootfs", type=Path, default=None, help=f"the root filesystem's cache (default: {default_rootfs()})")
    args = p.parse_args(argv)
    try:
        image_id = build(args.tag, args.rootfs)
    except (ImageError, OSError, docker.errors.DockerException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.tag} {image_id[:19]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
