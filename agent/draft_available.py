"""Whether the model a task serves can speculate at all: ``withheld_speculation(task, workspace)``.

Speculative decoding needs a draft: an MTP head in the checkpoint that the engine's draft class loads, or a
separate draft checkpoint the task names (``speculative-draft-model-path``). Without one, an EAGLE launch makes the
target its own draft and fails (SGLang's ``set_embed_and_head`` on a class that has none), so searching speculative
flags only spends trials. What the node shows is read, as an engineer reads it: the checkpoint's own index (an MTP
layer is a layer beyond ``num_hidden_layers``, or a module named for MTP / NextN layers), else the count
``config.json`` states. Nothing here knows a model family.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from tools.weight_suspects import mtp_names

SPECULATIVE_FLAGS = ("speculative-algorithm", "speculative-num-steps", "speculative-eagle-topk",
                     "speculative-num-draft-tokens", "speculative-draft-model-path")  # fmt: skip


class Files(Protocol):
    def read_file(self, path: str) -> str: ...

    def exists(self, path: str) -> bool: ...


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else {}


def stated_mtp_layers(config: dict[str, Any]) -> int | None:
    """The MTP layers config.json counts (a count under a name of MTP or NextN layers or modules), or None."""
    found = [v for part in (config, _text_config(config)) for k, v in part.items()
             if ("mtp" in k.lower() or "nextn" in k.lower()) and ("layers" in k.lower() or "modules" in k.lower())
             and isinstance(v, int) and not isinstance(v, bool)]  # fmt: skip
    return max(found) if found else None


def index_has_mtp(names: list[str], config: dict[str, Any]) -> bool:
    """Whether a checkpoint's tensor names hold an MTP layer (``tools.weight_suspects.mtp_names``)."""
    return bool(mtp_names(names, config))


def draft_reason(model_dir: str, files: Files, draft_paths: list[Any]) -> str | None:
    """None when the model can speculate; else, in one line, why it cannot."""
    if any(draft_paths):
        return None
    config_path = f"{model_dir}/config.json"
    if not files.exists(config_path):
        return None  # nothing to read: the search space decides, as the task wrote it
    try:
        config = json.loads(files.read_file(config_path))
    except (OSError, ValueError):
        return None
    index_path = f"{model_dir}/model.safetensors.index.json"
    if files.exists(index_path):
        try:
            names = list((json.loads(files.read_file(index_path)).get("weight_map") or {}).keys())
        except (OSError, ValueError):
            names = []
        if names:
            if index_has_mtp(names, config):
                return None
            return ("the checkpoint's index has no MTP layer (none beyond its num_hidden_layers, none under an MTP "
                    "or NextN module) and the task names no draft checkpoint")  # fmt: skip
    stated = stated_mtp_layers(config)
    if stated is None or stated > 0:
        return None
    return "config.json counts no MTP layer and the task names no draft checkpoint"


_UNKNOWN = object()


def withheld_speculation(task: Any, files: Files, model_dir: str = "model",
                         decided: Any = _UNKNOWN) -> tuple[Any, str | None]:  # fmt: skip
    """``task`` with the speculative flags taken out of its search space when the model cannot speculate, and
    why (None: the task as it is). ``decided``: the reason (or None) a run found when it started, which its
    resumes keep (the search space does not change under a run; reading a large index again costs a second)."""
    flags = task.search_space.flags
    if not [a for a in flags.get("speculative-algorithm", []) if a]:
        return task, None
    reason = draft_reason(model_dir, files, list(flags.get("speculative-draft-model-path", []))) \
        if decided is _UNKNOWN else decided  # fmt: skip
    if reason is None:
        return task, None
    kept = {k: v for k, v in flags.items() if k not in SPECULATIVE_FLAGS}
    space = task.search_space.model_copy(update={"flags": kept})
    return task.model_copy(update={"search_space": space}), reason
