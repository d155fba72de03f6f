"""The twin's ``bench_serving`` against the release's own: every flag the twin accepts is one the release's
``python -m sglang.bench_serving`` accepts, with the same default (read from its source, not run: the release's
client needs numpy, aiohttp and transformers); and the generated-shared-prefix dataset draws its lengths as the
release's does."""

from __future__ import annotations

import ast
import random
from typing import Any

import pytest

from sandboxes.twin import bench_serving as twin
from sandboxes.twin.perf.workload import DatasetSpec, build_requests

_NO_LITERAL = object()


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "float" and len(node.args) == 1:
        return float(ast.literal_eval(node.args[0]))  # float("inf")
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _NO_LITERAL  # a default computed at run time


@pytest.fixture(scope="module")
def release_flags(release_package) -> dict[str, Any]:
    """Each ``--flag`` of the release's bench_serving, with its default (``_NO_LITERAL`` when computed)."""
    source = (release_package / "bench_serving.py").read_text()
    flags: dict[str, Any] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        keywords = {k.arg: k.value for k in node.keywords}
        store_true = isinstance(keywords.get("action"), ast.Constant) and keywords["action"].value == "store_true"
        default = _literal(keywords["default"]) if "default" in keywords else (False if store_true else None)
        for name in names:
            flags[name] = default
    return flags


def test_every_flag_of_the_twin_is_the_releases_with_its_default(release_flags):
    assert len(release_flags) > 50  # the parse found the release's parser, not a stray call
    for action in twin.build_parser()._actions:
        for name in (n for n in action.option_strings if n.startswith("--") and n != "--help"):
            assert name in release_flags, f"{name}: not a flag of the release's bench_serving"
            theirs = release_flags[name]
            if theirs is not _NO_LITERAL:
                assert action.default == theirs, f"{name}: the twin's default {action.default!r}, the release's {theirs!r}"


def _gsp(ratio: float, seed: int = 3) -> tuple[list, random.Random]:
    rng = random.Random(seed)
    spec = DatasetSpec("generated-shared-prefix", gsp_num_groups=6, gsp_prompts_per_group=40, gsp_system_prompt_len=1000,
                       gsp_question_len=500, gsp_output_len=200, gsp_range_ratio=ratio)  # fmt: skip
    return build_requests(spec, rng), rng


def test_a_gsp_range_ratio_draws_each_length_in_its_range_and_one_prefix_per_group():
    reqs, _ = _gsp(0.8)
    assert len(reqs) == 240
    assert all(800 <= r.prefix_len <= 1000 and 400 <= r.unique_len <= 500 and 160 <= r.output_len <= 200 for r in reqs)
    prefix_of = {}
    for r in reqs:
        assert prefix_of.setdefault(r.group, r.prefix_len) == r.prefix_len  # a group shares one system prompt
    assert len(set(prefix_of.values())) > 1 and len({r.unique_len for r in reqs}) > 10


def test_the_default_range_ratio_keeps_every_length_nominal_and_draws_nothing():
    reqs, rng = _gsp(1.0)
    assert {(r.prefix_len, r.unique_len, r.output_len) for r in reqs} == {(1000, 500, 200)}
    plain = random.Random(3)
    plain.shuffle(list(range(240)))  # the shuffle is the only draw: arrival times that follow are as before
    assert rng.random() == plain.random()
