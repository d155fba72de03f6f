"""Failures while serving (sandboxes/twin/engine/serving_faults.py): out of memory under load, a hung or failing
collective on one all-reduce path, a crashed TP worker. Each follows from the configuration served and the node's
defects, triggers only when its mechanism is met, prints what SGLang 0.5.12 (and the runtime under it) prints, and
takes the server down (or leaves it silent) the way the real engine does; the benchmark reports the failed requests
as bench_serving does."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandboxes.twin.engine import messages, serving_faults, tracebacks
from sandboxes.twin.engine.serving_faults import FaultWatch, StepMemory, allreduce_paths
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import ScenarioError, load
from tests.twin.conftest import edited_default_scenario, running

# a load of many short requests at once: thousands run together, decode batches far above the graphs' largest
SHORT_BURST = ["--dataset-name", "random-ids", "--random-input-len", "256", "--random-output-len", "256",
               "--random-range-ratio", "1", "--num-prompts", "6000", "--request-rate", "inf"]  # fmt: skip
# every static byte the node allows, small graphs and chunks so that it still starts: nothing is left for a step's
# logits once thousands of requests decode outside the graphs
TIGHT = ["--tp-size", "8", "--mem-fraction-static", "0.985", "--cuda-graph-max-bs", "128", "--chunked-prefill-size", "4096"]
LONG_PROMPTS = ["--dataset-name", "random-ids", "--random-input-len", "2000", "--random-output-len", "64",
                "--random-range-ratio", "1", "--num-prompts", "40", "--request-rate", "4"]  # fmt: skip


def _gone(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/health", timeout=2)
    except urllib.error.HTTPError:
        return False
    except OSError:
        return True
    return False


def _with_defects(tmp_path: Path, **defects) -> Path:
    def edit(data):
        data["defects"].update(defects)

    return edited_default_scenario(tmp_path, edit)


# --- which all-reduce path a step takes -----------------------------------------------------------------------------


def _cfg(**kw) -> SimpleNamespace:
    base = dict(tp_size=8, dp_size=1, enable_dp_attention=False, enable_aiter_allreduce_fusion=False,
                disable_custom_all_reduce=False, quick_reduce_quantization="NONE")  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_the_all_reduce_path_follows_the_flags_and_the_message_size():
    hidden = 6144
    assert allreduce_paths(_cfg(tp_size=1), hidden, 100, "gfx950") == ()  # one GPU: nothing to reduce
    assert allreduce_paths(_cfg(), hidden, 100, "gfx950") == ("custom_allreduce",)
    # the custom all-reduce takes up to 64 MiB (aiter's should_custom_ar); a 16k-token prefill chunk is 192 MiB
    assert allreduce_paths(_cfg(), hidden, 16384, "gfx950") == ("rccl",)
    assert allreduce_paths(_cfg(disable_custom_all_reduce=True), hidden, 100, "gfx950") == ("rccl",)
    # the fusion is a path of its own, and the last layer's all-reduce still goes the plain way
    assert allreduce_paths(_cfg(enable_aiter_allreduce_fusion=True), hidden, 100, "gfx950") == (
        "aiter_allreduce_fusion", "custom_allreduce")
    # without the custom all-reduce communicator the fusion has nothing to run on
    assert allreduce_paths(_cfg(enable_aiter_allreduce_fusion=True, disable_custom_all_reduce=True), hidden, 100,
                           "gfx950") == ("rccl",)  # fmt: skip
    # quick all-reduce takes what the custom one does not, within its window, when the environment asks for it
    assert allreduce_paths(_cfg(quick_reduce_quantization="INT8"), hidden, 16384, "gfx950") == ("quick_allreduce",)
    assert allreduce_paths(_cfg(quick_reduce_quantization="INT8"), hidden, 16384, "gfx90a") == ("rccl",)


def test_the_window_constants_are_the_releases(release_package: Path):
    comm = (release_package / "srt/layers/communicator.py").read_text()
    assert "total_bytes <= 8 * 1024 * 8192" in comm and "n <= 16384" in comm
    qr = (release_package / "srt/distributed/device_communicators/quick_all_reduce.py").read_text()
    assert "(torch.float16, 8): [16 * MB, 4 * MB, 4 * MB, 2 * MB]" in qr
    assert 'os.environ.get("ROCM_QUICK_REDUCE_QUANTIZATION", "NONE")' in qr
    ps = (release_package / "srt/distributed/parallel_state.py").read_text()
    assert "if ca_comm is None or getattr(ca_comm, \"disabled\", True):" in ps  # the fusion needs the communicator


# --- out of memory under load: the mechanism ----------------------------------------------------------------------


def _memory(free_gib: float, activation_gib: float = 1.5) -> StepMemory:
    gib = serving_faults.GIB
    return StepMemory(gpu_bytes=288 * gib, static_bytes=270 * gib, graph_bytes=3 * gib,
                      activation_bytes=activation_gib * gib, free_bytes=free_gib * gib,
                      activation_per_token=6 * gib / 16384, vocab_size=154880)  # fmt: skip


def test_a_step_runs_out_of_memory_only_outside_the_graphs_and_beyond_what_the_plan_left():
    sc = load()
    cfg = ServingConfig(tp_size=8, cuda_graph_max_bs=128)
    tight = FaultWatch(sc, cfg, _memory(free_gib=1.0))
    assert tight.step(0, "decode", 128, 128, 128, 0.0) is None  # replayed from a captured graph
    assert tight.step(0, "decode", 1000, 1000, 1000, 0.0) is None  # eager, and it fits
    f = tight.step(0, "decode", 3000, 3000, 3000, 1.0)
    assert f is not None and f.kind == "out_of_memory" and f.death_after == 0.0
    assert f.detail["last"] >= 3000 * 154880 * 4  # the fp32 logits of every row
    # the same batch with more left outside the static pool
    assert FaultWatch(sc, cfg, _memory(free_gib=8.0)).step(0, "decode", 3000, 3000, 3000, 1.0) is None
    # more graphs: the same batch replays
    assert FaultWatch(sc, ServingConfig(tp_size=8, cuda_graph_max_bs=4096), _memory(free_gib=1.0)).step(
        0, "decode", 3000, 3000, 3000, 1.0) is None


def test_an_oom_under_load_kills_the_server_with_the_allocators_message(fixed_workspace, tmp_path):
    log = tmp_path / "oom.log"
    with running(fixed_workspace, log, TIGHT) as server:
        r = server.bench(tmp_path, *SHORT_BURST)
        assert _gone(server.url)  # the launcher killed its process tree
        assert server.proc.wait(timeout=10) == -9
    assert r["serving_failure"]["kind"] == "out_of_memory"
    assert r["completed"] < 6000 and r["failed"] == 6000 - r["completed"]
    assert set(r["errors"]) <= {"aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected"} | {
        e for e in r["errors"] if e.startswith("aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host")}
    text = log.read_text()
    assert re.search(r"TP0\] Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, cuda graph: False, "
                     r"gen throughput \(token/s\): [\d.]+, #queue-req: \d+", text)
    oom = re.findall(r"^torch\.OutOfMemoryError: HIP out of memory\. Tried to allocate [\d.]+ GiB\. GPU (\d) has a total "
                     r"capacity of 288\.00 GiB of which [\d.]+ [GM]iB is free\. Of the allocated memory [\d.]+ GiB is "
                     r"allocated by PyTorch, with [\d.]+ [GM]iB allocated in private pools \(e\.g\., CUDA Graphs\), and "
                     r"[\d.]+ (?:bytes|[KMG]iB) is reserved by PyTorch but unallocated\. If reserved but unallocated "
                     r"memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True", text, re.M)  # fmt: skip
    assert sorted(oom) == [str(g) for g in range(8)]  # every TP rank, on its own GPU
    assert text.count("Scheduler hit an exception: Traceback (most recent call last):") == 8
    assert "in _copy_logits_to_buffer\n    logits = logits[:, : self.vocab_size].float()" in text
    # the launcher's last words (an access line of the client's poll may still land while the tree is killed)
    lines = [line for line in text.rstrip().splitlines() if ' HTTP/1.1" ' not in line]
    assert lines[-2].endswith(messages.SIGQUIT_RUNNING)


def test_the_same_load_with_less_static_memory_serves(fixed_workspace, tmp_path):
    flags = [*TIGHT[:3], "0.95", *TIGHT[4:]]  # 0.95 instead of 0.985
    with running(fixed_workspace, tmp_path / "ok.log", flags) as server:
        r = server.bench(tmp_path, *SHORT_BURST)
        assert not _gone(server.url)
    assert r["completed"] == 6000 and r["failed"] == 0 and "serving_failure" not in r


# --- a collective that hangs or fails -------------------------------------------------------------------------------


def test_a_hang_on_the_custom_all_reduce_is_ended_by_the_scheduler_watchdog(fixed_workspace, tmp_path):
    scenario = _with_defects(tmp_path, collective_faults=[{"allreduce": "custom_allreduce", "min_tokens": 64}])
    log = tmp_path / "hang.log"
    with running(fixed_workspace, log, ["--tp-size", "8"], {"TWIN_SCENARIO": str(scenario)}) as server:
        r = server.bench(tmp_path, *LONG_PROMPTS)
        assert _gone(server.url)
    assert r["serving_failure"]["kind"] == "collective_hang" and r["serving_failure"]["allreduce_path"] == "custom_allreduce"
    # nothing comes back after the hang; the server goes when SGLang's watchdog fires (300 s), plus its 5 s grace
    assert r["serving_failure"]["server_gone_s"] == pytest.approx(r["serving_failure"]["at_s"] + 305)
    text = log.read_text()
    assert "[AR] Using AiterCustomAllreduce (AMD default)" in text
    for rank in range(8):
        assert f"TP{rank}] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)" in text
    assert "WorkNCCL" not in text  # a custom kernel spinning is no NCCL work: PyTorch's watchdog sees nothing
    assert messages.SIGQUIT_RUNNING in text


def test_another_all_reduce_path_avoids_the_defect(fixed_workspace, tmp_path):
    scenario = _with_defects(tmp_path, collective_faults=[{"allreduce": "custom_allreduce", "min_tokens": 64}])
    log = tmp_path / "nccl.log"
    with running(fixed_workspace, log, ["--tp-size", "8", "--disable-custom-all-reduce"],
                 {"TWIN_SCENARIO": str(scenario)}) as server:  # fmt: skip
        r = server.bench(tmp_path, *LONG_PROMPTS)
    assert r["failed"] == 0 and "serving_failure" not in r
    assert "[AR] All-reduce call path: NCCL (custom AR disabled)" in log.read_text()


def test_a_stuck_rccl_work_is_reported_by_pytorchs_nccl_watchdog_when_it_fires_first(fixed_workspace, tmp_path):
    scenario = _with_defects(tmp_path, collective_faults=[{"allreduce": "rccl", "min_tokens": 1024}])
    log = tmp_path / "rccl.log"
    flags = ["--tp-size", "8", "--disable-custom-all-reduce", "--dist-timeout", "60"]
    with running(fixed_workspace, log, flags, {"TWIN_SCENARIO": str(scenario)}) as server:
        r = server.bench(tmp_path, *LONG_PROMPTS)
        assert _gone(server.url)
    assert r["serving_failure"]["kind"] == "collective_hang"
    text = log.read_text()
    caught = re.findall(r"^\[rank(\d)\]:\[E\d{4} [\d:.]+ ProcessGroupNCCL\.cpp:\d+\] \[Rank (\d)\] Watchdog caught collective "
                        r"operation timeout: WorkNCCL\(SeqNum=\d+, OpType=ALLREDUCE, NumelIn=(\d+), NumelOut=\3, "
                        r"Timeout\(ms\)=60000\) ran for \d+ milliseconds before timing out\.$", text, re.M)  # fmt: skip
    assert len(caught) == 8 and all(a == b for a, b, _ in caught)
    assert int(caught[0][2]) % 6144 == 0  # the hidden states of the step's tokens
    assert "terminate called after throwing an instance of 'c10::DistBackendError'" in text
    assert "Subprocess scheduler_0 (pid=" in text and "crashed with exit code -6. Triggering SIGQUIT for cleanup..." in text
    assert "Scheduler watchdog timeout" not in text  # 60 s < 300 s: PyTorch's watchdog took the process down first


def test_an_rccl_error_is_reported_by_the_nccl_watchdog(fixed_workspace, tmp_path):
    scenario = _with_defects(tmp_path, collective_faults=[{"allreduce": "rccl", "failure": "error", "min_tokens": 1024}])
    log = tmp_path / "err.log"
    with running(fixed_workspace, log, ["--tp-size", "8", "--disable-custom-all-reduce"],
                 {"TWIN_SCENARIO": str(scenario)}) as server:  # fmt: skip
        r = server.bench(tmp_path, *LONG_PROMPTS)
        assert _gone(server.url)
    assert r["serving_failure"]["kind"] == "collective_error"
    text = log.read_text()
    assert "failure detected by watchdog at work sequence id:" in text
    assert "Process group watchdog thread terminated with exception: NCCL error: unhandled system error (run with " \
           "NCCL_DEBUG=INFO for details)" in text
    assert "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error." in text


# --- a crashed worker -----------------------------------------------------------------------------------------------


def test_a_memory_access_fault_kills_one_rank_and_the_launcher_takes_the_server_down(fixed_workspace, tmp_path):
    scenario = _with_defects(tmp_path, worker_faults=[{"rank": 3, "min_tokens": 1024,
                                                       "when": {"flag": "kv_cache_dtype", "equals": "fp8_e4m3"}}])
    log = tmp_path / "crash.log"
    env = {"TWIN_SCENARIO": str(scenario)}
    with running(fixed_workspace, log, ["--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3"], env) as server:
        r = server.bench(tmp_path, *LONG_PROMPTS)
        assert _gone(server.url)
    assert r["serving_failure"]["kind"] == "worker_crash" and r["completed"] < 40
    text = log.read_text()
    assert re.search(r"^Memory access fault by GPU node-5 \(Agent handle: 0x[0-9a-f]+\) on address 0x[0-9a-f]+\. "
                     r"Reason: Unknown\.$", text, re.M)
    assert "Fatal Python error: Aborted" in text and "line 1594 in event_loop_overlap" in text
    assert re.search(r"\] Subprocess scheduler_3 \(pid=\d+\) crashed with exit code -6\. Triggering SIGQUIT for "
                     r"cleanup\.\.\.$", text, re.M)
    # the trigger is the flag: the same load on a bf16 KV cache serves
    with running(fixed_workspace, tmp_path / "bf16.log", ["--tp-size", "8"], env) as server:
        assert server.bench(tmp_path, *LONG_PROMPTS)["failed"] == 0


def test_a_dead_rank_nothing_watches_leaves_its_requests_waiting(tmp_path):
    """Under a DP controller the launcher watches only the controller, and a rank alone in its TP group has no peer
    to hang: nothing notices it died, and its requests never come back."""
    sc = load(_with_defects(tmp_path, worker_faults=[{"rank": 0}]))
    cfg = ServingConfig(tp_size=1, dp_size=8)
    f = FaultWatch(sc, cfg, None).step(2, "prefill", 100, 1, 1, 0.0)
    assert f is not None and f.kind == "worker_crash" and f.death_after is None
    # with TP peers the watchdog of the peers ends it; under DP attention every rank is a peer in the MoE layers
    for cfg in (ServingConfig(tp_size=2, dp_size=4), ServingConfig(tp_size=8, dp_size=8, enable_dp_attention=True)):
        f = FaultWatch(sc, cfg, None).step(0, "prefill", 100, 1, 1, 0.0)
        assert f is not None and f.death_after == pytest.approx(300 + 5 + 1)


# --- the scenario format ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("defects,where,problem", [
    ({"collective_faults": [{"allreduce": "nvlink"}]}, "defects.collective_faults[0].allreduce", "unknown all-reduce path"),
    ({"collective_faults": [{"allreduce": "custom_allreduce", "failure": "error"}]},
     "defects.collective_faults[0].failure", "only RCCL reports an error"),
    ({"worker_faults": [{"rank": 8}]}, "defects.worker_faults[0].rank", "the node has ranks 0 to 7"),
    ({"worker_faults": [{"rank": 1, "error": "segfault"}]}, "defects.worker_faults[0].error", "unknown error"),
    ({"worker_faults": [{"rank": 1, "when": {"flag": "no_such_flag", "equals": 1}}]},
     "defects.worker_faults[0].when.flag", "is not an SGLang server argument"),
])  # fmt: skip
def test_serving_defects_are_checked_at_their_line(tmp_path, defects, where, problem):
    path = _with_defects(tmp_path, **defects)
    with pytest.raises(ScenarioError) as err:
        load(path)
    message = str(err.value)
    assert re.match(rf"{re.escape(str(path))}:\d+: {re.escape(where)}: ", message) and problem in message
    line = int(message.split(":")[1])
    assert where.split(".")[-1].split("[")[0] in path.read_text().splitlines()[line - 1] or "- " in \
        path.read_text().splitlines()[line - 1]


# --- fidelity -------------------------------------------------------------------------------------------------------


def _frames() -> list[tracebacks.Frame]:
    cfgs = [SimpleNamespace(disable_overlap_schedule=o, speculative_algorithm=s) for o in (False, True) for s in (None, "EAGLE")]
    out = {(f.file, f.func, f.code): f for c in cfgs for step in ("decode", "prefill")
           for f in serving_faults.step_frames(c, step)}  # fmt: skip
    out.update({(f.file, f.func, f.code): f for f in serving_faults.WATCHDOG_THREAD})
    return list(out.values())


@pytest.mark.parametrize("frame", _frames(), ids=lambda f: f"{f.file.rsplit('/', 1)[-1]}:{f.func}:{f.line}")
def test_the_failure_tracebacks_name_real_code(release_package: Path, frame: tracebacks.Frame):
    if frame.file.startswith("/"):
        return  # torch and the standard library of the image
    path = release_package / frame.file.removeprefix("python/sglang/")
    lines = path.read_text().splitlines()

    class _Root:
        def __truediv__(self, rel: str) -> Path:
            return release_package / rel.removeprefix("python/sglang/")

    located = tracebacks.locate(_Root(), frame)[1]  # type: ignore[arg-type]
    assert lines[located - 1].strip().startswith(frame.code), (frame, lines[located - 1])
    assert located == frame.line, f"{frame.file}:{frame.func} is at line {located}, recorded {frame.line}"


REAL_LOGS = Path(__file__).resolve().parents[1] / "tools" / "data" / "real_logs"


def test_the_runtime_lines_have_the_shape_of_real_logs():
    """The lines PyTorch, RCCL and ROCm print under the engine are written in the form public logs show them."""
    def shape(text: str) -> str:  # numbers, addresses and sizes aside
        return re.sub(r"0x[0-9a-f]+|\d+(?:\.\d+)?", "N", text)

    rocm_oom = (REAL_LOGS / "16_vllm_rocm_hip_oom_startup.log").read_text()
    real = re.search(r"HIP out of memory\..*", rocm_oom).group(0)
    ours = messages.HIP_OOM.format(tried="N GiB", gpu=0, total="N GiB", free="N GiB", allocated="N GiB",
                                   private="N GiB", unallocated="N MiB")  # fmt: skip
    # ours adds the graphs' private pool, which PyTorch prints only when graphs hold memory
    assert shape(ours.replace(", with N GiB allocated in private pools (e.g., CUDA Graphs)", "")) == shape(real)
    nccl = (REAL_LOGS / "52_sglang_nccl_failure_detected_by_watchdog.log").read_text()
    for template in (messages.NCCL_FAILURE_DETECTED.format(rank=1, seq=5, completed=4), messages.NCCL_NO_STACK_TRACE,
                     messages.NCCL_FIRST_PG_DUMPING.format(rank=7)):  # fmt: skip
        assert shape(template) in shape(nccl), template
    fault = (REAL_LOGS / "53_vllm_rocm_memory_access_fault_ranks.log").read_text()
    ours = messages.MEMORY_ACCESS_FAULT.format(node=2, handle="0x1", address="0x2")
    assert shape(ours).replace("Reason: Unknown.", "") in shape(fault)
