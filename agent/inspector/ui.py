"""``agent ui``: a local, read-only web view of the runs under ``runs/``.

``/`` lists the runs; ``/runs/<id>`` shows one: targets against results, the patches (each collapsed, with its
crash excerpt, diff and evidence), the plots, the trials and the timeline; ``/runs/<id>/plots/<name>.png``
serves a plot rendered from the run (cached per run). Pages come from the Jinja templates
``agent/inspector/templates/ui_*.html.j2`` with HTML autoescaping on (everything shown comes from the runs), carry their
CSS inline and reference nothing outside this server; the Content-Security-Policy header says so to the
browser as well. Nothing here writes anywhere or needs the network.

:func:`serve` binds the server (port 0: any free port) and returns it, so tests start it in-process.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader
from pydantic import BaseModel, ConfigDict

from .plots import render_plots
from .report import ReportError, build_report
from .review import PatchReview, ReviewError, collect_patches
from .timeline import SIMULATED_LABEL, Timeline, read_timeline

TEMPLATES = Path(__file__).parent / "templates"
# A run id as a URL segment: a plain folder name (no separators, no dot-only names, nothing to unescape).
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The browser may load what this server serves and styles inline in its pages; nothing else, from nowhere else.
CONTENT_SECURITY_POLICY = ("default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; "
                           "form-action 'none'; frame-ancestors 'none'")  # fmt: skip


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


class RunListing(BaseModel):
    """A run as the list page shows it."""

    run_id: str
    task: str
    created: str = ""
    finished: str | None  # the finish reason; None while the run has not finished (or was killed)
    targets_met: int = 0
    targets_total: int = 0
    simulated: bool


class RunPage(BaseModel):
    """Everything ``/runs/<id>`` shows. A part that cannot be read says why in its ``*_note`` field."""

    listing: RunListing
    targets: list[TargetResult] = []
    branch: str | None = None
    node_hours: float | None = None
    best_config: dict[str, Any] | None = None
    trials: list[TrialRow] = []
    patches: list[PatchReview] = []
    patches_note: str | None = None
    plot_names: list[str] = []
    plots_note: str | None = None
    timeline: Timeline | None = None
    timeline_note: str | None = None


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
    if summary is None:
        task = Path(str(options.get("task_path") or "?")).stem
        return RunListing(run_id=run_dir.name, task=task, created=created, finished=None,
                          simulated=_engine_from_trace(run_dir) == "twin")  # fmt: skip
    targets = summary.get("targets") or {}
    return RunListing(run_id=run_dir.name, task=str(summary.get("task", "?")), created=created,
                      finished=str(summary.get("finish_reason") or "finished"),
                      targets_met=sum(bool(t.get("met")) for t in targets.values()), targets_total=len(targets),
                      simulated=bool(summary.get("simulated")))  # fmt: skip


def _targets(summary: dict[str, Any]) -> list[TargetResult]:
    return [TargetResult(name=name, metric=str(t.get("metric", "")), goal=float(t.get("target", 0.0)),
                         achieved=t.get("achieved"), met=bool(t.get("met")), trial=t.get("trial"))
            for name, t in (summary.get("targets") or {}).items()]  # fmt: skip


# ------------------------------------------------------------------------------------------ the site


class RunsSite:
    """The pages of the runs under ``runs_dir``: routing, rendering, and the per-run cache of plots."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = Path(runs_dir).resolve()
        self.templates = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True,
                                     lstrip_blocks=True)  # fmt: skip
        self.templates.globals["simulated_label"] = SIMULATED_LABEL
        # run id -> (summary.json's mtime, the plots, why there are none)
        self._plots: dict[str, tuple[int, dict[str, bytes], str | None]] = {}
        self._plots_lock = threading.Lock()

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

    def run_page(self, run_dir: Path) -> RunPage:
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

    # --- requests -----------------------------------------------------------------------------------------

    def respond(self, raw_path: str) -> Response:
        """The response to a GET of ``raw_path`` (the request target, query string and all)."""
        try:
            return self._route(raw_path)
        except RefusedPath:
            return self.error(HTTPStatus.BAD_REQUEST, "refused: not a path of this site")

    def _route(self, raw_path: str) -> Response:
        path = urllib.parse.urlsplit(raw_path).path
        # decoded segments: an encoded "/" or "\" inside a segment, or a dot segment, is refused, not followed
        segments = [urllib.parse.unquote(s) for s in path.split("/")[1:]]
        if any(s in (".", "..") or "/" in s or "\\" in s or "\0" in s for s in segments):
            raise RefusedPath(raw_path)
        if segments and segments[-1] == "" and len(segments) > 1:
            segments = segments[:-1]  # /runs/x/ is /runs/x
        if segments in ([], [""]):
            return self._page("ui_runs.html.j2", HTTPStatus.OK, runs=self.listings())
        if len(segments) in (2, 4) and segments[0] == "runs":
            run_dir = self.run_dir(segments[1])
            if run_dir is None:
                return self._not_found(f"no run {segments[1]!r} under {self.runs_dir}")
            if len(segments) == 2:
                return self._page("ui_run.html.j2", HTTPStatus.OK, page=self.run_page(run_dir))
            if segments[2] == "plots":
                png = self.plots(run_dir)[0].get(segments[3])  # only names the renderer made; no file lookup
                if png is not None:
                    return Response(status=HTTPStatus.OK, content_type="image/png", body=png)
                return self._not_found(f"run {segments[1]!r} has no plot {segments[3]!r}")
        return self._not_found(f"nothing at {path}")

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
        return render_plots(build_report(run_dir)), None
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

    def _send(self, head_only: bool) -> None:
        try:
            response = self.server.site.respond(self.path)
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


def serve(runs_dir: Path, host: str = "127.0.0.1", port: int = 8765, verbose: bool = False) -> UiServer:
    """A bound (not yet serving) web view of ``runs_dir`` at ``host:port``; port 0 takes any free port."""
    return UiServer(RunsSite(runs_dir), host, port, verbose=verbose)
