"""Where each patch of a run goes, and in which order: what a maintainer needs to act on the PR material.

A run's source trees are of different owners. The engine tree (SGLang) takes a pull request on its repository; the
checkpoint's tree (``config.json`` and its neighbours) belongs to the model's repository on the Hugging Face Hub;
each tree's pristine commit says which it is (``Upstream-Kind``, ``Upstream-Name``, ``Upstream-Remote``), and the
task names the checkpoint (``model.name``). One crash can be answered twice: in the checkpoint (a config entry that
works with the released engine) and in the engine (which makes that entry unnecessary). Those two are one defect
with two fixes, and the order follows from what each needs before it helps anyone:

1. the checkpoint fix first: the model's maintainers merge a config change on the hub and every user of the
   released engine is unblocked the same day, with no engine release;
2. the engine fix next: it reaches users with the next engine release, and from then on the checkpoint entry (and
   the same entry in every other checkpoint of that convention) is unnecessary. Whether it holds on its own is read
   from its check trial: launched with the checkpoint's file as released, it needs nothing of the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, Field

# The repository each engine a task can name takes pull requests on (``tasks.spec.Engines``: the real engine).
ENGINE_REPOSITORIES = {"sglang": ("SGLang", "https://github.com/sgl-project/sglang")}
HUB = "https://huggingface.co"


class Destination(BaseModel):
    """Where one tree's patches are sent."""

    tree: str
    kind: Literal["engine", "checkpoint", "other"]
    project: str = Field(description="who takes the patch, by name")
    url: str | None = None
    how: str = Field(description="how to send it, one sentence")


class Fix(BaseModel):
    """One patch (one commit of one tree) as a fix of a defect."""

    tree: str
    index: int
    title: str
    pr_file: str | None = None
    patch_file: str | None = None
    check_trial: int | None = None
    destination: Destination
    order: int = 1
    why: str = Field("", description="why it is sent in this place, and what it needs of the others")


class Defect(BaseModel):
    """One crash and every patch that answers it."""

    crash_trial: int | None = None
    what_failed: str = ""
    fixes: list[Fix] = Field(default_factory=list)


class _Patch(Protocol):  # agent.inspector.review.PatchReview, as far as routing reads it
    tree: str
    index: int
    title: str
    files: list[str]
    what_failed: str
    crash_trial: int | None
    check_trial: int | None
    pr_file: str | None
    patch_file: str | None


class _Tree(Protocol):  # agent.inspector.review.TreeReview
    tree: str
    upstream: list[str]
    patches: Sequence[_Patch]


def destination(tree: _Tree, model_name: str | None) -> Destination:
    """Where ``tree``'s patches go, from its pristine commit's trailers and the task's checkpoint name."""
    trailers = dict(t.split(": ", 1) for t in tree.upstream if ": " in t)
    kind, name, remote = trailers.get("Upstream-Kind"), trailers.get("Upstream-Name"), trailers.get("Upstream-Remote")
    if kind == "model":
        repo = model_name or name
        url = f"{HUB}/{repo}" if repo else None
        return Destination(tree=tree.tree, kind="checkpoint", project=f"the checkpoint {repo or tree.tree}", url=url,
                           how=(f"open a pull request on the model's hub page ({url}/discussions, 'New pull request') "
                                "with the patched file, or push the commit to that pull request's refs/pr/<n> branch of "
                                "the model's git repository"
                                if url else "send it to whoever publishes the checkpoint"))  # fmt: skip
    key = (name or tree.tree).lower()
    if key in ENGINE_REPOSITORIES:
        project, url = ENGINE_REPOSITORIES[key]
        version = trailers.get("Upstream-Version")
        base = f" (the patches apply to {project} {version})" if version else ""
        return Destination(tree=tree.tree, kind="engine", project=f"the engine, {project}", url=remote or url,
                           how=f"open a pull request on {remote or url}{base}")  # fmt: skip
    where = remote or None
    return Destination(tree=tree.tree, kind="other", project=f"the upstream of {name or tree.tree}", url=where,
                       how=f"send it to {where}" if where else "send it to the project the tree was taken from")


def defects(trees: Sequence[_Tree], pristine_of: dict[int, list[str]], model_name: str | None) -> list[Defect]:
    """The run's patches grouped by the crash they answer, each group's fixes in the order to send them.
    ``pristine_of``: trial id -> the workspace files that trial launched with as released."""
    where = {t.tree: destination(t, model_name) for t in trees}
    groups: dict[object, Defect] = {}
    for t in trees:
        for p in t.patches:
            key = p.crash_trial if p.crash_trial is not None else (t.tree, p.index)
            d = groups.setdefault(key, Defect(crash_trial=p.crash_trial, what_failed=p.what_failed))
            d.fixes.append(Fix(tree=t.tree, index=p.index, title=p.title, pr_file=p.pr_file, patch_file=p.patch_file,
                               check_trial=p.check_trial, destination=where[t.tree]))  # fmt: skip
    files = {(t.tree, p.index): [f"{t.tree}/{f}" for f in p.files] for t in trees for p in t.patches}
    for d in groups.values():
        _order(d, files, pristine_of)
    return sorted(groups.values(), key=lambda d: (d.crash_trial is None, d.crash_trial or 0))


_RANK = {"checkpoint": 0, "engine": 1, "other": 2}


def _order(d: Defect, files: dict[tuple[str, int], list[str]], pristine_of: dict[int, list[str]]) -> None:
    d.fixes.sort(key=lambda f: (_RANK[f.destination.kind], f.tree, f.index))
    checkpoint = [f for f in d.fixes if f.destination.kind == "checkpoint"]
    for n, f in enumerate(d.fixes, start=1):
        f.order = n
        if len(d.fixes) == 1:
            f.why = "the only fix of this crash"
            continue
        if f.destination.kind == "checkpoint":
            f.why = ("first: a config change the model's maintainers can merge today; it makes the released engine "
                     "load the checkpoint, with no engine release")  # fmt: skip
        elif f.destination.kind == "engine" and checkpoint:
            released = set(pristine_of.get(f.check_trial or -1, []))
            theirs = {x for c in checkpoint for x in files[(c.tree, c.index)]}
            names = ", ".join(f"`{x}`" for x in sorted(theirs))
            if theirs and theirs <= released:
                f.why = (f"next: it reaches users with the next engine release and makes the checkpoint fix "
                         f"unnecessary; it holds on its own (trial {f.check_trial} launched with {names} as released), "
                         "so it does not wait for the checkpoint fix to be merged")  # fmt: skip
            else:
                f.why = (f"next: it was checked with the checkpoint fix applied (trial {f.check_trial}), so it is "
                         "verified only together with it; send it after, naming the checkpoint fix")  # fmt: skip
        else:
            f.why = "after the fixes above it"
