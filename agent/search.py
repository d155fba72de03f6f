"""The search layer the policies share: the task's space with its constraints, what was learnt from the
configurations measured so far, and the next candidate to measure.

A policy hands in its history (every configuration it measured on the objective, and the ones that crashed)
and the best so far with where its GPU time went; :func:`next_candidate` answers with a configuration that is
valid on the node, not measured yet and outside the regions launches have shown to crash:

1. first the best's one-knob neighbours, the knobs that act on its bottleneck first (prefill, decode,
   communication, launch overhead), so the search starts where the time goes;
2. then Optuna's TPE over the whole space, told every measurement (a crash counts as nothing served).

State lives in the policy's memo, not here: the Optuna study is rebuilt from the history on every call, so a
resumed run asks exactly what the killed one would have. Nothing here knows a model, a path or a figure.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import optuna
from pydantic import BaseModel, Field

from tasks.spec import TaskSpec

from .state import Trial

SPECULATIVE = "speculative-algorithm"
DRAFT_PATH = "speculative-draft-model-path"  # a separate draft checkpoint, where the task provides one
SPEC_DEPENDENT = ("speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens", DRAFT_PATH)
LAYOUT = ("tp-size", "dp-size", "enable-dp-attention")
# Knobs that act on each share of the GPU time (the twin's breakdown names; a real engine reports none, and then
# the space's own order is kept). General serving knowledge, not a model's.
KNOBS_FOR = {
    "prefill_attention": ("chunked-prefill-size", "attention-backend", "dp-size", "enable-dp-attention",
                          "mem-fraction-static"),
    "prefill_moe": ("chunked-prefill-size", "dp-size", "tp-size"),
    "prefill_dense": ("chunked-prefill-size", "dp-size", "tp-size"),
    "decode": ("kv-cache-dtype", SPECULATIVE, *SPEC_DEPENDENT, "max-running-requests", "cuda-graph-max-bs",
               "mem-fraction-static"),
    "communication": ("enable-aiter-allreduce-fusion", "tp-size", "dp-size", "enable-dp-attention"),
    "overhead": ("cuda-graph-max-bs", SPECULATIVE, *SPEC_DEPENDENT, "max-running-requests"),
}  # fmt: skip
ENV = "env:"  # how a knob that is an environment variable is named (``SearchSpace.knob_order``)
MAX_ASKS = 200  # samples TPE may draw before the space counts as exhausted (invalid or measured ones are redrawn)

optuna.logging.set_verbosity(logging.WARNING)


class Candidate(BaseModel):
    """A configuration: server flags (absent = the engine's default) and environment variables."""

    flags: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    def key(self) -> str:
        return json.dumps([self.flags, self.env], sort_keys=True, default=str)


class Measured(BaseModel):
    """A candidate and what it achieved on the objective (0 when it did not serve it)."""

    candidate: Candidate
    value: float
    crashed: bool = False
    crash_category: str | None = None  # the diagnosis category of a crash (e.g. out_of_memory)
    crash_signature: str | None = None  # the crash as the diagnosis read it (``crash_signature``): same = same crash
    serving: dict[str, Any] | None = None  # how the engine served it (its /server_info), when it came up
    near: float | None = None  # when it did not reach a knee: what it served at the rate it did not sustain


def with_draft_path(space: dict[str, list[Any]], flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` naming the draft checkpoint the task's ``space`` provides (its first path) when they speculate
    and name none, and naming none when they do not speculate: an algorithm is never launched without its
    draft, a draft never without an algorithm."""
    if not flags.get(SPECULATIVE):
        return {k: v for k, v in flags.items() if k != DRAFT_PATH}
    paths = [v for v in space.get(DRAFT_PATH, []) if v]
    if paths and not flags.get(DRAFT_PATH):
        return {**flags, DRAFT_PATH: paths[0]}
    return flags


class SearchSpace:
    """The task's ``search_space`` on the task's node: which configurations exist and are valid."""

    def __init__(self, task: TaskSpec):
        self.flags = {k: list(v) for k, v in task.search_space.flags.items()}
        self.env = {k: list(v) for k, v in task.search_space.env.items()}
        self.gpus = task.hardware.gpus

    def canonical(self, candidate: Candidate) -> Candidate | None:
        """The candidate as the engine would run it (None: not valid on this node). Unset and default-like
        values are dropped, speculative settings without an algorithm are dropped (with one, the task's draft
        checkpoint is named, when the space has one), a top-1 draft tree has one
        token per step plus the root (SGLang adjusts it so), a wider one verifies no more tokens than its draft
        scored (``max_draft_tokens``)."""
        flags = {k: v for k, v in candidate.flags.items() if v is not None and v is not False}
        env = {k: v for k, v in candidate.env.items() if v}
        tp, dp = int(flags.get("tp-size", 1)), int(flags.get("dp-size", 1))
        if dp == 1:
            flags.pop("dp-size", None)
            flags.pop("enable-dp-attention", None)
        if flags.get("enable-dp-attention"):
            if tp > self.gpus or dp > tp or tp % dp:
                return None
        elif tp * dp > self.gpus:
            return None
        if not flags.get(SPECULATIVE):
            for k in SPEC_DEPENDENT:
                flags.pop(k, None)
        else:
            # the engine wants all three once an algorithm is set
            steps, topk = int(flags.get("speculative-num-steps", 1)), int(flags.get("speculative-eagle-topk", 1))
            draft = steps + 1 if topk == 1 else int(flags.get("speculative-num-draft-tokens", steps + 1))
            if not 2 <= draft <= max_draft_tokens(steps, topk):
                return None
            flags.update({"speculative-num-steps": steps, "speculative-eagle-topk": topk,
                          "speculative-num-draft-tokens": draft})  # fmt: skip
        return Candidate(flags=with_draft_path(self.flags, flags), env=env)

    def layouts(self) -> list[dict[str, Any]]:
        """Every TP x DP split (with or without DP attention) the space allows and the node holds, those that use
        the most GPUs first, each as the flags that set it."""
        tps = [v for v in self.flags.get("tp-size", []) if v] or [1]
        dps = [v for v in self.flags.get("dp-size", []) if v] or [1]
        dpas = [v for v in self.flags.get("enable-dp-attention", []) if v is not None] or [False]
        found: dict[str, tuple[int, dict[str, Any]]] = {}
        for tp in tps:
            for dp in dps:
                for dpa in dpas:
                    c = self.canonical(Candidate(flags={"tp-size": tp, "dp-size": dp, "enable-dp-attention": dpa}))
                    if c is not None:
                        used = int(tp) if c.flags.get("enable-dp-attention") else int(tp) * int(dp)
                        found.setdefault(c.key(), (used, c.flags))
        return [flags for _, flags in sorted(found.values(), key=lambda uf: -uf[0])]

    def knob_order(self, shares: dict[str, float] | None = None) -> list[str]:
        """The space's knobs, those that act on the largest time ``shares`` first (``KNOBS_FOR``; without shares the
        space's own order). The layout is one knob, ``"layout"``: a change of the TP and DP split that keeps the
        node's GPUs busy is one move, where changing the TP size alone would leave GPUs idle or ask for more than
        the node has. Each environment variable is a knob too (``"env:NAME"``), after the flags."""
        order = list(self.flags)
        if shares:
            ranked: list[str] = []
            for part, _ in sorted(shares.items(), key=lambda kv: -kv[1]):
                ranked += [k for k in KNOBS_FOR.get(part, ()) if k in self.flags and k not in ranked]
            order = ranked + [k for k in order if k not in ranked]
        at = min((order.index(k) for k in LAYOUT if k in order), default=None)
        order = [k for k in order if k not in LAYOUT]
        if at is not None:
            order.insert(at, "layout")
        return order + [f"{ENV}{name}" for name in self.env]

    def settings(self, best: Candidate, knob: str, serving: dict[str, Any] | None = None) -> list[Candidate]:
        """What one knob can be set to, each as a partial candidate (the flags or variable it sets): the layout's
        splits (``layouts``), a flag's allowed values, a variable's. ``serving`` is how the best is served (its
        ``/server_info``): a value the engine already runs with for a flag the best leaves unset is no change, and
        is not proposed."""
        if knob == "layout":
            return [Candidate(flags=layout) for layout in self.layouts()]
        if knob.startswith(ENV):
            return [Candidate(env={knob[len(ENV):]: v}) for v in self.env[knob[len(ENV):]]]
        values = [v for v in self.flags[knob] if knob in best.flags or not _serves(serving, knob, v)]
        return [Candidate(flags={knob: v}) for v in values]

    def apply(self, best: Candidate, *settings: Candidate) -> Candidate | None:
        """The best with each setting applied (a layout replaces the best's whole split), as the engine would run
        it (None: not valid on this node)."""
        flags, env = dict(best.flags), dict(best.env)
        for s in settings:
            if any(k in LAYOUT for k in s.flags):
                flags = {k: v for k, v in flags.items() if k not in LAYOUT}
            flags.update(s.flags)
            env.update(s.env)
        return self.canonical(Candidate(flags=flags, env=env))

    def knob_moves(self, best: Candidate, shares: dict[str, float] | None = None,
                   serving: dict[str, Any] | None = None) -> dict[str, list[Candidate]]:  # fmt: skip
        """Each knob (``knob_order``) with the best's valid one-knob changes along it (none that leaves it as it
        is)."""
        moves: dict[str, list[Candidate]] = {}
        for knob in self.knob_order(shares):
            changed = [self.apply(best, s) for s in self.settings(best, knob, serving)]
            moves[knob] = [c for c in changed if c is not None and c.key() != best.key()]
        return moves

    def neighbours(self, best: Candidate, shares: dict[str, float] | None = None,
                   serving: dict[str, Any] | None = None) -> list[Candidate]:  # fmt: skip
        """The best's valid one-knob changes (``knob_moves``), one value of each knob in turn, so that the first
        knobs of the ranking (the largest time shares) each get a try early."""
        per_knob = list(self.knob_moves(best, shares, serving).values())
        out: list[Candidate] = []
        for i in range(max(map(len, per_knob), default=0)):
            out += [values[i] for values in per_knob if i < len(values)]
        return out

    def transplant(self, best: Candidate, other: Candidate, best_serving: dict[str, Any] | None = None,
                   other_serving: dict[str, Any] | None = None) -> Candidate | None:  # fmt: skip
        """The best's settings on the layout of ``other``, a configuration measured before (None: not valid on
        the node). The two ``/server_info`` configurations refine it: where the engine picked a knob's value on
        its own for the best (the best leaves it unset) and picked otherwise for ``other``, the best's value is
        set explicitly, if the space allows it (an engine may choose its attention backend by the heads each GPU
        holds, and a layout that lost with the engine's choice may win with the best's); a value the best sets
        that ``other`` was served with anyway is no change, and is left out."""
        flags = {k: v for k, v in best.flags.items() if k not in LAYOUT}
        flags.update({k: v for k, v in other.flags.items() if k in LAYOUT})
        for name, values in self.flags.items():
            key = serving_key(name)
            if name in LAYOUT or not best_serving or not other_serving or key not in best_serving:
                continue
            if name in flags:
                if name not in other.flags and _serves(other_serving, name, flags[name]):
                    flags.pop(name)
                continue
            picked = best_serving[key]
            if picked != other_serving.get(key) and picked in values:
                flags[name] = picked
        return self.canonical(Candidate(flags=flags, env=best.env))

    # --- Optuna -----------------------------------------------------------------------------------------------

    def _distributions(self) -> dict[str, optuna.distributions.CategoricalDistribution]:
        d = {f"flag:{k}": optuna.distributions.CategoricalDistribution(v) for k, v in self.flags.items()}
        d.update({f"env:{k}": optuna.distributions.CategoricalDistribution(v) for k, v in self.env.items()})
        return d

    def _params(self, cand: Candidate) -> dict[str, Any] | None:
        """A measured candidate as the study's parameters (None: it lies outside the space)."""
        params: dict[str, Any] = {}
        for k, values in self.flags.items():
            if k in SPEC_DEPENDENT and not cand.flags.get(SPECULATIVE):
                continue
            v = cand.flags.get(k)
            v = v if v is not None or None in values else (False if False in values else None)
            if v not in values:
                return None
            params[f"flag:{k}"] = v
        for k, values in self.env.items():
            v = cand.env.get(k, "")
            if v not in values:
                return None
            params[f"env:{k}"] = v
        return params

    def _sample(self, trial: optuna.Trial) -> Candidate:
        flags: dict[str, Any] = {}
        for k, values in self.flags.items():
            if k in SPEC_DEPENDENT and not flags.get(SPECULATIVE):
                continue
            flags[k] = trial.suggest_categorical(f"flag:{k}", values)
        env = {k: trial.suggest_categorical(f"env:{k}", values) for k, values in self.env.items()}
        return Candidate(flags=flags, env=env)

    def study(self, history: list[Measured], seed: int) -> optuna.Study:
        """A TPE study that has been told every measurement of ``history`` inside the space."""
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
        dists = self._distributions()
        for m in history:
            params = self._params(m.candidate)
            if params is None:
                continue
            study.add_trial(optuna.trial.create_trial(params=params, value=m.value,
                                                      distributions={k: dists[k] for k in params}))  # fmt: skip
        return study


def max_draft_tokens(steps: int, topk: int) -> int:
    """The most tokens one verify step can check with a draft tree of ``steps`` levels and ``topk`` branches: the
    root and every candidate the draft scored, ``topk`` at the first step and ``topk`` x ``topk`` at each later one
    (SGLang 0.5.12 ``eagle_utils.organize_draft_results`` keeps the best ``num_draft_tokens - 1`` of them; fewer
    prune the tree). A top-1 draft is a chain: one token per step."""
    if topk <= 1:
        return steps + 1
    return 1 + topk + (steps - 1) * topk * topk


Tree = tuple[int, int, int]  # a speculative configuration: (num-steps, eagle-topk, num-draft-tokens)
# the draft tree's moves, in the order a local search tries them: deeper and wider first (what single-stream
# decoding usually rewards), then back, then the verify budget of a wider tree
TREE_MOVES = ("deeper", "wider", "shallower", "fewer draft tokens", "more draft tokens", "narrower")


def tree_of(flags: dict[str, Any]) -> Tree | None:
    """A configuration's draft tree as the engine runs it (None: no speculative decoding)."""
    if not flags.get(SPECULATIVE):
        return None
    steps, topk = int(flags.get("speculative-num-steps") or 1), int(flags.get("speculative-eagle-topk") or 1)
    draft = steps + 1 if topk == 1 else int(flags.get("speculative-num-draft-tokens") or steps + 1)
    return steps, topk, draft


def tree_neighbours(
    allowed: dict[str, list[Any]], center: Tree, first: str | None = None
) -> list[tuple[Tree, str]]:
    """The draft trees one move away from ``center`` within the ``allowed`` values (a task's search space), each
    with its move (``TREE_MOVES``; ``first``, the move that led to ``center``, is tried first again):

    - deeper / shallower: the next allowed step count; a full tree keeps its width at every level (``topk``
      draft tokens more or fewer), a pruned one keeps its draft tokens (as far as the shallower tree has nodes);
    - wider / narrower: the next allowed top-k at the same depth, its draft tokens scaled with the width; where
      the largest allowed verify budget cannot hold that tree, two trees instead: the deepest full tree of the
      new width the budget holds, and the same depth pruned to the budget;
    - fewer / more draft tokens: the next allowed verify budget of the same tree (top-k > 1: it prunes, or keeps
      more of the candidates the draft scored).

    Only valid trees (``max_draft_tokens``) whose values the space allows; a top-1 tree has one token per step."""
    steps_ok = sorted(int(v) for v in allowed.get("speculative-num-steps", []) if v)
    topk_ok = sorted(int(v) for v in allowed.get("speculative-eagle-topk", []) if v) or [1]
    draft_ok = sorted(int(v) for v in allowed.get("speculative-num-draft-tokens", []) if v)
    s, k, d = center

    def step(values: list[int], v: int, by: int) -> int | None:
        if v not in values:
            return None
        i = values.index(v) + by
        return values[i] if 0 <= i < len(values) else None

    def cap(steps: int, topk: int) -> int:
        return min(max(draft_ok, default=0), max_draft_tokens(steps, topk))

    def tree(steps: int | None, topk: int | None, draft: int) -> Tree | None:
        if steps is None or topk is None or steps not in steps_ok or topk not in topk_ok:
            return None
        if topk == 1:
            return steps, 1, steps + 1
        fitting = [v for v in draft_ok if 2 <= v <= min(draft, cap(steps, topk))]
        return (steps, topk, fitting[-1]) if fitting else None  # the largest allowed budget up to ``draft``

    def deeper_or_shallower(by: int) -> list[Tree | None]:
        s2 = step(steps_ok, s, by)
        if s2 is None:
            return []
        full = d >= 1 + k * s
        return [tree(s2, k, d + k * (s2 - s) if full else min(d, 1 + k * s2))]

    def rewidth(by: int) -> list[Tree | None]:
        k2 = step(topk_ok, k, by)
        if k2 is None:
            return []
        want = 1 + (d - 1) * k2 // k  # the same depth at the new width
        budget = cap(s, k2)
        if k2 == 1 or want <= budget:
            return [tree(s, k2, want)]
        deepest = min(s, (budget - 1) // k2)
        return [tree(deepest, k2, 1 + k2 * deepest), tree(s, k2, budget)]

    def budget(by: int) -> list[Tree | None]:
        if k == 1:
            return []
        d2 = step(draft_ok, d, by) if d in draft_ok else None
        return [tree(s, k, d2)] if d2 is not None and 2 <= d2 <= cap(s, k) else []

    moves = {"deeper": lambda: deeper_or_shallower(1), "shallower": lambda: deeper_or_shallower(-1),
             "wider": lambda: rewidth(1), "narrower": lambda: rewidth(-1),
             "fewer draft tokens": lambda: budget(-1), "more draft tokens": lambda: budget(1)}  # fmt: skip
    order = [first] + [m for m in TREE_MOVES if m != first] if first in moves else list(TREE_MOVES)
    out: list[tuple[Tree, str]] = []
    for move in order:
        for t in moves[move]():
            if t is not None and t != center and t not in [o[0] for o in out]:
                out.append((t, move))
    return out


def measured_on(trials: list[Trial], target: str) -> list[Measured]:
    """A run's trials as the search reads them: each one that measured ``target`` with its figure, and each launch
    that crashed (0, a crash region)."""
    out = []
    for t in trials:
        cand = Candidate(flags=t.flags, env=t.env)
        if t.status != "up":
            out.append(Measured(candidate=cand, value=0.0, crashed=True))
        elif target in t.metrics:
            out.append(Measured(candidate=cand, value=t.metrics[target]))
    return out


def crash_signature(category: str | None, summary: str | None) -> str | None:
    """What makes two crashes the same crash: the diagnosis category and its summary, with what differs between
    two launches of one failure (addresses, ports, pids: long numbers) left out."""
    if not category and not summary:
        return None
    return f"{category or 'unknown'}: " + re.sub(r"0x[0-9a-fA-F]+|\d{4,}", "#", summary or "")


def repeated_crash_regions(history: list[Measured]) -> list[dict[str, Any]]:
    """The flag values shared by every configuration that crashed the same way, once two or more did (a crash that
    never changes, whatever else is varied: the knobs it does not depend on are dropped). A region some configuration
    was served in is no region (the crash needs more than those values)."""
    by_signature: dict[str, list[Candidate]] = {}
    for m in history:
        if m.crashed and m.crash_signature and m.crash_category != "out_of_memory":
            by_signature.setdefault(m.crash_signature, []).append(m.candidate)
    regions = []
    for cands in by_signature.values():
        if len({c.key() for c in cands}) < 2:
            continue
        shared = shared_flags([c.flags for c in cands])
        if shared and not any(not m.crashed and within(m.candidate.flags, shared) for m in history):
            regions.append(shared)
    return regions


_ABSENT = object()


def shared_flags(flag_sets: list[dict[str, Any]]) -> dict[str, Any]:
    """The flag values every one of ``flag_sets`` sets alike (a flag one of them leaves unset is not shared)."""
    first, rest = flag_sets[0], flag_sets[1:]
    return {k: v for k, v in first.items() if all(f.get(k, _ABSENT) == v for f in rest)}


def within(flags: dict[str, Any], region: dict[str, Any]) -> bool:
    """Whether ``flags`` sets every value of ``region``."""
    return all(flags.get(k, _ABSENT) == v for k, v in region.items())


def in_crash_region(cand: Candidate, history: list[Measured]) -> bool:
    """Whether a launch like one that crashed would crash too: the same configuration; after running out of memory,
    the same layout with as much static memory or more; or the values every configuration that crashed the same
    way shared (``repeated_crash_regions``: after two identical crashes, another knob)."""
    for m in history:
        if not m.crashed:
            continue
        if m.candidate.key() == cand.key():
            return True
        same_layout = all(m.candidate.flags.get(k) == cand.flags.get(k) for k in LAYOUT)
        if m.crash_category == "out_of_memory" and same_layout:
            crashed_mem = m.candidate.flags.get("mem-fraction-static")
            mem = cand.flags.get("mem-fraction-static")
            if crashed_mem is None or (mem is not None and mem >= crashed_mem):
                return True
    return any(within(cand.flags, region) for region in repeated_crash_regions(history))


def serving_key(flag: str) -> str:
    """The key under which ``/server_info`` reports a server flag (``--chunked-prefill-size``: ``chunked_prefill_size``)."""
    return flag.replace("-", "_")


def _serves(serving: dict[str, Any] | None, flag: str, value: Any) -> bool:
    """Whether a server reporting ``serving`` (``/server_info``) already runs with ``flag`` at ``value``."""
    if not serving:
        return False
    key = serving_key(flag)
    return key in serving and str(serving[key]).lower() == str(value).lower()


def next_candidate(space: SearchSpace, history: list[Measured], best: Candidate | None,
                   shares: dict[str, float] | None = None, seed: int = 0,
                   serving: dict[str, Any] | None = None) -> Candidate | None:  # fmt: skip
    """The next configuration to measure: the best's untried neighbours (its bottleneck's knobs first, none that
    the best's ``serving`` configuration already has), then TPE's proposals; None when the space holds nothing
    new."""
    # as the engine would run them: a recorded launch may spell a default out or keep a dropped flag
    history = [m.model_copy(update={"candidate": space.canonical(m.candidate) or m.candidate}) for m in history]
    seen = {m.candidate.key() for m in history}
    if best is not None:
        for cand in space.neighbours(best, shares, serving):
            if cand.key() not in seen and not in_crash_region(cand, history):
                return cand
    study = space.study(history, seed)
    for _ in range(MAX_ASKS):
        trial = study.ask()
        cand = space.canonical(space._sample(trial))
        if cand is None or cand.key() in seen or in_crash_region(cand, history):
            # invalid, measured or predicted to crash: tell TPE nothing was served there, and draw again
            study.tell(trial, 0.0)
            continue
        return cand
    return None
