"""The tests' forked ``agent`` commands (``tests/agent_process.py``) look, from outside, like fresh ones."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.agent_process import run_cli


@pytest.mark.parametrize("args", [["--help"], ["no-such-command"], ["run", "no-such-task.yaml"]])
def test_a_forked_command_answers_as_a_fresh_one(tmp_path, args):
    env = {**os.environ, "COLUMNS": "97"}
    forked, fresh = (run_cli(args, cwd=tmp_path, env=env, fresh=f) for f in (False, True))
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert max(len(line) for line in forked.stdout.splitlines() + forked.stderr.splitlines()) <= 97


def test_a_forked_command_reads_paths_from_its_own_folder(tmp_path):
    (tmp_path / "t.yaml").write_text("name: [unclosed\n")
    forked = run_cli(["run", "t.yaml"], cwd=tmp_path)
    assert forked.returncode == 2 and forked.stdout.startswith("error: t.yaml:2: not valid YAML"), forked.stdout
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # nothing started


def test_a_command_past_its_timeout_is_killed(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(["ui", "--port", "0", "--runs", str(tmp_path)], cwd=tmp_path, timeout=5)


def test_a_lost_fork_server_is_replaced_and_an_unreachable_one_falls_back_to_a_fresh_process(tmp_path):
    from tests import agent_process

    assert run_cli(["--help"], cwd=tmp_path).returncode == 0
    owner, server, path = agent_process._server
    server.kill()
    server.wait()
    assert run_cli(["--help"], cwd=tmp_path).returncode == 0  # a new server
    assert agent_process._server[1] is not server and agent_process._server[1].poll() is None
    os.unlink(agent_process._server[2])  # its socket gone: nothing can connect
    before = agent_process.forked_cpu()
    answer = run_cli(["no-such-command"], cwd=tmp_path)
    assert answer.returncode == 2 and "No such command" in answer.stderr
    assert agent_process.forked_cpu() == before  # not forked: a fresh interpreter answered
    agent_process._stop(agent_process._server[1])  # the next test starts its own
