"""Fixes proposed to the engine itself, so the next checkpoint of the kind needs no config fix.

A draft (MTP) model loads the checkpoint's extra layer under a prefix of its own. When its weight-name mapper
renames only one particular layer index, a checkpoint whose extra layer has another index keeps the exclude
entries of that layer under the checkpoint's name, and the draft builds those modules quantized. The upstream
fix: the draft model's constructor maps the exclude entries that name the checkpoint's layer (from the config,
not a constant) to its own prefix before any module is built.

``map_draft_excludes(source, ...)`` returns the patched source text, or None when the file does not have the
shape the fix needs (the class, a constructor taking ``config`` and ``quant_config``). The inserted code is
plain Python in the file's own indentation; nothing here knows a particular model, layer or prefix.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap

from tools.parsed import python_ast

LINE_LENGTH = 88  # black's default, which SGLang uses

# The two functions below are written into the engine's file as they stand here (``inspect.getsource``), in
# black's style, so what the playbook runs and what it proposes upstream are one code.


def _map_mtp_exclude_entry(entry, ckpt_prefix, prefix, own_modules=()):
    """The entry, if it names the checkpoint's MTP layer (``ckpt_prefix``), as this
    model names it: the decoder layer's modules under ``prefix`` (an exact name, and
    the fused-experts module an expert's name belongs to, or a ``re:`` pattern whose
    leading part matches ``ckpt_prefix.``), the MTP layer's own quantized modules
    (``own_modules``, e.g. eh_proj) under the model holding that layer. Empty when
    it names something else."""
    owner = prefix.rpartition(".")[0]
    if entry.startswith("re:"):
        pattern = entry[3:]
        for cut in range(1, len(pattern) + 1):
            try:
                head = re.compile(pattern[:cut])
            except re.error:
                continue
            if head.fullmatch(ckpt_prefix + "."):
                mapped = ["re:" + re.escape(prefix + ".") + pattern[cut:]]
                for module in own_modules:  # a whole-layer pattern covers them too
                    if re.match(pattern, ckpt_prefix + "." + module):
                        mapped.append(owner + "." + module)
                return mapped
        return []
    if not entry.startswith(ckpt_prefix + "."):
        return []
    rest = entry[len(ckpt_prefix) + 1 :]
    name = (owner if rest.split(".")[0] in own_modules else prefix) + "." + rest
    experts = re.match(r"(.*\.experts)\.\d+\.", name)
    return [name, experts.group(1)] if experts else [name]


def _map_mtp_exclude_layers(exclude_layers, ckpt_prefix, prefix, own_modules=()):
    """Exclude entries, plus each one that names the checkpoint's MTP layer again
    as this model names it (_map_mtp_exclude_entry)."""
    mapped = []
    for entry in exclude_layers:
        mapped += _map_mtp_exclude_entry(entry, ckpt_prefix, prefix, own_modules)
    added = [m for m in dict.fromkeys(mapped) if m not in exclude_layers]
    return list(exclude_layers) + added


HELPER = _map_mtp_exclude_layers.__name__
_HELPER_SOURCE = "".join(inspect.getsource(f) + "\n\n" for f in (_map_mtp_exclude_entry, _map_mtp_exclude_layers))

_COMMENT = ("The checkpoint names its MTP layer {ckpt_doc} in its quantization exclude list, but this model builds "
            "that layer as {prefix_doc}: name those exclude entries under this model's names too.")
_CALL_SOURCE = '''{comment}{i}if getattr(quant_config, "exclude_layers", None):
{i}    quant_config.exclude_layers = {name}(
{i}        quant_config.exclude_layers,
{i}        {ckpt_expr},
{i}        {prefix},
{i}        {own},
{i}    )
'''


def python_literal(value: str | tuple[str, ...]) -> str:
    """A string or a tuple of strings as black writes it (double quotes; a one-element tuple's comma)."""
    if isinstance(value, tuple):
        return "(" + ", ".join(json.dumps(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return json.dumps(value)


def _init_of(tree: ast.Module, class_name: str) -> tuple[ast.ClassDef, ast.FunctionDef] | None:
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        return None
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return None
    params = {a.arg for a in init.args.args + init.args.kwonlyargs}
    if not {"config", "quant_config"} <= params:
        return None
    return cls, init


def _is_base_init(stmt: ast.stmt) -> bool:
    """``super().__init__(...)`` or ``Base.__init__(self, ...)``."""
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "__init__")  # fmt: skip


def _import_re(lines: list[str], tree: ast.Module) -> int | None:
    """Index at which ``import re`` goes among the file's plain top-level imports (None: already imported)."""
    plain = [n for n in tree.body if isinstance(n, ast.Import)]
    if any(a.name == "re" and a.asname is None for n in plain for a in n.names):
        return None
    after = [n for n in plain if n.names[0].name < "re"]
    if after:
        return after[-1].end_lineno or after[-1].lineno
    if plain:
        return plain[0].lineno - 1
    first = next((n for n in tree.body if isinstance(n, ast.ImportFrom | ast.Import)), None)
    return (first.lineno - 1) if first else 0


def map_draft_excludes(source: str, class_name: str, ckpt_expr: str, ckpt_doc: str, prefix: str,
                       own_modules: tuple[str, ...] = ()) -> str | None:  # fmt: skip
    """``source`` with the fix in ``class_name.__init__``: ``ckpt_expr`` is the Python expression of the
    checkpoint's layer prefix in terms of ``config`` (e.g. an f-string of ``config.num_hidden_layers``),
    ``ckpt_doc`` how a comment names it, ``prefix`` the draft's own prefix for that layer, ``own_modules`` the MTP
    layer's own quantized modules, built on the model holding that prefix (``eh_proj``)."""
    try:
        tree = python_ast(source)
    except SyntaxError:
        return None
    found = _init_of(tree, class_name)
    if found is None or HELPER in source:
        return None
    cls, init = found
    lines = source.splitlines(True)
    body = init.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # after the docstring
    if not body:
        return None
    base_init = next((s for s in body if _is_base_init(s)), None)
    anchor = base_init or body[0]
    indent = re.match(r"[ \t]*", lines[anchor.lineno - 1]).group(0)
    comment = "".join(f"{indent}# {ln}\n" for ln in textwrap.wrap(_COMMENT.format(ckpt_doc=ckpt_doc, prefix_doc=prefix),
                                                                  LINE_LENGTH - len(indent) - 2))
    call = _CALL_SOURCE.format(i=indent, comment=comment, name=HELPER, ckpt_expr=ckpt_expr, prefix=json.dumps(prefix),
                               own=python_literal(tuple(own_modules)))
    at = (anchor.end_lineno or anchor.lineno) if base_init else anchor.lineno - 1
    lines[at:at] = call.splitlines(True)
    first = min([cls.lineno] + [d.lineno for d in cls.decorator_list]) - 1
    while first > 0 and lines[first - 1].lstrip().startswith("#"):  # keep comments above the class with it
        first -= 1
    lines[first:first] = _HELPER_SOURCE.splitlines(True)
    at_import = _import_re(lines, tree)
    if at_import is not None:
        lines.insert(at_import, "import re\n")
    out = "".join(lines)
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return out


def draft_class(source: str, prefix: str) -> str | None:
    """The class of ``source`` whose ``hf_to_sglang_mapper`` maps a checkpoint layer to ``prefix`` (the draft
    model that registers the checkpoint's extra layer there), or None."""
    try:
        tree = python_ast(source)
    except SyntaxError:
        return None
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "hf_to_sglang_mapper"
                                                    for t in node.targets):  # fmt: skip
                values = {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
                if prefix in values:
                    return cls.name
    return None


def class_at(source: str, line: int) -> str | None:
    """The class whose body holds ``line`` of ``source`` (the draft class whose code a traceback frame ran), or
    None."""
    try:
        tree = python_ast(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return node.name
    return None


def draft_module_prefix(source: str, class_name: str, engine_top: str, ckpt_top: str) -> tuple[str, str] | None:
    """(old, new) lines of ``class_name.__init__`` in ``source`` that make the draft build its modules under the
    checkpoint's prefix ``ckpt_top`` instead of ``engine_top``: the ``add_prefix("<engine_top>", prefix)`` that
    names the submodule holding its layers. A draft whose modules carry the target's own names (its one layer is
    ``model.layers.0``, like the target's first) can never be told apart by an exclude list; under the
    checkpoint's names, the list's entries for the draft's tree apply as written. None when the constructor has no
    such call, or more than one."""
    try:
        tree = python_ast(source)
    except SyntaxError:
        return None
    found = _init_of(tree, class_name)
    if found is None:
        return None
    _, init = found
    calls = [c for c in ast.walk(init) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "add_prefix"
             and c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value == engine_top]  # fmt: skip
    if len(calls) != 1:
        return None
    lines = source.splitlines(True)
    line = lines[calls[0].lineno - 1]
    literal = re.compile(r"""add_prefix\(\s*(["'])""" + re.escape(engine_top) + r"""\1""")
    if len(literal.findall(line)) != 1:
        return None
    new = literal.sub(lambda m: f"add_prefix({m.group(1)}{ckpt_top}{m.group(1)}", line)
    # the comment goes above the statement that holds the call
    stmt = next(s for s in ast.walk(init) if isinstance(s, ast.stmt) and not isinstance(s, ast.FunctionDef)
                and s.lineno <= calls[0].lineno <= (s.end_lineno or s.lineno))  # fmt: skip
    head = lines[stmt.lineno - 1]
    head_indent = re.match(r"[ \t]*", head).group(0)
    note = (f"# Named as the checkpoint names this module ({ckpt_top}.*), not as the target names its own layers "
            f"({engine_top}.*): quantization exclude entries for the draft then apply as written.")
    comment = "".join(f"{head_indent}# {ln}\n" for ln in textwrap.wrap(note[2:], LINE_LENGTH - len(head_indent) - 2))
    if stmt.lineno == calls[0].lineno:
        return line, comment + new
    block = "".join(lines[stmt.lineno - 1:(stmt.end_lineno or stmt.lineno)])
    return block, comment + block.replace(line, new, 1)
