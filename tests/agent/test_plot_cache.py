"""The report's figures are drawn once per content (agent/inspector/plot_cache.py): a report drawn again, or a copy
of its run, reads them from the per-user cache; anything that changes the report's data draws them again."""

from __future__ import annotations

import os

from agent.inspector import plot_cache, plots
from agent.inspector.report import build_report
from tests.agent.conftest import FINISHED_RUN_ID


def test_a_figure_is_drawn_once_per_content(finished_run_root, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    drawn: list[str] = []

    def fake(name: str):
        return lambda report: drawn.append(name) or f"{name} of {report.finish_reason}".encode()

    monkeypatch.setattr(plots, "PLOTS", {name: fake(name) for name in plots.PLOTS})
    report = build_report(finished_run_root / "runs" / FINISHED_RUN_ID)
    first = plot_cache.rendered(report)
    assert sorted(drawn) == sorted(plots.PLOTS) and first == {n: f"{n} of {report.finish_reason}".encode()
                                                            for n in plots.PLOTS}  # fmt: skip
    assert plot_cache.rendered(report.model_copy(deep=True)) == first  # the same data: nothing drawn
    assert len(drawn) == len(plots.PLOTS)
    changed = report.model_copy(update={"finish_reason": "budget"})
    assert plot_cache.rendered(changed)["pareto.png"] == b"pareto.png of budget"
    assert len(drawn) == 2 * len(plots.PLOTS)
    for entry in (tmp_path / "cache" / "plots").glob("*.png"):
        entry.unlink()  # an emptied (or unwritable) cache: drawn again, the same figures
    assert plot_cache.rendered(report) == first and len(drawn) == 3 * len(plots.PLOTS)


def test_the_cache_keeps_the_most_recently_used(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(plot_cache, "KEEP", 3)
    folder = plot_cache.folder()
    folder.mkdir(parents=True)
    for i in range(5):
        (folder / f"{i}.png").write_bytes(b"x")
        os.utime(folder / f"{i}.png", ns=(i * 10**9, i * 10**9))
    plot_cache._evict()
    assert sorted(p.name for p in folder.glob("*.png")) == ["2.png", "3.png", "4.png"]
