# dayzero twin: a hand-written excerpt of SGLang 0.5.12's model utilities (WeightsMapper only), used only when
# the real release could not be downloaded. Same path and behaviour; not SGLang's code.
# SPDX-License-Identifier: Apache-2.0
from collections.abc import Mapping
from dataclasses import dataclass, field

WeightsMapping = Mapping[str, str | None]


@dataclass
class WeightsMapper:
    """Renames checkpoint names: the longest matching substring, then prefix, then suffix (None drops)."""

    orig_to_new_substr: WeightsMapping = field(default_factory=dict)
    orig_to_new_prefix: WeightsMapping = field(default_factory=dict)
    orig_to_new_suffix: WeightsMapping = field(default_factory=dict)

    def _map_name(self, key: str) -> str | None:
        for old, new in sorted(self.orig_to_new_substr.items(), key=lambda kv: -len(kv[0])):
            if old in key:
                if new is None:
                    return None
                key = key.replace(old, new, 1)
                break
        for old, new in sorted(self.orig_to_new_prefix.items(), key=lambda kv: -len(kv[0])):
            if key.startswith(old):
                if new is None:
                    return None
                key = new + key[len(old):]
                break
        for old, new in sorted(self.orig_to_new_suffix.items(), key=lambda kv: -len(kv[0])):
            if key.endswith(old):
                if new is None:
                    return None
                key = key[: len(key) - len(old)] + new
                break
        return key

    def apply_list(self, values: list[str]) -> list[str]:
        return [out for name in values if (out := self._map_name(name)) is not None]
