"""A launch remembers its weight load, and loads again whenever a file the load reads changed (the model's files,
the SGLang files it parses, the scenario) or a file appeared or disappeared in those folders; an edit of any other
file keeps the load. A workspace elsewhere with the same files (the next run's) finds the load too, with its own
paths in the log. A remembered failure comes back with the same log."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandboxes.twin import launch_server
from sandboxes.twin.engine.loading import loader, weights_cache
from sandboxes.twin.engine.loading.loader import WeightLoadError
from sandboxes.twin.workspace.materialize import materialize

QUARK_UTILS = "python/sglang/srt/layers/quantization/quark/utils.py"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("cache") / "ws"
    materialize("glm52_mi355x", dest)
    return dest


@pytest.fixture
def world(pristine, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    shutil.copytree(pristine, ws, symlinks=True)
    monkeypatch.setattr(weights_cache, "shared_cache", lambda: tmp_path / "user-cache")  # this test's own
    loads = []
    real = loader.load_weights

    def counting(*args, **kwargs):
        loads.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(loader, "load_weights", counting)
    monkeypatch.delenv("TWIN_SCENARIO", raising=False)

    def load(draft: bool = False, tp: int = 8, at: Path = ws):
        args = SimpleNamespace(model_path=str(at / "model"), sglang_root=str(at / "sglang"), tp_size=tp, dp_size=1,
                               enable_dp_attention=False, speculative_algorithm="EAGLE" if draft else None)  # fmt: skip
        return launch_server.load_weights(launch_server.find_workspace(args), args)

    return ws, load, loads


def test_an_unchanged_workspace_is_loaded_once(world):
    ws, load, loads = world
    first = load()
    second = load()
    assert len(loads) == 1 and second == first and first.target_bytes > 0
    load(tp=4)  # other arguments: another load
    assert len(loads) == 2
    assert len(list((ws / ".twin" / "weights-cache").glob("*.json"))) == 2


def test_an_edit_of_a_file_the_load_reads_loads_again(world):
    ws, load, loads = world
    first = load()
    config, scenario = ws / "model" / "config.json", ws / ".twin" / "scenario.yaml"
    utils = ws / "sglang" / QUARK_UTILS
    released = {p: p.read_text() for p in (config, scenario, utils)}
    cfg = json.loads(config.read_text())
    cfg["quantization_config"]["exclude"].append("re:never\\.matches")
    config.write_text(json.dumps(cfg, indent=2))
    load()
    assert len(loads) == 2
    # this process parsed the exclude matcher for the first load and the second took it from memory: it still
    # counts among the files the second load read
    utils.write_text(released[utils] + "\n# touched\n")
    load()
    assert len(loads) == 3
    scenario.write_text(released[scenario] + "\n# touched\n")
    load()
    assert len(loads) == 4
    added = ws / "sglang" / "python" / "sglang" / "srt" / "new_module.py"  # an import might find it
    added.write_text("X = 1\n")
    load()
    assert len(loads) == 5
    added.unlink()
    load()
    assert len(loads) == 5  # the files as they were one load ago: that load's outcome
    for path, text in released.items():  # as released again (a checkout, a pristine file put back)
        path.write_text(text)
    assert load() == first
    assert len(loads) == 5


def test_an_edit_of_a_file_the_load_does_not_read_keeps_the_load(world):
    ws, load, loads = world
    first = load()
    kernel = ws / "sglang" / "python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
    kernel.write_text(kernel.read_text().replace("#include", "#ifndef USE_ROCM\n#include", 1))  # a JIT kernel
    scenario = ws / ".twin" / "scenario.yaml"
    st = scenario.stat()
    os.utime(scenario, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # touched, the same contents
    assert load() == first
    assert len(loads) == 1
    utils = ws / "sglang" / QUARK_UTILS  # while a file the load reads still counts
    utils.write_text(utils.read_text() + "\n# touched\n")
    assert load() == first
    assert len(loads) == 2


def test_a_remembered_failure_comes_back_the_same_until_fixed(world):
    ws, load, loads = world
    with pytest.raises(WeightLoadError) as first:
        load(draft=True)  # the released workspace: the draft model does not load
    with pytest.raises(WeightLoadError) as again:
        load(draft=True)
    assert len(loads) == 1
    assert type(again.value) is type(first.value)
    assert (again.value.summary, again.value.log, again.value.param, again.value.draft) == \
        (first.value.summary, first.value.log, first.value.param, first.value.draft)  # fmt: skip
    utils = ws / "sglang" / QUARK_UTILS
    utils.write_text(
        utils.read_text().replace("def should_ignore_layer(", "def should_ignore_layer(  # edited\n", 1)
    )
    with pytest.raises(WeightLoadError):
        load(draft=True)
    assert len(loads) == 2  # the edit is seen: loaded again, not answered from the cache


def test_a_workspace_elsewhere_with_the_same_files_finds_its_load(world, tmp_path, monkeypatch):
    ws, load, loads = world
    other = tmp_path / "elsewhere" / "ws"  # the next run's workspace, say
    shutil.copytree(ws, other, symlinks=True)
    report = load()
    with pytest.raises(WeightLoadError) as here:
        load(draft=True)  # the released workspace: the draft model does not load, and the log names its files
    assert load(at=other) == report
    with pytest.raises(WeightLoadError) as there:
        load(draft=True, at=other)
    assert len(loads) == 2  # both from the per-user cache
    assert str(ws) in here.value.log and str(other) in there.value.log and str(ws) not in there.value.log
    monkeypatch.setattr(weights_cache, "shared_cache", lambda: tmp_path / "no-cache")
    shutil.rmtree(other / ".twin" / "weights-cache", ignore_errors=True)
    with pytest.raises(WeightLoadError) as computed:
        load(draft=True, at=other)
    assert len(loads) == 3
    assert (there.value.summary, there.value.log, there.value.param, there.value.draft) == \
        (computed.value.summary, computed.value.log, computed.value.param, computed.value.draft)  # fmt: skip


def test_an_outcome_naming_the_workspace_otherwise_stays_with_it() -> None:
    scope = ("/runs/a/workspace/model", "/runs/a/workspace/sglang")
    log = {"error": {"log": "File /runs/a/workspace/sglang/x.py\nno such file: /runs/a/workspace/tuning"}}
    stripped, relocatable = weights_cache._without_paths(log, scope)
    assert not relocatable  # the workspace's own folder, not one of the two the entry is keyed on
    stripped, relocatable = weights_cache._without_paths({"error": {"log": "File /runs/a/workspace/sglang/x.py"}},
                                                         scope)  # fmt: skip
    assert relocatable and "/runs/a" not in stripped["error"]["log"]
    moved = weights_cache._with_paths(stripped, ("/b/model", "/b/sglang"))
    assert moved == {"error": {"log": "File /b/sglang/x.py"}}


def test_an_unwritable_cache_is_not_used(world, tmp_path, monkeypatch):
    ws, load, loads = world
    (ws / ".twin" / "weights-cache").write_text("not a folder")
    (tmp_path / "user-file").write_text("not a folder either")
    monkeypatch.setattr(weights_cache, "shared_cache", lambda: tmp_path / "user-file")
    load()
    load()
    assert len(loads) == 2


def test_a_load_imports_only_the_code_its_key_hashes(fixed_workspace) -> None:
    """The key hashes the modules the entry points import (``code_scope.sources``), not the whole twin: that holds
    only while a real load, with its draft, imports no other twin module (the performance model, the memory plan,
    the server are imported by the launcher, around the load, not by it)."""
    import subprocess
    import sys

    from sandboxes.twin.engine.loading import code_scope

    scope = sorted(str(p.relative_to(code_scope.TWIN)) for p in code_scope.sources())
    probe = ("import sys, json\n"
             "from sandboxes.twin.engine.loading import loader, model_checks, platform\n"
             "from sandboxes.twin.models import derive, description, release_checkpoint\n"
             f"report = loader.load_weights({str(fixed_workspace / 'model')!r}, {str(fixed_workspace / 'sglang')!r}, "
             "with_draft=True, tp_size=8, platform=platform.Platform(gfx_arch='gfx950', memory_gb=288))\n"
             "assert report.draft_bytes > 0\n"
             "mods = [m.__file__ for n, m in list(sys.modules.items()) if n.startswith('sandboxes.twin')]\n"
             "print(json.dumps(sorted(f for f in mods if f)))\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=code_scope.TWIN.parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    imported = [str(Path(f).resolve().relative_to(code_scope.TWIN)) for f in json.loads(out.stdout.splitlines()[-1])]
    assert "engine/loading/loader.py" in imported
    assert sorted(set(imported) - set(scope)) == []
    # and what the launcher needs around the load is outside it: an edit there keeps every entry
    assert "perf/cost_model.py" not in scope and "engine/memory.py" not in scope and "launch_server.py" not in scope
