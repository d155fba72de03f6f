"""The repository's arrows point one way: the agent uses its tools, sandboxes and tasks; those never reach back up
into the agent's loop, its policies or the inspector (which reads runs afterwards)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what a lower layer may take from agent/: the one definition of a secret (every sink's redaction)
SHARED = {"agent.secrets"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_tools_sandboxes_and_tasks_never_import_the_agent():
    upward = {
        f"{path.relative_to(REPO)} imports {name}"
        for package in ("tools", "sandboxes", "tasks")
        for path in (REPO / package).rglob("*.py")
        for name in _imports(path)
        if (name == "agent" or name.startswith("agent.")) and name not in SHARED
    }
    assert not upward, sorted(upward)


def test_the_loop_does_not_read_runs_through_the_inspector_except_at_its_ends():
    # the loop's modules (agent/*.py, agent/policies, agent/fixes) never import the inspector; the CLI dispatches to
    # it and a finished run's summary explains its best with the inspector's ablation
    allowed = {"cli.py", "run.py"}
    loop = [p for p in (REPO / "agent").rglob("*.py") if "inspector" not in p.parts and p.name not in allowed]
    reaching = []
    for path in loop:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "inspector" in node.module.split("."):
                reaching.append(f"{path.relative_to(REPO)}: {node.module}")
    assert not reaching, reaching


def test_every_module_of_the_product_imports():
    # a module moved between packages leaves no relative import pointing at where it was (a lazy import inside a
    # function included: each is resolved against the package it sits in)
    missing = []
    for package in ("agent", "tools", "sandboxes", "tasks"):
        for path in (REPO / package).rglob("*.py"):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level:
                    base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                    target = ".".join([*base, node.module] if node.module else base)
                    if importlib.util.find_spec(target) is None:
                        missing.append(f"{path.relative_to(REPO)}:{node.lineno} from {'.' * node.level}"
                                       f"{node.module or ''} ({target})")  # fmt: skip
    assert not missing, missing
