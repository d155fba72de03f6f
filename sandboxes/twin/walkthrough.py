"""Run the walk-through in ``docs/twin.md``: its ``bash`` blocks, in order, in one shell.

The document is the single source: what a reader pastes is exactly what this runs and what the test suite
checks, so the walk-through cannot drift from the twin's behaviour.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "twin.md"
_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def bash_blocks(doc: Path = DOC) -> list[str]:
    return _BLOCK.findall(doc.read_text())


def script(doc: Path = DOC) -> str:
    body = "\n".join(f"echo '\n$ # --- step {i + 1} ---'\n{block}" for i, block in enumerate(bash_blocks(doc)))
    return "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body


def run(doc: Path = DOC, cwd: Path | None = None) -> int:
    if not doc.exists():
        raise FileNotFoundError(f"{doc}: the walk-through ships with the repository (run from a checkout)")
    return subprocess.run(["bash", "-c", script(doc)], cwd=cwd or doc.parents[1]).returncode
