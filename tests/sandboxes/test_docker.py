"""The Docker sandbox for real: the twin's image, crash with the log captured, patch through the bind mount,
relaunch, benchmark via exec, GPU subsets, labels, cleanup. Without a Docker engine these tests skip with one
line, except in CI (CI=true), where they must run."""

from __future__ import annotations

import json
import uuid

import docker
import pytest

from sandboxes.base import SandboxError
from sandboxes.docker import DockerSandbox
from sandboxes.twin.workspace.materialize import materialize
from tasks.spec import DockerSpec
from tests.docker_engine import docker_or_skip, twin_sandbox

IMAGE = "dayzero-twin:latest"
READY = "The server is fired up and ready to roll!"
SPEC = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]  # fmt: skip


@pytest.fixture(scope="module")
def engine():
    docker_or_skip(IMAGE)
    return docker.from_env()


def twin_spec(**kw) -> DockerSpec:
    return DockerSpec(**{**twin_sandbox()["docker"], "shm_size": "256m", **kw})


def launch_argv(sb: DockerSandbox, port: int, *flags: str) -> list[str]:
    return ["python3", "-m", "sandboxes.twin.launch_server", "--model-path", f"{sb.command_root}/model",
            "--host", sb.bind_host, "--port", str(port), *flags]  # fmt: skip


@pytest.fixture
def sandbox(engine, tmp_path):
    root = tmp_path / "ws"
    materialize("glm52_mi355x", root)
    sb = DockerSandbox(root, twin_spec(), run_id=f"test-{tmp_path.name}")
    sb.prepare({"model": root / "model", "sglang": root / "sglang"})
    yield sb
    sb.close()


def test_crash_patch_relaunch_bench_cleanup(sandbox, engine, tmp_path):
    env = {"TWIN_TIME_SCALE": "0"}
    port = sandbox.free_port()
    crash = sandbox.start_server(
        launch_argv(sandbox, port, "--tp-size", "8", *SPEC), env, tmp_path / "crash.log", port
    )
    ready = sandbox.wait_ready(crash, READY, 60)
    assert ready.state == "exited" and ready.exit_code == 1
    text = crash.log_path.read_text()
    assert (
        "deepseek_nextn.py" in text and "\nAssertionError: param.shape=" in text
    )  # SGLang's own, from inside the container
    labels = engine.containers.get(crash.id).labels
    assert labels["dayzero.run"] == sandbox.run_id and labels["dayzero.role"] == "server"
    sandbox.stop_server(crash)

    cfg = json.loads(sandbox.read_file("model/config.json"))  # patched on the host, seen through the mount
    cfg["quantization_config"]["exclude"] += ["model.eh_proj", r"re:model\.decoder\.self_attn\.indexer\..*"]
    sandbox.write_file("model/config.json", json.dumps(cfg))
    port = sandbox.free_port()
    up = sandbox.start_server(
        launch_argv(sandbox, port, "--tp-size", "8", *SPEC), env, tmp_path / "up.log", port
    )
    assert sandbox.wait_ready(up, READY, 60).state == "ready"

    out = sandbox.command_path(".bench/b.jsonl")
    (sandbox.root / ".bench").mkdir(exist_ok=True)
    res = sandbox.run(["python3", "-m", "sandboxes.twin.bench_serving", "--base-url", up.base_url, "--dataset-name",
                       "random-ids", "--num-prompts", "5", "--output-file", out], timeout_s=120)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert "SIMULATED" in res.stdout
    record = json.loads((sandbox.root / ".bench" / "b.jsonl").read_text())
    assert record["simulated"] and record["accept_length"] > 1

    assert sandbox.stop_server(up) == 0
    sandbox.close()
    assert engine.containers.list(all=True, filters={"label": f"dayzero.sandbox={sandbox.id}"}) == []


def test_gpu_subsets_share_a_node(engine, tmp_path):
    root = tmp_path / "ws"
    materialize("glm52_mi355x", root)
    halves = [
        DockerSandbox(root, twin_spec(gpus=g), run_id=f"gpus-{tmp_path.name}")
        for g in ([0, 1, 2, 3], [4, 5, 6, 7])
    ]
    try:
        handles = []
        for i, sb in enumerate(halves):
            port = sb.free_port()
            handles.append(sb.start_server(launch_argv(sb, port, "--tp-size", "4"), {"TWIN_TIME_SCALE": "0"},
                                           tmp_path / f"half{i}.log", port))  # fmt: skip
        assert [sb.wait_ready(h, READY, 60).state for sb, h in zip(halves, handles, strict=True)] == [
            "ready",
            "ready",
        ]
        port = halves[0].free_port()
        too_big = halves[0].start_server(launch_argv(halves[0], port, "--tp-size", "8"), {"TWIN_TIME_SCALE": "0"},
                                         tmp_path / "big.log", port)  # fmt: skip
        assert halves[0].wait_ready(too_big, READY, 60).state == "exited"
        assert "only 4 are visible" in too_big.log_path.read_text()
    finally:
        for sb in halves:
            sb.close()


def test_containers_of_a_killed_agent_are_reaped_and_foreign_ones_untouched(engine, tmp_path):
    root = tmp_path / "ws"
    materialize("glm52_mi355x", root)
    run_id = f"reap-{uuid.uuid4().hex[:8]}"  # pytest reuses tmp_path names across sessions; run ids must not collide
    first = DockerSandbox(root, twin_spec(), run_id=run_id)
    foreign = None
    try:
        port = first.free_port()
        h = first.start_server(launch_argv(first, port, "--tp-size", "8"), {"TWIN_TIME_SCALE": "0"}, tmp_path / "a.log",
                               port)  # fmt: skip
        assert first.wait_ready(h, READY, 60).state == "ready"
        foreign = engine.containers.run(IMAGE, command=["sleep", "60"], detach=True, labels={"other": "yes"})
        second = DockerSandbox(root, twin_spec(), run_id=run_id)  # the agent restarted after a kill
        with pytest.raises(SandboxError, match="not started by this sandbox"):
            second.stop_server(h)
        assert second.reap_stale() == [h.id]
        assert engine.containers.list(all=True, filters={"label": f"dayzero.run={run_id}"}) == []
        foreign.reload()
        assert foreign.status == "running"
    finally:
        if foreign is not None:
            foreign.remove(force=True)
        first.close()


def test_devices_the_host_lacks_are_a_clear_error(engine, tmp_path):
    sb = DockerSandbox(tmp_path, DockerSpec(image=IMAGE, devices=["/dev/kfd-missing"]), run_id="dev")
    with pytest.raises(SandboxError, match="not on this host"):
        sb.start_server(["true"], {}, tmp_path / "x.log", sb.free_port())
