"""The ``agent`` command line: ``agent run TASK``, ``agent runs``, ``agent resume RUN``, ``agent twin ...``."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import textwrap
from pathlib import Path

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from sandboxes.twin.scenario import DEFAULT_SCENARIO

from .state import Interactivity

app = typer.Typer(help="dayzero: bring a new model up on new accelerators, by an agent.", no_args_is_help=True,
                  pretty_exceptions_enable=False)  # fmt: skip
twin_app = typer.Typer(help="The digital twin (a simulated SGLang ROCm node; MI355X by default).", no_args_is_help=True)
app.add_typer(twin_app, name="twin")
console = Console()


def _error(message: str) -> None:
    """One error line, printed literally: never broken at the terminal's width (a YAML path and line stay
    copyable), never read as markup or emoji codes (a message may hold ``[red]``, ``[/]`` or ``:x:``)."""
    console.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True, highlight=False)


RUNS = Path("runs")
EXIT_CODES = """Exit codes: 0 every target met; 2 bad input (task file, flags, run id, policy settings, replay trace,
API key: nothing was created); 3 the targets were missed within the budget (the policy stopped); 4 a budget
(trials, wall time, node-hours, LLM tokens or requests, tool calls) ran out before the targets were met; 5 an infrastructure failure
(the engine could not run, Docker, the LLM endpoint, the runs folder: unwritable, full); 6 waiting for an approval
(--approve, with no terminal to ask on: agent approve, then agent resume); 130 interrupted,
143 terminated (SIGTERM), 129 hung up (SIGHUP): agent resume continues. 1 is an internal error (a bug). The summary says the same in words; see
docs/reliability.md."""


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, taken as Ctrl-C is: the run stops where it is, its servers reaped, resumable."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):  # noqa: ANN001, ARG001
    raise Stopped(signum)


@contextlib.contextmanager
def _stop_signals(handler=_raise_stopped):
    """SIGTERM and SIGHUP go to ``handler`` while the block runs: by default they raise ``Stopped`` in the main
    thread (schedulers and containers stop a process with SIGTERM; a closed terminal sends SIGHUP); the previous
    handlers come back after."""
    wanted = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None]
    try:
        previous = {s: signal.signal(s, handler) for s in wanted}
    except ValueError:  # not the main thread (a caller embedding the CLI): nothing to install
        previous = {}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _keep_secrets_from_the_engine(run) -> None:
    """The agent's secrets out of its engine's reach (``sandboxes/isolation.py``); in the local sandbox, a line on
    what this process cannot scrub: an ancestor started with a secret in its environment."""
    from sandboxes import isolation
    from sandboxes.local import LocalSandbox, is_secret

    values = [v for k, v in os.environ.items() if is_secret(k) and v] + sorted(run.redactor.values)
    isolation.protect_agent(values)
    if isinstance(run.sandbox, LocalSandbox) and (exposed := isolation.exposed_in_ancestors(values)):
        console.print(Text(f"warning: a secret this run holds is in the start-up environment of {', '.join(exposed)}, "
                           "which the engine's processes can read in the local sandbox (a process cannot scrub its "
                           "ancestors); to keep it out of the engine's reach, run with sandbox: docker, or start "
                           "the agent from a process that does not hold it", style="yellow"), soft_wrap=True)


def _execute(run, resume: bool) -> None:
    """Run (or resume) ``run`` to its end, print the summary and exit with the outcome's code. At a gate with no
    answer (``--approve``) it asks on the terminal and goes on; with no terminal it stops, saying how to answer."""
    import sqlite3
    import sys

    from sandboxes.base import SandboxError, SandboxUnavailable

    from .approvals import ApprovalError, write_answer
    from .graph import AwaitingApproval, execute
    from .live_panel import LiveView
    from .outcomes import ExitCode

    console.print(f"[bold]{escape(run.choice.reason)}[/]", soft_wrap=True)
    console.print(f"run [cyan]{run.run_id}[/] -> {escape(str(run.run_dir))}  (policy: {run.policy.name})", soft_wrap=True)
    if run.gates is not None and run.gates.kinds:
        console.print(f"approvals: {', '.join(k for k in ('patches', 'launches', 'commits', 'pushes') if k in run.gates.kinds)}"
                      " wait for a person's answer", soft_wrap=True)  # fmt: skip
    _keep_secrets_from_the_engine(run)
    view = LiveView(run.task, run.options.max_trials, run.redactor.text)
    try:
        while True:
            try:
                with _stop_signals(), Live(console=console, refresh_per_second=4, transient=True) as live:
                    execute(run, resume=resume,
                            on_step=lambda s, t: live.update(view.update(s, t, live.console.print)))  # fmt: skip
                break
            except AwaitingApproval as waiting:
                if not sys.stdin.isatty():
                    run.close()
                    console.print(Text(waiting.line(), style="yellow"), soft_wrap=True, highlight=False)
                    raise typer.Exit(ExitCode.AWAITING_APPROVAL) from None
                with _stop_signals():
                    answer = _ask(waiting.gate)
                    try:
                        write_answer(run.run_dir, answer)
                    except ApprovalError as exc:  # answered meanwhile (agent approve, the UI): the first answer stands
                        console.print(Text(str(exc), style="yellow"), soft_wrap=True, highlight=False)
                resume = True  # the same process goes on from the gate, its server still up
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        with _stop_signals(signal.SIG_IGN):  # a second SIGTERM does not cut the reaping short (SIGKILL would)
            run.close()
        what = {signal.SIGINT: "interrupted"}.get(signum, f"stopped by {signal.Signals(signum).name}")
        console.print(f"[yellow]{what}; continue with: agent resume {run.run_id}[/]")
        code = {signal.SIGINT: ExitCode.INTERRUPTED}.get(signum) or (
            ExitCode.HUNG_UP if signum == getattr(signal, "SIGHUP", None) else ExitCode.TERMINATED)
        raise typer.Exit(code) from None
    except (OSError, sqlite3.Error, SandboxError) as exc:  # the disk, the engine, Docker: the run can continue
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
        where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
        if isinstance(exc, SandboxUnavailable):  # the trace takes a line still (a full disk's would not)
            with contextlib.suppress(Exception):
                run.trace.emit("note", level="error", message=f"stopped: infrastructure failure: {what}; agent "
                               f"resume {run.run_id} continues once it is back")  # fmt: skip
        run.close()
        _error(f"run {run.run_id} stopped: infrastructure failure: {what}{where}; once fixed: agent resume {run.run_id}")
        raise typer.Exit(ExitCode.INFRASTRUCTURE) from None
    finally:
        run.sandbox.close()
    raise typer.Exit(_print_summary(run.run_dir))


def _show_gate(gate, out: Console) -> None:
    """A gate as a person reads it before answering: what, why, and the diff, commands or message."""
    from rich.panel import Panel
    from rich.syntax import Syntax

    out.print(Panel(Text(f"{gate.what}\n{gate.why}".rstrip()), title=f"approval {gate.id} ({gate.kind}, step "
                    f"{gate.step})", title_align="left"))  # fmt: skip
    d = gate.details
    if d.get("crash"):
        out.print(Text(f"crash: {d['crash']}"), soft_wrap=True)
        for line in d.get("excerpt") or []:
            out.print(Text(f"  {line}", style="dim"), soft_wrap=True)
    if d.get("diff"):
        out.print(Syntax(d["diff"], "diff", theme="ansi_dark", word_wrap=True))
    for la in d.get("launches") or []:
        env = " ".join(f"{k}={v}" for k, v in la.get("env", {}).items())
        out.print(Text(f"$ {env + ' ' if env else ''}{' '.join(la['command'])}  ({la['gpus']} GPUs"
                       + (f", {', '.join(la['pristine'])} as released" if la.get("pristine") else "") + ")"),
                  soft_wrap=True, highlight=False)  # fmt: skip
    if "expected_node_hours" in d:
        out.print(Text(f"expected: {d['expected_node_hours']:.4f} node-hours ({d.get('node_hours_basis', '')})"),
                  soft_wrap=True)  # fmt: skip
    if d.get("message"):
        out.print(Panel(Text(d["message"]), title="commit message", title_align="left"))
    for tree, head in (d.get("branches") or {}).items():
        out.print(Text(f"push {tree} {head} -> {d.get('remote')}"), soft_wrap=True, highlight=False)


def _ask(gate, out: Console | None = None, stream=None):
    """The terminal's answer to ``gate``: yes, no, or no with a reason (``stream``: where the answer is read,
    default the terminal)."""
    from rich.prompt import Prompt

    from .approvals import Answer, now, who

    out = out or console
    _show_gate(gate, out)
    choice = Prompt.ask("approve? yes / no / reason (no, with a reason)", choices=["yes", "no", "reason"],
                        console=out, stream=stream)  # fmt: skip
    reason = Prompt.ask("why not?", console=out, stream=stream).strip() if choice == "reason" else ""
    return Answer(gate=gate.id, digest=gate.digest, approved=choice == "yes", reason=reason, by=who(), at=now(),
                  via="terminal")  # fmt: skip


def _outcome(summary: dict) -> tuple[int, str]:
    """The exit code and words of a finished run (a summary from before outcomes were recorded: met or missed)."""
    if outcome := summary.get("outcome"):
        return int(outcome["exit_code"]), outcome["words"]
    met = all(t["met"] for t in summary["targets"].values())
    return (0, "every target met") if met else (3, f"targets missed: {summary['finish_reason']}")


def _explain_lines(target: str, e: dict, lower_bound: bool = False) -> list[str]:
    """A target's bring-up-to-best explanation (``summary["explain"]``, :mod:`agent.ablation`) in words. Each
    effect is measured alone, between two configurations that differ by that one change (mostly the best and
    the best without it); the changes interact, so the effects are not shares of the gain and need not add up
    to it: the lines say so, with both sums, rather than list them as if they did. A best that is a floor
    (``lower_bound``: no rate was seen failing above its knee) is written "at least", and so is its gain."""
    gain = None if e.get("bring_up") is None else e["best"] - e["bring_up"]
    start = "not measured" if e.get("bring_up") is None else f"{e['bring_up']:.1f}"
    floor = "at least " if lower_bound else ""
    lines = [f"{target}: {start} at bring-up -> {floor}{e['best']:.1f}"
             + (f" ({floor}{gain:+.1f})" if gain is not None else "")]  # fmt: skip
    measured = [c["effect"] for c in e["changes"] if c.get("effect") is not None]
    if len(measured) > 1:
        total = sum(measured)
        against = f" against a gain of {gain:+.1f}" if gain is not None else ""
        lines.append(f"  each change measured alone (with it and without it, all else equal): the effects sum to "
                     f"{total:+.1f}{against}; the changes interact, so these do not add up")  # fmt: skip
    for c in e["changes"]:
        if c.get("effect") is None:
            moved = "not isolated by a measurement"
        else:
            moved = f"{c['effect']:+.1f}"
            if pair := c.get("measured_between"):
                without, with_ = pair
                moved += (f" (the best without it: {without:.1f})" if abs(with_ - e["best"]) < 1e-9
                          else f" (measured {without:.1f} without it -> {with_:.1f} with it)")  # fmt: skip
        lines.append(f"  {c['name']}: {c['before']} -> {c['after']}: {moved}")
    return lines


def _per_user_cell(i: Interactivity | None) -> str:
    """What one user saw behind a figure, in the summary table's narrow column: tok/s per user, then TPOT and
    ITL p50/p99 (agent/interactivity.py writes the same in one line elsewhere)."""
    if i is None:
        return "-"
    return (f"{i.tok_s_per_user:.3g} tok/s/user\nTPOT {i.tpot_p50_ms:.1f}/{i.tpot_p99_ms:.1f}\n"
            f"ITL {i.itl_p50_ms:.1f}/{i.itl_p99_ms:.1f}")


def _print_summary(run_dir: Path) -> int:
    """Print a finished run's summary; returns its exit code."""
    summary = json.loads((run_dir / "summary.json").read_text())
    table = Table(title=Text(f"run {summary['run_id']}: {summary['finish_reason']}"))
    for col in ("target", "goal", "achieved", "met", "per user (TPOT, ITL p50/p99 ms)"):
        table.add_column(col)
    for name, t in summary["targets"].items():
        achieved = "-" if t["achieved"] is None else f"{t['achieved']:.3f}"
        if t["achieved"] is not None and t.get("lower_bound"):  # no rate was seen failing above its knee
            achieved = f"at least {achieved}\n(no failing rate seen)"
        goal = f"{t['target']:g}" + (f"\n{t['bound']}" if t.get("bound") else "")
        inter = Interactivity.model_validate(t["interactivity"]) if t.get("interactivity") else None
        table.add_row(name, goal, achieved, "[green]yes[/]" if t["met"] else "[red]no[/]", _per_user_cell(inter))
    console.print(table)
    for c in summary["commits"]:
        console.print(Text(f"commit {', '.join(s[:10] for s in c['commits'])}  {c['title']}"), soft_wrap=True)
    for name, e in (summary.get("explain") or {}).items():  # what each change from the bring-up bought
        for line in _explain_lines(name, e, bool(summary["targets"].get(name, {}).get("lower_bound"))):
            console.print(Text(line), soft_wrap=True)
    for feature, b in (summary.get("blocked") or {}).items():  # what could not be brought up, and what it cost
        what = f"kernel {b['kernel']}" if b.get("kernel") else "its crash"
        why = textwrap.shorten(b["why"], 200, placeholder=" ...")
        line = f"blocked: {feature} where it builds {what} ({why}); {b.get('rule') or ''}".rstrip("; ") \
            if b.get("kernel") else f"blocked: {feature} ({why}); {what} waits at every other depth"  # fmt: skip
        if w := b.get("would_give"):
            m = w["measured"]
            line += (f"; the deepest allowed chain ({w['steps']} steps) would give at most {w['at_most']:.1f} against "
                     f"{m['value']:.1f} measured at {m['steps']} (estimated from the measured acceptance "
                     f"{m['acceptance']:.2f}, not measured)")  # fmt: skip
        console.print(Text(line), soft_wrap=True)
    for a in summary.get("approvals") or []:  # a rejection changed the run: each one, and how many were approved
        if not a["approved"]:
            why = f": {a['reason']}" if a.get("reason") else ""
            console.print(Text(f"rejected: {a['gate']} ({a['what']}) by {a['by']} ({a['via']}, {a['at']}){why}"),
                          soft_wrap=True, highlight=False)  # fmt: skip
    if n := sum(a["approved"] for a in summary.get("approvals") or []):
        console.print(f"approved: {n} action(s) at their gates (agent approvals {summary.get('run_id', '')})")
    hours = summary.get("simulated_node_hours", summary.get("node_hours"))
    console.print(f"branch {summary['branch']} | {'simulated ' if summary['simulated'] else ''}node-hours {hours}")
    if summary.get("best_config"):
        console.print(Text(f"winning launch command: {run_dir / 'launch.sh'}"), soft_wrap=True)
        console.print(Text(f"the benchmark behind each figure: {run_dir / 'bench.sh'}"), soft_wrap=True)
    else:
        console.print("no launch command: no configuration reached a measured best", soft_wrap=True)
    code, words = _outcome(summary)
    console.print(Text.assemble(("outcome: ", "bold"), words, f" (exit code {code})"), soft_wrap=True)
    return code


