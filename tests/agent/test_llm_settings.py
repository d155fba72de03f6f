"""The LLM policy's endpoint settings: the task's ``llm`` section, with the command line's ``--llm-*`` over it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.policies.factory import PolicyError, make_policy
from tasks.spec import TaskError, load_task
from tests.agent.conftest import DEFAULT_TASK, run_agent


def options(**over) -> SimpleNamespace:
    base = {"policy": "llm", "llm_model": "m", "llm_base_url": "http://127.0.0.1:9/v1", "llm_extra_body": None,
            "llm_timeout_s": None, "llm_tool_results": None}  # fmt: skip
    return SimpleNamespace(**{**base, **over})


def task_with(tmp_path: Path, llm: str):
    path = tmp_path / "t.yaml"
    path.write_text(f"extends: {DEFAULT_TASK}\nllm: {llm}\n")
    return load_task(path)


def test_the_task_sets_them_and_the_command_line_wins(tmp_path):
    task = task_with(tmp_path, "{extra_body: {top_k: 5, seed: 1}, timeout_s: 30, tool_results_as: user}")
    p = make_policy(options(), task)
    assert (p.extra_body, p.timeout_s, p.tool_results_as) == ({"top_k": 5, "seed": 1}, 30, "user")
    p = make_policy(options(llm_extra_body={"seed": 2}, llm_timeout_s=5, llm_tool_results="tool"), task)
    assert (p.extra_body, p.timeout_s, p.tool_results_as) == ({"top_k": 5, "seed": 2}, 5, "tool")


def test_defaults_without_a_task_section():
    p = make_policy(options(), load_task(DEFAULT_TASK))
    assert (p.extra_body, p.timeout_s, p.tool_results_as) == ({}, 120, "tool")


def test_bad_settings_are_refused_in_one_line(tmp_path):
    with pytest.raises(TaskError, match="llm.tool_results_as"):
        task_with(tmp_path, "{tool_results_as: assistant}")
    with pytest.raises(TaskError, match="llm.timeout_s"):
        task_with(tmp_path, "{timeout_s: 0}")
    with pytest.raises(PolicyError, match="--llm-tool-results"):
        make_policy(options(llm_tool_results="nope"), load_task(DEFAULT_TASK))
    proc = run_agent(tmp_path, "run", str(DEFAULT_TASK), "--policy", "playbook", "--llm-extra-body", "[1]",
                     "--run-id", "x")  # fmt: skip
    assert proc.returncode == 2 and "--llm-extra-body: expected a JSON object" in proc.stdout
    assert not (tmp_path / "runs" / "x").exists()


@pytest.mark.parametrize("url", ["http://user:sk-123@127.0.0.1:9/v1", "https://api.example.com/v1?api-key=sk-123",
                                 "https://x.example.com/v1?access_token=abc"])  # fmt: skip
def test_a_base_url_carrying_a_secret_is_refused_before_the_run(tmp_path, url):
    with pytest.raises(PolicyError, match="OPENAI_API_KEY"):
        make_policy(options(llm_base_url=url), load_task(DEFAULT_TASK))
    proc = run_agent(tmp_path, "run", str(DEFAULT_TASK), "--policy", "llm", "--llm-model", "m", "--llm-base-url", url,
                     "--run-id", "x")  # fmt: skip
    assert proc.returncode == 2 and "sk-123" not in proc.stdout + proc.stderr and not (tmp_path / "runs").exists()
