"""Porting a CUDA-born source to ROCm the way hipify and SGLang's maintainers do it: one mechanism for headers and
identifiers.

A JIT kernel that fails on ROCm fails one of two ways (clang's words): ``'cuda_runtime.h' file not found`` (a CUDA
header included unguarded) or ``use of undeclared identifier 'X'`` / ``unknown type name 'X'`` (a name only a CUDA
header declares, used where that header is hidden on ROCm). Both are answered from hipify's CUDA -> HIP mapping
(``hipify_map.tsv`` beside this module: HIPIFY's own tables, headers and identifiers, source named in its header;
``hipify_tables`` rebuilds it) with the workspace's own pairings first:

- a missing header is guarded with ``#ifndef USE_ROCM``, its HIP counterpart in the ``#else`` branch, and there too
  the HIP spelling of every identifier the file uses that the hidden header declared (what later SGLang releases
  did to ``sgl_kernel/runtime.cuh``: ``#define cudaOccupancyMaxActiveBlocksPerMultiprocessor
  hipOccupancyMaxActiveBlocksPerMultiprocessor``). A file that already keeps its includes in such a block gets the
  new include inside that block, not a second guard;
- an undeclared identifier gets its HIP spelling in the ``#else`` branch of the guard that hides the header it
  comes from -- in the file, or in the header it reaches that does (SGLang's ``utils.cuh`` hides
  ``cuda_runtime.h`` for every kernel and aliases what they use) -- in that branch's own style (``using`` for types,
  ``inline constexpr auto`` for constants, ``#define`` otherwise, each as the branch already writes them);
- a name with no HIP equivalent (hipify lists none, or marks it unsupported) is declined by name and position:
  no guessing.

The workspace is read through ``WorkspaceView`` (read_file, exists, glob); the result is data: one edit (path, old,
new) and what it does, or a decline that says exactly what cannot be ported. Nothing here knows a kernel, a file
name or a release: the mapping is hipify's, the style and pairings are the file's own.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field

from ..policies.base import WorkspaceView

MAP_FILE = Path(__file__).with_name("hipify_map.tsv")
ROCM_MACROS = ("USE_ROCM", "__HIP_PLATFORM_AMD__", "__HIPCC__", "__HIP__")
MAX_INCLUDE_DEPTH = 8  # how far the headers a file reaches are followed when looking for its guard and aliases
# Which CUDA headers declare a family of hipify's identifiers (CUDA's own layout: cuda_runtime.h brings in
# cuda_runtime_api.h, the device functions and the vector types; cuda_bf16.h and cuda_fp8.h bring in cuda_fp16.h)
FAMILY_HEADERS = {
    "runtime": ("cuda_runtime.h", "cuda_runtime_api.h"),
    "driver": ("cuda.h",),
    "device": ("cuda_runtime.h", "device_functions.h", "device_launch_parameters.h"),
    "cub": ("cub/cub.cuh",),
    "cg": ("cooperative_groups.h",),
    "half": ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"),
    "bfloat16": ("cuda_bf16.h", "cuda_fp8.h"),
    "fp8": ("cuda_fp8.h",),
}
HEADER_BRINGS = {"cuda_runtime.h": ("cuda_runtime_api.h", "device_functions.h", "device_launch_parameters.h"),
                 "cuda_bf16.h": ("cuda_fp16.h",), "cuda_fp8.h": ("cuda_fp16.h", "cuda_bf16.h")}  # fmt: skip


# --- the mapping ---------------------------------------------------------------------------------------------------


class Spelling(BaseModel):
    """One hipify entry: a CUDA name, its HIP name, what it is, and whether HIP provides it."""

    cuda: str
    hip: str
    kind: str = Field(description="function | type | constant | namespace | other")
    family: str = Field(description="runtime | driver | device | cub: which CUDA headers declare it")
    supported: bool


@dataclass(frozen=True)
class HipifyMap:
    headers: dict[str, str]  # CUDA header -> HIP header ("" when HIP needs none)
    identifiers: dict[str, Spelling]

    def header(self, cuda: str) -> str | None:
        return self.headers.get(cuda) or None

    def spelling(self, name: str) -> Spelling | None:
        return self.identifiers.get(name)


@lru_cache(maxsize=1)
def hipify_map() -> HipifyMap:
    headers: dict[str, str] = {}
    identifiers: dict[str, Spelling] = {}
    for line in MAP_FILE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        cuda, hip, kind, family, supported = line.split("\t")
        if kind == "include":
            headers[cuda] = hip
        else:
            identifiers[cuda] = Spelling(cuda=cuda, hip=hip, kind=kind, family=family, supported=supported == "1")
    return HipifyMap(headers, identifiers)


def hip_spelling(name: str) -> str | None:
    """The HIP name hipify gives a CUDA identifier, when HIP provides it (``cudaStream_t`` -> ``hipStream_t``)."""
    s = hipify_map().spelling(name)
    return s.hip if s and s.supported else None


def declaring_headers(s: Spelling) -> tuple[str, ...]:
    """The CUDA headers that declare a mapped name (device types by their own family: half, bfloat16, fp8)."""
    if s.family == "device":
        low = s.cuda.lower()
        for family in ("fp8", "bfloat16", "half"):
            if family in low or (family == "fp8" and s.cuda.startswith("__NV_E")) or \
                    (family == "bfloat16" and "bf16" in low) or (family == "half" and re.match(r"__h[a-z]", s.cuda)):
                return FAMILY_HEADERS[family]
    return FAMILY_HEADERS.get(s.family, ())


def brought_in(header: str) -> set[str]:
    """A CUDA header and the CUDA headers it includes."""
    out, todo = set(), [header]
    while todo:
        h = todo.pop()
        if h not in out:
            out.add(h)
            todo.extend(HEADER_BRINGS.get(h, ()))
    return out


# --- the file: its USE_ROCM conditionals, what ROCm sees, its own pairings -----------------------------------------

_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
_ROCM = "|".join(ROCM_MACROS)
_CUDA_FIRST = re.compile(rf"^(?:ifndef\s+(?:{_ROCM})|if\s+!\s*defined\s*\(?\s*(?:{_ROCM})\s*\)?)\s*(?://.*|/\*.*)?$")
_ROCM_FIRST = re.compile(rf"^(?:ifdef\s+(?:{_ROCM})|if\s+defined\s*\(?\s*(?:{_ROCM})\s*\)?)\s*(?://.*|/\*.*)?$")
_INCLUDE_LINE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]')
_INCLUDE = re.compile(r"<([^>]+)>")
_COMMENTS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)
_NAME = re.compile(r"[A-Za-z_]\w*")
_HIP_NAME = re.compile(r"_*hip|_*HIP")
# how a branch declares a CUDA name for ROCm: using X = Y; / typedef Y X; / #define X Y / [inline] constexpr auto X = Y;
_ALIASES = (("using", re.compile(r"^[ \t]*using[ \t]+(\w+)[ \t]*=[ \t]*([\w:]+)[ \t]*;", re.M)),
            ("typedef", re.compile(r"^[ \t]*typedef[ \t]+([\w:]+)[ \t]+(\w+)[ \t]*;", re.M)),
            ("define", re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([\w:]+)[ \t]*$", re.M)),
            ("constexpr", re.compile(r"^[ \t]*(?:inline[ \t]+)?constexpr[ \t]+auto[ \t]+(\w+)[ \t]*=[ \t]*([\w:]+)[ \t]*;",
                                     re.M)),
            ("namespace", re.compile(r"^[ \t]*namespace[ \t]+(\w+)[ \t]*=[ \t]*([\w:]+)[ \t]*;", re.M)))  # fmt: skip
# what declares a name: a macro, an alias, a type, a namespace, a constant, a function defined in the file
_DECLARES = (re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M),
             re.compile(r"\b(?:using|namespace|struct|class|union|enum(?:[ \t]+class)?)[ \t]+(\w+)[ \t]*[=:{;]"),
             re.compile(r"\btypedef\b[^;]*?\b(\w+)[ \t]*;"),
             re.compile(r"\bauto[ \t]+(\w+)[ \t]*="),
             re.compile(r"^[ \t]*(?:(?:inline|static|constexpr|__host__|__device__|__forceinline__)[ \t]+)*"
                        r"[\w:<>]+[ \t*&]+(\w+)[ \t]*\([^;{]*\)[ \t]*\{", re.M))  # fmt: skip


@dataclass(frozen=True)
class Guard:
    """``#ifndef USE_ROCM`` (line ``start``) ... ``#else`` (line ``middle``, or None) ... ``#endif`` (line ``end``)."""

    start: int
    middle: int | None
    end: int

    def cuda_side(self, lines: list[str]) -> list[str]:
        return lines[self.start + 1: self.middle if self.middle is not None else self.end]

    def rocm_side(self, lines: list[str]) -> list[str]:
        return lines[self.middle + 1: self.end] if self.middle is not None else []


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def guards(text: str) -> list[Guard]:
    """Every ``#ifndef USE_ROCM`` conditional (and its spellings ``#if !defined(USE_ROCM)``, ...), in order."""
    out: list[Guard] = []
    stack: list[list] = []  # [start, kind, middle]
    for i, line in enumerate(_lines(text)):
        m = _DIRECTIVE.match(line)
        if not m:
            continue
        word, rest = m.group(1), (m.group(1) + " " + m.group(2).strip()).strip()
        if word in ("if", "ifdef", "ifndef"):
            stack.append([i, "cuda" if _CUDA_FIRST.match(rest) else "other", None])
        elif word in ("elif", "else") and stack:
            if stack[-1][2] is None:
                stack[-1][2] = i
        elif word == "endif" and stack:
            start, kind, middle = stack.pop()
            if kind == "cuda":
                out.append(Guard(start, middle, i))
    return sorted(out, key=lambda g: g.start)


