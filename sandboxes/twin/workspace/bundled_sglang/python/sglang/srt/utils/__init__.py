# dayzero twin: a hand-written excerpt of SGLang 0.5.12's utilities (add_prefix only), used only when the real
# release could not be downloaded. Same path and behaviour; not SGLang's code.
# SPDX-License-Identifier: Apache-2.0


def add_prefix(name: str, prefix: str) -> str:
    """``prefix.name``, or ``name`` when there is no prefix (how modules get their weight names)."""
    return name if not prefix else f"{prefix}.{name}"
