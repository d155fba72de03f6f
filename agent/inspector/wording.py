"""What the run's shorthand means, in words a reader of the report (or the web view) needs no key for: the
policy's stage names, an accuracy goal as a sentence, a draft tree ``a/b/c`` spelled out. Display text only: the
internal names (a stage's memo key, which the playbook and checkpoints use) are never changed here.

Every term is explained at more length in ``docs/glossary.md`` (:data:`GLOSSARY`), read by
:func:`glossary_entries`: the report embeds it, the web view serves it.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from ..search import tree_of

# the stages' display names live below the inspector (the live panel names its stage too); re-exported here
from ..stages import STAGES as STAGES
from ..stages import StageName as StageName
from ..stages import stage_name as stage_name

GLOSSARY = Path(__file__).resolve().parents[2] / "docs" / "glossary.md"


def glossary_anchor(heading: str) -> str:
    """The anchor of a glossary heading as GitHub and the web view make it: ``tok/s per user`` -> ``toks-per-user``,
    ``Pareto frontier`` -> ``pareto-frontier`` (lower case, punctuation dropped, spaces as hyphens)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


class GlossaryEntry(BaseModel):
    """One heading of the glossary and its text, with its anchor (``knee``, as GitHub makes it)."""

    anchor: str
    heading: str
    text: str


def glossary_entries(path: Path | None = None) -> tuple[str, list[GlossaryEntry]]:
    """``docs/glossary.md`` as its introduction and its ``##`` entries; ("", []) when the file is not there. The
    report carries them inside itself (a link to the file would be a path of this machine in a shipped report),
    the web view serves them at ``/glossary``."""
    try:
        text = (path or GLOSSARY).read_text()
    except OSError:
        return "", []
    intro, *parts = re.split(r"^## ", text, flags=re.M)
    entries = [GlossaryEntry(anchor=glossary_anchor(head), heading=head.strip(), text=body.strip("\n"))
               for head, _, body in (part.partition("\n") for part in parts)]  # fmt: skip
    return intro.strip("\n"), entries


# a draft tree written as steps/topk/draft-tokens (the playbook's labels: "speculative decoding 3/1/4"); small
# numbers without a leading zero, so that a date (2026/12/03) or a path is not taken for one
TREE_TEXT = re.compile(r"(?<![\w/.])([1-9]\d?)/([1-9]\d?)/([1-9]\d{0,2})(?![\w/.])")
TREE_KEY = ("a/b/c is a draft tree: a = speculative-num-steps (how many tokens the draft model proposes in a row), "
            "b = speculative-eagle-topk (the branches it keeps at each step; 1 is a chain), c = "
            "speculative-num-draft-tokens (the tokens the target model verifies in one pass)")  # fmt: skip


def tree_words(steps: int, topk: int, draft: int) -> str:
    """``3/1/4`` as words: ``3 draft steps, a chain (top-1), 4 tokens verified per pass``."""
    width = "a chain (top-1)" if topk == 1 else f"{topk} branches per step (top-{topk})"
    return f"{steps} draft step{'s' if steps != 1 else ''}, {width}, {draft} tokens verified per pass"


def flags_tree_words(flags: dict) -> str | None:
    """The draft tree a configuration runs, as words (None: it does not speculate)."""
    tree = tree_of(flags)
    return tree_words(*tree) if tree else None


def accuracy_goal_words(max_delta: float, reference: str = "the reference") -> str:
    """An accuracy-delta goal (``-0.02``: the accuracy may fall at most 0.02 below its reference) in words."""
    if max_delta < 0:
        return f"at most {abs(max_delta):g} below {reference}"
    if max_delta == 0:
        return f"no lower than {reference}"
    return f"at least {max_delta:g} above {reference}"


def accuracy_delta_words(delta: float | None) -> str:
    """A measured accuracy delta in words: ``0.005 below``, ``0.010 above``, ``equal``."""
    if delta is None:
        return "-"
    if abs(delta) < 5e-4:
        return "equal to the reference"
    return f"{abs(delta):.3f} {'below' if delta < 0 else 'above'} the reference"


def reference_words(baseline: float | str | None) -> str:
    """The accuracy reference a task names: a figure, or ``first`` (the first configuration's own accuracy)."""
    if baseline == "first" or baseline is None:
        return "the first configuration's accuracy"
    return f"the reference accuracy {baseline:g}" if isinstance(baseline, float | int) else str(baseline)
