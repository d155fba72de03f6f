"""The LLM path end to end, through the real command line: ``agent run TASK --policy llm`` as a subprocess,
against a scripted OpenAI-compatible server on 127.0.0.1, on the MI355X twin.

The scripted model brings the baseline up, sends a malformed and an invalid tool call, meets a 429,
benchmarks, crashes MTP 3/1/4, diagnoses it, patches the checkpoint's exclude list from the diagnosis it
was sent (as a model would), relaunches, benchmarks and finishes. The run must end cleanly with the patch
committed, the errors returned to the model as tool results, and the API key nowhere in the run directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import git

from tests.agent.llm_server import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "glm52_mi355x.yaml"
SECRET = "sk-test-secret-123456"
RUN_ID = "llm-e2e"
BASELINE = {"tp-size": 8}
MTP = {"tp-size": 8, "speculative-algorithm": "EAGLE", "speculative-num-steps": 3,
       "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4}  # fmt: skip
BASELINE_ID, MALFORMED_ID, INVALID_ID = "call_baseline", "call_malformed", "call_invalid"
MTP_ID, DIAGNOSE_ID, EDIT_ID = "call_mtp", "call_diagnose", "call_edit"
READ_ID = "call_read"
RELAUNCH_ID, FINAL_BENCH_ID = "call_relaunch", "call_bench2"


def tool_replies(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """tool_call_id -> decoded content of the ``role: "tool"`` messages in one chat request."""
    replies = [m for m in request["messages"] if m.get("role") == "tool"]
    return {m["tool_call_id"]: json.loads(m["content"]) for m in replies}


def last_reply(request: dict[str, Any], tool: str) -> dict[str, Any]:
    """The reply to the latest call of ``tool`` in the conversation the request carries."""
    names = {}
    for m in request["messages"]:
        for tc in m.get("tool_calls") or []:
            names[tc["id"]] = tc["function"]["name"]
    replies = [(cid, r) for cid, r in tool_replies(request).items() if names.get(cid) == tool]
    assert replies, f"no reply to a {tool} call in the request"
    return replies[-1][1]


def expect_up(request: dict[str, Any], call_id: str) -> None:
    reply = tool_replies(request)[call_id]
    assert reply["ok"] and reply["status"] == "up", reply


def after_baseline(request: dict[str, Any]) -> dict[str, Any]:
    expect_up(request, BASELINE_ID)
    return {"tool_calls": [("read_log", "{not json", MALFORMED_ID),  # arguments that are not JSON
                           ("launch_server", {"flags": "tp8"}, INVALID_ID)]}  # fmt: skip


def benchmark_after_errors(request: dict[str, Any]) -> dict[str, Any]:
    replies = tool_replies(request)
    assert not replies[MALFORMED_ID]["ok"] and not replies[INVALID_ID]["ok"], replies
    return {"content": "Those calls were wrong; the baseline is still up. Measuring single-stream decode.",
            "tool_calls": [("run_benchmark", {"workload": "single_stream"})]}  # fmt: skip


def mtp_after_benchmark(request: dict[str, Any]) -> dict[str, Any]:
    reply = last_reply(request, "run_benchmark")
    assert reply["ok"], reply
    return {"tool_calls": [("launch_server", {"flags": MTP}, MTP_ID)]}


def diagnose_after_crash(request: dict[str, Any]) -> dict[str, Any]:
    reply = tool_replies(request)[MTP_ID]
    assert not reply["ok"] and reply["status"] == "crashed", reply
    return {"tool_calls": [("diagnose_crash", {}, DIAGNOSE_ID)]}


def read_draft_model(request: dict[str, Any]) -> dict[str, Any]:
    """SGLang's loader names no parameter: read the draft model the traceback points at, as a model would."""
    reply = tool_replies(request)[DIAGNOSE_ID]
    assert reply["ok"], reply
    diagnosis = reply["diagnosis"]
    assert diagnosis["category"] == "weight_shape_mismatch", diagnosis
    assert diagnosis["draft_model"] and diagnosis["model_file"], diagnosis
    assert diagnosis["model_file"].startswith("sglang/"), diagnosis  # a workspace path the source tools take
    return {"content": "The draft model failed to load; its model file names the MTP layer's modules.",
            "tool_calls": [("search_source", {"regex": r"self\.(model|decoder|eh_proj)\s*=",
                                              "glob": diagnosis["model_file"]}, READ_ID)]}  # fmt: skip


