"""A scenario format that cannot lie: every mistake is one located line, ``file:line: field: problem``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandboxes.twin.scenario import ScenarioError, available, load
from tests.twin.conftest import edited_default_scenario


def problem(tmp_path: Path, edit) -> tuple[str, str, str]:
    path = edited_default_scenario(tmp_path, edit)
    with pytest.raises(ScenarioError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message
    m = re.match(rf"{re.escape(str(path))}:(\d+): ([\w.\[\]]+): (.+)$", message)
    assert m, message
    line = path.read_text().splitlines()[int(m.group(1)) - 1]
    return m.group(2), m.group(3), line


def test_bundled_scenarios_load() -> None:
    for name in available():
        assert load(name).name == name


def test_jit_trigger_must_be_an_sglang_flag(tmp_path: Path) -> None:
    field, why, line = problem(tmp_path, lambda d: d["engine"]["jit_kernels"][0]["when"].update(
        flag="speculative_num_stepz"))
    assert field == "engine.jit_kernels[0].when.flag" and "not an SGLang server argument" in why
    assert "speculative_num_stepz" in line


@pytest.mark.parametrize("table", ["peak_tflops", "gemm_efficiency", "accuracy"])
def test_weight_format_must_have_its_constants(tmp_path: Path, table: str) -> None:
    def edit(d):
        {"peak_tflops": d["hardware"]["peak_tflops"], "gemm_efficiency": d["calibration"]["gemm_efficiency"],
         "accuracy": d["accuracy"]}[table].pop("mxfp4")

    field, why, _ = problem(tmp_path, edit)
    assert field.endswith(table) and "'mxfp4'" in why


def test_unknown_weight_format(tmp_path: Path) -> None:
    field, why, line = problem(tmp_path, lambda d: d["quantization"].update(weight_format="int3"))
    assert field == "quantization.weight_format" and "int3" in why and "weight_format" in line


def test_bad_regex_in_the_exclude_list(tmp_path: Path) -> None:
    field, why, line = problem(tmp_path, lambda d: d["quantization"]["exclude"].append("re:model\\.layers\\.(\\d+"))
    assert field == "quantization.exclude[3]" and "bad regular expression" in why and "re:" in line


def test_bad_moe_dtype(tmp_path: Path) -> None:
    field, why, line = problem(tmp_path, lambda d: d["defects"]["tuned_moe_shapes"][0].update(dtype="fp6"))
    assert field == "defects.tuned_moe_shapes[0].dtype" and "fp6" in why and "fp6" in line


def test_mtp_layer_follows_the_loaders_convention(tmp_path: Path) -> None:
    field, why, _ = problem(tmp_path, lambda d: d["model"]["mtp"].update(checkpoint_prefix="model.mtp.0"))
    assert field == "model.mtp.checkpoint_prefix" and "model.layers.78" in why


def test_unknown_field_and_bad_type_are_located(tmp_path: Path) -> None:
    field, why, line = problem(tmp_path, lambda d: d["model"].update(hidden_sise=1))
    assert field == "model.hidden_sise" and "unknown field" in why and "hidden_sise" in line
    field, why, line = problem(tmp_path, lambda d: d["model"].update(hidden_size="big"))
    assert field == "model.hidden_size" and "expected int" in why and "big" in line
