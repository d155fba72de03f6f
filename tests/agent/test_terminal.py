"""What the terminal shows of a run: the end summary's account of what each change bought."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from agent import cli


def _summary(run_dir: Path) -> None:
    """A finished run's summary.json whose throughput gain (1000 -> 3000) came from three changes that interact:
    each measured alone (the best without it) is worth more than a third of the gain."""
    changes = [{"name": name, "before": "(unset)", "after": after, "effect": effect,
                "measured_between": [3000 - effect, 3000], "without": {"flags": {}, "env": {}}}
               for name, after, effect in (("layout", "tp-size=4, dp-size=2", 1100.0),
                                           ("kv-cache-dtype", "fp8_e4m3", 900.0),
                                           ("env AITER_TUNED", "on", 2000.0))]  # fmt: skip
    changes.append({"name": "chunked-prefill-size", "before": "(unset)", "after": "4096", "effect": None,
                    "measured_between": None, "without": {"flags": {}, "env": {}}})  # fmt: skip
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({
        "run_id": "r", "task": "t", "simulated": True, "finish_reason": "all targets met", "branch": "dayzero/r",
        "targets": {"throughput": {"target": 2500, "achieved": 3000.0, "met": True}}, "commits": [],
        "simulated_node_hours": 1.5, "best_config": {"throughput": {}},
        "explain": {"throughput": {"bring_up": 1000.0, "best": 3000.0, "changes": changes}},
        "outcome": {"kind": "targets_met", "exit_code": 0, "words": "every target met"},
    }))  # fmt: skip


def test_the_summary_says_one_at_a_time_effects_do_not_add_up(tmp_path, monkeypatch):
    _summary(tmp_path / "r")
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, width=120, color_system=None))
    assert cli._print_summary(tmp_path / "r") == 0
    text = " ".join(out.getvalue().split())
    assert "throughput: 1000.0 at bring-up -> 3000.0 (+2000.0)" in text
    assert "each change measured alone" in text and "do not add up" in text
    assert "the effects sum to +4000.0 against a gain of +2000.0" in text
    assert "layout: (unset) -> tp-size=4, dp-size=2: +1100.0 (the best without it: 1900.0)" in text
    assert "chunked-prefill-size: (unset) -> 4096: not isolated by a measurement" in text
