"""The pristine sources' git objects kept between runs (``sandboxes.git_packs``): a second workspace of the same
source writes none of them again, and the cache never changes what a workspace holds."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sandboxes import git_packs
from sandboxes.local import LocalSandbox
from tests.sandboxes.conftest import make_source

FILES = {f"pkg/mod{i}.py": f"VALUE = {i}\n" for i in range(40)} | {"README": "upstream\n"}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "git-packs"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def objects(repo: Path) -> dict[str, int]:
    """``git count-objects -v``: loose ``count`` and ``in-pack``."""
    rows = dict(line.split(": ") for line in git(repo, "count-objects", "-v").splitlines())
    return {"loose": int(rows["count"]), "in-pack": int(rows["in-pack"])}


def workspace(tmp_path: Path, name: str, source: Path) -> Path:
    return LocalSandbox(tmp_path / name).prepare({"src": source})["src"]


def test_a_second_workspace_of_a_source_starts_from_its_kept_pack(tmp_path, cache):
    source = make_source(tmp_path / "source", FILES)
    first = workspace(tmp_path, "one", source)
    assert objects(first)["loose"] == 1 + 40 + 1 + 1 + 1  # commit, blobs, README, root tree, pkg/ tree
    (kept,) = cache.iterdir()  # one pack, of trees and blobs only: a run's commit stays its own
    assert "commit" not in git(first, "verify-pack", "-v", str(next(kept.glob("*.idx"))))

    second = workspace(tmp_path, "two", source)
    assert objects(second) == {"loose": 1, "in-pack": 43}  # its own commit; every file's object from the pack
    assert git(second, "rev-parse", "HEAD^{tree}") == git(first, "rev-parse", "HEAD^{tree}")

    shutil.rmtree(cache)  # a copy, not a share: the workspace stays whole without the cache
    git(second, "fsck", "--full", "--strict")
    assert git(second, "show", "HEAD:pkg/mod7.py") == "VALUE = 7\n"


def test_other_content_at_the_same_sizes_is_committed_as_it_is(tmp_path, cache):
    workspace(tmp_path, "one", make_source(tmp_path / "a", FILES))
    changed = make_source(tmp_path / "b", FILES | {"pkg/mod3.py": "VALUE = x\n"})  # same listing, other text
    ws = workspace(tmp_path, "two", changed)
    assert git(ws, "show", "HEAD:pkg/mod3.py") == "VALUE = x\n"
    assert objects(ws)["loose"] == 1 + 1 + 1 + 1  # commit, the changed blob, and the two trees above it
    git(ws, "fsck", "--full", "--strict")
    assert git_packs.listing_key(changed) == git_packs.listing_key(tmp_path / "a")


def test_a_source_over_the_size_bound_is_not_kept(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(git_packs, "MAX_BYTES", 100)
    source = make_source(tmp_path / "source", FILES)
    assert git_packs.listing_key(source) is None
    workspace(tmp_path, "one", source)
    assert not cache.exists() or not any(cache.iterdir())


def test_a_cache_that_cannot_be_written_costs_nothing_but_time(tmp_path, cache):
    cache.parent.mkdir(parents=True)
    cache.write_text("a file where the cache folder would be")
    ws = workspace(tmp_path, "one", make_source(tmp_path / "source", FILES))
    assert objects(ws) == {"loose": 44, "in-pack": 0}
    git(ws, "fsck", "--full", "--strict")


def test_a_partial_pack_is_never_used(tmp_path, cache):
    source = make_source(tmp_path / "source", FILES)
    workspace(tmp_path, "one", source)
    (kept,) = cache.iterdir()
    next(kept.glob("*.idx")).unlink()  # as a pack copied by hand and cut short would look
    ws = workspace(tmp_path, "two", source)
    assert objects(ws) == {"loose": 44, "in-pack": 0}


def test_half_written_packs_a_killed_process_left_are_cleared_once_old(tmp_path, cache):
    cache.mkdir(parents=True)
    old, fresh = cache / ".partial-old", cache / ".partial-fresh"  # one long dead, one perhaps being written
    for partial in (old, fresh):
        partial.mkdir()
        (partial / "pack-x.pack").write_bytes(b"half")
    os.utime(old, (time.time() - 2 * git_packs.STALE_PARTIAL_S,) * 2)
    workspace(tmp_path, "one", make_source(tmp_path / "source", FILES))  # keeps a pack: clears what is stale
    assert not old.exists() and fresh.exists()
