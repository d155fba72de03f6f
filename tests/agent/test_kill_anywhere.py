"""Kill anywhere: the agent SIGKILLed at random points of a run, then resumed, ends where an uninterrupted run of
the same task ends: the same bests, the same commits (none twice), every recorded call once, one run_finished, and
no process or container of the run left behind.

The points are drawn from the uninterrupted run's own trace (a kill lands once the killed run's trace holds that
many events), with a seeded generator: ``DAYZERO_KILL_SEED`` picks other points, ``DAYZERO_KILL_POINTS`` more of
them (``python -m pytest tests/agent/test_kill_anywhere.py`` with ``DAYZERO_KILL_POINTS=20`` is the long version).
Each point costs about one run, so the default keeps the suite short: no random point, but the fixed points where
resume once went wrong: right after a launch came up (the relaunch window; that run is then also cut between its
summary and the end of its trace, and resumed again), the runs folder filled at the launch that writes a view of
the released files, and one random point with Docker, on the single-stream stage of the task. Random points
locally come with ``DAYZERO_KILL_POINTS=N`` (and ``DAYZERO_DISK_POINTS=N`` for the disk).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from agent.trace import read_trace
from tests.agent.conftest import SHORT_RUN_ID
from tests.agent.test_agent_run import _server_pids, agent, stopping_at_the_targets
from tests.shared_runs import NO_PACING

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "glm52_mi355x.yaml"
SEED = int(os.environ.get("DAYZERO_KILL_SEED", "0"))
POINTS = int(os.environ.get("DAYZERO_KILL_POINTS", "0"))


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def killed_then_resumed(root: Path, task: Path, run_id: str, *, events: int | None = None,
                        after_calls: tuple[tuple[str, dict | None], ...] = ()) -> Path:
    """``agent run`` killed (SIGKILL, the whole process group) once its trace holds ``events`` events, then
    ``agent resume``d to the end. ``after_calls``: kill points by the call a trace record names instead, each with
    the killed process's environment (None: this process's); every process after the first is a resume."""
    trace = root / "runs" / run_id / "trace.jsonl"
    points: list[tuple[object, dict | None]] = [(events, None)] if events is not None else list(after_calls)
    for n, (point, env) in enumerate(points):
        args = ["run", str(task), "--policy", "playbook", "--run-id", run_id] if n == 0 else ["resume", run_id]
        proc = subprocess.Popen([sys.executable, "-c", "from agent.cli import app; app()", *args], cwd=root,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                env=env)  # fmt: skip
        while proc.poll() is None:
            if (_lines(trace) >= point) if isinstance(point, int) else _records(trace, str(point)):
                break
            time.sleep(0.02)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the agent dies; the servers it started (own sessions) live on
        proc.wait()
    resumed = agent(root, "resume", run_id)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    return root / "runs" / run_id


def _records(trace: Path, call_id: str) -> bool:
    try:
        return f'"call_id":"{call_id}",'.encode() in trace.read_bytes()
    except FileNotFoundError:
        return False


def end_state(run_dir: Path) -> dict:
    """What an interruption must not change: the outcome, the commits, and every trial with its figures (a
    relaunch after a resume is the run's own call, never a trial)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "finish_reason": summary["finish_reason"],
        "achieved": {k: v["achieved"] for k, v in summary["targets"].items()},
        "commits": [c["title"] for c in summary["commits"]],
        "best_flags": (summary.get("best_config") or {}).get("flags"),
        "trials": [(t["status"], t["flags"], t["metrics"]) for t in summary["trials"]],
    }


def check_clean(run_dir: Path) -> None:
    events = read_trace(run_dir / "trace.jsonl")
    kinds = Counter(e.kind for e in events)
    assert kinds["run_started"] == 1 and kinds["run_finished"] == 1, kinds
    ids = Counter(e.call_id for e in events if e.kind == "tool_call")
    assert all(n == 1 for n in ids.values()), [k for k, n in ids.items() if n > 1]  # nothing done twice
    patches = [c["patch"] for c in json.loads((run_dir / "summary.json").read_text())["commits"]]
    assert len(patches) == len(set(patches))  # no patch committed twice
    assert not _server_pids(run_dir / "workspace")  # the killed run's servers reaped, the resumed run's stopped


