"""The checkpoint a model class loads, found from the class's own loader: ``stored_tensors(built, executor)``.

The release's ``load_weights`` maps each checkpoint tensor to an engine parameter: stacked projections (the
``stacked_params_mapping`` a loader builds: ``q_proj``/``k_proj``/``v_proj`` into ``qkv_proj``), routed experts
(``make_expert_params_mapping``: ``experts.<e>.gate_proj`` into ``experts.w13_weight``), the class's
``hf_to_sglang_mapper`` and whatever renames its code does (``name.replace("mtp.", "model.")``). This module runs
that mapping backwards, without a rule per family:

1. **what the loader knows**: ``load_weights`` is run on no tensors with its frames watched; the tables it builds
   (tuples of names, shard and expert ids) and the strings it holds are kept; the renames its source spells
   (``.replace(A, B)`` with literal strings) and the class's name mapper are read;
2. **candidates**: for each engine parameter (one per layer pattern: the layers' numbers stand for each other),
   its name, with a table's entry run backwards where the parameter is stacked or holds experts, then each
   rename undone, in fewer steps first;
3. **probes**: each candidate is handed to the real ``load_weights``, whose weight loaders only record which
   parameter, shard and expert it reached; the first candidate that reaches the parameter's shard is its name;
4. **shapes**: a shard's rows are the layer's ``output_sizes`` share (scaled as the parameter is: block scales),
   a per-tensor scale is a scalar, an expert is one slice of the fused parameter, an embedding has the vocabulary
   before the release padded it; dtypes are the parameter's, the checkpoint's dtype for unquantized weights.

With a published index (``index_names``) its names are probed instead (each pattern once), so the index decides
the names and the loader only the shapes; a name that reaches nothing is one the release skips.

The result is checked by the caller by loading it through the real loaders (``engine.loading.loader``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import logging
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAFETENSORS = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64", "uint8": "U8",
               "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "float8_e4m3fn": "F8_E4M3",
               "float8_e4m3fnuz": "F8_E4M3", "float8_e5m2": "F8_E5M2", "bool": "BOOL"}  # fmt: skip
FLOATING = ("BF16", "F16", "F32")
_DIGITS = re.compile(r"(?<=\.)\d+(?=\.|$)")
_NAME_LIKE = re.compile(r"^[A-Za-z_][\w]*(\.[\w]+)*\.?$|^\.[\w]+(\.[\w]+)*\.?$")
MAX_DEPTH = 2  # renames undone, at most, on top of a table's entry


class StoredError(ValueError):
    """The loader does not reach some engine parameter from any candidate name (one line)."""


@dataclass(frozen=True)
class Stored:
    """One checkpoint tensor: its name, safetensors dtype and shape, and the engine parameter it loads into."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    param: str
    shard: Any = None  # the parameter's shard and expert it fills (None: the whole parameter)
    expert: Any = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _ITEMSIZE.get(self.dtype, 2)


_ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "U8": 1, "I8": 1, "I16": 2, "I32": 4, "I64": 8, "F8_E4M3": 1,
             "F8_E5M2": 1, "BOOL": 1}  # fmt: skip


def pattern(name: str) -> str:
    """``name`` with its layer and expert numbers as ``#``: the names one rule maps alike."""
    return _DIGITS.sub("#", name)


# --- 1. what the loader knows -------------------------------------------------------------------------------


@dataclass
class Knowledge:
    stacked: list[tuple[str, str, Any]]  # (param part, checkpoint part, shard id)
    experts: list[tuple[str, str, int, Any]]  # (param part, checkpoint part, expert id, shard id)
    renames: list[tuple[str, str]]  # (what the loader replaces, by what): undone as (by what -> what), longest first
    prefixes: list[str]  # name-like strings the loader holds (a draft layer's checkpoint prefix)
    packed: dict[str, list[str]]  # the class's packed_modules_mapping: an engine module -> the checkpoint's parts


def _model_files(model: Any) -> list[Path]:
    files: list[Path] = []
    for cls in type(model).__mro__:
        try:
            path = Path(inspect.getfile(cls))
        except (TypeError, OSError):
            continue
        if "/sglang/srt/models/" in str(path) and path not in files:
            files.append(path)
    return files


def _strings(value: Any, out: set[str], depth: int = 0) -> None:
    if depth > 3:
        return
    if isinstance(value, str):
        if 0 < len(value) < 120 and _NAME_LIKE.match(value):
            out.add(value)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in list(value)[:200]:
            _strings(v, out, depth + 1)
    elif isinstance(value, dict):
        if len(value) > 64:
            return  # a table of the model's own parameters (params_dict), not a name the loader maps to
        for k, v in value.items():
            _strings(k, out, depth + 1)
            _strings(v, out, depth + 1)
    elif hasattr(value, "__dataclass_fields__"):
        for f in value.__dataclass_fields__:
            _strings(getattr(value, f, None), out, depth + 1)


