"""The twin needs nothing but the standard library, its libraries (``sandboxes.twin.libraries``: PyYAML, the real
transformers and what it requires) and cpp: it must run in a minimal Debian image that holds just those.

The twin's programs run here with ``python -S`` (no site-packages) and a path holding only this repository
and those libraries, so an accidental import of anything else (the agent's langgraph, docker, ...) fails the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandboxes.twin import libraries
from tests.twin.conftest import READY, free_port

REPO = Path(__file__).resolve().parents[2]


def minimal_env(tmp_path: Path) -> dict:
    libs = tmp_path / "libs"
    libs.mkdir()
    tops: dict[str, Path] = {}  # each top-level entry the libraries installed, linked (as the image copies them)
    for path, rel in libraries.files(libraries.distributions()):
        parts = rel.split("/")
        tops.setdefault(parts[0], path.parents[len(parts) - 2] if len(parts) > 1 else path)
    for name, source in tops.items():
        (libs / name).symlink_to(source)
    return {"PYTHONPATH": f"{REPO}{os.pathsep}{libs}", "PATH": os.environ["PATH"], "TWIN_TIME_SCALE": "0"}


def py(env, *args, **kw):
    return subprocess.run([sys.executable, "-S", *args], env=env, capture_output=True, text=True, timeout=120, **kw)


def test_twin_runs_without_site_packages(tmp_path):
    env = minimal_env(tmp_path)
    probe = py(env, "-c", "import langgraph")
    assert probe.returncode != 0, "site-packages leaked into the minimal environment"
    ws = tmp_path / "ws"
    assert py(env, "-m", "sandboxes.twin", "materialize", "--dest", str(ws)).returncode == 0
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "w") as f:
        server = subprocess.Popen(
            [sys.executable, "-S", "-m", "sandboxes.twin.launch_server", "--model-path", str(ws / "model"),
             "--tp-size", "8", "--port", str(port)], stdout=f, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        for _ in range(400):
            if READY in log.read_text() or server.poll() is not None:
                break
            subprocess.run(["sleep", "0.05"])
        assert READY in log.read_text(), log.read_text()[-2000:]
        bench = py(env, "-m", "sandboxes.twin.bench_serving", "--base-url", f"http://127.0.0.1:{port}",
                   "--dataset-name", "random-ids", "--num-prompts", "10", "--output-file", str(tmp_path / "b.jsonl"))  # fmt: skip
        assert bench.returncode == 0, bench.stderr
        assert "SIMULATED" in bench.stdout
        tune = py(env, "-m", "sandboxes.twin.tune_moe", "--shape", "model_dim=6144,inter_dim=2048,expert=256,topk=8",
                  "-o", str(tmp_path / "t.csv"))  # fmt: skip
        assert tune.returncode == 0, tune.stderr
    finally:
        server.terminate()
        server.wait(timeout=10)
