"""The twin's injected faults (``TWIN_FAULTS``, sandboxes/twin/engine/faults.py): each fires at its n-th event on the
workspace, once, and looks from outside as the real fault does."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from sandboxes.twin.engine import faults
from tests.twin.conftest import READY, LaunchFailed, free_port, running, start_server

FIXED = ["--tp-size", "4", "--dp-size", "2"]
RANDOM = ["--dataset-name", "random-ids", "--random-input-len", "1000", "--random-output-len", "100",
          "--random-range-ratio", "1", "--num-prompts", "40", "--request-rate", "2"]  # fmt: skip


def test_a_spec_names_known_faults_and_ordinals():
    assert faults.parse("crash_mid_benchmark@3, port_taken") == {"crash_mid_benchmark": 3, "port_taken": 1}
    for bad in ("nope", "port_taken@0", "port_taken@x"):
        with pytest.raises(faults.FaultSpecError):
            faults.parse(bad)


def test_each_fault_fires_once_at_its_ordinal(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_FAULTS", "port_taken@2,bench_hang@1")
    monkeypatch.setenv("TWIN_FAULT_STATE", str(tmp_path / "state"))
    assert [faults.due("launch", None) for _ in range(4)] == [None, "port_taken", None, None]
    assert [faults.due("benchmark", None) for _ in range(2)] == ["bench_hang", None]


def test_port_taken_fails_as_uvicorn_reports_it(fixed_workspace, tmp_path):
    env = {"TWIN_FAULTS": "port_taken", "TWIN_FAULT_STATE": str(tmp_path / "state")}
    with pytest.raises(LaunchFailed) as failed:
        start_server(fixed_workspace, tmp_path / "a.log", FIXED, env)
    assert "[Errno 98] error while attempting to bind on address" in failed.value.log
    assert "address already in use" in failed.value.log and "simulated" in failed.value.log
    with running(fixed_workspace, tmp_path / "b.log", FIXED, env):  # the second launch binds
        pass


def test_hang_before_ready_never_reports_ready_and_stops_on_sigterm(fixed_workspace, tmp_path):
    port = free_port()
    env = {"TWIN_FAULTS": "hang_before_ready", "TWIN_FAULT_STATE": str(tmp_path / "state"), "TWIN_TIME_SCALE": "0"}
    log = tmp_path / "hang.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path",
                                 str(fixed_workspace / "model"), "--port", str(port), *FIXED], stdout=f,
                                stderr=subprocess.STDOUT, env={**__import__("os").environ, **env})  # fmt: skip
    try:
        while "injected fault: hang_before_ready" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        assert READY not in log.read_text()
        with socket.socket() as s:  # nothing listens: a client sees the server as not up
            assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        proc.terminate()
    assert proc.wait(timeout=10) == 0


def test_crash_mid_benchmark_fails_the_later_requests_and_kills_the_server(fixed_workspace, tmp_path, monkeypatch):
    env = {"TWIN_FAULTS": "crash_mid_benchmark@2", "TWIN_FAULT_STATE": str(tmp_path / "state")}
    for k, v in env.items():  # the benchmark runs with the engine's environment, as the agent runs it
        monkeypatch.setenv(k, v)
    with running(fixed_workspace, tmp_path / "s.log", FIXED, env) as server:
        first = server.bench(tmp_path, *RANDOM)
        assert first["completed"] == 40 and server.proc.poll() is None  # the first benchmark is untouched
        second = server.bench(tmp_path, *RANDOM)
        assert 0 < second["completed"] < 40 and second["failed"] == 40 - second["completed"]
        assert any("Server disconnected" in e or "Cannot connect" in e for e in second["errors"])
        assert server.proc.wait(timeout=10) == -9  # the server process died (SIGKILL)
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{server.url}/health", timeout=2)