def _tables(value: Any, stacked: list, experts: list) -> None:
    if not isinstance(value, list | tuple) or not value:
        return
    rows = [r for r in value if isinstance(r, tuple)]
    if len(rows) != len(value):
        return
    if all(len(r) == 3 and isinstance(r[0], str) and isinstance(r[1], str) for r in rows):
        stacked.extend(r for r in rows if r not in stacked)
    elif all(len(r) == 4 and isinstance(r[0], str) and isinstance(r[1], str) and isinstance(r[2], int) for r in rows):
        experts.extend(r for r in rows if r not in experts)


def _literal_renames(files: Iterable[Path]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for path in files:
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "replace"
                    and len(node.args) >= 2):  # fmt: skip
                a, b = (_spelled(x) for x in node.args[:2])
                if a is not None and b is not None and a != b and (a, b) not in out and "#" not in a:
                    out.append((a, b))
    return out


def _spelled(node: ast.expr) -> str | None:
    """A string argument as written: a literal, or an f-string whose values stand as ``#`` (an expert's number)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else "#" for v in node.values]
        return "".join(str(p) for p in parts)
    return None


def learn(model: Any) -> Knowledge:
    """Run ``model.load_weights`` on no tensors, watching its frames (and those it calls in model files)."""
    files = {str(p) for p in _model_files(model)}
    models_dir = str(next(iter(_model_files(model)), Path("."))).rsplit("/models/", 1)[0] + "/models/"
    stacked: list[tuple[str, str, Any]] = []
    experts: list[tuple[str, str, int, Any]] = []
    strings: set[str] = set()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        path = frame.f_code.co_filename
        if path not in files and not path.startswith(models_dir):  # another model's loader it delegates to
            return None
        files.add(path)
        if event == "return":
            for v in frame.f_locals.values():
                _tables(v, stacked, experts)
                _strings(v, strings)
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        model.load_weights(iter(()))
    except Exception:
        pass  # a post-load step that needs weights it did not get: the tables were built before it
    finally:
        sys.settrace(previous)
    renames = _literal_renames(Path(f) for f in files)
    mapper = getattr(model, "hf_to_sglang_mapper", None)
    for table in ("orig_to_new_substr", "orig_to_new_prefix", "orig_to_new_suffix"):
        for old, new in (getattr(mapper, table, None) or {}).items():
            if isinstance(old, str) and isinstance(new, str) and (old, new) not in renames:
                renames.append((old, new))
            strings.update(s for s in (old, new) if isinstance(s, str))
    for old, new in renames:
        strings.update(s for s in (old, new) if s)
    packed = getattr(model, "packed_modules_mapping", None)
    packed = {str(a): [str(x) for x in b] for a, b in packed.items() if isinstance(b, list | tuple)} if isinstance(
        packed, dict) else {}
    renames.sort(key=lambda r: -len(r[1]))  # undone the longest match first
    return Knowledge(stacked, experts, renames, sorted(strings), packed)


# --- 2. candidates ------------------------------------------------------------------------------------------

Op = tuple[Any, ...]  # one rename undone: ("swap", new, old) | ("insert", old, at) | ("prefix", parts dropped, prefix)
MAX_CANDIDATES = 600


@functools.lru_cache(maxsize=4096)
def _piece(part: str) -> re.Pattern[str]:
    return re.compile("".join(r"\d+" if ch == "#" else re.escape(ch) for ch in part))


def _token(name: str, part: str, loose: bool = False) -> tuple[int, int]:
    """Where ``part`` stands in ``name`` as whole name pieces (not ``w13_weight`` inside ``w13_weight_scale``), a
    ``#`` in it standing for a number: (start, end), or (-1, -1)."""
    for m in _piece(part).finditer(name):
        at, end = m.span()
        before_ok = at == 0 or name[at - 1] == "." or part[0] in "._"
        # a dotted fragment (``model.pre_fc``) may end inside a name piece; a bare piece (``w13_weight``) may not
        after_ok = end == len(name) or name[end] == "." or part[-1] in "._" or "." in part.strip(".") or loose
        if before_ok and after_ok:
            return at, end
    return -1, -1


def _apply(name: str, op: Op) -> str | None:
    kind = op[0]
    if kind == "swap":
        _, new, old = op
        at, end = _token(name, new, loose="." in old.strip("."))
        return name[:at] + old + name[end:] if at >= 0 else None
    if kind == "insert":
        _, old, at = op
        parts = name.split(".")
        if not 0 <= at < len(parts):
            return None
        return ".".join([*parts[:at], old.strip("."), *parts[at:]])
    _, dropped, prefix = op
    parts = name.split(".")
    return prefix + "." + ".".join(parts[dropped:]) if dropped < len(parts) else None


def replay(name: str, ops: tuple[Op, ...]) -> str:
    """``name`` through the undone renames that made a representative's checkpoint name (``candidates``)."""
    for op in ops:
        nxt = _apply(name, op)
        if nxt is not None:
            name = nxt
    return name


