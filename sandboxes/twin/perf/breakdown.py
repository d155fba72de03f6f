"""One decode (verify) step of the cost model, split into the kernels' work it charges.

``CostModel.decode_terms`` says which *term* a step is made of (weight reads, KV reads, compute, ...); a reviewer
asking "is MoE over-charged for this model?" needs the components behind them: per layer kind the attention's KV
or recurrent-state traffic and FLOPs, the routed experts' bytes at their tokens per expert, the dense GEMMs, the
all-reduces, the fixed per-step costs. ``decode_components`` lists them from the same attributes the cost model
uses, each with its kernel class, so they add up to its terms (``tests/twin/test_step_breakdown.py`` holds them
to it); nothing here is a cost of its own. ``paid`` is their per-kernel roofline, for comparison. Printed by ``python -m tests.benchmarks.step_breakdown``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .attention import state_traffic
from .cost_model import CostModel


@dataclass(frozen=True)
class Component:
    """One piece of a step: ``term`` is the ``decode_terms`` key it belongs to; ``seconds`` what it costs alone;
    ``kernel`` the kernel class it runs in (a class's bytes and FLOPs overlap, classes add: ``paid``); ``detail``
    what it is made of."""

    name: str
    term: str
    seconds: float
    detail: str = ""
    bytes: float = 0.0  # what it moves through HBM on one GPU (memory terms)
    flops: float = 0.0  # what it computes on one GPU (compute terms)
    peak: str = ""  # the dtype of the matrix peak its FLOPs run at (compute terms)
    kernel: str = ""  # its kernel class; empty: a term outside the kernels' roofline (communication, launches, ...)


MEMORY_TERMS = ("weight_reads", "kv_reads", "state_reads")


def paid(components: list[Component]) -> float:
    """What the kernels' work would cost if each kernel class paid the larger of its own bytes and FLOPs and the
    classes ran one after the other: the per-kernel roofline. The cost model charges ``max(all bytes, all FLOPs)``
    (``CostModel.decode``), which lets one class's FLOPs hide under another's bytes; the difference is how much
    that lump saves (docs/twin.md, "Mechanisms from kernel benchmarks")."""
    classes: dict[str, list[float]] = {}
    for c in components:
        if c.kernel:
            pair = classes.setdefault(c.kernel, [0.0, 0.0])
            pair[0 if c.term in MEMORY_TERMS else 1] += c.seconds
    return sum(max(pair) for pair in classes.values())


def decode_components(model: CostModel, batch: int, context: float, tokens_per_seq: int = 1) -> list[Component]:
    """The components of one decode step of ``batch`` sequences at mean ``context`` tokens, ``tokens_per_seq``
    tokens each (a speculative verify above 1)."""
    m, s = model, model.sizes
    tokens = batch * tokens_per_seq
    out: list[Component] = []
    # weights every step reads whatever the routing, split over the TP group
    dense = m.fixed_weight_bytes / m.moe_g
    out.append(Component("dense weights (attention proj, shared experts, dense MLP, LM head)", "weight_reads",
                         dense / m.bw, f"{dense / 1e9:.2f} GB/GPU", bytes=dense, kernel="dense GEMMs"))  # fmt: skip
    linear = 2 * tokens * m.active_linear_params / m.flop_g
    out.append(Component("dense GEMM FLOPs", "compute", linear / m.linear_flops,
                         f"{m.linear_flops / 1e12:.0f} TFLOPS/GPU", flops=linear, peak=m.wfmt,
                         kernel="dense GEMMs"))  # fmt: skip
    touched = m.experts_touched(tokens)
    per_expert = tokens * m.top_k / max(touched, 1e-9)
    experts = s.moe_layers * touched * m.expert_bytes / m.moe_g
    moe_bw, moe_rate = m.moe_rates(tokens)
    out.append(Component("routed experts (touched)", "weight_reads", experts / moe_bw,
                         f"{touched:.0f}/{m.num_experts} experts x {s.moe_layers} layers, "
                         f"{per_expert:.1f} tok/expert, {experts / 1e9:.2f} GB/GPU", bytes=experts,
                         kernel="fused MoE"))  # fmt: skip
    moe = 2 * tokens * m.top_k * s.moe_layers * s.expert_params / m.flop_g
    out.append(Component("MoE GEMM FLOPs", "compute", moe / moe_rate, f"{moe_rate / 1e12:.0f} TFLOPS/GPU",
                         flops=moe, peak=m.wfmt, kernel="fused MoE"))  # fmt: skip
    for grp, stream in zip(m.attention, m.decode_kv, strict=True):
        kind = f"{type(grp.attention).__name__} x{grp.count}"
        if grp.linear:
            state = batch * state_traffic(tokens_per_seq) * grp.count * grp.state_bytes
            out.append(Component(f"{kind}: recurrent state read+write", "state_reads", state / m.bw,
                                 f"{grp.state_bytes / 1e6:.2f} MB/seq/layer, x{state_traffic(tokens_per_seq)}",
                                 bytes=state, kernel=kind))  # fmt: skip
            work = tokens * grp.count * grp.step_flops_per_token / m.g
            out.append(Component(f"{kind}: recurrent update FLOPs", "compute", work / m.linear_attn_flops,
                                 flops=work, peak="bf16", kernel=kind))  # fmt: skip
            continue
        keys = grp.keys(context)
        reads = batch * stream.reads(tokens_per_seq) * grp.count
        kv = reads * keys * grp.kv_bytes_per_key
        via = f", {stream.kernel} at {stream.bandwidth / 1e12:.1f} TB/s" if stream.kernel else ""
        out.append(Component(f"{kind}: KV read", "kv_reads", kv / stream.bandwidth,
                             f"{keys:.0f} keys x {grp.kv_bytes_per_key:.0f} B/key/GPU{via}", bytes=kv,
                             kernel=kind))  # fmt: skip
        work = tokens * grp.count * keys * grp.flops_per_key / m.g
        out.append(Component(f"{kind}: attention FLOPs", "compute", work / m.attention_flops(grp),
                             "sparse-MLA class" if grp.sparse else "dense class", flops=work, peak="bf16",
                             kernel=kind))  # fmt: skip
        if grp.indexer_bytes_per_key:
            index = reads * context * grp.indexer_bytes_per_key
            out.append(Component(f"{kind}: DSA indexer keys", "kv_reads", index / stream.bandwidth,
                                 f"{context:.0f} keys x {grp.indexer_bytes_per_key:.0f} B/key", bytes=index,
                                 kernel=kind))  # fmt: skip
            floor = grp.count * m.scenario.calibration.sparse_attention_latency_us * 1e-6
            out.append(Component(f"{kind}: sparse kernels' latency floor", "kernel_launch", floor))
    out.append(Component("all-reduce", "communication", m.allreduce_time(tokens), f"TP{m.moe_g}"))
    out.append(Component("kernel launches", "kernel_launch", m.kernel_overhead(batch), f"{m.model_kernels} kernels"))
    if m.config.speculative:
        out.append(Component("draft steps", "draft", m.draft_time(batch)))
    cal = m.scenario.calibration
    out.append(Component("CPU per step (hidden by overlap up to the GPU's time)", "scheduler",
                         (cal.scheduler_overhead_ms + cal.decode_step_overhead_ms) * 1e-3))  # fmt: skip
    return out