def patch_from_source(request: dict[str, Any]) -> dict[str, Any]:
    """Name the MTP layer's excluded modules as the draft model builds them, as a model would."""
    reply = tool_replies(request)[READ_ID]
    assert reply["ok"], reply
    text = "\n".join(match["text"] for match in reply["matches"])
    built = set(re.findall(r"self\.(model|decoder|eh_proj)\s*=", text))
    assert built == {"model", "decoder", "eh_proj"}, (
        f"the draft model file should build these modules: {text}"
    )
    # the draft's top module holds eh_proj and the decoder layer directly: model.eh_proj, model.decoder.*
    entries = [json.dumps("model.eh_proj"), json.dumps("re:model\\.decoder\\.self_attn\\.indexer\\..*")]
    edit = {
        "path": "model/config.json",
        "old": '"exclude": [',
        "new": '"exclude": [\n      ' + ",\n      ".join(entries) + ",",
    }
    return {"content": "The draft model builds the MTP layer as model.decoder and model.eh_proj; the exclude list "
                       "only names model.layers.*.", "tool_calls": [("edit_file", edit, EDIT_ID)]}  # fmt: skip


def relaunch_after_edit(request: dict[str, Any]) -> dict[str, Any]:
    reply = tool_replies(request)[EDIT_ID]
    assert reply["ok"], reply
    return {"tool_calls": [("launch_server", {"flags": MTP}, RELAUNCH_ID)]}


def benchmark_after_relaunch(request: dict[str, Any]) -> dict[str, Any]:
    expect_up(request, RELAUNCH_ID)
    return {"tool_calls": [("run_benchmark", {"workload": "single_stream"}, FINAL_BENCH_ID)]}


def finish_after_benchmark(request: dict[str, Any]) -> dict[str, Any]:
    reply = tool_replies(request)[FINAL_BENCH_ID]
    assert reply["ok"], reply
    return {"tool_calls": [("finish", {"reason": "MTP 3/1/4 serves after the exclude-list fix"})]}


