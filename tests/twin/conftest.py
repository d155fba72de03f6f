"""Fixtures that run the twin the way a user does: a materialised workspace and real server processes."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sandboxes.twin import bench_serving
from sandboxes.twin.scenario import load
from sandboxes.twin.workspace.materialize import materialize
from sandboxes.twin.workspace.release import ReleaseTree, Unavailable, release_tree

READY = "The server is fired up and ready to roll!"
# the default scenario's MTP-layer exclusions under the names SGLang's draft model builds them (fix 1)
MTP_ENGINE_NAMES = ["model.eh_proj", r"re:model\.decoder\.self_attn\.indexer\..*"]


def edited_default_scenario(tmp_path: Path, edit) -> Path:
    """The default scenario's YAML with ``edit(data)`` applied, written as ``tmp_path/mine.yaml``."""
    import yaml

    from sandboxes.twin.scenario import SCENARIO_DIR

    data = yaml.safe_load((SCENARIO_DIR / "glm52_mi355x.yaml").read_text())
    edit(data)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path):
        self.proc, self.port, self.log = proc, port, log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bench(self, tmp: Path, *flags: str) -> dict:
        """Run the twin's bench_serving in-process against this server (its table is not printed)."""
        out = tmp / f"bench-{time.monotonic_ns()}.jsonl"
        args = bench_serving.build_parser().parse_args(
            ["--backend", "sglang", "--base-url", self.url, "--output-file", str(out), *flags]
        )
        with contextlib.redirect_stdout(io.StringIO()):
            return bench_serving.run(args)


def start_server(ws: Path, log: Path, flags: list[str], env: dict | None = None, timeout: float = 60) -> Server:
    """Start ``launch_server``; return once ready, or raise with the log if it exits first."""
    port = free_port()
    full_env = {**os.environ, "TWIN_TIME_SCALE": "0", **(env or {})}
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(ws / "model"),
             "--port", str(port), *flags],
            stdout=f, stderr=subprocess.STDOUT, env=full_env,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text()
        if READY in text:
            return Server(proc, port, log)
        if proc.poll() is not None:
            raise LaunchFailed(proc.returncode, log.read_text())
        time.sleep(0.05)
    proc.kill()
    raise TimeoutError(log.read_text())


class LaunchFailed(Exception):
    def __init__(self, code: int, log: str):
        super().__init__(f"exit {code}")
        self.code, self.log = code, log


@contextmanager
def running(ws: Path, log: Path, flags: list[str], env: dict | None = None) -> Iterator[Server]:
    server = start_server(ws, log, flags, env)
    try:
        yield server
    finally:
        server.proc.terminate()
        server.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def default_release() -> ReleaseTree:
    """The SGLang release the default scenario pins, unpacked (skips when it is not cached and cannot be
    downloaded)."""
    version = load().engine.version
    tree = release_tree(version)
    if isinstance(tree, Unavailable):
        pytest.skip(f"the SGLang {version} release is not cached and could not be downloaded: {tree.reason}")
    return tree


@pytest.fixture(scope="session")
def release_package(default_release: ReleaseTree) -> Path:
    """The ``sglang/`` package of that release."""
    return default_release.package


@pytest.fixture(scope="session")
def fixed_workspace(tmp_path_factory) -> Path:
    """The default scenario with both published fixes applied and the MoE selection tuned."""
    ws = tmp_path_factory.mktemp("fixed") / "ws"
    materialize("glm52_mi355x", ws)
    import json

    cfg_path = ws / "model" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"]["exclude"] += MTP_ENGINE_NAMES
    cfg_path.write_text(json.dumps(cfg))
    kernel = ws / "sglang/python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
    kernel.write_text(
        kernel.read_text().replace(
            "#include <cuda_runtime.h>", "#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif", 1
        )
    )
    subprocess.run(
        [sys.executable, "-m", "sandboxes.twin.tune_moe", "--scenario", str(ws / ".twin/scenario.yaml"),
         "--shape", "model_dim=6144,inter_dim=2048,expert=256,topk=8,dtype=mxfp4", "-o", str(ws / "tuned.csv")],
        check=True, capture_output=True,
    )  # fmt: skip
    return ws


# CI runs the property tests on a fixed set of examples, so a green run is reproducible; locally they explore.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    _hypothesis_settings.load_profile("ci")