def _json_object(text: str, option: str) -> dict:
    """A command-line JSON object, or ValueError in one line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{option}: not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{option}: expected a JSON object, got {type(value).__name__}")
    return value


@app.command(epilog=EXIT_CODES)
def run(
    task: Path = typer.Argument(..., help="task file (YAML), e.g. one of tasks/*.yaml"),
    sandbox: str = typer.Option(None, help="auto | local | docker (default: the task's)"),
    policy: str = typer.Option("auto", help="auto | playbook | llm | replay"),
    llm_model: str = typer.Option(None, help="model name at the OpenAI-compatible endpoint"),
    llm_base_url: str = typer.Option(None, help="OpenAI-compatible endpoint (key from OPENAI_API_KEY)"),
    llm_extra_body: str = typer.Option(None, help="a JSON object of server-specific request fields for the LLM "
                                       "endpoint (over the task's llm.extra_body)"),
    llm_timeout: float = typer.Option(None, min=0.001, help="seconds to wait for one LLM reply (default: the "
                                      "task's llm.timeout_s, 120)"),
    llm_tool_results: str = typer.Option(None, help="tool | user: how tool results go back to the LLM (user: for "
                                         "servers whose chat template drops tool messages)"),
    max_trials: int = typer.Option(None, min=1, help="at most this many launches (default: the task's budget)"),
    run_id: str = typer.Option(None, help="name the run, a plain name: letters, digits, '.', '_', '-' "
                               "(default: task-timestamp)"),
    replay: Path = typer.Option(None, help="with --policy replay: the trace.jsonl to replay"),
    force: bool = typer.Option(False, "--force", help="with --replay: replay a trace recorded for another task "
                               "(the run's trace records that it was forced)"),
    executor: str = typer.Option("inline", help="inline | ray: where independent trials of a sweep run"),
    ray_address: str = typer.Option(None, help="with --executor ray: auto or HOST:PORT (default: a local Ray)"),
    prior: list[str] = typer.Option(None, "--prior", help="an earlier run of this task (a run id under runs/, or "
                                    "its folder) whose measurements warm-start the search; repeatable"),
    approve: str = typer.Option(None, "--approve", help="patches,launches,commits,pushes (any of them): hold each "
                                "such action until a person approves it (pushes: agent review --push; default: the "
                                "task's approvals; '' for none)"),
) -> None:
    """Bring the task's model up, fix what breaks, tune to the targets; everything lands in runs/<run-id>/.
    Everything the run needs is checked first (task, scenario, policy, replay trace, the LLM endpoint and its key,
    Docker, free disk):
    a problem is one line and creates nothing."""
    from sandboxes.base import SandboxError
    from tasks.spec import TaskError, load_task

    from .approvals import ApprovalError, parse_kinds
    from .policies.factory import PolicyError
    from .policies.replay import check_replay_trace
    from .prior import load_prior
    from .run import Run, RunError, RunOptions, check_run_id, new_run_id

    try:
        if run_id is not None:
            check_run_id(run_id)
        spec = load_task(task)
        note = check_replay_trace(replay, task, force) if replay else None
        priors = [str(RUNS / p) if (RUNS / p).is_dir() else p for p in prior or []]
        for p in priors:  # checked before the run exists, named as given (preflight checks them too, and on resume)
            load_prior(Path(p), spec, task)
        extra_body = _json_object(llm_extra_body, "--llm-extra-body") if llm_extra_body else None
        kinds = parse_kinds(approve) if approve is not None else None
        options = RunOptions(run_id=run_id or new_run_id(spec), task_path=str(task.resolve()), sandbox=sandbox,
                             policy=policy, llm_model=llm_model, llm_base_url=llm_base_url, max_trials=max_trials,
                             llm_extra_body=extra_body, llm_timeout_s=llm_timeout, llm_tool_results=llm_tool_results,
                             replay_trace=str(replay.resolve()) if replay else None, replay_note=note,
                             executor=executor, ray_address=ray_address,
                             prior=[str(Path(p).resolve()) for p in priors], approvals=kinds)  # fmt: skip
        the_run = Run.create(options, RUNS)
    except RunError as exc:
        _error(str(exc))
        raise typer.Exit(exc.exit_code) from None
    except (TaskError, SandboxError, PolicyError, ApprovalError, ValueError) as exc:
        _error(f"--approve: {exc}" if isinstance(exc, ApprovalError) else str(exc))
        raise typer.Exit(2) from None
    _execute(the_run, resume=False)


def _finished(run_dir: Path) -> bool:
    """Whether the run's trace records its end (written last: a run killed just before it resumes to finish)."""
    from .trace import iter_trace

    trace = run_dir / "trace.jsonl"
    return trace.exists() and any(e.kind == "run_finished" for e in iter_trace(trace))


