"""Committing a verified patch to the run's branch, with a message a reviewer can trust."""

from __future__ import annotations

import re
import tempfile
import textwrap
from pathlib import Path

import git
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from .base import ToolInput, ToolResult, tool
from .context import ToolContext
from .machine_paths import roots_of, strip_machine_paths

AUTHOR = git.Actor("dayzero agent", "agent@dayzero.invalid")
WIDTH = 72


def run_branch(run_id: str) -> str:
    return f"dayzero/{run_id}"


class Evidence(BaseModel):
    before: str = Field(description="what happened without the patch (error line, metric)")
    after: str = Field(description="what happened with it (the relaunch, the benchmark)")


class CommitInput(ToolInput):
    title: str = Field(max_length=72, description="imperative summary line")
    what_failed: str
    root_cause: str
    change: str = Field(description="what the patch changes and why that fixes the root cause")
    evidence: Evidence
    excerpt: list[str] = Field(default_factory=list, description="the crash's decisive log lines, verbatim")
    source: str | None = Field(None, description="which workspace repository; default: every one that changed")
    patch_id: str | None = Field(None, description="names the change; committing the same id twice is a no-op")
    files: list[str] | None = Field(None, description="workspace paths to commit (default: every change)")
    diff: str | None = Field(None, description="commit exactly this unified diff (workspace paths, a/<source>/...) "
                                               "rather than the files' whole current changes")  # fmt: skip
    # who approved the change and its commit at the run's approval gates: set by the run's commit step only (not in
    # the schema a policy sees; a policy's own commit call has it removed)
    approvals: SkipJsonSchema[list[str]] = Field(default_factory=list)


class CommitRecord(BaseModel):
    source: str
    sha: str
    branch: str
    files: list[str]


class CommitResult(ToolResult):
    commits: list[CommitRecord] = []


def _paragraph(label: str, text: str) -> str:
    return textwrap.fill(f"{label}: {text}", WIDTH, break_long_words=False, break_on_hyphens=False)


