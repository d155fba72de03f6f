"""What an SGLang release changes in performance, as data beside the release pin: ``data/releases/<version>.yaml``.

The twin's calibration was made on 0.5.12, so 0.5.12's profile scales nothing; a later release's profile says, with
its sources (the release's own code, found by diffing the wheels the twin materialises, and public measurements),
what it changes: which speculative worker and scheduler a configuration runs (``spec_v2_max_topk``), and
``effects`` that scale calibrated constants (``Calibration`` field -> factor). A change whose size nothing public
measures is listed with no factor: the twin does not guess it.

``load(version)`` reads the profile of ``version``, or of the newest release before it that has one (a release
with no file of its own is taken to change nothing its predecessor did not); a version older than every profile
gets the oldest. Standard library and PyYAML only.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import shipped_yaml

RELEASES_DIR = Path(__file__).resolve().parents[1] / "data" / "releases"


@dataclass(frozen=True)
class Effect:
    what: str
    source: str
    calibration: tuple[tuple[str, float], ...] = ()  # Calibration field -> factor against the baseline


@dataclass(frozen=True)
class ReleaseProfile:
    version: str
    # the largest --speculative-eagle-topk the overlap scheduler's speculative worker (spec v2) runs; None: any
    spec_v2_max_topk: int | None = 1
    effects: tuple[Effect, ...] = ()
    path: str = ""

    def overlaps_speculation(self, disable_overlap_schedule: bool, topk: int) -> bool:
        """Whether a speculative configuration runs with the overlap scheduler on this release.

        ``disable_overlap_schedule`` is what the twin's flag resolution (0.5.12's ``server_args``) made of it: that
        release turns the overlap scheduler off for a tree draft (top-k above 1). A release whose spec v2 runs trees
        keeps it on for them; any other reason to run without overlap (the flag itself, SGLANG_ENABLE_SPEC_V2=0,
        a hybrid model's mamba scheduler) holds on every release."""
        if not disable_overlap_schedule:
            return True
        tree_only = topk > 1
        return tree_only and (self.spec_v2_max_topk is None or topk <= self.spec_v2_max_topk)

    def calibrate(self, calibration: Any) -> Any:
        """``calibration`` (a ``scenario.Calibration``) with this release's effects applied."""
        changes: dict[str, Any] = {}
        for effect in self.effects:
            for name, factor in effect.calibration:
                value = changes.get(name, getattr(calibration, name))
                changes[name] = {k: v * factor for k, v in value.items()} if isinstance(value, dict) else value * factor
        return dataclasses.replace(calibration, **changes) if changes else calibration


def _version_key(version: str) -> tuple[int, ...]:
    out = []
    for piece in str(version).split("+")[0].replace(".post", ".").split("."):
        digits = "".join(c for c in piece if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _read(path: Path) -> ReleaseProfile:
    data = shipped_yaml.load(path) or {}
    schedulers = data.get("schedulers") or {}
    effects = tuple(
        Effect(what=str(e["what"]), source=str(e["source"]),
               calibration=tuple((str(k), float(v)) for k, v in (e.get("calibration") or {}).items()))
        for e in data.get("effects") or ()
    )  # fmt: skip
    return ReleaseProfile(version=str(data["version"]), spec_v2_max_topk=schedulers.get("spec_v2_max_topk", 1),
                          effects=effects, path=str(path))  # fmt: skip


@functools.lru_cache(maxsize=16)
def load(version: str) -> ReleaseProfile:
    profiles = sorted((_read(p) for p in RELEASES_DIR.glob("*.yaml")), key=lambda r: _version_key(r.version))
    if not profiles:
        return ReleaseProfile(version=str(version))
    older = [r for r in profiles if _version_key(r.version) <= _version_key(version)]
    return older[-1] if older else profiles[0]
