"""Choosing a policy from the command line (``--policy auto|playbook|llm|replay``). Anything that keeps a
policy from being made (an unknown name, no model, no API key, an unreadable replay trace) is a one-line
:class:`PolicyError`, raised before a run is created."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from .base import Policy


class PolicyError(ValueError):
    """A policy that cannot be made from these options; the message is one line."""


_SECRET_QUERY = ("key", "token", "secret", "password", "auth", "signature", "sig")


def _credentials_in(url: str) -> str | None:
    """What secret a base URL carries (user:password@, or a key-like query parameter), if any."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        return "credentials (user:password@)"
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    if leaked := [n for n in names if any(w in n.lower().replace("-", "_") for w in _SECRET_QUERY)]:
        return f"a secret query parameter ({leaked[0]})"
    return None


def _secret_key_in(value) -> str | None:
    """The first key of a JSON-like value, at any depth, that names a secret (``api_key``, ``Authorization``...)."""
    from agent.secrets import is_secret_key

    if isinstance(value, dict):
        for key, inner in value.items():
            if (isinstance(key, str) and is_secret_key(key)) or (key := _secret_key_in(inner)):
                return key
    if isinstance(value, list):
        return next((k for item in value if (k := _secret_key_in(item))), None)
    return None


def make_policy(options, task=None) -> Policy:
    """``auto``: the LLM when a model and a key (or a local endpoint) are configured, else the playbook. The LLM's
    endpoint settings are the task's ``llm`` section with the command line's ``--llm-*`` options over them."""
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
        if options.llm_base_url and (why := _credentials_in(options.llm_base_url)):
            raise PolicyError(f"--llm-base-url holds {why}: the run records its URL, so give the key in "
                              "OPENAI_API_KEY instead")  # fmt: skip
        if key := _secret_key_in(getattr(options, "llm_extra_body", None)):
            raise PolicyError(f"--llm-extra-body holds a secret ({key}): the run records its options without it (a "
                              "resumed run would send ***), so give the key in OPENAI_API_KEY instead")  # fmt: skip
        settings = getattr(task, "llm", None)
        extra = {**(settings.extra_body if settings else {}), **(getattr(options, "llm_extra_body", None) or {})}
        timeout = getattr(options, "llm_timeout_s", None) or (settings.timeout_s if settings else 120)
        results_as = getattr(options, "llm_tool_results", None) or (settings.tool_results_as if settings else "tool")
        if results_as not in ("tool", "user"):
            raise PolicyError(f"--llm-tool-results {results_as!r}: choose tool or user")
        try:
            return LLMPolicy(model=options.llm_model, base_url=options.llm_base_url, extra_body=extra or None,
                             timeout_s=timeout, tool_results_as=results_as)  # fmt: skip
        except ValueError as exc:  # no API key for a remote endpoint
            raise PolicyError(str(exc).removeprefix("LLMPolicy: ")) from None
    if name == "replay":
        from .replay import ReplayPolicy

        if not options.replay_trace:
            raise PolicyError("--policy replay needs --replay TRACE (a recorded trace.jsonl)")
        try:
            return ReplayPolicy(Path(options.replay_trace))
        except (OSError, ValueError) as exc:  # missing, unreadable, not a trace
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
            raise PolicyError(f"--replay {options.replay_trace}: not a readable trace ({why})") from None
    raise PolicyError(f"unknown policy {name!r} (auto, playbook, llm, replay)")
