"""A policy that asks an LLM, through OpenAI-compatible native function calling, what to do next.

The conversation lives in ``state.memo["llm"]`` as plain JSON dicts, so a checkpointed run resumes it exactly.
Each ``decide``:

1. builds the system message afresh from the task and the state (targets, bests, budget, recent trials);
2. answers the previous turn's tool calls with ``role: "tool"`` messages built from ``state.observations``
   (matched by ``call_id``; compact, truncated, secrets redacted);
3. trims the history (the system message plus the last ``max_history`` messages, never separating an
   assistant message from the tool replies to its calls), sends it with the tools plus ``finish(reason)``,
   records ``llm_request`` / ``llm_response`` in the trace, and turns the reply into a ``Decision``.

Transient API failures (429, 5xx, timeouts) are retried by the ``openai`` SDK with backoff, honouring
``retry-after`` headers. A request that still fails yields a Decision with no calls; three consecutive
failures end the run. A model that answers twice in a row without calling a tool has stopped acting: done.

Malformed tool calls never raise: arguments that are not a JSON object travel as
``Call.args == {"__raw_arguments__": "<text>"}``; :func:`call_arguments` gives back what to hand to
``ToolRunner.call``, whose error record then returns to the model as that call's result.
"""

from __future__ import annotations

import copy
import json
import os
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agent.state import AgentState, Call, Observation
from agent.trace import redact

from .base import Decision, PolicyContext

RAW_ARGUMENTS = "__raw_arguments__"
FINISH = "finish"
FINISH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": FINISH,
        "description": "End the run: the targets are met, or nothing more can be done. Say why.",
        "parameters": {
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "why the run ends, in one sentence"}},
            "required": ["reason"],
        },
    },
}
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
TOOL_RESULT_CHARS = 4000
RATIONALE_CHARS = 2000
TRIALS_SHOWN = 12
MAX_ERRORS = 3
MAX_IDLE = 2
KICKOFF = ("Begin. Bring the model up on this hardware, fix what breaks, tune to the targets and keep accuracy "
           "within the gate. Act only through the tools.")  # fmt: skip
NUDGE = ("You replied without calling a tool. Act through the tools, or call finish(reason) if the targets are "
         "met or nothing more can be done.")  # fmt: skip
NOT_RUN = "no result: this call was not executed (the run moved on without it)"


def call_arguments(call: Call) -> dict[str, Any] | str:
    """What to pass to ``ToolRunner.call`` as ``arguments`` for ``call``.

    For a well-formed call, its ``args`` dict. For a malformed one (arguments that were not a JSON object) the
    raw text the model sent, which ``ToolRunner.call`` turns into an error record (bad JSON, or invalid
    arguments) that goes back to the model as the result of that call::

        runner.call(call.tool, call_arguments(call), call_id=call.call_id)
    """
    raw = call.args.get(RAW_ARGUMENTS)
    if isinstance(raw, str) and len(call.args) == 1:
        return raw
    return call.args


def parse_arguments(text: str | None) -> dict[str, Any]:
    """A tool call's ``arguments`` string as ``Call.args``: the decoded object, or ``{"__raw_arguments__": text}``
    when it is not a JSON object (never raises)."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {RAW_ARGUMENTS: text}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: text}


def trim_history(messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The last ``keep`` (about) messages, starting at a message that is not a tool reply, so an assistant
    message is never separated from the replies to its tool calls. The last assistant turn with tool calls
    and its replies are always kept, even when they alone exceed ``keep``."""
    if len(messages) <= keep:
        return list(messages)
    cut = max(0, len(messages) - keep)
    last_call_turn = max((i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("tool_calls")),
                         default=None)  # fmt: skip
    if last_call_turn is not None:
        cut = min(cut, last_call_turn)
    while cut < len(messages) and messages[cut].get("role") == "tool":
        cut += 1
    return messages[cut:]


# ------------------------------------------------------------------------------------- compact rendering


