"""The twin's own YAML data files (scenarios, hardware and kernel sheets, release profiles), read with libyaml.

Every engine process reads several of them, and PyYAML's pure-Python reader made that a tenth of a launch's CPU
(issue 26); libyaml (``yaml.CSafeLoader``: PyYAML's wheel has it, and Debian's ``python3-yaml`` in the twin's
image) scans and parses them more than ten times faster, into the same values: the constructor and the resolver
are PyYAML's Python ones either way (tests/twin/test_shipped_yaml.py compares every shipped file both ways).
Without libyaml the pure-Python loader reads them, as before.

Only text the twin ships goes this way. On a file a user wrote libyaml is not the pure-Python reader: it accepts
a tab after a value and a ``?`` in a flow scalar that PyYAML refuses, puts some empty values on another line, and
Debian's libyaml 0.2.5 composer overflows the C stack on a document nested 100,000 deep; such files keep
``safe_input.compose_yaml``'s pure-Python reading and its messages. A workspace's copy of a shipped scenario is
still shipped text (:func:`is_shipped`): the copy is byte for byte the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # CSafeLoader exists when PyYAML has libyaml


def load(path: Path) -> Any:
    """The value of the shipped YAML file ``path`` (``yaml.safe_load``'s, read by libyaml when there)."""
    return yaml.load(path.read_text(), Loader=LOADER)  # noqa: S506  (a safe loader: LOADER is (C)SafeLoader)


def compose(text: str) -> yaml.Node | None:
    """The node graph of shipped YAML ``text`` (``yaml.compose`` with the safe loader's resolver)."""
    return yaml.compose(text, Loader=LOADER)


def is_shipped(text: str, folder: Path) -> bool:
    """Whether ``text`` is, byte for byte, one of the ``*.yaml`` files the twin ships in ``folder``."""
    data = text.encode()
    for path in folder.glob("*.yaml"):
        try:
            if path.stat().st_size == len(data) and path.read_bytes() == data:
                return True
        except OSError:
            continue
    return False
