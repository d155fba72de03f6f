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
import email.utils
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import jinja2

from agent.interactivity import bound_text, per_user_text
from agent.search import (
    KNOBS_FOR,
    LAYOUT,
    SPECULATIVE,
    Candidate,
    SearchSpace,
    in_crash_region,
    measured_on,
    next_candidate,
)
from agent.secrets import configured_secrets, redact
from agent.state import AgentState, Call, Observation
from tasks.spec import TaskSpec

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
MAX_CALLS_PER_TURN = 8  # calls beyond it are answered with an error, not run
MAX_REPEATS = 3  # an identical call (same tool, arguments, server and trial) runs at most this many times
ECHO_LIMIT = 2  # the same calls again right after their results, this many times: the model does not see results
MAX_REPLY_CHARS = 8000  # of a reply's text (and of one call's arguments) taken into the history
MAX_WAITS = 20  # rate-limit waits within one decision
PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
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
    """``value`` with long strings cut in the middle and long lists shortened; a large mapping (a server's ~400
    arguments) loses its unset entries (None, False, empty) first, then is cut to its first keys."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        half = max(limit // 2, 1)
        return f"{value[:half]} ...[{len(value) - 2 * half} chars cut]... {value[-half:]}"
    if isinstance(value, dict):
        keys = max(limit // 25, 10)
        if len(value) > keys:
            set_ = {k: v for k, v in value.items() if v not in (None, False, "", [], {})}
            left = len(value) - len(set_)
            if len(set_) > keys:
                left += len(set_) - keys
                set_ = dict(list(set_.items())[:keys])
            return {**{k: _shrink(v, limit) for k, v in set_.items()}, "...": f"{left} more (unset or cut)"}
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
    if len(text) > max_chars and isinstance(value, dict):  # still too long: its largest fields give way
        value = _shrink(value, 60)
        for key in sorted(value, key=lambda k: -len(json.dumps(value[k], default=str))):
            if len(text) <= max_chars:
                break
            value = {**value, key: f"[{len(json.dumps(value[key], default=str))} chars left out]"}
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
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


def _fmt_config(flags: dict[str, Any], env: dict[str, str] | None = None) -> str:
    return _fmt_flags(flags) + (f" env: {_fmt_flags(env)}" if env else "")


# ------------------------------------------------------------------------------------------ prompts


def prompt_dirs(task_path: str | Path | None, task_name: str, extra: str | Path | None = None) -> list[Path]:
    """Where the prompt templates are looked up, first match wins: ``extra`` (the policy's ``prompt_dir``), then
    beside the task (``<task dir>/prompts/<task name>/``, ``<task dir>/prompts/``), then the package default."""
    dirs = [Path(extra)] if extra else []
    if task_path:
        here = Path(task_path).resolve().parent / "prompts"
        dirs += [here / task_name, here]
    return [*[d for d in dirs if d.is_dir()], PROMPTS]


def render_prompt(name: str, dirs: list[Path] | None = None, **variables: Any) -> str:
    """Render the template ``<name>.md.j2`` (``system``, ``kickoff``, ``nudge``) from ``dirs`` (default: the
    package's ``agent/prompts``); an undefined variable raises, so a template and its caller cannot drift."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(d) for d in (dirs or [PROMPTS])]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             autoescape=False)  # fmt: skip
    return env.get_template(f"{name}.md.j2").render(**variables).strip()


# -------------------------------------------------------------------------------------- search view


def time_shares(obs: Observation) -> dict[str, float] | None:
    """Where the GPU time went in a benchmark's result (the knee's run for find_knee), None when not reported."""
    runs = [r for r in (obs.result or {}).get("runs") or [] if isinstance(r, dict) and r.get("gpu_time_share")]
    if not runs:
        return None
    knee = [r for r in runs if r.get("request_rate") == obs.result.get("knee_rate")]
    return (knee or runs)[-1]["gpu_time_share"]


def _config_key(flags: dict[str, Any] | None, env: dict[str, str] | None = None) -> str:
    return json.dumps([flags or {}, env or {}], sort_keys=True, default=str)


def _change(cand: Candidate, base: Candidate | None) -> list[str]:
    base = base or Candidate()
    what = [f"{k}={v}" for k, v in cand.flags.items() if base.flags.get(k) != v]
    what += [f"no {k}" for k in base.flags if k not in cand.flags]
    what += [f"env {k}={cand.env.get(k) or '(unset)'}" for k in sorted({*cand.env, *base.env})
             if cand.env.get(k) != base.env.get(k)]  # fmt: skip
    return what


def _why_neighbour(cand: Candidate, best: Candidate, shares: dict[str, float] | None) -> str:
    knobs = [k for k in {*cand.flags, *best.flags} if cand.flags.get(k) != best.flags.get(k)]
    knobs += [f"env {k}" for k in {*cand.env, *best.env} if cand.env.get(k) != best.env.get(k)]
    layout = sorted(k for k in knobs if k in LAYOUT)
    knob = next((k for k in knobs if k == SPECULATIVE), None) or (
        f"the layout ({', '.join(layout)})" if layout else sorted(knobs)[0] if knobs else "?")
    why = f"neighbour of the best on {knob}"
    for part, share in sorted((shares or {}).items(), key=lambda kv: -kv[1]):
        acting = KNOBS_FOR.get(part, ())
        if knob in acting or any(k in acting for k in layout):
            return f"{why}; it acts on the {part} share, {share * 100:.0f} % of GPU time"
    return why


def search_view(state: AgentState, task: TaskSpec, shares: dict[str, dict[str, float]] | None = None,
                crash_categories: dict[str, str] | None = None, per_objective: int = 3,
                measured_shown: int = 8) -> list[dict[str, Any]]:  # fmt: skip
    """The search layer's view of the run (``agent/search.py``), per objective (each target measured on a
    workload): the best, the configurations measured with their figures, the crash regions, and the next
    candidates with why (the best's one-knob neighbours on its bottleneck's knobs first, else TPE's proposal).
    ``shares`` maps a configuration (:func:`_config_key`) to where its GPU time went; ``crash_categories`` a
    crashed configuration to its diagnosis category. Built only from the state: nothing is measured here."""
    space = SearchSpace(task)
    out = []
    for target in task.targets:
        if not target.workload or target.metric == "accuracy_delta":
            continue
        history = measured_on(state.trials, target.name)
        for m in history:
            if m.crashed:
                m.crash_category = (crash_categories or {}).get(_config_key(m.candidate.flags, m.candidate.env))
        history = [m.model_copy(update={"candidate": space.canonical(m.candidate) or m.candidate}) for m in history]
        best_rec = state.bests.get(target.name) or state.candidates.get(target.name)
        best = None
        best_shares = None
        if best_rec is not None:
            raw = Candidate(flags=best_rec.flags, env=best_rec.env)
            best = space.canonical(raw) or raw
            best_shares = (shares or {}).get(_config_key(best_rec.flags, best_rec.env))
        seen = {m.candidate.key() for m in history}
        suggestions: list[dict[str, Any]] = []
        if best is not None:
            for cand in space.neighbours(best, best_shares):
                if cand.key() in seen or in_crash_region(cand, history):
                    continue
                suggestions.append({"config": _fmt_config(cand.flags, cand.env), "change": ", ".join(_change(cand, best)),
                                    "why": _why_neighbour(cand, best, best_shares)})  # fmt: skip
                if len(suggestions) >= per_objective:
                    break
        if not suggestions:
            cand = next_candidate(space, history, best, best_shares, seed=len(history))
            if cand is not None:
                why = ("TPE's proposal over the whole space: every neighbour of the best is measured or in a crash "
                       "region" if best is not None else "TPE's proposal over the whole space: nothing measured "
                       "on this objective yet")  # fmt: skip
                suggestions.append({"config": _fmt_config(cand.flags, cand.env),
                                    "change": ", ".join(_change(cand, best)) or "nothing", "why": why})  # fmt: skip
        measured = sorted((m for m in history if not m.crashed), key=lambda m: -m.value)[:measured_shown]
        crashes = list({m.candidate.key(): m for m in history if m.crashed}.values())[-measured_shown:]
        out.append({
            "target": target.name, "metric": target.metric,
            "best": {"value": best_rec.value, "config": _fmt_config(best_rec.flags, best_rec.env)} if best_rec else None,
            "shares": ", ".join(f"{k} {v * 100:.0f} %" for k, v in sorted(best_shares.items(), key=lambda kv: -kv[1]))
            if best_shares else "",
            "measured": [{"config": _fmt_config(m.candidate.flags, m.candidate.env), "value": m.value} for m in measured],
            "crashes": [{"config": _fmt_config(m.candidate.flags, m.candidate.env), "category": m.crash_category}
                        for m in crashes],
            "suggestions": suggestions,
        })  # fmt: skip
    return out


def _trial_line(t: Any) -> str:
    parts = [f"#{t.id} {t.status}: {_fmt_flags(t.flags)}"]
    if t.env:
        parts.append(f"env {_fmt_flags(t.env)}")
    if t.diagnosis:
        parts.append(f"diagnosis: {t.diagnosis[:300]}")
    if getattr(t, "serving_failure", None):
        parts.append(f"failed under the benchmark: {t.serving_failure[:300]}")
    if t.metrics:
        parts.append("metrics: " + ", ".join(f"{k}={v:.1f}" for k, v in t.metrics.items()))
    for name, i in t.interactivity.items():
        parts.append(f"{name} per user: {per_user_text(i, short=True)}")
    for name, why in t.bound_missed.items():
        parts.append(f"{name} does not count: {why[:200]}")
    if t.accuracy is not None:
        parts.append(f"accuracy {t.accuracy:.3f} ({'ok' if t.accuracy_ok else 'FAILED gate'})")
    return "; ".join(parts)


def prompt_variables(state: AgentState, ctx: PolicyContext, memo: dict[str, Any] | None = None,
                     max_calls: int = 8, max_repeats: int = 3) -> dict[str, Any]:  # fmt: skip
    """Everything the system template may use, from the task, the state and the policy's memo."""
    task, memo = ctx.task, memo or {}
    workloads = []
    for name, w in task.workloads.items():
        extra = {k: v for k, v in (("request_rate", w.request_rate), ("max_concurrency", w.max_concurrency),
                                   ("duration_s", w.duration_s), ("ttft_limit_ms", w.ttft_limit_ms)) if v is not None}  # fmt: skip
        workloads.append({"name": name, "description": w.description, "dataset": w.dataset,
                          "params": ", ".join(f"{k}={v}" for k, v in {**w.params, **extra}.items())})  # fmt: skip
    llm_wall = float(memo.get("wall_s", 0.0))
    tool_names = [s["function"]["name"] for s in ctx.tool_schemas if s.get("function")]
    return {
        "task": task, "bound_text": bound_text, "used": state.budget, "limits": task.budgets, "workloads": workloads, "targets": task.targets,
        "accuracy": task.accuracy,
        "wall_min": state.budget.wall_seconds / 60, "llm_wall_min": llm_wall / 60,
        "space_flags": [(k, json.dumps(v)) for k, v in task.search_space.flags.items()],
        "space_env": [(k, json.dumps(v)) for k, v in task.search_space.env.items()],
        "bests": [{"name": n, "value": b.value, "trial": b.trial, "verified": b.verified, "flags": _fmt_flags(b.flags),
                   "env": _fmt_flags(b.env) if b.env else ""} for n, b in state.bests.items()],
        "candidates": [{"name": n, "value": c.value, "trial": c.trial} for n, c in state.candidates.items()],
        "server": _fmt_flags(state.server_flags) if state.server_flags is not None else None,
        "patches": state.patches[-8:],
        "trials": [_trial_line(t) for t in state.trials[-TRIALS_SHOWN:]], "trials_total": len(state.trials),
        "search": search_view(state, task, memo.get("shares"), memo.get("crash_categories")),
        "expert_tools": [n for n in tool_names if n.startswith("propose_")],
        "max_calls": max_calls, "max_repeats": max_repeats,
    }  # fmt: skip


def system_message(state: AgentState, ctx: PolicyContext, memo: dict[str, Any] | None = None,
                   dirs: list[Path] | None = None, **limits: Any) -> str:  # fmt: skip
    """The system prompt (template ``system.md.j2``): the task, what has been achieved and spent, recent
    trials, the search layer's view, and how to act."""
    dirs = dirs or prompt_dirs(state.task_path, ctx.task.name)
    return render_prompt("system", dirs, **prompt_variables(state, ctx, memo, **limits))


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


def retry_after_seconds(headers: Any) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, else ``retry-after`` in seconds or as an HTTP date."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _call_key(name: str, args: dict[str, Any], *context: Any) -> str:
    return json.dumps([name, args, *context], sort_keys=True, default=str)


class LLMPolicy:
    """Ask an OpenAI-compatible chat model (native function calling) for the next tool calls.

    Options for servers and their habits (all keyword arguments, each with a default that suits the OpenAI API):

    - ``timeout_s``: one request's timeout (a hung endpoint fails after it, then the SDK's ``max_retries``);
    - ``extra_body``: fields merged into every request body (server-specific: ``{"top_k": 20}``,
      ``{"chat_template_kwargs": {...}}``, a grammar...);
    - ``tool_results_as``: ``"tool"`` sends results as ``role: "tool"`` messages; ``"user"`` as one user message
      per turn, for a chat format that drops tool messages from the prompt;
    - ``max_calls_per_turn``, ``max_repeats``, ``max_reply_chars``: bounds on what a model can make the run do;
    - ``prompt_dir``: templates that override the package's ``agent/prompts`` (see :func:`prompt_dirs`);
    - ``sleep``: how a rate-limit wait is spent (tests pass a recorder); the wait counts as LLM time.
    """

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
        extra_body: dict[str, Any] | None = None,
        tool_results_as: Literal["tool", "user"] = "tool",
        max_calls_per_turn: int = MAX_CALLS_PER_TURN,
        max_repeats: int = MAX_REPEATS,
        max_reply_chars: int = MAX_REPLY_CHARS,
        prompt_dir: str | Path | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import openai  # imported here: the other policies do not need the SDK

        self.model = model
        self.temperature = temperature
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.max_history = max_history
        self.extra_body = dict(extra_body or {})
        if tool_results_as not in ("tool", "user"):
            raise ValueError(f"LLMPolicy: tool_results_as must be 'tool' or 'user', not {tool_results_as!r}")
        self.tool_results_as = tool_results_as
        self.max_calls_per_turn = max(1, max_calls_per_turn)
        self.max_repeats = max(1, max_repeats)
        self.max_reply_chars = max(200, max_reply_chars)
        self.prompt_dir = prompt_dir
        self._sleep = sleep
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

    def secret_values(self) -> list[str]:
        """The API key it sends, which no file of the run may hold (none for a local endpoint without one)."""
        return [] if self._api_key == "not-needed" else [self._api_key]

    def _secrets(self, ctx: PolicyContext) -> list[str]:
        return configured_secrets(ctx.task, self.secret_values())

    def _learn(self, memo: dict[str, Any], state: AgentState) -> None:
        """What the search view needs from the last observations: where each configuration's GPU time went,
        and why a configuration crashed."""
        for obs in state.observations:
            result = obs.result or {}
            if obs.tool in ("find_knee", "run_benchmark") and state.server_flags is not None:
                shares = time_shares(obs)
                if shares:
                    memo.setdefault("shares", {})[_config_key(state.server_flags, state.server_env)] = shares
            if obs.tool == "launch_server" and result.get("status") in ("crashed", "timeout"):
                category = (result.get("diagnosis") or {}).get("category")
                flags = obs.args.get("flags") if isinstance(obs.args.get("flags"), dict) else {}
                env = obs.args.get("env") if isinstance(obs.args.get("env"), dict) else {}
                if category:
                    memo.setdefault("crash_categories", {})[_config_key(flags, env)] = category

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

    def _dirs(self, state: AgentState, ctx: PolicyContext) -> list[Path]:
        return prompt_dirs(state.task_path, ctx.task.name, self.prompt_dir)

    def _request_messages(self, memo: dict[str, Any], state: AgentState, ctx: PolicyContext) -> list[dict[str, Any]]:
        dirs = self._dirs(state, ctx)
        history = memo["messages"]
        if not history or history[0].get("role") != "user":
            kickoff = render_prompt("kickoff", dirs, task=ctx.task, targets=[t.name for t in ctx.task.targets])
            history = [{"role": "user", "content": kickoff}, *history]
        system = system_message(state, ctx, memo, dirs, max_calls=self.max_calls_per_turn,
                                max_repeats=self.max_repeats)  # fmt: skip
        return [{"role": "system", "content": system}, *wire_messages(history, self.tool_results_as)]

    def _remaining_wall(self, state: AgentState, ctx: PolicyContext, memo: dict[str, Any], waited: float) -> float:
        """Seconds left of the run's wall budget: the state's budget holds the earlier decisions' waits on the
        LLM (``Decision.wall_seconds``), ``waited`` is this decision's so far."""
        return ctx.task.budgets.wall_minutes * 60 - state.budget.wall_seconds - waited

    def _note(self, ctx: PolicyContext, step: int, message: str, level: str = "warning") -> None:
        if ctx.trace is not None:
            ctx.trace.emit("note", step=step, level=level, message=message)

    # -- one decision

    def decide(self, state: AgentState, ctx: PolicyContext) -> Decision:
        memo: dict[str, Any] = copy.deepcopy(state.memo.get("llm") or {})
        memo.setdefault("messages", [])
        memo.setdefault("pending", [])
        memo.setdefault("synthetic", {})
        memo.setdefault("seen_calls", {})
        for counter in ("errors", "idle", "requests", "tokens", "echo", "waits"):
            memo.setdefault(counter, 0)
        memo.setdefault("wall_s", 0.0)
        step = state.step + 1

        waited_before = memo["wall_s"]  # memo["wall_s"]: every wait on the LLM, for the record

        requests_before = memo["requests"]

        def decision(calls: list[Call], rationale: str, done: bool = False, tokens: int = 0) -> Decision:
            return Decision(calls=calls, rationale=rationale[:RATIONALE_CHARS], stage="llm",
                            memo={**state.memo, "llm": memo}, done=done, llm_tokens=tokens,
                            llm_requests=memo["requests"] - requests_before,
                            wall_seconds=memo["wall_s"] - waited_before)  # fmt: skip

        self._learn(memo, state)
        self._answer_pending(memo, state, ctx)
        if self._remaining_wall(state, ctx, memo, 0.0) <= 0:
            return decision([], f"wall-time budget spent ({state.budget.wall_seconds / 60:.1f} of "
                                f"{ctx.task.budgets.wall_minutes:g} min, {memo['wall_s'] / 60:.1f} of them waiting "
                                "on the LLM)", done=True)  # fmt: skip
        memo["messages"] = trim_history(memo["messages"], memo.get("keep", self.max_history))
        messages = self._request_messages(memo, state, ctx)
        tools = [*ctx.tool_schemas, FINISH_SCHEMA]
        params = {"temperature": self.temperature, "tool_choice": "auto", "max_retries": self.max_retries,
                  "timeout_s": self.timeout_s, "tool_results_as": self.tool_results_as}  # fmt: skip
        if self.extra_body:
            params["extra_body"] = self.extra_body
        memo["requests"] += 1
        llm_call_id = f"llm-{step}-{memo['requests']}"
        if ctx.trace is not None:
            if hasattr(ctx.trace, "add_secret") and self._api_key != "not-needed":
                ctx.trace.add_secret(self._api_key)
            ctx.trace.emit("llm_request", step=step, call_id=llm_call_id, model=self.model, base_url=self.base_url,
                           messages=messages, tools=[t["function"]["name"] for t in tools], params=params)  # fmt: skip

        t0 = time.monotonic()
        waits = 0
        while True:
            t_req = time.monotonic()
            try:
                completion = self.client.chat.completions.create(
                    model=self.model, messages=messages, tools=tools, tool_choice="auto",
                    temperature=self.temperature, extra_body=self.extra_body or None,
                    timeout=max(1.0, min(self.timeout_s, self._remaining_wall(state, ctx, memo, memo['wall_s'] - waited_before))),
                )  # fmt: skip
                memo["wall_s"] += time.monotonic() - t_req
                if not completion.choices:
                    raise ValueError("the response has no choices")
                message = completion.choices[0].message
                break
            except Exception as exc:  # noqa: BLE001 - after the SDK's retries: reported to the run, never raised
                if not isinstance(exc, ValueError):
                    memo["wall_s"] += time.monotonic() - t_req
                status = getattr(exc, "status_code", None)
                wait = retry_after_seconds(getattr(getattr(exc, "response", None), "headers", None))
                remaining = self._remaining_wall(state, ctx, memo, memo['wall_s'] - waited_before)
                if status in (429, 503) and wait is not None and waits < MAX_WAITS:
                    if wait < remaining:  # the endpoint says when: wait for it, the wait counts as LLM time
                        waits += 1
                        memo["waits"] += 1
                        self._note(ctx, step, f"LLM endpoint answered {status}: waiting {wait:.0f} s as its "
                                              f"retry-after asks ({remaining / 60:.1f} min of wall budget left)",
                                   level="info")  # fmt: skip
                        self._sleep(wait)
                        memo["wall_s"] += wait
                        continue
                    why = (f"LLM endpoint rate-limited ({status}) and asks to wait {wait:.0f} s, more than the "
                           f"{max(remaining, 0):.0f} s left of the wall budget")  # fmt: skip
                    self._note(ctx, step, why, level="error")
                    if ctx.trace is not None:
                        ctx.trace.emit("llm_response", step=step, call_id=llm_call_id, message={},
                                       wall_seconds=time.monotonic() - t0, error=why)  # fmt: skip
                    memo["last_error"] = why
                    return decision([], why + "; giving up", done=True)
                wall = time.monotonic() - t0
                error = f"{type(exc).__name__}: {exc}"
                memo["errors"] += 1
                memo["last_error"] = error[:500]
                if status == 400:  # perhaps the context is too long: send less next time
                    memo["keep"] = max(6, memo.get("keep", self.max_history) // 2)
                if ctx.trace is not None:
                    ctx.trace.emit("llm_response", step=step, call_id=llm_call_id, message={}, wall_seconds=wall,
                                   error=error)  # fmt: skip
                # an endpoint that has never answered and refuses connections after the SDK's retries is not
                # there: asking again only makes the user wait
                import openai

                never_there = (isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)
                               and not memo.get("answered"))  # fmt: skip
                done = memo["errors"] >= MAX_ERRORS or never_there
                why = f"LLM request failed ({memo['errors']} in a row): {error}"
                return decision([], why + ("; giving up" if done else ""), done=done)
        wall = time.monotonic() - t0
        memo["errors"] = 0
        memo["answered"] = True
        memo.pop("last_error", None)

        usage = completion.usage
        prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
        completion_tokens = getattr(usage, "completion_tokens", 0) or 0
        total = getattr(usage, "total_tokens", 0) or (prompt_tokens + completion_tokens)
        memo["tokens"] += total

        content = message.content if isinstance(message.content, str) else ""
        if len(content) > self.max_reply_chars:
            content = content[: self.max_reply_chars] + f" ...[{len(content) - self.max_reply_chars} chars cut]"
        calls: list[Call] = []
        wire_calls: list[dict[str, Any]] = []
        refused: dict[str, str] = {}
        finish: tuple[str, dict[str, Any]] | None = None
        # ids already used in this run, this turn's included: a model that reuses an id from an earlier turn would
        # otherwise be answered with that turn's recorded result (the trace keys results by id)
        seen: set[str] = set(memo.setdefault("call_ids", []))
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
            memo["call_ids"].append(call_id)
            if len(raw) > self.max_reply_chars:
                refused[call_id] = f"not run: its arguments are {len(raw)} characters, over the cap of " \
                                   f"{self.max_reply_chars}"  # fmt: skip
                raw = "{}"
            wire_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}})
            args = parse_arguments(raw)
            if name == FINISH:
                finish = (call_id, args)
            elif call_id not in refused:
                calls.append(Call(tool=name, args=args, call_id=call_id))

        assistant: dict[str, Any] = {"role": "assistant", "content": content}  # a string, also for a tool-call turn
        if wire_calls:
            assistant["tool_calls"] = wire_calls
        # the checkpointed conversation holds no secret even if the model repeats one
        memo["messages"].append(redact(assistant, self._secrets(ctx)))
        if ctx.trace is not None:
            ctx.trace.emit("llm_response", step=step, call_id=llm_call_id, message=assistant, wall_seconds=wall,
                           usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                  "total_tokens": total})  # fmt: skip

        # the same calls as the turn before, right after their results, with nothing changed since
        turn = sorted(_call_key(c.tool, c.args) for c in calls)
        last = memo.get("last_turn") or {}
        context = [len(state.patches), state.server_flags]
        if turn and turn == last.get("calls") and context == last.get("context"):
            memo["echo"] += 1
        else:
            memo["echo"] = 0
        memo["last_turn"] = {"calls": turn, "context": context}
        if memo["echo"] >= ECHO_LIMIT:
            why = f"the model made the same call ({_calls_summary(calls)[:200]}) {memo['echo'] + 1} times in a row, "
            if self.tool_results_as == "user":  # every chat format renders user messages: it saw them
                why += ("each right after its result, which it was sent as a user message: the model does not act on "
                        "tool results")  # fmt: skip
            else:
                why += ("each right after its result: the server does not seem to show tool results to the model (its "
                        "chat format may drop role 'tool' messages); try --llm-tool-results user (task: "
                        "llm.tool_results_as: user) or another chat format")  # fmt: skip
            self._note(ctx, step, why, level="error")
            memo["pending"] = [w["id"] for w in wire_calls]
            memo["synthetic"] = {w["id"]: json.dumps({"ok": False, "error": "not run: " + why}) for w in wire_calls}
            return decision([], why, done=True, tokens=total)

        kept: list[Call] = []
        for call in calls:
            if len(kept) >= self.max_calls_per_turn:
                refused[call.call_id] = (f"not run: at most {self.max_calls_per_turn} tool calls per turn; call it "
                                         "again next turn if it is still needed")  # fmt: skip
                continue
            key = _call_key(call.tool, call.args, state.server_flags, len(state.trials), len(state.patches))
            count = memo["seen_calls"].get(key, 0)
            if count >= self.max_repeats:
                refused[call.call_id] = (f"refused: this exact call was already made {count} times with nothing "
                                         "changed since (same server, trials and patches); its result is above. "
                                         "Change something or call another tool")  # fmt: skip
                self._note(ctx, step, f"refused a repeated call: {_calls_summary([call])[:200]} ({count} times before)")
                continue
            memo["seen_calls"][key] = count + 1
            kept.append(call)
        if len(calls) > self.max_calls_per_turn:
            self._note(ctx, step, f"the model made {len(calls)} tool calls in one turn; ran the first "
                                  f"{self.max_calls_per_turn}")  # fmt: skip
        calls = kept

        if finish is not None and not calls and not refused:
            finish_args = finish[1]
            reason = finish_args.get("reason") or finish_args.get(RAW_ARGUMENTS) or content or "the model finished"
            memo["pending"] = [finish[0]]
            memo["synthetic"] = {finish[0]: json.dumps({"ok": True, "summary": "run finished"})}
            memo["idle"] = 0
            return decision([], f"finish: {reason}", done=True, tokens=total)
        synthetic = {cid: json.dumps({"ok": False, "error": why}) for cid, why in refused.items()}
        if finish is not None:  # finish alongside other calls: run those first, let the model decide again
            synthetic[finish[0]] = json.dumps({
                "ok": False, "error": "finish was not done: other tool calls were made in the same turn; look at "
                "their results, then call finish alone if the run should end"})  # fmt: skip
        memo["synthetic"] = synthetic
        memo["pending"] = [w["id"] for w in wire_calls]
        if not calls:
            memo["idle"] += 1
            nudge = render_prompt("nudge", self._dirs(state, ctx))
            if not wire_calls:
                memo["messages"].append({"role": "user", "content": nudge})
            done = memo["idle"] >= MAX_IDLE
            text = content.strip() or ("(every call of the turn was refused)" if refused
                                       else "(the model answered without text or tool calls)")  # fmt: skip
            return decision([], text + ("; the model stopped acting" if done else ""), done=done, tokens=total)
        memo["idle"] = 0
        rationale = content.strip() or _calls_summary(calls)
        return decision(calls, rationale, tokens=total)


