"""Choosing a policy from the command line (``--policy auto|playbook|llm|replay``)."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Policy


class PolicyError(ValueError):
    pass


def make_policy(options) -> Policy:
    """``auto``: the LLM when a model and a key (or a local endpoint) are configured, else the playbook."""
    name = options.policy
    if name == "auto":
        configured = options.llm_model and (os.environ.get("OPENAI_API_KEY") or options.llm_base_url)
        name = "llm" if configured else "playbook"
    if name == "playbook":
        from .playbook import PlaybookPolicy

        return PlaybookPolicy()
    if name == "llm":
        from .llm import LLMPolicy

        if not options.llm_model:
            raise PolicyError("--policy llm needs --llm-model (and --llm-base-url for a non-OpenAI endpoint)")
        return LLMPolicy(model=options.llm_model, base_url=options.llm_base_url)
    if name == "replay":
        from .replay import ReplayPolicy

        if not options.replay_trace:
            raise PolicyError("--policy replay needs --replay TRACE (a recorded trace.jsonl)")
        return ReplayPolicy(Path(options.replay_trace))
    raise PolicyError(f"unknown policy {name!r} (auto, playbook, llm, replay)")
