"""``agent ui``: a local, read-only web view of the runs under ``runs/``.

``/`` lists the runs, each running (with its pid), stopped (with the ``agent resume`` line) or finished (with
why) by :func:`agent.inspector.run_state.run_state`; ``/runs/<id>`` shows one: targets against results, the
patches (each collapsed, with its crash excerpt, diff and evidence), the plots, the trials and the timeline, each
step of it opening onto its calls' whole input and output and links to the files they name (server logs,
benchmark records); ``/runs/<id>/plots/<name>.png`` serves a plot rendered from the run (cached per run),
``/runs/<id>/files/<path>`` a file of the run folder, ``/runs/<id>/live`` the parts of a run's page that change
while it runs (a running run's page fetches them every few seconds: trials appear as they land), ``/glossary``
the glossary of the docs, ``/compare?a=<id>&b=<id>`` two finished runs' Pareto frontiers overlaid (the PNG at
``/compare/frontiers.png?a=<id>&b=<id>``, as ``agent runs --compare`` draws it) and their named points side by
side; the runs list picks the two with a plain form (no script). Pages come from the Jinja templates ``agent/inspector/templates/ui_*.html.j2`` with HTML
autoescaping on (everything shown comes from the runs), carry their CSS and their one script inline and
reference nothing outside this server; the Content-Security-Policy header says so to the browser as well (the
script by its hash). Nothing here needs the network, and one thing only writes: a run waiting at an approval gate
(``agent run --approve``) shows each gate with approve and reject buttons, a form POSTed to
``/runs/<id>/approvals/<gate>`` that keeps the answer as ``agent approve`` does (``agent/approvals.py``; the run
goes on with ``agent resume``). A POST is taken only with this server's own token (in the form it served), from its
own origin and addressed to its own host: another page open in the same browser cannot answer a gate.

:func:`serve` binds the server (port 0: any free port) and returns it, so tests start it in-process.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import secrets
import socket
import sys
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup
from pydantic import BaseModel, ConfigDict

from sandboxes.base import is_control

from ..approvals import Answer, ApprovalError, Gate, answers, now, pending, who, write_answer
from ..interactivity import Interactivity, from_summary, per_user_text
from ..trace import read_trace
from .plot_cache import rendered
from .plots import frontier_overlay
from .report import ReportError, build_report
from .review import PatchReview, ReviewError, collect_patches
from .run_list import Comparison, compare_frontiers
from .run_state import WORKSPACE, RunState, TrialSoFar, run_state, trials_so_far
from .timeline import SIMULATED_LABEL, Timeline, TimelineCall, TimelineStep, read_timeline
from .wording import GLOSSARY, glossary_entries, stage_name

TEMPLATES = Path(__file__).parent / "templates"
# the script a running run's page polls its live parts with; the CSP allows it by its hash, and nothing else
LIVE_SCRIPT = (TEMPLATES / "ui_live.js").read_text()
LIVE_POLL_MS = 3000  # how often a running run's page asks for its live parts
FILE_BYTES = 2 << 20  # a file larger than this is served as its last FILE_BYTES (a log's end is what one reads)
FILES_PER_CALL = 30  # the links a call's files get at most
# A run id as a URL segment: a plain folder name (no separators, no dot-only names, nothing to unescape).
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The browser may load what this server serves and styles inline in its pages; nothing else, from nowhere else.
CONTENT_SECURITY_POLICY = ("default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; "
                           f"script-src 'sha256-{base64.b64encode(hashlib.sha256(LIVE_SCRIPT.encode()).digest()).decode()}'; "
                           "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")  # fmt: skip
# served as text whatever they hold (with nosniff, a log holding HTML is shown, never rendered)
_FILE_TYPES = {".png": "image/png"}


class RefusedPath(ValueError):
    """A URL path that tries to leave the runs folder (``..``, an encoded separator, a bad run name)."""


# ------------------------------------------------------------------------------------------ what pages show


class TargetResult(BaseModel):
    """One target of the task against what the run achieved (from ``summary.json``)."""

    name: str
    metric: str
    goal: float
    achieved: float | None
    met: bool
    trial: int | None = None
    interactivity: Interactivity | None = None  # what one user saw in the benchmark behind the best
    bound: str | None = None  # the target's interactivity bound in words, if it has one
    lower_bound: bool = False  # achieved is a floor: its knee search saw no rate fail above the knee


class TrialRow(BaseModel):
    """One launch of the run, as ``summary.json`` records it."""

    model_config = ConfigDict(extra="ignore")

    id: int
    flags: dict[str, Any] = {}
    status: str
    diagnosis: str | None = None
    metrics: dict[str, float] = {}
    accuracy: float | None = None
    step: int | None = None
    # target name -> what one user saw in the benchmark behind the trial's figure for it
    interactivity: dict[str, Interactivity] = {}


class RunListing(BaseModel):
    """A run as the list page shows it."""

    run_id: str
    task: str
    created: str = ""
    state: RunState
    finished: str | None  # the finish reason; None while the run runs, was stopped or never started
    targets_met: int = 0
    targets_total: int = 0
    simulated: bool


class CallView(BaseModel):
    """One tool call of the timeline as the page shows it: the call, and the run's files its result names."""

    call: TimelineCall
    files: list[str] = []  # paths relative to the run folder, served at /runs/<id>/files/<path>


