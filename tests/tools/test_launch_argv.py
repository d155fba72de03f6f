"""The engine's launch command as the tools render it: the template's placeholders and a flag value's alike (a
separate draft checkpoint is ``{workspace}/draft``), any other braces (a JSON flag value) left as written."""

from __future__ import annotations

from pathlib import Path

from sandboxes.local import LocalSandbox
from tasks.spec import load_task
from tools.context import ToolContext

REPO = Path(__file__).resolve().parents[2]


def test_a_flag_value_names_the_workspace_and_other_braces_stay(tmp_path: Path) -> None:
    task = load_task(REPO / "tasks" / "kimi_k2_fp8_mi300x.yaml")
    sandbox = LocalSandbox(tmp_path / "ws", run_id="t")
    try:
        ctx = ToolContext(task=task, engine_name="twin", engine=task.engines.twin, sandbox=sandbox, run_id="t",
                          run_dir=tmp_path)  # fmt: skip
        override = '{"rope_scaling": {"factor": 2.0}}'
        argv = ctx.launch_argv({"tp-size": 8, "speculative-draft-model-path": "{workspace}/draft",
                                "json-model-override-args": override}, port=30123)  # fmt: skip
    finally:
        sandbox.close()
    assert argv[argv.index("--speculative-draft-model-path") + 1] == f"{sandbox.command_root}/draft"
    assert argv[argv.index("--json-model-override-args") + 1] == override
    assert argv[argv.index("--port") + 1] == "30123"
    assert argv[argv.index("--model-path") + 1] == f"{sandbox.command_root}/model"
