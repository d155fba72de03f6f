"""Text that leaves this machine (a commit message, a pull request) without this machine's paths in it.

A crash log quotes files where the engine saw them: under the run's workspace (``/tmp/.../runs/<id>/workspace/
sglang/python/...``), the run folder, or the user's home. Upstream, the same file is ``sglang/python/...`` (and,
in the engine's own repository, ``python/...``); the rest of the path names nothing a maintainer has. Paths inside
an engine's image (``/usr/local/lib/python3.12/dist-packages/...``, ``/sgl-workspace/sglang/...``) are the image's
and stay: they are what every user of that image sees.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path


def roots_of(*paths: Path | str | None) -> list[str]:
    """The absolute spellings of ``paths`` (as given and resolved: a symlinked /tmp has two), longest first."""
    out: set[str] = set()
    for p in paths:
        if not p:
            continue
        for spelling in (str(p), os.path.realpath(p)):
            if os.path.isabs(spelling) and spelling.rstrip("/"):
                out.add(spelling.rstrip("/"))
    return sorted(out, key=len, reverse=True)


def strip_machine_paths(text: str, roots: Iterable[str], home: str | None = None) -> str:
    """``text`` with each of ``roots`` (and what follows it) made relative to it, and paths under ``home`` (default:
    this user's) written ``~/...``."""
    for root in roots:
        text = re.sub(rf"{re.escape(root)}/", "", text)
        text = re.sub(rf"{re.escape(root)}(?![\w.-])", ".", text)  # the folder itself
    home = home if home is not None else os.path.expanduser("~")
    if home and home != "/":
        text = re.sub(rf"{re.escape(home.rstrip('/'))}(?=/)", "~", text)
    return text