def wire_messages(history: list[dict[str, Any]], tool_results_as: str = "tool") -> list[dict[str, Any]]:
    """The history as sent: every assistant message's ``content`` a string (strict servers reject ``null``,
    also on a tool-call turn); with ``tool_results_as="user"``, each run of tool replies becomes one user
    message naming the calls it answers (for chat formats that drop ``role: "tool"`` messages)."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for m in history:
        if m.get("role") == "assistant":
            m = {**m, "content": m.get("content") if isinstance(m.get("content"), str) else ""}
            for tc in m.get("tool_calls") or []:
                names[tc["id"]] = tc["function"]["name"]
        if m.get("role") == "tool" and tool_results_as == "user":
            line = f"[{m['tool_call_id']}] {names.get(m['tool_call_id'], 'tool')} -> {m['content']}"
            if out and out[-1].get("role") == "user" and out[-1].get("_results"):
                out[-1]["content"] += "\n" + line
            else:
                out.append({"role": "user", "content": "Results of your tool calls:\n" + line, "_results": True})
            continue
        out.append(m)
    return [{k: v for k, v in m.items() if k != "_results"} for m in out]


__all__ = [
    "FINISH_SCHEMA",
    "RAW_ARGUMENTS",
    "LLMPolicy",
    "call_arguments",
    "observation_content",
    "parse_arguments",
    "prompt_dirs",
    "prompt_variables",
    "render_prompt",
    "retry_after_seconds",
    "search_view",
    "system_message",
    "trim_history",
    "wire_messages",
]
