"""`agent run` with the playbook on the twin meets the targets and leaves verified, evidenced commits (a run
killed with SIGKILL and resumed: test_kill_anywhere.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import git
import pytest

from agent.trace import read_trace
from tests.shared_runs import NO_PACING
from tests.shared_runs import run_agent as agent

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "glm52_mi355x.yaml"
# the best throughput knee the twin allows for the default task (python -m tests.benchmarks.best_knee, 2026-12-03:
# TP8 x DP8 with DP attention, a 32768-token prefill chunk, FP8 KV cache, all-reduce fusion, tuned MoE; no one- or
# two-knob change of it is better)
BEST_KNEE = 3383.0


def check_finished_run(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["simulated"] is True and "simulated_node_hours" in summary
    for name, t in summary["targets"].items():
        assert t["met"], (name, t)
    assert summary["targets"]["throughput"]["achieved"] >= 2626
    assert summary["targets"]["single_stream"]["achieved"] >= 213
    titles = [c["title"] for c in summary["commits"]]
    assert len(titles) >= 2
    assert summary["blocked"] == {}  # every crash on the way was fixed: no feature left blocked
    repos = {name: git.Repo(run_dir / "workspace" / name) for name in ("model", "sglang")}
    branch = f"dayzero/{summary['run_id']}"
    messages = [c.message for r in repos.values() for c in r.iter_commits(branch) if "Dayzero-Run" in c.message]
    assert len(messages) == len(titles)
    for m in messages:
        for part in ("The crash:\n\n    ", "What failed:", "Root cause:", "Change:",
                     "Evidence (simulated: dayzero digital twin, not a real node):\n- before: trial ", "\n- after: trial ",
                     f"Dayzero-Run: {summary['run_id']}", "Dayzero-Trial:"):  # fmt: skip
            assert part in m, (part, m)
        for line in m.splitlines():  # prose wrapped at 72; only the verbatim excerpt and unbreakable words exceed
            assert len(line) <= 72 or line.startswith("    ") or " " not in line.strip(" -"), line
    for r in repos.values():  # whitespace a reviewer would bounce
        base = r.git.rev_list("--max-parents=0", "HEAD")
        assert r.git.diff("--check", base, branch, with_exceptions=False) == ""
    model_diff = repos["model"].git.diff(repos["model"].git.rev_list("--max-parents=0", "HEAD"), branch)
    assert '"exclude"' in model_diff
    assert "#ifndef USE_ROCM" in repos["sglang"].git.diff(repos["sglang"].git.rev_list("--max-parents=0", "HEAD"), branch)
    # the same fix in the engine, its own commit, verified with the checkpoint's config as released
    engine_fix = [c for c in repos["sglang"].iter_commits(branch) if "exclude entries" in c.summary]
    assert len(engine_fix) == 1 and sorted(engine_fix[0].stats.files) == [
        "python/sglang/srt/models/deepseek_nextn.py", "test/srt/models/test_deepseek_nextn_mtp_exclude.py"]  # fmt: skip
    assert "launched with model/config.json as released and benchmarked" in " ".join(engine_fix[0].message.split())
    launch = (run_dir / "launch.sh").read_text()
    assert "exec env" in launch and "--tp-size" in launch
    assert not re.search(r"\{\w+\}", launch), launch  # every placeholder rendered (AITER_CONFIG_FMOE's path)
    assert f"AITER_CONFIG_FMOE={run_dir / 'workspace'}/tuning/" in launch.replace("'", "")
    assert not re.search(r"\{\w+\}", json.dumps(summary["best_config"]))  # the summary's winner, rendered too
    return summary


def test_agent_run_meets_the_targets(finished_run_root, tmp_path):
    root = finished_run_root  # `agent run TASK --policy playbook --run-id e2e`, run once for the test worker
    stdout = (root / "agent-run.stdout").read_text()
    assert "simulated" in stdout and "yes" in stdout
    summary = check_finished_run(root / "runs" / "e2e")
    assert summary["finish_reason"] == "all targets met"
    # the targets are a floor: the run went on improving until the after-targets budget was spent
    after = summary["after_targets"]
    # ... spent, or so nearly spent that what is left buys no benchmark run (a knee search gets it as its allowance)
    assert after["budget_node_hours"] > 0 and after["spent"]["benchmark_runs"] > 0
    assert after["stopped_because"].startswith("the after-targets budget is spent") or (
        "buys no more benchmark runs" in after["stopped_because"]
        and after["spent"]["node_hours"] >= 0.9 * after["budget_node_hours"])  # fmt: skip
    # within 2 % of the best configuration the twin allows: the runner-up layout gets the chunk each of its ranks
    # must prefill to serve as the best does (two knobs the engine ties: agent/policies/joint_moves.py)
    assert summary["targets"]["throughput"]["achieved"] >= 0.98 * BEST_KNEE
    for name in ("throughput", "single_stream"):
        bought = after["bought"][name]
        assert bought["final"] == summary["targets"][name]["achieved"] >= bought["at_targets_met"] >= \
            summary["targets"][name]["target"]  # fmt: skip
    events = read_trace(root / "runs" / "e2e" / "trace.jsonl")
    kinds = Counter(e.kind for e in events)
    assert kinds["run_started"] == 1 and kinds["run_finished"] == 1 and kinds["decision"] > 5
    # the win explained: every change from the bring-up configuration, each isolated by a measured pair
    for name in ("throughput", "single_stream"):
        why = summary["explain"][name]
        assert why["bring_up"] is not None and why["best"] == summary["targets"][name]["achieved"]
        assert why["changes"] and all(c["effect"] is not None for c in why["changes"]), why
    # speculative decoding tuned per objective: the draft tree's width for one stream, a shallower depth under load
    rationales = [e.rationale for e in events if e.kind == "decision"]
    assert any("draft tree top-2" in r for r in rationales) and any("under load 1/1/2" in r for r in rationales)
    listing = agent(root, "runs")
    assert "e2e" in listing.stdout and "all targets met" in listing.stdout

    # the SGLang patches apply with `git am` to a clean unpack of the real release the workspace was made from
    check_patches_apply_upstream(root / "runs" / "e2e", tmp_path / "upstream")
    # the hand-over reproduces the reported figure: launch.sh's server, bench.sh's benchmark at the knee rate
    check_handover_reproduces(root / "runs" / "e2e", summary, tmp_path / "handover.jsonl")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_handover_reproduces(run_dir: Path, summary: dict, out: Path) -> None:
    first = next(t for t in summary["targets"].values() if t["metric"] != "accuracy_delta")
    assert re.search(rf"# \w+: {first['achieved']:.1f} \(throughput_at_knee at [0-9.]+ req/s", (run_dir / "launch.sh").read_text())
    env = {**os.environ, "PORT": str(_free_port()), "OUT": str(out)}
    server = subprocess.Popen([str(run_dir / "launch.sh")], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        health = f"http://127.0.0.1:{env['PORT']}/health"
        for _ in range(600):  # the server's own start-up, in its compressed simulated time
            assert server.poll() is None, "launch.sh exited"
            try:
                with urllib.request.urlopen(health, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        bench = subprocess.run([str(run_dir / "bench.sh")], env=env, capture_output=True, text=True,
                               timeout=600)  # fmt: skip
        assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["simulated"] and record["output_throughput"] == pytest.approx(first["achieved"], rel=1e-9)
    assert record["server_info"]["twin"]["moe_kernels"] == "tuned"  # AITER_CONFIG_FMOE rendered: the tuned path


def check_replay(tmp_path: Path, task_file: Path, run_id: str, summary: dict) -> None:
    replay = agent(tmp_path, "run", str(task_file), "--policy", "replay", "--replay", f"runs/{run_id}/trace.jsonl",
                   "--run-id", "again")  # fmt: skip
    # the replay ends as the run did: its target out of reach on purpose, exit 3
    assert replay.returncode == summary["outcome"]["exit_code"] == 3, replay.stdout[-2000:] + replay.stderr[-2000:]

    def calls(run: str):  # the run id (in commit patch ids) is the only thing that differs
        return [(e.tool, {k: v for k, v in e.input.items() if k != "patch_id"})
                for e in read_trace(tmp_path / "runs" / run / "trace.jsonl") if e.kind == "tool_call"]  # fmt: skip

    assert calls("again") == calls(run_id)
    replayed = json.loads((tmp_path / "runs" / "again" / "summary.json").read_text())
    assert {k: v["achieved"] for k, v in replayed["targets"].items()} == \
        {k: v["achieved"] for k, v in summary["targets"].items()}  # fmt: skip
    assert [c["title"] for c in replayed["commits"]] == [c["title"] for c in summary["commits"]]


def check_patches_apply_upstream(run_dir: Path, dest: Path) -> None:
    from sandboxes.twin.workspace import release

    source = json.loads((run_dir / "workspace" / ".twin" / "source.json").read_text())
    tree = release.release_tree(source["version"])
    if not isinstance(tree, release.ReleaseTree):
        pytest.skip(f"the SGLang {source['version']} release is not available here: {tree.reason}")
    assert source["sglang"].startswith("release:"), source
    summary = json.loads((run_dir / "summary.json").read_text())
    ws = git.Repo(run_dir / "workspace" / "sglang")
    base = ws.git.rev_list("--max-parents=0", "HEAD")
    patches = ws.git.format_patch(f"{base}..dayzero/{summary['run_id']}", "-o", str(dest / "patches")).split()
    assert patches, "the run made no SGLang commit"
    clean = dest / "sglang"
    release.unpack(tree.wheel, clean / "python")  # the wheel's sglang/ package, in the repository layout
    repo = git.Repo.init(clean)
    repo.git.add("--all")
    repo.git.commit("-q", "-m", f"sglang {source['version']}", env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                                                   "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    repo.git.am(*patches, env={"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    kernel = clean / "python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
    assert "#ifndef USE_ROCM" in kernel.read_text()


def test_bad_task_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TASK.read_text().replace("gpus: 8", "gpus: eight"))
    proc = agent(tmp_path, "run", str(bad))
    assert proc.returncode == 2
    assert "bad.yaml:" in proc.stdout and "hardware.gpus" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert agent(tmp_path, "resume", "nope").returncode == 2


def stopping_at_the_targets(tmp_path: Path, task: Path, run_seconds: int | None = None) -> Path:
    """The task with no budget after its targets: for tests of bring-up, fixes and resume, not of the search.
    ``run_seconds`` shortens the throughput workload's runs (the knee procedure is the same, each run simulates
    fewer requests). A short run's figure carries more of its ramp and drain: the default task's best knee reads
    2223 tok/s with 150-second runs against 3259 at full length, under its target, so only tasks whose targets
    leave room use it; the full-length knee is the default run's test and the search benchmark's business."""
    variant = tmp_path / f"{task.stem}_to_targets.yaml"
    shorter = f"workloads:\n  throughput:\n    duration_s: {run_seconds}\n" if run_seconds else ""
    variant.write_text(f"extends: {task}\nbudgets:\n  after_targets: {{node_hours: 0}}\n{NO_PACING}{shorter}")
    return variant


def _server_pids(workspace: Path) -> set[int]:
    """Twin servers running on this workspace."""
    out = subprocess.run(["pgrep", "-f", f"launch_server --model-path {workspace}"], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


@pytest.mark.parametrize("task", ["lyra_mi355x", "corvus_mi300x"])
def test_playbook_fixes_the_new_defect_variants(tmp_path, task):
    """A whole MTP layer kept bf16 by exact names (lyra: routed experts and eh_proj included) and two unguarded
    headers in one file (corvus): every defect is fixed, one commit per defect, each naming its own crash, and the
    engine fix for the MTP layer is its own commit verified with the checkpoint's config as released. Only the
    single-stream stage runs (where both defects meet the agent), with one draft tree allowed (the defects meet
    the first speculative launch; the tree search is tested elsewhere); the full tasks' knee is left to
    `agent run`."""
    short = tmp_path / f"{task}_single.yaml"
    short.write_text(f"extends: {REPO / 'tasks' / f'{task}.yaml'}\n{NO_PACING}"
                     "targets:\n  - {name: single_stream, metric: decode_tok_s, workload: single_stream, min: 100000}\n"
                     "search_space:\n  flags:\n    speculative-num-steps: [3]\n    speculative-eagle-topk: [1]\n")
    proc = agent(tmp_path, "run", str(short), "--policy", "playbook", "--run-id", task)
    # the target is out of reach on purpose (only the stage where the defects are met runs): exit 3, missed
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_dir = tmp_path / "runs" / task
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["blocked"] == {}
    branch = f"dayzero/{task}"
    model, sglang = (git.Repo(run_dir / "workspace" / n) for n in ("model", "sglang"))
    ours = [c for r in (model, sglang) for c in r.iter_commits(branch) if "Dayzero-Run" in c.message]
    exclude = [c for c in model.iter_commits(branch) if c.summary.startswith("Exclude")]
    assert len(exclude) == 1
    added = [e for e in json.loads((run_dir / "workspace" / "model" / "config.json").read_text())
             ["quantization_config"]["exclude"] if e.startswith(("model.decoder", "re:model\\.decoder", "model.eh_proj"))]
    engine_fix = [c for c in sglang.iter_commits(branch) if "exclude entries" in c.summary]
    assert len(engine_fix) == 1
    assert "as released and benchmarked" in " ".join(engine_fix[0].message.split())
    guards = [c for c in sglang.iter_commits(branch) if c.summary.startswith("Guard")]
    if task == "corvus_mi300x":  # replay: the recorded decisions, executed again, give the same calls and outcome
        check_replay(tmp_path, short, task, summary)
    if task == "lyra_mi355x":
        # the engine's granularity: the fused experts once, eh_proj on the draft model itself, no expert names
        assert "model.decoder.mlp.experts" in added and "model.eh_proj" in added
        assert not any(".experts." in e for e in added)
        assert guards == [] and len(ours) == 2
        # the log did not name the tensor: the weight index did, and the message says how sure that is
        assert "model.layers.40.eh_proj.weight, the only one that fits" in " ".join(exclude[0].message.split())
    else:
        headers = sorted(h for c in guards for h in ("cuda_bf16.h", "cuda_fp8.h") if f"of {h} " in c.summary)
        assert headers == ["cuda_bf16.h", "cuda_fp8.h"] and len(guards) == 2  # one commit per header
        for c in guards:  # each names its own crash, and touches one include
            header = "cuda_bf16.h" if "cuda_bf16.h" in c.summary else "cuda_fp8.h"
            crash = c.message.split("The crash:", 1)[1].split("What failed:", 1)[0]
            assert f"'{header}' file not found" in crash
            diff = c.repo.git.show(c.hexsha, "--format=")
            # the include goes back into the file's own USE_ROCM block, its HIP header beside the others: no new guard
            assert "+#ifndef USE_ROCM" not in diff and f"+#include <{header}>" in diff, diff
    # the patches of a scenario other than the default pass the reviewer's checklist too
    from tests.agent.test_review_checklist import check_review

    check_review(run_dir)