def _ops(name: str, k: Knowledge, prefixes: bool) -> Iterator[Op]:
    for old, new in k.renames:  # the longest match first
        if new and _token(name, new, loose="." in old.strip("."))[0] >= 0:
            yield ("swap", new, old)
        elif not new and old.strip("."):  # the loader deletes ``old``: it stood at some boundary of the name
            for at in range(0, name.count(".") + 1):
                yield ("insert", old, at)
    if prefixes:  # a prefix swapped for one the loader holds (a draft layer stored under the target's numbering)
        for dropped in range(1, min(name.count(".") + 1, 4)):
            for prefix in k.prefixes:
                if "." in prefix and not prefix.startswith(".") and not prefix.endswith("."):
                    yield ("prefix", dropped, prefix)


def candidates(name: str, k: Knowledge) -> Iterator[tuple[str, tuple[Op, ...]]]:
    """``name`` and the names that become it through the loader's renames (at most ``MAX_DEPTH``, a prefix swap
    last), nearer first, each with the renames undone."""
    seen = {name}
    frontier: list[tuple[str, tuple[Op, ...]]] = [(name, ())]
    yield name, ()
    count = 1
    for depth in range(MAX_DEPTH + 1):
        nxt: list[tuple[str, tuple[Op, ...]]] = []
        for n, ops in frontier:
            for op in _ops(n, k, prefixes=True):
                if op[0] == "prefix" and depth == MAX_DEPTH:
                    continue
                c = _apply(n, op)
                if c is None or c in seen or ".." in c or c.startswith("."):
                    continue
                seen.add(c)
                count += 1
                if count > MAX_CANDIDATES:
                    return
                if op[0] != "prefix":
                    nxt.append((c, (*ops, op)))
                yield c, (*ops, op)
        frontier = nxt


@dataclass(frozen=True)
class Slot:
    """What one checkpoint tensor of a parameter fills: the parameter, its shard, its expert."""

    param: str
    shard: Any = None
    expert: Any = None
    base: str = ""  # the checkpoint name as the loader's table writes it (before renames are undone)


def slot_options(param_name: str, param: Any, owner: Any, k: Knowledge, fused_moe: type | None) -> list[list[Slot]]:
    """The ways the loader's own tables fill a parameter from checkpoint tensors, each a list of slots, the
    table's best match first: routed experts one tensor per expert, or one tensor for them all (a second table
    of the loader's for fused checkpoints); stacked shards; a packed module's parts; else the parameter itself."""
    options: list[list[Slot]] = []
    if fused_moe is not None and isinstance(owner, fused_moe) and k.experts:
        hits = [e for e in k.experts if e[0] and e[0] in param_name]
        for length in sorted({len(e[0]) for e in hits}, reverse=True):
            chosen = [e for e in hits if len(e[0]) == length]
            if len({e[2] for e in chosen}) == 1 and not any(_DIGITS.search(e[1]) for e in chosen):
                # one checkpoint tensor for every expert (fused experts: the loader walks them itself)
                part, ckpt = chosen[0][0], chosen[0][1]
                options.append([Slot(param_name, None, None, param_name.replace(part, ckpt, 1))])
            else:
                options.append([Slot(param_name, shard, expert, param_name.replace(part, ckpt, 1))
                                for part, ckpt, expert, shard in chosen])  # fmt: skip
        if options:
            return options
    hits = [s for s in k.stacked if s[0] and _contains_part(param_name, s[0])]
    if hits:
        longest = max(len(s[0]) for s in hits)
        return [[Slot(param_name, shard, None, param_name.replace(part, ckpt, 1))
                 for part, ckpt, shard in hits if len(part) == longest]]  # fmt: skip
    module = param_name.rsplit(".", 2)[-2] if param_name.count(".") >= 1 else ""
    parts = k.packed.get(module)
    if parts and len(parts) > 1:  # one engine module the loader fills from several checkpoint modules at once
        return [[Slot(param_name, ("part", i, len(parts)), None, param_name.replace(f".{module}.", f".{part}.", 1))
                 for i, part in enumerate(parts)]]  # fmt: skip
    return [[Slot(param_name, None, None, param_name)]]


def slots(param_name: str, param: Any, owner: Any, k: Knowledge, fused_moe: type | None) -> list[Slot]:
    """The loader's best-matching way to fill the parameter (``slot_options``' first)."""
    return slot_options(param_name, param, owner, k, fused_moe)[0]


def is_part(slot: Slot) -> bool:
    return isinstance(slot.shard, tuple) and slot.shard[:1] == ("part",)


def _contains_part(name: str, part: str) -> bool:
    i = name.find(part)
    if i < 0:
        return False
    end = i + len(part)
    return end == len(name) or name[end] in "._" or part.endswith((".", "_"))


# --- 3. probes ----------------------------------------------------------------------------------------------


