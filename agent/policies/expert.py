"""The playbook's fix reasoning as the tools' expert (:class:`tools.expert.Expert`).

The ``propose_*`` tools give a model the same reasoning the playbook applies, without the tools importing the
agent: the agent hands this adapter to every run's :class:`tools.context.ToolContext`.
"""

from __future__ import annotations

from typing import Any

from tasks.spec import TaskSpec

from .playbook import PlaybookPolicy


class PlaybookExpert:
    """Each method is the playbook's own (not a copy), so a proposal and the playbook's fix never drift apart."""

    def __init__(self) -> None:
        self._playbook = PlaybookPolicy()

    def exclude_fix(self, view: Any, diag: dict) -> tuple[Any, dict] | None:
        return self._playbook._exclude_fix(view, diag)

    def guard_fix(self, view: Any, diag: dict) -> tuple[Any, dict] | None:
        return self._playbook._guard_fix(view, diag)

    def memory_fix(self, task: TaskSpec, cur: dict, diag: dict) -> bool:
        return PlaybookPolicy._memory_fix(task, cur, diag)

    def serving_memory_fix(self, task: TaskSpec, cur: dict, diag: dict) -> str | None:
        return PlaybookPolicy._serving_memory_fix(task, cur, diag)

    def allreduce_fix(self, cur: dict, diag: dict) -> str | None:
        return PlaybookPolicy._allreduce_fix(cur, diag)
