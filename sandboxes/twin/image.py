"""Build the twin's Docker image without pulling anything: a minimal Debian root filesystem (debootstrap, with
python3, python3-yaml and cpp) plus the twin's package, imported into Docker.

    agent twin image                       # -> dayzero-twin:latest
    python -m sandboxes.twin.image --tag dayzero-twin:latest

The root filesystem is cached (``~/.cache/dayzero/twin-rootfs``); rebuilding after a change to the twin only
re-copies the package. Needs root (debootstrap) and a Docker engine.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import docker

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # sandboxes/
DEFAULT_TAG = "dayzero-twin:latest"
DEFAULT_ROOTFS = Path.home() / ".cache" / "dayzero" / "twin-rootfs"
SUITE = "bookworm"
PACKAGES = "python3,python3-yaml,cpp"


class ImageError(RuntimeError):
    pass


def rootfs(path: Path = DEFAULT_ROOTFS, log=print) -> Path:
    if (path / "usr" / "bin" / "python3").exists() and (path / "usr" / "bin" / "cpp").exists():
        return path
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed (apt-get install -y debootstrap)")
    path.mkdir(parents=True, exist_ok=True)
    log(f"debootstrap --variant=minbase --include={PACKAGES} {SUITE} {path}  (about a minute)")
    proc = subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(path)],
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        raise ImageError(f"debootstrap failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return path


def build(tag: str = DEFAULT_TAG, rootfs_dir: Path = DEFAULT_ROOTFS, log=print) -> str:
    """Build and import the image; returns its id."""
    base = rootfs(rootfs_dir, log)
    target = base / "opt" / "dayzero" / "sandboxes"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(PACKAGE_ROOT / "twin", target / "twin", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(PACKAGE_ROOT / "__init__.py", target / "__init__.py")
    (base / "workspace").mkdir(exist_ok=True)
    with tempfile.NamedTemporaryFile(suffix=".tar") as tmp:
        with tarfile.open(tmp.name, "w") as tar:
            tar.add(base, arcname=".")
        log(f"importing {tag}")
        client = docker.from_env()
        repo, _, version = tag.partition(":")
        client.api.import_image(src=tmp.name, repository=repo, tag=version or "latest", changes=[
            "ENV PYTHONPATH=/opt/dayzero", "ENV PYTHONUNBUFFERED=1", "WORKDIR /workspace",
            'LABEL org.dayzero.simulated="true"', "CMD [\"python3\", \"-m\", \"sandboxes.twin\", \"scenarios\"]",
        ])  # fmt: skip
    return client.images.get(tag).id


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sandboxes.twin.image", description=__doc__.splitlines()[0])
    p.add_argument("--tag", default=DEFAULT_TAG)
    p.add_argument("--rootfs", type=Path, default=DEFAULT_ROOTFS)
    args = p.parse_args(argv)
    try:
        image_id = build(args.tag, args.rootfs)
    except (ImageError, docker.errors.DockerException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.tag} {image_id[:19]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
