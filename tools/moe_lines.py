"""Reading aiter's fused-MoE selection lines, in every format aiter has printed them.

aiter's ``get_2stage_cfgs`` (aiter/fused_moe.py) logs the kernel it picked for a MoE problem, keyed by the tuple
it looks the tuned CSV up with::

    [fused_moe] using {'1stage'|'2stage'}{' xbf16'?} {'default' | tag} for {keys}

``default`` means no tuned row matched: the shape ran aiter's untuned heuristics. The line, and the key tuple,
have changed over aiter's history (commits of ROCm/aiter, aiter/fused_moe.py):

====================  ==========  =================================================================================
commit                date        change
====================  ==========  =================================================================================
b0c4ed67e2 (#228)     2025-04-13  ``using {default|tag} for (token, model_dim, inter_dim, expert, topk,
                                  str(activation), str(dtype), str(q_dtype_a), str(q_dtype_w), str(q_type),
                                  use_g1u1)``; tag is the CSV's bare ``tag`` (e.g. ``ck``)
005ce4a74a (#287)     2025-04-23  + trailing ``doweight_stage1`` (12 fields, token first)
db69dad037 (#531)     2025-06-12  tag becomes ``(kernelName1='..', kernelName2='..')``
4b09253162 (#701)     2025-07-24  ``using {1stage|2stage} {default|tag}``
15e91e49e9 (#837)     2025-08-20  ``cu_num`` first (13 fields)
f4179e8199 (#2262)    2026-04-24  optional `` xbf16`` after the stage
446260d19a (#2951)    2026-05-09  activation no longer ``str()``-ed: printed as the enum repr ``<ActivationType.Silu: 0>``
ae77e7bbd5 (#3313)    2026-05-26  + ``bias_key, hidden_pad, intermediate_pad`` (reverted the same day, 48af588047)
0fb93c3b8b (#3404)    2026-05-29  + ``bias_key`` (reverted the next day, 632b99c33b)
ad73ecb5fa (#3703)    2026-06-13  ``gfx`` first: ``('gfx950', cu_num, token, ...)`` (14 fields)
667d6c6695 (#3656)    2026-07-15  activation ``str()``-ed again
b0b6945e7a (#4394)    2026-07-31  activation printed as the enum repr again
d78f4797ba (#4891)    2026-08-22  with an FHMoE config file, + ``fhmoe_keys = (expert - 1, hidden_pad,
                                  intermediate_pad, str(gate_mode))``
====================  ==========  =================================================================================

Notices that carry the same key tuple (they say the shape has no usable tuned row; ``untuned`` below):

* ``Fmoe tuning not support for {keys}`` (warning, AITER_ONLINE_TUNE=1; b0c4ed67e2 -> today) - untuned
* ``[fused_moe] flydsl unavailable, using fallback config for {keys}`` (info; aadf0a89de 2026-03-01 ->
  eaef170f42 2026-07-08) - a tuned fallback row ran, not untuned
* ``[fused_moe] flydsl unavailable and no fallback for {keys}, using default heuristics`` (same range) - untuned
* ``[fused_moe] no tuned FlyDSL config for {keys}, using heuristic FlyDSL fallback (kn1=.., kn2=..)``
  (cd994551ce 2026-05-08 -> today) and ``..., using untuned a16wi4 fallback (..)`` (4bbc57db1a 2026-08-13) - untuned
* ``[fused_moe] discarding Opus tuned config for {keys}: ...; using default heuristics`` (6dc26b7a81 2026-08-05) -
  untuned
* ``[fused_moe] tuned config found for {keys} but is_shuffled=False. ...`` (303a583c89 2026-04-14) - tuned

The format is told from the tuple itself, never from a guess of aiter's version: a leading ``'gfx…'`` string is
gfx-first; otherwise the number of integers before the activation (6: cu_num first, 5: token first). Anything
else, a truncated tuple, an unknown trailing field, a field of the wrong type, is :class:`Unparsed`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from .diagnose import MoEShape

Format = Literal["token_first", "cu_num_first", "gfx_first"]
Kind = Literal["selection", "tuning_not_supported", "flydsl_fallback_config", "flydsl_no_fallback",
               "no_tuned_flydsl", "opus_discarded", "tuned_not_shuffled"]  # fmt: skip
Extra = Literal["bias", "bias_pad", "fhmoe"]

# aiter's ActivationType (csrc/include/aiter_enum.h); the tuner's CSV spells them "ActivationType.<Name>"
ACTIVATIONS = ("No", "Silu", "Gelu", "Swiglu", "Situv2")

_SELECTION = re.compile(r"\[fused_moe\] using (?:(?P<stage>[12]stage)(?P<xbf16> xbf16)? )?(?P<how>.*?) for (?=\()")
_NOTICES: tuple[tuple[Kind, bool, re.Pattern], ...] = (
    ("tuning_not_supported", True, re.compile(r"Fmoe tuning not support for (?=\()")),
    ("flydsl_fallback_config", False, re.compile(r"\[fused_moe\] flydsl unavailable, using fallback config for (?=\()")),
    ("flydsl_no_fallback", True, re.compile(r"\[fused_moe\] flydsl unavailable and no fallback for (?=\()")),
    ("no_tuned_flydsl", True, re.compile(r"\[fused_moe\] no tuned FlyDSL config for (?=\()")),
    ("opus_discarded", True, re.compile(r"\[fused_moe\] discarding Opus tuned config for (?=\()")),
    ("tuned_not_shuffled", False, re.compile(r"\[fused_moe\] tuned config found for (?=\()")),
)  # fmt: skip
# a line that means to report a shape: if none of the above reads it, it is Unparsed, not ignored
_CANDIDATE = re.compile(r"\[fused_moe\] using |\[fused_moe\] [^\n]*? for \(|Fmoe tuning not support for ")
_KERNELS = re.compile(r"^\(kernelName1=(?P<k1>'[^']*'|\"[^\"]*\"|None), kernelName2=(?P<k2>'[^']*'|\"[^\"]*\"|None)\)$")
_TOKEN = re.compile(r"""\s*(?:'(?P<sq>(?:[^'\\]|\\.)*)'|"(?P<dq>(?:[^"\\]|\\.)*)"|<(?P<enum>[A-Za-z_][\w.]*): -?\d+>"""
                    r"""|(?P<bool>True|False)|(?P<none>None)|(?P<int>-?\d+))\s*(?P<end>,|\))""")  # fmt: skip