class StepView(BaseModel):
    step: TimelineStep
    calls: list[CallView] = []


class RunPage(BaseModel):
    """Everything ``/runs/<id>`` shows. A part that cannot be read says why in its ``*_note`` field."""

    listing: RunListing
    targets: list[TargetResult] = []
    branch: str | None = None
    node_hours: float | None = None
    best_config: dict[str, Any] | None = None
    trials: list[TrialRow] = []
    trials_so_far: list[TrialSoFar] = []  # no summary yet: the trials the trace records so far
    steps: list[StepView] = []
    patches: list[PatchReview] = []
    patches_note: str | None = None
    plot_names: list[str] = []
    plots_note: str | None = None
    timeline: Timeline | None = None
    timeline_note: str | None = None
    stages: dict[int, str] = {}  # step -> the stage key its decision names (trials are shown with their stage)
    waiting: list[Gate] = []  # the approval gates the run waits at (agent/approvals.py)
    answers: list[Answer] = []  # the answers given so far
    answered: str | None = None  # the answer just given on this page (after a POST)


class ComparePage(BaseModel):
    """Everything ``/compare`` shows: two runs' frontiers (``note`` says why there are none)."""

    run_ids: list[str]
    comparison: Comparison | None = None
    note: str | None = None
    roles: list[str] = ["max throughput", "balanced", "max interactivity"]


class Response(BaseModel):
    """What the server sends back for one request."""

    status: int
    content_type: str
    body: bytes


# ------------------------------------------------------------------------------------------ reading runs


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _engine_from_trace(run_dir: Path) -> str | None:
    """The engine the trace's first event (``run_started``) names, for a run without a summary yet."""
    try:
        with (run_dir / "trace.jsonl").open() as f:
            first = json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        return None
    return first.get("engine") if isinstance(first, dict) else None


def read_listing(run_dir: Path) -> RunListing:
    """The list page's row for the run in ``run_dir`` (which holds ``run.json``)."""
    options = _read_json(run_dir / "run.json") or {}
    summary = _read_json(run_dir / "summary.json")
    created = str(options.get("created") or "")
    state = run_state(run_dir)
    finished = state.finish_reason if state.state == "finished" else None
    if summary is None:
        task = Path(str(options.get("task_path") or "?")).stem
        return RunListing(run_id=run_dir.name, task=task, created=created, state=state, finished=finished,
                          simulated=_engine_from_trace(run_dir) == "twin")  # fmt: skip
    targets = summary.get("targets") or {}
    return RunListing(run_id=run_dir.name, task=str(summary.get("task", "?")), created=created, state=state,
                      finished=finished, targets_met=sum(bool(t.get("met")) for t in targets.values()),
                      targets_total=len(targets), simulated=bool(summary.get("simulated")))  # fmt: skip


def _targets(summary: dict[str, Any]) -> list[TargetResult]:
    return [TargetResult(name=name, metric=str(t.get("metric", "")), goal=float(t.get("target", 0.0)),
                         achieved=t.get("achieved"), met=bool(t.get("met")), trial=t.get("trial"),
                         interactivity=from_summary(t), bound=t.get("bound"),
                         lower_bound=bool(t.get("lower_bound")))
            for name, t in (summary.get("targets") or {}).items()]  # fmt: skip


