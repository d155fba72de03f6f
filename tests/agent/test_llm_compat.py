"""LLMPolicy against the habits of real servers and models (issues 12-14), through the real openai client and a
scripted server on 127.0.0.1: strict message validation, tool results a chat format hides, too many or repeated
calls, oversized replies, long rate-limit waits, a hung endpoint, server-specific request fields, prompt
templates, and the search layer's view in the system prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.policies.base import PolicyContext
from agent.policies.llm import LLMPolicy, retry_after_seconds, search_view, system_message, wire_messages
from agent.state import AgentState, Best, Trial
from agent.trace import TraceWriter, read_trace
from tasks.spec import load_task
from tests.agent.llm_server import ScriptedLLM
from tests.agent.test_llm_policy import TASK, Workspace, advance
from tools.base import all_tools

RUN = "run-llm-compat"


@pytest.fixture
def trace(tmp_path: Path):
    with TraceWriter(tmp_path / "trace.jsonl", RUN) as writer:
        yield writer


@pytest.fixture
def ctx(trace: TraceWriter) -> PolicyContext:
    schemas = [t.schema() for t in all_tools().values()]
    return PolicyContext(task=load_task(TASK), workspace=Workspace(), tool_schemas=schemas, run_id=RUN, trace=trace)


def new_state(task_path: Path = TASK) -> AgentState:
    return AgentState(run_id=RUN, task_path=str(task_path))


def policy(server: ScriptedLLM, **kw: Any) -> LLMPolicy:
    return LLMPolicy(model="test-model", base_url=server.base_url, **kw)


def notes(trace: TraceWriter) -> list[str]:
    trace.close()
    return [e.message for e in read_trace(trace.path) if e.kind == "note"]


def test_a_strict_server_accepts_every_turn(ctx: PolicyContext):
    script = [{"tool_calls": [("read_log", {}, "c1")]}, {"tool_calls": [("read_log", {"lines": 5}, "c2")]},
              {"content": "thinking", "tool_calls": [("read_log", {"lines": 9}, "c3")]}]  # fmt: skip
    with ScriptedLLM(script, strict=True) as server:
        p, state = policy(server), new_state()
        for _ in range(3):
            d = p.decide(state, ctx)
            assert d.calls, d.rationale
            state = advance(state, d)
        # a conversation checkpointed by an older version, with content null on a tool-call turn
        state.memo["llm"]["messages"][1]["content"] = None
        p.decide(state, ctx)
    assert server.rejected == []
    assistants = [m for m in server.requests[-1]["messages"] if m["role"] == "assistant"]
    assert len(assistants) == 3 and all(m["content"] == "" for m in assistants[:2])


def test_the_strict_mode_rejects_null_content():
    with ScriptedLLM([], strict=True) as server:
        import openai

        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "read_log", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "a", "content": "{}"}])  # fmt: skip
    assert server.rejected and "valid string" in server.rejected[0]


def _model_that_needs_the_result(request: dict[str, Any]) -> dict[str, Any]:
    """Calls read_log until it sees a result of it (a tool or a user message with content), then finishes."""
    seen = any(m["role"] in ("tool", "user") and "read_log done" in (m.get("content") or "")
               for m in request["messages"])  # fmt: skip
    if seen:
        return {"tool_calls": [("finish", {"reason": "read the log"})]}
    return {"tool_calls": [("read_log", {"lines": 50})]}


def test_a_server_that_hides_tool_results_is_detected_in_one_line(ctx: PolicyContext, trace: TraceWriter):
    with ScriptedLLM([_model_that_needs_the_result] * 10, hide_tool_results=True) as server:
        p, state = policy(server), new_state()
        decisions = []
        while not state.done and len(decisions) < 10:
            decisions.append(d := p.decide(state, ctx))
            state = advance(state, d)
    assert len(server.requests) == 3  # the third identical call right after its result ends the run
    assert not decisions[-1].calls and decisions[-1].done
    assert "does not seem to show tool results" in decisions[-1].rationale and "\n" not in decisions[-1].rationale
    assert any("does not seem to show tool results" in n for n in notes(trace))


def test_tool_results_as_user_messages_reach_such_a_model(ctx: PolicyContext):
    with ScriptedLLM([_model_that_needs_the_result] * 10) as server:
        p, state = policy(server, tool_results_as="user"), new_state()
        d = p.decide(state, ctx)
        d = p.decide(advance(state, d), ctx)
    assert d.done and d.rationale == "finish: read the log"
    sent = server.requests[1]["messages"]
    assert not [m for m in sent if m["role"] == "tool"]
    assert sent[-1]["role"] == "user" and sent[-1]["content"].startswith("Results of your tool calls")


def test_wire_messages_groups_one_turns_results():
    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "a", "type": "function", "function": {"name": "read_log", "arguments": "{}"}},
                   {"id": "b", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "a", "content": "A"}, {"role": "tool", "tool_call_id": "b", "content": "B"}]  # fmt: skip
    assert wire_messages(history)[1]["content"] == "" and wire_messages(history)[2]["role"] == "tool"
    as_user = wire_messages(history, "user")
    assert len(as_user) == 3 and as_user[2]["content"].splitlines()[1:] == ["[a] read_log -> A", "[b] list_files -> B"]


def test_calls_beyond_the_cap_are_answered_not_run(ctx: PolicyContext, trace: TraceWriter):
    many = [("read_file", {"path": f"f{i}.py"}, f"c{i}") for i in range(6)]
    with ScriptedLLM([{"tool_calls": many}, {"tool_calls": [("read_log", {})]}]) as server:
        p = policy(server, max_calls_per_turn=4)
        d = p.decide(state := new_state(), ctx)
        assert [c.call_id for c in d.calls] == ["c0", "c1", "c2", "c3"]
        p.decide(advance(state, d), ctx)
    replies = {m["tool_call_id"]: json.loads(m["content"]) for m in server.requests[1]["messages"] if m["role"] == "tool"}
    assert all(replies[f"c{i}"]["ok"] for i in range(4))
    assert not replies["c4"]["ok"] and "at most 4 tool calls per turn" in replies["c5"]["error"]
    assert any("6 tool calls in one turn" in n for n in notes(trace))


def test_an_identical_call_is_refused_after_a_few_repeats(ctx: PolicyContext, trace: TraceWriter):
    a, b = ("read_file", {"path": "x.py"}), ("search_source", {"query": "exclude"})
    script = [{"tool_calls": [a]}, {"tool_calls": [b]}] * 3
    with ScriptedLLM(script) as server:
        p, state = policy(server, max_repeats=2), new_state()
        ran = []
        for _ in range(5):
            d = p.decide(state, ctx)
            ran.append([c.tool for c in d.calls])
            state = advance(state, d)
        p.decide(state, ctx)
    assert ran == [["read_file"], ["search_source"], ["read_file"], ["search_source"], []]
    last = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "refused" in json.loads(last["content"])["error"]
    assert sum("refused a repeated call" in n for n in notes(trace)) == 2  # the 5th and the 6th turn


def test_an_oversized_reply_is_capped_in_the_history(ctx: PolicyContext):
    with ScriptedLLM([{"content": "x" * 50_000, "tool_calls": [("read_log", {}, "c1")]},
                      {"tool_calls": [("read_log", {"lines": 3})]}]) as server:  # fmt: skip
        p = policy(server, max_reply_chars=1000)
        d = p.decide(state := new_state(), ctx)
        p.decide(advance(state, d), ctx)
    sent = [m for m in server.requests[1]["messages"] if m["role"] == "assistant"][0]["content"]
    assert len(sent) < 1100 and sent.endswith("chars cut]")


def test_a_long_retry_after_is_waited_and_counted_in_the_wall_budget(ctx: PolicyContext):
    slept: list[float] = []
    with ScriptedLLM([{"status": 429, "retry_after": 300}, {"tool_calls": [("read_log", {})]}]) as server:
        p = policy(server, max_retries=0, sleep=slept.append)
        d = p.decide(state := new_state(), ctx)
    assert slept == [300.0] and [c.tool for c in d.calls] == ["read_log"]
    assert d.memo["llm"]["wall_s"] >= 300 and d.memo["llm"]["errors"] == 0
    assert d.wall_seconds >= 300  # the decision's wait, which the graph adds to the run's wall budget
    # the wait counts: with the tools' time the run's wall budget is now spent
    limit = ctx.task.budgets.wall_minutes * 60
    tools_time = state.model_copy(update={"budget": state.budget.model_copy(update={"wall_seconds": limit - 200})})
    later = advance(tools_time, d)  # as the graph does: the budget gains the decision's wait
    assert later.budget.wall_seconds >= limit + 100
    with ScriptedLLM([{"tool_calls": [("read_log", {})]}]) as server:
        end = policy(server, sleep=slept.append).decide(later, ctx)
    assert end.done and "wall-time budget spent" in end.rationale and server.requests == []


def test_a_retry_after_beyond_the_budget_ends_the_run_at_once(ctx: PolicyContext):
    slept: list[float] = []
    wait = ctx.task.budgets.wall_minutes * 60 + 60
    with ScriptedLLM([{"status": 429, "retry_after": wait}]) as server:
        d = policy(server, max_retries=0, sleep=slept.append).decide(new_state(), ctx)
    assert slept == [] and d.done and "more than the" in d.rationale


def test_retry_after_headers():
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_seconds({"retry-after": "120"}) == 120
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert retry_after_seconds({}) is None and retry_after_seconds(None) is None


def test_a_hung_endpoint_times_out(ctx: PolicyContext):
    with ScriptedLLM([{"delay_s": 4, "tool_calls": [("read_log", {})]}]) as server:
        d = policy(server, max_retries=0, timeout_s=1).decide(new_state(), ctx)
    assert not d.calls and not d.done and "Timeout" in d.rationale


def test_extra_body_reaches_the_server(ctx: PolicyContext):
    with ScriptedLLM([{"tool_calls": [("read_log", {})]}]) as server:
        policy(server, extra_body={"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}).decide(new_state(), ctx)
    assert server.requests[0]["top_k"] == 20 and server.requests[0]["chat_template_kwargs"] == {"enable_thinking": False}


def test_prompt_templates_beside_the_task_override_the_package(ctx: PolicyContext, tmp_path: Path):
    task_path = tmp_path / "task.yaml"
    task_path.write_text(TASK.read_text())
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "kickoff.md.j2").write_text("Go for {{ targets | join(' and ') }}.")
    (tmp_path / "prompts" / "system.md.j2").write_text("Task {{ task.name }}; {{ search | length }} objectives.")
    with ScriptedLLM([{"tool_calls": [("read_log", {})]}]) as server:
        policy(server).decide(new_state(task_path), ctx)
    messages = server.requests[0]["messages"]
    assert messages[0]["content"] == "Task glm52_mi355x; 2 objectives."
    assert messages[1]["content"] == "Go for throughput and single_stream and accuracy."


def test_the_search_layers_view_in_the_system_prompt(ctx: PolicyContext):
    best = {"tp-size": 8}
    oom = {"tp-size": 8, "mem-fraction-static": 0.93}
    state = new_state().model_copy(update={
        "trials": [Trial(id=1, flags=best, status="up", metrics={"throughput": 2000.0}),
                   Trial(id=2, flags={"tp-size": 8, "kv-cache-dtype": "fp8_e4m3"}, status="up",
                         metrics={"throughput": 1900.0}),
                   Trial(id=3, flags=oom, status="crashed")],
        "bests": {"throughput": Best(target="throughput", value=2000.0, trial=1, flags=best)}})  # fmt: skip
    memo = {"shares": {json.dumps([best, {}], sort_keys=True): {"decode": 0.45, "prefill_moe": 0.35, "overhead": 0.2}},
            "crash_categories": {json.dumps([oom, {}], sort_keys=True): "out_of_memory"}}  # fmt: skip
    view = {o["target"]: o for o in search_view(state, ctx.task, memo["shares"], memo["crash_categories"])}
    assert set(view) == {"throughput", "single_stream"}
    tp = view["throughput"]
    assert [m["value"] for m in tp["measured"]] == [2000.0, 1900.0]
    assert tp["crashes"] == [{"config": "tp-size=8 mem-fraction-static=0.93", "category": "out_of_memory"}]
    first = tp["suggestions"][0]
    assert "fp8_e4m3" not in first["config"]  # measured already
    assert first["why"].startswith("neighbour of the best on ") and "decode share, 45 % of GPU time" in first["why"]
    text = system_message(state, ctx, memo)
    assert "decode share, 45 % of GPU time" in text and "(out_of_memory)" in text
    assert "TPE's proposal" in text  # single_stream has no best yet


def test_an_id_reused_in_a_later_turn_gets_its_own(ctx: PolicyContext):
    """The trace keys results by call id: a model that reuses an earlier turn's id must not be answered with that
    turn's recorded result (after a resume), so the policy gives the new call its own id, on the wire too."""
    with ScriptedLLM([{"tool_calls": [("read_log", {}, "dup")]}, {"tool_calls": [("read_file", {"path": "a"}, "dup")]},
                      {"tool_calls": [("read_log", {})]}]) as server:  # fmt: skip
        p = policy(server)
        d1 = p.decide(state := new_state(), ctx)
        d2 = p.decide(state := advance(state, d1), ctx)
        p.decide(advance(state, d2), ctx)
    assert d1.calls[0].call_id == "dup" and d2.calls[0].call_id != "dup"
    sent = [tc["id"] for m in server.requests[2]["messages"] if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
    replied = [m["tool_call_id"] for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert sent == ["dup", d2.calls[0].call_id] and replied == sent  # each call answered under its own id


def test_a_model_that_ignores_results_sent_as_user_messages_is_named_for_what_it_is(ctx: PolicyContext):
    """With results sent as user messages (which every chat format renders) a repeated call is the model's, not
    the server's: the line says so instead of suggesting the switch already made (Gemma 3 270M did this)."""
    with ScriptedLLM([{"tool_calls": [("read_log", {})]}] * 5) as server:
        p, state = policy(server, tool_results_as="user"), new_state()
        for _ in range(5):
            d = p.decide(state, ctx)
            state = advance(state, d)
            if d.done:
                break
    assert d.done and "does not act on tool results" in d.rationale and "--llm-tool-results" not in d.rationale