@pytest.fixture
def reference(short_run_root) -> tuple[Path, dict, int]:
    """An uninterrupted run of the task stopping at its targets (the shared short run): its folder, end state
    and event count."""
    run_dir = short_run_root / "runs" / SHORT_RUN_ID
    return run_dir, end_state(run_dir), _lines(run_dir / "trace.jsonl")


def kill_points(total: int) -> list[int]:
    rng = random.Random(SEED)
    return sorted(rng.randint(2, total - 1) for _ in range(POINTS))


def relaunch_window(run_dir: Path) -> str:
    """The first launch that came up after a crash (the engine fix's launch): killed right after its record, the
    process takes a server with it that the run's state says is up."""
    events = read_trace(run_dir / "trace.jsonl")
    crashed = False
    for e in events:
        if e.kind == "tool_call" and e.tool == "launch_server":
            if e.ok and crashed:
                return e.call_id
            crashed = crashed or not e.ok
    raise AssertionError("the reference run has no launch that came up after a crash")


def switch_window(run_dir: Path, after: str) -> str:
    """The first launch after the call ``after`` that came up while another configuration's server was up (a new
    trial replacing the last): killed right after its record, before the step's checkpoint, the resumed run first
    brings back the state's server, the previous configuration's, and the recorded launch must still start its own."""
    events = read_trace(run_dir / "trace.jsonl")
    up, seen = None, False
    for e in events:
        if e.kind == "tool_call" and e.tool == "launch_server":
            flags = (e.input or {}).get("flags")
            if e.ok and up is not None and flags != up and seen:
                return e.call_id
            up = flags if e.ok else None
        seen = seen or getattr(e, "call_id", None) == after
    raise AssertionError("the reference run never launches one configuration over another")


# run by the killed agent's interpreter at start-up (``sitecustomize``): once the trace holds the kill point's record,
# every checkpoint and node's writes are written half a second late, so that a kill polled right after that record
# lands before the step's checkpoint (the window where resume once measured the wrong server) every time, not now
# and then
SLOW_CHECKPOINTS = """
import os, time
import agent.checkpoints as checkpoints
import glob
MARK = ('"call_id":"%s",' % os.environ["SLOW_CHECKPOINTS_AFTER"]).encode()
def late(write):
    def written_late(self, *args, **kwargs):
        if any(MARK in open(t, "rb").read() for t in glob.glob("runs/*/trace.jsonl")):
            time.sleep(0.5)  # only once the kill point's record is in: the run up to there keeps its pace
        return write(self, *args, **kwargs)
    return written_late
# a node's writes (kept as soon as it finishes, what a resume applies) and the checkpoint after it
checkpoints.ItemSaver.put_writes = late(checkpoints.ItemSaver.put_writes)
checkpoints.ItemSaver.put = late(checkpoints.ItemSaver.put)
"""