class Prober:
    """The real ``load_weights`` with every weight loader (and ``copy_`` into a parameter) only recording what
    reached it: ``probe(names)`` hands it names (name, shape, safetensors dtype) and returns what they reached
    (parameter, shard, expert). A loader that raises for a name it does not know records nothing. Used as a
    context: the recorders are put in place once, then taken away."""

    def __init__(self, model: Any, params: dict[str, Any], fused_moe: type | None = None) -> None:
        self.model, self.params, self.fused_moe = model, params, fused_moe
        self.tables: dict[str, Any] = {}  # the expert table makers the probes' loaders call, as they were
        self.frozen = contextlib.ExitStack()
        self.hits: list[tuple[str, Any, Any]] = []
        self.loaded_shapes: dict[str, tuple[int, ...]] = {}  # what a parameter's loader was first handed, per probe
        self.saved: dict[int, tuple[str, Any]] = {}
        self.cache: dict[tuple[Any, ...], list[tuple[str, Any, Any]]] = {}

    @staticmethod
    def _slot(p: Any) -> str:
        """Where the parameter keeps its loader: SGLang's parameter classes behind a ``weight_loader`` property."""
        return "_weight_loader" if isinstance(getattr(type(p), "weight_loader", None), property) else "weight_loader"

    def __enter__(self) -> Prober:
        from ..engine.loading import fake_torch
        from ..engine.loading.loader import _mark_views

        logging.disable(logging.WARNING)  # the loader's own complaints about the names it is probed with
        _mark_views()  # a view of a parameter knows the parameter it views
        signatures: dict[Any, Any] = {}
        for name, p in self.params.items():
            slot = self._slot(p)
            self.saved[id(p)] = (slot, p.__dict__.get(slot, _MISSING))
            p.__dict__.setdefault("_root", p)
            original = getattr(p, "weight_loader", None)
            key = getattr(original, "__func__", original)
            if key not in signatures:
                try:
                    signatures[key] = inspect.signature(original) if callable(original) else None
                except (TypeError, ValueError):
                    signatures[key] = None
            p.__dict__[slot] = self._loader(name, signatures[key])
        roots = {id(p): n for n, p in self.params.items()}
        self.original_copy = fake_torch.Tensor.copy_
        hits = self.hits

        def copy_(tensor: Any, other: Any, non_blocking: bool = False) -> Any:
            # a loader that copies into a parameter itself (gpt-oss's sinks), not through its weight loader
            target = roots.get(id(tensor.__dict__.get("_root", tensor)))
            if target is not None:
                hits.append((target, None, None))
            return tensor

        fake_torch.Tensor.copy_ = copy_  # type: ignore[method-assign]
        self.frozen.enter_context(fake_torch.tree_frozen())  # the loader's parameter dict, once per probing
        self._remember_expert_tables()
        return self

    def _remember_expert_tables(self) -> None:
        """The expert layer's table makers (``make_expert_params_mapping``), which a loader calls on each of its
        thousands of probes with the same arguments: each table made once, a copy handed out each time."""
        for attr, made in vars(self.fused_moe or object).items():
            if not (attr.startswith("make_expert_params_mapping") and isinstance(made, classmethod)):
                continue
            self.tables[attr] = made
            bound, memo = made.__get__(None, self.fused_moe), {}

            def remembered(*args: Any, _bound: Any = bound, _memo: dict = memo, **kwargs: Any) -> Any:
                key = (args, tuple(sorted(kwargs.items())))
                try:
                    if key not in _memo:
                        _memo[key] = _bound(*args, **kwargs)
                except TypeError:  # an argument that cannot be a key
                    return _bound(*args, **kwargs)
                return list(_memo[key])

            setattr(self.fused_moe, attr, staticmethod(remembered))

    def __exit__(self, *exc: Any) -> None:
        from ..engine.loading import fake_torch

        fake_torch.Tensor.copy_ = self.original_copy  # type: ignore[method-assign]
        self.frozen.close()
        for attr, made in self.tables.items():
            setattr(self.fused_moe, attr, made)
        logging.disable(logging.NOTSET)
        for p in self.params.values():
            slot, old = self.saved.get(id(p), ("weight_loader", _MISSING))
            if old is _MISSING:
                p.__dict__.pop(slot, None)
            else:
                p.__dict__[slot] = old

    def _loader(self, name: str, signature: Any) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            shard = expert = None
            if signature is not None:
                # a call the real loader would refuse (FusedMoE's weight_loader without its expert): no hit, the
                # same TypeError
                bound = signature.bind(*args, **kwargs).arguments
                shard = next((bound[k] for k in ("shard_id", "loaded_shard_id") if k in bound), None)
                expert = bound.get("expert_id")
            elif len(args) > 2:
                shard = args[2]
            loaded = args[1] if len(args) > 1 else kwargs.get("loaded_weight")
            self.loaded_shapes.setdefault(name, tuple(int(d) for d in getattr(loaded, "shape", ())))
            self.hits.append((name, shard, expert))
            return None

        return record

    def probe(self, names: list[tuple[str, tuple[int, ...], str]]) -> list[tuple[str, Any, Any]]:
        from ..engine.loading import fake_torch

        key = tuple(names)
        if key in self.cache:
            return self.cache[key]
        del self.hits[:]
        self.loaded_shapes.clear()

        def tensors() -> Iterator[tuple[str, Any]]:
            for name, shape, dtype in names:
                yield name, fake_torch.Tensor(list(shape), fake_torch.DTYPES[fake_torch.SAFETENSORS.get(dtype, "bfloat16")],
                                              fake_torch.HOST)  # fmt: skip

        with contextlib.suppress(Exception):
            self.model.load_weights(tensors())
        self.cache[key] = list(self.hits)
        return self.cache[key]