def _shrink(value: Any, limit: int) -> Any:
    """``value`` with long strings cut in the middle and long lists shortened."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        half = max(limit // 2, 1)
        return f"{value[:half]} ...[{len(value) - 2 * half} chars cut]... {value[-half:]}"
    if isinstance(value, dict):
        return {k: _shrink(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        items = max(limit // 100, 3)
        if len(value) > items:
            return [_shrink(v, limit) for v in value[:items]] + [f"... {len(value) - items} more"]
        return [_shrink(v, limit) for v in value]
    return value


def _compact_json(value: Any, max_chars: int) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    for limit in (1500, 600, 200, 60):
        if len(text) <= max_chars:
            return text
        text = json.dumps(_shrink(value, limit), ensure_ascii=False, separators=(",", ":"), default=str)
    if len(text) > max_chars:
        text = text[: max_chars - 20] + " ...[truncated]"
    return text


def observation_content(obs: Observation, secrets: list[str], max_chars: int = TOOL_RESULT_CHARS) -> str:
    """The ``role: "tool"`` message content for one observation: compact JSON of ok, error, summary and the
    result's own fields (cost left out), secrets redacted, at most ``max_chars`` characters."""
    result = dict(obs.result or {})
    body: dict[str, Any] = {"ok": obs.ok}
    if obs.error:
        body["error"] = obs.error
    if result.get("summary"):
        body["summary"] = result["summary"]
    for key, value in result.items():
        if key not in ("ok", "summary", "cost") and value not in (None, "", [], {}):
            body[key] = value
    return _compact_json(redact(body, secrets), max_chars)


def _fmt_flags(flags: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in flags.items()) or "(defaults)"