def message(args: CommitInput, run_id: str, trial: int, simulated: bool = False) -> str:
    """Title, the crash excerpt verbatim, root cause, change, evidence before and after (labelled simulated when
    it came from the twin), then trailers; prose wrapped at 72 columns."""
    parts = [args.title]
    if args.excerpt:
        parts.append("The crash:\n\n" + "\n".join(f"    {ln}" for ln in args.excerpt))
    parts += [_paragraph("What failed", args.what_failed), _paragraph("Root cause", args.root_cause),
              _paragraph("Change", args.change)]  # fmt: skip
    label = "Evidence (simulated: dayzero digital twin, not a real node)" if simulated else "Evidence"
    parts.append(label + ":\n" + "\n".join(
        textwrap.fill(f"- {k}: {v}", WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
        for k, v in (("before", args.evidence.before), ("after", args.evidence.after))))  # fmt: skip
    trailers = [f"Dayzero-Run: {run_id}", f"Dayzero-Trial: {trial}"]
    if args.patch_id:
        trailers.append(f"Dayzero-Patch: {args.patch_id}")
    trailers += [f"Dayzero-Approved: {' '.join(a.split())}" for a in args.approvals]
    parts.append("\n".join(trailers))
    return "\n\n".join(parts) + "\n"


def pristine_text(repo_path: Path, rel: str) -> str:
    """A file as the workspace received it: its content at the repository's first (pristine) commit."""
    repo = git.Repo(repo_path)
    base = repo.git.rev_list("--max-parents=0", "HEAD").split()[0]
    try:
        return repo.git.show(f"{base}:{rel}", strip_newline_in_stdout=False)
    except git.GitCommandError:
        raise ValueError(f"{rel} is not in the pristine commit of {repo_path.name}") from None


def ensure_branch(repo: git.Repo, branch: str) -> None:
    if repo.active_branch.name != branch:
        if branch in repo.heads:
            repo.heads[branch].checkout()
        else:
            repo.create_head(branch).checkout()


def repo_relative(text: str, source: str) -> str:
    """Workspace paths of this repository (``sglang/python/...``) as the repository names them (``python/...``):
    a reviewer of the upstream project reads paths from its root."""
    return re.sub(rf"(?<![\w/.-]){re.escape(source)}/(?=[\w.])", "", text)


def _stage(repo: git.Repo, name: str, args: CommitInput) -> bool:
    """Stage this change in the repository ``name``: exactly ``args.diff`` when given (so two patches to one
    file stay two commits), else the listed files, else everything. False when nothing of it is here."""
    if args.diff:
        mine = _diff_for(args.diff, name)
        if not mine:
            return False
        with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as fh:
            fh.write(mine)
        try:
            repo.git.apply("--cached", "-p2", fh.name)
            return True
        except git.GitCommandError:
            pass  # the diff no longer applies to the index (edited since): commit the files as they are
        finally:
            Path(fh.name).unlink(missing_ok=True)
    if args.files:
        mine = [f.split("/", 1)[1] for f in args.files if f.startswith(name + "/")]
        if not mine:
            return False
        repo.git.add("--", *mine)
    else:
        repo.git.add(A=True)
    return True


def _secret_in(ctx: ToolContext, repo: git.Repo) -> str | None:
    """The first staged file whose added lines hold a secret (the file's name only: never the secret)."""
    current = None
    for line in repo.git.diff("--cached", "--no-color", "--no-ext-diff").splitlines():
        if line.startswith("+++ "):
            current = line[4:].removeprefix("b/")
        elif line.startswith("+") and ctx.redactor.holds_secret(line[1:]):
            return current or "a staged file"
    return None


def _diff_for(diff: str, source: str) -> str:
    """The parts of a workspace diff (``a/<source>/path``) that touch ``source``."""
    out: list[str] = []
    keep = False
    for line in diff.splitlines(True):
        if line.startswith("--- "):
            keep = line[4:].startswith((f"a/{source}/", "/dev/null"))
        if line.startswith("+++ ") and not line[4:].startswith(f"b/{source}/"):
            keep = False
            if out and out[-1].startswith("--- "):
                out.pop()
        if keep:
            out.append(line)
    return "".join(out)


_IDENTITY = {"GIT_AUTHOR_NAME": AUTHOR.name, "GIT_AUTHOR_EMAIL": AUTHOR.email, "GIT_COMMITTER_NAME": AUTHOR.name,
             "GIT_COMMITTER_EMAIL": AUTHOR.email}  # fmt: skip


def _commit_staged(repo: git.Repo, text: str) -> str:
    """Commit what is staged with ``text`` as its message, byte for byte, and return the sha. git's own command
    writes the tree (GitPython's ``index.commit`` reads and validates every index entry in Python: seconds for an
    engine's tree of thousands of files); ``--cleanup=verbatim`` keeps a quoted ``#include`` line, ``--no-verify``
    and ``--no-gpg-sign`` keep the user's hooks and signing out of the agent's commits."""
    with tempfile.NamedTemporaryFile("w", suffix=".msg", delete=False) as f:
        f.write(text)
    try:
        repo.git.commit("--quiet", "--no-verify", "--no-gpg-sign", "--cleanup=verbatim", "--allow-empty-message",
                        "-F", f.name, env=_IDENTITY)  # fmt: skip
    finally:
        Path(f.name).unlink(missing_ok=True)
    return repo.head.commit.hexsha


@tool
def commit(ctx: ToolContext, args: CommitInput) -> CommitResult:
    """Commit the workspace changes on the run's branch, with what failed, the root cause, the change and
    the evidence before and after; trailers name the run and trial."""
    if args.files:
        names = sorted({f.split("/", 1)[0] for f in args.files})
    else:
        names = [args.source] if args.source else sorted(ctx.repos)
    unknown = [n for n in names if n not in ctx.repos]
    if unknown:
        return CommitResult(ok=False, summary=f"unknown source {unknown[0]!r} (known: {', '.join(ctx.repos)})")
    branch = run_branch(ctx.run_id)
    roots = roots_of(getattr(ctx.sandbox, "root", None), ctx.sandbox.command_root, ctx.run_dir)
    records = []
    for name in names:
        repo = git.Repo(ctx.repos[name])
        if args.patch_id and branch in repo.heads:
            done = [c for c in repo.iter_commits(branch) if f"Dayzero-Patch: {args.patch_id}\n" in c.message]
            if done:  # already committed (a resumed run repeating its commit step)
                records.append(CommitRecord(source=name, sha=done[0].hexsha, branch=branch,
                                            files=sorted(done[0].stats.files)))  # fmt: skip
                continue
        if not repo.is_dirty(untracked_files=True):
            continue
        ensure_branch(repo, branch)
        if not _stage(repo, name, args):
            continue
        files = sorted(repo.git.diff("--cached", "--name-only").splitlines())
        if not files:
            continue
        problems = repo.git.diff("--cached", "--check", with_exceptions=False)
        if problems:  # whitespace errors: a reviewer would bounce it
            repo.git.reset("-q")
            return CommitResult(ok=False, summary=f"refused: the change has whitespace errors: {problems.splitlines()[0]}")
        if holder := _secret_in(ctx, repo):  # whatever wrote it (the engine, a tool): never into history
            repo.git.reset("-q")
            return CommitResult(ok=False, summary=f"refused: the change adds a secret to {holder} (the configured API "
                                                  "key, a task secret or a credential-shaped value)")  # fmt: skip
        # the message quotes the model and the crash log: what it says of a secret is masked, and the paths of
        # this machine (the workspace, the run folder, the home) become the upstream tree's own
        text = strip_machine_paths(message(args, ctx.run_id, ctx.trial, simulated=ctx.engine_name == "twin"), roots)
        text = ctx.redactor.text(repo_relative(text, name))
        records.append(CommitRecord(source=name, sha=_commit_staged(repo, text), branch=branch, files=files))
    if not records:
        return CommitResult(ok=False, summary="nothing to commit: no workspace repository has changes")
    return CommitResult(commits=records, summary="; ".join(f"{r.source}@{r.sha[:10]} ({len(r.files)} file(s))"
                                                          for r in records))  # fmt: skip


class DiscardInput(ToolInput):
    files: list[str] = Field(min_length=1, description="workspace paths (<source>/<path>) to put back as committed")


class DiscardResult(ToolResult):
    files: list[str] = []


@tool
def discard_changes(ctx: ToolContext, args: DiscardInput) -> DiscardResult:
    """Put files back as the run's branch last committed them (undo an edit that did not work out); the
    patches that only touched them are dropped from the run's record."""
    done = []
    for f in args.files:
        name, _, rel = f.partition("/")
        if name not in ctx.repos or not rel:
            return DiscardResult(ok=False, summary=f"{f!r} is not a file of a workspace source ({', '.join(ctx.repos)})")
        repo = git.Repo(ctx.repos[name])
        try:
            repo.git.checkout("HEAD", "--", rel)
        except git.GitCommandError:  # not in the last commit: a new file, removed
            (Path(ctx.repos[name]) / rel).unlink(missing_ok=True)
        done.append(f)
    return DiscardResult(files=done, summary=f"restored {len(done)} file(s) as committed")