_MISSING = object()


# --- 4. shapes ----------------------------------------------------------------------------------------------


def _shard_indices(shard: Any) -> list[int] | None:
    """The output blocks a shard id names: an index, q/k/v, or several at once (``(0, 1, 2)``: q, k and v
    stored as one ``in_proj_qkv``)."""
    if isinstance(shard, bool):
        return None
    if isinstance(shard, int):
        return [shard]
    if isinstance(shard, str) and shard in ("q", "k", "v"):
        return ["qkv".index(shard)]
    if isinstance(shard, tuple) and shard and all(isinstance(x, int) for x in shard):
        return list(shard)
    return None


Splits = Callable[[Any, Any, int], list[int] | None]  # (owner, parameter, parts) -> each part's output rows


def _share(sizes: list[int], i: int, rows: int) -> int:
    """Part ``i``'s rows of a parameter of ``rows`` rows over parts of ``sizes`` output rows: the part itself, or,
    for a parameter with one row per block of outputs (a block scale), the part's blocks."""
    total = sum(sizes)
    if rows == total:
        return sizes[i]
    block = 1
    while block < total and math.ceil(total / block) != rows:
        block *= 2
    return math.ceil(sizes[i] / block) if math.ceil(total / block) == rows else math.ceil(sizes[i] * rows / total)