@app.command(epilog=EXIT_CODES)
def resume(run_id: str = typer.Argument(..., help="a run under runs/")) -> None:
    """Continue a run that was interrupted or killed, without repeating a finished trial or commit. A run that
    cannot continue says why in one line; a finished one says how it ended (and exits with that code)."""
    from .run import Run, RunError, check_run_id

    try:
        check_run_id(run_id)
        summary = RUNS / run_id / "summary.json"
        if summary.exists() and _finished(RUNS / run_id):
            code, words = _outcome(json.loads(summary.read_text()))
            console.print(Text(f"run {run_id} finished already: {words}; nothing to resume (exit code {code})"),
                          soft_wrap=True)  # fmt: skip
            raise typer.Exit(code)
        the_run = Run.open(run_id, RUNS)
    except RunError as exc:
        _error(str(exc))
        raise typer.Exit(exc.exit_code) from None
    except (OSError, ValueError, KeyError) as exc:  # an unreadable summary
        _error(f"run {run_id}: unreadable summary.json ({exc})")
        raise typer.Exit(2) from None
    _execute(the_run, resume=True)


def _run_id_ok(run_id: str) -> None:
    """A run id is a plain name, or exit 2 with one line."""
    from .run import RunError, check_run_id

    try:
        check_run_id(run_id)
    except RunError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None


