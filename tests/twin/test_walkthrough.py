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
    # ReplicatedLinear.weight_loader's own message, from the release's code the twin ran
    assert ("AssertionError: param.shape=torch.Size([6144, 6144]) param.dtype=torch.uint8 "
            "loaded_weight.shape=torch.Size([6144, 12288]) loaded_weight.dtype=torch.bfloat16") in out
    assert "MTP 3/1/4 serves" in out
    assert "fatal error: 'cuda_runtime.h' file not found" in out
    assert "MTP 5/1/6 serves" in out
    assert "Accept length:" in out
    assert "using 2stage default for" in out
    assert "simulated: True tok/s:" in out
