"""The report's figures, drawn with matplotlib's Agg canvas (no display, no pyplot state: safe in a web server's
threads) from a :class:`~agent.inspector.report.RunReport`, as PNG bytes.

``render_plots(report)`` returns ``{file name: PNG}``: ``pareto.png`` (throughput per GPU against tok/s per user
for every measured run, the frontier and its named points marked), ``throughput_vs_rate.png`` and
``ttft_vs_rate.png`` (the baseline's and the winner's rate runs, knee and TTFT limit marked), ``best_so_far.png``
(each target's best after each benchmark run) and ``time_breakdown.png`` (the winner's GPU time at its deciding
run). A figure without data says so (the web view shows it), or is left out (``with_data_only``: the written
report). Every figure of a run on the twin carries the simulated label. Legends sit below the axes, never over
the data; named points carry a short mark (A, B, C) that a table beside the figure spells out.

``frontier_overlay(frontiers)`` draws several runs' frontiers on one pair of axes (``agent runs --compare``).
"""

from __future__ import annotations

import io
import textwrap

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .frontier import Frontier
from .report import SIMULATED_BANNER, RateCurve, RunReport

COLORS = {"baseline": "#7f7f7f", "winner": "#1f77b4"}
LIMIT_COLOR = "#d62728"
GOAL_COLOR = "#2ca02c"
SIZE = (7.5, 4.3)
DPI = 110


def _figure(report: RunReport, title: str, size: tuple[float, float] = SIZE) -> Figure:
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(f"{title}\n{report.run_id}", fontsize=10)
    if report.simulated:
        fig.supxlabel(SIMULATED_BANNER, x=0.995, ha="right", fontsize=8, color=LIMIT_COLOR, fontweight="bold")
        fig.text(0.5, 0.5, "SIMULATED", ha="center", va="center", fontsize=54, color="#d62728", alpha=0.07,
                 rotation=20, zorder=0)  # fmt: skip
    return fig


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _legend_below(ax, ncols: int = 2) -> None:  # noqa: ANN001 - a matplotlib Axes
    """The legend under the axes (constrained layout makes room): it never covers a curve or a label."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=ncols,
                  frameon=False)  # fmt: skip


def _no_data(fig: Figure, message: str) -> None:
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=10)


def _curve_notes(ax, report: RunReport) -> None:  # noqa: ANN001 - a matplotlib Axes
    """Why a curve is missing (e.g. the baseline was never swept), written into the plot itself."""
    if report.curve_notes:
        text = "\n".join(textwrap.fill(n, 72) for n in report.curve_notes)
        ax.text(0.99, 0.03, text, transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="#6b4e00",
                bbox={"facecolor": "#fff8e1", "edgecolor": "#e0a800", "alpha": 0.9})  # fmt: skip


def _label(curve: RateCurve) -> str:
    from .report import fmt_flags

    return f"{curve.role}: trial {curve.trial} ({fmt_flags(curve.flags)})" + (
        ", screening" if curve.screening else ""
    )


def _no_curves(report: RunReport) -> str:
    return "; ".join(report.curve_notes) or "no rate runs in this run"


def _seed_dots(ax, curve: RateCurve, value) -> None:  # noqa: ANN001 - a matplotlib Axes, a run's figure
    """Each run of a rate run with several seeds, as a faint dot beside the rate's figure."""
    runs = [r for p in curve.points if len(p.runs) > 1 for r in p.runs]
    if runs:
        ax.plot(
            [r.request_rate for r in runs],
            [value(r) for r in runs],
            ".",
            color=COLORS[curve.role],
            alpha=0.35,
        )