def rocm_view(text: str) -> str:
    """The file as a ROCm build sees it: the CUDA-only branches of USE_ROCM conditionals blanked (lines kept)."""
    branches: list[str | None] = []  # per open conditional: "cuda" / "rocm" for the branch we are in, None if unrelated
    out = []
    for line in _lines(text):
        m = _DIRECTIVE.match(line)
        if m:
            word, rest = m.group(1), (m.group(1) + " " + m.group(2).strip()).strip()
            if word in ("if", "ifdef", "ifndef"):
                branches.append("cuda" if _CUDA_FIRST.match(rest) else "rocm" if _ROCM_FIRST.match(rest) else None)
            elif word in ("elif", "else") and branches and branches[-1] is not None:
                branches[-1] = "rocm" if branches[-1] == "cuda" else "cuda"
            elif word == "endif" and branches:
                branches.pop()
            hidden = "cuda" in branches
            out.append(line if not hidden and word not in ("if", "ifdef", "ifndef", "elif", "else", "endif")
                       else "\n" if line.endswith("\n") else "")
            continue
        out.append("\n" if "cuda" in branches else line)
    return "".join(out)


def used_names(text: str) -> dict[str, int]:
    """Identifier -> first line (1-based) where ROCm's view of the file uses it; members and qualified names are
    looked up in their class or namespace, so they are not counted."""
    view = _COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), rocm_view(text))
    out: dict[str, int] = {}
    for n, line in enumerate(view.splitlines(), 1):
        if line.lstrip().startswith("#") and not re.match(r"\s*#\s*define\b", line):
            continue
        for m in _NAME.finditer(line):
            before = line[: m.start()].rstrip()
            if before.endswith((".", "->")) or re.search(r"[\w>]\s*::$", before):
                continue  # a member, or a name qualified by a class or namespace (a leading :: is the global one)
            out.setdefault(m.group(0), n)
    return out


