"""Whether a task's model can speculate (agent/draft_available.py), and that a run keeps what it found when it
started: its resumes search the same space without reading the checkpoint's index again."""

from __future__ import annotations

import json
from pathlib import Path

from agent.draft_available import SPECULATIVE_FLAGS, withheld_speculation
from tasks.spec import load_task

TASK = Path(__file__).resolve().parents[2] / "tasks" / "glm52_mi355x.yaml"


class _Files:
    def __init__(self, files: dict[str, str]) -> None:
        self.files, self.read = files, []

    def exists(self, path: str) -> bool:
        return path in self.files

    def read_file(self, path: str) -> str:
        self.read.append(path)
        return self.files[path]


def test_an_index_without_mtp_withholds_speculation_and_a_decision_made_before_is_kept() -> None:
    task = load_task(TASK)
    config = {"num_hidden_layers": 2}
    index = {"weight_map": {f"model.layers.{i}.mlp.weight": "a.safetensors" for i in range(2)}}
    files = _Files({"model/config.json": json.dumps(config), "model/model.safetensors.index.json": json.dumps(index)})
    withheld, why = withheld_speculation(task, files)
    assert why and "no MTP layer" in why and not set(SPECULATIVE_FLAGS) & set(withheld.search_space.flags)
    # a resume: the reason found at the start, not the files (which it does not read)
    again = _Files({})
    kept, why_again = withheld_speculation(task, again, decided=why)
    assert why_again == why and kept.search_space.flags == withheld.search_space.flags and again.read == []
    searched, none = withheld_speculation(task, again, decided=None)
    assert none is None and "speculative-algorithm" in searched.search_space.flags and again.read == []