def _existing_run(run_id: str, needs: str) -> Path:
    """runs/<run_id> holding ``needs`` (run.json, trace.jsonl), or exit 2 with one line."""
    _run_id_ok(run_id)
    if not (RUNS / run_id / needs).exists():
        _error(f"no run {run_id!r} under {RUNS}/ (see: agent runs)")
        raise typer.Exit(2)
    return RUNS / run_id


@app.command()
def show(
    run_id: str = typer.Argument(..., help="a run under runs/"),
    full: bool = typer.Option(False, "--full", help="every call on its own rows, with its input and whole result"),
) -> None:
    """Print a run's timeline from its trace, one line a step: stage, decision, calls, outcome, cost (--full:
    everything). Runs nothing."""
    from .inspector.timeline import read_timeline, render_timeline

    trace = _existing_run(run_id, "trace.jsonl") / "trace.jsonl"
    try:
        timeline = read_timeline(trace)
    except ValueError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    console.print(render_timeline(timeline, full=full))


@app.command()
def approvals(run_id: str = typer.Argument(..., help="a run under runs/")) -> None:
    """List what the run waits for a person to approve (--approve): each gate's id, what it will do and why, with
    its diff, commands or commit message; then the answers given. Runs nothing."""
    from .approvals import answers, pending
    from .trace import read_trace

    run_dir = _existing_run(run_id, "trace.jsonl")
    try:
        events = read_trace(run_dir / "trace.jsonl")
    except ValueError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    waiting = pending(run_dir, events)
    for gate in waiting:
        _show_gate(gate, console)
    if not waiting:
        console.print(f"run {run_id}: nothing waits for approval")
    for answer in answers(run_dir):
        console.print(Text(f"{answer.gate}: {answer.words()}"), soft_wrap=True, highlight=False)


