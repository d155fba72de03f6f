"""The launcher behaves like SGLang's: flag errors, start-up failures, the MoE fallback, simulated markers."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from sandboxes.twin.workspace.materialize import materialize
from tests.twin.conftest import LaunchFailed, running, start_server


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    path = tmp_path_factory.mktemp("launch") / "ws"
    materialize("glm52_mi355x", path)
    return path


def launch_cli(ws, *flags):
    return subprocess.run(
        [sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(ws / "model"), *flags],
        capture_output=True, text=True, timeout=60, env={"TWIN_TIME_SCALE": "0", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--tp-size", "four"], "argument --tensor-parallel-size/--tp-size: invalid int value: 'four'"),
        (["--kv-cache-dtype", "fp3"], "argument --kv-cache-dtype: invalid choice: 'fp3'"),
    ],
)
def test_bad_flags_fail_like_argparse(ws, flags, message):
    proc = launch_cli(ws, *flags)
    assert proc.returncode == 2
    assert "usage: sglang serve" in proc.stderr  # the release's own parser (prepare_server_args' prog)
    assert message in proc.stderr


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--tp-size", "4", "--dp-size", "4"], "16 GPUs requested but only 8 are visible"),
        (["--tp-size", "8", "--attention-backend", "fa3"], "not supported on ROCm"),
        (["--tp-size", "1"], "HIP out of memory"),  # 380 GB of weights on one 288 GB GPU
        (["--tp-size", "8", "--mem-fraction-static", "0.15"], "Not enough memory. Please try to increase --mem-fraction-static"),
        (["--tp-size", "8", "--mem-fraction-static", "0.99"], "HIP out of memory"),
    ],
)  # fmt: skip
def test_start_up_failures(ws, tmp_path, flags, message):
    with pytest.raises(LaunchFailed) as info:
        start_server(ws, tmp_path / "server.log", flags)
    assert info.value.code == 1
    assert message in info.value.log
    assert "Scheduler hit an exception: Traceback" in info.value.log or "ValueError" in info.value.log


def test_visible_devices_limit_the_layout(ws, tmp_path):
    with pytest.raises(LaunchFailed) as info:
        start_server(ws, tmp_path / "server.log", ["--tp-size", "8"], env={"HIP_VISIBLE_DEVICES": "0,1,2,3"})
    assert "only 4 are visible" in info.value.log


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_untuned_moe_runs_the_fallback_path_until_tuned(ws, tmp_path):
    with running(ws, tmp_path / "untuned.log", ["--tp-size", "8"]) as server:
        assert get(server.url + "/server_info")["twin"]["moe_kernels"] == "fallback"
        log = server.log.read_text()
    # aiter's own line, through aiter's own logger (no SGLang prefix), the activation as its enum's repr
    assert ("\n[aiter] [fused_moe] using 2stage default for (256, 1, 6144, 2048, 256, 8, <ActivationType.Silu: 0>, "
            "'torch.bfloat16', 'torch.float4_e2m1fn_x2', 'torch.float4_e2m1fn_x2', 'QuantType.per_1x32', True, False) \n") in log
    csv = tmp_path / "tuned.csv"
    subprocess.run(
        [sys.executable, "-m", "sandboxes.twin.tune_moe", "--scenario", str(ws / ".twin/scenario.yaml"),
         "--shape", "model_dim=6144,inter_dim=2048,expert=256,topk=8,dtype=mxfp4", "-o", str(csv)],
        check=True, capture_output=True,
    )  # fmt: skip
    with running(ws, tmp_path / "tuned.log", ["--tp-size", "8"], env={"AITER_CONFIG_FMOE": str(csv)}) as server:
        assert get(server.url + "/server_info")["twin"]["moe_kernels"] == "tuned"
    assert "using 2stage (kernelName1=" in (tmp_path / "tuned.log").read_text()


def test_every_output_says_it_is_simulated(ws, tmp_path):
    with running(ws, tmp_path / "server.log", ["--tp-size", "8"]) as server:
        info = get(server.url + "/server_info")
        record = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "1000",
                              "--random-output-len", "100", "--num-prompts", "20", "--request-rate", "2")  # fmt: skip
        health = urllib.request.urlopen(server.url + "/health", timeout=5).status
    assert health == 200
    assert info["simulated"] is True
    assert "SIMULATED" in server.log.read_text().splitlines()[0]
    assert record["simulated"] is True
    assert set(record["gpu_time_breakdown"]["share"]) >= {"prefill_attention", "prefill_moe", "decode", "communication", "idle"}
    assert record["bottleneck"]


SGLANG_KEYS = [
    "duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "input_throughput", "output_throughput", "total_throughput", "mean_ttft_ms", "median_ttft_ms",
    "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
    "p95_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms",
    "concurrency", "accept_length", "request_rate", "max_concurrency",
]  # fmt: skip


def test_bench_writes_sglang_keys_and_is_deterministic(ws, tmp_path):
    flags = ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "4", "--gsp-prompts-per-group", "25",
             "--gsp-system-prompt-len", "12000", "--gsp-question-len", "8000", "--gsp-output-len", "1000",
             "--request-rate", "1.5", "--seed", "5"]  # fmt: skip
    with running(ws, tmp_path / "server.log", ["--tp-size", "4", "--dp-size", "2"]) as server:
        first = server.bench(tmp_path, *flags)
        second = server.bench(tmp_path, *flags)
        other = server.bench(tmp_path, *flags[:-1], "6")
    assert all(k in first for k in SGLANG_KEYS)
    strip = lambda r: {k: v for k, v in r.items() if k != "wall_duration_s"}  # noqa: E731
    assert strip(first) == strip(second)
    assert first["output_throughput"] != other["output_throughput"]
    assert first["completed"] == 100


def test_bench_fails_cleanly_without_a_server(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sandboxes.twin.bench_serving", "--base-url", "http://127.0.0.1:9",
         "--dataset-name", "random-ids", "--ready-check-timeout-sec", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "is not ready" in proc.stderr
