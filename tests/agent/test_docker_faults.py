"""A Docker engine that stops mid-run: the fault is injected between the agent and the engine, never by stopping
the machine's dockerd (other tests and people use it). The agent talks to Docker through a forwarding proxy on a
unix socket of the test's (``DOCKER_HOST``); the proxy goes away as a stopped engine does (its socket refuses,
its connections drop, the request in flight unanswered) at the first Docker request after the run's trace
records its first commit. That request stops the server the run had up, so the containers running then are still
running behind the proxy, as after a daemon restart with live-restore.

The run stops on it in one line naming Docker (exit 5), its trace says so, and nothing finished is lost; while the
engine is away ``agent resume`` refuses in one line (exit 5); once it is back, ``agent resume`` reaps the
stopped run's containers and finishes the run, with every commit once and no container of the run left.

The run is the default task in Docker cut short: its only target is a single-stream figure reached after the
run's first three fixes, so it commits once before the fault and twice after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from agent.trace import read_trace
from tests.agent.conftest import DEFAULT_TASK
from tests.docker_engine import docker_or_skip, twin_sandbox
from tests.shared_runs import run_agent

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "docker-lost"


class DockerProxy:
    """Forwards a unix socket to the Docker engine's, byte for byte, until :meth:`stop` (or ``down_when()``
    holding when the agent sends a request): then the socket refuses and every open connection drops, the request
    in hand never forwarded. :meth:`start` again brings it back at the same path."""

    def __init__(self, path: Path, engine: str, down_when: Callable[[], bool] | None = None):
        self.path, self.engine, self.down_when = str(path), engine, down_when
        self.went_down_at: bytes | None = None  # the start of the request the engine went away on
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None

    def start(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(self.path)
        listener.listen(64)
        listener.settimeout(0.1)  # the accept loop sees stop() within this
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            if self._listener is None:
                return
            self._listener.close()  # the socket file stays, refusing, as a stopped daemon's does
            self._listener = None
            for s in self._open:
                _drop(s)
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by stop()
                return
            client.settimeout(None)
            upstream = socket.socket(socket.AF_UNIX)
            try:
                upstream.connect(self.engine)
            except OSError:
                _drop(client), _drop(upstream)
                continue
            with self._lock:
                if self._listener is not listener:
                    _drop(client), _drop(upstream)
                    return
                self._open |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_agent: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_agent and self.down_when is not None and self.down_when():
                    self.went_down_at, self.down_when = data[:120], None
                    self.stop()
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _drop(src), _drop(dst)


def _drop(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()


def engine_socket() -> str:
    """The Docker engine's unix socket, as this process reaches it."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the proxy forwards a unix socket; DOCKER_HOST is {host}")
    return host.removeprefix("unix://")


@pytest.fixture(scope="module")
def docker_engine() -> str:
    """The engine's socket; without a Docker engine (or the twin's image) this skips, except in CI."""
    docker_or_skip()
    return engine_socket()


def agent(cwd: Path, docker_host: str, *args: str) -> subprocess.CompletedProcess:
    return run_agent(cwd, *args, env={**os.environ, "DOCKER_HOST": docker_host})


def committed(trace: Path) -> bool:
    """Whether the trace records a commit (read as the run writes it: a torn last line is not one yet)."""
    try:
        lines = trace.read_text().splitlines()
    except FileNotFoundError:
        return False
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("kind") == "tool_call" and event.get("tool") == "commit" and event.get("ok"):
            return True
    return False


def containers(token: str, *, running: bool = False) -> list[str]:
    """The run's containers (its own and its trials'), by the workspace's token label."""
    args = ["docker", "ps", "-q", "--filter", f"label=dayzero.token={token}"] + ([] if running else ["-a"])
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()


