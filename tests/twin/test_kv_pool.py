"""The twin's KV pool takes per token what SGLang's pool sizes per token (``model_executor/pool_configurator.py``,
``DefaultPoolConfigurator._compute_cell_size``): for an MLA model, the latent and rope elements of every layer
at the KV dtype's size, and for a DSA (NSA) model also the indexer's keys, fp8 with one fp32 scale per 128."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

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


@pytest.mark.parametrize("name", available())
@pytest.mark.parametrize("dtype", ["auto", "fp8_e4m3"])
def test_bytes_per_token_are_the_pools(name, dtype):
    sc = load(name)
    if sc.model.attention.kind != "mla":
        pytest.skip(f"{name}: not an MLA model")
    model = CostModel(sc, ServingConfig(tp_size=8, kv_cache_dtype=dtype))
    assert model.kv_token_bytes == cell_size(sc.model, ELEMENT_SIZE[dtype])


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
