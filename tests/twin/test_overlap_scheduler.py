"""The twin's scheduler forms batches as SGLang 0.5.12's overlap scheduler does (``Scheduler.event_loop_overlap``):
it launches a step, then waits for the step before it, and only then receives new requests and forms the next
batch, which the GPU runs after the step just launched. A request that reaches a busy rank mid-step therefore
waits for that step and one more before its prefill; an idle rank takes it at once; ``--disable-overlap-schedule``
(or what switches it off, such as speculative top-k > 1) removes the extra step. The extra step costs latency;
what the loop buys is the CPU's per-step work hidden under the GPU's."""

from __future__ import annotations

import ast
import json
import random
import statistics
import urllib.request

import pytest

from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.perf.simulator import simulate
from sandboxes.twin.perf.workload import DatasetSpec, arrival_times, build_requests
from sandboxes.twin.scenario import load
from tests.twin.conftest import running

SC = load("glm52_mi355x")
POOL = 1_000_000


def _requests(n: int, seed: int = 7, prompt: int = 2000, output: int = 500):
    rng = random.Random(seed)
    spec = DatasetSpec("random-ids", num_prompts=n, random_input_len=prompt, random_output_len=output,
                       random_range_ratio=1.0)  # fmt: skip
    return build_requests(spec, rng), rng


def _run(overlap: bool, requests, arrivals):
    model = CostModel(SC, ServingConfig(tp_size=8, disable_overlap_schedule=not overlap))
    return model, simulate(model, requests, arrivals, POOL)


def test_a_request_arriving_mid_step_waits_for_that_step_and_the_one_launched_behind_it():
    requests, _ = _requests(2)
    # the second arrives while the first decodes: its prefill is long done, its output far from done
    arrivals = [0.0, 3.0123]
    model, on = _run(True, requests, arrivals)
    _, off = _run(False, requests, arrivals)
    first_on, second_on = on.traces
    first_off, second_off = off.traces
    # an idle rank receives at once: the first request's TTFT does not depend on the loop
    assert first_on.first_token == pytest.approx(first_off.first_token)
    assert second_off.send < second_off.first_token < first_off.done  # it did arrive mid-decode
    # how long each waited for its prefill to begin: without the loop, the rest of the step it arrived in; with
    # it, that and one whole decode step (batch 1) more
    prefill = model.prefill(requests[1].input_len, [(0, requests[1].input_len)]).total
    context = requests[0].input_len + requests[0].output_len / 2
    step_on = model.decode(1, context).total
    step_off = CostModel(SC, ServingConfig(tp_size=8, disable_overlap_schedule=True)).decode(1, context).total
    wait_on = second_on.first_token - second_on.arrived - prefill
    wait_off = second_off.first_token - second_off.arrived - prefill
    assert 0 <= wait_off < step_off * 1.01
    assert step_on * 0.99 < wait_on < 2 * step_on * 1.01


def test_under_load_the_loop_trades_latency_for_the_cpus_time():
    """The extra step costs latency; in exchange each step's CPU work (scheduling, output processing) runs while the
    GPU works (``CostModel.cpu_exposed``): the same GPU work, done sooner."""
    requests, rng = _requests(240)
    arrivals = arrival_times(len(requests), 6.0, rng)
    _, on = _run(True, requests, arrivals)
    _, off = _run(False, requests, arrivals)

    def ttft(result):
        return statistics.median(t.first_token - t.send for t in result.traces)

    assert ttft(on) > ttft(off)

    def gpu_work(result):
        return sum(v for k, v in result.breakdown.items() if k not in ("idle", "overhead"))

    # the GPU runs the same kind of steps back to back: the work done is the same, within the batches' shuffle
    assert gpu_work(on) == pytest.approx(gpu_work(off), rel=0.03)
    assert on.breakdown["overhead"] < off.breakdown["overhead"] and on.duration < off.duration


def test_the_served_configuration_carries_the_loop_the_server_arguments_chose(fixed_workspace, tmp_path):
    """``--disable-overlap-schedule`` (and what SGLang switches it for) reaches the simulation through the
    server's configuration."""
    for flags, off in (([], False), (["--disable-overlap-schedule"], True)):
        with running(fixed_workspace, tmp_path / f"{off}.log", ["--tp-size", "8", *flags]) as server:
            info = json.loads(urllib.request.urlopen(f"{server.url}/server_info", timeout=10).read())
        assert info["twin"]["serving_config"]["disable_overlap_schedule"] is off


def _calls(nodes) -> list[str]:
    names = []
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                func = sub.func
                names.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_the_release_launches_a_batch_before_it_waits_for_the_last_one(release_package):
    """What the mechanism rests on, read from the release's scheduler: in ``event_loop_overlap`` new requests are
    received, the next batch formed and launched, and only then the previous batch's result awaited; the loop runs
    unless ``--disable-overlap-schedule``."""
    source = (release_package / "srt/managers/scheduler.py").read_text()
    assert "self.enable_overlap = not server_args.disable_overlap_schedule" in source
    loop = next(n for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.FunctionDef) and n.name == "event_loop_overlap")  # fmt: skip
    body = next(n for n in loop.body if isinstance(n, ast.While)).body
    calls = _calls(body)
    order = [calls.index(name) for name in ("recv_requests", "get_next_batch_to_run", "run_batch")]
    assert order == sorted(order)
    # the previous batch is processed after the launch (the call before it is the consecutive-prefill exception)
    assert max(i for i, name in enumerate(calls) if name == "pop_and_process") > calls.index("run_batch")