def files(run_dir: Path) -> dict[str, str]:
    """The sha256 of every server and tuner log and benchmark record of the run."""
    out = {}
    for folder in ("logs", "bench"):
        for p in sorted((run_dir / folder).glob("*")):
            out[f"{folder}/{p.name}"] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_a_docker_engine_that_stops_mid_run_then_comes_back(docker_engine, tmp_path):
    task = tmp_path / "docker_short.yaml"
    task.write_text(yaml.safe_dump({
        "extends": str(DEFAULT_TASK),
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 185}],
        "budgets": {"after_targets": {"node_hours": 0}},
        "sandbox": twin_sandbox(),
    }))  # fmt: skip
    run_dir = tmp_path / "runs" / RUN_ID
    trace = run_dir / "trace.jsonl"
    sock_dir = Path(tempfile.mkdtemp(prefix="dz-docker-"))  # short: a unix socket's path holds 107 bytes
    proxy = DockerProxy(sock_dir / "docker.sock", docker_engine, down_when=lambda: committed(trace))
    proxy.start()
    docker_host = f"unix://{proxy.path}"
    token = None
    try:
        stopped = agent(tmp_path, docker_host, "run", str(task), "--policy", "playbook", "--run-id", RUN_ID)
        assert proxy.went_down_at is not None, stopped.stdout[-2000:] + stopped.stderr[-2000:]
        token = (run_dir / "workspace" / ".dayzero-token").read_text().strip()

        # stopped, not finished: one line naming Docker, the resume command, exit 5, no traceback
        assert stopped.returncode == 5, stopped.stdout[-2000:] + stopped.stderr[-2000:]
        errors = [ln for ln in stopped.stdout.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "infrastructure failure: the Docker engine stopped answering" in errors[0]
        assert errors[0].endswith(f"agent resume {RUN_ID}")
        assert "Traceback" not in stopped.stdout + stopped.stderr and not (run_dir / "summary.json").exists()
        events = read_trace(trace)
        assert events[-1].kind == "note" and events[-1].level == "error"
        assert "the Docker engine stopped answering" in events[-1].message  # the trace says why it stopped
        calls = [e for e in events if e.kind == "tool_call"]
        # the fault is no call's failure: no launch recorded as failing on it, the commit and trials before it kept
        assert not [c for c in calls if "Docker" in (c.error or "")]
        commit = next(c for c in calls if c.tool == "commit")
        launched = [(c.input["flags"], c.result["status"]) for c in calls if c.tool == "launch_server"]
        running = containers(token, running=True)
        assert running  # the server that was up still runs, on the engine behind the proxy
        before = {"trace": trace.read_bytes(), "files": files(run_dir)}

        # while the engine is away, resume says so in one line and changes nothing
        away = agent(tmp_path, docker_host, "resume", RUN_ID)
        assert away.returncode == 5 and len(away.stdout.strip().splitlines()) == 1, away.stdout + away.stderr
        assert "no Docker engine" in away.stdout and trace.read_bytes() == before["trace"]

        proxy.start()  # the engine is back
        resumed = agent(tmp_path, docker_host, "resume", RUN_ID)
        assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
        assert "outcome: every target met (exit code 0)" in " ".join(resumed.stdout.split())
    finally:
        proxy.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
        if token is None and (run_dir / "workspace" / ".dayzero-token").exists():
            token = (run_dir / "workspace" / ".dayzero-token").read_text().strip()
        leftover = containers(token) if token else []
        if leftover:  # a failed assertion above: leave nothing running on the engine
            subprocess.run(["docker", "rm", "-f", *leftover], capture_output=True)
    assert not leftover  # the stopped run's containers reaped on resume, the resumed run's removed at its end

    # nothing lost: the trace goes on from where it stopped, the earlier files are as they were, commits once
    assert trace.read_bytes().startswith(before["trace"])
    assert {k: v for k, v in files(run_dir).items() if k in before["files"]} == before["files"]
    events = read_trace(trace)
    kinds = Counter(e.kind for e in events)
    assert kinds["run_started"] == 1 and kinds["run_finished"] == 1
    ids = Counter(e.call_id for e in events if e.kind == "tool_call")
    assert all(n == 1 for n in ids.values()), [k for k, n in ids.items() if n > 1]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["outcome"]["exit_code"] == 0 and summary["targets"]["single_stream"]["met"]
    commits = summary["commits"]
    assert len(commits) == len({c["title"] for c in commits}) == len({c["patch"] for c in commits}) == 3
    assert commits[0]["commits"] == [c["sha"] for c in commit.result["commits"]]
    assert [(t["flags"], t["status"]) for t in summary["trials"][: len(launched)]] == launched  # trials kept
    for repo in ("model", "sglang"):  # the branch holds each fix once
        log = subprocess.run(["git", "-C", str(run_dir / "workspace" / repo), "log", "--format=%s"],
                             capture_output=True, text=True, check=True).stdout.splitlines()  # fmt: skip
        assert len(log) == len(set(log)), log
    audit = agent(tmp_path, f"unix://{docker_engine}", "replay", RUN_ID)  # the trace and the state agree
    assert audit.returncode == 0, audit.stdout[-3000:]


def test_every_docker_call_without_the_engine_fails_in_one_clear_line(docker_engine, tmp_path, monkeypatch):
    """The sandbox's own calls, one by one, with the engine gone: each is SandboxUnavailable naming Docker and
    what it was doing (the tools let it through), closing does not raise, and once the engine is back the next
    sandbox of the run reaps the container the lost one left running."""
    from sandboxes.base import SandboxUnavailable
    from sandboxes.docker import DockerSandbox
    from sandboxes.twin.workspace.materialize import materialize
    from tasks.spec import DockerSpec

    sock_dir = Path(tempfile.mkdtemp(prefix="dz-docker-"))
    proxy = DockerProxy(sock_dir / "docker.sock", docker_engine)
    proxy.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{proxy.path}")
    spec = DockerSpec(image="dayzero-twin:latest", engine="twin", devices=[], group_add=[], shm_size="64m")
    root = tmp_path / "ws"
    materialize("glm52_mi355x", root)
    run_id = f"lost-{tmp_path.name}"
    lost = DockerSandbox(root, spec, run_id=run_id)
    server = lost.start_server(["sleep", "120"], {}, tmp_path / "server.log", lost.free_port())
    idle = DockerSandbox(root, spec, run_id=run_id)  # no server: its commands get containers of their own
    try:
        proxy.stop()
        calls = [("running true", lambda: idle.run(["true"])),
                 ("reading the state of container", lambda: lost.run(["true"])),  # is its server up?
                 ("reading the state of container", lambda: lost.wait_ready(server, "ready", 5)),
                 ("stopping container", lambda: lost.stop_server(server)),
                 ("starting a server container", lambda: lost.start_server(["true"], {}, tmp_path / "b.log", 1)),
                 ("listing the run's containers", lambda: lost.ours())]  # fmt: skip
        for doing, call in calls:
            with pytest.raises(SandboxUnavailable, match=f"^the Docker engine stopped answering \\({doing}"):
                call()
        lost.close(), idle.close()  # never raise; the server's container stays, for the next open to reap
        with pytest.raises(SandboxUnavailable, match="^no Docker engine"):
            DockerSandbox(root, spec, run_id=run_id)  # e.g. a trial's sandbox
        proxy.start()
        assert containers(lost.token, running=True) == [server.id[:12]]
        again = DockerSandbox(root, spec, run_id=run_id)  # the run opened again: agent resume
        assert again.reap_stale() == [server.id]
        again.close()
    finally:
        proxy.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
        real = f"unix://{docker_engine}"
        subprocess.run(["docker", "-H", real, "rm", "-f", server.id], capture_output=True)
