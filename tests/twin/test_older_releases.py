"""A model is built by the code of the release a user names, older ones included (issue 41: physics that
transfers to other releases). Before 0.5.12 the release made a config through ``utils/hf_transformers_utils.py``
(later a re-export shim over the ``hf_transformers`` package) and ``_initialize_model`` made the quantization config
itself; the twin follows what each release's own source says, so a public point of SGLang 0.5.7 is run on 0.5.7.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandboxes.twin.engine.loading.executor import config_loader
from sandboxes.twin.scenario.generate import generate
from sandboxes.twin.workspace.release import Unavailable, release_tree

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "sandboxes/twin/scenarios/configs/deepseek-ai--DeepSeek-V3/config.json"


def _tree(version: str) -> Path:
    tree = release_tree(version)
    if isinstance(tree, Unavailable):
        pytest.skip(f"SGLang {version} is not cached and could not be downloaded: {tree.reason}")
    return tree.package.parent


def test_get_config_is_found_where_each_release_defines_it() -> None:
    assert config_loader(_tree("0.5.7")) == "sglang.srt.utils.hf_transformers_utils"  # defined there
    assert config_loader(_tree("0.5.12")) == "sglang.srt.utils.hf_transformers.config"  # behind the shim


def test_a_model_is_built_by_an_older_releases_own_code(tmp_path: Path) -> None:
    old = generate(CONFIG, tmp_path / "old.yaml", hardware="mi300x", release="0.5.7")
    new = generate(CONFIG, tmp_path / "new.yaml", hardware="mi300x", release="0.5.12")
    assert old.target_class.endswith(":DeepseekV3ForCausalLM") and old.draft_class.endswith("NextN")
    assert old.kinds == new.kinds  # 58 MLA/MoE and 3 MLA/dense layers, one MTP layer, in both
    assert abs(old.bytes / new.bytes - 1) < 0.01
    assert 'version: "0.5.7"' in (tmp_path / "old.yaml").read_text()
