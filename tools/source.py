"""Reading and patching the workspace's sources (SGLang, the checkpoint config), confined to the workspace.

Every path goes through the sandbox, which refuses absolute paths, ``..``, symlinks leading out, ``.git``
metadata and its own control data (the process record, the run lock, the twin's ``.twin/``): a refusal comes
back as a failed result naming the path and why, never as an exception.
"""

from __future__ import annotations

import difflib
import fnmatch
import re

from pydantic import BaseModel, Field

from sandboxes.base import SandboxError

from .base import ToolInput, ToolResult, tool
from .context import ToolContext


class SearchInput(ToolInput):
    regex: str = Field(description="Python regular expression")
    glob: str = Field("**/*", description="path glob relative to the workspace, e.g. 'sglang/**/*.py'")
    max_results: int = Field(50, ge=1, le=1000)


class Match(BaseModel):
    path: str
    line: int
    text: str


class SearchResult(ToolResult):
    matches: list[Match] = []
    files_searched: int = 0
    truncated: bool = False


@tool(idempotent=True)
def search_source(ctx: ToolContext, args: SearchInput) -> SearchResult:
    """Search the workspace's files for a regular expression (optionally only paths matching a glob)."""
    try:
        pattern = re.compile(args.regex)
    except re.error as exc:
        return SearchResult(ok=False, summary=f"bad regex: {exc}")
    matches: list[Match] = []
    searched = 0
    for entry in ctx.sandbox.list_files(".", "**/*"):
        if entry.is_dir or not fnmatch.fnmatch(entry.path, args.glob) or "/.git/" in f"/{entry.path}":
            continue
        searched += 1
        try:
            text = ctx.sandbox.read_file(entry.path)
        except (UnicodeDecodeError, SandboxError):  # binary, or refused
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                matches.append(Match(path=entry.path, line=i, text=line[:400]))
                if len(matches) >= args.max_results:
                    return SearchResult(matches=matches, files_searched=searched, truncated=True,
                                        summary=f"{len(matches)}+ matches (truncated)")  # fmt: skip
    return SearchResult(matches=matches, files_searched=searched,
                        summary=f"{len(matches)} match(es) in {searched} file(s)")  # fmt: skip


class ReadFileInput(ToolInput):
    path: str = Field(description="path relative to the workspace")
    start: int = Field(1, ge=1, description="first line (1-based)")
    end: int | None = Field(None, ge=1, description="last line (inclusive); default start+199")


class ReadFileResult(ToolResult):
    path: str
    text: str = ""
    start: int = 1
    end: int = 0
    total_lines: int = 0


@tool(idempotent=True)
def read_file(ctx: ToolContext, args: ReadFileInput) -> ReadFileResult:
    """Read lines of a workspace file, numbered."""
    try:
        full = ctx.sandbox.resolve(args.path)
        if not full.is_file():
            return ReadFileResult(ok=False, path=args.path, summary="no such file")
        lines = ctx.sandbox.read_file(args.path).splitlines()
    except SandboxError as exc:
        return ReadFileResult(ok=False, path=args.path, summary=str(exc))
    end = min(args.end or args.start + 199, len(lines))
    body = "\n".join(f"{i}: {lines[i - 1][:2000]}" for i in range(args.start, end + 1))
    return ReadFileResult(path=args.path, text=body, start=args.start, end=end, total_lines=len(lines),
                          summary=f"{args.path} lines {args.start}-{end} of {len(lines)}")  # fmt: skip


class EditInput(ToolInput):
    path: str = Field(description="path relative to the workspace")
    old: str = Field(description="exact text to replace; must occur exactly once")
    new: str = Field(description="replacement text")
    fixes_trial: int | None = Field(None, description=(
        "the trial (its id) whose crash this change answers; the commit quotes that crash as the failure it fixes"))


class EditResult(ToolResult):
    path: str
    diff: str = ""


def unified_diff(path: str, before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))


# the workspace is committed and reviewed: a secret never goes in (and the refusal never repeats it)
SECRET_REFUSED = ("refused: the new text holds a secret (the configured API key, a task secret or a credential-shaped "
                  "value); the workspace is committed and reviewed, so read it from the environment instead")  # fmt: skip


@tool(idempotent=True)
def edit_file(ctx: ToolContext, args: EditInput) -> EditResult:
    """Replace one exact, unique occurrence of text in a workspace file; returns the diff."""
    try:
        before = ctx.sandbox.read_file(args.path)
        count = before.count(args.old)
        if args.new and args.new in before and args.old not in before.replace(args.new, ""):
            # already made (a resumed run repeats a call whose record the killed process did not write)
            pre = before.replace(args.new, args.old, 1)
            return EditResult(path=args.path, diff=unified_diff(args.path, pre, before),
                              summary=f"already edited: {args.path} holds the new text; nothing changed")  # fmt: skip
        if count != 1:
            return EditResult(ok=False, path=args.path,
                              summary=f"'old' occurs {count} times in {args.path}; it must occur exactly once")  # fmt: skip
        if ctx.redactor.holds_secret(args.new):
            return EditResult(ok=False, path=args.path, summary=SECRET_REFUSED)
        after = before.replace(args.old, args.new, 1)
        ctx.sandbox.write_file(args.path, after)
    except SandboxError as exc:  # refused (outside, control data, .git) or no such file
        return EditResult(ok=False, path=args.path, summary=str(exc))
    diff = unified_diff(args.path, before, after)
    return EditResult(path=args.path, diff=diff, summary=f"edited {args.path} (+{diff.count(chr(10) + '+')} lines)")


