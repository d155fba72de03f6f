"""A sweep of twin trials on a local Ray instance gives the same results as running them one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandboxes.executors import InlineExecutor, RayExecutor
from sandboxes.local import LocalSandbox
from sandboxes.twin.workspace.materialize import materialize
from tools.trials import TrialJob, TrialSpec, gpus_of, run_trial

TASK = Path(__file__).resolve().parents[2] / "tasks" / "glm52_mi355x.yaml"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    ws = root / "workspace"
    materialize("glm52_mi355x", ws)
    LocalSandbox(ws).prepare({"model": ws / "model", "sglang": ws / "sglang"})
    layouts = [{"tp-size": 4, "dp-size": 1}, {"tp-size": 4, "dp-size": 1, "kv-cache-dtype": "fp8_e4m3"},
               {"tp-size": 2, "dp-size": 2}, {"tp-size": 8, "dp-size": 1}, {"tp-size": 16}]  # fmt: skip
    return [TrialJob(job_id=f"j{i}", task_path=str(TASK), engine_name="twin", workspace=str(ws), run_dir=str(root),
                     spec=TrialSpec(flags=f, env={"TWIN_TIME_SCALE": "0"}, workload="throughput", measure="benchmark",
                                    request_rate=1.0))
            for i, f in enumerate(layouts)]  # fmt: skip


def test_ray_sweep_matches_inline(jobs):
    gpus = [min(gpus_of(j.spec.flags), 8) for j in jobs]
    inline = InlineExecutor().map(run_trial, jobs, gpus)
    ray = RayExecutor(resource="mi355x_gpu", node_gpus=8)
    try:
        remote = ray.map(run_trial, jobs, gpus)
        resources = ray.ray.cluster_resources()
    finally:
        ray.close()
    assert resources.get("mi355x_gpu") == 8
    assert [o.status for o in remote] == [o.status for o in inline] == ["up", "up", "up", "up", "crashed"]
    assert [round(o.value, 6) for o in remote] == [round(o.value, 6) for o in inline]
    assert all(o.value > 0 for o in remote[:4])
    assert "GPUs requested" in (remote[4].diagnosis or "") or "visible" in remote[4].summary


def test_partial_node_trials_get_disjoint_gpus(tmp_path):
    import threading
    import time

    from tools.trials import gpu_subset

    got, order = {}, []

    def hold(name, n, seconds):
        with gpu_subset(tmp_path, n, 8) as ids:
            got[name] = ids
            order.append(("start", name))
            time.sleep(seconds)
            order.append(("end", name))

    a = threading.Thread(target=hold, args=("a", 4, 0.6))
    b = threading.Thread(target=hold, args=("b", 4, 0.6))
    a.start(), b.start()
    deadline = time.monotonic() + 60  # a bound against hanging: c starts once a and b both hold their GPUs
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(got) == ["a", "b"]
    c = threading.Thread(target=hold, args=("c", 2, 0.1))  # must wait for a or b to free its GPUs
    c.start()
    for t in (a, b, c):
        t.join()
    assert sorted(got["a"] + got["b"]) == list(range(8))
    assert order.index(("start", "c")) > min(order.index(("end", "a")), order.index(("end", "b")))