class Enum(str):
    """An enum printed by its repr inside the tuple (``<ActivationType.Silu: 0>`` -> ``ActivationType.Silu``)."""


class MoELine(BaseModel):
    """One aiter line that names a MoE problem shape, read field by field."""

    line: str
    kind: Kind = "selection"
    format: Format
    shape: MoEShape
    untuned: bool = Field(description="the shape has no usable tuned row: aiter's default (heuristic) path ran")
    stage: Literal["1stage", "2stage"] | None = Field(None, description="None: the line predates the 1stage path")
    xbf16: bool = False
    kernel: str | None = Field(None, description="the tuned selection: the kernel tag, or kernelName1/2")
    kernel_name1: str | None = None
    kernel_name2: str | None = None
    token: int
    cu_num: int | None = None
    gfx: str | None = None
    act_enum_repr: bool = Field(False, description="the activation was printed as an enum repr, not a string")
    has_doweight_stage1: bool = True
    extra: Extra | None = Field(None, description="trailing fields after doweight_stage1")
    bias: bool | None = None
    hidden_pad: int | None = None
    intermediate_pad: int | None = None
    fhmoe_expert: int | None = Field(None, description="FHMoE key's expert - 1")
    gate_mode: str | None = None


class Unparsed(BaseModel):
    """A line that looks like aiter's MoE selection but matches none of its known formats."""

    line: str
    reason: str


def _fields(text: str, start: int) -> tuple[list, str | None]:
    """The elements of the Python tuple repr at ``text[start]``: ints, bools, None, strings, :class:`Enum`."""
    assert text[start] == "("
    pos, out = start + 1, []
    if text[pos:].lstrip().startswith(")"):
        return out, None
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:
            rest = text[pos:pos + 40].strip()
            return out, f"unreadable tuple element at {rest!r}" if rest else "the tuple is cut off"
        if m.group("sq") is not None or m.group("dq") is not None:
            out.append(m.group("sq") if m.group("sq") is not None else m.group("dq"))
        elif m.group("enum"):
            out.append(Enum(m.group("enum")))
        elif m.group("bool"):
            out.append(m.group("bool") == "True")
        elif m.group("none"):
            out.append(None)
        else:
            out.append(int(m.group("int")))
        pos = m.end()
        if m.group("end") == ")":
            return out, None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def activation_name(value: str) -> str | None:
    """The activation as aiter's tuner CSV spells it (``ActivationType.Silu``), or None if it is not one."""
    name = value.split(".", 1)[1] if value.startswith("ActivationType.") else value
    for known in ACTIVATIONS:
        if name == known or (not value.startswith("ActivationType.") and name.lower() == known.lower()):
            return f"ActivationType.{known}"
    return None


