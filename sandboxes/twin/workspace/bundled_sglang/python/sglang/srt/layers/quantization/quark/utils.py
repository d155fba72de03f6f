# dayzero twin: a hand-written excerpt of SGLang 0.5.12's Quark helpers, used only when the real release could
# not be downloaded. Same file path, same function names and behaviour; not SGLang's code.
# SPDX-License-Identifier: Apache-2.0
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType


def should_ignore_layer(
    layer_name: str | None,
    ignore: Iterable[str],
    fused_mapping: Mapping[str, list[str]] = MappingProxyType({}),
) -> bool:
    """True when module ``layer_name`` stays unquantized (``ignore`` is quantization_config["exclude"]).

    A fused module (``gate_up_proj``) is not in the checkpoint: its shards are looked up instead, and all
    of them must agree.
    """
    if layer_name is None:
        return False
    proj_name = layer_name.split(".")[-1]
    if proj_name not in fused_mapping:
        return check_equal_or_regex_match(layer_name, ignore)
    answers = {
        check_equal_or_regex_match(layer_name.replace(proj_name, shard), ignore)
        for shard in fused_mapping[proj_name]
    }
    if len(answers) != 1:
        raise ValueError(
            f"Found a different quantization schemes for {fused_mapping[proj_name]} in {layer_name}."
        )
    return answers.pop()


def check_equal_or_regex_match(layer_name: str, targets: Iterable[str]) -> bool:
    """An exact name, or ``re:<pattern>`` matched with ``re.match`` (anchored at the start only)."""
    for target in targets:
        if target.startswith("re:"):
            if re.match(target[3:], layer_name):
                return True
        elif target == layer_name:
            return True
    return False
