"""The whole known path, by calling the tools directly against the twin (local processes).

Baseline, benchmark; MTP crashes -> diagnose names the parameter and shapes -> patch the checkpoint's exclude
list with edit_file -> relaunch; deep speculation fails to compile -> diagnose names header and file -> guard
the include; tune the MoE selection; find the knee above 2.4 RPS; accuracy holds; every patch is a commit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import git
import pytest

from agent.policies.expert import PlaybookExpert
from agent.trace import TraceWriter, read_trace
from sandboxes.select import choose, open_workspace
from tasks.spec import load_task
from tools.context import ToolContext
from tools.runner import ToolRunner

SPEC = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4}  # fmt: skip
DEEP = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 5, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 6, "kv-cache-dtype": "fp8_e4m3", "enable-aiter-allreduce-fusion": True}  # fmt: skip


@pytest.fixture
def runner(tmp_path):
    task = load_task("tasks/glm52_mi355x.yaml")
    choice = choose(task, "local")
    run_dir = tmp_path / "run"
    sandbox, repos = open_workspace(task, choice, run_dir / "workspace", "test-run")
    ctx = ToolContext(task=task, engine_name=choice.engine, engine=task.engines.twin, sandbox=sandbox,
                      run_id="test-run", run_dir=run_dir, repos=repos, expert=PlaybookExpert())  # fmt: skip
    with TraceWriter(run_dir / "trace.jsonl", "test-run") as trace:
        r = ToolRunner(ctx, on_call=lambda rec: trace.emit("tool_call", **rec.trace_fields()))
        yield r
    sandbox.close()


def call(runner, name, **args):
    rec = runner.call(name, args)
    assert rec.error is None or not rec.ok
    return rec


def add_exclude(runner, module: str) -> None:
    """Add ``module`` to the checkpoint's exclude list with edit_file (what a patch looks like)."""
    rec = call(runner, "edit_file", path="model/config.json", old='"exclude": [\n',
               new=f'"exclude": [\n      {json.dumps(module)},\n')  # fmt: skip
    assert rec.ok, rec.error


