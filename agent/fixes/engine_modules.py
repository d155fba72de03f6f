"""Which modules an engine's model class builds, and which of them quantized, read from the engine's own source.

An exclude entry matters only for a module the engine would build quantized: a norm is never quantized (it takes no
quantization config), and a name the engine never builds is noise in the list. An engineer answers both by reading
the model class: each ``self.<name> = SomeClass(..., quant_config=..., prefix=...)`` in a constructor builds a child
module under that prefix; the child is quantized when it is given the quantization config and its class is one the
quantization method quantizes (the classes its ``get_quant_method`` tests with ``isinstance``: linear layers, the fused
MoE), or when it is a factory whose returned classes are; any other class given the config is a container, read the
same way. ``ModuleTree`` does that with ``ast`` on the workspace's files, following the imports; nothing here knows a
model, a class or a prefix.

A checkpoint's unfused names (``gate_proj``) reach a fused module (``gate_up_proj``) through the mappings the engine's
loader and quantization read: ``stacked_params_mapping``-style tuples and ``packed_modules_mapping``-style dicts of the
files read. Quark asks the exclude list about a packed module's shard names, so those are the names kept.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tools.parsed import python_ast

Ident = tuple[str, str]  # (python module, top-level name)


@dataclass(frozen=True)
class Found:
    """A module of the engine's tree: ``name`` as the quantization method asks the exclude list about it (a fused
    MoE's own prefix for any expert under it, a packed linear's shard), and whether it is built quantized (None: a
    builder the source does not tell, given the config)."""

    name: str
    quantized: bool | None
    leaf: bool


@dataclass(frozen=True)
class _Child:
    attr: str
    prefix: str  # the child's full prefix
    call: ast.Call
    module: str


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _passes_quant(call: ast.Call) -> bool:
    """The call hands the quantization config on (a ``quant_config=`` keyword not None, or a positional name of it)."""
    for kw in call.keywords:
        if kw.arg == "quant_config":
            return not (isinstance(kw.value, ast.Constant) and kw.value.value is None)
    return any("quant_config" in ast.unparse(a) for a in call.args if isinstance(a, ast.Name | ast.Attribute))


def _walk_lines(tree: ast.AST, lines: list[int]) -> Iterator[ast.AST]:
    """``ast.walk`` (the same nodes in the same order) limited to the nodes whose lines hold one of ``lines``
    (sorted), and their ancestors: what a text search found, without visiting the rest of a large file."""
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        start = getattr(node, "lineno", None)
        if start is not None:
            i = bisect.bisect_left(lines, start)
            if i == len(lines) or lines[i] > (getattr(node, "end_lineno", None) or start):
                continue
        todo.extend(ast.iter_child_nodes(node))
        yield node


class EngineSource:
    """The engine's Python files in the workspace, parsed once, with name lookup through imports."""

    def __init__(self, read: Callable[[str], str | None], python_root: str) -> None:
        self.read, self.root = read, python_root.rstrip("/")
        self._trees: dict[str, ast.Module | None] = {}
        self._texts: dict[str, str] = {}  # module -> its source, for the text checks that spare a walk
        self._imports: dict[str, dict[str, tuple[str | None, str]]] = {}  # module -> name -> (from module, name)
        self._mapping_parts: dict[str, tuple[dict[str, list[str]], dict[str, list[str]]]] = {}

    def path(self, module: str) -> list[str]:
        base = f"{self.root}/{module.replace('.', '/')}"
        return [f"{base}.py", f"{base}/__init__.py"]

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            self._trees[module] = None
            for p in self.path(module):
                text = self.read(p)
                if text is not None:
                    with contextlib.suppress(SyntaxError):  # a file that does not parse tells nothing
                        self._trees[module] = python_ast(text)
                        self._texts[module] = text
                    break
        return self._trees[module]

    def include(self, paths: list[str]) -> None:
        """Parse these files too (a traceback's: their loader mappings say how checkpoint names are fused)."""
        for p in paths:
            if p.startswith(self.root + "/") and p.endswith(".py"):
                module = p[len(self.root) + 1:-3].replace("/", ".").removesuffix(".__init__")
                self.tree(module)

    def parsed_modules(self) -> list[str]:
        """The modules parsed so far, in the order they were."""
        return [m for m, t in self._trees.items() if t is not None]

    # where a 3-tuple may start whose first two items are string literals without a dot, as a
    # stacked_params_mapping entry does (a lookahead: every start, overlapping ones included)
    _SHARD_TUPLE = re.compile(r"""(?=(["'])[^"'.\n]*\1\s*,\s*(["'])[^"'.\n]*\2\s*,)""")

    def shard_mappings(self, module: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """(fused module -> its checkpoint shards, packed ones) that one module's loader mappings hold, worked out
        once per module (:meth:`ModuleTree._mappings` joins them); a file whose text holds neither a shard tuple
        nor ``packed_modules_mapping`` has none and is not walked (most of an engine's files)."""
        memo = self._mapping_parts
        if module in memo:
            return memo[module]
        fused: dict[str, list[str]] = {}
        packed: dict[str, list[str]] = {}
        tree = self.tree(module)
        text = self._texts.get(module, "")
        has_packed = "packed_modules_mapping" in text
        starts = [m.start() for m in self._SHARD_TUPLE.finditer(text)]
        starts += [m.start() for m in re.finditer("packed_modules_mapping", text)] if has_packed else []
        if tree is not None and starts:
            for node in _walk_lines(tree, sorted({text.count("\n", 0, at) + 1 for at in starts})):
                if isinstance(node, ast.Tuple) and len(node.elts) == 3:
                    a, b = _const_str(node.elts[0]), _const_str(node.elts[1])
                    if a and b and "." not in a + b:
                        fused.setdefault(a, []).append(b)
                pairs: list[tuple[ast.AST, ast.AST]] = []
                in_packed = False
                if has_packed and isinstance(node, ast.Assign) and "packed_modules_mapping" in ast.unparse(node.targets[0]):
                    in_packed = True
                    if isinstance(node.value, ast.Dict):
                        pairs = list(zip(node.value.keys, node.value.values, strict=False))
                    elif isinstance(node.targets[0], ast.Subscript):
                        pairs = [(node.targets[0].slice, node.value)]
                elif (has_packed and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr == "update"
                      and "packed_modules_mapping" in ast.unparse(node.func.value) and node.args
                      and isinstance(node.args[0], ast.Dict)):  # fmt: skip
                    in_packed, pairs = True, list(zip(node.args[0].keys, node.args[0].values, strict=False))
                for k, v in pairs:
                    shards = [_const_str(e) for e in v.elts] if isinstance(v, ast.List | ast.Tuple) else []
                    if _const_str(k) and shards and all(shards):
                        fused.setdefault(_const_str(k), []).extend(shards)  # type: ignore[arg-type]
                        if in_packed:
                            packed[_const_str(k)] = shards  # type: ignore[index,assignment]
        memo[module] = (fused, packed)
        return fused, packed

    def _import_table(self, module: str, tree: ast.Module) -> dict[str, tuple[str | None, str]]:
        """Every name the module imports from another (local imports too), first one first, from one walk."""
        if module not in self._imports:
            table: dict[str, tuple[str | None, str]] = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    src = node.module if node.level == 0 else self._relative(module, node)
                    for a in node.names:
                        table.setdefault(a.asname or a.name, (src, a.name))
            self._imports[module] = table
        return self._imports[module]

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef | ast.FunctionDef] | None:
        """Where ``name`` as seen in ``module`` is defined (imports and re-exports followed, local imports too)."""
        tree = self.tree(module)
        if tree is None or depth > 8:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
                return module, node
        imported = self._import_table(module, tree).get(name)
        if imported is None:
            return None
        src, original = imported
        return self.lookup(src, original, depth + 1) if src else None

    @staticmethod
    def _relative(module: str, node: ast.ImportFrom) -> str | None:
        parts = module.split(".")[: -node.level] if node.level else []
        return ".".join(parts + ([node.module] if node.module else [])) or None

    def ident(self, module: str, node: ast.expr) -> tuple[str, ast.ClassDef | ast.FunctionDef] | None:
        if isinstance(node, ast.Name):
            return self.lookup(module, node.id)
        return None

    def subclass_of(self, module: str, cls: ast.ClassDef, targets: set[Ident], depth: int = 0) -> bool:
        if (module, cls.name) in targets:
            return True
        if depth > 12:
            return False
        for b in cls.bases:
            found = self.ident(module, b)
            if found and isinstance(found[1], ast.ClassDef) and self.subclass_of(*found, targets, depth + 1):
                return True
        return False


