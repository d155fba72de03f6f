"""The pinned release's own ``bench_serving`` against the live twin (``sandboxes/twin/release_bench.py``).

The comparison with the twin's virtual-time benchmark is ``tests/benchmarks/live_client.py``; here three
configurations that rank in opposite orders at one stream and under a crowd are measured both ways, and the
release's client must see the same ranking, each figure within the tolerance stated below.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandboxes.twin.engine.prompt_content import prompt_content
from sandboxes.twin.perf.cost_model import NATURAL_TEXT, TOKEN_NOISE
from sandboxes.twin.release_client import clock, tokenizer
from tests.benchmarks import live_client
from tests.twin.conftest import free_port

# the release's client against the live twin, relative to the virtual-time benchmark of the same workload and
# seed: what the host adds (HTTP, the client's own work, a step delivered late) at a time scale it can follow
TOLERANCE = {"output_throughput": 0.15, "median_tpot_ms": 0.15}
TTFT_TOLERANCE = (0.25, 60.0)  # relative, plus simulated ms of HTTP and client time (wall ms / time scale)
SCALE = 0.5  # at 0.25 the host's work for 256 streams on 2 cores costs 7-11 % of the throughput (docs/twin.md)
CONCURRENCIES = (1, 256)
CONFIGS = {k: live_client.CONFIGS[k] for k in ("tp8", "tp8-mtp3", "tp8-dpa8")}
WORKLOAD = live_client.Workload(waves=1, single=2)  # one wave of 256: a crowd in half the time two would take


def test_the_clock_converts_times_and_rates_and_keeps_counts() -> None:
    wall = {"duration": 2.0, "median_ttft_ms": 50.0, "output_throughput": 1000.0, "request_throughput": 4.0,
            "max_output_tokens_per_s": 1200.0, "completed": 8, "concurrency": 7.5, "ttfts": [0.1, 0.2],
            "itls": [[0.01, 0.02]], "request_rate": 20.0, "total_output_tokens": 2048}  # fmt: skip
    sim = clock.to_simulated(wall, 0.25, request_rate=5.0)
    assert sim["duration"] == 8.0 and sim["median_ttft_ms"] == 200.0
    assert sim["output_throughput"] == 250.0 and sim["request_throughput"] == 1.0
    assert sim["max_output_tokens_per_s"] == 300.0
    assert sim["ttfts"] == [0.4, 0.8] and sim["itls"] == [[0.04, 0.08]]
    assert sim["completed"] == 8 and sim["concurrency"] == 7.5 and sim["total_output_tokens"] == 2048
    assert sim["request_rate"] == 5.0 and sim["wall"]["request_rate"] == 20.0 and sim["wall"]["duration"] == 2.0
    assert clock.wall_rate(5.0, 0.25) == 20.0 and clock.wall_rate(float("inf"), 0.25) == float("inf")


def test_the_client_gets_every_flag_but_the_twins_and_a_rate_in_wall_time() -> None:
    from sandboxes.twin.release_bench import _with, _without

    argv = ["--sglang-root", "/ws/sglang", "--request-rate", "3", "--seed=2", "--sglang-root=/other"]
    assert _without(argv, "--sglang-root") == ["--request-rate", "3", "--seed=2"]
    assert _with(_without(argv, "--sglang-root"), "--request-rate", repr(clock.wall_rate(3.0, 0.25))) == [
        "--seed=2", "--request-rate", "12.0"]


def test_an_engine_module_the_client_imports_from_is_the_releases_own_definitions(release_package: Path) -> None:
    """``srt/utils/network.py`` imports psutil and torch as it starts; the client still gets its ``NetworkAddress``,
    the release's class, and a module that needs nothing missing runs as written."""
    from sandboxes.twin.release_client import imports

    finder = imports.install(release_package.parent)
    try:
        from sglang.benchmark.datasets.common import compute_random_lens  # runs as written
        from sglang.srt.utils.network import NetworkAddress

        assert NetworkAddress("[::1]", 30000).to_url() == "http://[::1]:30000"  # the release's bracket handling
        assert finder.importer.origin(NetworkAddress) == ("sglang.srt.utils.network", "NetworkAddress")
        assert finder.fallbacks["sglang.srt.utils.network"] in {"psutil", "torch", "zmq"}
        assert "sglang.benchmark.datasets.common" not in finder.fallbacks
        assert len(compute_random_lens(full_len=100, range_ratio=0.5, num=7)) == 7
        with pytest.raises(ImportError, match="without the engine's libraries"):
            from sglang.srt.utils.network import no_such_name  # noqa: F401
    finally:
        imports.uninstall(finder)
    assert not any(m == "sglang" or m.startswith("sglang.") for m in sys.modules)


