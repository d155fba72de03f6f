"""A configuration the engine rejected: which of its messages say so, and which parameter they blame.

Engines validate their configuration in two wordings. A plain ``ValueError: ...`` (SGLang's ServerArgs, vLLM's
older configs), and pydantic's, which vLLM's config dataclasses raise::

    pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
      Value error, User-specified max_model_len (513) is greater than ... [type=value_error, input_value=...]

The message names the offending setting either as a command-line flag (``--mem-fraction-static``) or, more often,
as the Python parameter behind it (``max_model_len``, "the `quantization` argument"), which maps onto its flag the
way the engines' argument parsers derive flags from their fields (``--`` + the name, ``_`` -> ``-``).

Not every ValueError is a configuration problem (a KV-pool leak check, an architecture no engine implements), so
a Python name counts only where the message blames it (it *must be*, *is greater than*, *is not supported*, is the
``argument``) and the message is about the user's configuration (raised while validating a config, or saying
"specified", "provided", "argument").
"""

from __future__ import annotations

import re

# pydantic's header line, then one indented message per error
_VALIDATION_HEADER = re.compile(r"\b\d+ validation errors? for (\w+)")
_VALUE_ERROR_ITEM = re.compile(r"^\s+Value error, (.*?)(?: \[type=value_error\b.*)?$")
# a Python name the message blames: quoted and called an argument, or snake_case and the subject of a requirement
_QUOTED_ARGUMENT = re.compile(r"[`'\"]([a-z][a-z0-9_]*)[`'\"] (?:argument|parameter|option|flag)\b")
_BLAMED_NAME = re.compile(
    r"(?<![\w.])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?:\s*\([^)]*\)|=\S+)?\s+(?:must\b|should\b|cannot\b|can ?not\b|"
    r"needs? to\b|has to\b|to be provided\b|exceeds?\b|is (?:required|not supported|not allowed|invalid|"
    r"out of range|set to|too \w+|(?:greater|larger|bigger|smaller|less|lower|higher) than)\b)")  # fmt: skip
# advice to change a named parameter ("Try adjusting tensor_parallel_size value"): it blames that parameter wherever
# the message was raised
_ADVISED_NAME = re.compile(r"\b(?:adjust|chang|reduc|increas|decreas|lower|rais)(?:e|es|ing|s)?\s+(?:the\s+)?"
                           r"[`'\"]?([a-z][a-z0-9]*(?:_[a-z0-9]+)+)[`'\"]?", re.I)  # fmt: skip
# the message speaks of the user's own setting, or the exception came from validating a configuration
_USER_SETTING = re.compile(r"\b(?:[Uu]ser-specified|specified|provided|argument|parameter|flag|option)\b")
_CONFIG_FILE = re.compile(r"(?:^|/)(?:config|configs|arg_utils|args_tools|server_args|\w+_config)\.py$|/config/")


def validation_messages(bodies: list[str]) -> list[tuple[int, str]]:
    """(index, message) of every error pydantic listed under a ``N validation error(s) for <Config>`` header."""
    found: list[tuple[int, str]] = []
    for i, body in enumerate(bodies):
        if not _VALIDATION_HEADER.search(body):
            continue
        for j in range(i + 1, min(i + 20, len(bodies))):
            if m := _VALUE_ERROR_ITEM.match(bodies[j]):
                found.append((j, m.group(1).strip()))
            elif not bodies[j][:1].isspace():
                break
    return found


def validated_config(bodies: list[str], idx: int) -> str | None:
    """The config class pydantic was validating when it listed the message at ``bodies[idx]``."""
    for j in range(idx, max(idx - 20, -1), -1):
        if m := _VALIDATION_HEADER.search(bodies[j]):
            return m.group(1)
    return None


def blamed_parameter(message: str, *, config_context: bool) -> str | None:
    """The Python parameter the message blames, or None. ``config_context``: the exception was raised while a
    configuration was validated (a config module raised it, or pydantic validated a config class)."""
    if m := _QUOTED_ARGUMENT.search(message):
        return m.group(1)
    if m := _ADVISED_NAME.search(message):
        return m.group(1)
    if not (config_context or _USER_SETTING.search(message)):
        return None
    m = _BLAMED_NAME.search(message)
    return m.group(1) if m else None


def is_config_file(path: str) -> bool:
    return bool(_CONFIG_FILE.search(path))


def as_flag(name: str) -> str:
    """The command-line spelling the engines' parsers give a parameter."""
    return "--" + re.sub(r"[ _]", "-", name.lower())
