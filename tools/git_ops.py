"""Committing a verified patch to the run's branch, with a message a reviewer can trust."""

from __future__ import annotations

import git
from pydantic import BaseModel, Field

from .base import ToolInput, ToolResult, tool
from .context import ToolContext

AUTHOR = git.Actor("dayzero agent", "agent@dayzero.invalid")


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
    source: str | None = Field(None, description="which workspace repository; default: every one that changed")
    patch_id: str | None = Field(None, description="names the change; committing the same id twice is a no-op")
    files: list[str] | None = Field(None, description="workspace paths to commit (default: every change)")


class CommitRecord(BaseModel):
    source: str
    sha: str
    branch: str
    files: list[str]


class CommitResult(ToolResult):
    commits: list[CommitRecord] = []


def message(args: CommitInput, run_id: str, trial: int) -> str:
    return (
        f"{args.title}\n\n"
        f"What failed: {args.what_failed}\n\n"
        f"Root cause: {args.root_cause}\n\n"
        f"Change: {args.change}\n\n"
        f"Evidence before: {args.evidence.before}\n"
        f"Evidence after: {args.evidence.after}\n\n"
        f"Dayzero-Run: {run_id}\n"
        f"Dayzero-Trial: {trial}\n"
        + (f"Dayzero-Patch: {args.patch_id}\n" if args.patch_id else "")
    )


def ensure_branch(repo: git.Repo, branch: str) -> None:
    if repo.active_branch.name != branch:
        if branch in repo.heads:
            repo.heads[branch].checkout()
        else:
            repo.create_head(branch).checkout()


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
        if args.files:
            mine = [f.split("/", 1)[1] for f in args.files if f.startswith(name + "/")]
            repo.git.add("--", *mine)
        else:
            repo.git.add(A=True)
        files = sorted(repo.git.diff("--cached", "--name-only").splitlines())
        c = repo.index.commit(message(args, ctx.run_id, ctx.trial), author=AUTHOR, committer=AUTHOR)
        records.append(CommitRecord(source=name, sha=c.hexsha, branch=branch, files=files))
    if not records:
        return CommitResult(ok=False, summary="nothing to commit: no workspace repository has changes")
    return CommitResult(commits=records, summary="; ".join(f"{r.source}@{r.sha[:10]} ({len(r.files)} file(s))"
                                                          for r in records))  # fmt: skip
