"""A commit message leaves this machine: the workspace, the run folder and the home never appear in it, while a
path inside the engine's image (what every user of it sees) stays as the log has it."""

from __future__ import annotations

import os

import git

from sandboxes.local import LocalSandbox
from tasks.spec import load_task
from tests.sandboxes.conftest import make_source
from tests.shared_runs import DEFAULT_TASK
from tools.context import ToolContext
from tools.git_ops import CommitInput, Evidence, commit
from tools.machine_paths import roots_of, strip_machine_paths

IMAGE_FRAME = 'File "/usr/local/lib/python3.12/dist-packages/tvm_ffi/cpp/extension.py", line 542, in build_ninja'


def test_paths_of_this_machine_become_the_trees_own(tmp_path):
    src = make_source(tmp_path / "upstream", {"python/pkg/k.cuh": "#include <cuda_runtime.h>\n"})
    run_dir = tmp_path / "runs" / "r1"
    sandbox = LocalSandbox(run_dir / "workspace")
    repos = sandbox.prepare({"engine": src})
    task = load_task(DEFAULT_TASK)
    ctx = ToolContext(task=task, engine_name="twin", engine=task.engines.twin, sandbox=sandbox, run_id="r1",
                      run_dir=run_dir, repos=repos, trial=4)  # fmt: skip
    (repos["engine"] / "python/pkg/k.cuh").write_text("#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif\n")
    ws = sandbox.root
    home = os.path.expanduser("~")
    crash = [IMAGE_FRAME, f"{ws}/engine/python/pkg/k.cuh:1:10: fatal error: 'cuda_runtime.h' file not found"]
    args = CommitInput(title="Guard the include", what_failed=f"{ws}/engine/python/pkg/k.cuh:1: missing header",
                       root_cause=f"see {run_dir}/logs/server-003.log and {home}/.cache/dayzero/x",
                       change="wrap it", excerpt=crash, evidence=Evidence(before="trial 3 crashed", after="trial 4 up"),
                       files=["engine/python/pkg/k.cuh"])  # fmt: skip
    result = commit(ctx, args)
    assert result.ok, result.summary
    with git.Repo(repos["engine"]) as repo:
        text = repo.head.commit.message
    for path in (str(tmp_path), str(ws), str(run_dir), f"{home}/"):
        assert path not in text, path
    assert "    python/pkg/k.cuh:1:10: fatal error" in text  # the file as the engine's repository names it
    assert IMAGE_FRAME in text  # the image's own path stays
    assert "logs/server-003.log" in text and "~/.cache/dayzero/x" in text
    sandbox.close()


def test_roots_and_prefixes():
    roots = roots_of("/srv/runs/a/workspace", "/srv/runs/a", None)
    assert roots == ["/srv/runs/a/workspace", "/srv/runs/a"]
    text = "/srv/runs/a/workspace/model/config.json, /srv/runs/a/logs/x.log, /srv/runs/ab/c, /srv/runs/a"
    assert strip_machine_paths(text, roots, home="/home/u") == "model/config.json, logs/x.log, /srv/runs/ab/c, ."
    assert strip_machine_paths("/home/u/.cache/f and /home/user2/g", [], home="/home/u") == \
        "~/.cache/f and /home/user2/g"  # fmt: skip
