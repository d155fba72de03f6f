"""How an engine's weight loader renames a checkpoint's names, read from the loader code a traceback names.

A draft (MTP) model often loads a checkpoint layer under another name than the checkpoint's: a loader may turn
the checkpoint's extra layer ``model.layers.<N>.*`` into its own layer prefix (and the draft-only weights into
another), or a draft tree of its own (``mtp.*``) into the target's names.
An engineer who meets a draft's weight-loading crash opens the files of the traceback and reads those renames;
``renamed_prefix`` does the same: it collects, from the functions the traceback's frames ran in (and the class
attributes of their files, such as a ``hf_to_sglang_mapper``), every ``name.replace(OLD, NEW)`` with a string
``NEW`` and every mapping of one literal name to another, resolves ``OLD`` (a literal, an f-string such as
``f"model.layers.{nextn_layer_id}"``, or a name bound to one), and applies the ones that match the checkpoint's
prefix. Nothing here knows a model, a file or a prefix: they all come from the code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .parsed import python_ast


@dataclass(frozen=True)
class Rename:
    """``old`` (a regular expression matched at the start of a name) becomes ``new``; ``where`` is file:line."""

    old: str
    new: str
    where: str

    def apply(self, name: str) -> str | None:
        m = re.match(self.old, name)
        return self.new + name[m.end():] if m else None


def _pattern(node: ast.AST) -> str | None:
    """A regular expression for the strings an expression can be: a literal, or an f-string whose holes are any
    run of non-dot characters."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(re.escape(v.value))
            else:
                parts.append(r"[^.]+")
        return "".join(parts)
    return None


def _bindings(tree: ast.Module) -> dict[str, list[str]]:
    """Patterns of every string a name is bound to anywhere in a file (assignments and keyword arguments: a
    ``NextNEnabledConfig(nextn_layer_prefix=f"...")`` binds ``nextn_layer_prefix``)."""
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            p = _pattern(node.value)
            for t in node.targets:
                if p is not None and isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(p)
        elif isinstance(node, ast.keyword) and node.arg:
            p = _pattern(node.value)
            if p is not None:
                out.setdefault(node.arg, []).append(p)
        elif isinstance(node, ast.match_case):  # case Conf(field=name): the name is what field holds
            for sub in ast.walk(node.pattern):
                if isinstance(sub, ast.MatchClass):
                    for attr, pat in zip(sub.kwd_attrs, sub.kwd_patterns, strict=False):
                        if isinstance(pat, ast.MatchAs) and pat.name:
                            out.setdefault(f"={pat.name}", []).append(attr)
    return out


def _enclosing(tree: ast.Module, function: str, line: int) -> list[ast.AST]:
    """The function named ``function`` that spans ``line`` (every function of that name when none does)."""
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function]
    spanning = [n for n in found if n.lineno <= line <= (n.end_lineno or n.lineno)]
    return spanning or found


def renames(sources: dict[str, str], frames: Iterable[tuple[str, str, int]]) -> list[Rename]:
    """The renames the loader code of ``frames`` (``(file, function, line)``; ``sources`` maps each file to its
    text) applies to names, in the frames' order."""
    out: list[Rename] = []
    trees: dict[str, tuple[ast.Module, dict[str, list[str]]]] = {}
    for file, function, line in frames:
        text = sources.get(file)
        if text is None:
            continue
        if file not in trees:
            try:
                tree = python_ast(text)
            except SyntaxError:
                continue
            trees[file] = (tree, _bindings(tree))
            # literal name maps held by the file's classes (a hf_to_sglang_mapper's orig_to_new_* dicts)
            for node in ast.walk(tree):
                if isinstance(node, ast.Dict):
                    for k, v in zip(node.keys, node.values, strict=False):
                        if (isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Constant)
                                and isinstance(v.value, str) and "." in k.value):  # fmt: skip
                            out.append(Rename(re.escape(k.value), v.value, f"{file}:{k.lineno}"))
        tree, bound = trees[file]
        for fn in _enclosing(tree, function, line):
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "replace" and len(node.args) == 2):  # fmt: skip
                    continue
                new = node.args[1]
                if not (isinstance(new, ast.Constant) and isinstance(new.value, str)):
                    continue
                old = node.args[0]
                patterns = [p] if (p := _pattern(old)) is not None else []
                if isinstance(old, ast.Name):
                    patterns = list(bound.get(old.id, []))
                    for attr in bound.get(f"={old.id}", []):  # bound by a match-case from a field
                        patterns += bound.get(attr, [])
                for p in dict.fromkeys(patterns):
                    out.append(Rename(p, new.value, f"{file}:{node.lineno}"))
    return out


def renamed_prefix(prefix: str, rules: list[Rename]) -> list[str]:
    """Every name the rules turn ``prefix`` into (longest first: the most specific rename, e.g. a whole layer's
    new prefix before the one its draft-only weights get). A rule that leaves the name unchanged is ignored."""
    out = []
    for r in rules:
        new = r.apply(prefix)
        if new is not None and new != prefix and new not in out:
            out.append(new.rstrip("."))
    return sorted(out, key=len, reverse=True)
