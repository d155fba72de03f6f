"""Exclude entries for a draft's MTP layer: only what the engine would build quantized, in the list's own style.

The checkpoint names its MTP layer's unquantized modules under its own prefix (``model.layers.<N>``); the draft
builds that layer under another prefix the draft's loader maps it to (``<owner>.<layer>``), and the layer's own
modules (a projection of the draft alone) on the model holding it, ``<owner>``; both are read from the draft class
and the crash, never assumed. Each checkpoint module the list covers is looked up in the draft's module tree
(``engine_modules.ModuleTree``): a norm, a router gate or an embedding is never quantized and gets no entry, a name
the draft never builds gets none either, a fused MoE is named once by its own prefix. Where the checkpoint keeps the
whole layer unquantized and the list says so with a ``re:`` pattern, one whole-layer pattern for the draft's
quantized children is the entry.

``engine_test`` writes the unit test an engine fix comes with, in SGLang's ``test/srt/models`` style: it maps the
checkpoint's entries with the helper the fix adds and asserts the draft's module names are excluded. It fails before
the fix (the helper does not exist) and passes after it.
"""

from __future__ import annotations

import re
import textwrap

from agent.policies.upstream_fixes import HELPER, _map_mtp_exclude_entry, python_literal

from .engine_modules import Found, ModuleTree

SCALE = re.compile(r"(_scale(_inv)?|_scales)$")


def excluded(name: str, entries: list[str]) -> bool:
    """Quark's rule: an exact name, or a ``re:`` pattern matched at the start of the name."""
    for e in entries:
        if e.startswith("re:"):
            try:
                if re.match(e[3:], name):
                    return True
            except re.error:
                continue
        elif e == name:
            return True
    return False


def engine_module(tree: ModuleTree, suffix: str, ep: str) -> Found | None:
    """The draft's module for the checkpoint layer's ``suffix``: in the decoder layer at ``ep`` if the draft builds
    it there, else among the MTP layer's own modules on the model holding ``ep``."""
    owner = ep.rpartition(".")[0]
    for name in (f"{ep}.{suffix}", f"{owner}.{suffix}" if owner else suffix):
        found = tree.find(name)
        if found is not None:
            return found
    return None


def own_modules(tree: ModuleTree, ep: str) -> tuple[str, ...]:
    """The MTP layer's own quantized modules: children of the model holding ``ep`` other than ``ep`` itself."""
    owner = ep.rpartition(".")[0]
    return tuple(k.name.rpartition(".")[2] for k in tree.quantized_children(owner) if k.name != ep)


def whole_layer_entry(tree: ModuleTree, ep: str, style: str) -> str | None:
    """One ``re:`` entry for every quantized child of the model holding the MTP layer, in the style of the list's
    own whole-layer entry ``style`` (dots escaped or not): ``re:<owner>.<layer>.*``, or with the owner's own quantized
    modules ``re:<owner>\\.(<layer>\\..*|<module>)``."""
    owner = ep.rpartition(".")[0]
    kids = tree.quantized_children(owner)
    if not kids or not owner:
        return None
    escaped = "\\." in style
    dot, esc = (r"\.", re.escape) if escaped else (".", lambda s: s)
    alts = [esc(k.name[len(owner) + 1:]) + ("" if k.leaf else (r"\..*" if escaped else ".*")) for k in kids]
    body = alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"
    return f"re:{esc(owner)}{dot}{body}"


def engine_excludes(tree: ModuleTree, modules: list[str], cp: str, ep: str, exclude: list[str],
                    unquantized_layer: bool) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """(entries to add, the draft's quantized module names they are for -> the checkpoint module each stands for). ``modules`` are the checkpoint's module
    names under ``cp``; ``unquantized_layer``: the checkpoint stores no scale under ``cp``."""
    targets: dict[str, str] = {}  # the draft's name -> the checkpoint module whose entry covers it
    for m in modules:
        if not m.startswith(cp + ".") or not excluded(m, exclude):
            continue
        found = engine_module(tree, m[len(cp) + 1:], ep)
        if found is None or found.quantized is False:
            continue  # a module the draft never builds, or never quantizes (a norm, an embedding, a router)
        targets.setdefault(found.name, m)
    covering = [e for e in exclude if e.startswith("re:") and excluded(cp + ".x", [e])
                and not excluded("model.layers.0.x", [e])]  # a pattern for this layer as a whole  # fmt: skip
    if unquantized_layer and covering and targets:
        entry = whole_layer_entry(tree, ep, covering[0])
        if entry and all(excluded(t, [entry]) for t in targets):
            return ([entry] if not all(excluded(t, exclude) for t in targets) else []), targets
    adds: list[str] = []
    for name, m in targets.items():
        if excluded(name, exclude + adds):
            continue
        pattern = next((e for e in exclude if e.startswith("re:") and excluded(m, [e])), None)
        rewritten = next(iter(_map_mtp_exclude_entry(pattern, cp, ep)), None) if pattern else None
        adds.append(rewritten if rewritten is not None and excluded(name, [rewritten]) else name)
    return adds, targets


def engine_test(module: str, class_name: str, cp_expr_value: str, ep: str, own: tuple[str, ...],
                entries: list[str], targets: list[str]) -> dict[str, str]:  # fmt: skip
    """The unit test of an engine fix in ``sglang.srt.models.<module>``: the checkpoint's ``entries`` naming its MTP
    layer ``cp_expr_value``, mapped, exclude each of the draft's ``targets``. Path and content."""
    stem = module.rpartition(".")[2]
    listing = "".join(f"    {python_literal(e)},\n" for e in entries)
    names = "".join(f"    {python_literal(t)},\n" for t in targets)
    args = f"EXCLUDE, CKPT_PREFIX, {python_literal(ep)}, {python_literal(own)}"
    call = f"{HELPER}({args})" if len(f"        mapped = {HELPER}({args})") <= 88 else f"{HELPER}(\n            {args}\n        )"
    doc = textwrap.fill(
        f"{class_name} builds the checkpoint's MTP layer ({cp_expr_value}) as {ep}; the checkpoint names that "
        f"layer's unquantized modules in quantization_config.exclude under its own prefix. {HELPER} adds each "
        f"entry again under the draft's names, so the draft builds those modules unquantized.", 79)
    content = f'''"""Unit tests for the MTP-layer exclude mapping of {stem}.

{doc}
"""

import unittest

from sglang.srt.layers.quantization.quark.utils import should_ignore_layer
from sglang.srt.models.{stem} import {HELPER}

CKPT_PREFIX = {python_literal(cp_expr_value)}
EXCLUDE = [
{listing}]
DRAFT_MODULES = [
{names}]


class TestMapMtpExcludeLayers(unittest.TestCase):
    def test_draft_modules_are_excluded(self):
        mapped = {call}
        for name in DRAFT_MODULES:
            with self.subTest(name=name):
                self.assertFalse(should_ignore_layer(name, EXCLUDE))
                self.assertTrue(should_ignore_layer(name, mapped))

    def test_checkpoint_entries_are_kept(self):
        mapped = {call}
        self.assertEqual(mapped[: len(EXCLUDE)], EXCLUDE)


if __name__ == "__main__":
    unittest.main()
'''
    return {"path": f"test/srt/models/test_{stem}_mtp_exclude.py", "content": content}