def checked(step: Callable[[dict[str, Any]], dict[str, Any]], problems: list[str]) -> Callable[..., Any]:
    """``step``, but a failed expectation is recorded and ends the run (rather than breaking the reply)."""

    def run(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return step(request)
        except (AssertionError, KeyError) as exc:
            problems.append(f"{step.__name__}: {type(exc).__name__}: {exc}")
            return {"tool_calls": [("finish", {"reason": f"scripted model: {step.__name__} failed"})]}

    return run


def script(problems: list[str]) -> list[Any]:
    steps = [after_baseline, benchmark_after_errors, mtp_after_benchmark, diagnose_after_crash,
             read_draft_model, patch_from_source, relaunch_after_edit, benchmark_after_relaunch,
             finish_after_benchmark]  # fmt: skip
    first, *rest = [checked(s, problems) for s in steps]
    return [
        {"content": "Baseline first.", "tool_calls": [("launch_server", {"flags": BASELINE}, BASELINE_ID)]},
        first,
        {"status": 429, "retry_after_ms": 5, "message": "slow down"},
        *rest,
    ]


def json_error(text: str) -> str:
    """What the JSON decoder says about ``text`` (the runner passes it on as the call's error)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return str(exc)
    raise AssertionError(f"{text!r} is valid JSON")


def agent_command() -> list[str]:
    return [sys.executable, "-c", "from agent.cli import app; app()"]


def test_llm_run_through_the_cli(tmp_path: Path) -> None:
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("OPENAI_BASE_URL", None)
    problems: list[str] = []
    with ScriptedLLM(script(problems)) as llm:
        proc = subprocess.run(
            [*agent_command(), "run", str(TASK), "--policy", "llm", "--llm-model", "scripted",
             "--llm-base-url", llm.base_url, "--run-id", RUN_ID],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110,
        )  # fmt: skip
        requests = list(llm.requests)
        remaining = llm.remaining
    output = proc.stdout + proc.stderr
    assert not problems, problems
    assert proc.returncode == 3, output  # the scripted model stops once MTP serves: targets missed, exit 3
    assert SECRET not in output
    run_dir = tmp_path / "runs" / RUN_ID
    summary = json.loads((run_dir / "summary.json").read_text())

    # every scripted step was consumed, the 429 as one extra HTTP request, and nothing more was asked
    assert remaining == 0
    assert len(requests) == 11
    assert all(r["model"] == "scripted" for r in requests)
    assert requests[2]["messages"] == requests[3]["messages"]  # the SDK retried the request after the 429

    # the malformed and the invalid call went back to the model as failed tool results, by call id
    replies = tool_replies(requests[2])
    assert tool_replies(requests[3]) == replies
    assert not replies[MALFORMED_ID]["ok"] and not replies[INVALID_ID]["ok"]
    assert json_error("{not json") in replies[MALFORMED_ID]["error"], replies[MALFORMED_ID]
    assert "invalid arguments for launch_server" in replies[INVALID_ID]["error"]

    # the trace
    events = [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("llm_request") == 10  # one per decision; the SDK's retry is inside one request
    assert kinds.count("llm_response") == 10
    assert all(not e.get("error") for e in events if e["kind"] == "llm_response")
    calls = {e["call_id"]: e for e in events if e["kind"] == "tool_call"}
    turns = [m for r in requests for m in r["messages"] if m["role"] == "assistant"]
    sent = [tc for m in turns for tc in m.get("tool_calls") or []]
    executed = {tc["id"]: tc["function"]["name"] for tc in sent if tc["function"]["name"] != "finish"}
    for call_id, name in executed.items():
        assert call_id in calls and calls[call_id]["tool"] == name, (call_id, name)
    malformed, invalid = calls[MALFORMED_ID], calls[INVALID_ID]
    assert malformed["ok"] is False and invalid["ok"] is False
    assert json_error("{not json") in malformed["error"], malformed
    assert malformed["input"] == {"raw": "{not json"}, malformed
    assert "invalid arguments" in invalid["error"], invalid
    assert malformed["error"] in replies[MALFORMED_ID]["error"]
    assert invalid["error"] == replies[INVALID_ID]["error"]
    launches = [calls[c]["result"].get("status") for c in executed if executed[c] == "launch_server"]
    assert launches == ["up", None, "crashed", "up"], launches

    # the patch was verified by the relaunch and benchmark, then committed on the run's branch
    assert summary["finish_reason"].startswith("finish:")
    assert summary["commits"], summary
    assert summary["commits"][0]["files"] == ["model/config.json"]
    assert summary["llm_tokens"] > 0
    usage = [e["usage"]["total_tokens"] for e in events if e["kind"] == "llm_response"]
    assert summary["llm_tokens"] == sum(usage)
    assert summary["branch"] == f"dayzero/{RUN_ID}"
    repo = git.Repo(run_dir / "workspace" / "model")
    branch = f"dayzero/{RUN_ID}"
    assert branch in repo.heads
    messages = [c.message for c in repo.iter_commits(branch)]
    assert any(f"Dayzero-Run: {RUN_ID}" in m for m in messages), messages
    assert "- after: trial 3 launched and benchmarked" in messages[0], messages[0]
    assert summary["commits"][0]["commits"][0] == repo.heads[branch].commit.hexsha
    config = json.loads((run_dir / "workspace" / "model" / "config.json").read_text())
    assert config["quantization_config"]["exclude"][:2] == [
        "model.eh_proj",
        "re:model\\.decoder\\.self_attn\\.indexer\\..*",
    ]
    trials = summary["trials"]
    assert [t["status"] for t in trials] == ["up", "crashed", "up"]
    assert trials[-1]["metrics"].get("single_stream", 0) > 0

    # the API key reached the server (as the bearer token) but no file of the run
    assert all(h.get("authorization") == f"Bearer {SECRET}" for h in llm.headers)
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"the API key leaked into {path}"
