"""What the zoo's real-config scenarios (issue 25) made the twin do as the release does.

- A model with no MTP head asked for EAGLE with no draft path: the release builds the target's own class as the
  draft, and a class with no ``set_embed_and_head`` fails where the EAGLE worker shares the embedding and head.
- A draft that is the target's own class runs every layer per draft step and predicts what it will verify.
- A separate draft checkpoint (EAGLE3) costs its own weights per draft step and accepts as its scenario says; under
  EAGLE3 the target's class is asked to capture the draft's aux hidden states, where the release asks it.
- DeepSeek's Quark MXFP4 post-load step on gfx950 quantizes ``kv_b_proj`` with aiter's ``dynamic_mxfp4_quant``:
  the twin answers that kernel with the real result's shapes, so the release's code runs on.
- The vendor's bf16 ``mtp.*`` tree with no exclude entry (sglang PR #36158): Qwen3.5's own draft class fails in
  its fused-MoE loader with the release's message.
- A forward pass under load (an out-of-memory, a crashed rank) runs the served model's own ``forward``.
- The image's environment (``SGLANG_USE_AITER=1``) decides the release's MoE padding, and a remembered load is
  keyed by it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sandboxes.twin.engine import serving_faults, tracebacks
from sandboxes.twin.engine.loading import weights_cache
from sandboxes.twin.engine.loading.loader import WeightLoadError, _capture_aux_states, load_weights
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import SCENARIO_DIR, load
from sandboxes.twin.workspace.materialize import materialize


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory: pytest.TempPathFactory):
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            dest = tmp_path_factory.mktemp(name) / "ws"
            materialize(load(SCENARIO_DIR / f"{name}.yaml"), dest)
            made[name] = dest
        return made[name]

    return get


@pytest.fixture(autouse=True)
def _rocm_image_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_USE_AITER", "1")  # what the image's Dockerfile exports (the launcher sets it too)


def _last_frame(ws: Path, log: str, file: str) -> tuple[list[str], int]:
    """The workspace's lines of ``file`` (under ``sglang/srt``) and the line the traceback's last frame in it names."""
    frame = [line for line in log.splitlines() if file in line][-1]
    source = (ws / "sglang/python/sglang/srt" / file).read_text().splitlines()
    return source, int(frame.split("line ")[1].split(",")[0])


def test_a_model_without_an_mtp_head_fails_as_its_own_eagle_draft(workspaces) -> None:
    ws = workspaces("qwen3_235b_fp8_mi300x")
    assert load_weights(ws / "model", ws / "sglang", with_draft=False, tp_size=8).target_class.endswith(
        "Qwen3MoeForCausalLM")
    with pytest.raises(WeightLoadError) as err:
        load_weights(ws / "model", ws / "sglang", with_draft=True, tp_size=8)
    log = err.value.log
    assert log.rstrip().endswith("AttributeError: 'Qwen3MoeForCausalLM' object has no attribute 'set_embed_and_head'")
    source, line = _last_frame(ws, log, "speculative/eagle_worker.py")
    assert source[line - 1].strip() == "self.draft_model_runner.model.set_embed_and_head(embed, head)"
    assert "is_eagle3" not in "\n".join(source[line - 4:line])  # the EAGLE (not EAGLE3) branch's call


def test_a_draft_that_is_the_target_runs_every_layer_and_agrees_with_itself() -> None:
    sc = load(SCENARIO_DIR / "gpt_oss_120b_mi355x.yaml")
    spec = dict(speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1,
                speculative_num_draft_tokens=4)  # fmt: skip
    base = ServingConfig(tp_size=8, weight_format="mxfp4", **spec)
    mtp, own = CostModel(sc, base), CostModel(sc, dataclasses.replace(base, draft_is_target=True))
    assert own.accept_length() == pytest.approx(4.0)  # every drafted token is what the model verifies
    assert mtp.accept_length() < 4.0
    layers = own.sizes.layers
    assert own.draft_time(1) > 0.5 * layers * mtp.draft_time(1)
    # per verify step it costs far more than an MTP draft, and what it yields does not come for free
    plain = CostModel(sc, ServingConfig(tp_size=8, weight_format="mxfp4"))
    step = {name: m.decode(1, 8000, m.tokens_per_verify()).total for name, m in (("own", own), ("mtp", mtp),
                                                                                  ("plain", plain))}  # fmt: skip
    assert step["own"] > step["mtp"] > step["plain"]
    assert step["own"] - step["plain"] > 0.5 * layers * (step["mtp"] - step["plain"]) / 3


def test_a_separate_draft_costs_its_own_weights_and_accepts_as_its_card_says() -> None:
    sc = load(SCENARIO_DIR / "kimi_k2_fp8_mi300x.yaml")  # AQ-MedAI's EAGLE3 head: 3.165 on GSM8K at 3/1/4
    cfg = ServingConfig(tp_size=8, weight_format="fp8", speculative_algorithm="EAGLE3", speculative_num_steps=3,
                        speculative_eagle_topk=1, speculative_num_draft_tokens=4, draft_weight_bytes=2_400_000_000,
                        draft_layers=1)  # fmt: skip
    eagle3 = CostModel(sc, cfg)
    assert eagle3.accept_length() == pytest.approx(3.165, abs=0.01)
    twice = CostModel(sc, dataclasses.replace(cfg, draft_weight_bytes=4_800_000_000))
    # each of the 3 draft steps reads the draft's weights once more, split over the 8 GPUs, at HBM speed
    assert twice.draft_time(1) - eagle3.draft_time(1) == pytest.approx(3 * 2_400_000_000 / 8 / eagle3.bw)
    mtp_like = CostModel(sc, dataclasses.replace(cfg, draft_weight_bytes=0, draft_layers=0))
    assert mtp_like.accept_length() != eagle3.accept_length()  # no MTP head: the default acceptance, not the card's


def test_eagle3_asks_the_targets_class_to_capture_the_drafts_aux_states(workspaces) -> None:
    ws = workspaces("qwen3_235b_fp8_mi300x")

    class NoCapture:  # a model class without set_eagle3_layers_to_capture
        pass

    with pytest.raises(WeightLoadError) as err:
        _capture_aux_states(ws / "sglang", NoCapture(), {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}})
    log = err.value.log
    assert log.rstrip().endswith("AttributeError: 'NoCapture' object has no attribute 'set_eagle3_layers_to_capture'")
    source, line = _last_frame(ws, log, "model_executor/model_runner.py")
    assert source[line - 1].strip() == "self.model.set_eagle3_layers_to_capture("
    _capture_aux_states(ws / "sglang", NoCapture(), {"eagle_config": {"use_aux_hidden_state": False}})  # not asked


def test_deepseek_quark_mxfp4_post_load_runs_on_gfx950(workspaces) -> None:
    ws = workspaces("deepseek_r1_mxfp4_mi355x")
    report = load_weights(ws / "model", ws / "sglang", with_draft=False, tp_size=8)
    assert report.target_class.endswith("DeepseekV3ForCausalLM")
    assert not report.not_loaded


def test_an_unlisted_bf16_mtp_tree_fails_qwen35s_draft_in_its_own_file(workspaces) -> None:
    ws = workspaces("qwen35_397b_mxfp4_mi355x")
    with pytest.raises(WeightLoadError) as err:
        load_weights(ws / "model", ws / "sglang", with_draft=True, tp_size=8)
    log = err.value.log
    assert "sglang/srt/models/qwen3_5_mtp.py" in log and "deepseek" not in log
    assert "in _load_w13" in log
    assert log.rstrip().splitlines()[-1].startswith("RuntimeError: The size of tensor a (")
    assert "must match the size of tensor b (" in log.rstrip().splitlines()[-1]


def test_a_remembered_load_is_keyed_by_the_engine_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLANG_USE_AITER", "1")
    on = weights_cache.cache_key({"a": 1}, [tmp_path], [])
    monkeypatch.setenv("SGLANG_USE_AITER", "0")
    off = weights_cache.cache_key({"a": 1}, [tmp_path], [])
    monkeypatch.setenv("UNRELATED_VARIABLE", "x")
    assert on != off
    assert weights_cache.cache_key({"a": 1}, [tmp_path], []) == off
    # a path into the workspace (the run's tuned-MoE file) is the same setting in the next run's workspace
    keys = []
    for run in ("run-1", "run-2"):
        ws = tmp_path / run / "workspace"
        monkeypatch.setenv("AITER_CONFIG_FMOE", str(ws / "tuning" / "tuned_fmoe.csv"))
        keys.append(weights_cache.cache_key({"a": 1}, [ws / "model", ws / "sglang"], []))
    monkeypatch.setenv("AITER_CONFIG_FMOE", "/elsewhere/tuned_fmoe.csv")
    assert keys[0] == keys[1] != weights_cache.cache_key({"a": 1}, [ws / "model", ws / "sglang"], [])


@pytest.mark.parametrize(("scenario", "model_file", "defining_class"), [
    ("qwen3_235b_fp8_mi300x", "qwen3_moe.py", "Qwen3MoeForCausalLM"),
    ("qwen35_397b_mxfp4_mi355x", "qwen3_vl.py", "Qwen3VLForConditionalGeneration"),  # its base class, another file
    ("deepseek_r1_mxfp4_mi355x", "deepseek_v2.py", "DeepseekV2ForCausalLM"),
])
def test_a_forward_pass_under_load_runs_the_served_models_own_code(workspaces, scenario, model_file,
                                                                   defining_class) -> None:  # fmt: skip
    ws = workspaces(scenario)
    target = load_weights(ws / "model", ws / "sglang", with_draft=False, tp_size=8).target_class
    cfg = ServingConfig(tp_size=8)
    frames = serving_faults.step_frames(cfg, "decode", ws / "sglang", target)
    forward = next(f for f in frames if f.func == "forward" and "/models/" in f.file)
    assert forward.file.endswith(model_file) and forward.cls == defining_class
    path, line = tracebacks.locate(ws / "sglang", forward)
    assert "self.logits_processor(" in Path(path).read_text().splitlines()[line - 1]


def test_an_mtp_draft_streams_its_own_layer_in_the_dtypes_the_checkpoint_stores_it() -> None:
    """A draft step reads the MTP layer the draft class loaded (the launcher's load report), so one the vendor kept
    in bf16 costs more per step than the same layer in MXFP4; without a report the target's layers stand for it."""
    sc = load(SCENARIO_DIR / "gpt_oss_120b_mi355x.yaml")
    cfg = ServingConfig(tp_size=8, weight_format="mxfp4", speculative_algorithm="EAGLE", speculative_num_steps=3,
                        speculative_eagle_topk=1, speculative_num_draft_tokens=4)  # fmt: skip
    plain = CostModel(sc, cfg)
    experts = plain.expert_bytes * plain.num_experts  # one layer's routed experts as the target stores them
    fixed = plain.layer_fixed_bytes
    mxfp4 = CostModel(sc, cfg, None, {"routed_experts": round(experts), "attention": round(fixed)})
    # the same experts in bf16: 16 bits a weight instead of MXFP4's 4 and an 8-bit scale per 32
    bf16 = CostModel(sc, cfg, None, {"routed_experts": round(experts * 16 / 4.25), "attention": round(fixed)})
    assert mxfp4.draft_time(1) == pytest.approx(plain.draft_time(1), rel=1e-3)  # the same bytes, the same step
    for batch in (1, 256):
        # the extra time is the extra bytes of the experts a step touches, at their streaming rate, per draft step
        extra = 3 * bf16.experts_touched(batch) * (bf16.draft_expert_bytes - mxfp4.draft_expert_bytes) / bf16.moe_g
        assert bf16.draft_time(batch) - mxfp4.draft_time(batch) == pytest.approx(extra / bf16.moe_rates(batch)[0],
                                                                                 rel=1e-6)  # fmt: skip
    # once a batch touches every expert, the layer's dtype is most of a draft step
    assert bf16.draft_time(256) > 1.5 * mxfp4.draft_time(256)