@app.command()
def approve(
    run_id: str = typer.Argument(..., help="a run under runs/"),
    gate: str = typer.Argument(None, help="the gate's id (agent approvals RUN); default: the one waiting"),
    yes: bool = typer.Option(False, "--yes", help="approve it"),
    no: bool = typer.Option(False, "--no", help="reject it"),
    reason: str = typer.Option("", "--reason", help="why (shown to the policy, in the trace, report and PR)"),
) -> None:
    """Answer a gate the run waits at: --yes or --no [--reason TEXT]. An answer is final; the run goes on with
    agent resume RUN (or, if it is still asking on its terminal, once it is run again)."""
    from .approvals import Answer, ApprovalError, answer_of, asked, now, who, write_answer
    from .trace import read_trace

    run_dir = _existing_run(run_id, "trace.jsonl")
    if yes == no:
        _error("say --yes or --no (exactly one)")
        raise typer.Exit(2)
    try:
        every = asked(run_dir, read_trace(run_dir / "trace.jsonl"))
        waiting = [g for g in every if answer_of(run_dir, g) is None]
        done = next((g for g in every if g.id == gate and g not in waiting), None)
        if done is not None:
            raise ApprovalError(f"gate {gate} was answered already: {answer_of(run_dir, done).words()}")
        if gate is None and len(waiting) != 1:
            raise ApprovalError(f"run {run_id}: nothing waits for approval" if not waiting else
                                f"run {run_id} waits at {len(waiting)} gates ({', '.join(g.id for g in waiting)}): "
                                "name one")  # fmt: skip
        found = next((g for g in waiting if gate is None or g.id == gate), None)
        if found is None:
            raise ApprovalError(f"run {run_id} does not wait at gate {gate!r}" + (
                f" (it waits at {', '.join(g.id for g in waiting)})" if waiting else ": nothing waits for approval"))
        answer = Answer(gate=found.id, digest=found.digest, approved=yes, reason=reason, by=who(), at=now(), via="cli")
        write_answer(run_dir, answer)
    except (ApprovalError, ValueError) as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    console.print(Text(f"{found.id} ({found.what}): {answer.words()}; continue with: agent resume {run_id}"),
                  soft_wrap=True, highlight=False)  # fmt: skip


