"""The Docker tests' one gate: without a Docker engine (or the image a test needs) they skip, except in CI, where
they must run (``CI`` set: the missing engine or image fails the test in one line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

TWIN_IMAGE = "dayzero-twin:latest"
DOCKER_TASK = Path(__file__).resolve().parents[1] / "tasks" / "glm52_mi355x_docker.yaml"


def twin_sandbox() -> dict:
    """The shipped Docker task's ``sandbox`` block: the twin's image, no devices, its cache mounted across containers
    (as a user runs it: a test that starts its own containers starts them so)."""
    return yaml.safe_load(DOCKER_TASK.read_text())["sandbox"]


def docker_or_skip(image: str | None = TWIN_IMAGE) -> None:
    """Skip without a Docker engine or ``image`` (None: the engine alone is needed), except in CI."""
    from sandboxes.docker import docker_available

    why = docker_available()
    if why is None and image is not None:
        import docker

        try:
            docker.from_env().images.get(image)
        except docker.errors.ImageNotFound:
            why = f"image {image} not built (agent twin image)"
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Docker tests: {why}")
        pytest.skip(f"Docker tests skipped: {why}")
