"""``agent review RUN``: format-patch series that ``git am`` applies on the pristine tree, a PR.md per patch
with crash, root cause, diff, simulated evidence and a fully rendered reproduce command, the run's summary PR,
and ``--push`` of the run branches to a git remote."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import git
import pytest

from agent.inspector.review import (
    CHECK_PORT,
    MARKER,
    SIMULATED_LABEL,
    ReviewError,
    collect_patches,
    collect_trees,
    push,
    remote_ref,
    two_sentences,
    write_review,
)
from agent.interactivity import Interactivity, per_user_text
from agent.trace import TraceWriter
from tests.agent.conftest import FINISHED_RUN_ID, run_agent
from tools.git_ops import CommitInput, Evidence, message

PLACEHOLDER = re.compile(r"\{[A-Za-z_]\w*\}|\$\{")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip


def _section(text: str, heading: str) -> str:
    """The Markdown section under ``## heading`` (up to the next ``## ``)."""
    return text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]


def _branch_trees(run_dir: Path) -> dict[str, list[str]]:
    """tree -> the run branch's commits after the pristine root, read with git itself."""
    run_id = json.loads((run_dir / "summary.json").read_text())["run_id"]
    out = {}
    for d in sorted((run_dir / "workspace").iterdir()):
        if (d / ".git").exists() and _git(d, "branch", "--list", f"dayzero/{run_id}"):
            root = _git(d, "rev-list", "--max-parents=0", f"dayzero/{run_id}")
            out[d.name] = _git(d, "rev-list", "--reverse", f"{root}..dayzero/{run_id}").split()
    return out


@pytest.fixture
def reviewed(copy_of_finished_run) -> Path:
    """The run's folder after ``agent review e2e``."""
    proc = run_agent(copy_of_finished_run, "review", FINISHED_RUN_ID)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = copy_of_finished_run / "runs" / FINISHED_RUN_ID
    assert str(run_dir / "review") in proc.stdout.replace("\n", "")
    return run_dir


def test_series_applies_on_the_pristine_tree_and_reproduces_the_branch(reviewed, tmp_path):
    branches = _branch_trees(reviewed)
    assert sum(len(c) for c in branches.values()) >= 1, "the default run commits patches"
    run_id = json.loads((reviewed / "summary.json").read_text())["run_id"]
    for tree, commits in branches.items():
        patches = sorted((reviewed / "review" / tree).glob("*.patch")) if commits else []
        assert len(patches) == len(commits), tree
        if not commits:
            continue
        assert [p.name[:4] for p in patches] == [f"{i:04d}" for i in range(1, len(commits) + 1)]
        clone = tmp_path / tree
        git.Repo.clone_from(reviewed / "workspace" / tree, clone).close()
        root = _git(clone, "rev-list", "--max-parents=0", f"origin/dayzero/{run_id}")
        _git(clone, "checkout", "-q", "-b", "upstream", root)
        _git(clone, "am", "-q", *map(str, patches))
        branch = f"origin/dayzero/{run_id}"
        assert _git(clone, "rev-parse", "HEAD^{tree}") == _git(clone, "rev-parse", branch + "^{tree}")
        assert _git(clone, "log", "--format=%s", f"{root}..HEAD").splitlines()[::-1] == [
            _git(clone, "log", "-1", "--format=%s", c) for c in commits]  # fmt: skip


def test_each_pr_holds_crash_root_cause_diff_simulated_evidence_and_a_rendered_command(reviewed):
    patches = collect_patches(reviewed)
    trials = {t["id"]: t for t in json.loads((reviewed / "summary.json").read_text())["trials"]}
    prs = sorted((reviewed / "review").glob("*/*.PR.md"))
    assert len(prs) == len(patches) >= 1
    for p in patches:
        text = (reviewed / "review" / p.tree / Path(_pr_name(reviewed, p))).read_text()
        assert text.startswith(f"# {p.title}\n")
        assert SIMULATED_LABEL in text
        assert p.crash_excerpt, p.title
        crash = _section(text, "The crash")
        assert all(line in crash for line in p.crash_excerpt)
        root = _section(text, "Root cause")
        assert p.root_cause and p.root_cause in root
        assert len(re.findall(r"[.!?](?:\s|$)", p.root_cause)) <= 2
        # the diff is the commit's, as git shows it
        repo = reviewed / "workspace" / p.tree
        for line in _git(repo, "diff", f"{p.commit}~1", p.commit).splitlines():
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---")):
                assert line in text
        evidence = _section(text, "Evidence")
        assert "simulated" in evidence.splitlines()[0]
        before = next(ln for ln in evidence.splitlines() if ln.startswith("- before:"))
        after = next(ln for ln in evidence.splitlines() if ln.startswith("- after:"))
        assert "(simulated)" in before and "(simulated)" in after
        assert f"trial {p.crash_trial}" in before and f"trial {p.check_trial}" in after
        reproduce = _section(text, "Reproduce the check")
        assert not PLACEHOLDER.search(reproduce), reproduce
        assert f"--port {CHECK_PORT}" in reproduce
        assert f"--base-url http://127.0.0.1:{CHECK_PORT}" in reproduce  # the benchmark that measured it
        # the launch is the check trial's configuration, flag by flag
        for flag, value in trials[p.check_trial]["flags"].items():
            assert f"--{flag}" in reproduce and (value is True or f"--{flag} {value}" in reproduce)


