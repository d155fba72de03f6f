"""A transient filesystem error during a tool (a busy file, a stale handle) is retried when the tool is safe to run
again, and the record says so; a lasting error (a full disk) or a tool that is not safe to repeat fails at once."""

from __future__ import annotations

import errno

import pytest

from sandboxes.local import LocalSandbox
from tasks.spec import load_task
from tools import runner as runner_module
from tools.context import ToolContext
from tools.runner import ToolRunner


class FlakySandbox(LocalSandbox):
    """Fails the first ``fail`` writes with ``code``, then writes."""

    def __init__(self, root, code: int, fail: int):
        super().__init__(root, run_id="flaky")
        self.code, self.fail, self.writes = code, fail, 0

    def write_file(self, path: str, text: str) -> None:
        self.writes += 1
        if self.writes <= self.fail:
            raise OSError(self.code, f"{errno.errorcode[self.code]} (injected)", path)
        super().write_file(path, text)


@pytest.fixture
def make_runner(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "RETRY_DELAYS_S", (0.0, 0.0, 0.0))
    task = load_task("tasks/glm52_mi355x.yaml")

    def make(code: int, fail: int) -> tuple[ToolRunner, FlakySandbox]:
        sandbox = FlakySandbox(tmp_path / "ws", code, fail)
        (sandbox.root / "a.txt").write_text("alpha\n")
        ctx = ToolContext(task=task, engine_name="twin", engine=task.engines.twin, sandbox=sandbox, run_id="flaky",
                          run_dir=tmp_path / "run")  # fmt: skip
        return ToolRunner(ctx), sandbox

    return make


def test_a_busy_file_is_retried_and_the_edit_made_once(make_runner):
    runner, sandbox = make_runner(errno.EBUSY, fail=2)
    rec = runner.call("edit_file", {"path": "a.txt", "old": "alpha", "new": "beta"})
    assert rec.ok, rec.error
    assert len(rec.retried) == 2 and all("EBUSY" in r for r in rec.retried)
    assert (sandbox.root / "a.txt").read_text() == "beta\n"
    assert rec.trace_fields()["retried"] == rec.retried


def test_a_transient_error_that_persists_fails_after_the_retries(make_runner):
    runner, sandbox = make_runner(errno.ESTALE, fail=100)
    rec = runner.call("edit_file", {"path": "a.txt", "old": "alpha", "new": "beta"})
    assert not rec.ok and "ESTALE" in rec.error
    assert len(rec.retried) == len(runner_module.RETRY_DELAYS_S)
    assert (sandbox.root / "a.txt").read_text() == "alpha\n"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT])
def test_a_full_or_failing_disk_is_not_retried_nor_recorded_it_stops_the_run(make_runner, code):
    """The storage's failure is not the call's: it is raised (the run stops, exit 5), never recorded as a failed
    edit a policy would reason about, and the file is as it was."""
    runner, sandbox = make_runner(code, fail=1)
    recorded = []
    runner.on_call = recorded.append
    with pytest.raises(OSError) as raised:
        runner.call("edit_file", {"path": "a.txt", "old": "alpha", "new": "beta"})
    assert raised.value.errno == code and recorded == [] and sandbox.writes == 1
    assert (sandbox.root / "a.txt").read_text() == "alpha\n"


def test_a_failed_call_quoting_a_disk_error_stops_the_run(make_runner, monkeypatch):
    """An engine, a benchmark or git that failed on the disk prints the C library's words; the call that carries
    them back is the infrastructure's failure, not the engine's."""
    from tools.server import LaunchResult

    runner, _ = make_runner(errno.EBUSY, fail=0)

    def crashed(ctx, args):
        return LaunchResult(ok=False, status="crashed", exit_code=1, summary="crashed (exit 1): unknown",
                            log_tail=["  File \"x.py\", line 3, in save", "OSError: [Errno 28] No space left on device: "
                                      "'/root/.triton/cache/x.json'"])  # fmt: skip

    tool = runner.tools["launch_server"]
    monkeypatch.setitem(runner.tools, "launch_server", type(tool)(**{**tool.__dict__, "fn": crashed}))
    with pytest.raises(OSError) as raised:
        runner.call("launch_server", {"flags": {}})
    assert raised.value.errno == errno.ENOSPC and "triton" in raised.value.strerror


def test_a_failed_call_on_a_full_run_folder_stops_the_run(make_runner, monkeypatch):
    """A program that could not even write its log leaves nothing to quote: a call that failed while the run's
    file system is full failed for it."""
    from tools import infrastructure

    runner, _ = make_runner(errno.EBUSY, fail=0)
    rec = runner.call("read_file", {"path": "missing.txt"})
    assert not rec.ok  # a failed call on a disk with room: the call's own failure
    monkeypatch.setattr(infrastructure, "FULL_BELOW_BYTES", 1 << 62)  # every file system is "full"
    with pytest.raises(OSError) as raised:
        runner.call("read_file", {"path": "missing.txt"})
    assert raised.value.errno == errno.ENOSPC
    assert runner.call("read_file", {"path": "a.txt"}).ok  # a call that worked is the call's, full or not


def test_a_tool_not_safe_to_repeat_is_not_retried(make_runner, monkeypatch):
    runner, _ = make_runner(errno.EBUSY, fail=0)
    calls = []

    def busy(ctx, args):
        calls.append(args)
        raise OSError(errno.EBUSY, "busy (injected)")

    tool = runner.tools["stop_server"]
    assert not tool.idempotent
    monkeypatch.setitem(runner.tools, "stop_server", type(tool)(**{**tool.__dict__, "fn": busy}))
    rec = runner.call("stop_server", {})
    assert not rec.ok and "busy" in rec.error and rec.retried == [] and len(calls) == 1


def test_a_clean_call_records_no_retries():
    rec = runner_module.ToolCallRecord(call_id="c", tool="read_file", input={}, result={}, ok=True, wall_seconds=0,
                                       cost=runner_module.Cost())  # fmt: skip
    assert "retried" not in rec.trace_fields()
