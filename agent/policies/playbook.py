"""The offline expert: a staged plan, and fixes reasoned from the diagnosis and the workspace.

Stages: bring-up (the largest tensor-parallel layout, measured), kernel tuning (shapes the log says ran on a
fallback path), single-stream decode (a short speculative chain, then a local search over the draft tree's
depth, width and draft tokens, then KV-cache dtype and all-reduce fusion, each kept only if it helps),
throughput layout (each TP x DP split, and DP attention, screened with one burst each; the best two measured at
full length, and the runner-up again with the winner's settings), knee (speculative decoding under load,
shallowest first; the draft tree's width once the targets are met; references that explain the win), then search
(the shared search layer, ``agent/search.py``: the best's neighbours, its bottleneck's knobs first, then TPE) for
as long as the budget lasts, targets met or not. Each stage starts from the best the previous one found.

A crash is answered from its diagnosis: a weight shape mismatch on a module the checkpoint keeps unquantized
means the exclude list names it differently from the engine, so the same entries are added under the
engine's prefix; a missing CUDA header in a ROCm build is guarded; out-of-memory trades static memory, graph
batch or prefill chunk; an invalid flag is dropped. No model, path or number of a particular case is known here.

One tool call per decision, so every step is checkpointed and a resumed run repeats nothing finished.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from agent.state import AgentState, Call, Observation, Trial
from tasks.spec import TaskSpec
from tools.bench import knee_is_lower_bound
from tools.loader_names import renamed_prefix, renames
from tools.parsed import json_value
from tools.source import unified_diff
from tools.weight_suspects import layers_from, num_layers

from ..ablation import explain_best
from ..fixes import rocm_port
from ..fixes.engine_modules import EngineSource, ModuleTree
from ..fixes.excludes import SCALE, engine_test, own_modules
from ..fixes.excludes import engine_excludes as draft_excludes
from ..fixes.excludes import excluded as _excluded  # Quark's matching rule, one definition
from ..fixes.rocm_port import HIP_COUNTERPARTS, _own_counterparts  # noqa: F401 - the guard's mapping, re-exported
from ..interactivity import measured
from ..outcomes import node_hours_left
from ..search import (
    LAYOUT,
    SPEC_DEPENDENT,
    SPECULATIVE,
    Candidate,
    Measured,
    SearchSpace,
    crash_signature,
    next_candidate,
    serving_key,
    tree_neighbours,
    tree_of,
    with_draft_path,
)
from .base import Decision, PolicyContext
from .joint_moves import pair_moves, rescale_to_meant
from .known_failures import (
    KernelBlock,
    changed_flags,
    fails_again,
    launch_key,
    trigger_at,
    would_give,
)
from .upstream_fixes import (
    _map_mtp_exclude_entry,
    class_at,
    draft_class,
    draft_module_prefix,
    map_draft_excludes,
)

MAX_FIXES_PER_CONFIG = 6
# Layout screening sends every prompt at once (a burst) and ranks layouts by the throughput they serve: 128 prompts
# per GPU of the node keeps a burst's ramp and drain a small share of its run even at one DP rank per GPU. The
# knee of each of the best few is then measured at full length, starting just below the rate its burst served.
SCREEN_PROMPTS_PER_GPU = 128
CONFIRM_TOP = 2
# the references (the bring-up knee, the best without one change) explain a win, they are not claims: one seed, a
# coarser bracket and runs this share of the workload's length, so that they leave the after-targets budget to search
REFERENCE_LENGTH = 0.25
KNEE_MEASURES = ("knee", "knee_full", "baseline")  # measurements whose value is a throughput at the knee
NEAR_GROWTH = 1.1  # a knee search that starts near the knee (a prediction, or the best knee it must beat) steps up by 10 %
# a shape that does not shard over the TP group, in the release's words: distributed/utils ensure_divisibility's
# "X is not divisible by Y", a quantization block check, or a model's own `assert ... % tp_size == 0`
TP_DIVISIBILITY = r"is not divisible by|%\s*\(?\s*(self\.)?\w*tp_size\w*\s*\)?\s*==\s*0"
SPEC_KEYS = (SPECULATIVE, *SPEC_DEPENDENT)  # the speculative-decoding flags, as the search layer names them
# single-stream runs the draft tree's local search may spend after its first tree (``_tree_item``); on the twin's
# scenarios it reaches the best allowed tree in at most this many (a coordinate search stops sooner when no
# neighbour of the best improves)
TREE_SEARCH_RUNS = 8
WORKSPACE_CHANGES = ("edit_file", "apply_patch", "discard_changes")  # the calls that change what a launch runs
DEPTH_MOVES = ("deeper", "shallower")  # the chain's depth: what reaches a single-stream target; width comes later


# the flag that selects each of the engine's paths a kernel library serves (tools.diagnose.KernelPath): when the library
# has no kernel for the problem, another value of it runs the same work on another path
KERNEL_PATH_FLAGS = {"attention": "attention-backend", "moe": "moe-runner-backend"}


def _allowed(task: TaskSpec, flag: str) -> list[Any]:
    return list(task.search_space.flags.get(flag, []))


def _layout_name(tp: int | None, dp: int | None, dp_attention: bool | None) -> str:
    """A parallel layout as the plan's labels name it: ``TP8 x DP4 with DP attention``."""
    return f"TP{tp or 1} x DP{dp or 1}" + (" with DP attention" if dp_attention else "")


def _module(param: str | None) -> str | None:
    """The module a parameter belongs to (a fused-MoE parameter, ``experts.w13_weight``, to ``experts``)."""
    if not param:
        return None
    return re.sub(r"\.(w13_|w2_)?(weight|weight_scale|bias|weight_scale_inv|input_scale)$", "", param)


def _engine_granularity(name: str) -> str:
    """The module name the engine asks the exclude list about: one expert's projection is part of the
    layer's fused-MoE module (``mlp.experts.3.up_proj`` -> ``mlp.experts``), which quantization asks about as
    a whole; every other module by its own name."""
    m = re.match(r"(.*\.experts)\.\d+\.[^.]+$", name)
    return m.group(1) if m else name


def _split_prefix(checkpoint: str, engine: str) -> tuple[str, str]:
    """The differing prefixes of two module names that share a suffix (``a.b.x.y``, ``c.x.y`` -> ``a.b``, ``c``)."""
    cp, ep = checkpoint.split("."), engine.split(".")
    n = 0
    while n < min(len(cp), len(ep)) and cp[-1 - n] == ep[-1 - n]:
        n += 1
    return ".".join(cp[: len(cp) - n]), ".".join(ep[: len(ep) - n])


def _layer_module(suffix: str) -> bool:
    """A module inside a decoder layer (attention or MLP), where a draft layer is renamed as a whole."""
    return suffix.startswith(("self_attn.", "mlp."))


def _regex_for_engine(entry: str, cp: str, ep: str) -> str | None:
    """The ``re:`` entry ``entry`` rewritten for the engine's prefix: the part of its pattern that matches the
    checkpoint's layer prefix replaced by the engine's (None when no leading part of it matches that prefix). The
    same rewrite the upstream fix proposes to the engine (``upstream_fixes._map_mtp_exclude_entry``)."""
    return next(iter(_map_mtp_exclude_entry(entry, cp, ep)), None)


def _engine_excludes(modules: list[str], cp: str, ep: str, exclude: list[str]) -> list[str]:
    """Exclude entries naming, under the engine's prefix, the layer's modules the list keeps unquantized, in the
    list's own style: one ``re:`` entry per pattern that covers them, exact names where exact names do."""
    adds: list[str] = []
    for m in modules:
        suffix = m[len(cp) + 1:] if cp and m.startswith(cp + ".") else None
        if suffix is None:
            continue
        # the decoder layer's modules live under the engine's layer prefix; the rest of the checkpoint's layer
        # (an MTP layer's eh_proj) belongs to the model that holds that layer
        owner = ep if _layer_module(suffix) else ep.rpartition(".")[0]
        if not owner:
            continue
        engine_name = _engine_granularity(f"{owner}.{suffix}")
        if not _excluded(m, exclude) or _excluded(engine_name, exclude + adds):
            continue
        covering = next((e for e in exclude if e.startswith("re:") and _excluded(m, [e])), None)
        rewritten = _regex_for_engine(covering, cp, ep) if covering else None
        if rewritten is not None and _excluded(engine_name, [rewritten]):
            adds.append(rewritten)
        else:
            adds.append(engine_name)
    return adds


def _insert_entries(text: str, adds: list[str]) -> tuple[str, str] | None:
    """(old, new) for an edit that puts ``adds`` first in the file's exclude list, keeping its layout."""
    m = re.search(r'"exclude"\s*:\s*\[(\s*)(\]?)', text)
    if not m:
        return None
    gap, empty = m.group(1), m.group(2)
    if "\n" in gap and not empty:  # one entry per line: the same indentation
        indent = gap.rsplit("\n", 1)[1]
        body = "".join(f"{json.dumps(a)},\n{indent}" for a in adds)
        return m.group(0), m.group(0) + body
    entries = ", ".join(json.dumps(a) for a in adds)
    return m.group(0), f'"exclude": [{entries}]' if empty else f'"exclude": [{entries}, '


def _model_frames(ctx: PolicyContext, diag: dict) -> tuple[list[tuple[str, str, int]], dict[str, str]]:
    """The crash's traceback frames in the workspace's model files (``(file, function, line)``, outermost first),
    and each of those files' source, read once."""
    frames = [(f["file"], f["function"], int(f["line"])) for f in diag.get("frames") or []
              if "/models/" in f["file"] and ctx.workspace.exists(f["file"])]  # fmt: skip
    return frames, {f: ctx.workspace.read_file(f) for f, _, _ in frames}


def _draft_tree(ctx: PolicyContext, diag: dict, config: dict) -> ModuleTree | None:
    """The draft class's module tree (the class whose code the crash's traceback ran in its model file), read from
    the workspace's engine source with the traceback's files (their loader mappings), or None."""
    model_file = diag.get("model_file")
    cut = (model_file or "").rfind("/sglang/srt/")
    if cut < 0 or not ctx.workspace.exists(model_file):
        return None
    source = ctx.workspace.read_file(model_file)
    line = next((int(f["line"]) for f in diag.get("frames") or [] if f["file"] == model_file), None)
    cls = class_at(source, line) if line else None
    if cls is None:
        return None

    def read(path: str) -> str | None:
        return ctx.workspace.read_file(path) if ctx.workspace.exists(path) else None

    src = EngineSource(read, model_file[:cut])
    src.include([f["file"] for f in diag.get("frames") or []])
    module = model_file[cut + 1:-3].replace("/", ".")
    return ModuleTree(src, module, cls, (config.get("quantization_config") or {}).get("quant_method"))


def _quantized_in_draft(tree: ModuleTree, name: str, top: str) -> bool | None:
    """Whether the draft builds the checkpoint's module ``name`` quantized, under that name or with the tree's
    prefix ``top`` dropped (a draft whose loader strips it); None when its source does not tell."""
    for candidate in (name, name[len(top) + 1:] if name.startswith(top + ".") else None):
        found = tree.find(candidate) if candidate else None
        if found is not None:
            return found.quantized
    return None


def accuracy_failure(trial: Trial) -> str:
    """Why a trial failed its accuracy check: its accuracy outside the tolerance, or no accuracy at all (the eval
    itself failed: its server died under it, its dataset could not be read)."""
    if trial.accuracy is None:
        return "the accuracy check did not complete (no accuracy measured)"
    return f"accuracy {trial.accuracy:.3f} is outside the tolerance"


def rejection(obs: Observation | None) -> str | None:
    """The words of a person's no to the call at its approval gate (agent/approvals.py), or None."""
    answer = obs.result.get("rejected") if obs is not None and not obs.ok else None
    if not answer:
        return None
    verb = {"edit_file": "fix", "apply_patch": "fix", "launch_server": "launch", "run_trials": "launches"}.get(obs.tool, obs.tool)
    return f"its {verb} was rejected by {answer.get('by', 'a person')}" + (f": {answer['reason']}" if answer.get("reason") else "")


