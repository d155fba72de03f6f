"""Where a workspace source tree came from: an upstream git commit, a released version, or nothing known.

The sandbox records it in the pristine commit of each source (``LocalSandbox.prepare``) as git trailers, so a
patch made on top can be taken back upstream: ``git format-patch`` against that commit, applied to the same
release or commit. It is read from what the tree itself carries, the way a maintainer would look:

- a git checkout: its ``HEAD`` commit, ``git describe`` and the ``origin`` remote;
- Python packaging metadata: ``PKG-INFO`` or a ``*.dist-info/METADATA`` (``Name``, ``Version``), or a static
  ``[project]`` table in ``pyproject.toml``;
- a generated version module (``_version.py`` / ``version.py`` with ``__version__ = "..."``, as setuptools-scm
  and vcs-versioning write into a release; SGLang's wheel carries ``python/sglang/_version.py``), with its
  ``__commit_id__`` when the release recorded one;
- a model directory: ``config.json``'s ``_name_or_path`` and ``transformers_version``.

Nothing here raises: a tree with no marker gets ``kind="unknown"``, which says so.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Literal

import git
from pydantic import BaseModel

MAX_DEPTH = 3  # how deep version markers are looked for (python/<package>/_version.py is depth 3)
_ASSIGN = r"^(?:__{name}__|{name})\s*(?::\s*[^=]+)?=\s*(?:{name}\s*=\s*)?['\"]([^'\"]+)['\"]"


class Provenance(BaseModel):
    """What is known of a source tree's upstream origin."""

    kind: Literal["git", "release", "model", "unknown"]
    name: str | None = None  # project, package or model name
    version: str | None = None  # a released version (or git describe)
    commit: str | None = None  # the upstream commit
    remote: str | None = None  # where that commit can be fetched
    evidence: str | None = None  # the file (relative to the tree) or "git" it was read from

    def label(self) -> str:
        """What the tree is, in a few words and no machine path (the pristine commit's subject names it so: a
        workspace path would mean nothing to the upstream project the patches go to)."""
        if self.kind == "unknown":
            return "origin unknown"
        what = " ".join(v for v in (self.name, self.version) if v)
        if self.kind == "git" and self.commit and not self.version:
            what = f"{what} {self.commit[:12]}".strip()
        return what or self.kind

    def trailers(self) -> list[str]:
        """Git trailer lines for the pristine commit's message."""
        if self.kind == "unknown":
            return ["Upstream: unknown (no git metadata, packaging metadata or version module in the tree)"]
        fields = [("Upstream-Kind", self.kind), ("Upstream-Name", self.name), ("Upstream-Version", self.version),
                  ("Upstream-Commit", self.commit), ("Upstream-Remote", self.remote),
                  ("Upstream-Evidence", self.evidence)]  # fmt: skip
        return [f"{key}: {value}" for key, value in fields if value]


def detect(tree: Path) -> Provenance:
    """The upstream origin ``tree`` records about itself (see the module docstring for where it looks)."""
    tree = Path(tree)
    for reader in (_from_git, _from_metadata, _from_pyproject, _from_version_module, _from_model_config):
        try:
            found = reader(tree)
        except (OSError, ValueError, UnicodeDecodeError, git.GitError, tomllib.TOMLDecodeError):
            found = None
        if found is not None:
            return found
    return Provenance(kind="unknown")


def _is_url(remote: str) -> bool:
    """A remote another machine can fetch from: a URL (``https://``, ``ssh://``, ``git://``) or scp-like
    ``user@host:path``, not a local path."""
    if remote.startswith("file:"):
        return False
    return bool(re.match(r"^[a-z][a-z0-9+.-]*://", remote) or re.match(r"^[\w.-]+@[\w.-]+:", remote))


def _shallow(tree: Path, pattern: str, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Files matching ``pattern`` at most ``max_depth`` levels down, shallowest first, outside .git."""
    out = []
    for depth in range(max_depth + 1):
        glob = "/".join(["*"] * depth + [pattern])
        out += sorted(p for p in tree.glob(glob) if ".git" not in p.relative_to(tree).parts and p.is_file())
    return out


def _from_git(tree: Path) -> Provenance | None:
    if not (tree / ".git").exists():
        return None
    with git.Repo(tree) as repo:
        if not repo.head.is_valid():
            return None
        commit = repo.head.commit.hexsha
        remote = next((r.url for r in repo.remotes if r.name == "origin"), None)
        if remote and not _is_url(remote):  # a clone of a local folder: a path of this machine, no upstream
            remote = None
        try:
            describe = repo.git.describe("--tags", "--always")
        except git.GitCommandError:
            describe = None
    return Provenance(kind="git", name=tree.resolve().name, version=describe, commit=commit, remote=remote, evidence="git")


def _from_metadata(tree: Path) -> Provenance | None:
    # the tree's own metadata sits at its root (an sdist) or one level down (an installed tree, an egg-info)
    for path in _shallow(tree, "PKG-INFO", 1) + _shallow(tree, "*.dist-info/METADATA", 1):
        head = path.read_text(errors="replace").split("\n\n", 1)[0]
        meta = dict(re.findall(r"^(Name|Version):\s*(\S+)", head, re.M))
        if "Version" in meta:
            return Provenance(kind="release", name=meta.get("Name"), version=meta["Version"],
                              evidence=str(path.relative_to(tree)))  # fmt: skip
    return None


def _from_pyproject(tree: Path) -> Provenance | None:
    for path in _shallow(tree, "pyproject.toml")[:3]:
        project = tomllib.loads(path.read_text()).get("project", {})
        if isinstance(project.get("version"), str):
            return Provenance(kind="release", name=project.get("name"), version=project["version"],
                              evidence=str(path.relative_to(tree)))  # fmt: skip
    return None


def _from_version_module(tree: Path) -> Provenance | None:
    for path in _shallow(tree, "_version.py") + _shallow(tree, "version.py"):
        text = path.read_text(errors="replace")
        version = re.search(_ASSIGN.format(name="version"), text, re.M)
        if version is None:
            continue
        commit = re.search(_ASSIGN.format(name="commit_id"), text, re.M)
        return Provenance(kind="release", name=path.parent.name, version=version.group(1),
                          commit=commit.group(1) if commit else None,
                          evidence=str(path.relative_to(tree)))  # fmt: skip
    return None


def _from_model_config(tree: Path) -> Provenance | None:
    path = tree / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    if not isinstance(config, dict):
        return None
    name = config.get("_name_or_path") or None
    version = config.get("transformers_version")
    if not name and not version:
        return None
    return Provenance(kind="model", name=name, version=f"transformers {version}" if version else None,
                      evidence="config.json")  # fmt: skip