@app.command()
def replay(
    run_id: str = typer.Argument(..., help="a run under runs/"),
    execute: bool = typer.Option(False, "--execute", help="re-run every recorded decision in a new run (fresh "
                                 "sandbox) and report the first divergence beyond --tolerance"),
    tolerance: float = typer.Option(0.02, help="with --execute: relative difference a measured figure may show"),
    from_step: int = typer.Option(None, "--from-step", help="fork a new run: replay steps 1..N, then --policy"),
    policy: str = typer.Option(None, help="with --from-step: playbook | llm"),
    run_id_new: str = typer.Option(None, "--run-id", help="name the new run (--execute, --from-step)"),
    task: Path = typer.Option(None, help="the task file (default: the run's); another one needs --force"),
    force: bool = typer.Option(False, "--force", help="re-run decisions recorded for another task (or a changed "
                               "task file); the new run's trace records it"),
    llm_model: str = typer.Option(None, help="with --policy llm (default: the run's)"),
    llm_base_url: str = typer.Option(None, help="with --policy llm (default: the run's)"),
) -> None:
    """Audit a run from its records (default; runs nothing), re-execute it (--execute), or fork it from a step
    (--from-step N --policy P). Prints the run's timeline, as agent show does."""
    from .inspector.audit import audit_run, render_audit
    from .inspector.replay import ReplayError, describe_execute, execute_recorded, fork_run
    from .inspector.timeline import read_timeline, render_timeline

    run_dir = _existing_run(run_id, "trace.jsonl")
    if run_id_new is not None:
        _run_id_ok(run_id_new)
    if execute and from_step is not None:
        _error("--execute and --from-step are two different replays: choose one")
        raise typer.Exit(2)
    if (from_step is None) != (policy is None):
        _error("--from-step N and --policy playbook|llm go together")
        raise typer.Exit(2)
    if not execute and from_step is None:
        try:
            console.print(render_timeline(read_timeline(run_dir / "trace.jsonl")))
        except ValueError as exc:
            console.print(f"[yellow]no timeline:[/] {escape(str(exc))}", soft_wrap=True)
        report = audit_run(run_dir, task)
        console.print(render_audit(report))
        raise typer.Exit(0 if report.ok else 1)
    from sandboxes.base import SandboxError

    from .graph import AwaitingApproval
    from .outcomes import ExitCode

    try:
        with console.status(f"replaying {run_id}") as status:
            def on_step(state, elapsed: float) -> None:
                status.update(f"step {state.step} ({state.stage}) - {len(state.trials)} trial(s) - {elapsed:.0f} s")

            if execute:
                result = execute_recorded(run_dir, RUNS, run_id_new, tolerance, task, force, on_step=on_step)
            else:
                fork = fork_run(run_dir, RUNS, from_step, policy, run_id_new, task, force, llm_model, llm_base_url,
                                on_step=on_step)  # fmt: skip
    except (ReplayError, SandboxError, ValueError) as exc:
        _error(str(exc))
        raise typer.Exit(getattr(exc, "exit_code", 2)) from None  # a RunError says whose the problem is
    except AwaitingApproval as waiting:  # a fork asks again; a re-execution, where the recorded run was not asked
        console.print(Text(waiting.line(), style="yellow"), soft_wrap=True, highlight=False)
        raise typer.Exit(ExitCode.AWAITING_APPROVAL) from None
    new_run = result.replay_run_id if execute else fork.run_id
    console.print(render_timeline(read_timeline(RUNS / new_run / "trace.jsonl")))
    if execute:
        console.print(escape(describe_execute(result)), soft_wrap=True)
        raise typer.Exit(0 if result.divergence is None else 1)
    console.print(f"forked {run_id} at step {from_step} as {fork.run_id} (policy {fork.policy}): "
                  f"{escape(fork.finish_reason)}", soft_wrap=True)  # fmt: skip
    _print_summary(RUNS / fork.run_id)


