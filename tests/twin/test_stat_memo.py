"""The workspace's file hashes and folder listings, remembered by their stat (``engine/loading/stat_memo.py``):
an unchanged file or folder is not read again, a changed one is, and what changed too recently to be sure of is
never remembered."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sandboxes.twin.engine.loading import stat_memo
from sandboxes.twin.engine.loading.stat_memo import StatMemo

OLD = 1_600_000_000  # a modification time long before any test runs


def _old(*paths: Path) -> None:
    for p in paths:
        os.utime(p, (OLD, OLD))


def test_an_unchanged_file_is_not_read_again_and_a_changed_one_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "a.py"
    f.write_text("x = 1\n")
    _old(f)
    memo_file = tmp_path / "memo.json"
    memo = StatMemo(memo_file)
    assert memo.content(str(f)) == hashlib.sha256(b"x = 1\n").hexdigest()
    memo.save()
    again = StatMemo(memo_file)  # another launch, from the file
    real_open = open

    def no_reading(path, *args, **kwargs):  # noqa: ANN001
        raise AssertionError(f"{path} read again")

    monkeypatch.setattr("builtins.open", no_reading)
    assert again.content(str(f)) == hashlib.sha256(b"x = 1\n").hexdigest()
    monkeypatch.setattr("builtins.open", real_open)
    f.write_text("x = 2\n")  # same size, another time
    assert again.content(str(f)) == hashlib.sha256(b"x = 2\n").hexdigest()
    assert again.content(str(tmp_path / "gone.py")) is None


def test_a_file_modified_just_now_is_never_remembered(tmp_path: Path) -> None:
    f = tmp_path / "a.py"
    f.write_text("x = 1\n")  # now: an edit in this same instant could keep its time
    memo = StatMemo(tmp_path / "memo.json")
    memo.content(str(f))
    assert memo.files == {}
    _old(f)
    memo.content(str(f))
    assert list(memo.files) == [str(f)]


def test_a_listing_is_walked_again_only_when_a_folder_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "tree"
    (root / "pkg" / ".git").mkdir(parents=True)
    (root / "pkg" / "m.py").write_text("")
    _old(root, root / "pkg", root / "pkg" / ".git")
    memo = StatMemo(tmp_path / "memo.json")
    first = memo.listing(root)
    assert first == ["./pkg", "pkg/m.py"]  # git's own folder left out
    walks = []
    real_walk = os.walk
    monkeypatch.setattr(stat_memo.os, "walk", lambda *a, **k: walks.append(a) or real_walk(*a, **k))
    assert memo.listing(root) == first and walks == []
    (root / "pkg" / "new.py").write_text("")  # the folder's time moves
    assert memo.listing(root) == ["./pkg", "pkg/m.py", "pkg/new.py"] and len(walks) == 1
