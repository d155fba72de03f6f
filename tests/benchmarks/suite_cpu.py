"""Where the suite's CPU goes: each test's own and its children's CPU time (``getrusage``), summed per file.

    python -m tests.benchmarks.suite_cpu [PYTEST ARGS]      # the whole suite by default

The suite is CPU-bound on two cores (its wall time follows its CPU seconds, not its waits), so this, not
``--durations``, says which tests to make cheaper. It runs pytest with this module as a plugin (each worker writes
one line per test into a folder), then prints the files by CPU seconds and the 25 costliest tests. The CPU of a
test's children counts once they are reaped (an agent run's engines are, by the run). The session-wide shared runs
(``tests/shared_runs.py``) build outside any test and are not counted.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.agent_process import forked_cpu

_OUT = "DAYZERO_SUITE_CPU_DIR"
_file = None


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked_cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _file
    folder = os.environ.get(_OUT)
    if not folder:
        yield
        return
    if _file is None:
        _file = open(Path(folder) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a")  # noqa: SIM115
    start = _cpu()
    yield
    _file.write(json.dumps({"test": item.nodeid, "cpu": _cpu() - start}) + "\n")
    _file.flush()


def main(args: list[str]) -> int:
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, _OUT: folder}
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "tests.benchmarks.suite_cpu", *args],
                               env=env)  # fmt: skip
        rows = [json.loads(line) for f in Path(folder).glob("*.jsonl") for line in f.read_text().splitlines()]
    by_file: collections.Counter[str] = collections.Counter()
    for r in rows:
        by_file[r["test"].split("::")[0]] += r["cpu"]
    print(f"\n{len(rows)} tests, {sum(by_file.values()):.0f} CPU-seconds (own and reaped children)")
    for name, cpu in by_file.most_common():
        print(f"{cpu:8.1f}  {name}")
    print("\nthe 25 costliest tests")
    for r in sorted(rows, key=lambda r: -r["cpu"])[:25]:
        print(f"{r['cpu']:8.1f}  {r['test']}")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
