"""AMD spec sheets as data (issue 28): MI300X, MI325X and MI355X, one definition for scenarios, the generator and the
tasks. Cheap: no server."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import ScenarioError, available, hardware, load
from sandboxes.twin.scenario.generate import HARDWARE

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("key", hardware.known())
def test_each_sheets_peaks_are_its_cus_times_their_rate_times_the_clock(key):
    sheet = hardware.sheet(key)
    for dtype, tflops in hardware.derived_tflops(key).items():
        assert sheet["peak_tflops"][dtype] == pytest.approx(tflops, rel=1e-3), (key, dtype)
    assert sheet["source"] and sheet["memory_gb"] > 0 and sheet["xgmi_link_gbs"] > 0


def test_the_three_generations():
    assert hardware.known() == ["mi300x", "mi325x", "mi355x"]
    mi300x, mi325x, mi355x = (hardware.sheet(k) for k in hardware.known())
    # MI325X: the MI300X's compute with more and faster HBM
    assert mi325x["peak_tflops"] == mi300x["peak_tflops"] and mi325x["gfx_arch"] == mi300x["gfx_arch"] == "gfx942"
    assert (mi300x["memory_gb"], mi325x["memory_gb"], mi355x["memory_gb"]) == (192, 256, 288)
    assert mi300x["memory_bandwidth_tbs"] < mi325x["memory_bandwidth_tbs"] < mi355x["memory_bandwidth_tbs"]
    # gfx942 has no MX matrix cores: MXFP4 runs at the FP8 peak; gfx950 at twice it
    assert mi300x["peak_tflops"]["mxfp4"] == mi300x["peak_tflops"]["fp8"]
    assert mi355x["peak_tflops"]["mxfp4"] == pytest.approx(2 * mi355x["peak_tflops"]["fp8"], rel=1e-4)


def write(tmp_path: Path, hw: dict) -> Path:
    d = yaml.safe_load((REPO / "sandboxes/twin/scenarios/glm52_mi355x.yaml").read_text())
    d["hardware"] = hw
    d["quantization"]["weight_format"] = "fp8"
    d["accuracy"]["fp8"] = 0.96
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_a_scenario_naming_a_sheet_gets_the_sheets_gpu_and_keeps_what_it_writes(tmp_path):
    sc = load(write(tmp_path, {"spec_sheet": "mi325x"}))
    assert (sc.hardware.name, sc.hardware.memory_gb, sc.hardware.memory_bandwidth_tbs) == ("MI325X", 256, 6.0)
    assert sc.hardware.cu_count == 304 and sc.hardware.interconnect_gbs == 128
    sc = load(write(tmp_path, {"spec_sheet": "mi325x", "memory_bandwidth_tbs": 5.0}))
    assert sc.hardware.memory_bandwidth_tbs == 5.0 and sc.hardware.memory_gb == 256


def test_an_unknown_sheet_or_no_gpu_at_all_is_one_located_line(tmp_path):
    with pytest.raises(ScenarioError, match=r"sc\.yaml:\d+: hardware\.spec_sheet: .*no spec sheet 'h100'"):
        load(write(tmp_path, {"spec_sheet": "h100"}))
    with pytest.raises(ScenarioError, match=r"hardware\.name: required field is missing \(or name a spec_sheet"):
        load(write(tmp_path, {"num_gpus": 8}))


def test_the_same_model_is_faster_on_each_newer_gpu(tmp_path):
    """One model, one layout, one decode step at batch 64: MI325X reads its weights and KV faster than MI300X, MI355X
    faster again."""
    steps = {}
    for key in hardware.known():
        sc = load(write(tmp_path, {"spec_sheet": key}))
        steps[key] = CostModel(sc, ServingConfig(tp_size=8, weight_format="fp8")).decode(64, 64 * 8000).total
    assert steps["mi300x"] > steps["mi325x"] > steps["mi355x"]


def test_the_generator_writes_the_sheet():
    assert set(HARDWARE) == set(hardware.known())
    assert HARDWARE["mi325x"]["memory_gb"] == 256 and "MI325X data sheet" in HARDWARE["mi325x"]["source"]


def _tasks_and_scenarios():
    for path in sorted((REPO / "tasks").glob("*.yaml")):
        task = yaml.safe_load(path.read_text())
        name = ((task.get("workspace") or {}).get("twin") or {}).get("scenario")
        if name in available():
            yield path.stem, task.get("hardware") or {}, name


@pytest.mark.parametrize("task,hw,scenario", list(_tasks_and_scenarios()))
def test_every_task_says_the_gpu_its_scenario_simulates(task, hw, scenario):
    """A task's accelerator and GPU memory are its scenario's; a scenario of a real GPU matches its spec sheet."""
    sc = load(scenario)
    if hw.get("accelerator"):
        assert hw["accelerator"].removesuffix("-like") == sc.hardware.name.removesuffix("-like")
    if hw.get("gpu_memory_gb"):
        assert hw["gpu_memory_gb"] == sc.hardware.memory_gb
    key = sc.hardware.name.lower()
    if key in hardware.known():
        fields = hardware.hardware_fields(key)
        assert sc.hardware.gfx_arch == fields["gfx_arch"] and sc.hardware.memory_gb == fields["memory_gb"]
        assert sc.hardware.memory_bandwidth_tbs == fields["memory_bandwidth_tbs"]
        for dtype, peak in sc.hardware.peak_tflops.items():  # the calibrated scenarios round the sheet's peaks
            assert peak == pytest.approx(fields["peak_tflops"][dtype], rel=0.01), (dtype, peak)
        assert sc.hardware.interconnect_gbs == pytest.approx(fields["interconnect_gbs"], rel=0.01)

