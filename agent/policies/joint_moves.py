"""Two knobs changed together, where the engine ties them: what one-knob moves from the best cannot reach.

An engine derives some settings from others. SGLang sizes the static memory fraction from the prefill chunk, and
the layout sets the chunk each DP attention rank prefills (it divides the chunk flag among them). A one-knob move
then changes two things: the knob it sets and the one the engine re-derived, and it can lose for the second reason
(a larger chunk that leaves less memory for the KV cache). Two answers, both read from what the engine reported
(``/server_info``), nothing keyed to a knob or a figure:

- **served as meant** (``rescale_to_meant``): a launch that set a flag to get a served value (the best's, on
  another layout) and was served a multiple of it is launched again with the allowed flag value the engine serves
  as meant, before anything is measured;
- **pairs** (``pair_moves``), once single moves from the best stall: each single move that made the engine
  re-derive another knob, with that knob held where the best has it, and the single moves that came closest to
  beating the best (their knee, else what they served at the rate they did not sustain) two by two; those whose
  single moves came closest first.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from ..search import ENV, LAYOUT, Candidate, Measured, SearchSpace, in_crash_region, serving_key

CLOSEST = 3  # the single moves whose pairs are tried: those that came closest to beating the best
MIN_SINGLES = 2  # single moves from the best measured (none better) before pairs are proposed: the search stalls


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def flag_for(allowed: list[Any], given: Any, served: Any, meant: Any) -> Any | None:
    """The allowed value of a numeric flag that the engine serves as ``meant``, from a launch that was given
    ``given`` and served ``served`` (the engine scaled it by served / given). None when the flag is not numeric,
    was served as given, or no allowed value is served exactly as meant."""
    g, s, m = _number(given), _number(served), _number(meant)
    if g is None or s is None or m is None or g <= 0 or s <= 0 or math.isclose(g, s):
        return None
    ratio = s / g
    fits = [v for v in allowed if (n := _number(v)) is not None and math.isclose(n * ratio, m, rel_tol=1e-9)]
    return fits[0] if fits and fits[0] != given else None


def rescale_to_meant(allowed: dict[str, list[Any]], cur: dict) -> str | None:
    """After a launch of ``cur`` (a plan item with ``flags``, ``serving`` and ``meant``: the served value each flag
    was set for): the flags the engine served otherwise than meant, set to the allowed value it serves as meant
    (``flag_for``), in ``cur`` and its search candidate. Each flag once (it leaves ``meant``). Returns what changed
    (None: nothing to change, launch as it is)."""
    serving, meant = cur.get("serving") or {}, cur.get("meant") or {}
    changed = []
    for name in list(meant):
        key = serving_key(name)
        if name not in cur["flags"] or key not in serving:
            continue
        value = flag_for(allowed.get(name, []), cur["flags"][name], serving[key], meant[name])
        if value is None:
            continue
        changed.append(f"--{name} {value} (the engine served {serving[key]} for {cur['flags'][name]}; "
                       f"{meant[name]} was meant)")  # fmt: skip
        cur["flags"][name] = value
        if cur.get("candidate"):
            cur["candidate"]["flags"][name] = value
        meant.pop(name)
    return "; ".join(changed) or None


def changed_knobs(space: SearchSpace, a: Candidate, b: Candidate) -> list[str]:
    """The knobs (``SearchSpace.knob_order``) on which two configurations differ."""
    knobs = ["layout"] if any(a.flags.get(k) != b.flags.get(k) for k in LAYOUT) else []
    knobs += [k for k in space.flags if k not in LAYOUT and a.flags.get(k) != b.flags.get(k)]
    return knobs + [f"{ENV}{k}" for k in space.env if a.env.get(k, "") != b.env.get(k, "")]


def _score(m: Measured) -> float:
    """How close a measurement came to the best: its knee, else what it served at the rate it did not sustain."""
    return m.value if m.value > 0 else (m.near or 0.0)


def single_moves(space: SearchSpace, best: Candidate, history: list[Measured]) -> list[tuple[str, Measured]]:
    """The measured configurations one knob away from ``best`` that served, closest to beating it first."""
    out = []
    for m in history:
        cand = space.canonical(m.candidate) or m.candidate
        knobs = changed_knobs(space, best, cand)
        if len(knobs) == 1 and not m.crashed:
            out.append((knobs[0], m.model_copy(update={"candidate": cand})))
    return sorted(out, key=lambda km: -_score(km[1]))


def _held(space: SearchSpace, name: str, wanted: Any) -> Any | None:
    """The allowed value of ``name`` nearest the served value ``wanted`` (itself when allowed; None: not numeric)."""
    values = space.flags.get(name, [])
    if wanted in values:
        return wanted
    w = _number(wanted)
    numeric = [v for v in values if _number(v) is not None]
    if w is None or not numeric:
        return None
    return min(numeric, key=lambda v: (abs(float(v) - w), -float(v)))


def pair_moves(space: SearchSpace, best: Candidate, best_serving: dict[str, Any] | None,
               history: list[Measured]) -> list[tuple[Candidate, dict[str, Any], str]]:  # fmt: skip
    """Two-knob moves from ``best`` once its single moves stall (``MIN_SINGLES`` measured, none better): each as
    (candidate, meant, why), ``meant`` the served value each held flag is set for (``rescale_to_meant``). Of the
    ``CLOSEST`` single moves (of distinct knobs; their knee, else what they served): each that made the engine
    re-derive a knob it did not set, with that knob held at the best's served value, and the moves two by two;
    those whose single moves came closest first. None measured or in a crash region."""
    singles = single_moves(space, best, history)
    if len(singles) < MIN_SINGLES:
        return []
    best_serving = best_serving or {}
    seen = {(space.canonical(m.candidate) or m.candidate).key() for m in history} | {best.key()}
    out: list[tuple[float, Candidate, dict[str, Any], str]] = []

    def add(score: float, cand: Candidate | None, meant: dict[str, Any], why: str) -> None:
        if cand is not None and cand.key() not in seen and not in_crash_region(cand, history):
            seen.add(cand.key())
            out.append((score, cand, meant, why))

    closest: list[tuple[str, Measured]] = []
    for knob, m in singles:
        if knob not in [k for k, _ in closest]:
            closest.append((knob, m))
    closest = closest[:CLOSEST]
    for knob, m in closest:
        served = m.serving or {}
        for name in space.flags:
            key = serving_key(name)
            if name in LAYOUT or knob == name or name in m.candidate.flags or key not in served or \
                    key not in best_serving or served[key] == best_serving[key]:  # fmt: skip
                continue
            value = _held(space, name, best_serving[key])
            if value is None:
                continue
            cand = space.canonical(Candidate(flags={**m.candidate.flags, name: value}, env=m.candidate.env))
            add(_score(m), cand, {name: best_serving[key]}, f"{knob} as measured, with {name} held at the best's "
                f"{best_serving[key]} (the engine re-derived it to {served[key]})")  # fmt: skip
    for (ka, a), (kb, b) in itertools.combinations(closest, 2):
        moved = [Candidate(flags={k: v for k, v in c.candidate.flags.items() if k in _knob_flags(k_)},
                           env={k: v for k, v in c.candidate.env.items() if f"{ENV}{k}" == k_})
                 for k_, c in ((ka, a), (kb, b))]  # fmt: skip
        add(min(_score(a), _score(b)), space.apply(best, *moved), {},
            f"{ka} and {kb} together (their single moves came closest)")
    out.sort(key=lambda o: -o[0])  # stable: at equal closeness, a held knob before two moves
    return [(cand, meant, why) for _, cand, meant, why in out]


def _knob_flags(knob: str) -> tuple[str, ...]:
    """The flags a knob sets: the layout's, or its own."""
    return LAYOUT if knob == "layout" else () if knob.startswith(ENV) else (knob,)