class PatchInput(ToolInput):
    diff: str = Field(description="unified diff; paths relative to the workspace (a/<path>, b/<path>)")
    fixes_trial: int | None = Field(None, description=(
        "the trial (its id) whose crash this change answers; the commit quotes that crash as the failure it fixes"))


class PatchResult(ToolResult):
    files: list[str] = []


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_unified(original: str, diff_lines: list[str]) -> str:
    """Apply the hunks of one file's diff to ``original``; raises ValueError when context does not match."""
    src = original.splitlines(True)
    out: list[str] = []
    pos = 0
    i = 0
    while i < len(diff_lines):
        m = _HUNK.match(diff_lines[i])
        if not m:
            i += 1
            continue
        start = int(m.group(1)) - 1 if int(m.group(2) or 1) else int(m.group(1))
        out.extend(src[pos:start])
        pos = start
        i += 1
        while i < len(diff_lines) and not diff_lines[i].startswith("@@"):
            line = diff_lines[i]
            tag, body = line[:1], line[1:]
            if line.startswith("\\"):
                i += 1
                continue
            if tag in (" ", "-"):
                if pos >= len(src) or src[pos].rstrip("\r\n") != body.rstrip("\r\n"):
                    raise ValueError(f"context does not match at line {pos + 1}: {body.rstrip()!r}")
                if tag == " ":
                    out.append(src[pos])
                pos += 1
            elif tag == "+":
                out.append(body if body.endswith("\n") else body + "\n")
            i += 1
    out.extend(src[pos:])
    return "".join(out)


@tool(idempotent=True)
def apply_patch(ctx: ToolContext, args: PatchInput) -> PatchResult:
    """Apply a unified diff to workspace files (all hunks must apply, or nothing changes)."""
    per_file: dict[str, list[str]] = {}
    current: str | None = None
    for line in args.diff.splitlines(True):
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            current = name[2:] if name.startswith("b/") else name
            per_file.setdefault(current, [])
        elif line.startswith("--- "):
            continue
        elif current is not None:
            per_file[current].append(line)
    if not per_file:
        return PatchResult(ok=False, summary="no file headers (+++ b/<path>) in the diff")
    added = [ln[1:] for lines in per_file.values() for ln in lines if ln.startswith("+")]
    if any(ctx.redactor.holds_secret(ln) for ln in added):
        return PatchResult(ok=False, summary=SECRET_REFUSED)
    new_texts: dict[str, str] = {}
    try:
        befores = {path: ctx.sandbox.read_file(path) if ctx.sandbox.resolve(path).exists() else "" for path in per_file}
        if _already_applied(befores, per_file):  # a resumed run repeats a call whose record was never written
            return PatchResult(files=sorted(per_file), summary=f"already applied: {', '.join(sorted(per_file))} "
                               "hold the patched text; nothing changed")  # fmt: skip
        for path, lines in per_file.items():
            new_texts[path] = apply_unified(befores[path], lines)
        for path in new_texts:  # every target writable before any is written: all or nothing
            ctx.sandbox.check_writable(path)
    except SandboxError as exc:
        return PatchResult(ok=False, summary=str(exc))
    except ValueError as exc:
        return PatchResult(ok=False, summary=f"patch does not apply to {path}: {exc}")
    for path, text in new_texts.items():
        ctx.sandbox.write_file(path, text)
    return PatchResult(files=sorted(new_texts), summary=f"patched {', '.join(sorted(new_texts))}")


def _reversed(diff_lines: list[str]) -> list[str]:
    """One file's hunks the other way round: what undoes them."""
    out = []
    for line in diff_lines:
        if m := _HUNK.match(line):
            a, b = m.group(1), m.group(2)
            c, d = m.group(3), m.group(4)
            out.append(f"@@ -{c}{',' + d if d is not None else ''} +{a}{',' + b if b is not None else ''} @@\n")
        elif line[:1] == "+":
            out.append("-" + line[1:])
        elif line[:1] == "-":
            out.append("+" + line[1:])
        else:
            out.append(line)
    return out


def _already_applied(texts: dict[str, str], per_file: dict[str, list[str]]) -> bool:
    """Whether every file's ``texts`` already hold the patched text: the patch's reverse applies (its added lines
    are there in their context, its removed ones gone)."""
    try:
        for path, lines in per_file.items():
            apply_unified(texts[path], _reversed(lines))
    except ValueError:
        return False
    return True
