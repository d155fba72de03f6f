"""Per-run bounds that hold whatever the policy does and whatever the endpoint reports (issue 26): a model that
varies its calls forever is stopped by the LLM-request budget though its endpoint reports no usage, and any policy
by the tool-call budget; each ends as a spent budget does, exit 4 with one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from agent.trace import read_trace
from tests.agent.llm_server import ScriptedLLM
from tests.agent_process import run_cli
from tests.shared_runs import NO_PACING

REPO = Path(__file__).resolve().parents[2]


def _task(tmp_path: Path, **budgets: int) -> Path:
    task = tmp_path / "bounded.yaml"
    task.write_text(yaml.safe_dump({"extends": str(REPO / "tasks" / "glm52_mi355x.yaml"), "budgets": budgets,
                                    **yaml.safe_load(NO_PACING)}))  # fmt: skip
    return task


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-bounds", "COLUMNS": "200"}
    env.pop("OPENAI_BASE_URL", None)
    proc = run_cli(["run", *args], cwd=tmp_path, env=env)
    summary = json.loads((tmp_path / "runs" / "bounded" / "summary.json").read_text())
    return proc, summary


def test_a_model_that_varies_its_calls_is_stopped_by_the_request_budget(tmp_path: Path) -> None:
    def varied(request: dict) -> dict:  # a new, harmless call every turn, and no usage reported
        n = len(request["messages"])
        return {"tool_calls": [("read_file", {"path": "model/config.json", "start": n})]}

    with ScriptedLLM([varied] * 50) as llm:
        proc, summary = _run(tmp_path, str(_task(tmp_path, llm_requests=6)), "--policy", "llm", "--llm-base-url",
                             llm.base_url, "--llm-model", "scripted-model", "--run-id", "bounded")  # fmt: skip
        sent = len(llm.requests)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sent == 6
    assert "LLM request budget spent (6 of 6 requests)" in summary["outcome"]["words"]
    assert "LLM request budget spent" in proc.stdout


def test_any_policy_is_stopped_by_the_tool_call_budget(tmp_path: Path) -> None:
    proc, summary = _run(tmp_path, str(_task(tmp_path, tool_calls=3)), "--policy", "playbook", "--run-id", "bounded")
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "tool-call budget spent (3 of 3 calls)" in summary["outcome"]["words"]
    calls = [e for e in read_trace(tmp_path / "runs" / "bounded" / "trace.jsonl") if e.kind == "tool_call"]
    assert len([c for c in calls if c.tool != "stop_server"]) == 3  # then only the server the run left is stopped
