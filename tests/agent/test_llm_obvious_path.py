"""The LLM path held to the playbook's end-to-end test: a scripted model that takes the obvious path — the calls the
playbook made on the same task, one turn per decision — through the real command line, against a strict scripted
server on 127.0.0.1, on the twin. It must meet every target with the playbook's figures and commit the same fixes
(the same files with the same diffs). What differs is only who decided: the model's turns, the policy's bounds and
message handling, the graph's checks and commits are the LLM path's own.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import git

from agent.trace import read_trace
from tests.agent.conftest import SHORT_RUN_ID
from tests.agent.llm_server import ScriptedLLM
from tests.agent.test_llm_end_to_end import ROOT, agent_command

RUN_ID = "llm-obvious"


def the_playbooks_turns(run_dir: Path) -> list[dict]:
    """Each decision of the playbook's run as one model turn calling the same tools with the same arguments."""
    steps = []
    for e in read_trace(run_dir / "trace.jsonl"):
        if e.kind == "decision" and e.proposed_calls:
            steps.append({"content": e.rationale, "tool_calls": [(c.tool, c.input, f"s{e.step}c{i}")
                                                                  for i, c in enumerate(e.proposed_calls)]})  # fmt: skip
    return steps


def diffs(run_dir: Path, summary: dict) -> dict[str, list[str]]:
    """Each commit of the run as its diff, per repository (commit messages left out)."""
    out: dict[str, list[str]] = {}
    for c in summary["commits"]:
        for sha in c["commits"]:
            for name in ("model", "sglang"):
                repo = git.Repo(run_dir / "workspace" / name)
                try:
                    out.setdefault(name, []).append(repo.git.show(sha, "--format="))
                except git.GitCommandError:
                    continue  # the commit is in the other repository
    return {k: sorted(v) for k, v in out.items()}


def test_a_model_taking_the_obvious_path_meets_the_targets_with_the_same_commits(tmp_path, short_run_root):
    playbook_dir = short_run_root / "runs" / SHORT_RUN_ID  # the playbook's run of the task, to its targets
    playbook = json.loads((playbook_dir / "summary.json").read_text())
    steps = [*the_playbooks_turns(playbook_dir), {"tool_calls": [("finish", {"reason": "every target met"})]}]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    with ScriptedLLM(steps, strict=True) as llm:
        proc = subprocess.run([*agent_command(), "run", str(short_run_root / "to_targets.yaml"), "--policy", "llm",
                               "--llm-model", "scripted", "--llm-base-url", llm.base_url, "--run-id", RUN_ID],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
        rejected = list(llm.rejected)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # every target met
    assert rejected == []  # every turn valid for a strict server
    run_dir = tmp_path / "runs" / RUN_ID
    mine = json.loads((run_dir / "summary.json").read_text())
    assert {k: v["achieved"] for k, v in mine["targets"].items()} == \
        {k: v["achieved"] for k, v in playbook["targets"].items()}  # fmt: skip
    assert len(mine["commits"]) == len(playbook["commits"])
    assert diffs(run_dir, mine) == diffs(playbook_dir, playbook)  # the same fixes, file for file, line for line
