"""The review checklist a maintainer would apply to a run's patches, over real runs: one defect per commit; each
commit quotes its own defect's crash (the trial quoted as "before" crashed with that diagnosis) and its "after"
trial ran with the patch applied; PR.md says where to send each patch and in which order; no path of the machine
the run ran on, anywhere in the commits or the PR material.

Two runs: the suite's shared finished run of the default task, and the same task with only deep speculative
chains allowed, where the config fix's relaunch crashes compiling a kernel before the engine fix is made (the run
in which an engine fix once quoted that compile error as its crash)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import git
import pytest

from agent.graph import saved_state
from agent.inspector.review import collect_trees, write_review
from tests.shared_runs import DEFAULT_TASK, NO_PACING, run_agent
from tools.git_ops import repo_relative

DEEP_RUN = "deep"


@pytest.fixture(scope="module")
def deep_run(tmp_path_factory) -> Path:
    """The default task with speculative chains of 4 steps and more: trial 2 crashes loading the draft's weights,
    the config fix's relaunch (trial 3) crashes compiling a kernel only deep chains build, the guard fixes that,
    and the engine counterpart of the config fix is made after both (six trials, unpaced: seconds)."""
    root = tmp_path_factory.mktemp("deep")
    task = root / "deep.yaml"
    task.write_text(f"extends: {DEFAULT_TASK}\nsearch_space:\n  flags:\n    speculative-num-steps: [4, 5, 6]\n"
                    f"{NO_PACING}")  # fmt: skip
    proc = run_agent(root, "run", str(task), "--policy", "playbook", "--run-id", DEEP_RUN, "--max-trials", "6")
    assert (root / "runs" / DEEP_RUN / "summary.json").exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return root / "runs" / DEEP_RUN


@pytest.fixture(scope="module")
def finished_run(finished_run_root, tmp_path_factory) -> Path:
    """A copy of the shared finished run (the review writes into it)."""
    import shutil

    dest = tmp_path_factory.mktemp("finished") / "e2e"
    shutil.copytree(finished_run_root / "runs" / "e2e", dest, symlinks=True)
    return dest


def _forbidden(run_dir: Path) -> list[str]:
    """Paths of the machine the run ran on: temporary and work folders, the home, the run's folder (as it is, and
    as the run's own record names it, a copied run's first folder)."""
    recorded = json.loads((run_dir / "run.json").read_text()).get("task_path", "")
    out = ["/tmp/", "/work/", "/root/", os.path.expanduser("~") + "/", str(run_dir), str(run_dir.resolve())]
    for line in (run_dir / "trace.jsonl").read_text().splitlines()[:50]:
        out += re.findall(r'"(/[^"]*/runs/[^"/]+)/workspace', line)
    return sorted({p for p in out + ([os.path.dirname(recorded)] if recorded else []) if p and p != "/"})


def check_review(run_dir: Path) -> None:
    result = write_review(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    trials = {t["id"]: t for t in summary["trials"]}
    state = saved_state(run_dir, summary["run_id"])
    assert state is not None
    patches = {sha: p for p in state.patches for sha in p.commits}
    trees = result.trees
    reviewed = [(t, p) for t in trees for p in t.patches]
    assert reviewed, "the run committed patches"
    defects_by_tree: dict[str, set[str]] = {}
    for tree, p in reviewed:
        # one defect per commit: the commit is one patch record, with that record's files only
        record = patches[p.commit]
        assert sorted(p.files) == sorted(f.split("/", 1)[1] for f in record.files if f.startswith(tree.tree + "/"))
        assert record.defect not in defects_by_tree.setdefault(tree.tree, set()), (tree.tree, record.defect)
        defects_by_tree[tree.tree].add(record.defect)
        # the crash quoted is the defect's own: the trial quoted as "before" crashed with that diagnosis
        crash = trials[p.crash_trial]
        assert p.crash_trial == record.crash_trial, p.title
        assert crash["status"] != "up" and crash["category"] == record.category, (p.title, crash["diagnosis"])
        assert p.what_failed == repo_relative(crash["diagnosis"], tree.tree), p.title
        assert p.crash_excerpt == [repo_relative(ln, tree.tree) for ln in crash["excerpt"]], p.title
        # the "after" trial ran the configuration that crashed, with the patch applied, and served
        check = trials[p.check_trial]
        assert f"trial {p.check_trial} " in p.evidence.after
        assert check["status"] == "up" and check["served"] and check["step"] > record.step_applied, p.title
        assert check["flags"] == crash["flags"]
    # PR.md says where to send each patch, and in which order
    text = result.summary_pr.read_text()
    where = text.split("## Where to send each patch", 1)[1].split("\n## ", 1)[0]
    for _, p in reviewed:
        assert p.destination is not None and p.destination.kind in ("engine", "checkpoint"), p.title
        line = next(ln for ln in where.splitlines() if f"]({p.pr_file})" in ln)
        assert p.destination.project in line and (p.destination.url or "") in line
        pr = (result.out_dir / str(p.pr_file)).read_text()
        assert "## Where to send it" in pr and p.destination.project in pr
    for d in result.defects:
        kinds = [f.destination.kind for f in d.fixes]
        assert kinds == sorted(kinds, key=["checkpoint", "engine", "other"].index), d  # checkpoint first
        if len(d.fixes) > 1:
            assert all(f.why and f.why != "the only fix of this crash" for f in d.fixes)
    # a commit whose crash has a fix in the checkpoint and one in the engine: both routed, the engine's standalone
    assert any({"checkpoint", "engine"} <= {f.destination.kind for f in d.fixes} for d in result.defects)
    # no path of this machine in the commits (the pristine one included) or anything the review wrote
    forbidden = _forbidden(run_dir)
    for tree in trees:
        with git.Repo(run_dir / "workspace" / tree.tree) as repo:
            for c in repo.iter_commits(tree.branch):
                assert not [f for f in forbidden if f in c.message], (tree.tree, c.summary, c.message)
    for path in sorted(result.out_dir.rglob("*")):
        if path.is_file() and path.suffix in (".md", ".patch", ".html"):
            content = path.read_text(errors="replace")
            assert not [f for f in forbidden if f in content], (path.name, [f for f in forbidden if f in content])
    # each command says how the trees were: the check ran with the patch, the crash without it
    for tree, p in reviewed:
        assert _had(p.reproduce_command, p.check_trial, tree.tree, p.index), p.title
        assert p.crash_command and not _had(p.crash_command, p.crash_trial, tree.tree, p.index), p.title
    # reproduction is the real engine's, in its image, from relative paths
    for _, p in reviewed:
        assert "python3 -m sglang.launch_server" in p.reproduce_command and "docker run" in p.reproduce_command
        assert "sglang.bench_serving" in p.reproduce_command and "twin" not in p.reproduce_command


def _had(command: str, trial: int | None, tree: str, index: int) -> bool:
    """Whether a command's first line (the trees as its trial had them) says ``tree`` had its patch ``index``."""
    head = command.splitlines()[0]
    assert head.startswith(f"# the trees as trial {trial} had them: "), head
    part = next(x for x in head.split(": ", 1)[1].split("; ") if x.startswith(f"{tree}/ "))
    return part.endswith("with all its patches") or f"{index:04d}" in re.findall(r"\d{4}", part)


def test_the_deep_chain_run_passes_the_checklist(deep_run):
    check_review(deep_run)
    # the engine fix was made after trial 3's compile error, and still quotes trial 2's weight mismatch
    trees = {t.tree: t for t in collect_trees(deep_run)}
    engine = next(p for p in trees["sglang"].patches if p.files[0].endswith("_nextn.py"))
    assert engine.crash_trial == 2 and "weight_loader" in engine.crash_excerpt[0]
    # the config fix's check ran before the engine fix existed: reproducing it must not apply the engine fix
    [config] = trees["model"].patches
    assert not _had(config.reproduce_command, config.check_trial, "sglang", engine.index)


def test_the_finished_run_passes_the_checklist(finished_run):
    check_review(finished_run)
