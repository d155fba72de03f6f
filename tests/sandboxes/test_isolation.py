"""The engine in the local sandbox cannot read the agent's secrets from its parent chain (``/proc/<pid>/environ``),
and a run says on start-up what it cannot scrub: an ancestor started with the secret in its environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.shared_runs import NO_PACING

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "glm52_mi355x.yaml"
CANARY = "sk-canary-7f3e9a1c5b2d4e6f"

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="no /proc")

# what an engine's code could do: read the start-up environment of every process above it
SNOOP = """
import json, os, sys
seen, pid = [], os.getppid()
while pid > 1:
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read()
        found = sys.argv[1].encode() in environ
    except OSError as exc:
        found = f"refused: {exc.strerror}"
    name = open(f"/proc/{pid}/comm").read().strip()
    seen.append({"pid": pid, "name": name, "canary": found})
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
print("SNOOP " + json.dumps(seen), flush=True)
"""

AGENT_LIKE = """
import json, sys
from pathlib import Path
from sandboxes import isolation
from sandboxes.local import LocalSandbox
if sys.argv[2] == "protected":
    isolation.protect_agent()
else:  # as before: nothing between the engine and the agent's environment
    isolation.engine_preexec = lambda: None
box = LocalSandbox(Path(sys.argv[1]))
result = box.run([sys.executable, "-c", sys.argv[3], sys.argv[4]])
print(result.stdout, result.stderr)
"""


def _snooped(text: str) -> list[dict]:
    line = next(ln for ln in text.splitlines() if ln.startswith("SNOOP "))
    return json.loads(line.removeprefix("SNOOP "))


def _agent_like(tmp_path: Path, mode: str, user: list[str] = ()) -> list[dict]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "OPENAI_API_KEY": CANARY, "HOME": str(tmp_path)}
    ws = tmp_path / f"ws-{mode}-{len(user)}"
    proc = subprocess.run([*user, sys.executable, "-c", AGENT_LIKE, str(ws), mode, SNOOP, CANARY], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _snooped(proc.stdout)


def test_a_command_in_the_local_sandbox_cannot_read_the_key_from_the_agent(tmp_path):
    unprotected = _agent_like(tmp_path, "bare")
    assert unprotected[0]["canary"] is True  # the path the issue found: the parent's start-up environment
    protected = _agent_like(tmp_path, "protected")
    assert protected[0]["canary"] is not True, protected
    assert not any(p["canary"] is True for p in protected), protected  # nor any other ancestor: none holds it


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become another user")
def test_the_same_for_an_agent_run_by_an_ordinary_user():
    """An ordinary user's engine has no capability to drop: the scrubbed, non-dumpable agent is what stops it."""
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    probe = "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', 'import pydantic']).returncode)"
    if subprocess.run([*nobody, sys.executable, "-c", probe], capture_output=True).returncode != 0:
        pytest.skip(f"an ordinary user cannot run {sys.executable} with its packages")
    with tempfile.TemporaryDirectory(dir="/tmp") as where:  # pytest's folders are root's alone
        os.chmod(where, 0o777)
        assert _agent_like(Path(where), "bare", nobody)[0]["canary"] is True
        assert _agent_like(Path(where), "protected", nobody)[0]["canary"] is not True


def test_agent_run_keeps_the_key_from_its_engine_and_names_what_it_cannot_scrub(tmp_path):
    """Through ``agent run`` with the key exported by the shell that starts it: the engine (a launch template
    that snoops) reads no key from the agent, and any ancestor it can still read the key from is named on
    start-up with Docker recommended (as root, the engine reads none: it has given up the capabilities)."""
    snoop = tmp_path / "snoop.py"
    snoop.write_text(SNOOP)
    task = tmp_path / "snoop.yaml"
    engines = yaml.safe_load(NO_PACING)["engines"]
    engines["twin"].update(launch=["{python}", str(snoop), CANARY], startup_timeout_s=60)
    task.write_text(yaml.safe_dump({"extends": str(TASK), "engines": engines, "sandbox": {"kind": "local"}}))
    env = {**os.environ, "OPENAI_API_KEY": CANARY, "PYTHONPATH": str(REPO)}
    # sh stays the agent's parent (not exec'd away), holding the key in its own start-up environment
    cmd = [shutil.which("sh"), "-c", '"$@"; exit $?', "sh", sys.executable, "-c", "from agent.cli import app; app()",
           "run", str(task), "--policy", "playbook", "--max-trials", "1", "--run-id", "snooped"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    logs = sorted((tmp_path / "runs" / "snooped" / "logs").glob("server-*.log"))
    assert logs, out[-2000:]
    seen = _snooped(logs[0].read_text())
    assert seen[0]["canary"] is not True and seen[1]["name"] == "sh", seen  # the agent scrubbed and locked its own
    exposed = [f"{p['pid']} ({p['name']})" for p in seen[1:] if p["canary"] is True]
    warning = " ".join(ln for ln in out.splitlines() if "warning: a secret" in ln)
    assert all(e in warning for e in exposed) and bool(warning) == bool(exposed), (seen, out[-3000:])
    if exposed:
        assert "sandbox: docker" in warning


def test_an_ancestor_holding_the_key_is_found_when_an_engine_could_read_it():
    """What the start-up line rests on: a process started as the engine is reads the ancestors; one that can read
    the shell's environment finds the key there."""
    probe = ("import sys; from sandboxes import isolation; "
             "print(isolation.exposed_in_ancestors([sys.argv[1]], preexec=None if sys.argv[2] == 'bare' else "
             "isolation.engine_preexec))")  # fmt: skip
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "OPENAI_API_KEY": CANARY}
    outs = {}
    for mode in ("bare", "engine"):
        proc = subprocess.run([shutil.which("sh"), "-c", '"$@"; exit $?', "sh", sys.executable, "-c", probe, CANARY,
                               mode], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs[mode] = proc.stdout
    assert "(sh)" in outs["bare"], outs
    if os.geteuid() == 0:  # root's engine has given up what reads other processes: nothing is exposed to it
        assert outs["engine"].strip() == "[]", outs
