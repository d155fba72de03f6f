"""docs/twin.md is true: its blocks run, in order, from materialise to crash, patch and benchmark."""

from __future__ import annotations

import os
import subprocess

from sandboxes.twin.walkthrough import bash_blocks, script
from tests.twin.conftest import free_port


def test_walkthrough_runs_as_written(tmp_path):
    assert len(bash_blocks()) >= 7
    env = {**os.environ, "PORT": str(free_port()), "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", "-c", script()], capture_output=True, text=True, env=env, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "simulated: True moe: fallback" in out
    assert "assert param_data.shape == loaded_weight.shape\nAssertionError" in out  # SGLang's own, bare
    assert "MTP 3/1/4 serves" in out
    assert "fatal error: 'cuda_runtime.h' file not found" in out
    assert "MTP 5/1/6 serves" in out
    assert "Accept length:" in out
    assert "using 2stage default for" in out
    assert "simulated: True tok/s:" in out
