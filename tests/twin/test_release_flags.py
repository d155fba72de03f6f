"""The twin's command line is the release's: its flags, its defaults, its refusals, its model checks.

The flags are derived from the release itself, never from a list written here: the option strings, types and
defaults of every ``parser.add_argument`` call in ``ServerArgs.add_cli_args`` (read with ``ast``), and the
release's own parser, made by running ``add_cli_args`` from its source (``PureImports``, uncached) to compare
the twin's parser (rebuilt from the per-user cache) with, value for value and error for error. Then launched
twins: a flag the twin does not model (``--dtype``) is accepted and named in the log and ``/server_info``; a
``--quantization`` the checkpoint contradicts is refused with the release's own message, before any weight
loads; a flag of one release is refused by the other.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sandboxes.twin.engine import server_args as twin
from sandboxes.twin.engine.loading.pure_imports import PureImports
from sandboxes.twin.workspace.release import ReleaseTree, release_tree
from tests.twin.conftest import running

TWIN = Path(twin.__file__).resolve().parents[1]  # sandboxes/twin
NO_VALUE_ACTIONS = {"'store_true'", "'store_false'", "'store_const'", "'count'", "DeprecatedAction",
                    "DeprecatedStoreTrueAction", "argparse.BooleanOptionalAction"}  # fmt: skip
SAMPLES = {"int": "1", "float": "0.5", "str": "x", "human_readable_int": "1k", "nullable_str": "x",
           "loads": '{"a": 1}', "json_list_type": "[1]"}  # fmt: skip


@pytest.fixture(scope="module", params=["0.5.12", "0.5.13"])
def tree(request, default_release) -> ReleaseTree:
    got = default_release if request.param == default_release.version else release_tree(request.param)
    if not isinstance(got, ReleaseTree):
        pytest.skip(f"SGLang {request.param} unavailable: {got.reason}")
    return got


class Declared:
    """One ``parser.add_argument`` call of the release's ``add_cli_args``, as written."""

    def __init__(self, call: ast.Call):
        self.options = [a.value for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
        self.kw = {k.arg: k.value for k in call.keywords if k.arg}

    def text(self, name: str) -> str | None:
        return ast.unparse(self.kw[name]) if name in self.kw else None

    @property
    def dest(self) -> str:
        if "dest" in self.kw:
            return ast.literal_eval(self.kw["dest"])
        long = next(o for o in self.options if o.startswith("--"))
        return long[2:].replace("-", "_")


def declared(tree: ReleaseTree) -> tuple[list[Declared], ast.ClassDef]:
    module = ast.parse((tree.package / "srt/server_args.py").read_text())
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    calls = [Declared(n) for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) == "parser.add_argument"]
    return sorted(calls, key=lambda d: d.options), cls


def release_parser(tree: ReleaseTree) -> argparse.ArgumentParser:
    """The release's own parser: its add_cli_args run from its source now (no cache)."""
    server_args_cls = PureImports(tree.root).load("sglang.srt.server_args", ["ServerArgs"])["ServerArgs"]
    parser = argparse.ArgumentParser(prog="sglang serve")
    with contextlib.redirect_stderr(io.StringIO()):
        server_args_cls.add_cli_args(parser)
    return parser


TWIN_USAGE = " [--sglang-root SGLANG_ROOT]"  # the twin's own flag, in its usage line


