"""A failing ``assert`` is the error even when no ``AssertionError`` line follows it in its stream (the stream was
cut, another process's lines follow, the paste stops there): classify reads the assert statement itself.

The frames are those of real log 05 (vllm-project/speculators#851), its worker prefix kept, its exception line left
out as a cut stream leaves it out."""

from __future__ import annotations

from tools.diagnose import classify

_PREFIX = "(EngineCore pid=391334) ERROR 07-23 21:03:03 [core.py:1231] "
_FRAMES = [
    '  File "/env/lib/python3.12/site-packages/vllm/model_executor/models/llama.py", line 438, in load_weights',
    "    weight_loader(param, loaded_weight)",
    '  File "/env/lib/python3.12/site-packages/vllm/model_executor/layers/linear.py", line 369, in weight_loader',
    "    assert param.size() == loaded_weight.size(), (",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
]


def test_an_assert_with_no_exception_line_in_a_weight_loader():
    log = "\n".join(_PREFIX + ln for ln in _FRAMES) + "\n(EngineCore pid=391335) INFO 07-23 21:03:04 [core.py:90] bye\n"
    d = classify(log)
    assert d.category == "weight_shape_mismatch"
    assert d.loader == "/env/lib/python3.12/site-packages/vllm/model_executor/layers/linear.py:369 weight_loader"
    assert d.model_file == "/env/lib/python3.12/site-packages/vllm/model_executor/models/llama.py"


def test_an_assert_outside_weight_loading_is_not_a_weight_problem():
    log = "\n".join([
        '  File "/app/environment/tasks.py", line 342, in __init__',
        "    assert len(self.files) > 0",
    ])  # fmt: skip
    assert classify(log).category == "unknown"


def test_an_assert_whose_frame_raised_further_down_is_not_the_error():
    frames = [*_FRAMES[:3], "    assert check(param), (", '  File "/x/check.py", line 3, in check',
              "    raise RuntimeError('boom')", "RuntimeError: boom"]  # fmt: skip
    assert classify("\n".join(frames)).category == "unknown"