@app.command()
def review(
    run_id: str = typer.Argument(..., help="a run under runs/"),
    out: Path = typer.Option(None, "--out", help="where to write (default: runs/<run-id>/review; replaced)"),
    push: str = typer.Option(None, "--push", help="also push each tree's run branch to this git remote (URL or "
                             "path) as dayzero/<run-id>/<tree>"),
) -> None:
    """PR material for the run's patches: git format-patch series per source tree, a PR.md per patch, the
    run's summary PR.md and report; optionally push the run branches. Exits 0 when the run met every target;
    otherwise with the run's own exit code (3 for a run not finished), its summary PR saying so."""
    from .inspector.review import ReviewError, write_review
    from .inspector.review import push as push_branches

    run_dir = _existing_run(run_id, "run.json")
    try:
        result = write_review(run_dir, out)
        pushed = push_branches(run_dir, push) if push and _push_approved(run_dir, push) else None
    except ReviewError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    console.print(f"review of {result.run_id} -> {result.out_dir}", soft_wrap=True)
    console.print(f"  summary PR: {result.summary_pr}", soft_wrap=True)
    for patch, pr in zip(result.patch_files, result.pr_files, strict=True):
        console.print(f"  {patch}  (PR: {pr.name})", soft_wrap=True)
    for path in result.report_files:
        console.print(f"  report: {path}", soft_wrap=True)
    if result.report_error:
        console.print(f"[yellow]no run report: {escape(result.report_error)}[/]", soft_wrap=True)
    if pushed is not None:
        for b in pushed.pushed:
            console.print(f"pushed {b.tree} {b.sha[:10]} -> {pushed.remote} {b.remote_ref}", soft_wrap=True)
        for tree in pushed.skipped:
            console.print(f"not pushed: {tree} (no patches)", soft_wrap=True)
    if not result.verdict.met:  # the review is written (its patches stand alone); the run is no deployment
        console.print(Text(f"run {result.run_id} did not meet its targets: {result.verdict.words}; its summary PR "
                           "says so and names no configuration as the winner", style="yellow"), soft_wrap=True)
        raise typer.Exit(result.verdict.exit_code)


def _push_approved(run_dir: Path, remote: str) -> bool:
    """Whether the run's branches may be pushed to ``remote``: yes unless the run holds pushes (``--approve
    pushes``, the task's ``approvals``); then only with an approval of this push (asked on a terminal; with none,
    kept as asked, one line naming agent approve, exit 6). A rejection is said, and nothing is pushed."""
    import sys

    from tasks.spec import TaskError, load_task

    from .approvals import answer_of, ask_after, push_gate, write_answer
    from .inspector.review import collect_trees
    from .outcomes import ExitCode
    from .run import RunOptions

    options = RunOptions.model_validate_json((run_dir / "run.json").read_text())
    kinds = options.approvals
    if kinds is None:
        try:
            kinds = list(load_task(Path(options.task_path)).approvals)
        except (TaskError, OSError, ValueError):  # the task file gone: the run's own options are all there is
            kinds = []
    if "pushes" not in kinds:
        return True
    gate = push_gate(run_dir.name, remote, {t.tree: t.head for t in collect_trees(run_dir) if t.patches})
    answer = answer_of(run_dir, gate)
    if answer is None and sys.stdin.isatty():
        answer = _ask(gate)
        write_answer(run_dir, answer)
    if answer is None:
        ask_after(run_dir, gate)
        console.print(Text(f"run {run_dir.name} holds pushes: {gate.what} waits for approval; answer with agent "
                           f"approve {run_dir.name} {gate.id} --yes (or --no --reason TEXT), then run this again",
                           style="yellow"), soft_wrap=True, highlight=False)  # fmt: skip
        raise typer.Exit(ExitCode.AWAITING_APPROVAL)
    console.print(Text(f"push {answer.words()}"), soft_wrap=True, highlight=False)
    return answer.approved


@app.command("runs")
def list_runs(
    compare: tuple[str, str] | None = typer.Option(None, "--compare", metavar="A B", help="two runs under runs/: "
                                                   "overlay their Pareto frontiers (a PNG) and print their named points"),
    out: Path = typer.Option(None, "--out", help="where --compare writes its PNG (default: runs/compare/A-vs-B.png)"),
) -> None:
    """List the runs under runs/, newest first: when each started and how long it took, where it stands (running
    with its pid, stopped with the command that continues it, finished and why), the figures it reached against
    its goals (met in green, missed in red), its node-hours. With --compare A B: the two runs' throughput-per-GPU
    against tok/s-per-user frontiers on one plot, and their named points side by side."""
    if compare:
        _compare_runs(list(compare), out)
        return
    from .inspector.run_list import duration_text, figure_text, list_rows

    rows = list_rows(RUNS)
    simulated = any(r.simulated for r in rows)
    table = Table(caption="node-hours simulated on the digital twin" if simulated else None)
    table.add_column("run\ntask", overflow="fold")
    table.add_column("started", no_wrap=True)
    table.add_column("outcome", ratio=1, min_width=12)
    table.add_column("achieved/goal", overflow="fold")
    table.add_column("node-h", justify="right")
    for r in rows:
        started = r.started.astimezone(dt.UTC).strftime("%Y-%m-%d\n%H:%M UTC") if r.started else "-"
        if r.state.state == "finished":
            outcome = Text(r.state.words, style="green" if r.exit_code == 0 else None)
        elif r.state.state == "running":
            outcome = Text(r.state.words, style="cyan")
        elif r.state.state == "stopped":
            outcome = Text.assemble(("stopped", "yellow"), " (killed or interrupted): continue with ",
                                    (str(r.state.resume_command), "bold"))  # fmt: skip
        else:
            outcome = Text("never started (nothing to resume)", style="red")
        figures = Text("\n").join(Text(figure_text(f), style="green" if f.met else "red") for f in r.figures)
        table.add_row(Text.assemble(r.run_id, "\n", (r.task, "dim")), f"{started}\ntook {duration_text(r.seconds)}",
                      outcome, figures or "-", "-" if r.node_hours is None else f"{r.node_hours:.2f}")  # fmt: skip
    console.print(table)


