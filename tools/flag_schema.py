"""The engine's flags as its own argument parser declares them, read from the engine's source in the workspace.

SGLang declares every ``launch_server`` flag in ``ServerArgs.add_cli_args`` (``python/sglang/srt/server_args.py``)
with ``parser.add_argument``. That source is in the workspace whatever runs it (the twin or the real image), so
the schema is read from it — statically, with :mod:`ast`, since importing it needs the engine's own dependencies —
and a launch is checked against it before anything starts: an unknown flag (with the nearest known names), a
switch given a value, a value of the wrong type or outside the parser's ``choices``. A check that cannot be made
(no parser source, a type or choice list computed at run time) is left to the engine.
"""

from __future__ import annotations

import ast
import difflib
import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

PARSER_FILE = "srt/server_args.py"  # under the engine's package, e.g. python/sglang/srt/server_args.py
PARSER_FUNCTION = "add_cli_args"
SWITCH_ACTIONS = {"store_true", "store_false"}


class FlagSpec(BaseModel):
    """One flag of the parser: a switch, or a flag taking a value of ``type`` (when it is a plain int, float or
    str) from ``choices`` (when the parser lists them literally)."""

    kind: Literal["switch", "value"]
    type: Literal["int", "float", "str"] | None = None
    choices: list[Any] | None = None
    many: bool = False  # nargs: a list of values


class FlagSchema(BaseModel):
    source: str  # the parser file, for the messages
    flags: dict[str, FlagSpec]  # every option string without its dashes ("tp-size", "tensor-parallel-size")


def _literal_list(node: ast.AST, constants: dict[str, ast.AST]) -> list[Any] | None:
    if isinstance(node, ast.Name) and node.id in constants:
        node = constants[node.id]
    if isinstance(node, ast.List | ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def schema_from_source(text: str, source: str = "") -> FlagSchema | None:
    """The flags ``add_cli_args`` declares in ``text`` (None when it declares none)."""
    tree = ast.parse(text)
    constants = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Name)}  # fmt: skip
    flags: dict[str, FlagSpec] = {}
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and fn.name == PARSER_FUNCTION):
            continue
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "add_argument"):  # fmt: skip
                continue
            names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     and a.value.startswith("--")]  # fmt: skip
            if not names:
                continue
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            action = kw.get("action")
            if isinstance(action, ast.Constant) and action.value in SWITCH_ACTIONS:
                spec = FlagSpec(kind="switch")
            else:
                typ = kw.get("type")
                name = typ.id if isinstance(typ, ast.Name) and typ.id in ("int", "float", "str") else None
                choices = _literal_list(kw["choices"], constants) if "choices" in kw else None
                nargs = kw.get("nargs")
                many = isinstance(nargs, ast.Constant) and (nargs.value in ("+", "*") or isinstance(nargs.value, int))
                spec = FlagSpec(kind="value", type=name, choices=choices, many=many)
            for n in names:
                flags[n.lstrip("-")] = spec
    return FlagSchema(source=source, flags=flags) if flags else None


@functools.lru_cache(maxsize=8)
def _schema_of(text: str, source: str) -> FlagSchema | None:
    try:
        return schema_from_source(text, source)
    except SyntaxError:
        return None


def find_parser(roots: list[Path]) -> Path | None:
    """The engine's parser source under one of ``roots`` (the workspace's source trees)."""
    for root in roots:
        for candidate in (root / "python" / "sglang" / PARSER_FILE, root / "sglang" / PARSER_FILE):
            if candidate.is_file():
                return candidate
    return None


def load_schema(path: Path) -> FlagSchema | None:
    """The flags the parser source at ``path`` declares, parsed once per content: every launch reads the file
    again (a launch restores the workspace's pristine files, which renews their modification times)."""
    return _schema_of(path.read_text(errors="replace"), str(path))


def _type_ok(spec: FlagSpec, value: Any) -> bool:
    if spec.type is None or isinstance(value, bool) and spec.type != "str":
        return spec.type is None
    try:
        {"int": int, "float": float, "str": str}[spec.type](value)
    except (TypeError, ValueError):
        return False
    return not (spec.type == "int" and isinstance(value, float) and not value.is_integer())


def problems(schema: FlagSchema, flags: dict[str, Any]) -> list[str]:
    """What the engine's parser would refuse in ``flags`` (names without dashes; None leaves a flag out)."""
    out = []
    for name, value in flags.items():
        if value is None:
            continue
        spec = schema.flags.get(name)
        if spec is None:
            near = difflib.get_close_matches(name, list(schema.flags), n=3)
            out.append(f"--{name} is not a flag of this engine" + (f" (did you mean {', '.join('--' + n for n in near)}?)"
                                                                  if near else ""))  # fmt: skip
            continue
        if spec.kind == "switch":
            if not isinstance(value, bool):
                out.append(f"--{name} is a switch: give true to set it, or leave it out (got {value!r})")
            continue
        if isinstance(value, bool):
            out.append(f"--{name} takes a value, not a switch (got {value!r})")
            continue
        for v in value if spec.many and isinstance(value, list) else [value]:
            if not _type_ok(spec, v):
                out.append(f"--{name} takes {'an' if spec.type == 'int' else 'a'} {spec.type} (got {v!r})")
            elif spec.choices is not None and str(v) not in {str(c) for c in spec.choices}:
                out.append(f"--{name} {v!r} is not one of its choices ({', '.join(map(str, spec.choices))})")
    return out
