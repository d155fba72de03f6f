"""Benchmark requests as ``sglang.bench_serving`` builds them: datasets, lengths and Poisson arrivals.

Only lengths matter to the simulation, so a request is its shared-prefix group, its lengths and its arrival
time. The random generator is seeded from ``--seed`` exactly once, so the same flags give the same requests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .cost_model import NATURAL_TEXT, TOKEN_NOISE

# bench_serving's backends that send each prompt as a user message to /v1/chat/completions, where the server
# applies the model's chat template (sglang/bench_serving.py, ASYNC_REQUEST_FUNCS)
CHAT_BACKENDS = frozenset({"sglang-oai-chat", "vllm-chat", "lmdeploy-chat"})


@dataclass(frozen=True)
class SimRequest:
    index: int
    group: int | None  # requests of one group share a prefix of ``prefix_len`` tokens
    prefix_len: int
    unique_len: int
    output_len: int

    @property
    def input_len(self) -> int:
        return self.prefix_len + self.unique_len


@dataclass(frozen=True)
class DatasetSpec:
    name: str  # random-ids | random | generated-shared-prefix
    num_prompts: int = 1000
    random_input_len: int = 1024
    random_output_len: int = 1024
    random_range_ratio: float = 0.0
    gsp_num_groups: int = 64
    gsp_prompts_per_group: int = 16
    gsp_system_prompt_len: int = 2048
    gsp_question_len: int = 128
    gsp_output_len: int = 256
    gsp_range_ratio: float = 1.0  # bench_serving's --gsp-range-ratio: 1.0 (its default) keeps every length nominal


def build_requests(spec: DatasetSpec, rng: random.Random) -> list[SimRequest]:
    if spec.name == "generated-shared-prefix":
        groups, per_group = spec.gsp_num_groups, spec.gsp_prompts_per_group
        n = groups * per_group
        if spec.gsp_range_ratio < 1:  # as sample_generated_shared_prefix_requests draws them: prefixes, then
            prefixes = random_lens(spec.gsp_system_prompt_len, spec.gsp_range_ratio, groups, rng)  # questions,
            questions = random_lens(spec.gsp_question_len, spec.gsp_range_ratio, n, rng)  # then outputs
            outputs = random_lens(spec.gsp_output_len, spec.gsp_range_ratio, n, rng)
        else:  # nothing drawn: every length is the nominal one
            prefixes = [spec.gsp_system_prompt_len] * groups
            questions, outputs = [spec.gsp_question_len] * n, [spec.gsp_output_len] * n
        reqs = [(g, prefixes[g], questions[g * per_group + k], outputs[g * per_group + k])
                for g in range(groups) for k in range(per_group)]  # fmt: skip
        rng.shuffle(reqs)
        return [SimRequest(i, g, p, q, o) for i, (g, p, q, o) in enumerate(reqs)]
    if spec.name in ("random", "random-ids"):
        inputs = random_lens(spec.random_input_len, spec.random_range_ratio, spec.num_prompts, rng)
        outputs = random_lens(spec.random_output_len, spec.random_range_ratio, spec.num_prompts, rng)
        return [SimRequest(i, None, 0, n_in, n_out) for i, (n_in, n_out) in enumerate(zip(inputs, outputs, strict=True))]
    raise ValueError(f"unsupported dataset for the twin: {spec.name}")


def prompt_content(dataset_name: str, backend: str) -> str:
    """What the model writes for this benchmark's prompts, which decides the draft's acceptance
    (``CostModel.accept_length``). SGLang 0.5.12's ``random`` dataset cuts real ShareGPT conversations to length
    (natural text); ``random-ids`` (runs of consecutive token ids) and ``generated-shared-prefix`` (token ids drawn
    from the vocabulary, ``gen_prompt``) are token noise, unless a chat backend wraps them in the chat template:
    then the model answers a user turn in natural language, as InferenceX's ``--use-chat-template`` runs do."""
    if backend in CHAT_BACKENDS or dataset_name == "random":
        return NATURAL_TEXT
    return TOKEN_NOISE


def random_lens(full_len: int, range_ratio: float, num: int, rng: random.Random) -> list[int]:
    """SGLang's ``compute_random_lens`` (benchmark/datasets/common.py): lengths uniform over the integers of
    ``[max(int(full_len * range_ratio), 1), full_len]``, both ends included, drawn for all prompts at once (the
    inputs, then the outputs). ``--random-range-ratio 0.8`` gives 0.8-1.0x nominal; 1 gives exactly nominal;
    the default 0 gives 1..nominal. (SGLang draws with numpy's generator, the twin with Python's.)"""
    if full_len <= 0:
        return [0] * num
    lo = max(int(full_len * range_ratio), 1)
    return [rng.randint(lo, full_len) for _ in range(num)]


def arrival_times(n: int, request_rate: float, rng: random.Random) -> list[float]:
    """First request at t=0, then exponential gaps (a Poisson process), as bench_serving sends them."""
    times, t = [], 0.0
    for _ in range(n):
        times.append(t)
        if request_rate != float("inf"):
            t += rng.expovariate(request_rate)
    return times
