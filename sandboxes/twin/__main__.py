"""The twin's command line: ``python -m sandboxes.twin <command>``.

Commands:
  scenarios                                      list the bundled scenario names
  materialize --scenario NAME|PATH --dest DIR    write a workspace (checkpoint metadata + SGLang excerpt)
  scenario --config CONFIG [--index INDEX] [--quantization QC] [--draft-config DRAFT] --hardware mi355x|mi300x
           [--release V] -o OUT
                                                 write a scenario for any model from its real config.json
  walkthrough                                    run the walk-through in docs/twin.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from . import scenario as scenario_mod


def _cmd_scenarios(args: argparse.Namespace) -> int:
    for name in scenario_mod.available():
        try:
            desc = scenario_mod.load(name).description
        except scenario_mod.ScenarioError as exc:
            desc = f"(invalid: {exc})"
        print(f"{name}\t{desc}")
    return 0


def _cmd_materialize(args: argparse.Namespace) -> int:
    from .workspace.materialize import MaterializeError, human_bytes, materialize

    try:
        result = materialize(args.scenario, args.dest, force=args.force)
    except (MaterializeError, scenario_mod.ScenarioError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"# {result.simulated}: workspace for scenario at {result.scenario_copy}")
    print(f"source: {result.provenance}")
    print(f"model:  {result.model_dir}  ({result.num_params} tensors, {human_bytes(result.total_bytes)} of weights)")
    print(f"sglang: {result.sglang_root}")
    return 0


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def _setup_scenarios(p: argparse.ArgumentParser) -> None:
    pass


def _setup_materialize(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default=scenario_mod.DEFAULT_SCENARIO, help="scenario name or YAML path")
    p.add_argument("--dest", required=True, help="workspace directory to create")
    p.add_argument("--force", action="store_true", help="overwrite the workspace parts of a non-empty DIR")


def _cmd_walkthrough(args: argparse.Namespace) -> int:
    from .walkthrough import run

    return run()


def _setup_scenario(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="the model's config.json")
    p.add_argument("--index", help="the checkpoint's model.safetensors.index.json (or a name<TAB>shape<TAB>dtype listing)")
    p.add_argument("--index-partial", action="store_true",
                   help="the index is another checkpoint's (a sibling's, a partial listing): its spelling only")
    p.add_argument("--quantization", help="a published quantization_config (JSON) replacing config.json's own")
    p.add_argument("--draft-config", help="the config.json of a separate draft checkpoint (e.g. an EAGLE3 head)")
    p.add_argument("--hardware", required=True, choices=sorted(scenario_mod.hardware.known()))
    p.add_argument("--release", default="0.5.12", help="the SGLang release the scenario pins")
    p.add_argument("--name", help="the served model name (default: from the config's folder)")
    p.add_argument("-o", "--output", required=True, help="the scenario YAML to write")


def _cmd_scenario(args: argparse.Namespace) -> int:
    """0: written, loads as is; 3: written with open questions (each named on stderr); 2: refused."""
    from pathlib import Path

    from .scenario.generate import GenerateError, generate

    try:
        result = generate(Path(args.config), Path(args.output), index_path=Path(args.index) if args.index else None,
                          quantization_path=Path(args.quantization) if args.quantization else None,
                          hardware=args.hardware, release=args.release, name=args.name,
                          draft_config_path=Path(args.draft_config) if args.draft_config else None,
                          index_partial=args.index_partial)  # fmt: skip
    except GenerateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {result.path}: {result.target_class}" + (f", draft {result.draft_class}" if result.draft_class else ""))
    print(f"  {result.kinds}; checkpoint {result.tensors} tensors, {result.bytes / 1e9:.2f} GB")
    if args.index and not args.index_partial:
        same = not result.index_missing and not result.index_extra
        print(f"  against the index: {'every name the same' if same else 'differs'}"
              + (f"; {len(result.index_missing)} of its names the release's loaders do not take (e.g. "
                 f"{result.index_missing[0]})" if result.index_missing else "")
              + (f"; {len(result.index_extra)} names it lacks (e.g. {result.index_extra[0]})" if result.index_extra
                 else ""))  # fmt: skip
    for q in result.questions:
        print(f"question: {q}", file=sys.stderr)
    return 3 if result.questions else 0


COMMANDS["walkthrough"] = ("run docs/twin.md: materialise, crash, patch, benchmark", lambda p: None, _cmd_walkthrough)
COMMANDS["scenarios"] = ("list the bundled scenarios", _setup_scenarios, _cmd_scenarios)
COMMANDS["materialize"] = ("write a twin workspace", _setup_materialize, _cmd_materialize)
COMMANDS["scenario"] = ("write a scenario from a model's real config.json", _setup_scenario, _cmd_scenario)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sandboxes.twin",
                                     description="dayzero digital twin (a simulated SGLang ROCm node)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, setup, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        setup(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args))


if __name__ == "__main__":
    sys.exit(main())
