"""Diagnosis of failures while serving, on the logs the twin prints for them (sandboxes/twin/engine/serving_faults.py)
and on the engine's own figures the fixes compute from. Real public logs of each class are in the scored corpus
(data/real_logs: a vLLM OOM while serving, an SGLang NCCL watchdog failure, ranks dying of a memory access fault)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandboxes.twin.engine import serving_faults
from sandboxes.twin.engine.serving_faults import Fault, render
from sandboxes.twin.perf.serving_config import ServingConfig
from tools.diagnose import classify

GIB = 1024**3
START = ("[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=283.68 GB\n"
         "[2026-12-02 10:00:00 TP0] [AR] Using AiterCustomAllreduce (AMD default)\n"
         "[2026-12-02 10:00:02 TP0] The server is fired up and ready to roll! (simulated start-up 113 s on x)\n")


def _log(fault: Fault, cfg: ServingConfig, root: Path) -> str:
    lines = []
    for p in render(fault, cfg, root, 4242):
        if p.who == "raw":
            lines.append(p.text)
        else:
            lines.append(f"[2026-12-02 10:01:00{p.who.removeprefix('rank:')}] {p.text}")
    return START + "\n".join(lines) + "\n"


def _fault(kind: str, **detail) -> Fault:
    return Fault(kind=kind, at=12.0, dp_rank=0, step="decode", tokens=3000, rows=3000, batch=3000, graph=False,
                 detail={"hidden": 6144, **detail})  # fmt: skip


MEMORY = {"gpu_bytes": 288 * GIB, "static_bytes": 270 * GIB, "graph_bytes": 3 * GIB, "activation_bytes": 1.5 * GIB,
          "free_bytes": 1.0 * GIB}  # fmt: skip
STATS = {"running": 3000, "queue": 12, "tokens": 900000, "capacity": 2400000, "throughput": 9000.0, "graph": False,
         "accept": 1.0}  # fmt: skip


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path  # no workspace tree: the frames fall back to the release's recorded lines


def test_an_oom_while_serving_names_its_phase_and_the_engines_figures(root):
    cfg = ServingConfig(tp_size=8, cuda_graph_max_bs=128)
    need, last = 6.0 * GIB, 1.8 * GIB
    f = _fault("out_of_memory", need=need, last=last, budget=2.5 * GIB, memory=MEMORY, batch_stats=STATS)
    d = classify(_log(f, cfg, root))
    assert (d.category, d.memory_phase) == ("out_of_memory", "serving")
    assert d.tried_bytes == pytest.approx(last, rel=1e-3) and d.capacity_bytes == 288 * GIB
    assert d.running_requests == 3000 and d.avail_before_weights_gb == 283.68
    assert any(f.function == "run_batch" for f in d.frames)


def test_a_start_up_oom_is_not_taken_for_one_while_serving():
    log = ("[TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=7.00 GB\n"
           "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.78 GiB. GPU 0 has a total capacity of "
           "287.98 GiB of which 1.20 GiB is free.\n")  # fmt: skip
    assert classify(log).memory_phase == "runtime"


def test_a_hang_the_scheduler_watchdog_ends_is_a_hang_and_names_no_library(root):
    cfg = ServingConfig(tp_size=8)
    d = classify(_log(_fault("collective_hang", noticed_by="scheduler"), cfg, root))
    assert d.category == "hang_timeout" and d.collective_library is None
    assert "watchdog timeout (self.watchdog_timeout=300, self.soft=False)" in d.summary


def test_a_stuck_rccl_work_and_an_rccl_error_are_collective_errors_of_rccl(root):
    cfg = ServingConfig(tp_size=8, disable_custom_all_reduce=True, dist_timeout=60)
    hang = classify(_log(_fault("collective_hang", noticed_by="nccl", seq=300), cfg, root))
    assert (hang.category, hang.collective_library) == ("collective_error", "rccl")
    assert "Watchdog caught collective" in hang.summary
    error = classify(_log(_fault("collective_error", noticed_by="nccl", seq=300), cfg, root))
    assert (error.category, error.collective_library) == ("collective_error", "rccl")
    assert "NCCL error" in error.summary


def test_a_crashed_worker_is_named_with_its_exit_code(root):
    cfg = ServingConfig(tp_size=8)
    d = classify(_log(_fault("worker_crash", rank=3, error="memory_access_fault"), cfg, root))
    assert (d.category, d.worker, d.exit_code) == ("worker_crash", "scheduler_3", -6)
    assert "Memory access fault by GPU node-5" in d.summary
    raised = classify(_log(_fault("worker_crash", rank=1, error="illegal_memory_access"), cfg, root))
    assert raised.category == "worker_crash" and "illegal memory access" in raised.summary


def test_under_a_dp_controller_the_crash_is_the_cause_not_the_peers_watchdog(root):
    cfg = ServingConfig(tp_size=8, dp_size=2)
    f = _fault("worker_crash", rank=3, error="memory_access_fault")
    f.death_after = 306.0
    d = classify(_log(f, cfg, root))
    assert d.category == "worker_crash"  # the peers' watchdog lines follow it


def test_a_runtime_fault_outside_an_engine_stays_unknown():
    d = classify("Memory access fault by GPU node-1 (Agent handle: 0x55) on address 0x7f. Reason: Unknown.\n"
                 "Aborted (core dumped)\n")
    assert d.category == "unknown"


def test_the_figures_are_read_in_every_unit_the_allocator_prints():
    for text, want in (("512.00 MiB", 512 * 1024**2), ("1.50 GiB", round(1.5 * GIB)), ("300.00 KiB", 300 * 1024),
                       ("1000 bytes", 1000)):  # fmt: skip
        log = (f"torch.OutOfMemoryError: HIP out of memory. Tried to allocate {text}. GPU 0 has a total capacity of "
               f"288.00 GiB of which 0 bytes is free.\n")
        assert classify(log).tried_bytes == want
    assert serving_faults.format_size(512 * 1024**2) == "512.00 MiB"
    assert serving_faults.format_size(1000) == "1000 bytes"


def test_a_dead_rank_nothing_notices_is_still_a_crashed_worker(root):
    """Under a DP controller a rank alone in its TP group dies unwatched: the log holds only the runtime's line and
    the scheduler's faulthandler dump, whose frames are the scheduler's own."""
    cfg = ServingConfig(tp_size=1, dp_size=8)
    f = _fault("worker_crash", rank=0, error="memory_access_fault")
    f.death_after = None
    d = classify(_log(f, cfg, root))
    assert d.category == "worker_crash" and d.worker is None