def test_killed_with_a_server_up_ends_as_an_uninterrupted_run(reference, tmp_path):
    """Two relaunch windows in one run. Killed right after a launch came up after a crash, the resumed run launches
    that server again as its own call (not a trial). That resume is then killed right after the launch of a trial
    replacing the last one came up, before the step's checkpoint: the next resume brings back the state's server
    (the last trial's), then launches the recorded trial's configuration again and measures that (issue 42: 4 of 5
    such kills measured the last trial's server under the new trial's flags). Both end as the uninterrupted run."""
    run_dir, expected, _ = reference
    first = relaunch_window(run_dir)
    switch = switch_window(run_dir, after=first)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_CHECKPOINTS)
    slow = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")]),
            "SLOW_CHECKPOINTS_AFTER": switch}  # fmt: skip
    killed = killed_then_resumed(tmp_path, stopping_at_the_targets(tmp_path, TASK), "killed",
                                 after_calls=((first, None), (switch, slow)))  # fmt: skip
    relaunched = [(e.call_id, e.input.get("flags")) for e in read_trace(killed / "trace.jsonl")
                  if e.kind == "tool_call" and e.tool == "launch_server" and "resumed" in e.call_id]  # fmt: skip
    # after the second kill: the state's server (the last trial's) came back first, then the recorded launch's own
    assert len(relaunched) == 3 and relaunched[1][1] != relaunched[2][1], relaunched
    assert end_state(killed) == expected, f"killed after {first}, then after {switch}"
    check_clean(killed)
    killed_between_the_summary_and_the_end_of_the_trace(tmp_path, "killed")


@pytest.mark.parametrize("nth", range(POINTS))
def test_killed_at_a_random_point_ends_as_an_uninterrupted_run(reference, tmp_path, nth):
    _, expected, total = reference
    point = kill_points(total)[nth]
    run_dir = killed_then_resumed(tmp_path, stopping_at_the_targets(tmp_path, TASK), "killed", events=point)
    assert end_state(run_dir) == expected, f"killed after {point} of {total} trace events (seed {SEED})"
    check_clean(run_dir)


def killed_between_the_summary_and_the_end_of_the_trace(root: Path, run_id: str) -> None:
    """The last moments of a run: summary.json written, the trace's run_finished and the last checkpoint not. The
    run is not taken as finished; resume finishes it, with one run_finished."""
    run_dir = root / "runs" / run_id
    trace = run_dir / "trace.jsonl"
    lines = trace.read_text().splitlines(keepends=True)
    assert '"kind":"run_finished"' in lines[-1]
    trace.write_text("".join(lines[:-1]))
    con = sqlite3.connect(run_dir / "checkpoints.sqlite")
    with con:  # the finish node's checkpoint never made it to disk
        last = con.execute("SELECT checkpoint_id FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1").fetchone()[0]
        con.execute("DELETE FROM checkpoints WHERE checkpoint_id = ?", (last,))
        con.execute("DELETE FROM writes WHERE checkpoint_id = ?", (last,))
    con.close()
    resumed = agent(root, "resume", run_id)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "finished already" not in resumed.stdout
    assert Counter(e.kind for e in read_trace(trace))["run_finished"] == 1
    again = agent(root, "resume", run_id)  # now it is finished, and says so
    assert again.returncode == 0 and "finished already" in again.stdout


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {proc.stderr.decode().strip()}")


