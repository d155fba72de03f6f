"""Between the twin's two clocks: what a wall-clock client asks and measures, in simulated time.

A live twin runs ``time_scale`` wall seconds per simulated second (``TWIN_TIME_SCALE``). The release's client
measures in wall time, so its record is converted, field by field from the units the record's keys carry:

* seconds and milliseconds (``duration``, ``*_ms``, the per-request ``ttfts`` and ``itls``): divided by the scale;
* rates (``*_throughput``, ``max_output_tokens_per_s``): multiplied by it;
* counts and ratios (tokens, ``completed``, ``concurrency``, ``accept_length``): unchanged.

A request rate the caller gives in simulated requests per second is sent at ``rate / time_scale`` per wall second
(``wall_rate``). The record keeps the wall figures under ``wall`` (what the client itself printed).
"""

from __future__ import annotations

import math
from typing import Any

SECONDS = ("duration",)
SECOND_LISTS = ("ttfts", "itls")  # per request: a time, or a list of gaps
RATES = ("max_output_tokens_per_s",)


def is_time(key: str) -> bool:
    return key in SECONDS or key.endswith("_ms")


def is_rate(key: str) -> bool:
    return key.endswith("_throughput") or key in RATES


def wall_rate(rate: float, time_scale: float) -> float:
    """Requests per wall second for ``rate`` simulated requests per second (inf stays inf: a burst)."""
    return rate if math.isinf(rate) else rate / time_scale


def _slower(value: Any, scale: float) -> Any:
    if isinstance(value, list):
        return [_slower(v, scale) for v in value]
    return value / scale if isinstance(value, int | float) and not isinstance(value, bool) else value


def to_simulated(record: dict[str, Any], time_scale: float, request_rate: float | None) -> dict[str, Any]:
    """The client's wall-clock ``record`` in simulated time (``request_rate``: the simulated rate asked)."""
    out = dict(record)
    wall: dict[str, Any] = {}
    for key, value in record.items():
        if not isinstance(value, int | float | list) or isinstance(value, bool) or value is None:
            continue
        if is_time(key) or key in SECOND_LISTS:
            wall[key] = value
            out[key] = _slower(value, time_scale)
        elif is_rate(key) and isinstance(value, int | float):
            wall[key] = value
            out[key] = value * time_scale
    if request_rate is not None and "request_rate" in record:
        wall["request_rate"] = record["request_rate"]
        out["request_rate"] = request_rate
    out["wall"] = wall
    return out
