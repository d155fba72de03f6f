"""Which part of the engine a failure is attributed to (``Diagnosis.component``), on the corpus of real public logs:
by the frames that raised it, never by the folders a checkout lives in."""

from __future__ import annotations

from pathlib import Path

from tools.diagnose import classify

LOGS = Path(__file__).parent / "data" / "real_logs"


def _diagnosed() -> list[tuple[str, object]]:
    return [(f.name, classify(f.read_text(errors="replace"))) for f in sorted(LOGS.glob("*.log"))]


def test_every_compile_error_is_a_kernel_builds_and_every_weight_failure_a_models() -> None:
    diagnosed = _diagnosed()
    compile_errors = [d for _, d in diagnosed if d.category == "compile_error"]
    weights = [d for _, d in diagnosed if d.category == "weight_shape_mismatch"]
    assert compile_errors and all(d.component == "kernel_build" for d in compile_errors)
    assert weights and all(d.component in ("main_model", "draft_model") for d in weights)


def test_a_library_of_the_same_name_is_not_the_main_model() -> None:
    # tokenizer failures raised in transformers (its files live under .../transformers/models/ too): no model's
    tokenizer = [(name, d) for name, d in _diagnosed() if d.category == "tokenizer_error"]
    assert tokenizer and all(d.component != "main_model" for _, d in tokenizer)


def test_a_failure_the_scheduler_raised_is_the_schedulers() -> None:
    d = classify((LOGS / "48_sglang_dsv4_cuda_oom_chained.log").read_text(errors="replace"))
    assert d.category == "out_of_memory" and d.component == "scheduler"
    assert d.frames[-1].file.endswith("managers/scheduler.py")