def outcome(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[Any, str]:
    """(the namespace or the exit code, what argparse printed), the twin's own flag left out of both."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parsed: Any = {k: v for k, v in vars(parser.parse_args(argv)).items() if k != "sglang_root"}
        except SystemExit as exc:
            parsed = exc.code
    text = " ".join(err.getvalue().replace(TWIN_USAGE, "").split())
    return parsed, _CHOICES.sub(lambda m: "{" + ",".join(sorted(m.group(1).split(","))) + "}", text)


# a flag's choices as usage prints them: a set's (``SAMPLING_BACKEND_CHOICES`` in 0.5.13) come in the order of the
# process's string hashes, so the release's own message differs from run to run; compared as sets
_CHOICES = re.compile(r"\{([^{}\s]+)\}")


def sample(d: Declared, action: argparse.Action) -> list[str]:
    """A valid command line for the flag: its first choice, or a value of its type; as many as nargs takes."""
    if d.text("action") in NO_VALUE_ACTIONS or action.nargs == 0:
        return [d.options[0]]
    if action.choices:
        value = str(next(iter(action.choices)))
    else:
        value = SAMPLES[(d.text("type") or "str").rpartition(".")[2]]
    count = action.nargs if isinstance(action.nargs, int) else 1
    return [d.options[0], *[value] * count]


def test_every_flag_of_the_release_is_accepted_as_the_release_accepts_it(tree):
    calls, _ = declared(tree)
    assert len(calls) > 350  # the parse found add_cli_args, not a stray call
    mine = twin.build_parser(tree.root)
    theirs = release_parser(tree)
    generated = {o for d in calls if d.text("action") == "argparse.BooleanOptionalAction"
                 for o in mine._option_string_actions if o.startswith("--no-")}  # fmt: skip
    written = {o for d in calls for o in d.options}
    assert set(mine._option_string_actions) - {"-h", "--help", "--sglang-root"} - generated == written
    problems = []
    for d in calls:
        action = mine._option_string_actions[d.options[0]]
        typ = d.text("type")
        if typ is not None and getattr(action.type, "__name__", None) != typ.rpartition(".")[2]:
            problems.append(f"{d.options[0]}: type {action.type!r}, the release's {typ}")
        argv = ["--model-path", "/m", *sample(d, action)]
        got, want = outcome(mine, argv), outcome(theirs, argv)
        if got != want or not isinstance(got[0], dict):
            problems.append(f"{argv[2:]}: twin {got}, release {want}")
    assert not problems, "\n".join(problems[:10])


def test_every_default_is_the_releases(tree):
    calls, cls = declared(tree)
    literal = {}
    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
            with contextlib.suppress(ValueError):
                literal[n.target.id] = ast.literal_eval(n.value)
    parsed = vars(twin.build_parser(tree.root).parse_args(["--model-path", "/m"]))
    checked = 0
    for d in calls:
        default = d.text("default")
        if d.text("required") == "True":
            continue
        if default is None:
            expected = False if d.text("action") in ("'store_true'", "DeprecatedStoreTrueAction") else None
            if d.text("action") not in (None, "'store_true'", "DeprecatedStoreTrueAction") or d.dest in parsed and \
                    sum(1 for c in calls if c.dest == d.dest) > 1:  # fmt: skip
                continue  # an action with its own default, or a second flag of one dest
        elif default.startswith("ServerArgs.") and default.removeprefix("ServerArgs.") in literal:
            expected = literal[default.removeprefix("ServerArgs.")]
        else:
            try:
                expected = ast.literal_eval(d.kw["default"])
            except ValueError:
                continue
        assert parsed[d.dest] == expected, f"{d.options[0]}: {parsed[d.dest]!r}, the release's {expected!r}"
        checked += 1
    assert checked > 300


def test_a_bad_choice_is_refused_as_the_release_refuses_it(tree):
    mine, theirs = twin.build_parser(tree.root), release_parser(tree)
    refused = 0
    for action in theirs._actions:
        if not action.choices or action.nargs == 0 or action.type not in (None, str):
            continue
        argv = ["--model-path", "/m", action.option_strings[0], "__nope__"]
        code, printed = outcome(mine, argv)
        assert (code, printed) == outcome(theirs, argv)
        assert code == 2 and printed.startswith("usage: sglang serve [-h] --model-path MODEL_PATH")
        assert f"argument {'/'.join(action.option_strings)}: invalid choice: '__nope__'" in printed
        refused += 1
    assert refused > 40


def test_the_parser_comes_from_the_tree_it_is_given(default_release, tmp_path):
    """A flag only 0.5.13 has is refused by 0.5.12's parser and accepted by 0.5.13's (``--sglang-root``);
    one only 0.5.12 has, the other way round."""
    other = release_tree("0.5.13")
    if not isinstance(other, ReleaseTree):
        pytest.skip(f"SGLang 0.5.13 unavailable: {other.reason}")
    old_calls, new_calls = declared(default_release)[0], declared(other)[0]
    old = {o for d in old_calls for o in d.options}
    new = {o for d in new_calls for o in d.options}
    only_new = next(d for d in new_calls if d.options[0] not in old and d.text("action") == "'store_true'")
    only_old = next(d for d in old_calls if d.options[0] not in new and d.text("action") == "'store_true'")
    root = tmp_path / "sglang-0.5.13"
    (root / "python").mkdir(parents=True)
    (root / "python/sglang").symlink_to(other.package)
    parsed = twin.parse_command_line(["--model-path", "/m", "--sglang-root", str(root), only_new.options[0]])
    assert getattr(parsed.args, only_new.dest) is True and parsed.source.is_relative_to(root)
    assert outcome(twin.build_parser(default_release.root), ["--model-path", "/m", only_new.options[0]])[0] == 2
    assert getattr(twin.parse(["--model-path", "/m", only_old.options[0]]), only_old.dest) is True
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        twin.parse(["--model-path", "/m", "--sglang-root", str(root), only_old.options[0]])


def test_the_fields_are_named_by_the_releases_from_cli_args():
    args = twin.parse(["--model-path", "/m", "--tensor-parallel-size", "4", "--data-parallel-size", "2"])
    assert (args.tp_size, args.dp_size, args.sglang_root) == (4, 2, None)
    assert not hasattr(args, "tensor_parallel_size")


def test_a_config_file_is_merged_by_the_releases_merger(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("tp-size: 4\ndtype: bfloat16\nenable-dp-attention: true\n")
    args = twin.parse(["--model-path", "/m", "--config", str(config), "--dp-size", "2"])
    assert (args.tp_size, args.dtype, args.enable_dp_attention, args.dp_size) == (4, "bfloat16", True, 2)
    with pytest.raises(twin.InvalidServerArgs, match="Config file must be YAML format, got: .txt") as info:
        twin.parse(["--model-path", "/m", "--config", str(tmp_path / "serve.txt")])
    assert info.value.kind == "ValueError"


def test_flags_nothing_in_the_twin_reads_are_reported():
    line = twin.parse_command_line(["--model-path", "/m", "--tp-size", "8", "--dtype", "bfloat16",
                                    "--enable-nan-detection", "--max-running-requests", "64"])  # fmt: skip
    assert line.unmodelled(twin.MODELLED_ARGS) == {"--dtype": "bfloat16", "--enable-nan-detection": True}


def _reads_of_the_twin() -> set[str]:
    """The server arguments the twin's code reads: ``args.x`` / ``a.x`` / ``getattr(args, "x")`` in the
    resolver and the launcher, ``server_args.get("x")`` / ``_arg("x")`` in the HTTP layer and the model build."""
    found: set[str] = set()
    for rel in ("engine/server_args.py", "launch_server.py"):
        for n in ast.walk(ast.parse((TWIN / rel).read_text())):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("a", "args") \
                    and isinstance(n.ctx, ast.Load):  # fmt: skip
                found.add(n.attr)
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
                    and isinstance(n.args[0], ast.Name) and n.args[0].id in ("a", "args")):  # fmt: skip
                found.add(ast.literal_eval(n.args[1]))
    for rel in ("engine/http_api.py", "engine/loading/build.py"):
        for n in ast.walk(ast.parse((TWIN / rel).read_text())):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args
                    and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)):  # fmt: skip
                continue
            f = n.func
            if f.attr == "_arg" or (f.attr == "get" and isinstance(f.value, ast.Attribute) and f.value.attr == "server_args"):
                found.add(n.args[0].value)
    return found - {"sglang_root"}  # the twin's own flag


def test_the_modelled_arguments_are_what_the_twin_reads(release_package):
    reads = _reads_of_the_twin()
    assert reads - twin.MODELLED_ARGS == set(), "read by the twin but not in MODELLED_ARGS"
    assert twin.MODELLED_ARGS - reads == set(), "in MODELLED_ARGS but nothing in the twin reads it"
    fields = set(vars(twin.parse(["--model-path", "/m"])))
    assert fields >= twin.MODELLED_ARGS


def test_speculative_decoding_switches_mixed_chunk_off_as_the_release_does():
    from sandboxes.twin.scenario import load

    args = twin.parse(["--model-path", "/m", "--tp-size", "8", "--speculative-algorithm", "EAGLE", "--enable-mixed-chunk"])
    config = {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512, "num_attention_heads": 128,
              "num_key_value_heads": 128, "max_position_embeddings": 163840}  # fmt: skip
    lines = twin.resolve(args, twin.ModelInfo.from_config(config), twin.Platform.from_hardware(load("glm52_mi355x").hardware))
    assert args.enable_mixed_chunk is False
    assert ("warning", "Mixed chunked prefill is disabled because of using eagle speculative decoding.") in lines


def test_no_release_to_read_is_one_line(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(TWIN.parents[1]), "DAYZERO_CACHE": str(tmp_path / "cache"),
           "DAYZERO_SGLANG_SOURCE": "bundled", "TWIN_TIME_SCALE": "0"}  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(model)],
                          capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if "cannot read SGLang's server arguments" in line]
    assert len(errors) == 1 and "FileNotFoundError: " in errors[0] and "sandboxes.twin.workspace.release" in errors[0]


# --- launched ------------------------------------------------------------------------------------------------------


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_a_flag_the_twin_does_not_model_is_served_and_named(fixed_workspace, tmp_path):
    log = tmp_path / "dtype.log"
    with running(fixed_workspace, log, ["--tp-size", "8", "--dtype", "bfloat16"]) as server:
        info = _get(server.url + "/server_info")
    assert info["dtype"] == "bfloat16" and info["tp_size"] == 8
    assert info["twin"]["unmodelled_flags"] == {"--dtype": "bfloat16"} and info["twin"]["simulated"] is True
    assert info["twin"]["server_args_source"] == str(fixed_workspace / "sglang/python/sglang/srt/server_args.py")
    assert "have no simulated effect in the twin: --dtype bfloat16" in log.read_text()


def _release_message(release_package: Path, **values: str) -> str:
    """The ValueError ``_verify_quantization`` raises for a contradicted quantization, from the release's source."""
    source = ast.parse((release_package / "srt/configs/model_config.py").read_text())
    fn = next(n for n in ast.walk(source) if isinstance(n, ast.FunctionDef) and n.name == "_verify_quantization")
    raise_ = next(n for n in ast.walk(fn) if isinstance(n, ast.Raise) and "does not match" in ast.unparse(n))
    text = raise_.exc.args[0]  # type: ignore[union-attr]  (adjacent literals: one f-string)
    parts = [v.value if isinstance(v, ast.Constant) else values[ast.unparse(v.value).removeprefix("self.")]
             for v in (text.values if isinstance(text, ast.JoinedStr) else [text])]  # fmt: skip
    return "".join(parts)


def test_a_contradicted_quantization_is_refused_with_the_releases_message(fixed_workspace, release_package):
    message = _release_message(release_package, quant_method="quark", quantization="fp8")
    assert message.startswith("Quantization method specified in the model config (quark) does not match")
    proc = subprocess.run(
        [sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(fixed_workspace / "model"),
         "--tp-size", "8", "--quantization", "fp8"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TWIN_TIME_SCALE": "0"},
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"ValueError: {message}\n" in proc.stdout
    assert "Load weight begin" not in proc.stdout  # refused by ServerArgs, before any scheduler
