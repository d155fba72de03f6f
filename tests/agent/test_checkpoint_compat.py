"""Checkpoints outlive library upgrades: the state's types are registered with LangGraph's serializer, and a
checkpoint written by the previous release loads with LangGraph's strict mode on (the default of a later LangGraph,
which refuses to rebuild types it was not told about).

``tests/fixtures/prev_release/checkpoints.sqlite`` was written by dayzero at 73ae843 (``agent run
tasks/glm52_mi355x.yaml --max-trials 1 --run-id prev-release``, the twin)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).parent.parent / "fixtures" / "prev_release"

PROBE = r"""
import json, sys
from pathlib import Path
from agent.graph import checkpointer, saved_states
from agent.state import AgentState, Observation, Trial

run_dir = Path(sys.argv[1])
history = list(checkpointer(run_dir).list({"configurable": {"thread_id": "prev-release"}}))
last = history[0].checkpoint["channel_values"]
states = saved_states(run_dir, "prev-release")
print(json.dumps({
    "checkpoints": len(history),
    "observations_typed": all(isinstance(o, Observation) for o in last.get("observations", [])),
    "trials_typed": all(isinstance(t, Trial) for t in last.get("trials", [])),
    "n_observations": len(last.get("observations", [])),
    "states": len(states),
    "last_step": states[-1].step if states else None,
    "done": states[-1].done if states else None,
}))
"""


def load_strictly(run_dir: Path) -> tuple[dict, str]:
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"}
    out = subprocess.run([sys.executable, "-c", PROBE, str(run_dir)], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).parent.parent.parent, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_the_previous_release_checkpoint_loads_in_strict_mode(tmp_path):
    shutil.copy(FIXTURE / "checkpoints.sqlite", tmp_path / "checkpoints.sqlite")
    facts, stderr = load_strictly(tmp_path)
    assert "unregistered" not in stderr and "Deserializing" not in stderr
    assert facts["checkpoints"] > 1 and facts["n_observations"] >= 1
    assert facts["observations_typed"] and facts["trials_typed"]  # rebuilt as our models, not left as raw data
    assert facts["states"] >= 1 and facts["done"] is True
