"""The sandbox's boundaries: only processes and containers it started are ever killed (a pid, a command line or
a label prefix is not enough), a live run's workspace cannot be opened twice, the engine never inherits the
agent's secrets, tool calls cannot inject loader or interpreter hooks, GPU holds of dead processes are dropped,
crashed launches cost node time, and containers are never privileged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandboxes.base import RunLocked, SandboxError
from sandboxes.local import TOKEN_ENV, WORKSPACE_ENV, LocalSandbox, _environ, process_start_time
from sandboxes.select import choose, open_workspace
from tasks.spec import load_task
from tools.context import ToolContext
from tools.runner import ToolRunner
from tools.server import phase_seconds
from tools.trials import TrialSpec, gpu_subset

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def _alive(pid: int) -> bool:
    """Running (not a zombie, not gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def _wait_dead(pid: int, proc: subprocess.Popen | None = None) -> bool:
    for _ in range(200):
        if proc is not None and proc.poll() is not None:
            return True
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def foreign():
    """Process groups this sandbox did not start (as any other program of the user's)."""
    procs: list[subprocess.Popen] = []

    def start(env: dict[str, str] | None = None) -> subprocess.Popen:
        p = subprocess.Popen(SLEEP, start_new_session=True, env={**os.environ, **(env or {})})
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


# --- killing only what it started ---------------------------------------------------------------------------


def test_a_forged_process_record_kills_nothing_foreign(tmp_path, foreign):
    """The record names a foreign group by pid, with its true start time and command line; another process even
    carries the workspace's path marker: none of them carries the workspace's token, so none is killed."""
    sb = LocalSandbox(tmp_path / "ws")
    victim = foreign()
    marked = foreign({WORKSPACE_ENV: str(sb.root)})  # the old marker: anyone can set it
    record = {"forged": {str(p.pid): {"start": process_start_time(p.pid), "argv": SLEEP} for p in (victim, marked)}}
    (sb.root / ".dayzero-servers.json").write_text(json.dumps(record))
    assert sb.reap_stale() == []
    assert victim.poll() is None and marked.poll() is None
    sb.close()


def test_a_recorded_pid_that_now_names_another_process_is_spared(tmp_path, foreign):
    """A killed run's server whose pid is recorded with another start time (the pid was reused) is not killed
    through the record; a live server of the killed run is killed (found by its token)."""
    first = LocalSandbox(tmp_path / "ws")
    h = first.start_server(SLEEP, {}, tmp_path / "a.log", first.free_port())
    record = json.loads((first.root / ".dayzero-servers.json").read_text())
    assert record[first.id][str(h.pid)]["start"] == process_start_time(h.pid)
    victim = foreign()
    record[first.id][str(victim.pid)] = {"start": process_start_time(victim.pid) + 1, "argv": SLEEP}
    (first.root / ".dayzero-servers.json").write_text(json.dumps(record))
    second = LocalSandbox(tmp_path / "ws")
    assert second.reap_stale() == [h.pid]
    assert _wait_dead(h.pid)
    assert victim.poll() is None
    second.close()


def test_leftover_commands_of_a_killed_run_are_reaped_too(tmp_path):
    """A benchmark command still running when the agent died carries the token as well."""
    ws = tmp_path / "ws"
    LocalSandbox(ws)  # makes the workspace's token
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from sandboxes.local import LocalSandbox
        LocalSandbox(Path({str(ws)!r})).run({SLEEP!r}, timeout_s=120)
    """)
    agent = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    token = (ws / ".dayzero-token").read_text().strip()
    command = None
    for _ in range(200):
        for proc_dir in Path("/proc").glob("[0-9]*"):
            try:
                environ = (proc_dir / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"{TOKEN_ENV}={token}".encode() in environ and int(proc_dir.name) != agent.pid:
                command = int(proc_dir.name)
        if command:
            break
        time.sleep(0.05)
    assert command, "the command never started"
    os.kill(agent.pid, signal.SIGKILL)  # the agent dies mid-command; the command's own group lives on
    agent.wait()
    assert _alive(command)
    again = LocalSandbox(ws)
    assert command in again.reap_stale()
    assert _wait_dead(command)
    again.close()


# --- the run lock -----------------------------------------------------------------------------------------


def _holder(ws: Path) -> subprocess.Popen:
    """Another process holding the workspace (a live run)."""
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from sandboxes.local import LocalSandbox
        LocalSandbox(Path({str(ws)!r})).claim()
        print("held", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_open_of_a_live_run_is_refused_before_touching_anything(tmp_path):
    task = load_task("tasks/glm52_mi355x.yaml")
    choice = choose(task, "local")
    ws = tmp_path / "run" / "workspace"
    first, _ = open_workspace(task, choice, ws, "live")
    h = first.start_server(SLEEP, {}, tmp_path / "a.log", first.free_port())
    leftover = ws / "model" / ".git" / "index.lock"  # what opening a workspace would clear
    leftover.write_text("")
    record = (ws / ".dayzero-servers.json").read_text()
    with pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
        open_workspace(task, choice, ws, "live")
    assert leftover.exists() and (ws / ".dayzero-servers.json").read_text() == record
    assert first._peek_exit(first._servers[h.id]) is None  # the live run's server is untouched
    first.close()
    second, _ = open_workspace(task, choice, ws, "live")  # released on close
    assert not leftover.exists()
    second.close()


def test_the_lock_of_another_live_process_blocks_and_a_dead_ones_does_not(tmp_path):
    ws = tmp_path / "ws"
    holder = _holder(ws)
    try:
        with pytest.raises(RunLocked, match=f"pid {holder.pid}"):
            LocalSandbox(ws).claim()
    finally:
        holder.kill()  # SIGKILL: no cleanup runs; the kernel drops the lock with the process
        holder.wait()
    sb = LocalSandbox(ws)
    sb.claim()
    assert (ws / ".dayzero-run.lock").read_text().strip() == str(os.getpid())
    sb.close()


# --- the engine's environment -----------------------------------------------------------------------------


SECRETS = {"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://x", "ANY_API_KEY": "k", "GH_TOKEN": "t",
           "MY_SECRET_THING": "s", "HF_TOKEN": "h", "AWS_SECRET_ACCESS_KEY": "a"}  # fmt: skip


def test_the_engine_never_inherits_the_agents_secrets(tmp_path, monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("UNRELATED_HOST_VAR", "u")
    monkeypatch.setenv("SGLANG_SOMETHING", "1")
    with LocalSandbox(tmp_path / "ws") as sb:
        h = sb.start_server(SLEEP, {"TASK_VAR": "t"}, tmp_path / "a.log", sb.free_port())
        names = {e.split(b"=", 1)[0].decode() for e in _environ(h.pid) if e}
        assert not names & set(SECRETS) and "UNRELATED_HOST_VAR" not in names
        assert {"PATH", "SGLANG_SOMETHING", "TASK_VAR", TOKEN_ENV} <= names
        out = sb.run([sys.executable, "-c", "import os; print(sorted(os.environ))"]).stdout
        assert not any(k in out for k in SECRETS) and "SGLANG_SOMETHING" in out


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
                                  "BASH_ENV", "ENV", "PATH", "DAYZERO_SANDBOX_TOKEN", "ld_audit", "A B"])  # fmt: skip
def test_tool_calls_cannot_set_loader_or_interpreter_hooks(tmp_path, name):
    task = load_task("tasks/glm52_mi355x.yaml")
    sb = LocalSandbox(tmp_path / "ws")
    ctx = ToolContext(task=task, engine_name="twin", engine=task.engines.twin, sandbox=sb, run_id="env",
                      run_dir=tmp_path / "run")  # fmt: skip
    rec = ToolRunner(ctx).call("launch_server", {"flags": {"tp-size": 8}, "env": {name: "/tmp/x"}})
    assert not rec.ok and rec.error.startswith("invalid arguments for launch_server") and "env" in rec.error
    assert not (tmp_path / "run" / "logs").exists()  # nothing was started
    with pytest.raises(ValueError, match="refused|not an environment variable"):
        TrialSpec(flags={}, workload="w", env={name: "x"})
    assert TrialSpec(flags={}, workload="w", env={"SGLANG_USE_AITER": "1", "HIP_VISIBLE_DEVICES": "0"}).env
    sb.close()


def test_local_mode_says_the_engine_runs_unconfined():
    assert "unconfined" in choose(load_task("tasks/glm52_mi355x.yaml"), "local").reason


# --- GPU ledger ---------------------------------------------------------------------------------------------


def test_gpu_holds_of_dead_processes_are_dropped(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(dead.pid)
    dead.wait()
    import socket

    ledger = {"killed": {"host": socket.gethostname(), "pid": dead.pid, "start": start, "thread": 1,
                         "ids": list(range(8))}}  # fmt: skip
    (tmp_path / ".dayzero-gpus.json").write_text(json.dumps(ledger))
    with gpu_subset(tmp_path, 4, 8, timeout_s=0.5) as ids:  # would time out if the dead hold counted
        assert ids == [0, 1, 2, 3]
        with pytest.raises(TimeoutError), gpu_subset(tmp_path, 8, 8, timeout_s=0.3):  # a live hold still counts
            pass
        with gpu_subset(tmp_path, 4, 8, timeout_s=0.5) as other:
            assert other == [4, 5, 6, 7]
    assert json.loads((tmp_path / ".dayzero-gpus.json").read_text()) == {}


# --- a crashed launch costs node time --------------------------------------------------------------------------


def test_a_crashed_launch_is_charged_the_node_time_it_held(tmp_path):
    task = load_task("tasks/glm52_mi355x.yaml")
    choice = choose(task, "local")
    run_dir = tmp_path / "run"
    sandbox, repos = open_workspace(task, choice, run_dir / "workspace", "crash")
    ctx = ToolContext(task=task, engine_name=choice.engine, engine=task.engines.twin, sandbox=sandbox, run_id="crash",
                      run_dir=run_dir, repos=repos)  # fmt: skip
    flags = {"tp-size": 4, "speculative-algorithm": "EAGLE", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
             "speculative-num-draft-tokens": 4}  # the released checkpoint's MTP layer does not load  # fmt: skip
    rec = ToolRunner(ctx).call("launch_server", {"flags": flags})
    sandbox.close()
    assert rec.result["status"] == "crashed"
    held = phase_seconds((run_dir / rec.result["log_path"]).read_text())
    assert held > 0
    assert rec.cost.simulated_seconds == pytest.approx(held)
    assert rec.cost.node_hours == pytest.approx(held / 3600 * 4 / task.hardware.gpus)


# --- containers ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_client():
    from tests.docker_engine import docker_or_skip

    docker_or_skip(image=None)
    import docker

    client = docker.from_env()
    try:
        client.images.get("dayzero-twin:latest")
    except docker.errors.ImageNotFound:
        pytest.skip("image dayzero-twin:latest not built (agent twin image)")
    return client


def _spec(**kw):
    from tasks.spec import DockerSpec

    return DockerSpec(**{"image": "dayzero-twin:latest", "engine": "twin", "devices": [], "group_add": [],
                         "shm_size": "64m", **kw})  # fmt: skip


def test_containers_are_unprivileged_with_only_the_named_devices(docker_client, tmp_path):
    from sandboxes.docker import DockerSandbox

    sb = DockerSandbox(tmp_path / "ws", _spec(devices=["/dev/zero"]), run_id=f"dev-{tmp_path.name}")
    try:
        h = sb.start_server(["sleep", "60"], {}, tmp_path / "a.log", sb.free_port())
        host = docker_client.api.inspect_container(h.id)["HostConfig"]
        assert host["Privileged"] is False
        assert [d["PathOnHost"] for d in host["Devices"]] == ["/dev/zero"]
        assert host["CapAdd"] == ["SYS_PTRACE"]
    finally:
        sb.close()
    for caps in (["SYS_ADMIN"], ["ALL"], ["cap_sys_module"]):
        bad = DockerSandbox(tmp_path / "ws", _spec(cap_add=caps), run_id=f"cap-{tmp_path.name}")
        with pytest.raises(SandboxError, match="never given the host"):
            bad.start_server(["sleep", "60"], {}, tmp_path / "b.log", bad.free_port())
        assert bad.ours() == []
        bad.close()


def test_trial_containers_of_a_killed_run_are_reaped_and_lookalikes_are_not(docker_client, tmp_path):
    from sandboxes.docker import DockerSandbox

    run_id = f"trials-{tmp_path.name}"
    ws = tmp_path / "ws"
    trial = DockerSandbox(ws, _spec(), run_id=f"{run_id}-t001-0")  # as run_trial names a trial's sandbox
    h = trial.start_server(["sleep", "120"], {}, tmp_path / "t.log", trial.free_port())
    lookalike = docker_client.containers.run("dayzero-twin:latest", command=["sleep", "120"], detach=True,
                                             labels={"dayzero.run": f"{run_id}-t002-0", "dayzero.sandbox": "x"})  # fmt: skip
    try:
        reopened = DockerSandbox(ws, _spec(), run_id=run_id)  # the run opened again after the agent was killed
        assert reopened.reap_stale() == [h.id]
        lookalike.reload()
        assert lookalike.status == "running"
        reopened.close()
    finally:
        lookalike.remove(force=True)
        trial.close()


def test_a_write_replaces_the_file_whole(tmp_path):
    """write_file writes beside and renames over, so a kill mid-write cannot leave a truncated file: the file keeps
    its mode, and no temporary file stays behind."""
    import os
    import stat

    from sandboxes.local import LocalSandbox

    (tmp_path / "ws").mkdir()
    target = tmp_path / "ws" / "run.sh"
    target.write_text("old\n")
    target.chmod(0o755)
    inode = target.stat().st_ino
    LocalSandbox(tmp_path / "ws").write_file("run.sh", "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o755
    assert target.stat().st_ino != inode  # a new file renamed into place, not the old one truncated
    assert not [n for n in os.listdir(tmp_path / "ws") if n.endswith(".dayzero-tmp")]


# the agent's secrets, planted in its environment: long and unique, so that finding one anywhere means a leak
PLANTED = {"OPENAI_API_KEY": "sk-planted-5b0f9c3e7a21d84e", "HF_TOKEN": "hf_planted_9d41c7e2b6a03f58",
           "SOMETHING_SECRET": "planted-secret-2c8e61f0d9b7a435", "GH_TOKEN": "ghp_planted_71e3a9c05d2b8f64"}  # fmt: skip


def test_containers_never_see_the_agents_secrets(docker_client, tmp_path, monkeypatch):
    """The Docker task opened as a run opens it, its tools run as a run runs them: `docker inspect` of every
    container they make (taken as each is made: a command's container is gone once it ends), and the environment
    of what runs in them (the server, a command exec'd beside it), hold none of the agent's secrets."""
    from docker.models.containers import ContainerCollection

    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    inspected: dict[str, dict] = {}
    make = ContainerCollection.run

    def made_and_inspected(self, *args, **kwargs):
        container = make(self, *args, **kwargs)
        inspected[container.id] = docker_client.api.inspect_container(container.id)
        return container

    monkeypatch.setattr(ContainerCollection, "run", made_and_inspected)
    task = load_task("tasks/glm52_mi355x_docker.yaml")
    choice = choose(task, "docker")
    run_dir = tmp_path / "run"
    sandbox, repos = open_workspace(task, choice, run_dir / "workspace", f"planted-{tmp_path.name}")
    ctx = ToolContext(task=task, engine_name=choice.engine, engine=task.engines.twin, sandbox=sandbox,
                      run_id=sandbox.run_id, run_dir=run_dir, repos=repos)  # fmt: skip
    runner = ToolRunner(ctx)
    try:
        launch = runner.call("launch_server", {"flags": {"tp-size": 8}})
        assert launch.ok and launch.result["moe_fallback_shapes"], launch.error
        assert runner.call("run_benchmark", {"workload": "single_stream"}).ok  # exec'd beside the server
        show = "tr '\\0' '\\n' < /proc/1/environ; echo; env"  # the server's environment, then a command's
        inside = sandbox.run(["sh", "-c", show], env=ctx.engine_env())
        assert inside.exit_code == 0 and "TWIN_TIME_SCALE" in inside.stdout, inside.stderr
        for c in docker_client.api.containers(all=True, filters={"label": f"dayzero.token={sandbox.token}"}):
            inspected[c["Id"]] = docker_client.api.inspect_container(c["Id"])  # as they are now
        assert runner.call("stop_server", {}).ok
        # no server up: the tuner runs in a container of its own
        tune = runner.call("tune_moe", {"shapes": launch.result["moe_fallback_shapes"]})
        assert tune.ok, tune.error
    finally:
        sandbox.close()
    assert {i["Config"]["Labels"]["dayzero.role"] for i in inspected.values()} == {"server", "command"}
    assert all(i["Config"]["Labels"]["dayzero.run"] == sandbox.run_id for i in inspected.values())
    for name, value in PLANTED.items():
        assert value not in inside.stdout and name not in inside.stdout
        for info in inspected.values():  # Config (Env, Cmd, Labels), HostConfig, Mounts: all of it
            text = json.dumps(info)
            assert value not in text and name not in text, (name, info["Config"]["Labels"]["dayzero.role"])
    assert docker_client.containers.list(all=True, filters={"label": f"dayzero.token={sandbox.token}"}) == []
