"""Two runs of the same task at once share no port, workspace, branch or server, and both finish as one alone
would."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import yaml

from agent.trace import read_trace
from tests.agent.conftest import DEFAULT_TASK
from tests.agent.test_agent_run import _server_pids


def test_two_runs_of_one_task_at_once(tmp_path):
    task = tmp_path / "short.yaml"  # the default task, ending once the bring-up meets a single-stream target
    task.write_text(yaml.safe_dump({
        "extends": str(DEFAULT_TASK),
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 50}],
        "budgets": {"after_targets": {"node_hours": 0}},
    }))  # fmt: skip
    procs = {rid: subprocess.Popen([sys.executable, "-c", "from agent.cli import app; app()", "run", str(task),
                                    "--policy", "playbook", "--run-id", rid], cwd=tmp_path, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)  # fmt: skip
             for rid in ("one", "two")}
    outputs = {rid: p.communicate(timeout=600)[0] for rid, p in procs.items()}
    for rid, p in procs.items():
        assert p.returncode == 0, outputs[rid][-2000:]
    ports, branches, workspaces = {}, {}, {}
    for rid in procs:
        run_dir = tmp_path / "runs" / rid
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["targets"]["single_stream"]["met"]
        launches = [e for e in read_trace(run_dir / "trace.jsonl") if e.kind == "tool_call" and e.tool == "launch_server"]
        ports[rid] = {int(m.group(1)) for e in launches if (m := re.search(r":(\d+)$", e.result.get("endpoint") or ""))}
        branches[rid] = summary["branch"]
        workspaces[rid] = (run_dir / "workspace").resolve()
        assert not _server_pids(run_dir / "workspace")  # each stopped its own server
    assert ports["one"] and ports["two"] and not ports["one"] & ports["two"]
    assert branches["one"] != branches["two"] and workspaces["one"] != workspaces["two"]
