"""The expert's knowledge in the LLM's hands: a scripted model that follows the obvious path with the proposing
tools (``tools/expert.py``) through the real command line, against a scripted server on 127.0.0.1, on the twin.

It launches MTP, which crashes on the checkpoint's draft layer; asks ``propose_exclude_fix``; applies the proposed
call as it is; relaunches; benchmarks; finishes. The fix it commits must be the playbook's own commit of that file
(the finished playbook run of the same task), and the proposal must carry its rationale.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import git

from tests.agent.llm_server import ScriptedLLM
from tests.agent.test_llm_end_to_end import MTP, ROOT, TASK, agent_command, checked, expect_up, tool_replies

RUN_ID = "llm-expert"
CONFIG = "model/config.json"


def _after_crash(request: dict[str, Any]) -> dict[str, Any]:
    reply = tool_replies(request)["launch"]
    assert not reply["ok"] and reply["status"] == "crashed", reply
    return {"tool_calls": [("propose_exclude_fix", {}, "propose")]}


def _apply(request: dict[str, Any]) -> dict[str, Any]:
    reply = tool_replies(request)["propose"]
    assert reply["ok"] and reply["rationale"] and reply["call"]["tool"] == "edit_file", reply
    return {"content": reply["rationale"], "tool_calls": [(reply["call"]["tool"], reply["call"]["args"], "apply")]}


def _relaunch(request: dict[str, Any]) -> dict[str, Any]:
    assert tool_replies(request)["apply"]["ok"], tool_replies(request)["apply"]
    return {"tool_calls": [("launch_server", {"flags": MTP}, "relaunch")]}


def _benchmark(request: dict[str, Any]) -> dict[str, Any]:
    expect_up(request, "relaunch")
    return {"tool_calls": [("run_benchmark", {"workload": "single_stream"}, "bench")]}


def _finish(request: dict[str, Any]) -> dict[str, Any]:
    assert tool_replies(request)["bench"]["ok"], tool_replies(request)["bench"]
    return {"tool_calls": [("finish", {"reason": "MTP serves after the proposed exclude fix"})]}


def _config_diff(workspace: Path, sha: str) -> str:
    repo = git.Repo(workspace / "model")
    return repo.git.show(sha, "--format=", "--", "config.json")


def test_the_llm_applies_the_experts_proposal_and_commits_the_playbooks_fix(tmp_path: Path, finished_run_root: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    problems: list[str] = []
    steps = [{"tool_calls": [("launch_server", {"flags": MTP}, "launch")]},
             *[checked(s, problems) for s in (_after_crash, _apply, _relaunch, _benchmark, _finish)]]  # fmt: skip
    with ScriptedLLM(steps, strict=True) as llm:
        proc = subprocess.run([*agent_command(), "run", str(TASK), "--policy", "llm", "--llm-model", "scripted",
                               "--llm-base-url", llm.base_url, "--run-id", RUN_ID],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        rejected = list(llm.rejected)
    assert not problems, problems
    # exit 3: the targets were not met, which this model does not try (it stops once MTP serves)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "finish: MTP serves after the proposed exclude fix" in " ".join(proc.stdout.split())
    assert rejected == []  # every turn valid for a strict server
    mine = json.loads((tmp_path / "runs" / RUN_ID / "summary.json").read_text())
    playbook = json.loads((finished_run_root / "runs" / "e2e" / "summary.json").read_text())
    ours = [c for c in mine["commits"] if CONFIG in c["files"]]
    theirs = [c for c in playbook["commits"] if CONFIG in c["files"]]
    assert len(ours) == 1 and theirs, (mine["commits"], playbook["commits"])
    assert _config_diff(tmp_path / "runs" / RUN_ID / "workspace", ours[0]["commits"][0]) == _config_diff(
        finished_run_root / "runs" / "e2e" / "workspace", theirs[0]["commits"][0])
