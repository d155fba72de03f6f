"""Where independent trials run: one after another here (``inline``), or as Ray tasks across a cluster.

An executor maps a picklable function over picklable jobs and returns the results in job order. The Ray
executor asks, for each job, for the custom resource ``<resource>: <gpus>`` (e.g. ``mi355x_gpu: 4``), so a node
runs as many trials at once as its GPUs hold; without an address it starts a local Ray instance whose one node
has the task's GPUs. The agent's graph stays the only writer of state, trace and git: jobs return results.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Executor(Protocol):
    name: str

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], gpus: Sequence[int]) -> list[Any]: ...

    def close(self) -> None: ...


class InlineExecutor:
    name = "inline"

    def map(self, fn, jobs, gpus):
        return [fn(job) for job in jobs]

    def close(self) -> None:
        pass


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None, *, resource: str = "gpu", node_gpus: int = 8, nodes: int = 1):
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # bind to loopback, not a guessed address
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a cluster on loopback, reached without a token
        import ray

        self.ray = ray
        self.resource = resource
        if address:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        else:
            # a local instance is one machine; ``nodes`` > 1 gives it the GPUs of that many nodes (for benchmarks)
            ray.init(num_cpus=max(os.cpu_count() or 2, 2), resources={resource: node_gpus * nodes}, include_dashboard=False,
                     object_store_memory=200 * 1024**2, ignore_reinit_error=True, log_to_driver=False)  # fmt: skip

    def map(self, fn, jobs, gpus):
        remote = self.ray.remote(fn)
        refs = [remote.options(resources={self.resource: g}, num_cpus=0.5).remote(job) for job, g in zip(jobs, gpus, strict=True)]
        return self.ray.get(refs)

    def close(self) -> None:
        self.ray.shutdown()


def make_executor(name: str, address: str | None, resource: str, node_gpus: int) -> Executor:
    if name == "inline":
        return InlineExecutor()
    if name == "ray":
        return RayExecutor(None if address in (None, "", "local") else address, resource=resource, node_gpus=node_gpus)
    raise ValueError(f"unknown executor {name!r} (inline, ray)")