class ModuleTree:
    """The module tree a model class builds, from its constructor and its children's, walked by prefix."""

    def __init__(self, source: EngineSource, module: str, class_name: str, quant_method: str | None) -> None:
        self.src, self.module, self.class_name = source, module, class_name
        self.quantizing = self._quantizing(quant_method)
        self._children: dict[tuple[str, str, str], list[_Child]] = {}

    # --- what the quantization method quantizes ------------------------------------------------------------

    def _quantizing(self, quant_method: str | None) -> set[Ident]:
        """The classes the checkpoint's quantization method tests in its ``get_quant_method`` (``isinstance``),
        found through the registry of methods (a dict literal keyed by method name, e.g. ``"quark": QuarkConfig``)."""
        registry = "sglang.srt.layers.quantization"
        tree = self.src.tree(registry)
        config_cls = None
        for node in ast.walk(tree) if tree and quant_method else []:
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values, strict=False):
                    if _const_str(k) == quant_method and isinstance(v, ast.Name):
                        config_cls = self.src.lookup(registry, v.id)
                        break
            if config_cls:
                break
        out: set[Ident] = set()
        if not config_cls or not isinstance(config_cls[1], ast.ClassDef):
            return out
        mod, cls = config_cls
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "get_quant_method"):
            for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "isinstance"):
                for target in call.args[1:2]:
                    for name in (target.elts if isinstance(target, ast.Tuple) else [target]):
                        found = self.src.ident(mod, name)
                        if found and isinstance(found[1], ast.ClassDef):
                            out.add((found[0], found[1].name))
        return out

    # --- a class's children --------------------------------------------------------------------------------

    def _prefix(self, call: ast.Call, attr: str, parent: str) -> str:
        """The child's full prefix from the call's ``prefix=`` argument (``add_prefix("x", prefix)``,
        ``f"{prefix}.x"``, a literal), else its attribute name under the parent's."""
        value = next((kw.value for kw in call.keywords if kw.arg == "prefix"), None)
        join = (lambda rel: f"{parent}.{rel}" if parent else rel)  # noqa: E731
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "add_prefix" and value.args:
            rel = _const_str(value.args[0])
            if rel is not None:
                return join(rel)
        if isinstance(value, ast.JoinedStr) and len(value.values) == 2:
            rel = _const_str(value.values[1])
            if isinstance(value.values[0], ast.FormattedValue) and rel and rel.startswith("."):
                return join(rel[1:])
        if _const_str(value) is not None:
            return _const_str(value)
        return join(attr)

    def children(self, module: str, cls: ast.ClassDef, parent: str, depth: int = 0) -> list[_Child]:
        key = (module, cls.name, parent)
        if key in self._children:
            return self._children[key]
        self._children[key] = []
        out: list[_Child] = []
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        calls_base = init is None or any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "__init__"
            and isinstance(c.func.value, ast.Call) and getattr(c.func.value.func, "id", "") == "super"
            for c in ast.walk(init))  # fmt: skip
        if calls_base and depth < 8:
            for b in cls.bases:
                found = self.src.ident(module, b)
                if found and isinstance(found[1], ast.ClassDef):
                    out += self.children(*found, parent, depth + 1)
        for node in ast.walk(init) if init else []:
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
                continue
            for t in node.targets:
                attr = ast.unparse(t)
                if attr.startswith("self."):
                    attr = attr[5:]
                    out.append(_Child(attr, self._prefix(node.value, attr, parent), node.value, module))
        self._children[key] = out
        return out

    def _kind(self, child: _Child) -> tuple[str, tuple[str, ast.ClassDef] | None]:
        """``quantized``, ``plain``, ``container`` (with its class) or ``unknown``."""
        quant = _passes_quant(child.call)
        func = child.call.func
        if isinstance(func, ast.Call):  # a factory's class: get_moe_impl_class(quant_config)(...)
            found = self.src.ident(child.module, func.func)
            if found and isinstance(found[1], ast.FunctionDef):
                returned = [self.src.ident(found[0], r.value) for r in ast.walk(found[1])
                            if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)]  # fmt: skip
                if any(r and isinstance(r[1], ast.ClassDef) and self.src.subclass_of(*r, self.quantizing)
                       for r in returned):  # fmt: skip
                    return ("quantized" if quant else "plain"), None
            return ("unknown" if quant else "plain"), None
        found = self.src.ident(child.module, func)
        if found and isinstance(found[1], ast.ClassDef):
            if self.src.subclass_of(*found, self.quantizing):
                return ("quantized" if quant else "plain"), None
            return "container", found  # type: ignore[return-value]
        if isinstance(func, ast.Attribute) or not quant:  # nn.Linear, nn.Parameter, a torch builder: never quantized
            return "plain", None
        return "unknown", None

    # --- fused modules -------------------------------------------------------------------------------------

    def _mappings(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """(fused module -> its checkpoint shards, from every mapping the files read so far hold; the packed
        ones, from ``packed_modules_mapping`` dicts, which the quantization asks about by shard)."""
        fused: dict[str, list[str]] = {}
        packed: dict[str, list[str]] = {}
        for module in self.src.parsed_modules():
            part_fused, part_packed = self.src.shard_mappings(module)
            for k, v in part_fused.items():
                fused.setdefault(k, []).extend(v)
            packed.update(part_packed)
        return fused, packed

    # --- lookups -------------------------------------------------------------------------------------------

    def root(self) -> tuple[str, ast.ClassDef] | None:
        found = self.src.lookup(self.module, self.class_name)
        return found if found and isinstance(found[1], ast.ClassDef) else None  # type: ignore[return-value]

    def find(self, name: str) -> Found | None:
        """The module ``name`` falls in, as the engine builds it, or None when the engine builds no such module."""
        node = self.root()
        parent = ""
        for _ in range(32):
            if node is None:
                return None
            kids = sorted(self.children(*node, parent), key=lambda c: -len(c.prefix))
            hit = next((c for c in kids if name == c.prefix or name.startswith(c.prefix + ".")), None)
            if hit is None:
                return self._shard(kids, parent, name)
            kind, cls = self._kind(hit)
            if kind == "container" and name != hit.prefix:
                node, parent = cls, hit.prefix
                continue
            if kind == "container":  # a module of its own (a norm, an embedding): quantized only if it holds one
                return Found(hit.prefix, self._holds_quantized(cls, hit.prefix), leaf=not self._has_modules(cls, hit.prefix))
            return Found(hit.prefix, {"quantized": True, "plain": False}.get(kind), leaf=True)
        return None

    def _holds_quantized(self, node: tuple[str, ast.ClassDef] | None, prefix: str, depth: int = 0) -> bool | None:
        if node is None or depth > 12:
            return None
        seen: list[bool | None] = []
        for c in self.children(*node, prefix):
            kind, cls = self._kind(c)
            seen.append({"quantized": True, "plain": False, "unknown": None}.get(kind)
                        if kind != "container" else self._holds_quantized(cls, c.prefix, depth + 1))  # fmt: skip
        return True if True in seen else (None if None in seen else False)

    def _has_modules(self, node: tuple[str, ast.ClassDef] | None, prefix: str) -> bool:
        return node is not None and any(self._kind(c)[0] != "plain" or isinstance(c.call.func, ast.Name)
                                        for c in self.children(*node, prefix))  # fmt: skip

    def _shard(self, kids: list[_Child], parent: str, name: str) -> Found | None:
        """A checkpoint shard of one of the node's fused children (``gate_proj`` of ``gate_up_proj``)."""
        rest = name[len(parent) + 1:] if parent else name
        first = rest.split(".")[0]
        fused, packed = self._mappings()
        for c in kids:
            last = c.prefix.rpartition(".")[2]
            if first in fused.get(last, []) and c.prefix.rpartition(".")[0] == parent:
                kind, _ = self._kind(c)
                if kind == "container":
                    continue
                shard = f"{parent}.{first}" if parent else first
                asked = shard if first in packed.get(last, []) else c.prefix
                return Found(asked, {"quantized": True, "plain": False}.get(kind), leaf=True)
        return None

    def quantized_children(self, prefix: str) -> list[Found]:
        """The children of the module at ``prefix`` that are, or hold, quantized modules: a quantized leaf, a
        container given the quantization config (its attribute order)."""
        node = self.root() if not prefix else None
        parent = ""
        if prefix:
            found = self.find(prefix)
            if found is None or found.leaf:
                return []
            node, parent = self._container(prefix), prefix
        out = []
        for c in self.children(*node, parent) if node else []:
            if c.prefix.rpartition(".")[0] != parent and parent:
                continue
            kind, _ = self._kind(c)
            if kind == "quantized":
                out.append(Found(c.prefix, True, leaf=True))
            elif kind in ("container", "unknown") and _passes_quant(c.call):
                out.append(Found(c.prefix, None if kind == "unknown" else True, leaf=False))
        return list({f.name: f for f in out}.values())

    def _container(self, prefix: str) -> tuple[str, ast.ClassDef] | None:
        node, parent = self.root(), ""
        while node is not None and parent != prefix:
            kids = sorted(self.children(*node, parent), key=lambda c: -len(c.prefix))
            hit = next((c for c in kids if prefix == c.prefix or prefix.startswith(c.prefix + ".")), None)
            if hit is None:
                return None
            kind, cls = self._kind(hit)
            if kind != "container":
                return None
            node, parent = cls, hit.prefix
        return node
