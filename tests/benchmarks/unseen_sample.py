"""Build a scenario for every model of the unseen sample (``tests/fixtures/unseen_configs``) with the documented
command, and print how each did against its published checkpoint index (issue 39).

    python -m tests.benchmarks.unseen_sample              # every folder, two at a time
    python -m tests.benchmarks.unseen_sample --jobs 1 google--medgemma-27b-it

Per model: what the documented command (``python -m sandboxes.twin scenario --config <folder>/config.json
[--index <folder>/model.safetensors.index.json] --hardware mi355x``) did (built, or refused in one line with the
release's reason), the layer kinds the release built, the checkpoint's tensors and bytes, and, where the folder holds
the published index, the names the twin's checkpoint lacks or adds and its bytes against the index's ``total_size``.
Nothing here is fitted to these models: they are a test set (``tests/twin/test_unseen_sample.py`` asserts on it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "unseen_configs"
INDEX = "model.safetensors.index.json"


@dataclass
class Outcome:
    folder: str
    architecture: str = ""
    built: bool = False
    message: str = ""  # the refusal (one line), or the error a build must never end with
    kinds: str = ""
    tensors: int = 0
    bytes: int = 0
    index_total: int | None = None  # the published index's metadata.total_size
    index_missing: list[str] = field(default_factory=list)
    index_extra: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def byte_ratio(self) -> float | None:
        return self.bytes / self.index_total if self.index_total and self.built else None


def folders() -> list[str]:
    return sorted(p.parent.name for p in SAMPLE.glob("*/config.json"))


def build(folder: str, out_dir: Path | None = None) -> Outcome:
    """The documented command's work for one folder (``scenario.generate``, as the CLI calls it)."""
    from sandboxes.twin.scenario.generate import GenerateError, generate

    src = SAMPLE / folder
    config = json.loads((src / "config.json").read_text())
    archs = config.get("architectures") or (config.get("text_config") or {}).get("architectures") or [""]
    out = Outcome(folder, architecture=str(archs[0]))
    index = src / INDEX if (src / INDEX).is_file() else None
    if index is not None:
        total = (json.loads(index.read_text()).get("metadata") or {}).get("total_size")
        out.index_total = int(total) if total else None
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        dest = (out_dir or Path(tmp)) / f"{folder}.yaml"
        try:
            gen = generate(src / "config.json", dest, index_path=index, hardware="mi355x")
        except GenerateError as exc:
            out.message = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported as the defect it is
            out.message = f"UNEXPECTED {type(exc).__name__}: {exc}"
        else:
            out.built = True
            out.message = "; ".join(gen.questions)
            out.kinds, out.tensors, out.bytes = gen.kinds, gen.tensors, gen.bytes
            out.index_missing, out.index_extra = gen.index_missing, gen.index_extra
    out.seconds = time.perf_counter() - t
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", help="folders of the sample (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the outcomes here")
    args = ap.parse_args(argv)
    names = args.folders or folders()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(build, names))
    for o in outcomes:
        state = ("asks   " if o.message else "built  ") if o.built else "refused"
        line = f"{state} {o.folder:58s} {o.seconds:5.1f}s  "
        if o.built:
            line += f"{o.kinds}; {o.tensors} tensors, {o.bytes / 1e9:.2f} GB"
            if o.index_total:
                line += (f"  | index: bytes x{o.byte_ratio:.3f}, {len(o.index_missing)} missing, "
                         f"{len(o.index_extra)} extra")  # fmt: skip
        else:
            line += o.message
        print(line)
    built = sum(o.built for o in outcomes)
    with_index = [o for o in outcomes if o.built and o.index_total]
    exact = sum(not o.index_missing and not o.index_extra and abs((o.byte_ratio or 0) - 1) < 0.01 for o in with_index)
    unexpected = [o.folder for o in outcomes if o.message.startswith("UNEXPECTED")]
    print(f"\n{len(outcomes)} models: {built} built, {len(outcomes) - built} refused"
          f" ({len(unexpected)} not in one line: {', '.join(unexpected) or 'none'});"
          f" {exact} of {len(with_index)} built with a published index match its names and bytes (within 1 %)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
