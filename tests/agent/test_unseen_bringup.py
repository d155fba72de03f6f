"""`agent run` on scenarios built from the unseen sample's real configs (issue 39): the model comes up and the run
ends honestly (exit 0: targets met, 3: missed), dense, vision-language, hybrid recurrent and MoE models alike.

The default suite brings up a dense and a hybrid model and a MoE model without a draft (the sample's folders below,
chosen by what the release builds of them, nothing else); ``pytest -m sample`` brings up every model of the sample
that builds. Each task extends
the default task with the generated scenario, a single-stream target out of reach (the run stops after measuring
it: exit 3), and no pacing. A model whose config leaves the MTP question open is answered as a user without an
index answers it, ``mtp.num_layers: 0``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.agent.test_agent_run import REPO, agent
from tests.benchmarks.unseen_sample import SAMPLE, folders
from tests.shared_runs import NO_PACING

ONE_OF_EACH = [
    "meta-llama--Llama-3.1-8B-Instruct",  # dense GQA
    "LiquidAI--LFM2-1.2B",  # hybrid: short-convolution recurrent layers among attention layers
]  # a vision-language wrapper (medgemma's) and every other kind: pytest -m sample


def _task(tmp_path: Path, folder: str) -> Path | None:
    """The generated scenario's task (None: the release refuses the model, nothing to bring up)."""
    from sandboxes.twin.scenario.generate import GenerateError, generate

    src = SAMPLE / folder
    index = src / "model.safetensors.index.json"
    scenario = tmp_path / f"{folder.replace('-', '_').replace('.', '_').lower()}.yaml"
    try:
        gen = generate(src / "config.json", scenario, index_path=index if index.is_file() else None,
                       hardware="mi355x")  # fmt: skip
    except GenerateError:
        return None
    if gen.questions:  # only the MTP question can be open: answered as "none", as without an index
        text = scenario.read_text().replace("mtp.num_layers: null", "mtp.num_layers: 0")
        scenario.write_text(text)
    task = {
        "extends": str(REPO / "tasks" / "glm52_mi355x.yaml"),
        "name": f"sample_{scenario.stem}"[:60],
        "description": f"Bring {folder} up on 8x MI355X with SGLang (the unseen sample).",
        "model": {"name": folder.replace("--", "/"), "architecture": gen.target_class.rsplit(":", 1)[-1],
                  "quantization": "bf16"},
        "workspace": {"twin": {"scenario": str(scenario)}},
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 100000}],
        "search_space": {"flags": {"speculative-num-steps": [4], "speculative-eagle-topk": [1],
                                   "kv-cache-dtype": ["auto"], "enable-aiter-allreduce-fusion": [False]},
                         "env": {"AITER_CONFIG_FMOE": [""]}},
    }
    task.update(yaml.safe_load(NO_PACING))
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task, sort_keys=False))
    return path


def _brings_up(tmp_path: Path, folder: str) -> None:
    task = _task(tmp_path, folder)
    if task is None:
        pytest.skip(f"{folder}: the release refuses it (tests/twin/test_unseen_sample.py checks how)")
    run_id = "sample"
    proc = agent(tmp_path, "run", str(task), "--policy", "playbook", "--run-id", run_id)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "runs" / run_id / "summary.json").read_text())
    single = summary["targets"]["single_stream"]
    assert single["achieved"], summary["targets"]  # it came up and was measured
    events = [json.loads(line) for line in (tmp_path / "runs" / run_id / "trace.jsonl").read_text().splitlines()]
    launches = [e for e in events if e["kind"] == "tool_call" and e["tool"] == "launch_server"]
    assert launches and launches[-1]["ok"], launches[-1:]


@pytest.mark.parametrize("folder", ONE_OF_EACH)
def test_one_model_of_each_kind_comes_up(tmp_path: Path, folder: str) -> None:
    _brings_up(tmp_path, folder)


def test_a_model_without_a_draft_never_launches_a_speculative_server(tmp_path: Path) -> None:
    folder = "mistralai--Mixtral-8x7B-v0.1"
    _brings_up(tmp_path, folder)
    trace = (tmp_path / "runs" / "sample" / "trace.jsonl").read_text()
    assert "speculative decoding not searched" in trace
    launches = [json.loads(line) for line in trace.splitlines() if '"launch_server"' in line]
    assert launches and not any("speculative" in json.dumps(e.get("input")) for e in launches)


@pytest.mark.sample
@pytest.mark.parametrize("folder", folders())
def test_every_model_of_the_sample_that_builds_comes_up(tmp_path: Path, folder: str) -> None:
    _brings_up(tmp_path, folder)
