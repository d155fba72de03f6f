"""LLMPolicy against a real HTTP server speaking the chat-completions API, through the real openai client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.policies.base import Decision, PolicyContext
from agent.policies.llm import (
    RAW_ARGUMENTS,
    LLMPolicy,
    call_arguments,
    observation_content,
    parse_arguments,
    system_message,
    trim_history,
)
from agent.state import AgentState, Best, Call, Observation, Trial
from agent.trace import TraceWriter, read_trace
from tasks.spec import EnvVar, load_task
from tests.agent.llm_server import ScriptedLLM
from tools.base import all_tools
from tools.runner import ToolRunner

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "glm52_mi355x.yaml"
API_KEY = "sk-test-DoNotLeak-0123456789"
HF_SECRET = "hf_supersecretvalue42"
RUN = "run-llm-test"


class Workspace:
    def __init__(self, files: dict[str, str] | None = None) -> None:
        self.files = files or {}

    def read_file(self, path: str) -> str:
        return self.files[path]

    def exists(self, path: str) -> bool:
        return path in self.files


@pytest.fixture
def trace(tmp_path: Path):
    with TraceWriter(tmp_path / "trace.jsonl", RUN) as writer:
        yield writer


@pytest.fixture
def ctx(trace: TraceWriter) -> PolicyContext:
    task = load_task(TASK)
    task = task.model_copy(update={"env": {**task.env, "HF_TOKEN": EnvVar(value=HF_SECRET, secret=True)}})
    schemas = [t.schema() for t in all_tools().values()]
    return PolicyContext(task=task, workspace=Workspace(), tool_schemas=schemas, run_id=RUN, trace=trace)


def new_state() -> AgentState:
    return AgentState(run_id=RUN, task_path=str(TASK))


def policy(server: ScriptedLLM, **kw: Any) -> LLMPolicy:
    kw.setdefault("api_key", API_KEY)
    return LLMPolicy(model="test-model", base_url=server.base_url, **kw)


def advance(state: AgentState, decision: Decision, results: dict[str, dict[str, Any]] | None = None) -> AgentState:
    """What the graph does between two decisions: take the memo, run the calls (here: canned results)."""
    observations = []
    for call in decision.calls:
        res = (results or {}).get(call.call_id, {"ok": True, "summary": f"{call.tool} done"})
        observations.append(Observation(call_id=call.call_id, tool=call.tool, args=call.args, ok=res.get("ok", True),
                                        error=res.get("error"), result=res.get("result", {"summary": res.get("summary", "")}),
                                        step=state.step + 1))  # fmt: skip
    budget = state.budget.model_copy(update={"llm_tokens": state.budget.llm_tokens + decision.llm_tokens,
                                             "wall_seconds": state.budget.wall_seconds + decision.wall_seconds})
    return state.model_copy(update={"memo": decision.memo, "step": state.step + 1, "observations": observations,
                                    "budget": budget, "done": decision.done})  # fmt: skip


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


# ----------------------------------------------------------------------------------------------- tests


def test_tool_call_becomes_call_with_id_and_usage_is_counted(ctx: PolicyContext, trace: TraceWriter):
    script = [{"tool_calls": [("launch_server", {"flags": {"tp-size": 4}}, "call_abc")], "content": "launching",
               "usage": {"prompt_tokens": 1200, "completion_tokens": 34}}]  # fmt: skip
    with ScriptedLLM(script) as server:
        d = policy(server).decide(new_state(), ctx)
    assert d.calls == [Call(tool="launch_server", args={"flags": {"tp-size": 4}}, call_id="call_abc")]
    assert d.llm_tokens == 1234 and d.stage == "llm" and not d.done
    assert d.rationale == "launching"
    json.dumps(d.memo)  # checkpointable
    req = server.requests[0]
    assert req["model"] == "test-model" and req["tool_choice"] == "auto" and req["temperature"] == 0.0
    names = [t["function"]["name"] for t in req["tools"]]
    assert names[-1] == "finish" and set(all_tools()) <= set(names)
    assert req["messages"][0]["role"] == "system" and "2626" in req["messages"][0]["content"]
    assert server.headers[0]["authorization"] == f"Bearer {API_KEY}"
    # the assistant message is kept exactly as the API needs it next turn
    assert d.memo["llm"]["messages"][-1] == {"role": "assistant", "content": "launching", "tool_calls": [
        {"id": "call_abc", "type": "function", "function": {"name": "launch_server",
                                                            "arguments": '{"flags": {"tp-size": 4}}'}}]}  # fmt: skip

    events = read_trace(trace.path)
    kinds = [e.kind for e in events]
    assert kinds == ["llm_request", "llm_response"]
    reqev, resev = events
    assert reqev.call_id == resev.call_id and reqev.model == "test-model" and reqev.step == 1
    assert reqev.base_url.startswith("http://127.0.0.1:") and "finish" in reqev.tools
    assert reqev.params["tool_choice"] == "auto" and reqev.messages[0]["role"] == "system"
    assert resev.usage.prompt_tokens == 1200 and resev.usage.completion_tokens == 34 and resev.error is None
    assert resev.message["tool_calls"][0]["id"] == "call_abc" and resev.wall_seconds >= 0
    assert API_KEY not in trace.path.read_text()


def test_429_is_retried_transparently(ctx: PolicyContext):
    script = [{"status": 429, "retry_after_ms": 10}, {"tool_calls": [("read_log", {"tail": 50})]}]
    with ScriptedLLM(script) as server:
        d = policy(server).decide(new_state(), ctx)
    assert len(server.requests) == 2
    assert [c.tool for c in d.calls] == ["read_log"] and d.calls[0].args == {"tail": 50}
    assert d.memo["llm"]["errors"] == 0


def test_malformed_arguments_reach_the_runner_and_the_error_returns_to_the_model(ctx: PolicyContext):
    script = [{"tool_calls": [("read_log", "{not json", "bad_1"), ("no_such_tool", {"x": 1}, "bad_2")]},
              {"tool_calls": [("read_log", {})]}]  # fmt: skip
    with ScriptedLLM(script) as server:
        pol = policy(server)
        d1 = pol.decide(state := new_state(), ctx)
        bad, unknown = d1.calls
        assert bad.call_id == "bad_1" and bad.args == {RAW_ARGUMENTS: "{not json"}
        assert call_arguments(bad) == "{not json"
        assert call_arguments(unknown) == {"x": 1} and unknown.tool == "no_such_tool"
        # what the graph does: the runner turns both into error records (the context is never reached)
        runner = ToolRunner(ctx=None)  # type: ignore[arg-type]
        results = {}
        for call in d1.calls:
            rec = runner.call(call.tool, call_arguments(call), call_id=call.call_id)
            assert not rec.ok
            results[call.call_id] = {"ok": rec.ok, "error": rec.error, "result": rec.result}
        d2 = pol.decide(advance(state, d1, results), ctx)
    assert [c.tool for c in d2.calls] == ["read_log"]
    req = server.requests[1]
    assistant = [m for m in req["messages"] if m["role"] == "assistant"][-1]
    assert [tc["id"] for tc in assistant["tool_calls"]] == ["bad_1", "bad_2"]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{not json"
    replies = tool_messages(req)
    assert [m["tool_call_id"] for m in replies] == ["bad_1", "bad_2"]
    first, second = (json.loads(m["content"]) for m in replies)
    assert first["ok"] is False and "Expecting property name" in first["error"]
    assert second["ok"] is False and "unknown tool 'no_such_tool'" in second["error"]
    assert req["messages"].index(assistant) + 1 == req["messages"].index(replies[0])


def test_observation_is_sent_back_compact_and_redacted(ctx: PolicyContext, trace: TraceWriter):
    script = [{"tool_calls": [("read_log", {"tail": 10}, "c1"), ("search_source", {"pattern": "x"}, "c2")]},
              {"content": "thinking", "tool_calls": [("read_file", {"path": "a.py"})]}]  # fmt: skip
    with ScriptedLLM(script) as server:
        pol = policy(server)
        d1 = pol.decide(state := new_state(), ctx)
        long_log = [f"line {i} HF_TOKEN={HF_SECRET}" for i in range(2000)]
        results = {"c1": {"ok": True, "result": {"ok": True, "summary": f"2000 lines, token {HF_SECRET}",
                                                 "cost": {"wall_seconds": 1.0}, "lines": long_log}}}  # fmt: skip
        d2 = pol.decide(advance(state, d1, results), ctx)
    assert d2.llm_tokens > 0 and d2.rationale == "thinking"
    replies = tool_messages(server.requests[1])
    assert [m["tool_call_id"] for m in replies] == ["c1", "c2"]
    assert len(replies[0]["content"]) <= 4000
    assert HF_SECRET not in json.dumps(server.requests[1])
    body = json.loads(replies[0]["content"])
    assert body["ok"] is True and "cost" not in body and body["summary"].startswith("2000 lines")
    assert json.loads(replies[1]["content"]) == {"ok": True, "summary": "search_source done"}
    assert HF_SECRET not in trace.path.read_text() and API_KEY not in trace.path.read_text()


def test_a_call_the_graph_did_not_run_still_gets_a_reply(ctx: PolicyContext):
    with ScriptedLLM([{"tool_calls": [("read_log", {}, "c1")]}, {"tool_calls": [("read_log", {})]}]) as server:
        pol = policy(server)
        d1 = pol.decide(state := new_state(), ctx)
        state = advance(state, d1).model_copy(update={"observations": []})
        pol.decide(state, ctx)
    (reply,) = tool_messages(server.requests[1])
    assert reply["tool_call_id"] == "c1" and "not executed" in reply["content"]


def test_finish_ends_the_run(ctx: PolicyContext):
    with ScriptedLLM([{"tool_calls": [("finish", {"reason": "all targets met"})]}]) as server:
        d = policy(server).decide(new_state(), ctx)
    assert d.done and d.calls == [] and "all targets met" in d.rationale


def test_exhausted_script_answers_finish(ctx: PolicyContext):
    with ScriptedLLM([]) as server:
        d = policy(server).decide(new_state(), ctx)
    assert d.done and "script done" in d.rationale


def test_finish_with_other_calls_runs_them_first(ctx: PolicyContext):
    script = [{"tool_calls": [("commit", {}, "c1"), ("finish", {"reason": "done"}, "f1")]},
              {"tool_calls": [("finish", {"reason": "now"})]}]  # fmt: skip
    with ScriptedLLM(script) as server:
        pol = policy(server)
        d1 = pol.decide(state := new_state(), ctx)
        assert not d1.done and [c.tool for c in d1.calls] == ["commit"]
        d2 = pol.decide(advance(state, d1), ctx)
    assert d2.done
    replies = {m["tool_call_id"]: json.loads(m["content"]) for m in tool_messages(server.requests[1])}
    assert replies["c1"]["ok"] is True and replies["f1"]["ok"] is False and "finish" in replies["f1"]["error"]


def test_text_without_tool_calls_twice_means_done(ctx: PolicyContext):
    with ScriptedLLM([{"content": "I think we should launch."}, {"content": "Still thinking."}]) as server:
        pol = policy(server)
        d1 = pol.decide(state := new_state(), ctx)
        assert not d1.done and d1.calls == [] and d1.rationale == "I think we should launch."
        d2 = pol.decide(advance(state, d1), ctx)
    assert d2.done and d2.calls == []
    assert server.requests[1]["messages"][-1]["role"] == "user"  # nudged to act


def test_three_consecutive_errors_end_the_run(ctx: PolicyContext, trace: TraceWriter):
    with ScriptedLLM([{"status": 500}] * 3) as server:
        pol = policy(server, max_retries=0)
        state = new_state()
        decisions = []
        for _ in range(3):
            d = pol.decide(state, ctx)
            decisions.append(d)
            state = advance(state, d)
    assert len(server.requests) == 3
    assert [d.done for d in decisions] == [False, False, True]
    assert all(d.calls == [] and "InternalServerError" in d.rationale for d in decisions)
    assert state.memo["llm"]["errors"] == 3
    responses = [e for e in read_trace(trace.path) if e.kind == "llm_response"]
    assert len(responses) == 3 and all(e.error and "500" in e.error for e in responses)


def test_an_endpoint_that_was_never_there_ends_the_run_at_once(ctx: PolicyContext):
    import socket

    with socket.socket() as held:  # bound, never listening: connections are refused, and no one else can take it
        held.bind(("127.0.0.1", 0))
        pol = LLMPolicy(model="m", base_url=f"http://127.0.0.1:{held.getsockname()[1]}/v1", api_key="k",
                        max_retries=0)  # fmt: skip
        d = pol.decide(new_state(), ctx)
    assert d.done and d.calls == [] and "APIConnectionError" in d.rationale and "giving up" in d.rationale
    assert d.memo["llm"]["errors"] == 1  # one request (after the SDK's own retries), not three


def test_a_connection_lost_after_answers_is_retried_on_the_next_turn(ctx: PolicyContext):
    with ScriptedLLM([{"tool_calls": [("read_log", {})]}]) as server:
        pol = policy(server, max_retries=0)
        d1 = pol.decide(state := new_state(), ctx)
    d2 = pol.decide(advance(state, d1), ctx)  # the server is gone now: one failure, not the end
    assert d1.calls and not d2.done and "APIConnectionError" in d2.rationale


def test_an_error_then_success_resets_the_counter(ctx: PolicyContext):
    with ScriptedLLM([{"status": 500}, {"tool_calls": [("read_log", {})]}]) as server:
        pol = policy(server, max_retries=0)
        d1 = pol.decide(state := new_state(), ctx)
        d2 = pol.decide(advance(state, d1), ctx)
    assert d1.memo["llm"]["errors"] == 1 and d2.memo["llm"]["errors"] == 0 and d2.calls


def test_history_trimming_keeps_tool_replies_with_their_assistant(ctx: PolicyContext):
    # each turn: 3 tool calls -> assistant + 3 tool replies; a small window must cut between turns
    def turn(n: int):
        return {"tool_calls": [("read_log", {"tail": n}, f"t{n}a"), ("read_log", {"tail": n}, f"t{n}b"),
                               ("read_log", {"tail": n}, f"t{n}c")]}  # fmt: skip

    with ScriptedLLM([turn(n) for n in range(8)]) as server:
        pol = policy(server, max_history=6)
        state = new_state()
        for _ in range(8):
            d = pol.decide(state, ctx)
            state = advance(state, d)
    for req in server.requests:
        msgs = req["messages"]
        assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
        assert len(msgs) <= 2 + 6 + 3
        answered = set()
        for i, m in enumerate(msgs):
            if m["role"] == "tool":
                prev = next(p for p in reversed(msgs[:i]) if p["role"] != "tool")
                assert prev["role"] == "assistant" and m["tool_call_id"] in {t["id"] for t in prev["tool_calls"]}
                answered.add(m["tool_call_id"])
            if m["role"] == "assistant" and m is not msgs[-1]:
                assert {t["id"] for t in m["tool_calls"]} <= {x["tool_call_id"] for x in msgs if x["role"] == "tool"}
    last = server.requests[-1]["messages"]
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"][-3:] == ["t6a", "t6b", "t6c"]
    assert len(state.memo["llm"]["messages"]) <= 6 + 4


def test_trim_history_unit():
    a = lambda i: {"role": "assistant", "content": None, "tool_calls": [{"id": f"{i}x"}, {"id": f"{i}y"}]}  # noqa: E731
    t = lambda i, s: {"role": "tool", "tool_call_id": f"{i}{s}", "content": "{}"}  # noqa: E731
    msgs = [{"role": "user", "content": "go"}]
    for i in range(5):
        msgs += [a(i), t(i, "x"), t(i, "y")]
    kept = trim_history(msgs, 4)
    assert kept[0]["role"] == "assistant" and kept == msgs[-3:]
    kept = trim_history(msgs, 2)  # the last turn is kept whole even when it exceeds the window
    assert kept == msgs[-3:]
    assert trim_history(msgs, 100) == msgs


def test_resume_from_a_serialised_state(ctx: PolicyContext):
    with ScriptedLLM([{"tool_calls": [("read_log", {}, "c1")]}, {"tool_calls": [("read_log", {})]}]) as server:
        d1 = policy(server).decide(state := new_state(), ctx)
        restored = AgentState.model_validate(json.loads(json.dumps(advance(state, d1).model_dump(mode="json"))))
        policy(server).decide(restored, ctx)  # a fresh policy object, as after a restart
    assert [m["tool_call_id"] for m in tool_messages(server.requests[1])] == ["c1"]


def test_system_message_reports_progress(ctx: PolicyContext):
    flags = {"tp-size": 4, "dp-size": 2}
    state = new_state().model_copy(update={
        "trials": [Trial(id=i, flags=flags, status="crashed", diagnosis=f"weight shape mismatch {i}") for i in range(15)]
        + [Trial(id=15, flags=flags, status="up", metrics={"throughput": 2100.5}, accuracy=0.96, accuracy_ok=True)],
        "bests": {"throughput": Best(target="throughput", value=2100.5, trial=15, flags=flags, verified=True)},
        "candidates": {"single_stream": Best(target="single_stream", value=190.0, trial=15, flags=flags)},
    })  # fmt: skip
    text = system_message(state, ctx)
    assert "glm52_mi355x" in text and "MI355X" in text and "2626" in text and "213" in text
    assert "gsp-system-prompt-len=12000" in text and "speculative-algorithm" in text
    assert "best throughput: 2100.5" in text and "candidate single_stream: 190" in text
    assert "#15 up" in text and "#3 crashed" not in text and "#4 crashed" in text  # only the last 12
    assert "diagnose_crash" in text and "finish" in text and "trials 0/80" in text


def test_observation_content_and_parse_arguments():
    obs = Observation(call_id="c", tool="read_file", args={}, ok=True,
                      result={"ok": True, "summary": "s", "cost": {}, "text": "x" * 50_000, "empty": None})  # fmt: skip
    out = observation_content(obs, [], max_chars=4000)
    assert len(out) <= 4000 and json.loads(out)["summary"] == "s" and "empty" not in out
    assert parse_arguments("") == {} and parse_arguments(None) == {}
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("[1, 2]") == {RAW_ARGUMENTS: "[1, 2]"}
    assert call_arguments(Call(tool="x", args={RAW_ARGUMENTS: "[1, 2]"})) == "[1, 2]"


def test_api_key_rules(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MY_LLM_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="MY_LLM_KEY"):
        LLMPolicy(model="m", base_url="https://api.example.com/v1", api_key_env="MY_LLM_KEY")
    with pytest.raises(ValueError, match="MY_LLM_KEY"):
        LLMPolicy(model="m", api_key_env="MY_LLM_KEY")
    assert LLMPolicy(model="m", base_url="http://localhost:8000/v1", api_key_env="MY_LLM_KEY").client.api_key == "not-needed"
    monkeypatch.setenv("MY_LLM_KEY", "sk-from-env-1234567")
    assert LLMPolicy(model="m", base_url="https://api.example.com/v1", api_key_env="MY_LLM_KEY").client.api_key == (
        "sk-from-env-1234567"
    )


def test_a_layout_move_is_explained_as_one_change_of_layout():
    from agent.policies.llm import _why_neighbour
    from agent.search import Candidate

    best = Candidate(flags={"tp-size": 2, "dp-size": 4})
    why = _why_neighbour(Candidate(flags={"tp-size": 1, "dp-size": 8}), best, {"prefill_attention": 0.6, "decode": 0.2})
    assert why == "neighbour of the best on the layout (dp-size, tp-size); it acts on the prefill_attention share, 60 % of GPU time"
    kv = _why_neighbour(Candidate(flags={**best.flags, "kv-cache-dtype": "fp8_e4m3"}), best, {"decode": 0.45})
    assert kv == "neighbour of the best on kv-cache-dtype; it acts on the decode share, 45 % of GPU time"
