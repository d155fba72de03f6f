"""The file tools (read_file, edit_file, apply_patch, search_source), called as the model calls them, cannot
reach the sandbox's own control data (its process record, token and run lock, the GPU ledger, the twin's ground
truth ``.twin/``) nor anything outside the workspace (``..``, absolute paths, symlinks leading out), and the
benchmark's records are read-only; every refusal is a failed result with a message, and nothing changes."""

from __future__ import annotations

import json

import pytest

from sandboxes.select import choose, open_workspace
from tasks.spec import load_task
from tools.context import ToolContext
from tools.runner import ToolRunner

NEEDLE = "NEEDLE-7f3a"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("boundaries")
    task = load_task("tasks/glm52_mi355x.yaml")
    choice = choose(task, "local")
    run_dir = tmp / "run"
    sandbox, repos = open_workspace(task, choice, run_dir / "workspace", "boundaries")
    root = sandbox.root
    (root / ".dayzero-servers.json").write_text(json.dumps({"x": {"1": {"start": 1, "argv": [NEEDLE]}}}))
    (root / ".dayzero-gpus.json").write_text("{}")
    (root / ".twin" / "note.txt").write_text(NEEDLE + "\n")
    (tmp / "outside.txt").write_text(NEEDLE + "\n")
    (root / "out-file").symlink_to(tmp / "outside.txt")
    (root / "out-dir").symlink_to("/etc")
    (root / "in-twin").symlink_to(".twin/scenario.yaml")  # links that stay inside but lead to control data
    (root / "sglang" / "twin-dir").symlink_to("../.twin")
    (root / ".bench").mkdir()
    (root / ".bench" / "run.jsonl").write_text('{"output_throughput": 1}\n')
    ctx = ToolContext(task=task, engine_name=choice.engine, engine=task.engines.twin, sandbox=sandbox,
                      run_id="boundaries", run_dir=run_dir, repos=repos)  # fmt: skip
    yield ToolRunner(ctx), root, tmp
    sandbox.close()


def snapshot(root, tmp) -> dict[str, str]:
    files = [*root.glob(".dayzero-*"), *(root / ".twin").rglob("*"), tmp / "outside.txt", root / ".bench" / "run.jsonl"]
    return {str(p): p.read_text(errors="replace") for p in files if p.is_file()}


CONTROL = [".dayzero-servers.json", ".dayzero-token", ".dayzero-run.lock", ".dayzero-gpus.json", ".twin/scenario.yaml",
           "./.twin/scenario.yaml", ".twin/note.txt", "in-twin", "sglang/twin-dir/scenario.yaml"]  # fmt: skip
ESCAPES = ["../outside.txt", "/etc/passwd", "model/../../outside.txt", "out-file", "out-dir/passwd", "out-dir"]