def system_message(state: AgentState, ctx: PolicyContext) -> str:
    """The system prompt: the task, what has been achieved and spent, recent trials, and how to act."""
    task = ctx.task
    b, used = task.budgets, state.budget
    lines = [
        "You are dayzero, an agent that brings a new model up on new accelerators at state-of-the-art speed.",
        "",
        f"# Task: {task.name}",
    ]
    if task.description:
        lines.append(task.description)
    lines += [
        f"Model: {task.model.name} ({task.model.architecture}, {task.model.quantization} weights)",
        f"Hardware: {task.hardware.gpus}x {task.hardware.accelerator}"
        + (f" ({task.hardware.gpu_memory_gb:g} GB each)" if task.hardware.gpu_memory_gb else ""),
        "",
        "## Workloads (benchmark them by name)",
    ]
    for name, w in task.workloads.items():
        extra = {k: v for k, v in (("request_rate", w.request_rate), ("max_concurrency", w.max_concurrency),
                                   ("duration_s", w.duration_s), ("ttft_limit_ms", w.ttft_limit_ms)) if v is not None}  # fmt: skip
        params = ", ".join(f"{k}={v}" for k, v in {**w.params, **extra}.items())
        lines.append(f"- {name}: {w.description} [dataset={w.dataset}; {params}]")
    lines += ["", "## Targets (each must reach its min)"]
    for t in task.targets:
        lines.append(f"- {t.name}: {t.metric}" + (f" on workload {t.workload}" if t.workload else "") + f" >= {t.min:g}")
    if task.accuracy:
        a = task.accuracy
        lines.append(f"Accuracy gate: suite {a.suite}, baseline {a.baseline}, max drop {a.max_drop:g}. A result counts "
                     "only once the accuracy check passes on that same configuration (candidates wait for it).")  # fmt: skip
    if task.search_space.flags or task.search_space.env:
        lines += ["", "## Search space (server flags; null = leave the flag out)"]
        for name, values in task.search_space.flags.items():
            lines.append(f"- --{name}: {json.dumps(values)}")
        for name, values in task.search_space.env.items():
            lines.append(f"- env {name}: {json.dumps(values)}")
    lines += [
        "",
        "## Budget used",
        f"trials {used.trials}/{b.trials}, wall {used.wall_seconds / 60:.1f}/{b.wall_minutes:g} min, "
        f"node-hours {used.node_hours:.2f}/{b.node_hours:g}, LLM tokens {used.llm_tokens}/{b.llm_tokens}, "
        f"tool calls {used.tool_calls}",
        "",
        "## Achieved",
    ]
    if state.bests:
        for name, best in state.bests.items():
            mark = "verified" if best.verified else "unverified"
            lines.append(f"- best {name}: {best.value:g} (trial {best.trial}, {mark}) flags: {_fmt_flags(best.flags)}"
                         + (f" env: {_fmt_flags(best.env)}" if best.env else ""))  # fmt: skip
    if state.candidates:
        for name, cand in state.candidates.items():
            lines.append(f"- candidate {name}: {cand.value:g} (trial {cand.trial}, awaiting the accuracy check)")
    if not state.bests and not state.candidates:
        lines.append("- nothing yet")
    lines.append(f"Server: up with {_fmt_flags(state.server_flags)}" if state.server_flags is not None
                 else "Server: none running")  # fmt: skip
    if state.patches:
        lines += ["", "## Patches"]
        for p in state.patches[-8:]:
            lines.append(f"- #{p.id} [{p.status}] {', '.join(p.files)}: {p.reason[:200]}")
    lines += ["", f"## Trials (last {min(TRIALS_SHOWN, len(state.trials))} of {len(state.trials)})"]
    if not state.trials:
        lines.append("- none yet")
    for t in state.trials[-TRIALS_SHOWN:]:
        parts = [f"- #{t.id} {t.status}: {_fmt_flags(t.flags)}"]
        if t.env:
            parts.append(f"env {_fmt_flags(t.env)}")
        if t.diagnosis:
            parts.append(f"diagnosis: {t.diagnosis[:300]}")
        if t.metrics:
            parts.append("metrics: " + ", ".join(f"{k}={v:.1f}" for k, v in t.metrics.items()))
        if t.accuracy is not None:
            parts.append(f"accuracy {t.accuracy:.3f} ({'ok' if t.accuracy_ok else 'FAILED gate'})")
        lines.append("; ".join(parts))
    lines += [
        "",
        "## How to work",
        "- You act only through the tools; every call's result comes back to you. Call several independent "
        "tools in one turn when that helps.",
        "- Launch the server with flags from the search space. If it crashes, find out why with diagnose_crash "
        "and read_log; locate the cause with search_source / read_file; fix it with edit_file or apply_patch; "
        "relaunch to confirm the fix.",
        "- Benchmark each target's workload (find_knee for throughput at the knee, run_benchmark otherwise) and "
        "tune (e.g. tune_moe for MoE kernel selection) to beat the targets.",
        "- Accuracy gate: a faster configuration counts only if run_eval shows accuracy within the allowed drop.",
        "- Stay within the budgets. Do not repeat a configuration that already failed without changing something.",
        "- Call finish(reason) when every target is met and verified, or when nothing more can be done.",
    ]
    return "\n".join(lines)


def _calls_summary(calls: list[Call]) -> str:
    out = []
    for c in calls:
        if RAW_ARGUMENTS in c.args:
            out.append(f"{c.tool}(<malformed arguments>)")
        else:
            out.append(f"{c.tool}(" + ", ".join(f"{k}={json.dumps(v, default=str)[:60]}" for k, v in c.args.items()) + ")")
    return "; ".join(out)


