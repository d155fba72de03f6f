"""`agent run` and `agent resume` exit codes (issue 13): 0 every target met, 3 targets missed within the budget,
4 a budget ran out, 5 an infrastructure failure (the engine, the LLM endpoint, a full disk); the summary says the
same in words, and a run with no measured best does not point at a launch command."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

from tests.agent.llm_server import ScriptedLLM
from tests.shared_runs import run_agent

REPO = Path(__file__).resolve().parents[2]


TASK = REPO / "tasks" / "glm52_mi355x.yaml"


def outcome(root: Path, run_id: str) -> dict:
    return json.loads((root / "runs" / run_id / "summary.json").read_text())["outcome"]


def test_a_met_run_exits_0_and_says_so(finished_run_root):
    assert outcome(finished_run_root, "e2e") == {"kind": "targets_met", "exit_code": 0, "words": "every target met"}
    stdout = (finished_run_root / "agent-run.stdout").read_text()
    assert "outcome: every target met (exit code 0)" in stdout and "winning launch command:" in stdout


def test_budget_exhausted_then_targets_missed(tmp_path):
    """One launch allowed: the budget runs out (4). Replaying that run's decisions with the full budget ends when
    the recorded decisions do, the targets missed within the budget (3)."""
    proc = run_agent(tmp_path, "run", str(TASK), "--policy", "playbook", "--max-trials", "1", "--run-id", "short")
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    o = outcome(tmp_path, "short")
    assert o["kind"] == "budget_exhausted" and o["exit_code"] == 4 and "trial budget spent (1 of 1)" in o["words"]
    assert f"outcome: {o['words']} (exit code 4)" in " ".join(proc.stdout.split())
    # nothing was measured: no pointer at a launch command, and launch.sh says so instead of doing nothing
    assert "winning launch command" not in proc.stdout and "no launch command" in proc.stdout
    launch = subprocess.run(["bash", str(tmp_path / "runs" / "short" / "launch.sh")], capture_output=True, text=True)
    assert launch.returncode == 1 and "no configuration reached a measured best" in launch.stderr

    # agent review of it: says so, exits with the run's code, and names nothing to launch nor an empty figure
    review = run_agent(tmp_path, "review", "short")
    assert review.returncode == 4, review.stdout[-2000:] + review.stderr[-2000:]
    assert "run short did not meet its targets: " + o["words"] in " ".join(review.stdout.split())
    pr = (tmp_path / "runs" / "short" / "review" / "PR.md").read_text()
    assert "Not a deployment to merge: the run did not meet its targets" in pr and "Winning launch" not in pr
    assert "```sh" not in pr and "launch.sh" not in pr and "nothing to launch" in pr
    written = {p.name for p in (tmp_path / "runs" / "short" / "review").iterdir()}
    assert {"PR.md", "report.md", "report.html"} <= written and not any(n.endswith(".png") for n in written)
    assert ".png" not in (tmp_path / "runs" / "short" / "review" / "report.md").read_text()

    replay = run_agent(tmp_path, "run", str(TASK), "--policy", "replay", "--replay", "runs/short/trace.jsonl",
                       "--run-id", "replayed")  # fmt: skip
    assert replay.returncode == 3, replay.stdout[-2000:] + replay.stderr[-2000:]
    o = outcome(tmp_path, "replayed")
    assert o["kind"] == "targets_missed" and "within the budget: end of the recorded trace" in o["words"]

    # agent resume on a finished run: one line with how it ended, and the same code
    again = run_agent(tmp_path, "resume", "short")
    assert again.returncode == 4 and len(again.stdout.strip().splitlines()) == 1
    assert "finished already" in again.stdout and "nothing to resume" in again.stdout


def test_an_engine_that_cannot_start_is_an_infrastructure_failure(tmp_path):
    task = tmp_path / "no_engine.yaml"
    launch = '[/nonexistent/bin/python3, -m, sandboxes.twin.launch_server, --model-path, "{workspace}/model"]'
    task.write_text(f"extends: {TASK}\nengines:\n  twin:\n    launch: {launch}\n"
                    '    benchmark: ["{python}", -m, sandboxes.twin.bench_serving]\n'
                    '    tune_moe: ["{python}", -m, sandboxes.twin.tune_moe]\n')  # fmt: skip
    proc = run_agent(tmp_path, "run", str(task), "--policy", "playbook", "--run-id", "noengine")
    assert proc.returncode == 5, proc.stdout[-2000:] + proc.stderr[-2000:]
    o = outcome(tmp_path, "noengine")
    assert o["kind"] == "infrastructure" and "could not start '/nonexistent/bin/python3'" in o["words"]
    assert "winning launch command" not in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_an_unreachable_llm_endpoint_is_refused_before_the_run(tmp_path):
    """The endpoint is asked once before anything exists: one line, exit 5, no run folder to resume."""
    with socket.socket() as held:  # bound, never listening: connections are refused, and no one else can take it
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}/v1"
        proc = run_agent(tmp_path, "run", str(TASK), "--policy", "llm", "--llm-model", "m", "--llm-base-url", url,
                         "--run-id", "nollm")  # fmt: skip
    assert proc.returncode == 5, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip() == f"error: cannot reach the LLM endpoint {url}/: Connection refused", proc.stdout
    assert not (tmp_path / "runs").exists() and "Traceback" not in proc.stderr


def test_an_llm_endpoint_failing_during_the_run_is_an_infrastructure_failure(tmp_path):
    """It answered the check, then refuses every chat request (a 400, which the SDK does not retry: a quick
    failure): the run stops as an infrastructure failure."""
    with ScriptedLLM([{"status": 400}] * 20) as llm:
        proc = run_agent(tmp_path, "run", str(TASK), "--policy", "llm", "--llm-model", "m", "--llm-base-url",
                         llm.base_url, "--run-id", "nollm")  # fmt: skip
    assert proc.returncode == 5, proc.stdout[-2000:] + proc.stderr[-2000:]
    o = outcome(tmp_path, "nollm")
    assert o["kind"] == "infrastructure" and "the LLM endpoint failed" in o["words"]
    assert "winning launch command" not in proc.stdout and "no launch command" in proc.stdout


def test_help_and_docs_name_every_exit_code():
    proc = run_agent(REPO, "run", "--help")
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and "Exit codes: 0 every target met; 2 bad input" in text
    for phrase in ("3 the targets were missed within the budget", "4 a budget", "5 an infrastructure failure"):
        assert phrase in text, phrase
    assert "Exit codes" in " ".join(run_agent(REPO, "resume", "--help").stdout.split())
    doc = (REPO / "docs" / "reliability.md").read_text()
    for code in ("| 0 |", "| 2 |", "| 3 |", "| 4 |", "| 5 |", "| 130 |"):
        assert code in doc, code
