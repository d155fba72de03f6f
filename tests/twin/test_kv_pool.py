"""The twin's KV pool takes per token what SGLang's pool sizes per token (``model_executor/pool_configurator.py``,
``DefaultPoolConfigurator._compute_cell_size``): for an MLA model, the latent and rope elements of every layer
at the KV dtype's size, and for a DSA (NSA) model also the indexer's keys, fp8 with one fp32 scale per 128; for
grouped-query attention, K and V of the KV heads one GPU holds (``get_num_kv_heads``: at least one) in every layer
that keeps KV (a hybrid model's linear-attention layers keep none), and for a hybrid sliding-window model
(``HybridSWAPoolConfigurator``) the full layers plus ``swa_full_tokens_ratio`` of the sliding ones."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from sandboxes.twin.engine.pools import is_hybrid_swa
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import available, load
from tests.twin.conftest import running

ELEMENT_SIZE = {"auto": 2, "bf16": 2, "fp8_e4m3": 1}


def cell_size(model, kv_size: int) -> int:
    """``_compute_cell_size`` for an MLA model, written out from the release's source."""
    a = model.attention
    cell = (a.kv_lora_rank + a.qk_rope_head_dim) * model.num_hidden_layers * kv_size
    if a.sparse_topk:  # is_deepseek_nsa: index_head_dim + index_head_dim // quant_block_size (128) * 4, uint8
        cell += (a.indexer_head_dim + a.indexer_head_dim // 128 * 4) * model.num_hidden_layers
    return cell


def gqa_cell_size(config: dict, kv_size: int, tp: int, hybrid_swa: bool, ratio: float) -> float:
    """``_compute_cell_size`` (or ``HybridSWAPoolConfigurator``'s) for grouped-query attention, from config.json's
    own fields, written out from the release's source."""
    c = config.get("text_config", config)
    n = c["num_hidden_layers"]
    kinds = list(c.get("layer_types") or [])
    if not kinds and c.get("full_attention_interval"):  # Qwen3-Next: every interval-th layer is full attention
        kinds = ["full_attention" if (i + 1) % c["full_attention_interval"] == 0 else "linear_attention"
                 for i in range(n)]  # fmt: skip
    kinds = kinds or ["full_attention"] * n
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    per_layer = max(1, c["num_key_value_heads"] // tp) * (head_dim + head_dim) * kv_size
    full = sum(k == "full_attention" for k in kinds)
    sliding = sum(k == "sliding_attention" for k in kinds)
    if not hybrid_swa:
        return per_layer * (full + sliding)
    return per_layer * sliding if not full else per_layer * full + ratio * per_layer * sliding


@pytest.mark.parametrize("name", available())
@pytest.mark.parametrize("dtype", ["auto", "fp8_e4m3"])
def test_bytes_per_token_are_the_pools(name, dtype):
    sc = load(name)
    cfg = ServingConfig(tp_size=8, kv_cache_dtype=dtype)
    model = CostModel(sc, cfg)
    if sc.model.attention.kind == "mla":
        assert model.kv_token_bytes == cell_size(sc.model, ELEMENT_SIZE[dtype])
    else:
        hybrid_swa = is_hybrid_swa(sc.model.arch, cfg)
        expected = gqa_cell_size(sc.model.hf_config, ELEMENT_SIZE[dtype], 8, hybrid_swa, cfg.swa_full_tokens_ratio)
        assert model.kv_token_bytes == pytest.approx(expected)


def test_the_sliding_window_model_is_hybrid_and_the_flag_turns_it_off():
    """gpt-oss is on the release's hybrid-SWA list (its sliding layers keep a smaller pool) unless
    ``--disable-hybrid-swa-memory``; Qwen3-Next's linear layers keep no KV at all."""
    oss = load("gpt_oss_120b_mi355x")
    on, off = ServingConfig(tp_size=8), ServingConfig(tp_size=8, disable_hybrid_swa_memory=True)
    assert is_hybrid_swa(oss.model.arch, on) and not is_hybrid_swa(oss.model.arch, off)
    assert CostModel(oss, off).kv_token_bytes > CostModel(oss, on).kv_token_bytes
    nxt = load("qwen3_next_80b_fp8_mi355x")
    assert CostModel(nxt, on).kv_token_bytes == gqa_cell_size(nxt.model.hf_config, 2, 8, False, 0.8)


def test_the_release_sizes_grouped_and_sliding_pools_so(release_package):
    source = (release_package / "srt" / "model_executor" / "pool_configurator.py").read_text()
    assert "model_config.get_num_kv_heads(tp_size)\n                * (model_config.head_dim + model_config.v_head_dim)" in source
    assert "+ self._swa_full_tokens_ratio\n                * self._swa_per_token\n                * self._swa_layers_num" in source
    config = (release_package / "srt" / "configs" / "model_config.py").read_text()
    assert "return max(1, total_num_kv_heads // tensor_parallel_size)" in config


def test_the_release_sizes_the_indexer_keys_so(release_package):
    source = (release_package / "srt" / "model_executor" / "pool_configurator.py").read_text()
    assert "index_head_dim\n                    + index_head_dim // NSATokenToKVPool.quant_block_size * 4" in source
    pool = (release_package / "srt" / "mem_cache" / "memory_pool.py").read_text()
    assert "quant_block_size = 128" in pool


@pytest.mark.parametrize("flags", [["--tp-size", "8"], ["--tp-size", "4", "--dp-size", "2", "--mem-fraction-static", "0.85"]])
def test_the_logged_pool_is_what_the_release_computes_from_the_logged_memory(fixed_workspace, tmp_path, flags):
    """SGLang's ``_profile_available_bytes``: the pool is what is free once the weights have loaded, less
    ``1 - mem_fraction_static`` of what was free before they began to load. The twin's own log lines must add up
    so: a pool sized from the whole GPU would be a few GB larger than its "Load weight begin" line allows."""
    with running(fixed_workspace, tmp_path / "server.log", flags) as server:
        info = json.loads(urllib.request.urlopen(f"{server.url}/server_info", timeout=10).read())
        log = server.log.read_text()
    before = float(re.search(r"Load weight begin\. avail mem=([\d.]+) GB", log).group(1))
    after = float(re.search(r"Load weight end\..* avail mem=([\d.]+) GB", log).group(1))
    pool = float(re.search(r"KV Cache is allocated\. .*KV size: ([\d.]+) GB", log).group(1))
    assert pool == pytest.approx(after - before * (1 - info["mem_fraction_static"]), abs=0.02)
