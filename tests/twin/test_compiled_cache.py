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


def test_a_checkpoint_index_is_parsed_and_sampled_once_per_user(tmp_path, monkeypatch):
    """The loader's view of an index (its tensors, experts sampled) is kept by the index's contents: the same index
    in another workspace is not parsed again; an index without tensor metadata still fails as the engine does."""
    import json

    import pytest

    from sandboxes.twin.engine.loading import loader

    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    index = {"weight_map": {f"model.layers.0.mlp.experts.{i}.w1.weight": {"dtype": "BF16", "shape": [4, 8]}
                            for i in range(8)} | {"lm_head.weight": {"dtype": "BF16", "shape": [16, 8]}}}
    paths = []
    for run in ("a", "b"):
        p = tmp_path / run / "model.safetensors.index.json"
        p.parent.mkdir()
        p.write_text(json.dumps(index))
        paths.append(p)
    parses = []
    real = loader._read_json
    monkeypatch.setattr(loader, "_read_json", lambda *a, **k: parses.append(a[0]) or real(*a, **k))
    first = loader._checkpoint_entries(paths[0], tmp_path)
    assert [(n, w) for n, _, _, w in first] == [("model.layers.0.mlp.experts.0.w1.weight", 4),
                                                ("model.layers.0.mlp.experts.7.w1.weight", 4), ("lm_head.weight", 1)]
    assert loader._checkpoint_entries(paths[1], tmp_path) == first and parses == [paths[0]]
    bad = tmp_path / "c" / "model.safetensors.index.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"weight_map": {"x": "model-00001.safetensors"}}))
    with pytest.raises(loader.WeightLoadError, match="no tensor metadata"):
        loader._checkpoint_entries(bad, tmp_path)
