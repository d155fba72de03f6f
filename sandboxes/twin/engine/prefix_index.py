"""Which prompt blocks a cache has seen: chained block hashes in least-recently-used order.

The HTTP layer's stand-in radix cache (``http_api``) and each live DP rank (``live_scheduler``) keep one. Not
thread-safe: its owner locks it.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_BLOCKS = 1 << 17  # blocks remembered; the least recently used go first


class BlockIndex:
    def __init__(self, max_blocks: int = MAX_BLOCKS) -> None:
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._max = max_blocks

    def match_and_insert(self, keys: list[bytes]) -> tuple[int, bytes | None]:
        """(how many leading ``keys`` were already seen, the last of them); then remember them all as just used."""
        hit = 0
        for key in keys:
            if key not in self._blocks:
                break
            hit += 1
        for key in keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self._max:
            self._blocks.popitem(last=False)
        return hit, keys[hit - 1] if hit else None

    def clear(self) -> None:
        self._blocks.clear()