def test_known_path(runner, tmp_path):
    base = call(runner, "launch_server", flags={"tp-size": 8})
    assert base.ok and base.result["status"] == "up" and base.result["simulated"]
    shapes = base.result["moe_fallback_shapes"]
    assert shapes and shapes[0]["model_dim"] == 6144
    single = call(runner, "run_benchmark", workload="single_stream")
    assert single.ok
    base_speed = single.result["runs"][0]["decode_tok_s"]

    # MTP: crash at weight loading; diagnose; patch the exclude list with the engine's names until it loads
    crash = call(runner, "launch_server", flags={"tp-size": 8, **SPEC})
    assert not crash.ok and crash.result["status"] == "crashed"
    diag = call(runner, "diagnose_crash").result["diagnosis"]
    assert diag["category"] == "weight_shape_mismatch"
    assert diag["parameter"] is None  # ReplicatedLinear's loader prints shapes and dtypes, no name
    assert diag["draft_model"] and diag["model_file"].endswith("models/deepseek_nextn.py")
    first_error = crash.result["summary"]
    # the draft model's own name mapping says where it registers the checkpoint's MTP layer
    found = call(runner, "search_source", regex=r'"model\.layers\.\d+":', glob=diag["model_file"])
    engine_prefix = re.search(r'"model\.layers\.\d+":\s*"([\w.]+)"', found.result["matches"][0]["text"]).group(1)
    assert engine_prefix == "model.decoder"
    config = json.loads(runner.ctx.sandbox.read_file("model/config.json"))
    mtp_layer = f"model.layers.{config['num_hidden_layers']}."
    for entry in config["quantization_config"]["exclude"]:  # every entry again, under the engine's names
        if entry.startswith("re:model\\.layers\\.\\d+"):  # the decoder layer's modules, under its prefix
            add_exclude(runner, entry.replace("model\\.layers\\.\\d+", re.escape(engine_prefix)))
        elif entry.startswith(mtp_layer):  # the MTP layer's own modules (eh_proj) hang on the draft's model
            add_exclude(runner, "model." + entry[len(mtp_layer):])
    launched = call(runner, "launch_server", flags={"tp-size": 8, **SPEC})
    assert launched.ok, launched.result["summary"]
    mtp = call(runner, "run_benchmark", workload="single_stream").result["runs"][0]
    assert 2.6 <= mtp["decode_tok_s"] / base_speed <= 3.2
    c1 = call(runner, "commit", title="Exclude the MTP draft layer's bf16 modules under the engine's names",
              what_failed=first_error, root_cause="exclude list names the MTP layer by its checkpoint prefix; "
              "the draft model registers it under another prefix, so it was built quantized",
              change="add the engine-side module names to quantization_config.exclude",
              evidence={"before": first_error, "after": f"MTP 3/1/4 serves, {mtp['decode_tok_s']:.0f} tok/s"})  # fmt: skip
    assert c1.ok and c1.result["commits"][0]["source"] == "model"

    # deep speculation: compile error; guard the include
    crash = call(runner, "launch_server", flags={"tp-size": 8, **DEEP})
    assert not crash.ok
    diag = crash.result["diagnosis"]
    assert diag["category"] == "compile_error" and diag["header"] == "cuda_runtime.h"
    assert diag["file"].startswith("sglang/") and diag["file"].endswith(".cuh")
    src = call(runner, "read_file", path=diag["file"], start=diag["line"], end=diag["line"])
    assert "#include <cuda_runtime.h>" in src.result["text"]
    proposal = call(runner, "propose_include_guard")  # the expert's port, as a proposal (not applied here)
    assert proposal.ok and proposal.result["call"]["args"]["path"] == diag["file"]
    assert proposal.result["call"]["args"]["new"].startswith("#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#else\n")
    guard = call(runner, "edit_file", path=diag["file"], old="#include <cuda_runtime.h>\n",
                 new="#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif\n")  # fmt: skip
    assert guard.ok and "+#ifndef USE_ROCM" in guard.result["diff"]
    assert call(runner, "launch_server", flags={"tp-size": 8, **DEEP}).ok
    deep = call(runner, "run_benchmark", workload="single_stream").result["runs"][0]
    assert deep["decode_tok_s"] > mtp["decode_tok_s"]
    c2 = call(runner, "commit", title="Guard the CUDA-only include of the JIT metadata kernel for ROCm",
              what_failed=crash.result["summary"], root_cause="cuda_runtime.h included without a USE_ROCM guard",
              change="wrap the include in #ifndef USE_ROCM",
              evidence={"before": crash.result["summary"], "after": f"5/1/6 serves, {deep['decode_tok_s']:.0f} tok/s"})  # fmt: skip
    assert c2.ok and c2.result["commits"][0]["source"] == "sglang"

    # MoE kernel selection, then the knee of the production workload on TP4 x DP2
    tuned = call(runner, "tune_moe", shapes=shapes)
    assert tuned.ok, tuned.result["summary"]
    up = call(runner, "launch_server", flags={"tp-size": 4, "dp-size": 2}, env=tuned.result["env"])
    assert up.ok and up.result["moe_fallback_shapes"] == []
    knee = call(runner, "find_knee", workload="throughput", start_rate=1.6)
    assert knee.ok and knee.result["knee_rate"] >= 2.4
    check_knee_holds_for_every_seed(knee.result, limit_ms=5000)
    accuracy = call(runner, "run_eval", suite="gsm8k", n=60)
    assert accuracy.ok and accuracy.result["within_tolerance"] is True
    assert call(runner, "stop_server").ok

    # the run's branch holds both patches, with evidence and trailers
    for source, commit in (("model", c1), ("sglang", c2)):
        repo = git.Repo(runner.ctx.repos[source])
        head = repo.heads["dayzero/test-run"].commit
        assert head.hexsha == commit.result["commits"][0]["sha"]
        assert "\n- before: " in head.message and "Dayzero-Run: test-run" in head.message
        assert len(list(repo.iter_commits("dayzero/test-run"))) == 2  # pristine upstream + the patch
    cfg = json.loads((runner.ctx.repos["model"] / "config.json").read_text())
    assert any(e.startswith("re:model\\.decoder") for e in cfg["quantization_config"]["exclude"])

    events = read_trace(runner.ctx.run_dir / "trace.jsonl")
    calls = [e for e in events if e.kind == "tool_call"]
    assert [c.tool for c in calls][:3] == ["launch_server", "run_benchmark", "launch_server"]
    assert all(c.wall_seconds >= 0 for c in calls)
    assert any((c.node_hours or 0) > 0 for c in calls)


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "model/../../x", "link/passwd"])
def test_path_escapes_are_refused(runner, path):
    (runner.ctx.sandbox.root / "link").symlink_to("/etc")
    for name, args in (("read_file", {"path": path}), ("edit_file", {"path": path, "old": "a", "new": "b"}),
                       ("apply_patch", {"diff": f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"})):  # fmt: skip
        rec = runner.call(name, args)
        assert not rec.ok
        assert re.search(r"outside|refused|absolute", rec.error or "", re.I), rec.error


def test_invalid_tool_calls_come_back_as_errors(runner):
    rec = runner.call("launch_server", {"flags": "tp8"})
    assert not rec.ok and "invalid arguments for launch_server" in rec.error
    assert not runner.call("no_such_tool", {}).ok
    assert not runner.call("read_file", "{not json").ok
    assert not runner.call("run_benchmark", {"workload": "throughput"}).ok  # no server yet


def test_apply_patch_changes_a_file(runner):
    path = "sglang/python/sglang/version.py"
    first = runner.ctx.sandbox.read_file(path).splitlines()[0]
    diff = f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,2 @@\n-{first}\n+{first}\n+patched by the agent\n"
    rec = runner.call("apply_patch", {"diff": diff})
    assert rec.ok, rec.error
    assert "patched by the agent" in runner.ctx.sandbox.read_file(path)
    bad = runner.call("apply_patch", {"diff": f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-nope\n+x\n"})
    assert not bad.ok and "does not apply" in bad.error


def test_tool_schemas_are_valid_openai_functions(runner):
    schemas = runner.schemas()
    names = {s["function"]["name"] for s in schemas}
    assert {"launch_server", "read_log", "diagnose_crash", "search_source", "read_file", "edit_file", "apply_patch",
            "run_benchmark", "find_knee", "tune_moe", "run_eval", "commit", "stop_server"} <= names
    for s in schemas:
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
        assert s["function"]["description"]


def test_search_source_and_rate_sweep(runner):
    found = runner.call("search_source", {"regex": r"def should_ignore_layer", "glob": "sglang/**/*.py"})
    assert found.ok and any(m["path"].endswith("quantization/quark/utils.py") for m in found.result["matches"])
    assert not runner.call("search_source", {"regex": "("}).ok
    assert runner.call("launch_server", {"flags": {"tp-size": 8}}).ok
    sweep = runner.call("run_benchmark", {"workload": "throughput", "rates": [0.5, 1.0]})
    assert sweep.ok
    runs = sweep.result["runs"]
    assert [r["request_rate"] for r in runs] == [0.5, 1.0]
    assert runs[1]["output_throughput"] > runs[0]["output_throughput"]
    assert sweep.result["cost"]["simulated_seconds"] > 1000  # two ten-minute runs, simulated
    log = runner.call("read_log", {"grep": "fired up", "context": 0})
    assert log.ok and "ready to roll" in log.result["lines"][0]


def test_engines_run_in_the_c_locale(runner):
    """Compilers then report in English, the form the diagnosis reads; a task may still set its own locale."""
    env = runner.ctx.engine_env()
    assert env["LC_ALL"] == "C" and env["LANG"] == "C"
    assert runner.ctx.engine_env({"LC_ALL": "de_DE.UTF-8"})["LC_ALL"] == "de_DE.UTF-8"
    assert runner.call("launch_server", {"flags": {"tp-size": 8}}).ok
    pid = runner.ctx.server.handle.pid
    raw = Path(f"/proc/{pid}/environ").read_text()
    environ = dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
    assert environ["LC_ALL"] == "C"
    assert runner.call("stop_server").ok


def test_launch_with_pristine_files(runner):
    """The engine sees the named files as released while the workspace keeps its edits; a path outside the
    workspace's sources is refused before anything starts."""
    bad = call(runner, "launch_server", flags={"tp-size": 8}, pristine=["elsewhere/config.json"])
    assert not bad.ok and "not a file of a workspace source" in bad.result["summary"]
    add_exclude(runner, "model.decoder.mlp.shared_experts.gate_proj")
    edited = (runner.ctx.repos["model"] / "config.json").read_text()
    up = call(runner, "launch_server", flags={"tp-size": 8}, pristine=["model/config.json"])
    assert up.ok, up.result["summary"]
    model_path = up.result["argv"][up.result["argv"].index("--model-path") + 1]
    assert "/.dayzero-pristine/" in model_path
    assert Path(model_path, "config.json").read_text() != edited  # as released...
    assert "shared_experts.gate_proj" not in Path(model_path, "config.json").read_text()
    assert (runner.ctx.repos["model"] / "config.json").read_text() == edited  # ...and the workspace untouched
    assert call(runner, "stop_server").ok


def test_commit_messages_name_paths_from_the_repository_root() -> None:
    from tools.git_ops import repo_relative

    text = 'File "sglang/python/sglang/srt/x.py", line 3 (in sglang/python/a.cuh); model/config.json stays'
    assert repo_relative(text, "sglang") == 'File "python/sglang/srt/x.py", line 3 (in python/a.cuh); model/config.json stays'
    assert repo_relative("edit model/config.json: re:model\\.decoder", "model") == "edit config.json: re:model\\.decoder"


def check_knee_holds_for_every_seed(knee: dict, limit_ms: float) -> None:
    """The knee is a rate every benchmark seed sustains; the figure reported is the lowest seed's, with its p99."""
    seeds, rate = knee["seeds"], knee["knee_rate"]
    assert len(seeds) >= 2 and len(knee["runs"]) <= 8 * len(seeds)
    by_rate: dict[float, list[dict]] = {}
    for r in knee["runs"]:
        by_rate.setdefault(r["request_rate"], []).append(r)
    at_knee = by_rate[rate]
    assert sorted(r["seed"] for r in at_knee) == sorted(seeds)
    assert all(r["median_ttft_ms"] <= limit_ms for r in at_knee)
    assert knee["throughput_at_knee"] == min(r["output_throughput"] for r in at_knee)
    assert knee["ttft_p99_ms"] == max(r["p99_ttft_ms"] for r in at_knee) >= knee["ttft_p50_ms"]
    failing = by_rate[knee["first_failing_rate"]]
    assert any(r["median_ttft_ms"] > limit_ms for r in failing)  # some seed fails just above the knee
    for r_rate, runs in by_rate.items():  # a rate is sustained only if no seed failed it
        if r_rate <= rate:
            assert all(r["median_ttft_ms"] <= limit_ms for r in runs)
