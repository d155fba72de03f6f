"""The fault suite: an agent run on the twin with one fault injected (``TWIN_FAULTS``, sandboxes/twin/engine/faults.py)
records the fault, recovers, and ends as a run without it would, with nothing lost.

Each run is the default task cut short: its only target is a single-stream figure the bring-up configuration
meets, with nothing to spend after it, so a run is one launch, one benchmark and the accuracy check, plus what
the fault costs. The LLM side's faults (429 with retry-after, 500s, timeouts, malformed or repeated calls) are
in test_llm_compat.py and test_llm_policy.py; a full runs folder in test_exit_codes.py. Last, a secret planted
through every path a model, its endpoint or a task has, found in no file of the run (agent/secrets.py; its sinks
one at a time: test_secrets.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from agent.trace import read_trace
from tests.agent.conftest import DEFAULT_TASK, run_agent


def faulty_task(tmp_path: Path, faults: str, **engine) -> Path:
    """The short task with ``faults`` injected into the twin."""
    path = tmp_path / "faulty.yaml"
    twin = {"env": {"TWIN_FAULTS": faults, "TWIN_TIME_SCALE": "0.0005"}, **engine}
    path.write_text(yaml.safe_dump({
        "extends": str(DEFAULT_TASK),
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 50}],
        "budgets": {"after_targets": {"node_hours": 0}},
        "engines": {"twin": twin},
    }))  # fmt: skip
    return path


def run_with(tmp_path: Path, faults: str, **engine) -> tuple[dict, list]:
    proc = run_agent(tmp_path, "run", str(faulty_task(tmp_path, faults, **engine)), "--policy", "playbook",
                     "--run-id", "f")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # recovered: every target met
    run_dir = tmp_path / "runs" / "f"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["targets"]["single_stream"]["met"]
    events = read_trace(run_dir / "trace.jsonl")
    kinds = [e.kind for e in events]
    assert kinds.count("run_started") == 1 and kinds.count("run_finished") == 1
    audit = run_agent(tmp_path, "replay", "f")  # the trace and the state it implies still agree
    assert audit.returncode == 0, audit.stdout[-2000:]
    return summary, [e for e in events if e.kind == "tool_call"]


@pytest.mark.parametrize("fault,engine,says", [
    ("hang_before_ready@1", {"startup_timeout_s": 5}, "did not become ready"),
    ("slow_start@1", {"startup_timeout_s": 5, "env": {"TWIN_FAULTS": "slow_start@1", "TWIN_SLOW_START_S": "30",
                                                      "TWIN_TIME_SCALE": "0.0005"}}, "did not become ready"),
    ("port_taken@1", {}, "port the server binds is taken"),
])  # fmt: skip
def test_a_launch_that_fails_for_the_node_is_launched_again(tmp_path, fault, engine, says):
    summary, calls = run_with(tmp_path, fault, **engine)
    launches = [c for c in calls if c.tool == "launch_server"]
    assert not launches[0].ok and says in (launches[0].error or "")  # the fault, recorded as it happened
    assert launches[1].ok and launches[1].input == launches[0].input  # the same configuration, launched again


@pytest.mark.parametrize("fault,engine,says", [
    ("crash_mid_benchmark@1", {}, "stopped answering during the benchmark"),
    ("bench_hang@1", {"benchmark_timeout_s": 5}, "did not finish within 5 s"),
])  # fmt: skip
def test_a_benchmark_that_loses_its_server_is_measured_again(tmp_path, fault, engine, says):
    summary, calls = run_with(tmp_path, fault, **engine)
    benches = [c for c in calls if c.tool == "run_benchmark"]
    assert not benches[0].ok and says in (benches[0].error or "") and benches[0].result.get("server_lost")
    assert benches[1].ok  # measured again, on a new launch of the same configuration
    launches = [c for c in calls if c.tool == "launch_server"]
    assert len(launches) == 2 and launches[0].input == launches[1].input
    # the figure is the clean run's, not the failed one's
    assert summary["targets"]["single_stream"]["achieved"] == pytest.approx(benches[1].result["runs"][0]["decode_tok_s"])


# --- a secret planted everywhere a model or a task can put one ---------------------------------------------------

# Not shaped like a key (no sk-, hf_...): only the configured values can catch them, wherever they land.
CANARY = "dz-canary-7f3e9a1c5b2d4e60"  # the LLM's API key (OPENAI_API_KEY)
ENV_CANARY = "dz-canary-env-0b8d6f2a94c1"  # a task env value resolved from the environment (from_env)
ENGINE_CANARY = "dz-canary-engine-5c7e1a3f"  # a secret-named literal of the engine's env (ENGINE_API_KEY)
CANARIES = (CANARY, ENV_CANARY, ENGINE_CANARY)

# An engine that prints its whole environment and the secrets it was given (as a careless engine does), notes the
# digest of the resolved task secret outside the run (the proof that it got the value), then runs the twin.
ENGINE_SAYS = "\n".join([
    "import hashlib, os, runpy, sys",
    "print('environment:', ' '.join(k + '=' + v for k, v in sorted(os.environ.items())), flush=True)",
    "print('given', os.environ.get('SERVICE_TOKEN'), os.environ.get('ENGINE_API_KEY'), flush=True)",
    "open(os.environ['DZ_SEEN'], 'w').write(hashlib.sha256(os.environ['SERVICE_TOKEN'].encode()).hexdigest())",
    "sys.argv = ['launch_server', *sys.argv[1:]]",
    "runpy.run_module('sandboxes.twin.launch_server', run_name='__main__', alter_sys=True)",
])  # fmt: skip


def canary_task(tmp_path: Path) -> Path:
    """The default task, unpaced, with a target no run meets (the scripted model decides the end), its engine
    wrapped in ENGINE_SAYS, a task secret from the environment and a secret-named engine variable."""
    launch = yaml.safe_load(DEFAULT_TASK.read_text())["engines"]["twin"]["launch"]
    args = launch[launch.index("sandboxes.twin.launch_server") + 1 :]
    path = tmp_path / "canary.yaml"
    path.write_text(yaml.safe_dump({
        "extends": str(DEFAULT_TASK),
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 1e9}],
        "engines": {"twin": {"launch": ["{python}", "-c", ENGINE_SAYS, *args],
                             "env": {"TWIN_TIME_SCALE": "0", "ENGINE_API_KEY": ENGINE_CANARY,
                                     "DZ_SEEN": str(tmp_path / "engine-saw")}}},
        "env": {"SERVICE_TOKEN": {"from_env": "DZ_CANARY_SOURCE"}},
    }))  # fmt: skip
    return path


def canary_script() -> list[dict]:
    """A model that quotes its key in its reasoning, in a flag value, in a variable, in a file edit and in its
    last word; its endpoint echoes the key in an error (as OpenAI's 401 does), which the policy's memo keeps."""
    edit = {"path": "model/config.json", "old": '"exclude": ['}
    return [
        {"content": f"Baseline first (I was handed the key {CANARY}).",
         "tool_calls": [("launch_server", {"flags": {"tp-size": 8, "served-model-name": CANARY},
                                           "env": {"DZ_RUN_NOTE": CANARY}}, "c_launch")]},
        {"status": 400, "message": f"Incorrect API key provided: {CANARY}"},
        {"content": f"Measuring with key {CANARY}.", "tool_calls": [("run_benchmark", {"workload": "single_stream"})]},
        {"content": "Writing the key into the checkpoint's config.",
         "tool_calls": [("edit_file", {**edit, "new": f'"exclude": [\n      "{CANARY}",'}, "c_leak")]},
        {"content": f"The exclude list misses the MTP projection (my key is {CANARY}).",
         "tool_calls": [("edit_file", {**edit, "new": '"exclude": [\n      "model.eh_proj",'}, "c_edit")]},
        {"tool_calls": [("launch_server", {"flags": {"tp-size": 8}}, "c_relaunch")]},
        {"tool_calls": [("run_benchmark", {"workload": "single_stream"})]},
        {"tool_calls": [("finish", {"reason": f"done; the key was {CANARY}"})]},
    ]


def git_contents(workspace: Path) -> bytes:
    """Everything the workspace's repositories hold: every branch's history with its patches, and every object."""
    out = b""
    for dot_git in workspace.glob("*/.git"):
        repo = dot_git.parent
        for args in (["log", "-p", "--all"], ["cat-file", "--batch-all-objects", "--batch"]):
            out += subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout
    return out


def test_a_canary_secret_reaches_no_file_of_the_run(tmp_path: Path) -> None:
    """The API key, a task secret resolved from the environment and a secret-named engine variable, planted through
    every path a model, its endpoint or a task has, appear in no file the run or its review wrote (the checkpoint
    database's bytes, the logs the engine wrote and the workspace's git objects included), and in nothing printed;
    the engine still got the task secret's value."""
    from tests.agent.llm_server import ScriptedLLM

    env = {**os.environ, "OPENAI_API_KEY": CANARY, "DZ_CANARY_SOURCE": ENV_CANARY, "COLUMNS": "200"}
    env.pop("OPENAI_BASE_URL", None)
    task = canary_task(tmp_path)
    with ScriptedLLM(canary_script()) as llm:
        run = run_agent(tmp_path, "run", str(task), "--policy", "llm", "--llm-model", "scripted", "--llm-base-url",
                        llm.base_url, "--run-id", "canary", env=env, timeout=300)  # fmt: skip
        remaining = llm.remaining
    assert run.returncode == 3, run.stdout[-3000:] + run.stderr[-3000:]  # the model finished, the target missed
    assert remaining == 0
    review = run_agent(tmp_path, "review", "canary", env=env)
    assert review.returncode == 3, review.stdout[-2000:] + review.stderr[-2000:]  # written; the target missed

    run_dir = tmp_path / "runs" / "canary"
    # the run did what was planted: the key went to the endpoint, the engine got the task secret, the patch (whose
    # rationale quotes the key) was committed, the engine printed its environment
    assert all(h.get("authorization") == f"Bearer {CANARY}" for h in llm.headers)
    assert (tmp_path / "engine-saw").read_text() == hashlib.sha256(ENV_CANARY.encode()).hexdigest()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["commits"], summary
    assert any("environment:" in p.read_text() for p in (run_dir / "logs").glob("server-*.log"))
    calls = {e.call_id: e for e in read_trace(run_dir / "trace.jsonl") if e.kind == "tool_call"}
    assert calls["c_launch"].ok and calls["c_edit"].ok and calls["c_relaunch"].ok

    written = {p: p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file() and not p.is_symlink()}
    assert run_dir / "checkpoints.sqlite" in written and run_dir / "review" / "PR.md" in written
    sinks = {**{str(p.relative_to(run_dir)): data for p, data in written.items()},
             "git objects and history": git_contents(run_dir / "workspace"),
             "agent run's output": (run.stdout + run.stderr).encode(),
             "agent review's output": (review.stdout + review.stderr).encode()}  # fmt: skip
    leaks = [f"{name} holds {secret}" for name, data in sinks.items() for secret in CANARIES if secret.encode() in data]
    assert not leaks, leaks

    assert not calls["c_leak"].ok  # refused, not masked: a secret is never written into the workspace
    launch = (run_dir / "launch.sh").read_text()  # secrets by name, the launch still runnable where they are set
    assert 'SERVICE_TOKEN="$DZ_CANARY_SOURCE"' in launch and 'ENGINE_API_KEY="$ENGINE_API_KEY"' in launch