def _read(line: str, kind: Kind, untuned: bool, tuple_at: int, sel: re.Match | None) -> MoELine | Unparsed:
    f, err = _fields(line, tuple_at)
    if err:
        return Unparsed(line=line, reason=err)
    head: dict = {}
    if f and isinstance(f[0], str) and re.fullmatch(r"gfx\w+", f[0]):
        fmt: Format = "gfx_first"
        head["gfx"], f = f[0], f[1:]
        lead = 6
    else:
        lead = next((i for i, v in enumerate(f) if not _is_int(v)), len(f))
        if lead not in (5, 6):
            return Unparsed(line=line, reason=f"{lead} integers before the activation: no known key layout")
        fmt = "cu_num_first" if lead == 6 else "token_first"
    ints, f = f[:lead], f[lead:]
    if len(ints) < lead or not all(_is_int(v) for v in ints):
        return Unparsed(line=line, reason=f"{fmt}: expected {lead} integer fields first")
    if lead == 6:
        head["cu_num"], ints = ints[0], ints[1:]
    token, model_dim, inter_dim, expert, topk = ints
    if len(f) < 6:
        return Unparsed(line=line, reason=f"{fmt}: {len(f)} fields after topk, need at least 6")
    act, dtype, qa, qw, qt, g1u1 = f[:6]
    rest = f[6:]
    if not isinstance(act, str) or (act_name := activation_name(act)) is None:
        return Unparsed(line=line, reason=f"activation field {act!r} is not an aiter ActivationType")
    if not all(isinstance(v, str) and not isinstance(v, Enum) for v in (dtype, qa, qw, qt)):
        return Unparsed(line=line, reason="dtype/q_dtype_a/q_dtype_w/q_type are not all strings")
    if not dtype.startswith("torch.") or not qt.startswith("QuantType."):
        return Unparsed(line=line, reason=f"dtype {dtype!r} or q_type {qt!r} is not where the layout puts it")
    if not isinstance(g1u1, bool):
        return Unparsed(line=line, reason=f"use_g1u1 {g1u1!r} is not a bool")
    res: dict = {}
    has_dw = bool(rest) and isinstance(rest[0], bool)
    dw = rest[0] if has_dw else False
    rest = rest[1:] if has_dw else rest
    if not has_dw and (fmt != "token_first" or rest):
        return Unparsed(line=line, reason="doweight_stage1 missing or not a bool")
    types = [("b" if isinstance(v, bool) else "i" if _is_int(v) else "s" if isinstance(v, str) else "?") for v in rest]
    if types == ["b"]:
        res.update(extra="bias", bias=rest[0])
    elif types == ["b", "i", "i"]:
        res.update(extra="bias_pad", bias=rest[0], hidden_pad=rest[1], intermediate_pad=rest[2])
    elif types == ["i", "i", "i", "s"]:
        res.update(extra="fhmoe", fhmoe_expert=rest[0], hidden_pad=rest[1], intermediate_pad=rest[2], gate_mode=rest[3])
    elif types:
        return Unparsed(line=line, reason=f"unknown trailing fields {rest!r}")
    shape = MoEShape(model_dim=model_dim, inter_dim=inter_dim, expert=expert, topk=topk, act_type=act_name,
                     dtype=dtype, q_dtype_a=qa, q_dtype_w=qw, q_type=qt, use_g1u1=g1u1, doweight_stage1=dw)  # fmt: skip
    if sel is not None:
        how = sel.group("how")
        untuned = how == "default"
        res.update(stage=sel.group("stage"), xbf16=bool(sel.group("xbf16")))
        if not untuned:
            res["kernel"] = how
            if k := _KERNELS.match(how):
                res["kernel_name1"], res["kernel_name2"] = (None if v == "None" else v[1:-1] for v in k.groups())
    return MoELine(line=line, kind=kind, format=fmt, shape=shape, untuned=untuned, token=token,
                   act_enum_repr=isinstance(act, Enum), has_doweight_stage1=has_dw, **head, **res)  # fmt: skip


def parse_line(line: str) -> MoELine | Unparsed | None:
    """Read one log line: a :class:`MoELine`, :class:`Unparsed` for a MoE line of no known format, or None for a
    line that is not one of aiter's MoE-shape lines at all."""
    line = line.rstrip("\r\n")
    if m := _SELECTION.search(line):
        return _read(line, "selection", False, m.end(), m)
    for kind, untuned, pattern in _NOTICES:
        if m := pattern.search(line):
            return _read(line, kind, untuned, m.end(), None)
    if _CANDIDATE.search(line):
        return Unparsed(line=line, reason="an aiter MoE line in no known format")
    return None


def parse_log(log: str) -> list[MoELine | Unparsed]:
    """Every aiter MoE-shape line of ``log``, in order."""
    return [r for ln in log.splitlines() if (r := parse_line(ln)) is not None]


def untuned_shapes(log: str) -> list[MoEShape]:
    """The distinct shapes that ran without a tuned selection (by :meth:`MoEShape.key`), first seen first."""
    shapes: dict[tuple, MoEShape] = {}
    for r in parse_log(log):
        if isinstance(r, MoELine) and r.untuned:
            shapes.setdefault(r.shape.key(), r.shape)
    return list(shapes.values())


def unparsed_lines(log: str) -> list[Unparsed]:
    """The aiter MoE lines of ``log`` that match no known format, so the caller can say it could not read them."""
    return [r for r in parse_log(log) if isinstance(r, Unparsed)]