def test_the_stand_in_tokenizer_is_four_characters_a_token(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 5000}}))
    folder, stand_in = tokenizer.client_tokenizer(model, cache=tmp_path / "cache")
    assert stand_in and tokenizer.vocab_size(model) == 5000
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert tok.vocab_size == 5000 and tok.num_special_tokens_to_add() == 0
    ids = [0, 17, 4999, 1234, 42]
    text = tok.decode(ids)
    assert len(text) == 4 * len(ids) and tok.encode(text) == ids
    assert prompt_content(text * 20) == TOKEN_NOISE  # what the client's random datasets send: no words


def test_a_prompt_is_natural_text_by_its_words_or_its_chat_template() -> None:
    sentence = ("When the committee met in the spring, it was clear that most of the members had not read the "
                "report, so the chair asked them to look at the summary before they voted on any of it. ")  # fmt: skip
    assert prompt_content(sentence * 3) == NATURAL_TEXT
    noise = "Ġprotests ÙħØ .scalablytyped Auf(fn ĠKönig _SUFFIX ĠHealth ĠzurÃ¼ck ]]; ĠMLB ĠvÃ¡ Ġinterpol "
    assert prompt_content(noise * 10) == TOKEN_NOISE
    assert prompt_content(noise * 10, chat=True) == NATURAL_TEXT
    assert prompt_content(None) == TOKEN_NOISE
    assert prompt_content("Hello") == NATURAL_TEXT  # too short to tell


def test_the_client_refuses_a_twin_that_does_not_wait(fixed_workspace: Path, tmp_path: Path) -> None:
    from tests.twin.conftest import running

    with running(fixed_workspace, tmp_path / "server.log", ["--tp-size", "8"]) as server:  # TWIN_TIME_SCALE=0
        out = subprocess.run([sys.executable, "-m", "sandboxes.twin.release_bench", "--sglang-root",
                              str(fixed_workspace / "sglang"), "--base-url", server.url, "--output-file",
                              str(tmp_path / "out.jsonl")], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 2 and "TWIN_TIME_SCALE=0" in out.stderr


@pytest.fixture(scope="module")
def measured(fixed_workspace: Path, tmp_path_factory) -> list[live_client.Point]:
    tmp = tmp_path_factory.mktemp("release-client")
    return live_client.compare(fixed_workspace, CONFIGS, list(CONCURRENCIES), SCALE, WORKLOAD, tmp, free_port(),
                               progress=lambda _row: None)  # fmt: skip


def test_the_release_client_agrees_with_the_virtual_benchmark(measured: list[live_client.Point]) -> None:
    for p in measured:
        for metric, tolerance in TOLERANCE.items():
            assert abs(p.ratio(metric) - 1) <= tolerance, (p.config, p.concurrency, metric, p.live, p.virtual)
        rel, extra_ms = TTFT_TOLERANCE
        live, virtual = p.live["median_ttft_ms"], p.virtual["median_ttft_ms"]
        assert abs(live - virtual) <= rel * virtual + extra_ms, (p.config, p.concurrency, live, virtual)


def test_the_release_client_ranks_the_configurations_as_the_virtual_benchmark(
        measured: list[live_client.Point]) -> None:  # fmt: skip
    rankings = {}
    for c in CONCURRENCIES:
        live, virtual = live_client.ranking(measured, "live", c), live_client.ranking(measured, "virtual", c)
        assert live == virtual, (c, live, virtual)
        rankings[c] = live
    assert rankings[CONCURRENCIES[0]] == list(reversed(rankings[CONCURRENCIES[-1]]))  # they rank differently