def own_counterparts(text: str) -> dict[str, str]:
    """CUDA header -> HIP header, as the file's own guards pair their includes (one for one, in order)."""
    lines = _lines(text)
    pairs: dict[str, str] = {}
    for g in guards(text):
        cuda = [m.group(1) for ln in g.cuda_side(lines) if (m := _INCLUDE.search(ln)) and _INCLUDE_LINE.match(ln)]
        hip = [m.group(1) for ln in g.rocm_side(lines) if (m := _INCLUDE.search(ln)) and _INCLUDE_LINE.match(ln)]
        if cuda and len(cuda) == len(hip):
            pairs.update(zip(cuda, hip, strict=True))
    return pairs


def own_spellings(text: str) -> dict[str, str]:
    """CUDA name -> HIP name as the file's guards pair them: an alias the ROCm branch gives a CUDA name
    (``using cudaStream_t = hipStream_t;``), and one alias defined both ways (``using bf16_t = __nv_bfloat16;`` /
    ``using bf16_t = __hip_bfloat16;``)."""
    lines = _lines(text)
    out: dict[str, str] = {}
    for g in guards(text):
        cuda_side, rocm_side = "".join(g.cuda_side(lines)), "".join(g.rocm_side(lines))
        cuda_alias, rocm_alias = {}, {}
        for style, rx in _ALIASES:
            for m in rx.finditer(cuda_side):
                name, target = (m.group(2), m.group(1)) if style == "typedef" else (m.group(1), m.group(2))
                cuda_alias[name] = target
            for m in rx.finditer(rocm_side):
                name, target = (m.group(2), m.group(1)) if style == "typedef" else (m.group(1), m.group(2))
                rocm_alias[name] = target
        for name, hip in rocm_alias.items():
            if name != hip and hipify_map().spelling(name) is not None:
                out.setdefault(name, hip)  # the branch spells a CUDA name itself
            cuda = cuda_alias.get(name)
            if cuda and cuda != hip and _NAME.fullmatch(cuda) and _HIP_NAME.match(hip):
                out.setdefault(cuda, hip)  # a HIP type, not a stand-in (``uint8_t`` for an fp8 type keeps no semantics)
    return out


