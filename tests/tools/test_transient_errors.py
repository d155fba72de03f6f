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


def test_a_full_disk_is_not_retried(make_runner):
    runner, sandbox = make_runner(errno.ENOSPC, fail=1)
    rec = runner.call("edit_file", {"path": "a.txt", "old": "alpha", "new": "beta"})
    assert not rec.ok and "ENOSPC" in rec.error and rec.retried == []
    assert sandbox.writes == 1


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
