"""A weight-loading crash the log does not name: the checkpoint tensors it can be, found as an engineer would
(the raising loader's class in the workspace source, the draft's layer, the two shapes, the weight index)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandboxes.twin.engine.loading.loader import WeightLoadError, load_weights
from sandboxes.twin.workspace.materialize import materialize
from tools.diagnose import Diagnosis, classify
from tools.weight_suspects import find_suspects


def crash(ws: Path) -> tuple[WeightLoadError, dict, dict]:
    with pytest.raises(WeightLoadError) as info:
        load_weights(ws / "model", ws / "sglang", with_draft=True, tp_size=8)
    config = json.loads((ws / "model" / "config.json").read_text())
    index = json.loads((ws / "model" / "model.safetensors.index.json").read_text())["weight_map"]
    return info.value, config, index


def reader(ws: Path):
    def read(path: str) -> str | None:
        for candidate in (Path(path), ws / "sglang" / path, ws / path):
            if candidate.is_file():
                return candidate.read_text()
        return None
    return read


@pytest.mark.parametrize("scenario", ["glm52_mi355x", "vega_mi355x"])
def test_the_unnamed_parameter_is_found_from_frames_shapes_and_index(tmp_path: Path, scenario: str) -> None:
    ws = tmp_path / "ws"
    materialize(scenario, ws)
    err, config, index = crash(ws)
    diag = classify(err.log)
    assert diag.category == "weight_shape_mismatch" and diag.parameter is None  # the log does not name it
    found = find_suspects(diag, config, index, reader(ws))
    assert found.confidence in ("unique", "likely")
    assert found.candidates[0] == err.checkpoint_param  # the first in load order is the one that failed
    if scenario == "vega_mi355x":  # a bare assertion: only the class of the raising loader narrows it
        assert found.layer_class == "MergedColumnParallelLinear" and found.confidence == "likely"
    else:  # ReplicatedLinear printed both shapes and dtypes: one tensor fits
        assert found.layer_class == "ReplicatedLinear" and found.confidence == "unique"


def test_a_named_parameter_needs_no_search() -> None:
    diag = Diagnosis(category="weight_shape_mismatch", summary="KeyError", parameter="model.decoder.mlp.experts.w2_weight")
    found = find_suspects(diag, {}, {}, lambda p: None)
    assert found.confidence == "named"