def declared_names(text: str) -> set[str]:
    """Names ROCm's view of the file declares (types, aliases, macros, variables), loosely: enough to know it
    already provides a CUDA name."""
    view = _COMMENTS.sub(" ", rocm_view(text))
    return {m.group(1) for rx in _DECLARES for m in rx.finditer(view)}


# --- the workspace: the headers a file reaches ---------------------------------------------------------------------


def resolve_include(ws: WorkspaceView, path: str, name: str, quoted: bool) -> str | None:
    """Where a workspace file's include lands in the workspace: next to the file (quoted), else in an ``include``
    directory of one of its ancestors (the layout SGLang's JIT kernels build with: csrc/ beside include/)."""
    here = posixpath.dirname(path)
    if quoted:
        cand = posixpath.normpath(posixpath.join(here, name))
        if ws.exists(cand):
            return cand
    d = here
    while d:
        cand = posixpath.join(d, "include", name)
        if ws.exists(cand):
            return cand
        if quoted and ws.exists(posixpath.join(d, name)):
            return posixpath.join(d, name)
        d = posixpath.dirname(d)
    return None


def reached(ws: WorkspaceView, path: str) -> list[str]:
    """The workspace files a file includes on ROCm, transitively, nearest first (the file itself first)."""
    order, seen, frontier = [path], {path}, [path]
    for _ in range(MAX_INCLUDE_DEPTH):
        nxt = []
        for p in frontier:
            try:
                text = rocm_view(ws.read_file(p))
            except (OSError, ValueError):
                continue
            for line in text.splitlines():
                m = _INCLUDE_LINE.match(line)
                if m:
                    target = resolve_include(ws, p, m.group(2), m.group(1) == '"')
                    if target and target not in seen:
                        seen.add(target)
                        order.append(target)
                        nxt.append(target)
        frontier = nxt
    return order


# --- the fix -------------------------------------------------------------------------------------------------------


class Edit(BaseModel):
    path: str
    old: str
    new: str


class Port(BaseModel):
    """One edit that ports a file's guard to ROCm, and what it does in a reviewer's words."""

    edit: Edit
    header: str = Field(description="the CUDA header whose guard the edit adds or extends")
    hip_include: str | None = None
    spelled: list[str] = Field(default_factory=list, description="'cudaX -> hipX' added to the #else branch")
    extended: bool = Field(False, description="an existing USE_ROCM block was extended rather than a new one added")
    unported: list[str] = Field(default_factory=list, description="what the port leaves for a human, with positions")

    @property
    def defect(self) -> str:
        return f"include:{self.edit.path}:{self.header}"


class Decline(BaseModel):
    """What cannot be ported by a guard and HIP spellings, named precisely."""

    reason: str
    name: str = Field(description="the identifier, header or construct")
    where: str = Field(description="file:line")


def _spelling_for(name: str, own: dict[str, str]) -> tuple[str, Spelling] | None:
    s = hipify_map().spelling(name)
    if name in own:
        return own[name], s or Spelling(cuda=name, hip=own[name], kind="type", family="device", supported=True)
    if s is not None and s.supported and s.hip and s.hip != name:
        return s.hip, s
    return None