def _pr_name(run_dir: Path, patch) -> str:
    return next(p.name for p in (run_dir / "review" / patch.tree).glob(f"{patch.index:04d}-*.PR.md"))


def test_summary_pr_lists_every_commit_with_links_and_the_winning_command(reviewed):
    text = (reviewed / "review" / "PR.md").read_text()
    summary = json.loads((reviewed / "summary.json").read_text())
    assert SIMULATED_LABEL in text
    for sha in (s for c in summary["commits"] for s in c["commits"]):
        assert sha[:12] in text
    for c in summary["commits"]:
        assert c["title"] in text
    # the patches table links each PR and patch once, and so does the section on where to send them
    for section in ("Patches", "Where to send each patch"):
        links = re.findall(r"\]\(([^)]+\.(?:PR\.md|patch))\)", _section(text, section))
        assert len(links) == len(set(links)) == 2 * len(collect_patches(reviewed)), section
        assert all((reviewed / "review" / link).is_file() for link in links)
    for name, t in summary["targets"].items():
        assert re.search(rf"\| {name} \| {t['metric']} \| {t['target']:g} \|", text)
    assert "--port" in _section(text, "Winning launch command")
    # what one user sees behind each winner (issue 29), from its benchmark records: in the table and by its command
    for name, t in summary["targets"].items():
        if t.get("interactivity"):
            per_user = per_user_text(Interactivity.model_validate(t["interactivity"]))
            assert "tok/s/user, TPOT p50/p99" in per_user and per_user in _section(text, "Targets"), name
            assert per_user in _section(text, "Winning launch command"), name
            if t["metric"] == "throughput_at_knee":  # at the load it was measured at
                assert f"what one user sees there ({t['interactivity']['request_rate']:g} req/s" in text
    # the run report sits beside it, written by agent.inspector.report, and the summary links it
    for name in ("report.md", "report.html"):
        assert (reviewed / "review" / name).is_file()
        assert f"[{name}]({name})" in _section(text, "Report")


