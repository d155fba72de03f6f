"""CPU seconds of the twin's engine processes (issue 26: the suite is CPU-bound on two cores, and an agent run starts
tens of ``launch_server`` and ``bench_serving`` processes). Prints a table; asserts nothing.

    python -m tests.benchmarks.engine_process_cpu [N]      # N runs of each (default 5)

Each row is the mean user+sys CPU of one child process, read from ``getrusage(RUSAGE_CHILDREN)`` after it was
waited for: each program's ``--help`` (its imports), one ``launch_server`` from start to its ready line to SIGTERM on a
materialised workspace (``TWIN_TIME_SCALE=0``: simulated time is not slept), and ``bench_serving`` runs against it
(a short production-workload run and a single-stream run, as an agent's screening and single-stream runs are).
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

READY = "The server is fired up and ready to roll!"
SCENARIO = "glm52_mi355x"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _env() -> dict[str, str]:
    here = str(Path(__file__).resolve().parents[2])  # the checkout this script is in: its twin is measured
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "TWIN_TIME_SCALE": "0", "PYTHONPATH": f"{here}{os.pathsep}{path}" if path else here}
    # bytecode is cached as on CI and in an agent's engine (a scrubbed environment): a shell that forbids writing
    # it would measure the compiler instead
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _measured(run: Callable[[], None]) -> float:
    before = _children_cpu()
    run()
    return _children_cpu() - before


def _help(module: str) -> Callable[[], None]:
    """``python -m MODULE --help``: the program's imports, as its own process makes them, and its parser."""
    def run() -> None:
        subprocess.run([sys.executable, "-m", module, "--help"], env=_env(), check=True, stdout=subprocess.DEVNULL)
    return run


def _bare() -> None:
    subprocess.run([sys.executable, "-c", "pass"], env=_env(), check=True)


class _Server:
    """One ``launch_server`` up to its ready line; stopped (SIGTERM) and reaped by ``stop``."""

    def __init__(self, ws: Path):
        self.port = _free_port()
        argv = [sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(ws / "model"),
                "--sglang-root", str(ws / "sglang"), "--tp-size", "8", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if READY in line:
                return
        raise RuntimeError(f"launch_server exited {self.proc.wait()} before its ready line")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=30)


BENCHES = {
    "bench_serving production (gsp 64 req)": ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "4",
                                              "--gsp-prompts-per-group", "16", "--gsp-system-prompt-len", "12000",
                                              "--gsp-question-len", "8000", "--gsp-output-len", "1000",
                                              "--request-rate", "2.4"],
    "bench_serving single stream (4 req)": ["--dataset-name", "random-ids", "--random-input-len", "10000",
                                            "--random-output-len", "1500", "--random-range-ratio", "1",
                                            "--num-prompts", "4", "--max-concurrency", "1"],
}


def _bench(port: int, flags: list[str], out: Path) -> Callable[[], None]:
    def run() -> None:
        argv = [sys.executable, "-m", "sandboxes.twin.bench_serving", "--backend", "sglang",
                "--base-url", f"http://127.0.0.1:{port}", "--output-file", str(out), *flags]
        subprocess.run(argv, env=_env(), check=True, stdout=subprocess.DEVNULL)
    return run


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rows: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        rows.setdefault(name, []).append(seconds)

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        subprocess.run([sys.executable, "-m", "sandboxes.twin", "materialize", "--scenario", SCENARIO, "--dest",
                        str(ws)], env=_env(), check=True, stdout=subprocess.DEVNULL)
        first = _Server(ws)  # fills the workspace's weights cache: the launches below are an agent's relaunches
        first.stop()
        for _ in range(n):
            add("python -c pass", _measured(_bare))
            for module in ("sandboxes.twin.launch_server", "sandboxes.twin.bench_serving"):
                add(f"{module.rsplit('.', 1)[1]} --help (its imports)", _measured(_help(module)))
            before = _children_cpu()
            server = _Server(ws)
            try:
                for name, flags in BENCHES.items():
                    add(name, _measured(_bench(server.port, flags, Path(tmp) / "out.jsonl")))
            finally:
                # the launch's CPU: its start, the two benchmarks' requests it answered, its stop
                server.stop()
                add("launch_server start, ready, SIGTERM", _children_cpu() - before - sum(
                    rows[name][-1] for name in BENCHES))
    print(f"{'process (' + str(n) + ' runs each)':<44} {'mean CPU s':>10} {'min':>7} {'max':>7}")
    for name, values in rows.items():
        print(f"{name:<44} {statistics.mean(values):>10.3f} {min(values):>7.3f} {max(values):>7.3f}")


if __name__ == "__main__":
    main()