def patch_for(path: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,1 @@\n-x\n+y\n"


@pytest.mark.parametrize("path", CONTROL)
def test_control_data_is_refused_by_every_file_tool(world, path):
    runner, root, tmp = world
    before = snapshot(root, tmp)
    for tool, args in (("read_file", {"path": path}), ("edit_file", {"path": path, "old": "a", "new": "b"}),
                       ("apply_patch", {"diff": patch_for(path)})):  # fmt: skip
        rec = runner.call(tool, args)
        assert not rec.ok and "control data" in rec.error, (tool, rec.error)
    assert snapshot(root, tmp) == before


@pytest.mark.parametrize("path", ESCAPES)
def test_paths_leading_out_are_refused(world, path):
    runner, root, tmp = world
    before = snapshot(root, tmp)
    for tool, args in (("read_file", {"path": path}), ("edit_file", {"path": path, "old": NEEDLE, "new": "pwned"}),
                       ("apply_patch", {"diff": patch_for(path)})):  # fmt: skip
        rec = runner.call(tool, args)
        assert not rec.ok, (tool, path)
        assert any(w in rec.error for w in ("absolute paths", "'..'", "outside the workspace")), rec.error
    assert snapshot(root, tmp) == before


def test_search_and_listing_never_see_control_data_or_outside(world):
    runner, root, tmp = world
    rec = runner.call("search_source", {"regex": NEEDLE})
    assert rec.ok and rec.result["matches"] == [], rec.result
    rec = runner.call("search_source", {"regex": "defects|calibration", "glob": "*in-twin*"})
    assert rec.result["matches"] == []
    listed = {e.path for e in runner.ctx.sandbox.list_files(".", "**/*")}
    assert not any(p.startswith((".dayzero", ".twin")) or p in ("in-twin", "sglang/twin-dir") for p in listed)
    assert "model/config.json" in listed  # the workspace's own files are listed as before


def test_benchmark_records_are_read_only(world):
    runner, root, tmp = world
    assert runner.call("read_file", {"path": ".bench/run.jsonl"}).ok
    rec = runner.call("edit_file", {"path": ".bench/run.jsonl", "old": "1", "new": "9999"})
    assert not rec.ok and "benchmark's own records" in rec.error
    assert (root / ".bench" / "run.jsonl").read_text() == '{"output_throughput": 1}\n'


def test_a_patch_touching_control_data_changes_nothing(world):
    runner, root, tmp = world
    config = (root / "model" / "config.json").read_text()
    first = config.splitlines()[0]
    diff = (f"--- a/model/config.json\n+++ b/model/config.json\n@@ -1,1 +1,1 @@\n-{first}\n+{first} \n"
            f"--- a/.dayzero-servers.json\n+++ b/.dayzero-servers.json\n@@ -0,0 +1,1 @@\n+{{}}\n")  # fmt: skip
    rec = runner.call("apply_patch", {"diff": diff})
    assert not rec.ok and "control data" in rec.error
    assert (root / "model" / "config.json").read_text() == config


def test_workspace_files_are_still_edited(world):
    runner, root, tmp = world
    config = (root / "model" / "config.json").read_text()
    rec = runner.call("edit_file", {"path": "model/config.json", "old": '"exclude": [', "new": '"exclude":  ['})
    assert rec.ok, rec.error
    assert (root / "model" / "config.json").read_text() != config
    assert runner.call("edit_file", {"path": "model/config.json", "old": '"exclude":  [', "new": '"exclude": ['}).ok
    assert (root / "model" / "config.json").read_text() == config


def test_a_repeated_edit_or_patch_is_recognised_as_made(tmp_path):
    """A resumed run repeats a call whose record the killed process never wrote: the second edit (or patch) finds
    its text already there and changes nothing, instead of failing or wrapping it twice."""
    from types import SimpleNamespace

    from agent.secrets import Redactor
    from sandboxes.local import LocalSandbox
    from tools.source import EditInput, PatchInput, apply_patch, edit_file

    sb = LocalSandbox(tmp_path / "ws")
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "k.cuh").write_text("#pragma once\n#include <cuda_runtime.h>\nint x;\n")
    ctx = SimpleNamespace(sandbox=sb, redactor=Redactor())
    wrap = EditInput(path="k.cuh", old="#include <cuda_runtime.h>\n",
                     new="#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif\n")
    first, again = edit_file(ctx, wrap), edit_file(ctx, wrap)
    assert first.ok and again.ok and "already edited" in again.summary and again.diff == first.diff
    assert (tmp_path / "ws" / "k.cuh").read_text().count("#ifndef USE_ROCM") == 1
    diff = "--- a/k.cuh\n+++ b/k.cuh\n@@ -5 +5,2 @@\n int x;\n+int y;\n"
    p1, p2 = apply_patch(ctx, PatchInput(diff=diff)), apply_patch(ctx, PatchInput(diff=diff))
    assert p1.ok and p2.ok and "already applied" in p2.summary
    assert (tmp_path / "ws" / "k.cuh").read_text().count("int y;") == 1
    bad = apply_patch(ctx, PatchInput(diff="--- a/k.cuh\n+++ b/k.cuh\n@@ -1 +1 @@\n-nothing\n+else\n"))
    assert not bad.ok and "does not apply" in bad.summary  # neither way: still a failure