def test_rerun_replaces_the_folder_and_refuses_a_foreign_one(reviewed, tmp_path):
    stale = reviewed / "review" / "model" / "stale.patch"
    stale.parent.mkdir(exist_ok=True)
    stale.write_text("old")
    result = write_review(reviewed)
    assert not stale.exists() and (reviewed / "review" / MARKER).exists()
    assert all(p.exists() for p in result.patch_files + result.pr_files + [result.summary_pr])
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ReviewError, match="did not write"):
        write_review(reviewed, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_push_lands_each_branch_in_a_bare_repository(copy_of_finished_run, tmp_path):
    bare = tmp_path / "remote.git"
    git.Repo.init(bare, bare=True).close()
    proc = run_agent(copy_of_finished_run, "review", FINISHED_RUN_ID, "--push", str(bare))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = copy_of_finished_run / "runs" / FINISHED_RUN_ID
    run_id = json.loads((run_dir / "summary.json").read_text())["run_id"]
    pushed = 0
    for tree, commits in _branch_trees(run_dir).items():
        if not commits:
            continue
        head = _git(run_dir / "workspace" / tree, "rev-parse", f"dayzero/{run_id}")
        assert _git(bare, "rev-parse", f"refs/heads/{remote_ref(run_id, tree)}") == head
        pushed += 1
    assert pushed >= 1 and "pushed" in proc.stdout


def test_unreachable_remote_and_unknown_run_are_one_line_errors(copy_of_finished_run, tmp_path):
    proc = run_agent(copy_of_finished_run, "review", FINISHED_RUN_ID, "--push", str(tmp_path / "nowhere.git"))
    assert proc.returncode == 2
    assert proc.stdout.strip().count("\n") == 0 and "cannot reach remote" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr
    proc = run_agent(copy_of_finished_run, "review", "no-such-run")
    assert proc.returncode == 2
    line = proc.stdout.strip()
    assert line.startswith("error: no run 'no-such-run'") and line.count("\n") == 0
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------- a tiny synthetic run


LONG_PATH = "python/pkg/jit_kernel/csrc/elementwise/a_kernel_with_a_name_longer_than_a_line.cuh:38"


def _tiny_run(root: Path) -> Path:
    """A run with one tree, one crash, one patch and one benchmark, whose task file is gone."""
    run_dir = root / "runs" / "tiny"
    tree = run_dir / "workspace" / "src"
    tree.mkdir(parents=True)
    (tree / "kernel.h").write_text("#include <cuda_runtime.h>\n")
    repo = git.Repo.init(tree)
    who = git.Actor("t", "t@t")
    repo.index.add(["kernel.h"])
    repo.index.commit("pristine upstream: src\n\nUpstream-Kind: release\nUpstream-Version: 1.0\n", author=who,
                      committer=who)  # fmt: skip
    repo.create_head("dayzero/tiny").checkout()
    (tree / "kernel.h").write_text("#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif\n")
    repo.index.add(["kernel.h"])
    args = CommitInput(title="Guard the header", what_failed=LONG_PATH + ": missing header cuda_runtime.h",
                       root_cause="kernel.h includes a CUDA header unconditionally. ROCm has none. The build "
                                  "fails [inferred: from the compiler line]",
                       change="guard it", excerpt=["kernel.h:1:10: fatal error: 'cuda_runtime.h' file not found"],
                       evidence=Evidence(before="trial 1 crashed: missing header", after="trial 2 served 10 tok/s"),
                       patch_id="tiny/1")  # fmt: skip
    sha = repo.index.commit(message(args, "tiny", 2, simulated=True), author=who, committer=who).hexsha
    repo.close()
    launch = ["/bin/python", "-m", "engine", "--model", str(tree), "--port", "41001", "--tp-size", "2"]
    bench = ["/bin/python", "-m", "bench", "--base-url", "http://127.0.0.1:41002", "--output-file", "/tmp/o.jsonl",
             "--num-prompts", "4"]  # fmt: skip
    with TraceWriter(run_dir / "trace.jsonl", "tiny") as trace:
        trace.emit("run_started", task="tiny", task_path=str(root / "gone.yaml"), task_sha256="0", policy="playbook",
                   sandbox="local", engine="twin")  # fmt: skip
        for status, port in (("crashed", "41000"), ("up", "41001")):
            trace.emit("tool_call", call_id=f"l{port}", tool="launch_server", ok=status == "up", wall_seconds=0.1,
                       input={"flags": {"tp-size": 2}, "env": {"HF_TOKEN": "hf_secret_value"}},
                       result={"status": status, "argv": [*launch[:6], port, *launch[7:]]})  # fmt: skip
        trace.emit("tool_call", call_id="b", tool="run_benchmark", ok=True, wall_seconds=0.1,
                   result={"summary": "10 tok/s", "runs": [{"workload": "w", "command": bench}]})  # fmt: skip
        trace.emit("tool_call", call_id="c", tool="commit", ok=True, wall_seconds=0.1,
                   result={"commits": [{"source": "src", "sha": sha, "branch": "dayzero/tiny", "files": []}]})  # fmt: skip
    (run_dir / "run.json").write_text(json.dumps({"run_id": "tiny", "task_path": str(root / "gone.yaml")}))
    return run_dir


def test_tiny_run_without_its_task_file(tmp_path):
    run_dir = _tiny_run(tmp_path)
    [p] = collect_patches(run_dir)
    assert (p.tree, p.index, p.crash_trial, p.check_trial, p.trial_ids) == ("src", 1, 1, 2, [1, 2])
    assert p.root_cause == "kernel.h includes a CUDA header unconditionally. ROCm has none."
    assert "The build fails" in p.root_cause_detail and "from the compiler line" in p.root_cause_detail
    assert p.what_failed == LONG_PATH + ": missing header cuda_runtime.h"  # wrapped after its label
    assert p.crash_excerpt == ["kernel.h:1:10: fatal error: 'cuda_runtime.h' file not found"]
    assert p.evidence.simulated and p.evidence.measured_after == ["run_benchmark: 10 tok/s"]
    assert "+#ifndef USE_ROCM" in p.diff and p.files == ["kernel.h"]
    cmd = p.reproduce_command
    assert f"--port {CHECK_PORT} --tp-size 2" in cmd and "41001" not in cmd
    assert f"--base-url http://127.0.0.1:{CHECK_PORT} --output-file bench.jsonl --num-prompts 4" in cmd
    assert 'HF_TOKEN="$HF_TOKEN"' in cmd and "hf_secret" not in cmd  # a secret stays the caller's
    result = write_review(run_dir)
    assert [f.name for f in result.patch_files] == ["0001-Guard-the-header.patch"]
    assert result.patch_files[0].read_text().startswith(f"From {p.commit} ")
    summary = result.summary_pr.read_text()
    assert "not finished" in summary and "Guard the header" in summary
    # no report for an unfinished run, and the summary says why
    assert result.report_files == [] and "summary.json" in result.report_error
    assert f"Not written: {result.report_error}" in summary
    assert [t.tree for t in collect_trees(run_dir)] == ["src"]


def test_a_figure_no_failing_rate_was_seen_above_is_at_least_in_the_pr(tmp_path):
    """A best whose knee search saw no rate fail above its knee is a floor: the PR never shows it as a plain figure."""
    run_dir = _tiny_run(tmp_path)
    target = {"metric": "throughput_at_knee", "target": 2500, "achieved": 3000.0, "met": True, "trial": 2}
    (run_dir / "summary.json").write_text(json.dumps({
        "run_id": "tiny", "task": "tiny", "finish_reason": "all targets met", "simulated": True,
        "targets": {"throughput": {**target, "lower_bound": True}}, "trials": [], "commits": []}))  # fmt: skip
    summary = write_review(run_dir).summary_pr.read_text()
    targets = _section(summary, "Targets")
    assert "| at least 3000.000 (simulated) (no failing rate seen above its knee: a lower bound) |" in targets
    assert "throughput: at least 3000.0 (simulated) (throughput_at_knee), trial 2" in summary
    (run_dir / "summary.json").write_text(json.dumps({  # a knee with a failing rate above it: the plain figure
        "run_id": "tiny", "task": "tiny", "finish_reason": "all targets met", "simulated": True,
        "targets": {"throughput": target}, "trials": [], "commits": []}))  # fmt: skip
    summary = write_review(run_dir).summary_pr.read_text()
    assert "| 3000.000 (simulated) |" in _section(summary, "Targets") and "at least 3000" not in summary


def test_two_sentences():
    assert two_sentences("A is b. C is d. E is f.") == ("A is b. C is d.", "E is f.")
    assert two_sentences("x.y fails [inferred: z]") == ("x.y fails.", "inferred: z")
    assert two_sentences("re:[0-9]+ is kept") == ("re:[0-9]+ is kept.", "")


def test_push_to_nothing_is_a_review_error(tmp_path):
    run_dir = _tiny_run(tmp_path)
    with pytest.raises(ReviewError, match="cannot reach remote"):
        push(run_dir, str(tmp_path / "absent.git"))


def test_an_engine_fix_with_its_unit_test_shows_how_to_run_it(tmp_path):
    """An engine fix that comes with a test in the engine's own suite: the PR names it and how to run it."""
    run_dir = _tiny_run(tmp_path)
    assert "## Unit test" not in write_review(run_dir).pr_files[0].read_text()  # a fix without one
    with git.Repo(run_dir / "workspace" / "src") as repo:
        test = Path(repo.working_dir) / "test" / "srt" / "test_kernel_guard.py"
        test.parent.mkdir(parents=True)
        test.write_text("def test_guard():\n    assert '#ifndef USE_ROCM' in open('kernel.h').read()\n")
        repo.index.add(["test/srt/test_kernel_guard.py"])
        repo.git.commit("--amend", "--no-edit", "-q", env={"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
        sha = repo.head.commit.hexsha
    trace = run_dir / "trace.jsonl"  # the trace's commit record names the amended commit
    lines = trace.read_text().splitlines()
    lines[-1] = re.sub(r'"sha": "[0-9a-f]+"', f'"sha": "{sha}"', lines[-1])
    trace.write_text("\n".join(lines) + "\n")
    result = write_review(run_dir)
    [p] = [p for t in result.trees for p in t.patches]
    assert p.unit_tests == ["test/srt/test_kernel_guard.py"]
    text = result.pr_files[0].read_text()
    assert "python3 -m pytest test/srt/test_kernel_guard.py" in _section(text, "Unit test")
