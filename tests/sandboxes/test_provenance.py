"""The pristine commit says where each source tree came from, read from what the tree carries."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import git
import pytest

from sandboxes import provenance
from sandboxes.local import LocalSandbox
from tests.sandboxes.conftest import make_source

RELEASES = Path.home() / ".cache" / "dayzero" / "sglang"


def test_a_release_tree_records_its_version_module(tmp_path):
    """The shape of SGLang's wheel: python/sglang/_version.py written by vcs-versioning."""
    src = make_source(tmp_path / "sglang", {
        "python/sglang/_version.py": "__version__ = version = '0.5.12'\n__version_tuple__ = (0, 5, 12)\n"
                                     "__commit_id__ = commit_id = 'g1a2b3c'\n",
        "python/sglang/srt/x.py": "X = 1\n"})  # fmt: skip
    found = provenance.detect(src)
    assert (found.kind, found.name, found.version, found.commit) == ("release", "sglang", "0.5.12", "g1a2b3c")
    assert found.evidence == "python/sglang/_version.py"


def test_a_git_checkout_records_its_commit_and_remote(tmp_path):
    src = make_source(tmp_path / "upstream", {"a.py": "A = 1\n"})
    with git.Repo.init(src) as repo:
        repo.git.add("--all")
        repo.git.commit("-m", "upstream", env={"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x",
                                               "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"})  # fmt: skip
        repo.git.tag("v1.2.3")
        repo.create_remote("origin", "https://example.invalid/upstream.git")
        sha = repo.head.commit.hexsha
    found = provenance.detect(src)
    assert (found.kind, found.commit, found.version, found.remote) == (
        "git", sha, "v1.2.3", "https://example.invalid/upstream.git")


def test_a_clone_of_a_local_folder_names_no_path_of_this_machine(tmp_path):
    """A checkout cloned from a folder on this disk: its origin is a path no upstream reviewer can fetch, so the
    trailers and the pristine commit's subject name the commit, not the path."""
    src = make_source(tmp_path / "upstream", {"a.py": "A = 1\n"})
    with git.Repo.init(src) as repo:
        repo.git.add("--all")
        repo.git.commit("-m", "upstream", env={"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x",
                                               "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"})  # fmt: skip
    clone = tmp_path / "clone"
    git.Repo.clone_from(src, clone).close()
    found = provenance.detect(clone)
    assert found.kind == "git" and found.remote is None
    repos = LocalSandbox(tmp_path / "ws").prepare({"engine": clone})
    with git.Repo(repos["engine"]) as repo:
        (only,) = list(repo.iter_commits())
    assert str(tmp_path) not in only.message and only.summary == f"pristine upstream: engine (clone {found.version})"


def test_metadata_pyproject_model_and_nothing(tmp_path):
    sdist = make_source(tmp_path / "sdist", {"PKG-INFO": "Metadata-Version: 2.1\nName: foo\nVersion: 2.0\n\nbody\n"})
    assert provenance.detect(sdist).trailers() == [
        "Upstream-Kind: release", "Upstream-Name: foo", "Upstream-Version: 2.0", "Upstream-Evidence: PKG-INFO"]
    proj = make_source(tmp_path / "proj", {"pyproject.toml": '[project]\nname = "bar"\nversion = "0.3"\n'})
    assert (provenance.detect(proj).name, provenance.detect(proj).version) == ("bar", "0.3")
    dynamic = make_source(tmp_path / "dyn", {"pyproject.toml": '[project]\nname = "baz"\ndynamic = ["version"]\n'})
    assert provenance.detect(dynamic).kind == "unknown"
    model = make_source(tmp_path / "model", {"config.json": json.dumps({"_name_or_path": "org/Model-MXFP4",
                                                                  "transformers_version": "4.57.1"})})
    found = provenance.detect(model)
    assert (found.kind, found.name, found.version) == ("model", "org/Model-MXFP4", "transformers 4.57.1")
    broken = make_source(tmp_path / "broken", {"pyproject.toml": "[project\n", "config.json": "{not json"})
    assert provenance.detect(broken).kind == "unknown"  # unreadable markers are no markers, never an error
    assert provenance.detect(broken).trailers()[0].startswith("Upstream: unknown")


def test_the_pristine_commit_carries_the_trailers(tmp_path):
    src = make_source(tmp_path / "src", {"pkg/_version.py": "version = '9.9'\n"})
    repos = LocalSandbox(tmp_path / "ws").prepare({"engine": src})
    with git.Repo(repos["engine"]) as repo:
        (only,) = list(repo.iter_commits())
    assert only.summary == "pristine upstream: engine (pkg 9.9)" and str(tmp_path) not in only.message
    # git itself reads them as trailers (``git log --format=%(trailers)``, ``interpret-trailers``)
    parsed = subprocess.run(["git", "interpret-trailers", "--parse"], input=only.message, text=True,
                            capture_output=True, check=True).stdout.splitlines()  # fmt: skip
    assert parsed == ["Upstream-Kind: release", "Upstream-Name: pkg", "Upstream-Version: 9.9",
                      "Upstream-Evidence: pkg/_version.py"]  # fmt: skip


def test_the_real_release_tree_is_recognised():
    """The cached SGLang wheel the twin's workspaces are made from (when this machine has it)."""
    trees = sorted(RELEASES.glob("*/tree")) if RELEASES.exists() else []
    if not trees:
        pytest.skip("no cached SGLang release on this machine")
    for tree in trees:
        found = provenance.detect(tree)
        assert (found.kind, found.name, found.version) == ("release", "sglang", tree.parent.name)