def _compare_runs(run_ids: list[str], out: Path | None) -> None:
    """``agent runs --compare A B``: the overlay PNG written (its path printed) and a table of named points."""
    from .inspector.plots import frontier_overlay
    from .inspector.report import ReportError
    from .inspector.run_list import compare_frontiers

    for run_id in run_ids:
        _existing_run(run_id, "run.json")
    try:
        comparison = compare_frontiers(RUNS, run_ids)
    except ReportError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    out = out or RUNS / "compare" / f"{run_ids[0]}-vs-{run_ids[1]}.png"
    png = frontier_overlay([(r, f) for r, f in comparison.frontiers.items() if f is not None],
                           title=f"Pareto frontiers: {' vs '.join(run_ids)}", simulated=comparison.simulated)  # fmt: skip
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(png)
    except OSError as exc:
        _error(f"cannot write {out}: {exc.strerror or exc}")
        raise typer.Exit(5) from None
    table = Table(title="named frontier points (tok/s per user | output tok/s per GPU, trial at load)",
                  caption="simulated on the digital twin" if comparison.simulated else None)  # fmt: skip
    table.add_column("point")
    for run_id in run_ids:
        table.add_column(run_id, overflow="fold")
    for role in ("max throughput", "balanced", "max interactivity"):
        cells = [Text("-") if p is None else Text.assemble(f"{p.tok_s_per_user:,.1f} | {p.throughput_per_gpu:,.1f}",
                                                           (f"\ntrial {p.trial} at {p.load}", "dim"))
                 for p in comparison.role(role)]  # fmt: skip
        table.add_row(role, *cells)
    sizes = [f"{len(f.frontier)} of {len(f.points)} runs" if f else "no frontier" for f in comparison.frontiers.values()]
    table.add_row("frontier", *sizes)
    console.print(table)
    console.print(Text.assemble("overlay written to ", (str(out), "cyan")), soft_wrap=True, highlight=False)


@app.command()
def ui(
    port: int = typer.Option(8765, help="TCP port (0: any free port)"),
    host: str = typer.Option("127.0.0.1", help="address to bind; the default keeps the view on this machine"),
    runs: Path = typer.Option(RUNS, "--runs", help="the runs folder to show"),
) -> None:
    """A local, read-only web view of the runs: list, timeline, patches with diff and evidence, plots."""
    from .inspector.ui import serve

    if not runs.is_dir():
        _error(f"no runs folder {runs} (start a run with: agent run TASK)")
        raise typer.Exit(2)
    try:
        server = serve(runs, host=host, port=port)
    except OSError as exc:
        _error(f"cannot serve on {host}:{port}: {exc.strerror or exc}")
        raise typer.Exit(2) from None
    console.print(f"dayzero runs in {runs}: [cyan]{server.url}[/] (Ctrl-C stops)", soft_wrap=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")
    finally:
        server.server_close()


@twin_app.command("scenarios")
def twin_scenarios() -> None:
    """List the bundled twin scenarios."""
    from sandboxes.twin.__main__ import main

    raise typer.Exit(main(["scenarios"]))


@twin_app.command("materialize")
def twin_materialize(dest: str, scenario: str = DEFAULT_SCENARIO, force: bool = False) -> None:
    """Write a twin workspace (checkpoint metadata and the SGLang source excerpt) to DEST."""
    from sandboxes.twin.__main__ import main

    raise typer.Exit(main(["materialize", "--scenario", scenario, "--dest", dest] + (["--force"] if force else [])))


@twin_app.command("image")
def twin_image(tag: str = "dayzero-twin:latest") -> None:
    """Build the twin's Docker image (minimal Debian + python3, PyYAML, cpp + the twin), pulling nothing."""
    from sandboxes.twin.image import main

    raise typer.Exit(main(["--tag", tag]))


@twin_app.command("walkthrough")
def twin_walkthrough() -> None:
    """Run docs/twin.md: materialise, crash, patch, relaunch, tune and benchmark."""
    from sandboxes.twin.walkthrough import run as run_walkthrough

    raise typer.Exit(run_walkthrough())