def _style(rocm_side: list[str]) -> dict[str, str]:
    """How the branch spells CUDA names for ROCm, by kind: ``using`` / ``constexpr`` / ``define`` (bare) /
    ``guarded`` (``#ifndef X`` / ``#define X Y`` / ``#endif``, what a branch with none yet gets)."""
    text = "".join(rocm_side)
    found = {style for style, rx in _ALIASES if rx.search(text)}
    guarded = any(hipify_map().spelling(m.group(1)) for m in
                  re.finditer(r"#[ \t]*ifndef[ \t]+(\w+)[ \t]*\n[ \t]*#[ \t]*define[ \t]+\1\b", text))
    define = "define" if "define" in found and not guarded else "guarded"
    return {"type": "using" if "using" in found else define, "constant": "constexpr" if "constexpr" in found else define,
            "function": define, "other": define, "namespace": "namespace"}  # fmt: skip


def _spell(cuda: str, hip: str, kind: str, style: dict[str, str]) -> str:
    how = style.get(kind, style["other"])
    if how == "using":
        return f"using {cuda} = {hip};\n"
    if how == "constexpr":
        return f"inline constexpr auto {cuda} = {hip};\n"
    if how == "namespace":
        return f"namespace {cuda} = {hip};\n"
    if how == "define":
        return f"#define {cuda} {hip}\n"
    return f"#ifndef {cuda}\n#define {cuda} {hip}\n#endif\n"


def _provided(ws: WorkspaceView, files: list[str]) -> set[str]:
    names: set[str] = set()
    for p in files:
        try:
            names |= declared_names(ws.read_file(p))
        except (OSError, ValueError):
            continue
    return names


