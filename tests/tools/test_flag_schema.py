"""Flags are checked against the engine's own argument parser, read from its source in the workspace, before a
launch: the real SGLang release's ``ServerArgs.add_cli_args`` as the twin's workspace holds it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from sandboxes.twin.workspace.materialize import materialize
from tools import flag_schema
from tools.server import LaunchInput, launch_server


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("ws") / "ws"
    materialize("glm52_mi355x", ws)
    return ws


@pytest.fixture(scope="module")
def schema(workspace):
    parser = flag_schema.find_parser([workspace / "sglang"])
    if parser is None:  # the twin's bundled subset of SGLang (no release reachable) has no parser to read
        pytest.skip("the workspace's SGLang tree has no server_args.py (the bundled subset)")
    return flag_schema.load_schema(parser)


def test_the_schema_is_the_releases_parser(schema):
    assert len(schema.flags) > 200  # every add_argument of the release, aliases included
    assert schema.flags["tp-size"] == schema.flags["tensor-parallel-size"]  # an alias names the same flag
    assert schema.flags["tp-size"].type == "int" and schema.flags["mem-fraction-static"].type == "float"
    assert schema.flags["enable-dp-attention"].kind == "switch"
    assert {"auto", "fp8_e4m3"} <= set(schema.flags["kv-cache-dtype"].choices)  # a literal choices list
    assert "aiter" in schema.flags["attention-backend"].choices  # a module-level constant list


def test_what_the_parser_would_refuse(schema):
    ok = {"tp-size": 8, "dp-size": "2", "enable-dp-attention": True, "kv-cache-dtype": "fp8_e4m3",
          "mem-fraction-static": 0.85, "speculative-algorithm": None, "enable-aiter-allreduce-fusion": False}
    assert flag_schema.problems(schema, ok) == []
    bad = flag_schema.problems(schema, {"tp-sise": 4, "kv-cache-dtype": "fp9", "enable-dp-attention": "yes",
                                        "mem-fraction-static": "lots", "cuda-graph-max-bs": 2.5, "dp-size": True})
    assert len(bad) == 6
    assert "--tp-sise is not a flag of this engine (did you mean --tp-size" in bad[0]
    assert "'fp9' is not one of its choices" in bad[1] and "is a switch" in bad[2]
    assert "takes a float" in bad[3] and "takes an int" in bad[4] and "takes a value" in bad[5]


def test_a_refused_launch_starts_nothing(workspace):
    class NoSandbox:
        def __getattr__(self, name):
            raise AssertionError(f"the sandbox was touched ({name}) for a launch that must not start")

    ctx = SimpleNamespace(repos={"sglang": workspace / "sglang"}, sandbox=NoSandbox())
    result = launch_server(ctx, LaunchInput(flags={"tp-size": 8, "kv-cache-dtypo": "fp8_e4m3", "port": "x"}))
    assert not result.ok and result.status is None  # no trial: nothing was launched
    assert result.summary.startswith("not launched: --kv-cache-dtypo is not a flag of this engine")
    assert "--port takes an int" in result.summary


def test_no_parser_source_no_check(tmp_path):
    assert flag_schema.find_parser([tmp_path]) is None
    assert flag_schema.schema_from_source("def add_cli_args(parser):\n    pass\n") is None
