"""Where the twin asks the pinned release about a model: ``scratch(release, config)``.

A throw-away SGLang root holding the release's Python tree and a model folder holding ``config.json``, with the
engine's own environment switches set aside (``SGLANG_USE_AITER`` pads MoE buffers, ...): a model's description and
its checkpoint are what the vendor published, the same whatever kernels a node later loads them into. The release's
log lines about the scratch folder (no ``generation_config.json``) are silenced for the time of the block.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


class ReleaseUnavailable(ValueError):
    """The pinned release's source is not at hand (one line: why)."""


@contextlib.contextmanager
def vendor_environment() -> Iterator[None]:
    """The process environment without the engine's switches (the variables the release's load path reads)."""
    from ..engine.loading.weights_cache import ENV_PREFIXES

    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


@contextlib.contextmanager
def scratch(release: str, config: Mapping[str, Any]) -> Iterator[tuple[Path, Path]]:
    """(an SGLang root holding the pinned release, a model folder holding ``config``), for the time of the block.
    Raises ``ReleaseUnavailable``."""
    from ..workspace import release as releases

    tree = releases.release_tree(release)
    if not isinstance(tree, releases.ReleaseTree):
        raise ReleaseUnavailable(f"the SGLang {release} release is not available ({tree.reason}): the twin derives "
                                 "a model from the release's own classes")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dz-release-") as tmp, vendor_environment():
        root = Path(tmp) / "sglang"
        (root / "python").mkdir(parents=True)
        (root / "python" / "sglang").symlink_to(tree.package)
        model_dir = Path(tmp) / "model"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(dict(config)))
        logging.disable(logging.WARNING)
        try:
            yield root, model_dir
        finally:
            logging.disable(logging.NOTSET)
