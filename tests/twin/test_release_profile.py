"""The release a scenario pins moves the twin's figures as the release's own code does (issue 28): profiles in
``sandboxes/twin/data/releases/`` beside the pin, read through ``engine.version``. Cost model only: no server."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from sandboxes.twin.perf import release_profile
from sandboxes.twin.perf.cost_model import TOKEN_NOISE, CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import Calibration, load
from sandboxes.twin.workspace import release


@functools.cache
def on(version: str):
    sc = load("glm52_mi355x")
    return dataclasses.replace(sc, engine=dataclasses.replace(sc.engine, version=version))


def single_stream(version: str, steps: int, topk: int, draft: int) -> float:
    cfg = ServingConfig(tp_size=8, kv_cache_dtype="fp8_e4m3", moe_tuned=True, speculative_algorithm="EAGLE",
                        speculative_num_steps=steps, speculative_eagle_topk=topk, speculative_num_draft_tokens=draft,
                        disable_overlap_schedule=topk > 1)  # fmt: skip  (the twin resolves flags as 0.5.12 does)
    m = CostModel(on(version), cfg)
    return m.accept_length(TOKEN_NOISE) / m.decode(1, 10_750, m.tokens_per_verify()).total


def test_the_calibrated_release_changes_nothing():
    sc = on("0.5.12")
    assert CostModel(sc, ServingConfig(tp_size=8)).scenario.calibration is sc.calibration
    assert release_profile.load("0.5.12").spec_v2_max_topk == 1


def test_a_tree_draft_keeps_the_overlap_scheduler_on_0_5_13():
    """0.5.12 runs a top-k 2 draft on spec v1 (no overlap scheduler), 0.5.13 on spec v2: the same model, node and
    flags serve faster; a chain draft runs spec v2 on both, alike."""
    assert single_stream("0.5.13", 3, 2, 7) > 1.04 * single_stream("0.5.12", 3, 2, 7)
    assert single_stream("0.5.13", 5, 1, 6) == pytest.approx(single_stream("0.5.12", 5, 1, 6))


def test_a_release_without_a_profile_has_its_predecessors():
    assert release_profile.load("0.5.12.post1").version == "0.5.12"
    assert release_profile.load("0.5.15.post1").version == "0.5.13"


def test_every_effect_names_a_source_and_a_calibrated_constant():
    fields = {f.name for f in dataclasses.fields(Calibration)}
    for path in sorted(release_profile.RELEASES_DIR.glob("*.yaml")):
        profile = release_profile.load(path.stem)
        assert profile.version == path.stem
        for effect in profile.effects:
            assert effect.source and all(name in fields for name, _ in effect.calibration), (path, effect)


@pytest.mark.parametrize("version,forces_v1", [("0.5.12", True), ("0.5.13", False)])
def test_the_profiles_scheduler_claim_is_the_releases_code(version, forces_v1):
    """Where the release is materialised on this machine: its own code switches a tree draft to spec v1, or not."""
    tree = release.cached(version)
    if tree is None:
        pytest.skip(f"SGLang {version} is not materialised here")
    srt = tree.package / "srt"
    code = "".join(p.read_text() for p in (srt / "server_args.py", srt / "arg_groups" / "speculative_hook.py") if p.exists())
    assert ("spec v2 currently only supports topk = 1" in code) == forces_v1
    assert (release_profile.load(version).spec_v2_max_topk == 1) == forces_v1