class PlaybookPolicy:
    name = "playbook"

    def decide(self, state: AgentState, ctx: PolicyContext) -> Decision:
        memo = copy.deepcopy(state.memo) or self._fresh_memo(ctx)
        for obs in state.observations:
            if obs.tool == "tune_moe" and obs.ok:
                memo.setdefault("env", {}).update(obs.result.get("env", {}))
        for _ in range(50):  # advance the plan until it yields a call (or finishes)
            out = self._advance(state, ctx, memo)
            if out is not None:
                calls, rationale = out
                if any(c.tool in WORKSPACE_CHANGES for c in calls):  # a launch after it is a different launch
                    memo["workspace_changes"] = memo.get("workspace_changes", 0) + 1
                note = memo.pop("patch_note", None)
                self._estimate_blocked(ctx.task, memo)
                return Decision(calls=calls, rationale=rationale, stage=memo["phase"], memo=memo, done=not calls,
                                annotations={"patch": note} if note else {})  # fmt: skip
        return Decision(calls=[], rationale="the plan made no progress", stage=memo["phase"], memo=memo, done=True)

    @staticmethod
    def _fresh_memo(ctx: PolicyContext) -> dict:
        """The memo of a new run: earlier runs' measurements (--prior) seed the search's history, and their best
        configurations are the first candidates it measures."""
        memo: dict = {"phase": "bringup", "queue": [], "current": None, "best": {}}
        for p in ctx.prior:
            memo.setdefault("measured", []).extend(m.model_dump() for m in p.measured)
            if p.best is not None:
                memo.setdefault("prior_best", []).append({"run": p.run_id, **p.best.model_dump()})
        return memo

    # --- the plan ----------------------------------------------------------------------------------------------

    def _advance(self, state: AgentState, ctx: PolicyContext, memo: dict) -> tuple[list[Call], str] | None:
        task = ctx.task
        obs = state.observations[-1] if state.observations else None
        if memo.get("discard"):  # an engine fix that did not hold: put its files back as committed
            files = memo.pop("discard")
            why = memo.pop("discard_why", "the fix that did not hold")
            return [Call(tool="discard_changes", args={"files": files})], f"undo {why} in {', '.join(files)}"
        if obs is not None and obs.tool == "run_trials" and memo.pop("layout_trials", None) is not None:
            outcomes = obs.result.get("outcomes", []) if obs.ok else []
            up = [o for o in outcomes if o["status"] == "up" and o["value"] > 0]
            for o in outcomes:
                memo.setdefault("tried", []).append(f"layout {o['spec']['flags']}: {o['status']} {o['value']:.0f}")
                if o["status"] != "up":  # a crash region for the search (a burst's figure is not a knee's)
                    self._record(memo, {"flags": o["spec"]["flags"], "env": o["spec"]["env"]}, 0.0, crashed=True,
                                 signature=crash_signature(None, o.get("diagnosis")))  # fmt: skip
            top = sorted(up, key=lambda o: o["value"], reverse=True)[:CONFIRM_TOP]
            memo["queue"] = [{"label": f"layout {o['spec']['flags']} at full length", "from": "none",
                              "set": o["spec"]["flags"], "env": o["spec"]["env"], "measure": "knee_full",
                              "keep_as": "throughput",
                              "start_rate": round(0.95 * o["request_throughput"], 3) if o.get("request_throughput")
                              else None} for o in top]  # fmt: skip
            return None
        cur = memo.get("current")
        if cur is not None:
            return self._work_on(state, ctx, memo, cur, obs)
        if memo["queue"]:
            item = memo["queue"].pop(0)
            base = self._base(memo, item)
            if item.get("ablate"):  # the best without each change no measured pair isolates yet
                memo["queue"][:0] = self._ablation_items(state, task, item)
                return None
            if item.get("tree_search"):  # the draft tree's next move from the best single-stream tree so far
                step = self._tree_item(task, memo, base, item)
                if step is None:
                    return None
                memo["queue"].insert(0, item)  # the search goes on once this tree is measured
                item = step
            flags, env = self._compose(task, memo, item)
            if item["from"] != "none" and flags == base["flags"] and env == base.get("env", {}):
                return None  # nothing new to try
            if (block := self._blocking(memo, flags)) is not None:  # it would build a kernel that cannot be fixed
                self._skip_blocked(memo, item, block)
                return None
            if same := self._already_served(base, item):
                memo.setdefault("tried", []).append(f"{item['label']}: skipped, {same}")
                if item.get("candidate"):  # the search learns it serves as the base does
                    self._record(memo, item["candidate"], base.get("value", 0.0))
                return None
            memo["current"] = {"label": item["label"], "flags": flags, "env": env, "measure": item["measure"],
                               "keep_as": item["keep_as"], "group": item.get("group"),
                               "feature": item.get("feature"), "start_rate": item.get("start_rate"),
                               "candidate": item.get("candidate"), "from": item.get("from", "none"),
                               "meant": dict(item.get("meant") or {}), "unblocked": item.get("unblocked"),
                               "step": "launch", "fixes": 0, "seen": []}  # fmt: skip
            if item.get("upstream"):  # patch the engine, then launch with the config as released
                memo["current"].update(step="upstream", upstream=item["upstream"], pristine=[item["upstream"]["config"]])
            elif item.get("unblocked") and memo.get("held_fixes"):  # the fixes that held for the deeper chain
                memo["current"].update(step="reapply", reapply=copy.deepcopy(memo["held_fixes"]))
            return None
        return self._next_phase(state, task, memo)

    @staticmethod
    def _base(memo: dict, item: dict) -> dict:
        """The configuration a plan item starts from: the best of its stage so far, else the bring-up one."""
        return memo.get("best", {}).get(item.get("from", "none"), memo.get("base", {"flags": {}, "env": {}}))

    def _compose(self, task: TaskSpec, memo: dict, item: dict) -> tuple[dict, dict]:
        """An item's flags and environment: its base with the item's changes (None drops a flag)."""
        if item.get("exact"):  # a search candidate: launched as proposed
            return dict(item["set"]), dict(item.get("env", {}))
        base = self._base(memo, item)
        flags = {k: v for k, v in {**base["flags"], **item.get("set", {})}.items()
                 if v is not None and k not in item.get("unset", [])}  # fmt: skip
        flags = with_draft_path(task.search_space.flags, flags)
        return flags, {**base.get("env", {}), **memo.get("env", {}), **item.get("env", {})}

    def _next_phase(self, state: AgentState, task: TaskSpec, memo: dict) -> tuple[list[Call], str] | None:
        phase = memo["phase"]
        single = next((t for t in task.targets if t.metric == "decode_tok_s"), None)
        knee = next((t for t in task.targets if t.metric == "throughput_at_knee"), None)
        if phase == "bringup" and "base" not in memo:
            tps = sorted(v for v in _allowed(task, "tp-size") if v and v <= task.hardware.gpus) or [task.hardware.gpus]
            memo["queue"] = [{"label": f"bring-up at TP{tps[-1]}", "from": "none", "set": {"tp-size": tps[-1]},
                              "measure": "single" if single else "knee", "keep_as": "base"}]  # fmt: skip
            return None
        if phase == "bringup":
            memo["phase"] = "tune"
            shapes = memo.get("fallback_shapes")
            if shapes:
                memo["tuning"] = True
                return ([Call(tool="tune_moe", args={"shapes": shapes})],
                        f"the log shows {len(shapes)} MoE shape(s) on aiter's untuned fallback path; tune them")  # fmt: skip
            return None
        if phase == "tune":
            memo["phase"] = "single"
            if single:
                memo["queue"] = self._single_plan(task)
                memo["deferred"] = self._beyond_single_plan(task)
            return None
        if phase == "single":
            memo["phase"] = "layout"
            if knee:
                trials = []
                for item in self._layout_plan(task, memo):
                    flags, env = self._compose(task, memo, item)
                    # screening: one burst per layout, ranked by the throughput it serves; the best few are
                    # measured at full length (a knee each)
                    trials.append({"flags": flags, "env": env, "workload": knee.workload, "measure": "benchmark",
                                   "num_prompts": SCREEN_PROMPTS_PER_GPU * task.hardware.gpus})  # fmt: skip
                memo["layout_trials"] = trials
                return ([Call(tool="run_trials", args={"trials": trials})],
                        f"screen {len(trials)} parallel layouts with one burst each, as independent trials; "
                        f"the best {CONFIRM_TOP} get a full-length knee")  # fmt: skip
            return None
        if phase == "layout":
            memo["phase"] = "knee"
            if knee and "throughput" in memo["best"]:
                plan = self._knee_plan(task, memo)
                if memo["best"]["throughput"]["value"] >= knee.min:
                    # the targets are met: what improves the single-stream best costs a few short runs, and goes
                    # before the references that explain the throughput best
                    refs = [i for i in plan if i.get("keep_as") == "baseline" or i.get("ablate")]
                    plan = [i for i in plan if i not in refs] + memo.pop("deferred", []) + refs
                memo["queue"] = self._runner_up_items(task, memo) + plan
            return None
        if phase == "knee" and memo.get("deferred"):  # every stage has run: what goes beyond the targets
            memo["queue"] = memo.pop("deferred")
            return None
        if phase == "knee" and knee and "throughput" in memo["best"]:
            memo["phase"] = "search"  # the plan is spent: the shared search layer proposes what to measure next
        if memo["phase"] == "search":
            item = self._search_item(task, memo)
            if item is not None:
                memo["queue"] = [item]
                return None
        memo["phase"] = "done"
        return [], "plan complete: every stage searched within its candidates"

    def _single_plan(self, task: TaskSpec) -> list[dict]:
        plan = []
        algs = [a for a in _allowed(task, "speculative-algorithm") if a]
        steps = sorted(s for s in _allowed(task, "speculative-num-steps") if s)
        if algs and steps:
            # a common shallow chain first, then a local search over the draft tree (depth, width, draft tokens)
            # from the best tree so far, one move at a time, until no move improves (``_tree_item``)
            shallow = max([s for s in steps if s <= 3] or steps[:1])
            plan.append({"label": f"speculative decoding {shallow}/1/{shallow + 1}", "from": "single",
                         "set": {"speculative-algorithm": algs[0], "speculative-num-steps": shallow,
                                 "speculative-eagle-topk": 1, "speculative-num-draft-tokens": shallow + 1},
                         "measure": "single", "keep_as": "single", "feature": "speculative decoding"})  # fmt: skip
            plan.append({"label": "draft tree depth", "tree_search": True, "moves": DEPTH_MOVES, "from": "single",
                         "measure": "single", "keep_as": "single", "feature": "speculative decoding"})  # fmt: skip
        plan += self._knob_items(task, "single", "single")
        return plan

    @staticmethod
    def _beyond_single_plan(task: TaskSpec) -> list[dict]:
        """What improves or explains the single-stream best without being needed to reach a target: the draft
        tree's width and verify budget, then the ablation. They wait until the plan's other stages have run
        (``memo["deferred"]``), so the targets are met first."""
        plan = []
        if [a for a in _allowed(task, "speculative-algorithm") if a]:
            plan.append({"label": "draft tree search", "tree_search": True, "from": "single", "measure": "single",
                         "keep_as": "single", "feature": "speculative decoding"})  # fmt: skip
        return [*plan, {"label": "ablation of the single-stream best", "ablate": "single"}]

    @staticmethod
    def _tree_item(task: TaskSpec, memo: dict, base: dict, item: dict) -> dict | None:
        """The draft tree search's next plan item: the first untried neighbour (``search.tree_neighbours``) of the
        best single-stream tree so far, the move that led to it first (a coordinate search that keeps going the
        way that paid). None, and the search ends, when every neighbour of the best has been tried, when the best
        does not speculate, or after ``TREE_SEARCH_RUNS`` runs. The search state (trees tried, the move behind
        each, runs spent) lives in the memo, so a resumed run proposes the same trees."""
        flags = base.get("flags", {})
        center = tree_of(flags)
        search = memo.setdefault("tree_search", {"tried": {}, "runs": 0})
        if center is None or search["runs"] >= TREE_SEARCH_RUNS:
            return None
        key = "/".join(map(str, center))
        search["tried"].setdefault(key, None)  # the best was measured: never proposed again
        first = search["tried"][key]  # the move that made it the best (None: where the search started)
        for tree, move in tree_neighbours(task.search_space.flags, center, first):
            label = "/".join(map(str, tree))
            if label in search["tried"] or (item.get("moves") and move not in item["moves"]):
                continue
            tree_flags = {**flags, "speculative-num-steps": tree[0], "speculative-eagle-topk": tree[1],
                          "speculative-num-draft-tokens": tree[2]}  # fmt: skip
            if (block := PlaybookPolicy._blocking(memo, tree_flags)) is not None:  # not a run: it cannot launch
                search["tried"][label] = move
                PlaybookPolicy._skip_blocked(memo, {"label": f"draft tree {label}"}, block)
                continue
            search["tried"][label] = move
            search["runs"] += 1
            steps, topk, draft = tree
            what = f"speculative decoding {label}" if topk == 1 else f"draft tree top-{topk} {label}"
            # no feature: a tree that crashes is one tree, not speculative decoding (the search goes on)
            return {**item, "tree_search": False, "feature": None, "label": f"{what} ({move} than {key})",
                    "set": {"speculative-algorithm": flags["speculative-algorithm"], "speculative-num-steps": steps,
                            "speculative-eagle-topk": topk, "speculative-num-draft-tokens": draft}}  # fmt: skip
        return None

    @staticmethod
    def _record(memo: dict, config: dict, value: float, crashed: bool = False, category: str | None = None,
                serving: dict | None = None, near: float | None = None, signature: str | None = None) -> None:  # fmt: skip
        """What a configuration achieved on the knee target (0: it did not serve it), for the search layer: with
        how the engine served it and, short of a knee, what it served at the rate it did not sustain."""
        cand = Candidate(flags=config["flags"], env=config["env"])
        memo.setdefault("measured", []).append(Measured(candidate=cand, value=value, crashed=crashed,
                                                        crash_category=category, serving=serving or None,
                                                        near=near, crash_signature=signature,
                                                        ).model_dump(exclude_none=True))  # fmt: skip

    @staticmethod
    def _near(obs: Observation) -> float | None:
        """A knee search that found no knee (a configuration that must beat one stops at the first rate it does not
        sustain): the most it served at a rate it tried."""
        runs = obs.result.get("runs") or [] if obs.tool == "find_knee" else []
        return max((r.get("output_throughput") or 0.0 for r in runs), default=None)

    @staticmethod
    def _time_shares(obs: Observation) -> dict[str, float] | None:
        """Where the GPU time went in the run that measured a knee (None: the engine does not say)."""
        runs = [r for r in obs.result.get("runs") or [] if r.get("request_rate") == obs.result.get("knee_rate")]
        return min(runs, key=lambda r: r["output_throughput"]).get("gpu_time_share") if runs else None

    @staticmethod
    def _search_item(task: TaskSpec, memo: dict) -> dict | None:
        """The search layer's next candidate as a plan item, launched exactly as proposed."""
        space = SearchSpace(task)
        history = [Measured.model_validate(m) for m in memo.get("measured", [])]
        best = memo["best"]["throughput"]
        current = space.canonical(Candidate(flags=best["flags"], env=best["env"]))
        cand = None
        while memo.get("prior_best") and cand is None:  # an earlier run's best, measured again here first
            prior = memo["prior_best"].pop(0)
            mine = Candidate.model_validate(prior["candidate"])
            cand = space.canonical(mine) or mine
            if current is not None and cand.key() == current.key():
                cand = None  # this run reached it already
        meant: dict = {}
        if cand is None and current is not None:  # single moves from the best stall: two knobs the engine ties
            pairs = pair_moves(space, current, best.get("serving"), history)
            if pairs:
                cand, meant, why = pairs[0]
                memo.setdefault("tried", []).append(f"pair move: {why}")
        cand = cand or next_candidate(space, history, current, best.get("shares"), seed=len(history),
                                      serving=best.get("serving"))
        if cand is None:
            return None
        base = current or Candidate()
        what = [f"{k}={v}" for k, v in cand.flags.items() if base.flags.get(k) != v]
        what += [f"no {k}" for k in base.flags if k not in cand.flags]
        what += [f"{k}={cand.env.get(k) or '(unset)'}" for k in sorted({*cand.env, *base.env})
                 if cand.env.get(k) != base.env.get(k)]  # fmt: skip
        return {"label": f"search: {', '.join(what)}", "from": "throughput", "set": cand.flags, "env": cand.env,
                "exact": True, "candidate": cand.model_dump(), "measure": "knee", "keep_as": "throughput",
                "meant": meant}  # fmt: skip

    @staticmethod
    def _runner_up_items(task: TaskSpec, memo: dict) -> list[dict]:
        """The best knee's settings on each other layout the screen confirmed (``SearchSpace.transplant``). The
        screen ranked layouts with the configuration of its day and with the values the engine picked for each
        on its own; a later change that frees memory or time, or the winner's engine-picked value set
        explicitly, can reorder layouts that came close. Each is measured from just above the best knee, so
        one that does not win costs one run; none is measured twice."""
        best = memo["best"].get("throughput")
        if best is None:
            return []
        space = SearchSpace(task)
        seen = {(space.canonical(m.candidate) or m.candidate).key()
                for m in map(Measured.model_validate, memo.get("measured", []))}  # fmt: skip
        winner = Candidate(flags=best["flags"], env=best["env"])
        items = []
        for conf in memo.get("confirmed", []):
            if all(best["flags"].get(k) == conf["flags"].get(k) for k in LAYOUT):
                continue
            other = Candidate(flags=conf["flags"], env=conf["env"])
            cand = space.transplant(winner, other, best.get("serving"), conf.get("serving"))
            if cand is None or cand.key() in seen:
                continue
            seen.add(cand.key())
            shape = _layout_name(conf["flags"].get("tp-size"), conf["flags"].get("dp-size"),
                                 conf["flags"].get("enable-dp-attention"))  # fmt: skip
            what = [f"{k}={v}" for k, v in cand.flags.items() if k not in LAYOUT and conf["flags"].get(k) != v]
            what += [f"{k}={v}" for k, v in cand.env.items() if conf["env"].get(k) != v]
            # each setting is meant as the best is served: a flag the engine scales on this layout is set again
            serving = best.get("serving") or {}
            meant = {k: serving[serving_key(k)] for k in cand.flags if k not in LAYOUT and serving_key(k) in serving}
            items.append({"label": f"runner-up layout {shape} with the best's {', '.join(what) or 'settings'}",
                          "from": "throughput", "set": cand.flags, "env": cand.env, "exact": True, "meant": meant,
                          "candidate": cand.model_dump(), "measure": "knee", "keep_as": "throughput"})  # fmt: skip
        return items

    @staticmethod
    def _ablation_items(state: AgentState, task: TaskSpec, item: dict) -> list[dict]:
        """Plan items measuring the best without each change from the bring-up configuration that no measured
        pair isolates yet (``agent/ablation.py``); a knee at reference precision, or one single-stream run."""
        knee = item["ablate"] == "throughput"
        metric = "throughput_at_knee" if knee else "decode_tok_s"
        target = next((t for t in task.targets if t.metric == metric), None)
        explanation = explain_best(state, task, target.name) if target else None
        if explanation is None:
            return []
        return [{"label": f"ablation: the best without {c.name}", "from": "none", "exact": True,
                 "set": c.without.flags, "env": c.without.env, "measure": "baseline" if knee else "single",
                 "keep_as": f"ablation {item['ablate']}"} for c in explanation.changes if c.effect is None]  # fmt: skip

    @staticmethod
    def _already_served(base: dict, item: dict) -> str | None:
        """Why launching the item would change nothing: the base (the best of the objective the item measures)
        already runs with every value it sets (an engine default, or a value set before), as its /server_info
        said."""
        if item.get("from") != item.get("keep_as"):  # the base was measured for another objective
            return None
        serving, sets = base.get("serving") or {}, item.get("set") or {}
        dropped = item.get("exact") and (any(k not in sets for k in base.get("flags", {}))
                                         or item.get("env", {}) != base.get("env", {}))  # fmt: skip
        if not sets or item.get("unset") or dropped or any(serving.get(serving_key(k), object()) != v for k, v in sets.items()):
            return None
        return "the engine already serves " + ", ".join(f"{k}={v}" for k, v in sets.items())

    @staticmethod
    def _served_key(cur: dict) -> str | None:
        """What a measurement depends on: the kind of measure, the serving configuration and the environment."""
        kind = "knee" if cur["measure"] in KNEE_MEASURES else "single" if cur["measure"] == "single" else None
        if kind is None or not cur.get("serving"):
            return None
        return json.dumps([kind, cur["serving"], cur["env"]], sort_keys=True, default=str)

    @staticmethod
    def _knob_items(task: TaskSpec, source: str, measure: str) -> list[dict]:
        items = []
        kv = [v for v in _allowed(task, "kv-cache-dtype") if v and str(v).startswith("fp8")]
        if kv:
            items.append({"label": f"KV cache {kv[0]}", "from": source, "set": {"kv-cache-dtype": kv[0]},
                          "measure": measure, "keep_as": source})  # fmt: skip
        if True in _allowed(task, "enable-aiter-allreduce-fusion"):
            items.append({"label": "all-reduce fusion", "from": source, "set": {"enable-aiter-allreduce-fusion": True},
                          "measure": measure, "keep_as": source})  # fmt: skip
        return items

    def _layout_plan(self, task: TaskSpec, memo: dict) -> list[dict]:
        gpus = task.hardware.gpus
        tps = [v for v in _allowed(task, "tp-size") if v]
        dps = [v for v in _allowed(task, "dp-size") if v]
        base_tp = memo.get("base", {}).get("flags", {}).get("tp-size", gpus)
        min_tp, max_tp = memo.get("min_tp", 1), memo.get("max_tp", gpus)  # what fit, what the weights' blocks allow
        layouts = [(tp, dp, False) for tp in sorted(tps, reverse=True) for dp in sorted(dps)
                   if tp * dp == gpus and min_tp <= tp <= max_tp]  # fmt: skip
        if True in _allowed(task, "enable-dp-attention"):
            layouts += [(base_tp, dp, True) for dp in sorted(dps) if dp > 1 and base_tp % dp == 0 and base_tp <= max_tp]
        plan = []
        for tp, dp, dpa in layouts:
            flags = {"tp-size": tp, "dp-size": dp, "enable-dp-attention": True if dpa else None}
            plan.append({"label": f"layout {_layout_name(tp, dp, dpa)}", "from": "single",
                         "set": flags, "unset": list(SPEC_KEYS), "measure": "knee", "keep_as": "throughput"})  # fmt: skip
        return plan

    def _knee_plan(self, task: TaskSpec, memo: dict) -> list[dict]:
        """Speculative decoding under load (the one axis the plan orders itself), then the bring-up configuration's
        knee and the ablation of the best (what each change bought); the other knobs come from the search layer,
        the best's bottleneck first (phase "search")."""
        plan = []
        single = memo["best"].get("single", {}).get("flags", {})
        if single.get("speculative-algorithm"):
            # under load a verify step costs the whole batch: shallower than single stream, shallowest first; a
            # depth that does not pay ends the axis
            deepest = int(single.get("speculative-num-steps") or 1)
            for s in sorted(v for v in _allowed(task, "speculative-num-steps") if v and v <= deepest):
                if s + 1 not in _allowed(task, "speculative-num-draft-tokens"):
                    continue
                plan.append({"label": f"speculative decoding under load {s}/1/{s + 1}", "from": "throughput",
                             "set": {"speculative-algorithm": single["speculative-algorithm"],
                                     "speculative-num-steps": s, "speculative-eagle-topk": 1,
                                     "speculative-num-draft-tokens": s + 1},
                             "measure": "knee", "keep_as": "throughput", "group": "load-depth"})  # fmt: skip
        base = memo.get("base")
        if base is not None:  # the bring-up configuration as it came up: the reference the gains are measured from
            plan.append({"label": "baseline: the bring-up configuration's knee", "from": "none", "exact": True,
                         "set": base["flags"], "env": base.get("env", {}), "measure": "baseline",
                         "keep_as": "baseline"})  # fmt: skip
            plan.append({"label": "ablation of the throughput best", "ablate": "throughput"})
        return plan

    # --- one configuration: launch, fix, measure, keep ----------------------------------------------------------

    def _work_on(self, state: AgentState, ctx: PolicyContext, memo: dict, cur: dict,
                 obs: Observation | None) -> tuple[list[Call], str] | None:  # fmt: skip
        task = ctx.task
        if cur["step"] == "upstream":
            up = cur["upstream"]
            memo["patch_note"] = up["note"]
            cur["step"] = "fixing"
            return [Call(tool="apply_patch", args={"diff": up["diff"]})], up["note"]["root_cause"]
        if cur["step"] == "reapply":  # a fix that held before, made again before this launch instead of after it
            if obs is not None and obs.tool in ("edit_file", "write_file", "apply_patch") and not obs.ok:
                return self._abandon(memo, cur, rejection(obs) or f"the fix that held before did not apply: {obs.error}")
            held = cur["reapply"]
            if not held["calls"]:
                cur["step"] = "launch"
                return None
            fix = held["calls"].pop(0)
            self._made_fix(cur, fix)
            memo["patch_note"] = copy.deepcopy(fix["note"])
            return [Call(tool=fix["tool"], args=fix["args"])], (
                f"make again the fix that held for {held['for']} before trying {cur['label']}, which loads the same "
                f"model: {fix['note'].get('root_cause', '')}")  # fmt: skip
        if cur["step"] == "launch":
            failed = memo.get("failed_launches", {}).get(self._launch_key(memo, cur))
            if failed is not None:  # nothing it depends on changed since it crashed: it would crash again
                return self._abandon(memo, cur, f"the same launch crashed before, with nothing changed since ({failed})")
            cur["step"] = "launching"
            why = cur.pop("relaunch_why", None)  # what a fix made in place changed, and why
            return [Call(tool="launch_server", args=self._launch_args(cur))], f"try {cur['label']}" + (
                f" again with {why}" if why else "")
        if cur["step"] == "launching":
            if obs is None or obs.tool != "launch_server":
                cur["step"] = "launch"
                return None
            if obs.ok:
                self._launched_without_blocks(memo, cur)
                if "reapply" in cur:  # the fixes made again are verified now: they stay, none is made a third time
                    memo.pop("held_fixes", None)
                if obs.result.get("moe_fallback_shapes") and not memo.get("tuning"):
                    memo["fallback_shapes"] = obs.result["moe_fallback_shapes"]
                cur["serving"] = obs.result.get("serving_config") or {}
                if change := rescale_to_meant(task.search_space.flags, cur):  # a flag served otherwise than meant
                    memo.setdefault("tried", []).append(f"{cur['label']}: launched again with {change}")
                    cur["label"] += f" (launched as {change.split(' (')[0]})"
                    cur["step"] = "launch"
                    return None
                failed = memo.get("failed_serving", {}).get(self._serving_signature(cur))
                if failed is not None:  # the engine serves what already failed under load: it would fail again
                    memo.setdefault("tried", []).append(f"{cur['label']}: serves what failed before ({failed['why']}); "
                                                        "not measured again")  # fmt: skip
                    return self._serving_failure(ctx, memo, cur, failed["diagnosis"], failed["why"], again=True)
                prior = memo.get("served", {}).get(self._served_key(cur))
                if prior is not None and not prior["value"] and cur["measure"] == "baseline":
                    prior = None  # a knee it did not beat says nothing of its own: a reference measures it
                if prior is not None:  # the engine serves what was measured already: the trace has the answer
                    memo["current"] = None
                    if cur["measure"] in KNEE_MEASURES:
                        self._record(memo, cur.get("candidate") or cur, prior["value"])
                    memo.setdefault("tried", []).append(
                        f"{cur['label']}: serves the same configuration as {prior['label']} (its /server_info); "
                        f"{prior['value']:.1f} from the trace")  # fmt: skip
                    return None
                cur["step"] = "measuring"
                return self._measure(task, cur, memo, self._allowance(state, task)), f"measure {cur['label']}"
            if why := rejection(obs):  # a person said no to this launch: it is not made, nor fixed
                memo.setdefault("failed_launches", {})[self._launch_key(memo, cur)] = f"{cur['label']}: {why}"[:300]
                return self._abandon(memo, cur, why)
            diag = obs.result.get("diagnosis") or {}
            if fails_again(diag.get("category"), diag.get("memory_phase")):
                memo.setdefault("failed_launches", {})[self._launch_key(memo, cur)] = \
                    f"{cur['label']}: {diag.get('summary', 'crashed')}"[:300]  # fmt: skip
            if cur.get("upstream"):  # the engine fix does not hold on its own: no config fix on top of it
                return self._abandon(memo, cur, f"with the engine fix, {diag.get('summary', 'it crashed')}")
            cur["crash_category"] = diag.get("category")
            cur["crash_signature"] = crash_signature(diag.get("category"), diag.get("summary"))
            for block in self._kernel_blocks(memo):  # the same kernel again: no fix is tried twice
                if block.signature == self._block_signature(diag):
                    self._learn_block(memo, block, cur)
                    return self._abandon(memo, cur, f"builds {block.signature.partition(':')[2]} again, which "
                                                    f"could not be fixed ({block.why}); {block.explain()}",
                                         block=block)  # fmt: skip
            return self._fix(state, ctx, memo, cur, obs)
        if cur["step"] == "fixing":
            if obs is not None and not obs.ok:
                return self._abandon(memo, cur, rejection(obs) or f"the patch did not apply: {obs.error}")
            cur["step"] = "launching"
            return [Call(tool="launch_server", args=self._launch_args(cur))], \
                f"relaunch {cur['label']} with the fix" + (
                    f", {', '.join(cur['pristine'])} as released" if cur.get("pristine") else "")  # fmt: skip
        if cur["step"] == "measuring":
            if obs is None or obs.tool not in ("run_benchmark", "find_knee"):
                cur["step"] = "launch"
                return None
            if not obs.ok and "no server" in (obs.error or ""):
                cur["step"] = "launch"  # a resumed run: the server went away with the old process
                return None
            if not obs.ok and obs.result.get("server_lost"):  # the engine died (or hung) under the benchmark
                return self._serving_failure(ctx, memo, cur, obs.result.get("diagnosis") or {}, obs.error or "")
            if obs.tool == "find_knee" and obs.result.get("stopped_by_budget") and not obs.result.get("runs"):
                memo["current"], memo["phase"] = None, "done"
                return [], f"the budget left ({obs.args.get('max_node_hours', 0):.3f} node-hours) buys no more benchmark runs"
            value = self._value(obs, task)
            floor = value > 0 and self._lower_bound(obs)  # no rate seen failing above its knee: at least value
            trial = state.current_trial()
            if trial and trial.accuracy_ok is False:
                return self._abandon(memo, cur, accuracy_failure(trial))
            keep_as = cur["keep_as"]
            best = memo["best"].get(keep_as)
            if key := self._served_key(cur):
                memo.setdefault("served", {})[key] = {"label": cur["label"], "value": value}
            if cur["measure"] in KNEE_MEASURES:
                self._record(memo, cur.get("candidate") or cur, value, serving=cur.get("serving"),
                             near=None if value else self._near(obs))  # fmt: skip
            if cur["measure"] == "knee_full":  # a layout the screen confirmed, and how the engine served it
                memo.setdefault("confirmed", []).append({"flags": cur["flags"], "env": cur["env"],
                                                         "serving": cur.get("serving") or {}})  # fmt: skip
            if keep_as == "base" or best is None or value > best["value"]:
                entry = {"flags": cur["flags"], "env": cur["env"], "value": value, "serving": cur.get("serving") or {},
                         "shares": self._time_shares(obs), "accept_length": self._accept_length(obs)}
                if floor:  # kept as what it was shown to sustain; its knee may lie higher
                    entry["lower_bound"] = True
                memo["best"][keep_as] = entry
                if keep_as == "base":
                    memo["base"] = entry
                    memo["best"]["single"] = dict(entry)
                    memo["best"]["none"] = dict(entry)
                if cur["measure"] in ("knee", "knee_full") and obs.result.get("knee_rate"):
                    memo["knee_rate"] = obs.result["knee_rate"]
                verdict = f"kept: {self._figure(value, floor)}" + (
                    f" (was {self._figure(best['value'], best.get('lower_bound', False))})" if best else "")
                if keep_as == "throughput" and memo["phase"] in ("knee", "search"):
                    memo["queue"][:0] = self._runner_up_items(task, memo)
            elif floor:  # a floor below the best is not shown worse: nothing is concluded from it
                verdict = (f"not kept: {self._figure(value, floor)} vs "
                           f"{self._figure(best['value'], best.get('lower_bound', False))} (a lower bound, not shown "
                           "to be worse)")  # fmt: skip
            else:
                verdict = (f"not kept: {value:.1f} vs "
                           f"{self._figure(best['value'], best.get('lower_bound', False))}")  # fmt: skip
                if cur.get("group"):  # deeper along this axis will not pay either
                    memo["queue"] = [q for q in memo["queue"] if q.get("group") != cur["group"]]
            memo["current"] = None
            memo.setdefault("tried", []).append(f"{cur['label']}: {verdict}")
            self._estimate_blocked(task, memo)  # the run may end on this figure
            proposal = memo.pop("upstream_proposal", None)
            if proposal and value > 0:  # the config fix held: now the same in the engine, checked on its own
                memo["queue"].insert(0, {"label": f"engine fix in {proposal['file']}", "from": "none",
                                         "set": cur["flags"], "env": cur["env"], "measure": "check",
                                         "keep_as": "engine_fix", "upstream": proposal})  # fmt: skip
            return None
        memo["current"] = None
        return None

    # --- failures while serving ---------------------------------------------------------------------------------

    # what the configuration itself causes (a fix changes it); anything else (a crashed worker, a silent loss) may be
    # the node's: the same configuration once more, then it is given up
    CONFIGURATION_FAILURES = ("out_of_memory", "collective_error", "hang_timeout")

    @staticmethod
    def _serving_signature(cur: dict) -> str:
        """What a launch serves, as the engine reported it (flags it resolved or rescaled included), and its env."""
        return json.dumps([cur.get("serving") or {}, cur.get("env") or {}], sort_keys=True, default=str)

    def _serving_failure(self, ctx: PolicyContext, memo: dict, cur: dict, diag: dict, error: str,
                         again: bool = False) -> tuple[list[Call], str] | None:  # fmt: skip
        """The server came up, then failed under the benchmark. A failure the configuration causes is answered by
        changing it, reasoned from the engine's own figures: out of memory while serving -> less static memory or
        fewer running requests; a collective that failed or hung -> another all-reduce path. The configuration that
        failed is remembered as the engine served it, so that a relaunch serving the same is never measured again.
        A crashed worker (or a loss the log does not explain) is relaunched once as it was, then given up."""
        category = diag.get("category") or "unknown"
        why = diag.get("summary") or error
        cur["crash_category"] = category
        cur["crash_signature"] = crash_signature(category, why)
        configured = category in self.CONFIGURATION_FAILURES and (category != "hang_timeout" or "watchdog" in why)
        if configured:
            if cur.get("serving") and not again:
                memo.setdefault("failed_serving", {})[self._serving_signature(cur)] = {"why": f"{category}: {why}",
                                                                                      "diagnosis": diag}  # fmt: skip
            cur["fixes"] = cur.get("fixes", 0) + 1
            if cur["fixes"] > MAX_FIXES_PER_CONFIG:
                return self._abandon(memo, cur, f"{why} persists after {MAX_FIXES_PER_CONFIG} fixes")
            change = (self._serving_memory_fix(ctx.task, cur, diag) if category == "out_of_memory"
                      else self._allreduce_fix(cur, diag))  # fmt: skip
            if change:
                cur["step"] = "launch"
                memo.setdefault("tried", []).append(f"{cur['label']}: failed under load ({category}); {change}")
                return None
            return self._abandon(memo, cur, f"it fails under load and no allowed change is left: {why}")
        if cur.get("relaunched"):
            return self._abandon(memo, cur, f"its server died twice under the benchmark ({category}): {why}")
        cur["relaunched"], cur["step"] = True, "launch"
        return None

    @staticmethod
    def _serving_memory_fix(task: TaskSpec, cur: dict, diag: dict) -> str | None:
        """Out of memory in a forward pass while serving: the step's transient memory outgrew what the static pool
        left. From the engine's own figures: the allocation that failed, what was free, the batch it failed at and
        the largest the engine runs, and the memory the static fraction is taken of, the static fraction that leaves
        room for that allocation at the largest batch; the largest allowed value at or below it. Failing that, fewer
        running requests: the largest allowed limit below the batch whose logits fit what was free. None when no
        allowed value is left."""
        flags, serving = cur["flags"], cur.get("serving") or {}
        current = float(serving.get("mem_fraction_static") or diag.get("mem_fraction_static")
                        or flags.get("mem-fraction-static") or 0.0)  # fmt: skip
        tried, free = diag.get("tried_bytes"), diag.get("free_bytes") or 0
        basis = diag.get("avail_before_weights_gb")
        running = diag.get("running_requests")
        largest = diag.get("max_running_requests") or serving.get("max_running_requests") or running
        fractions = sorted(v for v in _allowed(task, "mem-fraction-static") if v)
        if current and tried and basis:
            scale = max(float(largest or 1) / float(running or largest or 1), 1.0)  # the batch can grow to its limit
            shortfall = max(tried - free, 0) * scale + tried  # and one allocation of margin
            bound = current - shortfall / (float(basis) * 1024**3)
            # a flag the engine rescales (seen on this launch) is set so that what it runs stays under the bound
            given = flags.get("mem-fraction-static")
            ratio = current / float(given) if given else 1.0
            lower = [f for f in fractions if f * ratio <= bound]
            if lower:
                flags["mem-fraction-static"] = lower[-1]
                return (f"--mem-fraction-static {lower[-1]} (the engine ran {current:g}; {tried / 2**30:.2f} GiB asked "
                        f"with {free / 2**30:.2f} GiB free at {running} running requests of {largest} allows at most "
                        f"{bound:.4f} of the {basis:g} GB the pool is taken of)")
        limits = sorted(v for v in _allowed(task, "max-running-requests") if v)
        if running and tried:
            fits = int(running * max(free, 1) / tried)
            current_limit = flags.get("max-running-requests") or largest or running
            below = [v for v in limits if v <= max(fits, 1) and v < current_limit]
            below = below or [v for v in limits if v < min(running, current_limit)]
            if below:
                flags["max-running-requests"] = below[-1]
                return (f"--max-running-requests {below[-1]} (the step failed at {running} running requests; the "
                        f"logits of about {fits} fit what was free)")
        return None

    @staticmethod
    def _allreduce_fix(cur: dict, diag: dict) -> str | None:
        """A collective that failed or hung while serving: move the all-reduce to another path of the release's
        dispatch. What the collective library itself reported (an RCCL error, a ProcessGroupNCCL work timing out) is
        RCCL's: the custom all-reduce takes the messages it can when it was switched off. What only the engine's
        watchdog saw is a custom kernel that never returned: aiter's fused all-reduce first, then the custom
        all-reduce (``--disable-custom-all-reduce`` sends everything to RCCL). None when the configuration has no
        other path left (or its TP group has one GPU: no all-reduce at all)."""
        flags, serving = cur["flags"], cur.get("serving") or {}
        tried = cur.setdefault("allreduce_tried", [])
        if int(serving.get("tp_size") or flags.get("tp-size") or 1) <= 1:
            return None
        custom_off = bool(serving.get("disable_custom_all_reduce") or flags.get("disable-custom-all-reduce"))
        fused = bool(serving.get("enable_aiter_allreduce_fusion") or flags.get("enable-aiter-allreduce-fusion"))
        if diag.get("collective_library") == "rccl":
            if custom_off and "custom" not in tried:
                tried.append("custom")
                flags.pop("disable-custom-all-reduce", None)
                return "the custom all-reduce again (RCCL itself failed; it takes the messages RCCL carried)"
            return None
        if fused and "fusion" not in tried:
            tried.append("fusion")
            flags.pop("enable-aiter-allreduce-fusion", None)
            return "no aiter all-reduce fusion (a fused all-reduce kernel stopped making progress)"
        if not custom_off and "rccl" not in tried:
            tried.append("rccl")
            flags["disable-custom-all-reduce"] = True
            return "--disable-custom-all-reduce (the custom all-reduce stopped making progress; RCCL takes it)"
        return None

    @staticmethod
    def _launch_args(cur: dict) -> dict:
        args = {"flags": cur["flags"], "env": cur["env"]}
        if cur.get("pristine"):
            args["pristine"] = cur["pristine"]
        return args

    def _measure(self, task: TaskSpec, cur: dict, memo: dict, allowance: float | None) -> list[Call]:
        if cur["measure"] == "check":  # one benchmark run: enough to show the configuration serves
            t = next((t for t in task.targets if t.metric == "decode_tok_s"), task.targets[0])
            args: dict[str, Any] = {"workload": t.workload}
            if t.metric != "decode_tok_s":
                args["request_rate"] = memo.get("knee_rate") or 1.0
            return [Call(tool="run_benchmark", args=args)]
        if cur["measure"] == "single":
            t = next(t for t in task.targets if t.metric == "decode_tok_s")
            return [Call(tool="run_benchmark", args={"workload": t.workload})]
        workload, _ = self._knee_target(task)
        if cur["measure"] == "baseline":  # a reference, not a claim (REFERENCE_LENGTH)
            w = task.workloads[workload]
            start = cur.get("start_rate") or (round(0.7 * memo["knee_rate"], 3) if memo.get("knee_rate") else 1.0)
            short = {"duration_s": round(REFERENCE_LENGTH * w.duration_s, 1)} if w.duration_s else {}
            return [self._knee_call(allowance, workload=workload, start_rate=start, resolution=0.25,
                                    seeds=w.knee_seeds[:1], **short)]  # fmt: skip
        known = memo.get("knee_rate") and memo["best"].get("throughput")
        if cur["measure"] == "knee_full" and not known:  # a full-length knee, from just below the predicted rate
            start = cur.get("start_rate") or max(0.25, round((memo.get("knee_rate") or 1.0) - 0.2, 3))
            return [self._knee_call(allowance, workload=workload, start_rate=start, resolution=0.1, growth=NEAR_GROWTH)]
        if known:  # from just above the best knee so far: a configuration that does not sustain it is done in one run,
            # and the run that shows it does is the search's first (a short allowance still confirms it)
            rate = round(memo["knee_rate"] + 0.1, 3)
            return [self._knee_call(allowance, workload=workload, start_rate=rate, min_rate=rate, resolution=0.1,
                                    growth=NEAR_GROWTH)]  # fmt: skip
        return [self._knee_call(allowance, workload=workload, start_rate=1.0, resolution=0.1)]

    @staticmethod
    def _allowance(state: AgentState, task: TaskSpec) -> float | None:
        """Node-hours a knee search may spend once the targets are met (None before: reaching them comes first)."""
        return node_hours_left(state, task) if state.targets_met is not None else None

    @staticmethod
    def _knee_call(allowance: float | None, **args: Any) -> Call:
        if allowance is not None:
            args["max_node_hours"] = round(max(allowance, 1e-6), 6)
        return Call(tool="find_knee", args=args)

    @staticmethod
    def _knee_target(task: TaskSpec) -> tuple[str, float]:
        t = next(t for t in task.targets if t.metric == "throughput_at_knee")
        return t.workload, task.workloads[t.workload].ttft_limit_ms or float("inf")

    @staticmethod
    def _accept_length(obs: Observation) -> float | None:
        """The draft tokens accepted per verify step in the run a single-stream value comes from (None: no draft)."""
        runs = obs.result.get("runs") or [] if obs.ok and obs.tool == "run_benchmark" else []
        best = max(runs, key=lambda r: r.get("decode_tok_s") or 0.0, default=None)
        return best.get("accept_length") if best else None

    @staticmethod
    def _lower_bound(obs: Observation) -> bool:
        """Whether a knee search's figure is a floor: it saw no rate fail above its knee (``find_knee``'s
        ``knee_is_lower_bound``, read from ``first_failing_rate`` so that a recorded result reads the same)."""
        return obs.tool == "find_knee" and obs.ok and knee_is_lower_bound(obs.result)

    @staticmethod
    def _figure(value: float, lower_bound: bool) -> str:
        """A kept or compared figure in the run's notes: a floor as "at least"."""
        return f"at least {value:.1f}" if lower_bound else f"{value:.1f}"

    @staticmethod
    def _value(obs: Observation, task: TaskSpec | None = None) -> float:
        """The figure a measurement keeps: 0 when it misses its target's interactivity bound (it never wins)."""
        counted = [c for t in (task.targets if task else []) if (c := measured(t, obs)) is not None]
        if counted:
            return 0.0 if counted[0].miss else counted[0].value
        if obs.tool == "find_knee":
            return float(obs.result.get("throughput_at_knee") or 0.0) if obs.ok else 0.0
        runs = obs.result.get("runs") or []
        return max((r["decode_tok_s"] for r in runs), default=0.0) if obs.ok else 0.0

    def _abandon(self, memo: dict, cur: dict, why: str,
                 block: KernelBlock | None = None) -> tuple[list[Call], str] | None:  # fmt: skip
        memo["current"] = None
        memo.setdefault("tried", []).append(f"{cur['label']}: abandoned ({why})")
        if cur.get("measure") in KNEE_MEASURES:
            self._record(memo, cur.get("candidate") or cur, 0.0, crashed=True, category=cur.get("crash_category"),
                         signature=cur.get("crash_signature"))  # fmt: skip
        memo.pop("upstream_proposal", None)  # its config fix did not hold either
        if cur.get("upstream"):
            memo["discard"] = cur["upstream"]["files"]
            return None
        if cur.get("edited"):  # fixes that did not hold: the workspace goes back to what was verified
            memo["discard"] = list(cur["edited"])
            if block is not None:  # the fix held, the launch stopped further on: unverified, it is not kept
                memo["discard_why"] = (f"the fix made for {cur['label']} (it held, but that launch never came up to "
                                       "verify it; a configuration that does will make it again)")  # fmt: skip
                if cur.get("fix_calls"):  # made again before the next launch that loads the same model parts
                    memo["held_fixes"] = {"for": cur["label"], "calls": cur["fix_calls"]}
        if cur["keep_as"] == "base":
            memo["phase"] = "done"
            return [], f"bring-up failed and could not be fixed: {why}"
        feature = cur.get("feature")
        if feature and block is not None:  # only what builds the kernel is blocked (``_advance`` skips it)
            memo.setdefault("blocked", {}).setdefault(feature, {"why": why, "tried": cur["label"], "skipped": [],
                                                                "kernel": block.signature.partition(":")[2]})  # fmt: skip
        elif feature:  # the same crash waits at every other depth of this feature: do not relaunch them
            skipped = [q["label"] for q in memo["queue"] if q.get("feature") == feature]
            memo["queue"] = [q for q in memo["queue"] if q.get("feature") != feature]
            memo.setdefault("blocked", {})[feature] = {"why": why, "tried": cur["label"], "skipped": skipped}
        return None

    # --- fixes ---------------------------------------------------------------------------------------------------

    def _fix(self, state: AgentState, ctx: PolicyContext, memo: dict, cur: dict,
             obs: Observation) -> tuple[list[Call], str] | None:  # fmt: skip
        diag = {**(obs.result.get("diagnosis") or {}), "suspects": obs.result.get("suspects")}
        category = diag.get("category", "unknown")
        signature = f"{category}:{diag.get('parameter') or diag.get('header') or diag.get('flag') or diag.get('summary')}"
        if signature in cur["seen"] and cur.get("switch") and self._switched(ctx, memo, cur, diag,
                                                                             "the switch tried before did not serve it"):
            return None  # the switch did not serve it: the next of the release's own switches
        if signature in cur["seen"] or cur["fixes"] >= MAX_FIXES_PER_CONFIG:
            return self._give_up(ctx, memo, cur, diag, f"{diag.get('summary', 'failure')} persists after a fix")
        cur["seen"].append(signature)
        cur["fixes"] += 1
        patchers = {"weight_shape_mismatch": self._exclude_fix, "compile_error": self._guard_fix}
        if category in patchers:  # a source or config patch, then the same configuration again
            edit = patchers[category](ctx, diag)
            if not edit and category == "weight_shape_mismatch" and self._switched(
                    ctx, memo, cur, diag, diag.get("summary", "weight loading failed")):
                return None
            if edit:
                call, note = edit
                crashed = state.current_trial()  # the launch this diagnosis is of: what the fix (and its engine
                if crashed is not None:          # counterpart, applied later) answers
                    note["crash_trial"] = crashed.id
                    if note.get("upstream"):
                        note["upstream"]["note"]["crash_trial"] = crashed.id
                proposal = note.pop("upstream", None)
                self._made_fix(cur, {"tool": call.tool, "args": call.args, "note": note})
                if proposal and proposal["file"] not in memo.setdefault("upstream_done", []):
                    memo["upstream_done"].append(proposal["file"])
                    memo["upstream_proposal"] = proposal
                memo["patch_note"] = note
                cur["step"] = "fixing"
                return [call], note["root_cause"]
        elif category == "out_of_memory":
            scale = memo.setdefault("engine_scales", {})
            seen = self._engine_scale(cur["flags"], diag)
            if seen is not None:  # what the engine makes of the flag, learned for the launches that leave it unset
                scale["mem-fraction-static"] = seen
            for _ in range(MAX_FIXES_PER_CONFIG):  # past every move that lands on a launch known to fail
                if not self._memory_fix(ctx.task, cur, diag, scale.get("mem-fraction-static")):
                    break
                if self._launch_key(memo, cur) not in memo.get("failed_launches", {}):
                    cur["step"] = "launch"
                    return None
                if cur["flags"].get("mem-fraction-static") is not None:
                    diag = {**diag, "mem_fraction_static": float(cur["flags"]["mem-fraction-static"])
                            * scale.get("mem-fraction-static", 1.0)}  # fmt: skip
            if cur["keep_as"] == "base":
                memo["min_tp"] = 2 * int(cur["flags"].get("tp-size", 1))
        elif category == "invalid_flag":
            flag = self._refused_flag(cur["flags"], diag)
            if flag is not None:
                cur["flags"].pop(flag)
                cur["step"] = "launch"
                return None
        elif re.search(TP_DIVISIBILITY, diag.get("summary", "")):
            # a weight sharded over more GPUs than its quantization blocks allow, or heads that do not divide over
            # the TP group (the release's `assert self.total_num_heads % tp_size == 0`): the same GPUs in smaller
            # TP groups, each shard twice as wide
            tp, dp = int(cur["flags"].get("tp-size", 1)), int(cur["flags"].get("dp-size", 1))
            if tp > 1 and tp // 2 in _allowed(ctx.task, "tp-size") and 2 * dp in _allowed(ctx.task, "dp-size"):
                cur["flags"].update({"tp-size": tp // 2, "dp-size": 2 * dp})
                memo["max_tp"] = min(memo.get("max_tp", tp // 2), tp // 2)
                memo.setdefault("tried", []).append(f"{cur['label']}: {diag.get('summary')}; TP{tp} x DP{dp} -> "
                                                    f"TP{tp // 2} x DP{2 * dp}")  # fmt: skip
                cur["step"] = "launch"
                return None
        elif category == "kernel_unavailable" and (change := self._kernel_path_fix(ctx.task, cur, diag)):
            memo.setdefault("tried", []).append(f"{cur['label']}: {diag.get('summary', category)[:200]}; {change}")
            cur["step"] = "launch"
            return None
        elif category == "port_in_use":  # another process took the port: the next launch gets a fresh one
            cur["step"] = "launch"
            return None
        elif category in ("hang_timeout", "collective_error") and cur["fixes"] <= 1:
            cur["flags"].pop("enable-aiter-allreduce-fusion", None)  # a fused collective is the usual suspect
            cur["step"] = "launch"
            return None
        return self._give_up(ctx, memo, cur, diag, diag.get("summary", category))

    def _switched(self, ctx: PolicyContext, memo: dict, cur: dict, diag: dict, because: str) -> bool:
        """``cur`` set to relaunch with the next of the release's own switches (``_release_switch_fix``), said in
        the memo and in the relaunch's decision (``because``: what it answers); False when none is left."""
        switched = self._release_switch_fix(ctx, cur, diag)
        if switched is None:
            return False
        memo.setdefault("tried", []).append(f"{cur['label']}: {switched}")
        cur["relaunch_why"] = f"{switched} ({because})"
        cur["step"] = "launch"
        return True

    @staticmethod
    def _release_switch_fix(ctx: PolicyContext, cur: dict, diag: dict) -> str | None:
        """A weight that does not fit a *fused* layer (its loader's class says so: ``FusedMoE``) while no exclude
        entry or patch answers it: the release's own switches that turn a fusion off, as the model's code reads them
        (``server_args.disable_..._fusion`` in the model file and the files its traceback ran), one at a time, each
        the same configuration relaunched with it. The one tried before, which did not serve, is taken back. None
        when the raising layer is no fused one or every such switch was tried."""
        layer = str((diag.get("suspects") or {}).get("layer_class") or "")
        loader = str(diag.get("loader") or "")
        if "fused" not in (layer + loader).lower():
            return None
        files = [f["file"] for f in diag.get("frames") or [] if "/models/" in f["file"]]
        names: list[str] = []
        for path in dict.fromkeys([diag.get("model_file"), *files]):
            if path and ctx.workspace.exists(path):
                for name in re.findall(r"server_args(?:\(\))?\.(disable_\w*fus\w*)\b", ctx.workspace.read_file(path)):
                    if name not in names:
                        names.append(name)
        tried = cur.setdefault("switches_tried", [])
        if cur.get("switch"):
            cur["flags"].pop(cur.pop("switch"), None)
        for name in names:
            flag = name.replace("_", "-")
            if flag in tried or cur["flags"].get(flag):
                continue
            tried.append(flag)
            cur["flags"][flag] = True
            cur["switch"] = flag
            return (f"--{flag}: the weight does not fit the fused layer {layer or loader} builds, no exclude entry "
                    f"answers it, and the model's code reads this switch of the release's to build it unfused")
        return None

    @staticmethod
    def _kernel_path_fix(task: TaskSpec, cur: dict, diag: dict) -> str | None:
        """A kernel library with no kernel for the problem on the path the diagnosis names: the same work on another
        path the task allows (another attention backend, another MoE runner), one this configuration has not run
        yet. None when the diagnosis names no such path (a GEMM library has no flag of its own), or none is left."""
        flag = KERNEL_PATH_FLAGS.get(diag.get("kernel_path") or "")
        if flag is None:
            return None
        current = cur["flags"].get(flag)
        tried = cur.setdefault("paths_tried", {}).setdefault(flag, [])
        if current is not None and current not in tried:
            tried.append(current)
        others = [v for v in _allowed(task, flag) if v is not None and v != current and v not in tried]
        if not others:
            return None
        cur["flags"][flag] = others[0]
        tried.append(others[0])
        return f"{flag} {current if current is not None else '(default)'} -> {others[0]}"

    @staticmethod
    def _refused_flag(flags: dict, diag: dict) -> str | None:
        """The flag of ``flags`` an invalid_flag diagnosis refuses: the one it names, else the only one set to the value
        it refuses (a message that names a backend, not the flag that chose it); None when neither is set here."""
        named = (diag.get("flag") or "").lstrip("-").replace("_", "-")
        if named in flags:
            return named
        value = str(diag.get("value") or "").lower()
        holding = [k for k, v in flags.items() if value and str(v).lower() == value]
        return holding[0] if len(holding) == 1 else None

    def _give_up(self, ctx: PolicyContext, memo: dict, cur: dict, diag: dict, why: str) -> tuple[list[Call], str] | None:
        """No fix made ``cur`` launch. A kernel that would not build blocks what builds it, not its whole feature:
        the feature's shallower configurations go first."""
        block = self._new_block(ctx, memo, cur, diag)
        out = self._abandon(memo, cur, why, block=block)
        if block is not None and out is None:
            memo["queue"][:0] = self._shallower(ctx.task, memo, cur, block)
        return out

    @staticmethod
    def _made_fix(cur: dict, fix: dict) -> None:
        """``cur`` made ``fix`` (its tool, args and patch note): the file it edited is undone if ``cur`` fails, and
        the fix is made again for the feature's next launch if it held (``_abandon``)."""
        path = fix["args"].get("path")
        if path and path not in cur.setdefault("edited", []):
            cur["edited"].append(path)
        cur.setdefault("fix_calls", []).append(copy.deepcopy(fix))

    # --- kernels that could not be fixed ---------------------------------------------------------------------------

    @staticmethod
    def _launch_key(memo: dict, cur: dict) -> str:
        return launch_key(cur["flags"], cur.get("env") or {}, memo.get("workspace_changes", 0))

    @staticmethod
    def _block_signature(diag: dict) -> str | None:
        """A kernel build failure by the file it failed in (a shared header fails every kernel that includes it)."""
        if diag.get("category") != "compile_error":
            return None
        return f"compile_error:{diag.get('file') or diag.get('header') or diag.get('summary', '')}"

    @staticmethod
    def _kernel_blocks(memo: dict) -> list[KernelBlock]:
        return [KernelBlock.model_validate(b) for b in memo.get("kernel_blocks", {}).values()]

    def _new_block(self, ctx: PolicyContext, memo: dict, cur: dict, diag: dict) -> KernelBlock | None:
        """A kernel that no fix made build, as a block on the configurations that build it, its trigger read from
        the innermost frame of the crash whose source guards the call with a condition on the task's flags."""
        signature = self._block_signature(diag)
        if signature is None:
            return None
        flags = set(ctx.task.search_space.flags)
        trigger = []
        for frame in reversed(diag.get("frames") or []):
            try:
                source = ctx.workspace.read_file(frame["file"]) if ctx.workspace.exists(frame["file"]) else ""
            except Exception:  # a frame outside the workspace (the interpreter's, a library's)
                continue
            if source and (trigger := trigger_at(source, int(frame["line"]), flags)):
                break
        block = KernelBlock(signature=signature, why=diag.get("summary", "")[:300], feature=cur.get("feature"),
                            trigger=trigger)  # fmt: skip
        self._learn_block(memo, block, cur)
        return block

    def _learn_block(self, memo: dict, block: KernelBlock, cur: dict) -> None:
        """``cur`` crashed on ``block``'s kernel: one more configuration that builds it."""
        base = self._base(memo, cur)
        block.crashed.append({"flags": dict(cur["flags"]), "changed": changed_flags(cur["flags"], base.get("flags", {}))})
        memo.setdefault("kernel_blocks", {})[block.signature] = block.model_dump(mode="json")

    @staticmethod
    def _launched_without_blocks(memo: dict, cur: dict) -> None:
        """A configuration of a blocked kernel's feature came up (one the block let through, or another of the
        feature's): it does not build the kernel, which fails at start-up; the block learns it (a rule that predicted
        otherwise is wrong)."""
        flags = dict(cur["flags"])
        for signature, data in memo.get("kernel_blocks", {}).items():
            block = KernelBlock.model_validate(data)
            ours = cur.get("unblocked") == signature or (block.feature and cur.get("feature") == block.feature)
            if ours and flags not in block.launched:
                block.launched.append(flags)
                memo["kernel_blocks"][signature] = block.model_dump(mode="json")

    @staticmethod
    def _blocking(memo: dict, flags: dict) -> KernelBlock | None:
        return next((b for b in PlaybookPolicy._kernel_blocks(memo) if b.builds(flags)), None)

    @staticmethod
    def _estimate_blocked(task: TaskSpec, memo: dict) -> None:
        """What each blocked chain would have given, from the best single-stream chain measured without it
        (``known_failures.would_give``)."""
        best = memo.get("best", {}).get("single") or {}
        blocks = {b.signature.partition(":")[2]: b for b in PlaybookPolicy._kernel_blocks(memo)}
        for entry in memo.get("blocked", {}).values():
            block = blocks.get(entry.get("kernel", ""))
            if block is None:
                continue
            entry["rule"] = block.explain()  # which configurations it blocks, as far as the launches taught it
            entry.pop("would_give", None)
            if best and (would := would_give(block, best.get("flags", {}), best.get("value", 0.0),
                                             best.get("accept_length"), _allowed(task, "speculative-num-steps"))):
                entry["would_give"] = would

    @staticmethod
    def _skip_blocked(memo: dict, item: dict, block: KernelBlock) -> None:
        kernel = block.signature.partition(":")[2]
        memo.setdefault("tried", []).append(f"{item['label']}: skipped, it would build {kernel} ({block.explain()})")
        if block.feature and block.feature in memo.get("blocked", {}):
            memo["blocked"][block.feature]["skipped"].append(item["label"])
        if item.get("candidate"):  # the search learns it crashes
            PlaybookPolicy._record(memo, item["candidate"], 0.0, crashed=True, category="compile_error")

    def _shallower(self, task: TaskSpec, memo: dict, cur: dict, block: KernelBlock) -> list[dict]:
        """What the feature still has without the kernel: its chains shallower than the one that crashed, those the
        block does not predict to build (each one launched teaches the block more). The shallowest goes first: if it
        crashes the same way too, two identical crashes at both ends say the depth does not decide it, and the block
        stops the rest (``KernelBlock.builds``); if it comes up, the others follow from the deepest down."""
        if not cur.get("flags", {}).get(SPECULATIVE):
            return []
        steps = int(cur["flags"].get("speculative-num-steps") or 1)
        items = []
        depths = sorted((v for v in _allowed(task, "speculative-num-steps") if v and v < steps), reverse=True)
        for s in depths[-1:] + depths[:-1]:
            chain = {**cur["flags"], "speculative-num-steps": s, "speculative-eagle-topk": 1,
                     "speculative-num-draft-tokens": s + 1}  # fmt: skip
            if not block.builds(chain):
                items.append({"label": f"speculative decoding {s}/1/{s + 1} (no {block.signature.partition(':')[2]})",
                              "from": cur.get("from", "single"), "set": {k: chain[k] for k in SPEC_KEYS if k in chain},
                              "measure": cur["measure"], "keep_as": cur["keep_as"], "feature": None,
                              "unblocked": block.signature})  # fmt: skip
        return items

    def _exclude_fix(self, ctx: PolicyContext, diag: dict) -> tuple[Call, dict] | None:
        """The engine built a module quantized that the checkpoint stores unquantized: add the engine's names
        of the modules the exclude list covers under the checkpoint's prefix, only those the draft builds
        quantized (read from its class, ``agent.fixes.excludes``), in the list's style: one whole-layer pattern
        where the list keeps the whole (unquantized) layer by a pattern.

        When the log names the parameter (a KeyError, a loader that prints it) the two names give the prefixes.
        When it does not (a bare assertion in a layer's weight_loader), the failing layer is found the way an
        engineer finds it: a draft model loads the checkpoint's extra layer (the one beyond
        ``num_hidden_layers``, per the weight index), under the prefix its model file maps checkpoint layers to.
        """
        config_path = next((p for p in ctx.workspace.glob("**/config.json")
                            if "quantization_config" in ctx.workspace.read_file(p)), None)  # fmt: skip
        if config_path is None:
            return None
        text = ctx.workspace.read_file(config_path)
        config = json.loads(text)
        exclude = config.get("quantization_config", {}).get("exclude", [])
        index = config_path.rsplit("/", 1)[0] + "/model.safetensors.index.json"
        names = json_value(ctx.workspace.read_file(index)).get("weight_map", {}) if ctx.workspace.exists(index) else {}
        engine_mod, ckpt_mod = _module(diag.get("parameter")), _module(diag.get("checkpoint_parameter"))
        how = "named by the log"
        if ckpt_mod and engine_mod and ckpt_mod != engine_mod:
            cp, ep = _split_prefix(ckpt_mod, engine_mod)
        else:
            prefixes = self._draft_prefixes(ctx, diag, config, names)
            if prefixes is None:
                return (self._draft_names_fix(ctx, diag, exclude, names)
                        or self._unlisted_draft_fix(ctx, diag, config_path, text, exclude, names))  # fmt: skip
            cp, ep = prefixes
            how = f"inferred: the draft model loads {cp}.* as {ep}.*"
            suspects = diag.get("suspects") or {}
            if suspects.get("candidates"):  # what the weight index says the loader stopped at, and how surely
                sure = {"unique": "the only one that fits", "likely": "the first of several that fit, in load order"}
                how += (f"; the failing tensor: {suspects['candidates'][0]}, "
                        f"{sure.get(suspects['confidence'], suspects['confidence'])} ({suspects['reason']})")
        modules = {_module(n) for n in names if n.startswith(cp + ".")} if cp else set()
        if ckpt_mod:
            modules.add(ckpt_mod)
        tree = _draft_tree(ctx, diag, config) if diag.get("draft_model") and cp and ep else None
        targets: dict[str, str] = {}
        if tree is not None:  # only what the draft builds quantized, named as it builds it
            unquantized = not any(SCALE.search(n) for n in names if n.startswith(cp + "."))
            adds, targets = draft_excludes(tree, sorted(m for m in modules if m), cp, ep, exclude, unquantized)
            found = tree.find(engine_mod) if engine_mod else None
            if found is not None and found.quantized is not False and not _excluded(found.name, exclude + adds):
                adds.append(found.name)
        else:
            adds = _engine_excludes(sorted(m for m in modules if m), cp, ep, exclude)
            if engine_mod and not _excluded(engine_mod, exclude + adds):
                adds.append(engine_mod)
        edit = _insert_entries(text, adds)
        if edit is None or not adds:
            return None
        shapes = ""
        if diag.get("checkpoint_shape") is not None:
            shapes = f" (checkpoint {diag.get('checkpoint_shape')} vs engine {diag.get('engine_shape')})"
        note = {
            "category": "weight_shape_mismatch",
            "defect": f"exclude:{config_path}:{cp or ckpt_mod}",
            "title": f"Exclude {len(adds)} module(s) from quantization under the engine's names",
            "root_cause": (f"{cp or ckpt_mod}.* is stored unquantized and named in quantization_config.exclude under "
                           f"the checkpoint's names, but the engine builds it as {ep or engine_mod}.*, which the "
                           f"exclude list does not match; it was created quantized and the checkpoint weight does not "
                           f"fit{shapes} [{how}]"),
            "change": f"add {len(adds)} exclude entr{'y' if len(adds) == 1 else 'ies'} in {config_path}: "
                      + ", ".join(adds[:6]) + (" ..." if len(adds) > 6 else ""),
        }  # fmt: skip
        if diag.get("draft_model") and cp and ep:
            upstream = self._upstream_fix(ctx, diag, config, config_path, cp, ep, tree, targets)
            if upstream:
                note["upstream"] = upstream
        return Call(tool="edit_file", args={"path": config_path, "old": edit[0], "new": edit[1]}), note

    @staticmethod
    def _draft_names_fix(ctx: PolicyContext, diag: dict, exclude: list[str], names: dict) -> tuple[Call, dict] | None:
        """The checkpoint keeps the draft's modules in a tree of their own (``mtp.*``) and the exclude list names
        that tree, but the draft class builds it under the target's own names (its loader renames ``mtp`` to
        ``model``: its one layer is ``model.layers.0``, like the target's first). No exclude entry can then tell
        the draft's modules from the target's, so the fix is the engine's: the draft class builds that submodule
        under the checkpoint's prefix, and the list applies as written."""
        model_file = diag.get("model_file")
        if not diag.get("draft_model") or not model_file or not ctx.workspace.exists(model_file):
            return None
        frames, sources = _model_frames(ctx, diag)
        rules = renames(sources, frames)
        for top in sorted({n.split(".", 1)[0] for n in names if "." in n}):
            tree = [n for n in names if n.startswith(top + ".")]
            if not any(_excluded(_module(n), exclude) for n in tree):
                continue  # the list does not name this tree: not a naming defect
            engine = renamed_prefix(f"{top}.layers.0", rules)
            if not engine or engine[0].split(".", 1)[0] == top:
                continue
            engine_top = engine[0].split(".", 1)[0]
            if not any(n.startswith(engine[0] + ".") for n in names if not n.startswith(top + ".")):
                continue  # the draft's names are its own: an exclude entry under them would do
            line = next((ln for f, fn, ln in frames if f == model_file and fn == "load_weights"), None)
            cls = class_at(sources[model_file], line) if line else None
            edit = draft_module_prefix(sources[model_file], cls, engine_top, top) if cls else None
            if edit is None:
                return None
            note = {
                "category": "weight_shape_mismatch",
                "defect": f"engine:{model_file}:{cls}",
                "title": f"Name {cls}'s modules {top}.* as the checkpoint does"[:72],
                "root_cause": (f"the checkpoint stores the draft's modules as {top}.* and keeps them unquantized by "
                               f"quantization_config.exclude; {cls} ({model_file}) loads them as {engine[0]}.*, the "
                               f"target's own names ({engine[0]}.* is the target's first layer too), so the list "
                               f"never reaches the draft: it was built quantized and the weights do not fit, and no "
                               f"exclude entry could name the draft's modules without naming the target's"),
                "change": (f"in {cls}.__init__ ({model_file}), build the submodule holding the draft's layers with "
                           f'add_prefix("{top}", prefix) instead of add_prefix("{engine_top}", prefix)'),
            }  # fmt: skip
            return Call(tool="edit_file", args={"path": model_file, "old": edit[0], "new": edit[1]}), note
        return None

    @staticmethod
    def _unlisted_draft_fix(ctx: PolicyContext, diag: dict, config_path: str, text: str, exclude: list[str],
                            names: dict) -> tuple[Call, dict] | None:  # fmt: skip
        """The draft's own tree of the checkpoint (a top-level prefix the draft's loader code names, such as
        ``mtp.``) is stored unquantized (no scale tensor anywhere under it) and the exclude list names none of it:
        the engine builds the draft quantized. Name each of that tree's top modules in the list, as the vendor's
        export would have (an entry under the tree's prefix, which also tells a draft class that decides from the
        list's prefixes)."""
        if not diag.get("draft_model"):
            return None
        _, sources = _model_frames(ctx, diag)
        tops = sorted({n.split(".", 1)[0] for n in names if "." in n})
        named = [t for t in tops if any(re.search(rf"""["']{re.escape(t)}\.""", src) for src in sources.values())]
        for top in named:
            tree = [n for n in names if n.startswith(top + ".")]
            if not tree or any(re.search(r"(_scale(_inv)?|_scales)$", n) for n in tree):
                continue  # quantized in the checkpoint: not this defect
            if all(_excluded(_module(n), exclude) for n in tree):
                continue  # the list names all of it under the checkpoint's names: the naming fix's case
            parts = sorted({".".join(n.split(".")[:3]) if n.split(".")[1:2] == ["layers"] else n.rsplit(".", 1)[0]
                            for n in tree})  # fmt: skip
            parents = [p for p in parts if not any(p != q and p.startswith(q + ".") for q in parts)]
            drafted = _draft_tree(ctx, diag, json.loads(text))
            if drafted is not None:  # not what the draft builds unquantized anyway (a norm, a plain nn.Linear)
                parents = [p for p in parents if _quantized_in_draft(drafted, p, top) is not False]
            edit = _insert_entries(text, parents)
            if edit is None:
                return None
            note = {
                "category": "weight_shape_mismatch",
                "defect": f"exclude:{config_path}:{top}",
                "title": f"Exclude the checkpoint's unquantized {top}.* draft modules"[:72],
                "root_cause": (f"the checkpoint stores its {top}.* modules (the draft's, read by "
                               f"{diag.get('model_file') or 'the draft model'}) unquantized: no scale tensor under "
                               f"them in the weight index; but quantization_config.exclude names none of them, so "
                               f"the engine built the draft quantized and the bf16 weights do not fit"),
                "change": f"add {len(parents)} exclude entr{'y' if len(parents) == 1 else 'ies'} in {config_path}: "
                          + ", ".join(parents[:6]) + (" ..." if len(parents) > 6 else ""),
            }  # fmt: skip
            return Call(tool="edit_file", args={"path": config_path, "old": edit[0], "new": edit[1]}), note
        return None

    @staticmethod
    def _upstream_fix(ctx: PolicyContext, diag: dict, config: dict, config_path: str, cp: str, ep: str,
                      tree: ModuleTree | None = None, targets: dict[str, str] | None = None) -> dict | None:  # fmt: skip
        """The same fix in the engine: the draft model maps the exclude entries naming the checkpoint's extra
        layer (``model.layers.<num_hidden_layers>``, the extra-layer MTP convention) to its own names: the decoder
        layer's under its prefix, the MTP layer's own quantized modules (``eh_proj``) on the model holding it. In
        the draft file the crash's traceback names, with a unit test in the engine's style (``note["test"]``).
        Proposed only where the checkpoint follows that convention and the draft's model file has that shape."""
        model_file = diag.get("model_file")
        n_layers = config.get("num_hidden_layers")
        if not model_file or not ctx.workspace.exists(model_file) or cp != f"model.layers.{n_layers}":
            return None
        source = ctx.workspace.read_file(model_file)
        line = next((int(f["line"]) for f in diag.get("frames") or [] if f["file"] == model_file), None)
        cls = class_at(source, line) if line else draft_class(source, ep)
        own = own_modules(tree, ep) if tree is not None else ()
        fixed = map_draft_excludes(source, cls, 'f"model.layers.{config.num_hidden_layers}"',
                                   "model.layers.<num_hidden_layers>", ep, own) if cls else None  # fmt: skip
        if fixed is None:
            return None
        diff = unified_diff(model_file, source, fixed)
        exclude = config.get("quantization_config", {}).get("exclude", [])
        missing = {t: m for t, m in (targets or {}).items() if not _excluded(t, exclude)}
        entries = list(dict.fromkeys(next(e for e in exclude if _excluded(m, [e])) for m in missing.values()))
        test = None
        if missing and tree is not None:
            test = engine_test(tree.module, cls, cp, ep, own, entries, sorted(missing))
        note = {
            "category": "weight_shape_mismatch",
            "defect": f"engine:{model_file}:{cls}",
            "title": "Map the checkpoint's MTP-layer exclude entries in the draft model",
            "root_cause": (f"{cls} builds the checkpoint's MTP layer {cp} (num_hidden_layers = {n_layers}) as {ep}, "
                           f"but nothing maps the exclude entries naming that layer to {ep}, so the draft builds its "
                           f"bf16 modules quantized and their weights do not fit"),
            "change": (f"in {cls}.__init__ ({model_file}), before any module is built, add each exclude entry "
                       f"that names model.layers.<num_hidden_layers> again under {ep} (exact names, the fused "
                       f"experts module, re: patterns)" + (f", and the MTP layer's own {', '.join(own)} under "
                       f"{ep.rpartition('.')[0]}" if own else "") + ", so checkpoints need no config fix"),
        }  # fmt: skip
        files = [model_file]
        if test:
            note["test"] = test
            # the test goes in with the fix (one commit, one PR): at its place in the engine's repository, which
            # holds the package under python/ and its unit tests under test/
            root = model_file.split("/", 1)[0]
            path = f"{root}/{test['path']}"
            if ctx.workspace.exists(f"{root}/python") and not ctx.workspace.exists(path):
                diff += unified_diff(path, "", test["content"])
                files.append(path)
        return {"file": model_file, "config": config_path, "files": files, "diff": diff, "note": note}

    @staticmethod
    def _draft_prefixes(ctx: PolicyContext, diag: dict, config: dict, names: dict) -> tuple[str, str] | None:
        """(checkpoint prefix, engine prefix) of the layer a draft model loads, or None when it is not that.

        The checkpoint's extra layer is the one beyond ``num_hidden_layers`` in the weight index; the name the
        draft gives it is read from the loader code of the crash's own traceback: the renames its functions
        (and their files' name maps) apply to the checkpoint's names (``tools.loader_names``)."""
        if not diag.get("draft_model"):
            return None
        extra = layers_from(names, num_layers(config))
        if not extra:
            return None
        cp = f"model.layers.{extra[0]}"
        frames, sources = _model_frames(ctx, diag)
        engine = renamed_prefix(cp, renames(sources, frames))
        if not engine:
            return None
        return cp, engine[0]

    def _guard_fix(self, ctx: PolicyContext, diag: dict) -> tuple[Call, dict] | None:
        """A ROCm compile error in a CUDA-born source: a CUDA-only header guarded with ``#ifndef USE_ROCM`` (inside
        the file's own guard when it has one), or an identifier only a CUDA header declared given its HIP spelling,
        by ``agent.fixes.rocm_port`` (hipify's mapping, the file's own pairings first). What cannot be ported is
        declined by name and position: the diagnosis' summary says so, for the abandon that follows."""
        path, header, symbol = diag.get("file"), diag.get("header"), diag.get("symbol")
        if not path or not (header or symbol):
            return None
        if header:
            port = rocm_port.port_header(ctx.workspace, path, header)
        else:
            port = rocm_port.port_identifier(ctx.workspace, path, int(diag.get("line") or 0), symbol)
        if isinstance(port, rocm_port.Decline):
            diag["summary"] = f"not portable to ROCm by a guard and HIP spellings: {port.reason}"
            diag["declined"] = port.model_dump()
            return None
        if port is None:
            return None
        where, hip, spelled = port.edit.path, port.hip_include, port.spelled
        what = (f"{path} includes {header} unconditionally; ROCm builds (-DUSE_ROCM) have no such header"
                if header else f"{path}:{diag.get('line')} uses {symbol}, which only CUDA's {port.header} declares "
                               "and nothing declares on ROCm")  # fmt: skip
        change = (f"wrap '#include <{port.header}>' in {where} in #ifndef USE_ROCM" if header
                  else f"in {where}'s #ifndef USE_ROCM block around <{port.header}>" if port.extended
                  else f"in {where}, a #ifdef USE_ROCM block after its includes")  # fmt: skip
        if port.extended and header:
            change += " (inside the file's existing USE_ROCM block)"
        if hip:
            change += f", including <{hip}> on ROCm"
        if spelled:
            change += f"; on ROCm, HIP spellings for {', '.join(spelled)} (hipify's mapping)"
        if port.unported:
            change += f"; left for a human: {'; '.join(port.unported)}"
        note = {
            "category": "compile_error",
            "defect": port.defect,
            "title": (f"Guard the CUDA-only include of {port.header} for ROCm builds" if header
                      else f"Spell {symbol} for ROCm beside the guard of {port.header}")[:72],  # fmt: skip
            "root_cause": f"{what}, so the JIT compilation fails and the launch with it",
            "change": change,
        }
        if port.unported:
            note["unported"] = port.unported
        return Call(tool="edit_file", args=port.edit.model_dump()), note

    @staticmethod
    def _engine_scale(flags: dict, diag: dict) -> float | None:
        """What the engine made of --mem-fraction-static (its figure over the flag), when both are known and
        differ: a release rescales the flag for some backends and contexts, and a value that scales back onto the
        one that failed fails again."""
        given, ran = flags.get("mem-fraction-static"), diag.get("mem_fraction_static")
        if not given or not ran or abs(float(ran) - float(given)) < 1e-6:
            return None
        return float(ran) / float(given)

    @staticmethod
    def _memory_fix(task: TaskSpec, cur: dict, diag: dict, scale: float | None = None) -> bool:
        """Move the memory flags the way the diagnosis' ``memory_phase`` says (tools.diagnose.MemoryPhase): more
        static memory when the KV cache had no room at start-up; less when an allocation outside the static pool
        failed (activations, graph capture), then smaller graph batches and prefill chunks; fewer running requests
        when the engine's own pools ran dry while serving. False when no allowed value is left, or when the weights
        alone do not fit: the caller then asks for more GPUs per rank."""
        flags = cur["flags"]
        phase = diag.get("memory_phase")
        if phase is None:  # a diagnosis recorded before the field existed: the messages' own words
            text = diag.get("summary", "") + " " + " ".join(diag.get("evidence", []))
            kv = re.search(r"Not enough memory|increase --mem-fraction-static|leave no GPU memory", text)
            phase = "startup_kv" if kv else "weights" if re.search(r"[Ww]eights do not fit", text) else "runtime"

        def shrink(names: tuple[str, ...]) -> bool:
            for flag in names:
                options = sorted(v for v in _allowed(task, flag) if v)
                value = flags.get(flag)
                smaller = [v for v in options if value is None or v < value]
                if smaller:
                    flags[flag] = smaller[-1] if value is not None else smaller[len(smaller) // 2]
                    return True
            return False

        if phase == "weights":
            return False
        if phase == "kv_pool":
            return shrink(("max-running-requests", "chunked-prefill-size"))
        fractions = sorted(v for v in _allowed(task, "mem-fraction-static") if v) or [0.8, 0.85, 0.9]
        # a flag value as the engine will run it: rescaled the way this launch (else an earlier one) showed
        ran = PlaybookPolicy._engine_scale(flags, diag) or scale or 1.0
        # the engine's own figure first: it is what ran, also when the flag was left to the engine's default
        given = flags.get("mem-fraction-static")
        current = float(diag.get("mem_fraction_static") or (given * ran if given else 0.9))
        if phase == "startup_kv":
            floor = max(current, float(diag.get("min_mem_fraction_static") or 0.0))  # the engine says "above"
            higher = [f for f in fractions if f * ran > floor + 1e-9]
            if higher:
                flags["mem-fraction-static"] = higher[0]
                return True
            return False
        lower = [f for f in fractions if f * ran < current - 1e-9]
        if lower:
            flags["mem-fraction-static"] = lower[-1]
            return True
        return shrink(("cuda-graph-max-bs", "cuda-graph-max-bs-decode", "chunked-prefill-size"))