def _strings(value: Any) -> list[str]:
    """Every string inside a tool result (dict values, list items, nested)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def run_file(run_dir: Path, rel: Path) -> Path | None:
    """The file ``rel`` of the run folder, or None when there is none. Raises :class:`RefusedPath` for a path that
    leaves the run folder (``..``, an absolute path, a symlink pointing out) or reaches a sandbox control path
    (``.dayzero-*``, ``.twin``: the run lock, the twin's ground truth)."""
    root = run_dir.resolve()
    if rel.is_absolute() or ".." in rel.parts or any(is_control(part) for part in rel.parts):
        raise RefusedPath(str(rel))
    full = (run_dir / rel).resolve()
    if not full.is_relative_to(root) or any(is_control(part) for part in full.relative_to(root).parts):
        raise RefusedPath(str(rel))
    return full if full.is_file() else None


def _recorded_copy(run_dir: Path, rel: Path) -> Path:
    """The run's own copy of a benchmark's output file: the engine writes ``workspace/.bench/<run>-NNN-<w>.jsonl``,
    the benchmark tool keeps it (redacted) as ``bench/NNN-<w>.jsonl`` beside its output ``.log``
    (``tools/bench.py``); any other file is itself."""
    if rel.parts[:2] != (WORKSPACE, ".bench"):
        return rel
    copy = Path("bench") / rel.name.removeprefix(f"{run_dir.name}-")
    return copy if (run_dir / copy).is_file() else rel


def call_files(run_dir: Path, call: TimelineCall) -> list[str]:
    """The run's files a call's result names, relative to the run folder: paths relative to the run folder or
    its workspace (a server's ``log_path``, an edited file), absolute paths into the run folder (a benchmark
    command's ``--output-file``; matched by the run's folder name, so a run folder that moved still links), and
    the folder of each ``run_trials`` job (``trials/<job_id>``: its logs and benchmark records)."""
    found: list[str] = []

    def add(rel: Path) -> None:
        for each in (rel, rel.with_suffix(".log")) if rel.parts[0] == "bench" else (rel,):  # a record, its log
            with contextlib.suppress(RefusedPath, OSError, ValueError):
                if str(each) not in found and run_file(run_dir, each) is not None:
                    found.append(str(each))

    for text in _strings(call.output):
        if len(found) >= FILES_PER_CALL:
            break
        if "/" not in text or len(text) > 1024 or any(ch.isspace() for ch in text):
            continue
        path = Path(text)
        if path.is_absolute():
            parts = path.parts
            for i in (i for i in range(len(parts) - 1, 0, -1) if parts[i] == run_dir.name):
                if (run_dir / Path(*parts[i + 1:])).is_file():
                    add(_recorded_copy(run_dir, Path(*parts[i + 1:])))
                    break
        else:
            add(path if (run_dir / path).is_file() else Path(WORKSPACE) / path)
    if call.tool == "run_trials":
        for outcome in call.output.get("outcomes") or []:
            job = str(outcome.get("job_id") or "")
            folder = run_dir / "trials" / job
            if job and _RUN_ID.fullmatch(job) and folder.is_dir():
                for f in sorted(p for p in folder.rglob("*") if p.is_file())[:FILES_PER_CALL]:
                    add(f.relative_to(run_dir))
    return found


# ------------------------------------------------------------------------------------------ the site


class RunsSite:
    """The pages of the runs under ``runs_dir``: routing, rendering, and the per-run cache of plots."""

    def __init__(self, runs_dir: Path, poll_ms: int = LIVE_POLL_MS) -> None:
        self.runs_dir = Path(runs_dir).resolve()
        self.templates = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True,
                                     lstrip_blocks=True)  # fmt: skip
        self.templates.globals["simulated_label"] = SIMULATED_LABEL
        self.templates.globals["live_script"] = Markup(LIVE_SCRIPT)  # noqa: S704 - our own file, allowed by its hash
        self.templates.globals["live_poll_ms"] = poll_ms
        self.templates.filters["pretty"] = lambda value: json.dumps(value, indent=1, ensure_ascii=False, default=str)
        self.templates.filters["stage"] = stage_name  # a stage key as the report names it (knee: draft-tree ...)
        self.templates.filters["per_user"] = lambda i: per_user_text(i, short=True)  # tok/s/user, TPOT p50/p99
        # run id -> (summary.json's mtime, the plots, why there are none)
        self._plots: dict[str, tuple[int, dict[str, bytes], str | None]] = {}
        self._plots_lock = threading.Lock()
        # (run a, run b) -> (both summaries' mtimes, the page, the overlay PNG): rendered once per pair
        self._compared: dict[tuple[str, str], tuple[tuple[int, int], ComparePage, bytes | None]] = {}
        # what an approval form carries back: a POST without it (another site's page in the same browser) is refused
        self.token = secrets.token_urlsafe(24)
        self.templates.globals["approval_token"] = self.token

    # --- runs ---------------------------------------------------------------------------------------------

    def run_dir(self, run_id: str) -> Path | None:
        """The folder of run ``run_id``, or None when there is no such run. Raises :class:`RefusedPath` for a
        name that is not a plain folder name inside ``runs_dir``."""
        if not _RUN_ID.fullmatch(run_id) or run_id.strip(".") == "":
            raise RefusedPath(run_id)
        path = self.runs_dir / run_id
        if path.resolve().parent != self.runs_dir:  # a symlink pointing out of the runs folder
            raise RefusedPath(run_id)
        return path if (path / "run.json").is_file() else None

    def listings(self) -> list[RunListing]:
        """Every run under ``runs_dir``, newest first."""
        if not self.runs_dir.is_dir():
            return []
        rows = [read_listing(d) for d in self.runs_dir.glob("*") if (d / "run.json").is_file()]
        return sorted(rows, key=lambda r: (r.created, r.run_id), reverse=True)

    def run_page(self, run_dir: Path, live_only: bool = False) -> RunPage:
        """The run's page; ``live_only``: only the parts that change while it runs (state, trials, timeline),
        without the patches and plots (what a running run's page polls for)."""
        summary = _read_json(run_dir / "summary.json") or {}
        page = RunPage(listing=read_listing(run_dir), targets=_targets(summary), branch=summary.get("branch"),
                       node_hours=summary.get("simulated_node_hours", summary.get("node_hours")),
                       best_config=summary.get("best_config"),
                       trials=[TrialRow.model_validate({**t, "diagnosis": t.get("diagnosis") or (
                           f"failed under the benchmark: {t['serving_failure']}" if t.get("serving_failure") else None)})
                           for t in summary.get("trials") or []])  # fmt: skip
        try:
            page.timeline = read_timeline(run_dir / "trace.jsonl")
        except (OSError, ValueError) as exc:
            page.timeline_note = f"no timeline: {exc}"
        if page.timeline is not None:
            page.stages = {st.step: st.stage for st in page.timeline.steps if st.step is not None and st.stage}
            page.steps = [StepView(step=st, calls=[CallView(call=c, files=call_files(run_dir, c)) for c in st.calls])
                          for st in page.timeline.steps]  # fmt: skip
            if not summary:
                page.trials_so_far = trials_so_far(page.timeline)
        with contextlib.suppress(OSError, ValueError):  # an unreadable trace: the timeline note says so already
            page.waiting = pending(run_dir, read_trace(run_dir / "trace.jsonl"))
        page.answers = answers(run_dir)
        if not live_only:
            page.patches, page.patches_note = read_patches(run_dir)
            plots, page.plots_note = self.plots(run_dir)
            page.plot_names = list(plots)  # in the order the renderer gives them
        return page

    def plots(self, run_dir: Path) -> tuple[dict[str, bytes], str | None]:
        """The run's plots (PNG file name -> bytes) and why there are none, rendered once per run and again
        only when its ``summary.json`` changes."""
        summary = run_dir / "summary.json"
        if not summary.is_file():
            return {}, "no plots: the run has not finished (no summary.json)"
        stamp = summary.stat().st_mtime_ns
        with self._plots_lock:  # the browser asks for several plots at once; render them once
            cached = self._plots.get(run_dir.name)
            if cached is None or cached[0] != stamp:
                plots, note = render_run_plots(run_dir)
                cached = self._plots[run_dir.name] = (stamp, plots, note)
        return cached[1], cached[2]

    def compare(self, a: Path, b: Path) -> tuple[ComparePage, bytes | None]:
        """Runs ``a`` and ``b``'s frontiers (:func:`agent.inspector.run_list.compare_frontiers`, as ``agent runs
        --compare`` reads them) and their overlay PNG (None: a run the report cannot read, said in the page's
        note); rendered once per pair and again only when either's ``summary.json`` changes."""
        stamps = tuple((d / "summary.json").stat().st_mtime_ns if (d / "summary.json").is_file() else 0
                       for d in (a, b))  # fmt: skip
        with self._plots_lock:
            cached = self._compared.get((a.name, b.name))
            if cached is None or cached[0] != stamps:
                page, png = ComparePage(run_ids=[a.name, b.name]), None
                try:
                    page.comparison = compare_frontiers(self.runs_dir, page.run_ids)
                except ReportError as exc:
                    page.note = f"no comparison: {exc}"
                except Exception as exc:  # noqa: BLE001 - a run the report trips over is still named, not a 500
                    page.note = f"no comparison: {type(exc).__name__}: {exc}"
                if page.comparison is not None:
                    c = page.comparison
                    png = frontier_overlay([(r, f) for r, f in c.frontiers.items() if f is not None],
                                           title=f"Pareto frontiers: {' vs '.join(c.run_ids)}",
                                           simulated=c.simulated)  # fmt: skip
                cached = self._compared[(a.name, b.name)] = (stamps, page, png)  # type: ignore[assignment]
        return cached[1], cached[2]

    def _compared_runs(self, raw_path: str) -> tuple[Path, Path] | Response:
        """The two runs a ``/compare`` request names (``?a=<id>&b=<id>``), or the error page: 400 for a missing
        or refused name (:meth:`run_dir` raises), 404 for a run that is not there."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(raw_path).query)
        names = [(query.get(k) or [""])[0] for k in ("a", "b")]
        if not all(names):
            return self.error(HTTPStatus.BAD_REQUEST, "compare two runs: /compare?a=<run id>&b=<run id>")
        dirs = [self.run_dir(n) for n in names]
        for name, d in zip(names, dirs, strict=True):
            if d is None:
                return self._not_found(f"no run {name!r} under {self.runs_dir}")
        return dirs[0], dirs[1]  # type: ignore[return-value]

    # --- requests -----------------------------------------------------------------------------------------

    def respond(self, raw_path: str) -> Response:
        """The response to a GET of ``raw_path`` (the request target, query string and all)."""
        try:
            return self._route(raw_path)
        except RefusedPath:
            return self.error(HTTPStatus.BAD_REQUEST, "refused: not a path of this site")

    @staticmethod
    def _segments(raw_path: str) -> list[str]:
        """The request target's path as decoded segments (``/runs/x/`` is ``/runs/x``). An encoded "/" or "\\"
        inside a segment, or a dot segment, is refused (:class:`RefusedPath`), not followed."""
        segments = [urllib.parse.unquote(s) for s in urllib.parse.urlsplit(raw_path).path.split("/")[1:]]
        if any(s in (".", "..") or "/" in s or "\\" in s or "\0" in s for s in segments):
            raise RefusedPath(raw_path)
        if segments and segments[-1] == "" and len(segments) > 1:
            segments = segments[:-1]
        return segments

    def _route(self, raw_path: str) -> Response:
        path = urllib.parse.urlsplit(raw_path).path
        segments = self._segments(raw_path)
        if segments in ([], [""]):
            return self._page("ui_runs.html.j2", HTTPStatus.OK, runs=self.listings())
        if segments == ["glossary"]:
            return self.glossary()
        if segments in (["compare"], ["compare", "frontiers.png"]):
            runs = self._compared_runs(raw_path)
            if isinstance(runs, Response):
                return runs
            page, png = self.compare(*runs)
            if segments == ["compare"]:
                return self._page("ui_compare.html.j2", HTTPStatus.OK, page=page)
            if png is None:
                return self._not_found(f"no overlay: {page.note}")
            return Response(status=HTTPStatus.OK, content_type="image/png", body=png)
        if segments == ["favicon.ico"]:  # asked for by a browser showing a served file (pages carry theirs inline)
            return Response(status=HTTPStatus.NO_CONTENT, content_type="image/x-icon", body=b"")
        if len(segments) >= 2 and segments[0] == "runs":
            run_dir = self.run_dir(segments[1])
            if run_dir is None:
                return self._not_found(f"no run {segments[1]!r} under {self.runs_dir}")
            if len(segments) == 2:
                return self._page("ui_run.html.j2", HTTPStatus.OK, page=self.run_page(run_dir))
            if segments[2:] == ["live"]:
                return self._page("ui_run_live.html.j2", HTTPStatus.OK, page=self.run_page(run_dir, live_only=True))
            if len(segments) >= 4 and segments[2] == "files":
                return self.file(run_dir, segments[3:])
            if len(segments) == 4 and segments[2] == "plots":
                png = self.plots(run_dir)[0].get(segments[3])  # only names the renderer made; no file lookup
                if png is not None:
                    return Response(status=HTTPStatus.OK, content_type="image/png", body=png)
                return self._not_found(f"run {segments[1]!r} has no plot {segments[3]!r}")
        return self._not_found(f"nothing at {path}")

    def answer(self, raw_path: str, form: dict[str, str]) -> Response:
        """A POST of an approval form: ``decision`` yes or no, ``reason``, ``token``; the run's page again after."""
        segments = self._segments(raw_path)  # (a refused path, or run name, is the caller's 400)
        if len(segments) != 4 or segments[0] != "runs" or segments[2] != "approvals":
            return self.error(HTTPStatus.METHOD_NOT_ALLOWED, "only an approval form is posted here")
        if not secrets.compare_digest(form.get("token", ""), self.token):
            return self.error(HTTPStatus.FORBIDDEN, "refused: the form is not this server's (reload the run's page)")
        run_dir = self.run_dir(segments[1])
        if run_dir is None:
            return self._not_found(f"no run {segments[1]!r} under {self.runs_dir}")
        gate = next((g for g in pending(run_dir, read_trace(run_dir / "trace.jsonl")) if g.id == segments[3]), None)
        if gate is None:
            return self.error(HTTPStatus.CONFLICT, f"run {run_dir.name} does not wait at gate {segments[3]!r} "
                                                   "(answered already, or never asked)")  # fmt: skip
        if form.get("decision") not in ("yes", "no"):
            return self.error(HTTPStatus.BAD_REQUEST, "an answer is yes or no")
        answer = Answer(gate=gate.id, digest=gate.digest, approved=form["decision"] == "yes",
                        reason=form.get("reason", "").strip()[:2000], by=who(), at=now(), via="ui")  # fmt: skip
        try:
            write_answer(run_dir, answer)
        except ApprovalError as exc:
            return self.error(HTTPStatus.CONFLICT, str(exc))
        page = self.run_page(run_dir)
        page.answered = f"{gate.id} ({gate.what}): {answer.words()}; the run goes on with: agent resume {run_dir.name}"
        return self._page("ui_run.html.j2", HTTPStatus.OK, page=page)

    def file(self, run_dir: Path, segments: list[str]) -> Response:
        """A file of the run folder, as text (a PNG as an image); a large one as its end."""
        if "" in segments:
            raise RefusedPath("/".join(segments))
        rel = Path(*segments)
        path = run_file(run_dir, rel)
        if path is None:
            return self._not_found(f"run {run_dir.name!r} has no file {str(rel)!r}")
        size = path.stat().st_size
        with path.open("rb") as f:
            if size > FILE_BYTES:
                f.seek(size - FILE_BYTES)
            body = f.read(FILE_BYTES)
        if size > FILE_BYTES:
            body = f"[the first {size - FILE_BYTES} of {size} bytes are not shown]\n".encode() + body
        ctype = _FILE_TYPES.get(path.suffix.lower(), "text/plain; charset=utf-8")
        return Response(status=HTTPStatus.OK, content_type=ctype, body=body)

    def glossary(self) -> Response:
        """``docs/glossary.md`` inside a page of the site, each ``##`` heading with its anchor (``#knee``, as
        GitHub makes them: the pages link their terms there); the text itself as text (it is not there yet: a
        404 page saying so)."""
        intro, entries = glossary_entries(GLOSSARY)
        if not GLOSSARY.is_file():
            return self._not_found(f"no glossary: {GLOSSARY.name} is not in {GLOSSARY.parent}")
        return self._page("ui_doc.html.j2", HTTPStatus.OK, title="glossary", source=GLOSSARY.name, text=intro,
                          entries=entries)  # fmt: skip

    def _not_found(self, message: str) -> Response:
        return self.error(HTTPStatus.NOT_FOUND, message)

    def error(self, status: HTTPStatus, message: str) -> Response:
        """An error page: ``status`` and one line saying what went wrong."""
        return self._page("ui_error.html.j2", status, message=message)

    def _page(self, template: str, status: HTTPStatus, **context: Any) -> Response:
        html = self.templates.get_template(template).render(status=status, **context)
        return Response(status=status, content_type="text/html; charset=utf-8", body=html.encode())