def shape_of(slot: Slot, param: Any, owner: Any, fused_moe: type | None, splits: Splits | None = None,
             shards: int = 0) -> tuple[int, ...]:
    """The checkpoint tensor's shape for ``slot`` (the parameter's, or one shard's or one expert's share), of a
    parameter the loader fills from ``shards`` shards."""
    shape = [int(d) for d in param.shape]
    kind = type(param).__name__
    if is_part(slot):
        _, i, n = slot.shard
        if kind == "PerTensorScaleParameter" or not shape:
            return tuple(shape)
        rows = shape[0]
        sizes = splits(owner, param, n) if splits is not None else None
        out_size = int(owner.__dict__.get("output_size") or rows) if owner is not None else rows
        if not sizes or sum(sizes) != out_size:
            sizes = [out_size // n + (1 if j < out_size % n else 0) for j in range(n)]
        shape[0] = _share(sizes, i, rows)
        return tuple(shape)
    if slot.expert is not None and fused_moe is not None and isinstance(owner, fused_moe):
        one = shape[1:]
        if slot.shard in ("w1", "w3") and one:  # gate and up are stacked along the output rows
            one[0] = math.ceil(one[0] / 2) if len(one) > 1 else max(one[0] // 2, 1)
        return tuple(one)
    if slot.shard is not None:
        if kind == "PerTensorScaleParameter":
            return ()
        # the shards' rows: the layer's output sizes, or its partition sizes (the same at TP 1, where the twin
        # builds it: a merged column-and-repeated linear keeps only those)
        sizes = [int(s) for s in (owner.__dict__.get("output_sizes") or owner.__dict__.get("output_partition_sizes")
                                  or [])]  # fmt: skip
        blocks = _shard_indices(slot.shard)
        if sizes and blocks and all(i < len(sizes) for i in blocks):
            dim = param.__dict__.get("_output_dim", param.__dict__.get("output_dim", 0))
            dim = dim if isinstance(dim, int) and 0 <= dim < len(shape) else 0
            shape[dim] = sum(_share(sizes, i, shape[dim]) for i in blocks)
        elif not sizes and isinstance(slot.shard, int) and len(shape) > 1 and shape[0] == shards:
            return tuple(shape[1:])  # a batched linear: one leading entry per shard, each a whole matrix
        return tuple(shape)
    org = owner.__dict__.get("org_vocab_size") if owner is not None else None
    if isinstance(org, int) and shape and shape[0] > org:
        shape[0] = org  # the release pads the vocabulary; the checkpoint has the config's
    return tuple(shape)


def dtype_of(param: Any, checkpoint_dtype: str) -> str:
    name = str(param.dtype).replace("torch.", "")
    d = SAFETENSORS.get(name, "BF16")
    return checkpoint_dtype if d in FLOATING and d != "F32" else d


# --- the whole checkpoint -----------------------------------------------------------------------------------


def _owners(model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mname, module in model.named_modules():
        for pname, _ in module.named_parameters(recurse=False):
            out[f"{mname}.{pname}" if mname else pname] = module
    return out


def _shared_from_target(name: str, owner: Any) -> bool:
    """A draft's embedding or LM head, which the draft worker may take from the target (``set_embed_and_head``)."""
    return "embed" in name or name.startswith("lm_head") or type(owner).__name__ in ("ParallelLMHead", "VocabParallelEmbedding")


@dataclass(frozen=True)
class Evidence:
    """A checkpoint's tensor names (a published index, or a listing with dtypes and shapes): how the vendor spells
    them. ``complete``: the model's own whole list (its names are the checkpoint's, those the release does not load
    included); else another checkpoint's (a sibling's, a partial listing), used for the spelling only."""

    names: dict[str, tuple[str | None, tuple[int, ...] | None]]  # name -> (dtype, shape), each None when not listed
    complete: bool = True

    @property
    def patterns(self) -> dict[str, tuple[str | None, tuple[int, ...] | None]]:
        out: dict[str, tuple[str | None, tuple[int, ...] | None]] = {}
        for n, v in self.names.items():
            out.setdefault(pattern(n), v)
        return out


def stored_tensors(model: Any, fused_moe: type | None, *, checkpoint_dtype: str = "BF16",
                   evidence: Evidence | None = None, draft: bool = False,
                   splits: Splits | None = None, avoid: frozenset[str] = frozenset()) -> list[Stored]:  # fmt: skip
    """Every checkpoint tensor ``model``'s loader fills its parameters from (``draft``: a draft model, whose
    embedding and head may be the target's), spelled as ``evidence`` spells them where the loader accepts several
    spellings. Raises ``StoredError`` naming the first parameter no candidate reaches."""
    # a parameter the release marks optional in a checkpoint (a KV cache method's k_scale) is not stored
    params = {n: p for n, p in model.named_parameters() if not p.__dict__.get("_skip_weight_check")}
    owners = _owners(model)
    k = learn(model)
    known = evidence.patterns if evidence is not None else {}
    by_pattern: dict[str, list[str]] = {}
    for name in params:
        by_pattern.setdefault(pattern(name), []).append(name)
    out: list[Stored] = []
    with Prober(model, params, fused_moe) as prober:
        _store(out, by_pattern, prober, k, params, owners, fused_moe, checkpoint_dtype, splits, known, evidence,
               draft, model, avoid)  # fmt: skip
    seen: set[str] = set()
    unique = []
    for t in out:
        if t.name not in seen:
            seen.add(t.name)
            unique.append(t)
    return unique


def _store(out: list[Stored], by_pattern: dict[str, list[str]], prober: Prober, k: Knowledge, params: dict[str, Any],
           owners: dict[str, Any], fused_moe: Any, checkpoint_dtype: str, splits: Splits | None, known: dict[str, Any],
           evidence: Evidence | None, draft: bool, model: Any, avoid: frozenset[str]) -> None:  # fmt: skip
    decided: dict[str, str] = {}  # module pattern -> how its weight is stored: "whole" or "table" (split)
    preferred: set[Op] = set()  # the renames listed spellings need: first the listed ones are found everywhere
    if known:
        for members in by_pattern.values():
            rep = members[0]
            first = _Search(prober, k, params, rep, params[rep], owners.get(rep), fused_moe,
                            dtype_of(params[rep], checkpoint_dtype), splits, known, avoid)  # fmt: skip
            first.preferred, first.listed_only = preferred, True
            for sl in slots(rep, params[rep], owners.get(rep), k, fused_moe)[:1]:
                first._first([sl])
    picks: list[tuple[Any, ...]] = []  # (members, rep, param, owner, dtype, search, tables, chosen) per pattern
    for members in by_pattern.values():
        rep = members[0]
        param, owner = params[rep], owners.get(rep)
        dtype = dtype_of(param, checkpoint_dtype)
        search = _Search(prober, k, params, rep, param, owner, fused_moe, dtype, splits, known,
                         frozenset() if _shared_from_target(rep, owner) else avoid)  # fmt: skip
        search.preferred = preferred
        module = pattern(rep.rpartition(".")[0])
        tables = slot_options(rep, param, owner, k, fused_moe)
        table = tables[0]
        if decided.get(module) == "whole" and table[0].shard is not None:
            tables = [[Slot(rep, None, None, rep)]]  # the module's weight is stored whole: so are its scales
        chosen = search.choose(tables)
        if chosen is not None and table[0].shard is not None:
            decided.setdefault(module, "whole" if all(sl.shard is None for sl, _ in chosen) else "table")
        if chosen is None:
            if draft and _shared_from_target(rep, owner):
                continue
            raise StoredError(f"no checkpoint name the release's {type(model).__name__}.load_weights accepts reaches "
                              f"its parameter {rep}")  # fmt: skip
        picks.append((members, rep, param, owner, dtype, search, tables, chosen))
    # one module, one layout: routed experts whose weight the loader takes fused but whose scale it takes only per
    # expert are stored per expert, weight and scale alike (a loader that meets one fused name reads the rest of
    # the checkpoint as fused)
    layout: dict[str, set[bool]] = {}
    for _, rep, _, owner, _, _, _, chosen in picks:
        if fused_moe is not None and isinstance(owner, fused_moe):
            layout.setdefault(rep.rpartition(".")[0], set()).add(_fused(chosen))
    for i, (members, rep, param, owner, dtype, search, tables, chosen) in enumerate(picks):
        if layout.get(rep.rpartition(".")[0]) == {True, False} and _fused(chosen):
            split = search.choose([t for t in tables if not all(sl.expert is None for sl in t)])
            if split is not None:
                picks[i] = (members, rep, param, owner, dtype, search, tables, split)
    for members, rep, _, _, dtype, search, _, chosen in picks:
        collapsed = len({replay(sl.base, ops) for sl, ops in chosen}) < len(chosen)  # one fused tensor for several
        shards = len({sl.shard for sl, _ in chosen})
        for slot, ops in chosen:
            for member in members:
                base = slot.base if member == rep else _slot_base(member, slot, rep)
                name = replay(base, ops)
                listed_dtype, listed_shape = known.get(pattern(name), (None, None))
                shape = tuple(int(d) for d in params[member].shape) if collapsed else shape_of(
                    Slot(member, slot.shard, slot.expert), params[member], owners.get(member), fused_moe, splits,
                    shards)
                if search.transposed and len(shape) == 3:
                    shape = (shape[0], shape[2], shape[1])
                if evidence is not None and evidence.complete and name in evidence.names:
                    listed_shape = evidence.names[name][1] or listed_shape
                # the listing's layout of the same elements (gpt-oss's MXFP4 blocks as [E, o, i/32, 16]); a
                # sibling's other sizes are never taken
                shape = tuple(listed_shape) if listed_shape and math.prod(listed_shape) == math.prod(shape) else shape
                # a listing's dtype where both are plain floats (a norm kept in F32); never a quantized storage's
                if not (listed_dtype in FLOATING and dtype in FLOATING):
                    listed_dtype = None
                out.append(Stored(name, listed_dtype or dtype, shape, member, None if collapsed else slot.shard,
                                  None if collapsed else slot.expert))  # fmt: skip


def _fused(chosen: list[tuple[Slot, tuple[Op, ...]]]) -> bool:
    """Whether a choice stores every expert in one tensor (no slot names an expert)."""
    return all(sl.expert is None for sl, _ in chosen)


class _Search:
    """The names a representative parameter is stored under: for each way the loader's tables split it (shards,
    experts, packed parts) or none, the first candidate spelling the loader takes to it, the spellings
    ``known`` lists first."""

    def __init__(self, prober: Prober, k: Knowledge, params: dict[str, Any], rep: str, param: Any, owner: Any,
                 fused_moe: Any, dtype: str, splits: Splits | None, known: dict[str, Any],
                 avoid: frozenset[str] = frozenset()) -> None:  # fmt: skip
        self.prober, self.k, self.params, self.rep = prober, k, params, rep
        self.avoid = avoid  # names another model of the checkpoint stores (a draft's are never the target's)
        self.preferred: set[Op] = set()  # shared by the searches of one model (``_store`` sets it)
        self.listed_only = False
        self.param, self.owner, self.fused_moe, self.dtype, self.splits = param, owner, fused_moe, dtype, splits
        self.known = known
        self.transposed = False  # fused experts stored [E, in, out]: the loader transposes them (``_note_layout``)
        self.shards = 0  # the shards of the way being searched (``_option`` sets it)

    def _reached(self, names: list[tuple[str, tuple[int, ...]]], shard: Any) -> bool:
        hits = self.prober.probe([(n, sh, self.dtype) for n, sh in names])
        return any(h[0] == self.rep and (shard is None or is_part_shard(shard) or h[1] == shard) for h in hits)

    def _first(self, group: list[Slot]) -> tuple[Op, ...] | None:
        """The renames that make ``group``'s names reach the parameter (a packed module's parts together): among
        the spellings ``known`` lists first (probed only those), else the first the loader takes."""
        shapes = [shape_of(sl, self.param, self.owner, self.fused_moe, self.splits, self.shards) for sl in group]
        shard = group[0].shard if len(group) == 1 else None
        tried = [c for c in candidates(group[0].base, self.k) if c[0] not in self.avoid]
        if self._fused_shared(group[0]):  # a shared expert the release appends to the routed ones: the vendor
            # stores it apart, under the name the loader renames from (never as routed expert number E)
            number = re.compile(rf"\.{group[0].expert}(\.|$)")
            tried = [c for c in tried if not number.search(c[0])]
        listed = [c for c in tried if all(pattern(replay(sl.base, c[1])) in self.known for sl in group)]
        # the renames the listed spellings needed elsewhere (a language model's prefix), for what it does not list
        liked = [c for c in tried if c[1] and all(op in self.preferred for op in c[1])]
        passes = [listed] if self.listed_only else ([listed, liked, tried] if self.known else [tried])
        for cands in passes:
            for _, ops in cands:
                names = [replay(sl.base, ops) for sl in group]
                if self._reached(list(zip(names, shapes, strict=True)), shard):
                    if cands is listed:  # a rename of the names' spelling (a prefix), not a piece put in one place
                        self.preferred.update(op for op in ops if op[0] != "insert")
                    self._note_layout(group, names[0], shapes[0])
                    return ops
        return None

    def _note_layout(self, group: list[Slot], name: str, shape: tuple[int, ...]) -> None:
        """Fused experts a model's loader transposes before it loads each expert (stored as
        ``[E, in, out]``): when the parameter's loader is not handed one expert's share
        as the tensor is probed, and is when its last two dimensions are swapped, the checkpoint holds them so."""
        if len(group) != 1 or group[0].expert is not None or self.fused_moe is None \
                or not isinstance(self.owner, self.fused_moe) or len(shape) != 3:  # fmt: skip
            return
        one = tuple(int(d) for d in self.param.shape[1:])
        expected = {one, (one[0] // 2, one[1])}  # w2 whole, w1 / w3 half the rows of w13

        def handed(probe_shape: tuple[int, ...]) -> tuple[int, ...] | None:
            self.prober.probe([(name, probe_shape, self.dtype)])
            got = self.prober.loaded_shapes.get(self.rep)
            return tuple(got) if got else None

        if handed(shape) in expected:
            return
        if handed((shape[0], shape[2], shape[1])) in expected:
            self.transposed = True

    def _fused_shared(self, slot: Slot) -> bool:
        if slot.expert is None or self.fused_moe is None or not isinstance(self.owner, self.fused_moe):
            return False
        shared = int(self.owner.__dict__.get("num_fused_shared_experts") or 0)
        routed = int(self.owner.__dict__.get("num_experts") or 0) - shared
        return bool(shared) and isinstance(slot.expert, int) and slot.expert >= routed

    def _option(self, option: list[Slot]) -> list[tuple[Slot, tuple[Op, ...]]] | None:
        parts = [sl for sl in option if is_part(sl)]
        if parts:
            ops = self._first(parts)
            return None if ops is None else [(sl, ops) for sl in parts]
        out = []
        by_shard: dict[Any, tuple[Op, ...]] = {}
        self.shards = len({sl.shard for sl in option})
        for sl in option:  # each shard's first expert is searched; the other experts take its renames
            group = (sl.shard, self._fused_shared(sl))  # a shared expert fused after the routed ones: its own
            if group not in by_shard:
                ops = self._first([sl])
                if ops is None:
                    return None
                by_shard[group] = ops
            out.append((sl, by_shard[group]))
        return out

    def _listed(self, chosen: list[tuple[Slot, tuple[Op, ...]]]) -> bool:
        return all(pattern(replay(sl.base, ops)) in self.known for sl, ops in chosen)

    def choose(self, tables: list[list[Slot]]) -> list[tuple[Slot, tuple[Op, ...]]] | None:
        """The first of the loader's ways (``tables``), or the parameter stored whole, that reaches it; with a
        listing, the first whose names it lists."""
        whole = [Slot(self.rep, None, None, self.rep)]
        options = [*tables, whole] if all(sl.base != self.rep for sl in tables[0]) or tables[0][0].shard is not None \
            else list(tables)  # split as the loader's table says, or stored whole (a vision tower's fused qkv)
        found = []
        for option in options:
            f = self._option(option)
            if f is not None:
                if not self.known or self._listed(f):
                    return f
                found.append(f)
        return found[0] if found else None


def is_part_shard(shard: Any) -> bool:
    return isinstance(shard, tuple) and shard[:1] == ("part",)


def _slot_base(member: str, slot: Slot, rep: str) -> str:
    """The member's checkpoint name before renames, as the representative's table entry writes it (the numbers
    the member's name has where the representative's has its own)."""
    base = slot.base
    for a, b in zip(_numbers(rep), _numbers(member), strict=False):
        if a != b:
            base = re.sub(rf"(?<=\.){a}(?=\.|$)", b, base, count=1)
    return base


def _numbers(name: str) -> list[str]:
    return _DIGITS.findall(name)


def read_evidence(path: Path, *, complete: bool = True) -> Evidence:
    """A published ``model.safetensors.index.json`` (names; gzipped as ``.json.gz``) or a listing of
    ``name[<TAB>shape<TAB>dtype]`` lines (``shape`` as ``[a, b]`` or ``a,b``) as evidence of a checkpoint's names."""
    import gzip
    import json

    raw = Path(path).read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    names: dict[str, tuple[str | None, tuple[int, ...] | None]] = {}
    if isinstance(data, dict):
        wm = data.get("weight_map")
        if not isinstance(wm, dict):
            raise ValueError(f"{path}: no weight_map (is it a model.safetensors.index.json?)")
        for k, v in wm.items():
            if isinstance(v, dict):
                names[k] = (_listed_dtype(v.get("dtype")), tuple(v["shape"]) if v.get("shape") is not None else None)
            else:
                names[k] = (None, None)
        return Evidence(names, complete)
    for line in text.splitlines():
        parts = line.strip().split("\t")
        if not parts[0] or parts[0].startswith("#"):
            continue
        shape = None
        if len(parts) > 1 and parts[1].strip():
            digits = re.findall(r"\d+", parts[1])
            shape = tuple(int(d) for d in digits) if digits or parts[1].strip() in ("[]", "()") else None
        names[parts[0]] = (_listed_dtype(parts[2]) if len(parts) > 2 else None, shape)
    if not names:
        raise ValueError(f"{path}: no tensor names")
    return Evidence(names, complete)


_LISTED = {"bfloat16": "BF16", "float32": "F32", "float16": "F16", "float8_e4m3fn": "F8_E4M3", "uint8": "U8",
           "int8": "I8", "int32": "I32", "int64": "I64"}  # fmt: skip


def _listed_dtype(value: Any) -> str | None:
    if not value:
        return None
    text = str(value).strip()
    return _LISTED.get(text.lower(), text.upper() if text.upper() in _ITEMSIZE else None)
