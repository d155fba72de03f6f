"""The twin against InferenceX's public GLM-5 FP8 on MI355X figures (issue 10): one set of constants meets every
point within +-15 %, and the orderings the source shows hold. The points, the flags InferenceX ran them with and the
printout are in ``tests/benchmarks/inferencex_calibration.py`` (``python -m tests.benchmarks.inferencex_calibration``)."""

from __future__ import annotations

import pytest

from tests.benchmarks.inferencex_calibration import PUBLISHED, measure

WITHIN = 0.15


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return {(config.name, p.concurrency): (p, rec) for config, p, rec, _ in measure(tmp_path_factory.mktemp("ix"))}


POINTS = [(c.name, p.concurrency) for c in PUBLISHED for p in c.points]


@pytest.mark.parametrize("key", POINTS, ids=[f"{n} c{c}" for n, c in POINTS])
def test_each_point_within_15_percent(rows, key):
    p, rec = rows[key]
    assert abs(rec["total_throughput_per_gpu"] / p.tok_s_gpu - 1) <= WITHIN, rec["total_throughput_per_gpu"]
    assert abs(rec["tokens_per_s_per_user"] / p.user - 1) <= WITHIN, rec["tokens_per_s_per_user"]


def test_chat_templated_mtp_runs_accept_less_than_token_noise(rows):
    """The MTP runs wrap prompts in the chat template (InferenceX's --use-chat-template): natural text, lower
    acceptance than the published single stream's raw token ids."""
    p, rec = rows[("TP4 EAGLE 3/1/4 fp8 KV", 4)]
    assert rec["prompt_content"] == "natural_text" and 2.0 < rec["accept_length"] < 3.0
    assert rows[("TP4 fp8 KV", 4)][1]["prompt_content"] == "token_noise"


def test_orderings(rows):
    gpu = {k: rec["total_throughput_per_gpu"] for k, (_, rec) in rows.items()}
    user = {k: rec["tokens_per_s_per_user"] for k, (_, rec) in rows.items()}
    mtp, plain, tp8 = "TP4 EAGLE 3/1/4 fp8 KV", "TP4 fp8 KV", "TP8 EAGLE 3/1/4 fp8 KV"
    assert 1.5 <= gpu[(mtp, 4)] / gpu[(plain, 4)] <= 2.0  # MTP wins at low concurrency (published 1.74x)
    assert gpu[(mtp, 128)] <= 1.02 * gpu[(plain, 256)]  # and loses or ties at the highest (published 0.87x)
    for c in (4,):
        assert gpu[(tp8, c)] < gpu[(mtp, c)] and user[(tp8, c)] > user[(mtp, c)]  # TP8: less per GPU, more per user
    # SGLang's 48 running requests under speculation cap the batch: c64 and c128 serve alike
    assert abs(gpu[(mtp, 128)] / gpu[(mtp, 64)] - 1) < 0.03


def test_harness_runs_the_real_scripts_flags():
    from tests.benchmarks.inferencex_calibration import server_flags, workload

    mtp = PUBLISHED[0]
    flags = server_flags(mtp, 32)
    assert flags[flags.index("--mem-fraction-static") + 1] == "0.85" and "--disable-radix-cache" in flags
    assert flags[flags.index("--cuda-graph-max-bs") + 1] == "32"
    assert workload(32, True)[:4] == ["--backend", "vllm-chat", "--dataset-name", "random-ids"]
    assert "--cuda-graph-max-bs" not in server_flags(PUBLISHED[1], 64)