def _pairings(ws: WorkspaceView, files: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The headers' and names' pairings the reached files make themselves (nearest file first)."""
    heads: dict[str, str] = {}
    names: dict[str, str] = {}
    for p in files:
        try:
            text = ws.read_file(p)
        except (OSError, ValueError):
            continue
        for k, v in own_counterparts(text).items():
            heads.setdefault(k, v)
        for k, v in own_spellings(text).items():
            names.setdefault(k, v)
    return heads, names


def _needed(ws: WorkspaceView, path: str, text: str, headers: set[str], files: list[str],
            own: dict[str, str]) -> list[tuple[str, str, str]]:  # fmt: skip
    """(cuda, hip, kind) for every name the file uses on ROCm that one of ``headers`` declared and nothing it
    reaches declares for ROCm yet, in order of first use."""
    provided = _provided(ws, files)
    out = []
    for name, _line in sorted(used_names(text).items(), key=lambda kv: kv[1]):
        if name in provided:
            continue
        got = _spelling_for(name, own)
        if got is None:
            continue
        hip, s = got
        if name not in own and not (set(declaring_headers(s)) & headers):
            continue
        out.append((name, hip, s.kind))
    return out


def _unported(text: str, path: str, headers: set[str]) -> list[str]:
    """What the ROCm view still uses that HIP lacks (hipify marks it unsupported), and inline PTX, with lines."""
    out = []
    for name, line in sorted(used_names(text).items(), key=lambda kv: kv[1]):
        s = hipify_map().spelling(name)
        if s is not None and not s.supported and set(declaring_headers(s)) & headers:
            out.append(f"{name} ({path}:{line}): HIP has no {s.hip or 'equivalent'}")
    view = rocm_view(text)
    for n, line in enumerate(view.splitlines(), 1):
        if re.search(r'\basm\b[^"\n]*"\s*(?:\{|[a-z]+\.[a-z0-9.]+)', line):
            out.append(f"inline PTX ({path}:{n})")
    return out


def _rebuild(lines: list[str], g: Guard | None, include: str | None, hip: str | None,
             spellings: list[str], extra_hip: list[str]) -> tuple[int, int, str]:  # fmt: skip
    """The guard's lines rebuilt: (first line, last line + 1, text). ``include`` is the CUDA include line to add."""
    if g is None:
        body = f"#ifndef USE_ROCM\n{include}"
        rocm = [f"#include <{h}>\n" for h in [hip, *extra_hip] if h]
        if rocm or spellings:
            body += "#else\n" + "".join(rocm) + "".join(spellings)
        return 0, 0, body + "#endif\n"
    cuda = g.cuda_side(lines)
    rocm = g.rocm_side(lines)
    if include is not None:
        last = max((i for i, ln in enumerate(cuda) if _INCLUDE_LINE.match(ln)), default=len(cuda) - 1)
        cuda = [*cuda[: last + 1], include, *cuda[last + 1:]]
    present = {m.group(2) for ln in rocm if (m := _INCLUDE_LINE.match(ln))}
    adds = [f"#include <{h}>\n" for h in dict.fromkeys([hip, *extra_hip]) if h and h not in present]
    if adds:
        last = max((i for i, ln in enumerate(rocm) if _INCLUDE_LINE.match(ln)), default=-1)
        rocm = [*rocm[: last + 1], *adds, *rocm[last + 1:]]
    rocm = [*rocm, *spellings]
    else_line = lines[g.middle] if g.middle is not None else "#else\n"
    text = lines[g.start] + "".join(cuda) + (else_line + "".join(rocm) if rocm else "") + lines[g.end]
    return g.start, g.end + 1, text


def _edit(path: str, text: str, lines: list[str], span: tuple[int, int], new: str) -> Edit:
    old = "".join(lines[span[0]: span[1]])
    if text.count(old) != 1:  # widen until the old text is unique in the file
        lo, hi = span
        while text.count(old) != 1 and (lo > 0 or hi < len(lines)):
            lo, hi = max(0, lo - 1), min(len(lines), hi + 1)
            old = "".join(lines[lo:hi])
            new = "".join(lines[lo: span[0]]) + new + "".join(lines[span[1]: hi])
    return Edit(path=path, old=old, new=new)


def _block_for(text: str, lines: list[str], near: int) -> Guard | None:
    """The file's guard around its includes (the one nearest ``near`` when it keeps several)."""
    around = [g for g in guards(text) if any(_INCLUDE_LINE.match(ln) for ln in g.cuda_side(lines))]
    return min(around, key=lambda g: abs(g.start - near)) if around else None


def port_header(ws: WorkspaceView, path: str, header: str) -> Port | Decline | None:
    """``'<header>' file not found`` in ``path``: guard the include for ROCm, inside the file's own USE_ROCM block
    when it keeps one, with the HIP header and the HIP spellings of what the file uses from it."""
    if not ws.exists(path):
        return None
    text = ws.read_file(path)
    lines = _lines(text)
    at = next((i for i, ln in enumerate(lines) if (m := _INCLUDE_LINE.match(ln)) and m.group(2) == header), None)
    if at is None:
        return None
    files = reached(ws, path)
    heads, own = _pairings(ws, files)
    if header not in heads and header not in hipify_map().headers:
        where = f"{path}:{at + 1}"
        return Decline(reason=f"<{header}> ({where}) has no HIP counterpart in hipify's include map: what the code "
                              "takes from it needs a ROCm implementation, not a guard", name=header, where=where)
    hip = heads.get(header) or hipify_map().header(header)
    g = _block_for(text, lines, at)
    if g is not None and g.start < at < g.end:  # already inside a guard that ROCm still compiles: not this fix
        return None
    hidden = brought_in(header)
    lines_wo = [*lines[:at], "\n", *lines[at + 1:]]  # the include hidden, every other line where it was
    needed = _needed(ws, path, "".join(lines_wo), hidden, files, own)
    rocm_side = g.rocm_side(lines) if g else []
    style = _style(rocm_side)
    spellings = [_spell(c, h, k, style) for c, h, k in needed]
    include = lines[at] if lines[at].endswith("\n") else lines[at] + "\n"
    if g is None:
        _, _, block = _rebuild(lines, None, include, hip, spellings, [])
        edit = _edit(path, text, lines, (at, at + 1), block)
    else:
        start, end, block = _rebuild(lines, g, include, hip, spellings, [])
        lo, hi = min(start, at), max(end, at + 1)
        between = [ln for i, ln in enumerate(lines[lo:hi], lo) if i != at and not (start <= i < end)]
        new = (block + "".join(between)) if at >= end else ("".join(between) + block)
        edit = _edit(path, text, lines, (lo, hi), new)
    return Port(edit=edit, header=header, hip_include=hip, spelled=[f"{c} -> {h}" for c, h, _ in needed],
                extended=g is not None, unported=_unported("".join(lines_wo), path, hidden))


def port_identifier(ws: WorkspaceView, path: str, line: int, name: str) -> Port | Decline | None:
    """``use of undeclared identifier 'X'`` (or ``unknown type name``) at ``path:line``: spell X for ROCm in the
    ``#else`` branch of the guard that hides the header declaring it (the file's, or the nearest header's it
    reaches), with every other name the file uses from that header; or say why X cannot be spelled."""
    where = f"{path}:{line}"
    if not ws.exists(path):
        return None
    files = reached(ws, path)
    heads, own = _pairings(ws, files)
    s = hipify_map().spelling(name)
    if name not in own:
        if s is None:
            return Decline(reason=f"'{name}' ({where}) is CUDA-only and hipify knows no HIP equivalent: the code "
                                  "that uses it needs a ROCm implementation", name=name, where=where)  # fmt: skip
        if not s.supported:
            return Decline(reason=f"'{name}' ({where}) has no HIP equivalent: hipify maps it to "
                                  f"'{s.hip or '(nothing)'}' and marks it unsupported in HIP", name=name,
                           where=where)  # fmt: skip
    spelled = _spelling_for(name, own)
    declaring = set(declaring_headers(s)) if s else set()
    # where the header that declares it is hidden: the file's own guard, else the most basic header it reaches that
    # hides it (the last one reached: every other includes it, so one spelling there serves them all)
    candidates = []
    for p in files:
        t = ws.read_file(p)
        ls = _lines(t)
        for g in guards(t):
            hides = {m.group(2) for ln in g.cuda_side(ls) if (m := _INCLUDE_LINE.match(ln))}
            if any(brought_in(h) & declaring for h in hides) or (not declaring and hides):
                candidates.append((p, t, ls, g, hides))
                break
    own_file = [c for c in candidates if c[0] == path]
    target = own_file[0] if own_file else candidates[-1] if candidates else None
    if target is None:
        text = ws.read_file(path)
        ls = _lines(text)
        hide = next(iter(sorted(declaring)), None)
        hip = heads.get(hide or "") or hipify_map().header(hide or "")
        if spelled is None and not hip:
            return Decline(reason=f"'{name}' ({where}) is declared by no header that HIP replaces", name=name,
                           where=where)  # fmt: skip
        needed = _needed(ws, path, text, declaring, files, own) or ([(name, spelled[0], spelled[1].kind)]
                                                                  if spelled else [])  # fmt: skip
        last = max((i for i, ln in enumerate(ls) if _INCLUDE_LINE.match(ln)), default=-1)
        style = _style([])
        block = "#ifdef USE_ROCM\n" + (f"#include <{hip}>\n" if hip else "") + \
                "".join(_spell(c, h, k, style) for c, h, k in needed) + "#endif\n"  # fmt: skip
        anchor = ls[last] if last >= 0 else ""
        edit = _edit(path, text, ls, (last, last + 1), anchor + block) if last >= 0 else \
            Edit(path=path, old=ls[0], new=block + ls[0])  # fmt: skip
        return Port(edit=edit, header=hide or name, hip_include=hip, spelled=[f"{c} -> {h}" for c, h, _ in needed])
    p, t, ls, g, hides = target
    hidden = set().union(*(brought_in(h) for h in hides))
    needed = _needed(ws, p, t, hidden, files, own)
    if p != path:  # the user's names too: what the failing file uses from the same headers
        needed += [n for n in _needed(ws, path, ws.read_file(path), hidden, files, own) if n not in needed]
    extra_hip: list[str] = []
    if spelled is None:  # HIP has it under the same name: the HIP header that declares it is missing
        hip_h = next((heads.get(h) or hipify_map().header(h) for h in sorted(declaring)
                      if heads.get(h) or hipify_map().header(h)), None)  # fmt: skip
        if hip_h is None:
            return Decline(reason=f"'{name}' ({where}) keeps its name in HIP but no HIP header for it is known",
                           name=name, where=where)  # fmt: skip
        extra_hip.append(hip_h)
    elif not any(c == name for c, _, _ in needed):
        needed.insert(0, (name, spelled[0], spelled[1].kind))
    style = _style(g.rocm_side(ls))
    spellings = [_spell(c, h, k, style) for c, h, k in needed]
    start, end, block = _rebuild(ls, g, None, None, spellings, extra_hip)
    edit = _edit(p, t, ls, (start, end), block)
    header = next((h for h in sorted(hides) if brought_in(h) & declaring), sorted(hides)[0])
    return Port(edit=edit, header=header, hip_include=extra_hip[0] if extra_hip else None,
                spelled=[f"{c} -> {h}" for c, h, _ in needed], extended=True,
                unported=_unported(ws.read_file(path), path, hidden))


# CUDA header -> HIP header (hipify's include map), and the file's own pairings, for callers that want them alone
HIP_COUNTERPARTS = {cuda: hip for cuda, hip in hipify_map().headers.items() if hip}
_own_counterparts = own_counterparts