# ------------------------------------------------------------------------------------------ other modules


def render_run_plots(run_dir: Path) -> tuple[dict[str, bytes], str | None]:
    """The run report's plots (:func:`agent.inspector.plots.render_plots` of :func:`agent.inspector.report.build_report`), or none
    and the reason (a run the report cannot read)."""
    try:
        return rendered(build_report(run_dir)), None
    except ReportError as exc:
        return {}, f"no plots: {exc}"
    except Exception as exc:  # noqa: BLE001 - a run the report trips over is still shown, without plots
        return {}, f"no plots: {type(exc).__name__}: {exc}"


def read_patches(run_dir: Path) -> tuple[list[PatchReview], str | None]:
    """The run's committed patches (:func:`agent.inspector.review.collect_patches`), or none and the reason."""
    try:
        return collect_patches(run_dir), None
    except ReviewError as exc:
        return [], f"no patches: {exc}"
    except Exception as exc:  # noqa: BLE001 - a run the review trips over is still shown, without patches
        return [], f"no patches: {type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------ the server


class _Handler(BaseHTTPRequestHandler):
    """GET and HEAD only; every answer comes from the server's :class:`RunsSite`."""

    server: UiServer
    server_version = "dayzero-ui"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._send(head_only=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._send(head_only=True)

    def do_POST(self) -> None:  # noqa: N802
        self._send(head_only=False, post=True)

    def _posted(self) -> Response:
        """An approval form, from this server's own pages only: addressed to its host, from its origin."""
        site, own = self.server.site, urllib.parse.urlsplit(self.server.url).netloc
        origin = self.headers.get("Origin")
        if self.headers.get("Host") != own or (origin is not None and urllib.parse.urlsplit(origin).netloc != own):
            return site.error(HTTPStatus.FORBIDDEN, "refused: a form posted from elsewhere")
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= 65536:
            return site.error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "refused: the form is too large")
        fields = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8", "replace"), max_num_fields=10)
        try:
            return site.answer(self.path, {k: v[0] for k, v in fields.items()})
        except RefusedPath:
            return site.error(HTTPStatus.BAD_REQUEST, "refused: not a path of this site")

    def _send(self, head_only: bool, post: bool = False) -> None:
        try:
            response = self._posted() if post else self.server.site.respond(self.path)
        except Exception as exc:  # noqa: BLE001 - one broken page must not take the connection down silently
            message = f"{type(exc).__name__}: {exc}"
            self.log_error("%s: %s", self.path, message)
            response = self.server.site.error(HTTPStatus.INTERNAL_SERVER_ERROR, message)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head_only:
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")


class UiServer(ThreadingHTTPServer):
    """The web view's HTTP server over one runs folder."""

    daemon_threads = True

    def __init__(self, site: RunsSite, host: str, port: int, verbose: bool = False) -> None:
        self.site = site
        self.verbose = verbose
        if ":" in host:  # an IPv6 address such as ::1
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/" if ":" not in str(host) else f"http://[{host}]:{port}/"

    def start_background(self) -> threading.Thread:
        """Serve from a daemon thread (tests); stop with ``shutdown()`` then ``server_close()``."""
        thread = threading.Thread(target=self.serve_forever, name="dayzero-ui", daemon=True)
        thread.start()
        return thread


def serve(runs_dir: Path, host: str = "127.0.0.1", port: int = 8765, verbose: bool = False,
          poll_ms: int = LIVE_POLL_MS) -> UiServer:  # fmt: skip
    """A bound (not yet serving) web view of ``runs_dir`` at ``host:port``; port 0 takes any free port; a running
    run's page asks for its live parts every ``poll_ms`` milliseconds."""
    return UiServer(RunsSite(runs_dir, poll_ms=poll_ms), host, port, verbose=verbose)
