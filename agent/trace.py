"""The run trace: every step of a run as one versioned JSON line in ``runs/<run-id>/trace.jsonl``.

A trace is the record that replay, forking and resume work from, so it is written to survive a SIGKILL at
any instant: each event is one ``write`` of one complete line followed by ``fsync``. A crash can leave at
most a *torn* final line (no trailing newline); readers skip it and a writer reopening the file truncates
it away and continues numbering after the last complete line.

Events are pydantic models discriminated by ``kind``; all share ``schema_version``, ``seq`` (assigned by
the writer: 1 for the first line of the file, then consecutive), ``ts`` (UTC), ``run_id`` and ``step``.
Secrets never reach the file: every event is passed through the run's :class:`~agent.secrets.Redactor` before it is
written.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .secrets import MIN_SECRET_LENGTH, REDACTED, Redactor, is_secret_key, redact, redact_text

try:  # POSIX only: keeps two writers (say, a resumed run and a stale process) off the same file
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

TRACE_SCHEMA_VERSION = 1


class TraceError(ValueError):
    """A trace that cannot be read or appended to; the message names the file (and line)."""


def _now() -> datetime:
    return datetime.now(UTC)


def _dayzero_version() -> str:
    try:
        from importlib.metadata import version

        return version("dayzero")
    except Exception:  # noqa: BLE001 - not installed: running from a checkout
        return "unknown"


# --------------------------------------------------------------------------------------------- events


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _EventBase(_Strict):
    schema_version: int = TRACE_SCHEMA_VERSION
    seq: int = Field(0, ge=0, description="assigned by the TraceWriter; 0 until written")
    ts: datetime = Field(default_factory=_now, description="UTC time the event was created")
    run_id: str = Field("", description="stamped by the TraceWriter")
    step: int | None = Field(None, description="the agent step / trial the event belongs to")


class RunStartedEvent(_EventBase):
    kind: Literal["run_started"] = "run_started"
    task: str
    task_path: str
    task_sha256: str
    policy: str
    sandbox: str
    engine: str
    choice_reason: str = ""
    argv: list[str] = Field(default_factory=list)
    dayzero_version: str = Field(default_factory=_dayzero_version)


class ToolCallEvent(_EventBase):
    kind: Literal["tool_call"] = "tool_call"
    call_id: str
    tool: str
    input: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] = Field(default_factory=dict)
    ok: bool
    error: str | None = None
    wall_seconds: float
    simulated_seconds: float | None = None
    node_hours: float | None = None


class ProposedCall(_Strict):
    tool: str
    input: dict[str, Any] = Field(default_factory=dict)


class DecisionEvent(_EventBase):
    kind: Literal["decision"] = "decision"
    policy: str
    stage: str | None = None
    rationale: str
    proposed_calls: list[ProposedCall] = Field(default_factory=list)
    annotations: dict[str, Any] = Field(default_factory=dict)  # what the policy says about its calls


class LlmRequestEvent(_EventBase):
    kind: Literal["llm_request"] = "llm_request"
    call_id: str
    model: str
    base_url: str
    messages: list[Any]
    tools: list[Any] | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class Usage(BaseModel):
    """Token usage; providers' extra fields (total_tokens, details) are kept as they came."""

    model_config = ConfigDict(extra="allow", frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0


class LlmResponseEvent(_EventBase):
    kind: Literal["llm_response"] = "llm_response"
    call_id: str
    message: dict[str, Any] = Field(
        default_factory=dict, description="the raw assistant message: content and/or tool_calls"
    )
    usage: Usage = Field(default_factory=Usage)
    wall_seconds: float
    error: str | None = None


class StateSnapshotEvent(_EventBase):
    kind: Literal["state_snapshot"] = "state_snapshot"
    state: dict[str, Any]


class NoteEvent(_EventBase):
    kind: Literal["note"] = "note"
    level: Literal["debug", "info", "warning", "error"] = "info"
    message: str


class ApprovalRequestedEvent(_EventBase):
    kind: Literal["approval_requested"] = "approval_requested"
    gate: dict[str, Any]  # agent.approvals.Gate: what waits for an answer


class ApprovalAnsweredEvent(_EventBase):
    kind: Literal["approval_answered"] = "approval_answered"
    answer: dict[str, Any]  # agent.approvals.Answer: who answered, when, how and why
    what: str = ""  # what the gate held back (agent.approvals.Gate.what)
    same_as: str | None = None  # the gate whose answer to the same action this one took


class RunFinishedEvent(_EventBase):
    kind: Literal["run_finished"] = "run_finished"
    status: str
    summary: dict[str, Any] = Field(default_factory=dict)


_EVENT_CLASSES = (
    RunStartedEvent,
    ToolCallEvent,
    DecisionEvent,
    LlmRequestEvent,
    LlmResponseEvent,
    StateSnapshotEvent,
    NoteEvent,
    ApprovalRequestedEvent,
    ApprovalAnsweredEvent,
    RunFinishedEvent,
)
TraceEvent = Annotated[Union[_EVENT_CLASSES], Field(discriminator="kind")]  # noqa: UP007

EVENT_TYPES: dict[str, type[_EventBase]] = {cls.model_fields["kind"].default: cls for cls in _EVENT_CLASSES}

_ADAPTER: TypeAdapter[Any] = TypeAdapter(TraceEvent)


def parse_event(data: dict[str, Any]) -> TraceEvent:
    """Validate one decoded trace line (raises ``TraceError`` for an unknown schema version or kind,
    pydantic's ``ValidationError`` for bad fields)."""
    if not isinstance(data, dict):
        raise TraceError(f"an event is a JSON object, not {type(data).__name__}")
    version = data.get("schema_version")
    if version != TRACE_SCHEMA_VERSION:
        raise TraceError(f"unsupported schema_version {version!r} (this reader understands {TRACE_SCHEMA_VERSION})")
    kind = data.get("kind")
    if kind not in EVENT_TYPES:
        raise TraceError(f"unknown event kind {kind!r} (known: {', '.join(EVENT_TYPES)})")
    return _ADAPTER.validate_python(data)


# ------------------------------------------------------------------------------------------ redaction

# One redaction for every file a run writes: agent/secrets.py (its names stay importable from here).
# Envelope fields that are structure, not content: never rewritten (a secret "note" must not break `kind`).
_ENVELOPE = ("kind", "schema_version", "seq", "ts")


# --------------------------------------------------------------------------------------------- writer


def _after_last_newline(fd: int, end: int) -> int:
    """Offset just past the last newline in the file's first ``end`` bytes (0 if there is none)."""
    pos = end
    while pos > 0:
        start = max(0, pos - (1 << 16))
        idx = os.pread(fd, pos - start, start).rfind(b"\n")
        if idx >= 0:
            return start + idx + 1
        pos = start
    return 0


class TraceWriter:
    """Appends events to a trace file, one fsynced JSON line each, numbering them with ``seq``.

    Opening an existing file continues after its last complete line (a torn final line left by a crash is
    truncated away first). Thread-safe; one writer per file (an OS lock refuses a second one).
    """

    def __init__(self, path: Path | str, run_id: str, secrets: Iterable[str] = (),
                 redactor: Redactor | None = None) -> None:  # fmt: skip
        self.path = Path(path)
        self.run_id = run_id
        self._lock = threading.RLock()
        self.redactor = redactor if redactor is not None else Redactor()  # shared with the run's other sinks
        for s in secrets:
            self.add_secret(s)
        self._fd: int | None = None
        self._seq = 0
        self.truncated_bytes = 0  # how much of a torn final line the open cut away

        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise TraceError(f"{self.path}: already open by another TraceWriter") from None
            self._seq = self._recover(fd)
            if created:
                _fsync_dir(self.path.parent)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _recover(self, fd: int) -> int:
        size = os.fstat(fd).st_size
        end = _after_last_newline(fd, size)
        if end < size:  # a torn line: the writer died inside a write
            os.ftruncate(fd, end)
            os.fsync(fd)
            self.truncated_bytes = size - end
        if end == 0:
            return 0
        start = _after_last_newline(fd, end - 1)
        raw = os.pread(fd, end - start, start)

        def fail(why: str) -> TraceError:
            lineno = os.pread(fd, start, 0).count(b"\n") + 1
            return TraceError(f"{self.path}:{lineno}: cannot append: {why}")

        try:
            data = json.loads(raw)
        except ValueError as e:
            raise fail(f"last line is not valid JSON ({e})") from None
        if not isinstance(data, dict) or not isinstance(data.get("seq"), int):
            raise fail("last line has no integer seq")
        if data.get("schema_version") != TRACE_SCHEMA_VERSION:
            raise fail(f"schema_version {data.get('schema_version')!r}; this writer writes {TRACE_SCHEMA_VERSION}")
        if data.get("run_id") not in (self.run_id, self.redactor.text(self.run_id)):
            raise fail(f"trace belongs to run {data.get('run_id')!r}, not {self.run_id!r}")
        return data["seq"]

    # -- secrets

    def add_secret(self, value: str) -> None:
        """Mask ``value`` in every later event (values shorter than 4 characters are ignored)."""
        self.redactor.add(value)

    # -- writing

    @property
    def seq(self) -> int:
        """The seq of the last line in the file (0 for an empty trace)."""
        return self._seq

    @property
    def closed(self) -> bool:
        return self._fd is None

    def write(self, event: TraceEvent) -> TraceEvent:
        """Number, redact and durably append ``event``; returns the event exactly as recorded (what
        :func:`read_trace` will give back)."""
        if not isinstance(event, _EventBase):
            raise TypeError(f"write() takes a trace event model, not {type(event).__name__}")
        if event.run_id and event.run_id != self.run_id:
            raise ValueError(f"event for run {event.run_id!r} written to the trace of run {self.run_id!r}")
        with self._lock:
            if self._fd is None:
                raise TraceError(f"{self.path}: writer is closed")
            seq = self._seq + 1
            data = event.model_copy(update={"seq": seq, "run_id": self.run_id}).model_dump(mode="json")
            envelope = {k: data.pop(k) for k in _ENVELOPE}
            data = {**envelope, **self.redactor(data)}
            line = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
            recorded = parse_event(json.loads(line))  # never write a line the reader would refuse
            payload = (line + "\n").encode("utf-8")
            view = memoryview(payload)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            os.fsync(self._fd)
            self._seq = seq
            return recorded

    def emit(self, kind: str, **fields: Any) -> TraceEvent:
        """Build an event of ``kind`` from ``fields`` and write it: ``emit("note", message="hi", step=3)``."""
        cls = EVENT_TYPES.get(kind)
        if cls is None:
            raise TraceError(f"unknown event kind {kind!r} (known: {', '.join(EVENT_TYPES)})")
        return self.write(cls(**fields))

    # -- lifecycle

    def close(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)  # closing releases the flock

    def __del__(self, _close=os.close) -> None:  # a forgotten writer must not keep the fd (and the file lock) forever
        # at interpreter exit module globals (contextlib, os) may already be gone: only what was bound here is used
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:  # noqa: SIM105 (contextlib may be gone at exit)
                _close(fd)
            except OSError:
                pass

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TraceWriter({str(self.path)!r}, run_id={self.run_id!r}, seq={self._seq})"


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------------------------- reader


def iter_trace(path: Path | str) -> Iterator[TraceEvent]:
    """The events of a trace in order. A torn final line (no newline: the writer was killed mid-write) is
    skipped; a bad line anywhere else, an unknown schema version or kind, or a seq that does not increase
    raises ``TraceError`` naming ``file:line``."""
    path = Path(path)
    prev_seq = 0
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                return  # torn final line
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                data = json.loads(raw)
            except ValueError as e:
                raise TraceError(f"{where}: not valid JSON ({e})") from None
            try:
                event = parse_event(data)
            except TraceError as e:
                raise TraceError(f"{where}: {e}") from None
            except ValidationError as e:
                first = e.errors()[0]
                loc = ".".join(str(p) for p in first["loc"])
                raise TraceError(f"{where}: {loc}: {first['msg']} ({e.error_count()} error(s))") from None
            if event.seq <= prev_seq:
                raise TraceError(f"{where}: seq {event.seq} does not follow {prev_seq}")
            prev_seq = event.seq
            yield event


def read_trace(path: Path | str) -> list[TraceEvent]:
    """All events of a trace (see :func:`iter_trace`)."""
    return list(iter_trace(path))


def tool_calls(events: Iterable[Any]) -> list[ToolCallEvent]:
    """The ``tool_call`` events, in order."""
    return [e for e in events if isinstance(e, ToolCallEvent)]


__all__ = [
    "EVENT_TYPES",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "TRACE_SCHEMA_VERSION",
    "DecisionEvent",
    "LlmRequestEvent",
    "LlmResponseEvent",
    "NoteEvent",
    "ProposedCall",
    "RunFinishedEvent",
    "RunStartedEvent",
    "StateSnapshotEvent",
    "ToolCallEvent",
    "TraceError",
    "TraceEvent",
    "TraceWriter",
    "Usage",
    "is_secret_key",
    "iter_trace",
    "parse_event",
    "read_trace",
    "redact",
    "redact_text",
    "tool_calls",
]
