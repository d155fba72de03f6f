"""The playbook's stages by the names a reader sees: each stage key a policy writes into its decisions (the
playbook's ``memo["phase"]``, which its checkpoints and trace keep) with a display name and what it does.

A module of its own, below the inspector, because the live panel (the loop's side) names the stage it is in as
the report and the web view do; ``docs/glossary.md`` (*Stage*) holds the same table. Display text only: the keys
themselves are never renamed here.
"""

from __future__ import annotations

from pydantic import BaseModel


class StageName(BaseModel):
    """A stage's display name and what it does, for a stage key a policy writes into its decisions."""

    key: str
    name: str
    does: str


# the playbook's stages (agent/policies/playbook.py: memo["phase"]), in the order it runs them
STAGES: dict[str, StageName] = {s.key: s for s in (
    StageName(key="bringup", name="bring-up", does="launch the model as released on the simplest layout, fix what "
              "breaks, measure it"),
    StageName(key="tune", name="kernel tuning", does="tune the MoE shapes the log shows on aiter's untuned fallback"),
    StageName(key="single", name="single-stream decode", does="speculative decoding (a short draft chain, then the "
              "draft tree's depth) and knobs, measured with one request at a time"),
    StageName(key="layout", name="parallel-layout screening", does="screen tensor/data/expert-parallel layouts with "
              "one burst each; the best few get a full-length knee search"),
    StageName(key="knee", name="draft-tree search and refinement", does="after the layouts: the runner-up layouts "
              "with the best's settings, speculative decoding under load, the draft tree's width and verify budget, "
              "and the references (baseline, ablations) that explain the best"),
    StageName(key="search", name="search beyond the plan", does="the shared search layer proposes one flag "
              "change at a time from the best measured"),
    StageName(key="done", name="done", does="the plan is spent"),
)}  # fmt: skip


def stage_name(key: str | None) -> str:
    """The display name of a stage key (an unknown key, e.g. an LLM policy's own, is shown as it is)."""
    if not key:
        return "-"
    return STAGES[key].name if key in STAGES else key