def _fill(folder: Path) -> Path:
    """Take every free byte of ``folder``'s file system; returns the file that holds them."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * (8 << 20))
        except OSError:
            pass
    return filler


def filled_then_resumed(root: Path, task: Path, run_id: str, *, events: int) -> tuple[Path, str]:
    """``agent run`` on a small file system of its own, filled up once the run's trace holds ``events`` events,
    then ``agent resume``d once space is freed. Returns the run's folder and what the filled run printed."""
    runs = root / "runs"
    _mount_tmpfs(runs, "400m")
    env = {**os.environ, "DAYZERO_MIN_FREE_MB": "100"}
    try:
        proc = subprocess.Popen([sys.executable, "-c", "from agent.cli import app; app()", "run", str(task),
                                 "--policy", "playbook", "--run-id", run_id], cwd=root, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        trace = runs / run_id / "trace.jsonl"
        while proc.poll() is None and _lines(trace) < events:
            time.sleep(0.02)
        filler = _fill(runs)
        printed, _ = proc.communicate(timeout=600)
        assert proc.returncode == 5, printed[-3000:]
        filler.unlink()
        resumed = agent(root, "resume", run_id, env=env)
        assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
        kept = root / "kept"
        shutil.copytree(runs / run_id, kept, symlinks=True, ignore=shutil.ignore_patterns("workspace"))
        return kept, printed
    finally:
        subprocess.run(["umount", "-l", str(runs)], capture_output=True)


def pristine_launch(run_dir: Path) -> int:
    """The trace events before the first launch with files as released (a view of the workspace is written)."""
    events = read_trace(run_dir / "trace.jsonl")
    return next(i for i, e in enumerate(events) if e.kind == "tool_call" and e.tool == "launch_server"
                and e.input.get("pristine"))  # fmt: skip


def test_a_disk_filled_anywhere_stops_the_run_and_resume_ends_as_an_uninterrupted_run(reference, tmp_path):
    """The runs folder fills up (here: as the launch that checks an engine fix writes its view of the released
    files, where a full disk once passed for an engine crash and the resumed run dropped a verified fix): the run
    stops in one line naming the infrastructure, exit 5, no call recorded for what the disk broke; once space is
    freed, ``agent resume`` ends where the uninterrupted run ends, commit for commit. ``DAYZERO_DISK_POINTS=N``
    fills it at N more points drawn like the kill points."""
    run_dir, expected, total = reference
    points = [pristine_launch(run_dir)] + [random.Random(SEED + 2 + n).randint(2, total - 1)
                                           for n in range(int(os.environ.get("DAYZERO_DISK_POINTS", "0")))]  # fmt: skip
    task = stopping_at_the_targets(tmp_path, TASK)
    for n, point in enumerate(points):
        root = tmp_path / f"filled-{n}"
        root.mkdir()
        kept, printed = filled_then_resumed(root, task, "full", events=point)
        errors = [ln for ln in printed.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "infrastructure failure" in errors[0] and "agent resume full" in errors[0], printed
        assert "Traceback" not in printed
        assert end_state(kept) == expected, f"filled after {point} of {total} trace events"
        events = read_trace(kept / "trace.jsonl")
        assert Counter(e.kind for e in events)["run_finished"] == 1
        assert all(n == 1 for n in Counter(e.call_id for e in events if e.kind == "tool_call").values())
        assert not any("No space left" in (e.error or "") for e in events if e.kind == "tool_call")


def single_stream_stage(path: Path, **extra) -> Path:
    """The default task cut to its single-stream stage, unpaced: its target (185 tok/s: the three-step chain serves 178, the four-step one 193) is met after the stage's
    three fixes, each a crash, a patch and a relaunch."""
    path.write_text(yaml.safe_dump({
        "extends": str(TASK),
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 185}],
        "budgets": {"after_targets": {"node_hours": 0}}, **yaml.safe_load(NO_PACING), **extra,
    }))  # fmt: skip
    return path


def test_killed_in_docker_ends_as_an_uninterrupted_run(tmp_path):
    """The same with the twin in Docker containers: no container of the run survives. The run is the
    single-stream stage (every server of it a container, three of them crashing), the reference that stage run
    uninterrupted with local processes (the twin's figures are the same in either sandbox); the whole task's
    phases are the local points' business."""
    from tests.docker_engine import docker_or_skip, twin_sandbox

    docker_or_skip(image=None)
    made = agent(tmp_path, "run", str(single_stream_stage(tmp_path / "local.yaml")), "--policy", "playbook",
                 "--run-id", "reference")  # fmt: skip
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    expected, total = end_state(tmp_path / "runs" / "reference"), _lines(tmp_path / "runs" / "reference" / "trace.jsonl")
    assert len(expected["commits"]) == 3, expected
    point = random.Random(SEED + 1).randint(2, total - 1)
    sandbox = twin_sandbox()
    task = single_stream_stage(tmp_path / "docker.yaml", sandbox=sandbox)
    run_dir = killed_then_resumed(tmp_path, task, "killed-docker", events=point)
    assert end_state(run_dir) == expected, f"killed after {point} of {total} trace events (seed {SEED})"
    check_clean(run_dir)
    leftover = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}} {{.Labels}}"], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    assert "killed-docker" not in leftover, leftover

