"""The executor's compiled-code cache is keyed by a file's contents, not its place: the same release file in
another run's workspace is compiled once per user, and its code (nested functions and classes too) names the
file where it now is, as tracebacks must."""

from __future__ import annotations

import types

from sandboxes.twin.engine.loading import executor

SOURCE = "class A:\n    def f(self):\n        return [x for x in range(3)]\n\ndef g():\n    return 1\n"


def _filenames(code: types.CodeType) -> set[str]:
    return {code.co_filename} | {f for c in code.co_consts if isinstance(c, types.CodeType) for f in _filenames(c)}


def test_the_same_file_elsewhere_hits_the_cache_and_names_its_own_place(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "run1" / "m.py", tmp_path / "run2" / "m.py"
    for p in (first, second):
        p.parent.mkdir()
        p.write_text(SOURCE)
    one = executor._compiled(first)
    entries = list((tmp_path / "cache" / "compiled").iterdir())
    compiles = []
    monkeypatch.setattr(executor, "compile", lambda *a, **k: compiles.append(a) or compile(*a, **k), raising=False)
    two = executor._compiled(second)
    assert compiles == [] and list((tmp_path / "cache" / "compiled").iterdir()) == entries  # a hit, nothing written
    assert _filenames(one) == {str(first)} and _filenames(two) == {str(second)}
    second.write_text(SOURCE + "h = 2\n")  # an edited file compiles again
    executor._compiled(second)
    assert len(compiles) == 1