def throughput_vs_rate(report: RunReport) -> bytes:
    fig = _figure(report, f"Output throughput against request rate ({report.curve_workload or '-'})")
    if not report.curves:
        _no_data(fig, _no_curves(report))
        return _png(fig)
    ax = fig.add_subplot()
    for c in report.curves:
        xs = [p.request_rate for p in c.points]
        ax.plot(xs, [p.output_throughput for p in c.points], "o-", color=COLORS[c.role], label=_label(c))
        _seed_dots(ax, c, lambda r: r.output_throughput)
        if c.knee_rate is not None and c.knee_throughput is not None:
            ax.axvline(c.knee_rate, color=COLORS[c.role], linestyle=":", linewidth=1)
            ax.plot([c.knee_rate], [c.knee_throughput], marker="*", markersize=15, color=COLORS[c.role],
                    markeredgecolor="black", linestyle="none")  # fmt: skip
            text = (f"at least {c.knee_throughput:.0f} tok/s\n{c.knee_rate:g} req/s, none seen failing"
                    if c.knee_lower_bound else f"knee {c.knee_rate:g} req/s\n{c.knee_throughput:.0f} tok/s")
            ax.annotate(text, (c.knee_rate, c.knee_throughput), textcoords="offset points", xytext=(8, -28),
                        fontsize=8)  # fmt: skip
    goal = next((t.goal for t in report.targets if t.workload == report.curve_workload
                 and t.metric in ("throughput_at_knee", "output_throughput")), None)  # fmt: skip
    if goal is not None:
        ax.axhline(goal, color=GOAL_COLOR, linestyle="--", linewidth=1, label=f"goal {goal:g} tok/s")
    _curve_notes(ax, report)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("output throughput (tok/s)")
    ax.grid(alpha=0.3)
    _legend_below(ax, ncols=1)
    return _png(fig)


def ttft_vs_rate(report: RunReport) -> bytes:
    fig = _figure(report, f"TTFT p50 and p99 against request rate ({report.curve_workload or '-'})")
    if not report.curves:
        _no_data(fig, _no_curves(report))
        return _png(fig)
    ax = fig.add_subplot()
    values = []
    for i, c in enumerate(report.curves):
        xs = [p.request_rate for p in c.points]
        p50, p99 = [p.ttft_p50_ms for p in c.points], [p.ttft_p99_ms for p in c.points]
        values += p50 + p99
        ax.plot(xs, p50, "o-", color=COLORS[c.role], label=f"{c.role} p50 (trial {c.trial})")
        ax.plot(xs, p99, "s--", color=COLORS[c.role], alpha=0.6, label=f"{c.role} p99 (trial {c.trial})")
        _seed_dots(ax, c, lambda r: r.ttft_p50_ms)
        if c.knee_rate is not None:
            ax.axvline(c.knee_rate, color=COLORS[c.role], linestyle=":", linewidth=1)
            # above the frame, where no curve is drawn (inside it, the points past the knee covered it)
            mark = f"at least {c.knee_rate:g}" if c.knee_lower_bound else f"knee {c.knee_rate:g}"
            ax.annotate(mark, (c.knee_rate, 1), xycoords=("data", "axes fraction"),
                        textcoords="offset points", xytext=(0, 2 + 10 * i), ha="center", va="bottom", fontsize=8,
                        color=COLORS[c.role], annotation_clip=False)  # fmt: skip
    if report.ttft_limit_ms is not None:
        ax.axhline(report.ttft_limit_ms, color=LIMIT_COLOR, linestyle="--", linewidth=1.2,
                   label=f"TTFT p50 limit {report.ttft_limit_ms:g} ms")  # fmt: skip
        values.append(report.ttft_limit_ms)
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_yscale("log")
    _curve_notes(ax, report)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("time to first token (ms)")
    ax.grid(alpha=0.3, which="both")
    _legend_below(ax)
    return _png(fig)


def best_so_far(report: RunReport) -> bytes:
    series = [s for s in report.best_so_far if s.points]
    fig = _figure(report, "Best so far against benchmark runs",
                  size=(SIZE[0], max(SIZE[1], 2.6 * len(series) + 1)))  # fmt: skip
    if not series:
        _no_data(fig, "no benchmark run measured a target")
        return _png(fig)
    axes = fig.subplots(len(series), 1, squeeze=False)[:, 0]
    for ax, s in zip(axes, series, strict=True):
        shown = [p for p in s.points if p.value is not None and not p.screening]
        ax.plot([p.run_index for p in shown], [p.value for p in shown], "o", color="#aaaaaa", markersize=4,
                label="a run's figure (within the target's conditions)")  # fmt: skip
        screened = [p for p in s.points if p.value is not None and p.screening]
        if screened:
            ax.plot([p.run_index for p in screened], [p.value for p in screened], "o", markerfacecolor="none",
                    color="#ff7f0e", markersize=5, label="screening run (a sweep's trial; not counted)")  # fmt: skip
        best = [p for p in s.points if p.best is not None]
        ax.step([p.run_index for p in best], [p.best for p in best], where="post", color=COLORS["winner"],
                label="best so far")  # fmt: skip
        ax.axhline(s.goal, color=GOAL_COLOR, linestyle="--", linewidth=1, label=f"goal {s.goal:g}")
        ax.set_title(f"{s.target} ({s.metric})", fontsize=9)
        ax.set_ylabel(s.unit, fontsize=8)
        ax.grid(alpha=0.3)
        _legend_below(ax)
    axes[-1].set_xlabel("benchmark run (in the order they ran)")
    return _png(fig)


