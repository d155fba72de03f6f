"""The Python libraries the twin's programs import beyond the standard library, as installed here.

The twin makes a model's config as the release does, with the real ``transformers`` (the version the pinned
release requires) and what it requires in turn; it reads YAML with PyYAML. ``distributions()`` is that closure,
found through the installed distributions' own metadata (``Requires-Dist``, markers evaluated for this Python),
so a new requirement of a new transformers is followed without a list written here. The twin's image and the test
that runs the twin without site-packages copy exactly these files (``files``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

# what the twin's own code imports, and what the release's bench_serving imports beyond them (release_bench.py)
ROOTS = ("transformers", "PyYAML", "aiohttp", "pybase64", "Pillow", "requests", "numpy", "tqdm")


class MissingLibrary(RuntimeError):
    """A library the twin needs is not installed (one line naming it and the requirement that asked for it)."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(dist: metadata.Distribution) -> Iterator[str]:
    from packaging.requirements import Requirement

    for text in dist.requires or ():
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            yield req.name


def distributions(roots: Iterable[str] = ROOTS) -> list[metadata.Distribution]:
    """The installed distributions ``roots`` need, with everything they require (each once, in a stable order)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [(name, None) for name in roots]
    while todo:
        name, wanted_by = todo.pop()
        key = _canonical(name)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            by = f" (required by {wanted_by})" if wanted_by else ""
            raise MissingLibrary(f"the twin needs the Python package {name!r}{by}, which is not installed "
                                 "(pip install -e . installs it)") from None  # fmt: skip
        seen[key] = dist
        todo.extend((req, dist.metadata["Name"]) for req in _requirements(dist))
    return [seen[k] for k in sorted(seen)]


def describe(dists: Iterable[metadata.Distribution]) -> list[str]:
    """``name==version`` of each (what an image made of them is made from)."""
    return [f"{d.metadata['Name']}=={d.version}" for d in dists]


def files(dists: Iterable[metadata.Distribution]) -> list[tuple[Path, str]]:
    """Every installed file of ``dists`` (code, data, their ``.dist-info``), as (where it is, its path relative to
    the folder it was installed into); bytecode and files installed outside that folder (scripts) are left out."""
    out: list[tuple[Path, str]] = []
    for dist in dists:
        for rel in dist.files or ():
            posix = rel.as_posix()
            if posix.startswith("../") or "__pycache__" in rel.parts or posix.endswith(".pyc"):
                continue
            path = Path(str(dist.locate_file(rel)))
            if path.is_file():
                out.append((path, posix))
    return out