def _public_url(url: str) -> str:
    """``url`` without user:password@."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return url


# ---------------------------------------------------------------------------------------------- policy


class LLMPolicy:
    """Ask an OpenAI-compatible chat model (native function calling) for the next tool calls."""

    name = "llm"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_retries: int = 4,
        timeout_s: float = 120,
        temperature: float = 0.0,
        max_history: int = 30,
    ) -> None:
        import openai  # imported here: the other policies do not need the SDK

        self.model = model
        self.temperature = temperature
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.max_history = max_history
        key = api_key or os.environ.get(api_key_env)
        if not key:
            effective = base_url or os.environ.get("OPENAI_BASE_URL") or ""
            host = (urlsplit(effective).hostname or "").lower() if effective else ""
            if host not in LOCAL_HOSTS:
                where = base_url or "the OpenAI API"
                raise ValueError(f"LLMPolicy: no API key for {where}: set the environment variable {api_key_env} "
                                 "(or pass api_key)")  # fmt: skip
            key = "not-needed"
        self._api_key = key
        self.client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=max_retries, timeout=timeout_s)
        self.base_url = _public_url(str(self.client.base_url))

    # -- the conversation

    def _secrets(self, ctx: PolicyContext) -> list[str]:
        secrets = list(ctx.task.secrets())
        if self._api_key != "not-needed":
            secrets.append(self._api_key)
        return secrets

    def _answer_pending(self, memo: dict[str, Any], state: AgentState, ctx: PolicyContext) -> None:
        """Append one ``role: "tool"`` reply for every tool call of the previous assistant turn."""
        pending: list[str] = memo.get("pending", [])
        if not pending:
            return
        by_id = {o.call_id: o for o in state.observations}
        synthetic: dict[str, str] = memo.get("synthetic", {})
        secrets = self._secrets(ctx)
        for call_id in pending:
            if call_id in synthetic:
                content = synthetic[call_id]
            elif call_id in by_id:
                content = observation_content(by_id[call_id], secrets)
            else:
                content = json.dumps({"ok": False, "error": NOT_RUN})
            memo["messages"].append({"role": "tool", "tool_call_id": call_id, "content": content})
        memo["pending"], memo["synthetic"] = [], {}

    def _request_messages(self, memo: dict[str, Any], state: AgentState, ctx: PolicyContext) -> list[dict[str, Any]]:
        history = memo["messages"]
        if not history or history[0].get("role") != "user":
            history = [{"role": "user", "content": KICKOFF}, *history]
        return [{"role": "system", "content": system_message(state, ctx)}, *history]

    # -- one decision

    def decide(self, state: AgentState, ctx: PolicyContext) -> Decision:
        memo: dict[str, Any] = copy.deepcopy(state.memo.get("llm") or {})
        memo.setdefault("messages", [])
        memo.setdefault("pending", [])
        memo.setdefault("synthetic", {})
        for counter in ("errors", "idle", "requests", "tokens"):
            memo.setdefault(counter, 0)
        step = state.step + 1

        def decision(calls: list[Call], rationale: str, done: bool = False, tokens: int = 0) -> Decision:
            return Decision(calls=calls, rationale=rationale[:RATIONALE_CHARS], stage="llm",
                            memo={**state.memo, "llm": memo}, done=done, llm_tokens=tokens)  # fmt: skip

        self._answer_pending(memo, state, ctx)
        memo["messages"] = trim_history(memo["messages"], memo.get("keep", self.max_history))
        messages = self._request_messages(memo, state, ctx)
        tools = [*ctx.tool_schemas, FINISH_SCHEMA]
        params = {"temperature": self.temperature, "tool_choice": "auto", "max_retries": self.max_retries,
                  "timeout_s": self.timeout_s}  # fmt: skip
        memo["requests"] += 1
        llm_call_id = f"llm-{step}-{memo['requests']}"
        if ctx.trace is not None:
            if hasattr(ctx.trace, "add_secret") and self._api_key != "not-needed":
                ctx.trace.add_secret(self._api_key)
            ctx.trace.emit("llm_request", step=step, call_id=llm_call_id, model=self.model, base_url=self.base_url,
                           messages=messages, tools=[t["function"]["name"] for t in tools], params=params)  # fmt: skip

        t0 = time.monotonic()
        try:
            completion = self.client.chat.completions.create(
                model=self.model, messages=messages, tools=tools, tool_choice="auto", temperature=self.temperature
            )
            if not completion.choices:
                raise ValueError("the response has no choices")
            message = completion.choices[0].message
        except Exception as exc:  # noqa: BLE001 - after the SDK's retries: reported to the run, never raised
            wall = time.monotonic() - t0
            error = f"{type(exc).__name__}: {exc}"
            memo["errors"] += 1
            memo["last_error"] = error[:500]
            if getattr(exc, "status_code", None) == 400:  # perhaps the context is too long: send less next time
                memo["keep"] = max(6, memo.get("keep", self.max_history) // 2)
            if ctx.trace is not None:
                ctx.trace.emit("llm_response", step=step, call_id=llm_call_id, message={}, wall_seconds=wall,
                               error=error)  # fmt: skip
            done = memo["errors"] >= MAX_ERRORS
            why = f"LLM request failed ({memo['errors']} in a row): {error}"
            return decision([], why + ("; giving up" if done else ""), done=done)
        wall = time.monotonic() - t0
        memo["errors"] = 0
        memo.pop("last_error", None)

        usage = completion.usage
        prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
        completion_tokens = getattr(usage, "completion_tokens", 0) or 0
        total = getattr(usage, "total_tokens", 0) or (prompt_tokens + completion_tokens)
        memo["tokens"] += total

        content = message.content if isinstance(message.content, str) else None
        calls: list[Call] = []
        wire_calls: list[dict[str, Any]] = []
        finish: tuple[str, dict[str, Any]] | None = None
        seen: set[str] = set()
        for i, tc in enumerate(message.tool_calls or []):
            fn, custom = getattr(tc, "function", None), getattr(tc, "custom", None)
            if fn is not None:
                name, raw = fn.name, fn.arguments
            elif custom is not None:
                name, raw = custom.name, custom.input
            else:
                name, raw = "", ""
            name = name or ""
            raw = raw if isinstance(raw, str) else ("" if raw is None else json.dumps(raw))
            call_id = getattr(tc, "id", None) or f"call_{step}_{i}"
            while call_id in seen:  # a duplicate id would make the replies ambiguous
                call_id = f"{call_id}_{i}"
            seen.add(call_id)
            wire_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}})
            args = parse_arguments(raw)
            if name == FINISH:
                finish = (call_id, args)
            else:
                calls.append(Call(tool=name, args=args, call_id=call_id))

        assistant: dict[str, Any] = {"role": "assistant", "content": content}
        if wire_calls:
            assistant["tool_calls"] = wire_calls
        # the checkpointed conversation holds no secret even if the model repeats one
        memo["messages"].append(redact(assistant, self._secrets(ctx)))
        if ctx.trace is not None:
            ctx.trace.emit("llm_response", step=step, call_id=llm_call_id, message=assistant, wall_seconds=wall,
                           usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                  "total_tokens": total})  # fmt: skip

        if finish is not None and not calls:
            finish_args = finish[1]
            reason = finish_args.get("reason") or finish_args.get(RAW_ARGUMENTS) or content or "the model finished"
            memo["pending"] = [finish[0]]
            memo["synthetic"] = {finish[0]: json.dumps({"ok": True, "summary": "run finished"})}
            memo["idle"] = 0
            return decision([], f"finish: {reason}", done=True, tokens=total)
        if finish is not None:  # finish alongside other calls: run those first, let the model decide again
            memo["synthetic"] = {finish[0]: json.dumps({
                "ok": False, "error": "finish was not done: other tool calls were made in the same turn; look at "
                "their results, then call finish alone if the run should end"})}  # fmt: skip
        else:
            memo["synthetic"] = {}
        memo["pending"] = [w["id"] for w in wire_calls]
        if not calls:
            memo["idle"] += 1
            memo["messages"].append({"role": "user", "content": NUDGE})
            done = memo["idle"] >= MAX_IDLE
            text = (content or "").strip() or "(the model answered without text or tool calls)"
            return decision([], text + ("; the model stopped acting" if done else ""), done=done, tokens=total)
        memo["idle"] = 0
        rationale = (content or "").strip() or _calls_summary(calls)
        return decision(calls, rationale, tokens=total)


__all__ = [
    "FINISH_SCHEMA",
    "RAW_ARGUMENTS",
    "LLMPolicy",
    "call_arguments",
    "observation_content",
    "parse_arguments",
    "system_message",
    "trim_history",
]