def time_breakdown(report: RunReport) -> bytes:
    b = report.breakdown
    rate = f" at {b.request_rate:g} req/s" if b and b.request_rate else ""
    fig = _figure(
        report, f"GPU time of the winner (trial {b.trial}){rate}" if b else "GPU time of the winner"
    )
    if b is None:
        _no_data(fig, "the engine recorded no GPU time breakdown for the winner's runs")
        return _png(fig)
    ax = fig.add_subplot()
    parts = sorted(b.share.items(), key=lambda kv: kv[1])
    bars = ax.barh(
        [k.replace("_", " ") for k, _ in parts], [v * 100 for _, v in parts], color=COLORS["winner"]
    )
    for bar, (_, v) in zip(bars, parts, strict=True):
        ax.text(
            bar.get_width() + 0.3,
            bar.get_y() + bar.get_height() / 2,
            f"{v * 100:.1f} %",
            va="center",
            fontsize=8,
        )
    ax.set_xlabel("share of GPU time (%)")
    if b.bottleneck:
        ax.set_title(f"bottleneck: {b.bottleneck}", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


PICK_MARKS = {"max throughput": "A", "balanced": "B", "max interactivity": "C"}  # the report's table spells them out
FRONTIER_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")


def _per_user_axes(ax, xs: list[float]) -> None:  # noqa: ANN001 - a matplotlib Axes
    ax.set_xlabel("tok/s per user (1000 / median TPOT): interactivity")
    ax.set_ylabel("output tok/s per GPU: throughput")
    positive = [x for x in xs if x > 0]
    if positive and max(positive) / min(positive) > 10:
        ax.set_xscale("log")
    ax.grid(alpha=0.3, which="both")


def pareto(report: RunReport) -> bytes:
    """Every measured run as throughput per GPU against tok/s per user, the frontier joined, its named points
    marked A/B/C (spelled out with their flags in the table under the figure)."""
    fig = _figure(report, "Throughput per GPU against tok/s per user (Pareto frontier)", size=(SIZE[0], 4.8))
    f = report.frontier
    if f is None or not f.points:
        _no_data(fig, "no benchmark run with a median TPOT: no frontier")
        return _png(fig)
    ax = fig.add_subplot()
    full = [p for p in f.points if not p.screening and not p.on_frontier and p.within_ttft_limit is not False]
    late = [p for p in f.points if not p.screening and p.within_ttft_limit is False]
    screened = [p for p in f.points if p.screening]
    ax.plot([p.tok_s_per_user for p in full], [p.throughput_per_gpu for p in full], "o", color="#9e9e9e",
            markersize=4, alpha=0.8, label="a measured run")  # fmt: skip
    if late:
        ax.plot([p.tok_s_per_user for p in late], [p.throughput_per_gpu for p in late], "x", color=LIMIT_COLOR,
                markersize=5, alpha=0.7, label="over its workload's TTFT limit (not a frontier candidate)")  # fmt: skip
    if screened:
        ax.plot([p.tok_s_per_user for p in screened], [p.throughput_per_gpu for p in screened], "o",
                markerfacecolor="none", color="#ff7f0e", markersize=5,
                label="screening run (a sweep's burst; not a frontier candidate)")  # fmt: skip
    front = f.frontier
    ax.plot([p.tok_s_per_user for p in front], [p.throughput_per_gpu for p in front], "o-", color=COLORS["winner"],
            markersize=5, label="Pareto frontier")  # fmt: skip
    for pick in f.picks:
        p = pick.point
        ax.plot([p.tok_s_per_user], [p.throughput_per_gpu], marker="o", markersize=15, markerfacecolor="white",
                markeredgecolor="black", linestyle="none", zorder=5)  # fmt: skip
        ax.text(p.tok_s_per_user, p.throughput_per_gpu, PICK_MARKS[pick.role], ha="center", va="center",
                fontsize=8, fontweight="bold", zorder=6)  # fmt: skip
    _per_user_axes(ax, [p.tok_s_per_user for p in f.points])
    ax.plot([], [], marker="o", markersize=9, markerfacecolor="white", markeredgecolor="black", linestyle="none",
            label="A max throughput, B balanced, C max interactivity (table below)")  # fmt: skip
    _legend_below(ax)
    return _png(fig)


def frontier_overlay(frontiers: list[tuple[str, Frontier]], title: str = "Pareto frontiers compared",
                     simulated: bool = False) -> bytes:  # fmt: skip
    """Several runs' frontiers on one pair of axes (``[(label, frontier)]``, e.g. two run ids): each run's
    measured points faint, its frontier joined, its named points marked with the run's colour."""
    fig = Figure(figsize=(SIZE[0], 4.8), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(title, fontsize=10)
    if simulated:
        fig.supxlabel(SIMULATED_BANNER, x=0.995, ha="right", fontsize=8, color=LIMIT_COLOR, fontweight="bold")
    shown = [(label, f) for label, f in frontiers if f.points]
    if not shown:
        _no_data(fig, "no run here has a benchmark run with a median TPOT: no frontier")
        return _png(fig)
    ax = fig.add_subplot()
    xs: list[float] = []
    for i, (label, f) in enumerate(shown):
        color = FRONTIER_COLORS[i % len(FRONTIER_COLORS)]
        rest = [p for p in f.points if not p.on_frontier and not p.screening]
        ax.plot([p.tok_s_per_user for p in rest], [p.throughput_per_gpu for p in rest], "o", color=color,
                alpha=0.25, markersize=3)  # fmt: skip
        front = f.frontier
        ax.plot([p.tok_s_per_user for p in front], [p.throughput_per_gpu for p in front], "o", color=color,
                linestyle=("-", "--", ":", "-.")[i % 4], markersize=5,
                label=f"{label}: frontier of {len(front)} of {len(f.points)} runs")  # fmt: skip
        for pick in f.picks:
            p = pick.point
            ax.annotate(PICK_MARKS[pick.role], (p.tok_s_per_user, p.throughput_per_gpu), textcoords="offset points",
                        xytext=(6, 6 if i % 2 == 0 else -12), fontsize=8, fontweight="bold", color=color)  # fmt: skip
        xs += [p.tok_s_per_user for p in f.points]
    _per_user_axes(ax, xs)
    ax.plot([], [], linestyle="none", label="A max throughput, B balanced, C max interactivity")
    _legend_below(ax, ncols=1)
    return _png(fig)


PLOTS = {
    "pareto.png": pareto,
    "throughput_vs_rate.png": throughput_vs_rate,
    "ttft_vs_rate.png": ttft_vs_rate,
    "best_so_far.png": best_so_far,
    "time_breakdown.png": time_breakdown,
}


HAS_DATA = {  # what each figure draws from: without it, the figure only says it has nothing to show
    "pareto.png": lambda r: r.frontier is not None and bool(r.frontier.points),
    "throughput_vs_rate.png": lambda r: bool(r.curves),
    "ttft_vs_rate.png": lambda r: bool(r.curves),
    "best_so_far.png": lambda r: any(s.points for s in r.best_so_far),
    "time_breakdown.png": lambda r: r.breakdown is not None,
}


def render_plots(report: RunReport, with_data_only: bool = False) -> dict[str, bytes]:
    """The report's figures: file name -> PNG bytes; every one, or (``with_data_only``) those with something to
    draw: a written report says in words why a figure is missing instead of shipping an empty one."""
    return {name: draw(report) for name, draw in PLOTS.items() if not with_data_only or HAS_DATA[name](report)}
