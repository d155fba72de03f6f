"""The run trace: round trips, numbering across reopen and crashes, redaction, corruption and concurrency."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.trace import (
    TRACE_SCHEMA_VERSION,
    DecisionEvent,
    LlmRequestEvent,
    LlmResponseEvent,
    NoteEvent,
    ProposedCall,
    RunFinishedEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    ToolCallEvent,
    TraceError,
    TraceWriter,
    Usage,
    is_secret_key,
    iter_trace,
    read_trace,
    redact,
    redact_text,
    tool_calls,
)

RUN = "run-20250101-000000"


def one_of_each() -> list:
    return [
        RunStartedEvent(
            task="glm52_mi355x",
            task_path="tasks/glm52_mi355x.yaml",
            task_sha256="ab" * 32,
            policy="scripted",
            sandbox="local",
            engine="twin",
            choice_reason="no GPU here: the twin",
            argv=["agent", "run", "tasks/glm52_mi355x.yaml"],
        ),
        DecisionEvent(
            step=1,
            policy="scripted",
            stage="launch",
            rationale="start the server with the task's flags",
            proposed_calls=[ProposedCall(tool="launch_server", input={"tp_size": 4, "dp_size": 2})],
        ),
        ToolCallEvent(
            step=1,
            call_id="c1",
            tool="launch_server",
            input={"tp_size": 4, "dp_size": 2},
            result={"state": "exited", "log_tail": ["KeyError: 'model.mtp.0.weight'"]},
            ok=False,
            error="server exited during weight loading",
            wall_seconds=1.25,
            simulated_seconds=310.0,
            node_hours=0.086,
        ),
        LlmRequestEvent(
            step=2,
            call_id="l1",
            model="gpt-x",
            base_url="https://api.example.com/v1",
            messages=[{"role": "system", "content": "You bring models up."}, {"role": "user", "content": "go"}],
            tools=[{"type": "function", "function": {"name": "launch_server", "parameters": {}}}],
            params={"temperature": 0.0, "max_tokens": 512},
        ),
        LlmResponseEvent(
            step=2,
            call_id="l1",
            message={"content": None, "tool_calls": [{"id": "t1", "function": {"name": "read_file"}}]},
            usage=Usage(prompt_tokens=120, completion_tokens=30, total_tokens=150),
            wall_seconds=0.8,
        ),
        StateSnapshotEvent(step=2, state={"stage": "patch", "patches": [], "best": None, "ratio": 1.5}),
        NoteEvent(level="warning", message="ünïcödé and\nnewlines\tsurvive"),
        RunFinishedEvent(status="succeeded", summary={"throughput_tok_s": 12345.6}),
    ]


def test_round_trip_gives_equal_models(tmp_path: Path) -> None:
    path = tmp_path / "runs" / RUN / "trace.jsonl"
    with TraceWriter(path, RUN) as w:
        written = [w.write(e) for e in one_of_each()]
    events = read_trace(path)
    assert events == written
    assert [e.seq for e in events] == list(range(1, 9))
    assert all(e.run_id == RUN and e.schema_version == TRACE_SCHEMA_VERSION for e in events)
    assert all(e.ts.tzinfo is not None and e.ts.utcoffset() == UTC.utcoffset(None) for e in events)
    # apart from the writer's stamps, the recorded events are the ones given
    for given, got in zip(one_of_each(), events, strict=True):
        assert type(got) is type(given)
        strip = {"seq", "run_id", "ts"}
        assert got.model_dump(exclude=strip) == given.model_dump(exclude=strip)
    assert events[4].usage.model_dump()["total_tokens"] == 150
    assert tool_calls(events) == [events[2]]
    assert list(iter_trace(path)) == events
    # one line per event, each a JSON object carrying the envelope
    lines = path.read_text("utf-8").splitlines()
    assert len(lines) == 8
    first = json.loads(lines[0])
    assert first["kind"] == "run_started" and first["seq"] == 1 and first["dayzero_version"]


def test_emit(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, RUN) as w:
        e = w.emit("note", message="hello", step=7)
        assert isinstance(e, NoteEvent) and e.seq == 1 and e.step == 7 and e.run_id == RUN
        with pytest.raises(TraceError, match="unknown event kind 'bogus'"):
            w.emit("bogus", message="x")
        with pytest.raises(ValidationError):
            w.emit("note", mesage="typo")  # fields are checked: no silent garbage in the trace
        with pytest.raises(ValueError, match="run"):
            w.write(NoteEvent(message="x", run_id="another-run"))
        assert w.seq == 1
    assert read_trace(path) == [e]
    with pytest.raises(TraceError, match="closed"):
        w.emit("note", message="after close")


def test_seq_continues_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, RUN) as w:
        for i in range(3):
            w.emit("note", message=f"first {i}")
    with TraceWriter(path, RUN) as w:
        assert w.seq == 3
        assert w.emit("note", message="second").seq == 4
    assert [e.seq for e in read_trace(path)] == [1, 2, 3, 4]


def test_reopen_refuses_another_runs_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, RUN) as w:
        w.emit("note", message="x")
    with pytest.raises(TraceError, match="belongs to run"):
        TraceWriter(path, "some-other-run")


def test_second_writer_on_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, RUN), pytest.raises(TraceError, match="already open"):
        TraceWriter(path, RUN)
    with TraceWriter(path, RUN) as w:  # the lock went with the first writer
        w.emit("note", message="ok")


def test_torn_last_line_is_skipped_then_truncated(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, RUN) as w:
        w.emit("note", message="one")
        w.emit("note", message="two")
    whole = path.read_bytes()
    # a crash inside write(): half of the next line, no newline
    half_line = json.dumps(NoteEvent(message="three", run_id=RUN, seq=3).model_dump(mode="json")).encode()
    with path.open("ab") as f:
        f.write(half_line[: len(half_line) // 2])
    assert [e.message for e in read_trace(path)] == ["one", "two"]

    with TraceWriter(path, RUN) as w:
        assert w.truncated_bytes == len(half_line) // 2
        assert path.read_bytes() == whole
        assert w.emit("note", message="three").seq == 3
    events = read_trace(path)
    assert [(e.seq, e.message) for e in events] == [(1, "one"), (2, "two"), (3, "three")]


def test_torn_only_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b'{"schema_version":1,"kind":"no')
    assert read_trace(path) == []
    with TraceWriter(path, RUN) as w:
        assert w.seq == 0
        assert w.emit("note", message="first").seq == 1
    assert len(read_trace(path)) == 1


def test_complete_json_without_newline_counts_as_torn(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, RUN) as w:
        w.emit("note", message="one")
    line = path.read_bytes()
    path.write_bytes(line + line.rstrip(b"\n"))  # the newline never made it to disk
    assert len(read_trace(path)) == 1
    with TraceWriter(path, RUN) as w:
        assert w.seq == 1


SECRETS = {
    "ctor": "ctor-secret-value-42",
    "added": "added-value-9999xyz",
    "env": "abc123",
    "bearer": "xyz123456",
    "sk": "sk-live_1234567890",
}


def test_secrets_never_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, RUN, secrets=[SECRETS["ctor"], "", "abc"]) as w:
        w.emit("note", message=f"launching with {SECRETS['ctor']}")
        w.add_secret(SECRETS["added"])
        w.add_secret("")  # ignored, as is anything shorter than 4
        w.emit(
            "tool_call",
            call_id="c1",
            tool="run_command",
            input={
                "env": {"OPENAI_API_KEY": SECRETS["env"], "HF_TOKEN": "hf_aaaa", "PATH": "/usr/bin"},
                "headers": {"Authorization": f"Bearer {SECRETS['bearer']}"},
                "argv": ["curl", "-H", f"Authorization: Bearer {SECRETS['bearer']}"],
                SECRETS["added"]: "a secret as a key",
                "nested": [{"apiKey": 12345}, {"db": {"password": ["x", "y"]}}],
            },
            result={"stdout": f"using key {SECRETS['sk']} and {SECRETS['added']}"},
            ok=True,
            wall_seconds=0.1,
        )
        w.emit(
            "llm_request",
            call_id="l1",
            model="m",
            base_url="https://api.example.com/v1",
            messages=[{"role": "user", "content": f"my key is {SECRETS['sk']}"}],
            params={"api_key": SECRETS["sk"], "max_tokens": 100, "extra_headers": {"x-api-key": "qqqqqqqq"}},
        )
        w.emit("llm_response", call_id="l1", wall_seconds=0.5, usage={"prompt_tokens": 5, "completion_tokens": 6})
    raw = path.read_bytes()
    for value in [*SECRETS.values(), "hf_aaaa", "12345", "qqqqqqqq"]:
        assert value.encode() not in raw, value
    assert b"***" in raw

    events = read_trace(path)
    call = events[1]
    assert call.input["env"] == {"OPENAI_API_KEY": "***", "HF_TOKEN": "***", "PATH": "/usr/bin"}
    assert call.input["headers"] == {"Authorization": "***"}
    assert call.input["argv"][2] == "Authorization: Bearer ***"
    assert call.input["***"] == "a secret as a key"
    assert call.input["nested"] == [{"apiKey": "***"}, {"db": {"password": "***"}}]
    assert call.result["stdout"] == "using key *** and ***"
    # token counts are not tokens
    assert events[2].params["max_tokens"] == 100
    assert events[3].usage.prompt_tokens == 5 and events[3].usage.completion_tokens == 6


def test_write_returns_the_recorded_event(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, RUN, secrets=["hunter22"]) as w:
        recorded = w.emit("note", message="pw hunter22")
    assert recorded.message == "pw ***"
    assert read_trace(path) == [recorded]


def test_redact_public_functions() -> None:
    assert redact_text("a hunter22 b", ["hunter22"]) == "a *** b"
    assert redact_text("Authorization: bearer abc.def-ghi", []) == "Authorization: bearer ***"
    assert redact_text("key=sk-proj_ABCDEFGH12 end") == "key=*** end"
    assert redact_text("task-glm52_mi355x and disk-abcdefghij stay") == "task-glm52_mi355x and disk-abcdefghij stay"
    assert redact_text("sk-short stays") == "sk-short stays"
    # longest secret first, so overlapping values are masked whole
    assert redact_text("abcd1234", ["abcd", "abcd1234"]) == "***"
    obj = {"a": ("hunter22", 1, None, True), "token": None, "Token": "", "list": [{"secret": {"k": "v"}}]}
    assert redact(obj, ["hunter22"]) == {
        "a": ("***", 1, None, True),
        "token": None,
        "Token": "***",
        "list": [{"secret": "***"}],
    }
    assert obj["a"][0] == "hunter22"  # a copy, not in place


@pytest.mark.parametrize(
    "key",
    ["OPENAI_API_KEY", "api_key", "api-key", "apiKey", "x-api-key", "APIKEY", "HF_TOKEN", "token", "accessToken",
     "access_token", "client_secret", "AWS_SECRET_ACCESS_KEY", "password", "DB_PASSWORD", "Authorization",
     "proxy-authorization", "secrets"],
)  # fmt: skip
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key", ["max_tokens", "prompt_tokens", "completion_tokens", "tokenizer", "tokenizer_path", "keys", "api", "PATH"]
)
def test_not_secret_keys(key: str) -> None:
    assert not is_secret_key(key)


def write_lines(path: Path, n: int = 3) -> list[bytes]:
    with TraceWriter(path, RUN) as w:
        for i in range(n):
            w.emit("note", message=f"line {i}")
    return path.read_bytes().splitlines(keepends=True)


def test_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    lines = write_lines(path)
    lines[1] = lines[1][:20] + b"\n"  # a cut line that is not the last one
    path.write_bytes(b"".join(lines))
    with pytest.raises(TraceError, match=rf"{path.name}:2: not valid JSON"):
        read_trace(path)
    it = iter_trace(path)
    assert next(it).seq == 1  # the lines before it still read lazily
    with pytest.raises(TraceError, match=":2:"):
        next(it)


def test_corrupt_last_complete_line_refuses_append(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    lines = write_lines(path)
    lines[-1] = b"garbage\n"
    path.write_bytes(b"".join(lines))
    with pytest.raises(TraceError, match=rf"{path.name}:3: cannot append"):
        TraceWriter(path, RUN)


def rewrite_line(path: Path, index: int, **changes: object) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    data = json.loads(lines[index])
    data.update(changes)
    lines[index] = json.dumps(data).encode() + b"\n"
    path.write_bytes(b"".join(lines))


def test_unknown_kind_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    write_lines(path)
    rewrite_line(path, 1, kind="teleport")
    with pytest.raises(TraceError, match=r":2: unknown event kind 'teleport'"):
        read_trace(path)


def test_unknown_schema_version_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    write_lines(path)
    rewrite_line(path, 0, schema_version=TRACE_SCHEMA_VERSION + 1)
    with pytest.raises(TraceError, match=r":1: unsupported schema_version 2"):
        read_trace(path)
    write_lines(path := tmp_path / "t2.jsonl")
    rewrite_line(path, 2, schema_version=99)
    with pytest.raises(TraceError, match="schema_version 99"):
        TraceWriter(path, RUN)


def test_bad_fields_and_seq_order_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    write_lines(path)
    rewrite_line(path, 1, level="catastrophic")
    with pytest.raises(TraceError, match=r":2: note.level: Input should be"):
        read_trace(path)
    write_lines(path := tmp_path / "t2.jsonl")
    rewrite_line(path, 2, seq=1)
    with pytest.raises(TraceError, match=r":3: seq 1 does not follow 2"):
        read_trace(path)


def test_concurrent_writers_threads(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    threads_n, per_thread = 4, 200
    with TraceWriter(path, RUN, secrets=["s3cr3t-value"]) as w:
        barrier = threading.Barrier(threads_n)

        def work(t: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                w.emit("tool_call", call_id=f"{t}-{i}", tool="t", input={"i": i, "k": "s3cr3t-value"}, ok=True,
                       wall_seconds=0.0, step=t)  # fmt: skip

        threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    raw = path.read_bytes()
    assert raw.count(b"\n") == threads_n * per_thread and b"s3cr3t-value" not in raw
    events = read_trace(path)
    assert [e.seq for e in events] == list(range(1, threads_n * per_thread + 1))
    assert len({e.call_id for e in events}) == threads_n * per_thread
    for t in range(threads_n):  # each thread's events in its own order
        assert [e.input["i"] for e in events if e.step == t] == list(range(per_thread))


def test_sigkill_mid_run_then_resume(tmp_path: Path) -> None:
    """A writer process killed at an arbitrary moment leaves a trace that reads and resumes cleanly."""
    path = tmp_path / "trace.jsonl"
    code = (
        "import sys; from agent.trace import TraceWriter\n"
        f"w = TraceWriter({str(path)!r}, {RUN!r})\n"
        "i = 0\n"
        "while True:\n"
        "    w.emit('state_snapshot', state={'i': i, 'pad': 'x' * 5000}, step=i); i += 1\n"
        "    if i == 20: print('ready', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=Path(__file__).parents[2])
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = read_trace(path)
    assert len(before) >= 20 and [e.seq for e in before] == list(range(1, len(before) + 1))
    with TraceWriter(path, RUN) as w:
        assert w.emit("note", message="resumed").seq == len(before) + 1
    assert read_trace(path)[:-1] == before
