"""The ``agent`` command line.

Today it drives the MI355X digital twin (``agent twin ...``); ``agent run TASK`` arrives with the agent loop.
"""

from __future__ import annotations

import typer

app = typer.Typer(help="dayzero: bring a new model up on new accelerators, by an agent.", no_args_is_help=True)
twin_app = typer.Typer(help="The MI355X digital twin (a simulated SGLang ROCm node).", no_args_is_help=True)
app.add_typer(twin_app, name="twin")


@twin_app.command("scenarios")
def twin_scenarios() -> None:
    """List the bundled twin scenarios."""
    from sandboxes.twin.__main__ import main

    raise typer.Exit(main(["scenarios"]))


@twin_app.command("materialize")
def twin_materialize(dest: str, scenario: str = "glm52_mi355x", force: bool = False) -> None:
    """Write a twin workspace (checkpoint metadata and the SGLang source excerpt) to DEST."""
    from sandboxes.twin.__main__ import main

    raise typer.Exit(main(["materialize", "--scenario", scenario, "--dest", dest] + (["--force"] if force else [])))


@twin_app.command("walkthrough")
def twin_walkthrough() -> None:
    """Run docs/twin.md: materialise, crash, patch, relaunch, tune and benchmark."""
    from sandboxes.twin.walkthrough import run

    raise typer.Exit(run())
