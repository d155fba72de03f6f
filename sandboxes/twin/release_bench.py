"""``python -m sandboxes.twin.release_bench``: the pinned release's own ``bench_serving`` against a live twin.

    python -m sandboxes.twin.release_bench --sglang-root WS/sglang --backend sglang --base-url URL \\
        --dataset-name random-ids --random-input-len 1024 --random-output-len 256 --num-prompts 64 \\
        --max-concurrency 64 --output-file out.jsonl

Every flag but ``--sglang-root`` is the release's: its ``bench_serving.py`` from the workspace runs as written
(``release_client.imports`` makes its package importable without the engine's libraries), sends real HTTP
requests and measures in wall time, as on a node. The twin's server answers them in scaled wall time
(``TWIN_TIME_SCALE``, which ``/server_info`` reports), so around the client this program

* sends a ``--request-rate`` given in simulated requests per second at that rate in wall time;
* gives the client the checkpoint's tokenizer, or the stand-in when the workspace has none
  (``release_client.tokenizer``), unless ``--tokenizer`` names one; never the network (``HF_HUB_OFFLINE``);
* converts the record the client appended to ``--output-file`` to simulated time (``release_client.clock``;
  the wall figures stay under ``wall``) and marks it ``simulated``, with ``client`` (the release's file, the
  tokenizer) and ``host_lag_ms``: how late, on average, the server delivered a step's tokens because the host
  could not keep up (in simulated ms; a run whose lag is a noticeable share of its inter-token gaps measured the
  host, and says so).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import urllib.request
from pathlib import Path
from typing import Any

from .release_client import clock, imports, tokenizer

LAG_SHARE = 0.5  # a host lag above this share of the median inter-token gap is reported as measuring the host


class ReleaseBenchError(RuntimeError):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sandboxes.twin.release_bench", add_help=False,
                                description="The release's bench_serving against a live twin.")  # fmt: skip
    p.add_argument("--sglang-root", required=True, help="the workspace's SGLang checkout (holds python/sglang)")
    # the release's flags this program reads (all of them are passed on)
    p.add_argument("--base-url", default=None)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--request-rate", type=float, default=None)
    p.add_argument("--output-file", default=None)
    p.add_argument("--tokenizer", default=None)
    return p


def base_url(args: argparse.Namespace) -> str:
    if args.base_url:
        return args.base_url.rstrip("/")
    host = "127.0.0.1" if args.host in ("0.0.0.0", "") else args.host
    return f"http://{host}:{args.port or 30000}"


def _get(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 (the server under test)
            return json.loads(resp.read())
    except (OSError, ValueError) as exc:
        raise ReleaseBenchError(f"cannot read {url}: {exc}") from None


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value (``--flag value`` or ``--flag=value``)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == flag:
            i += 2
            continue
        if not argv[i].startswith(flag + "="):
            out.append(argv[i])
        i += 1
    return out


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag`` set to ``value`` (replaced where given, appended where not)."""
    return [*_without(argv, flag), flag, value]


def run(argv: list[str]) -> int:
    args, _ = _parser().parse_known_args(argv)
    passed = _without(argv, "--sglang-root")  # every other flag is the release's
    python_root = Path(args.sglang_root) / "python"
    entry = python_root / "sglang" / "bench_serving.py"
    if not entry.is_file():
        raise ReleaseBenchError(f"{entry} does not exist: --sglang-root must name an SGLang checkout")
    if not args.output_file:
        raise ReleaseBenchError("give --output-file: the record the client writes there is converted to the "
                                "twin's simulated time")  # fmt: skip
    url = base_url(args)
    info = _get(url + "/server_info")
    twin = info.get("twin") or {}
    if not info.get("simulated") or "live_scheduler" not in twin:
        raise ReleaseBenchError(f"the server at {url} is not a live dayzero twin: run the release's own "
                                "bench_serving against a real engine directly")  # fmt: skip
    scale = float(twin.get("time_scale") or 0.0)
    if scale <= 0:
        raise ReleaseBenchError("the twin runs with TWIN_TIME_SCALE=0 (no waiting): a wall-clock client measures "
                                "only the host. Launch it with a time scale the host can follow (e.g. 0.2)")  # fmt: skip
    if args.request_rate is not None:
        passed = _with(passed, "--request-rate", repr(clock.wall_rate(args.request_rate, scale)))
    described: dict[str, Any] = {"bench_serving": str(entry)}
    if args.tokenizer is None:
        model_info = _get(url + "/model_info")
        model_dir = Path(model_info.get("tokenizer_path") or model_info.get("model_path") or ".")
        tok_dir, stand_in = tokenizer.client_tokenizer(model_dir)
        passed = _with(passed, "--tokenizer", str(tok_dir))
        described["tokenizer"] = str(tok_dir)
        if stand_in:
            described["tokenizer_stand_in"] = ("the twin's stand-in: the checkpoint's vocabulary size, 4 characters "
                                               "per token, no special tokens")  # fmt: skip
    else:
        described["tokenizer"] = args.tokenizer
    out = Path(args.output_file)
    lines_before = len(out.read_text().splitlines()) if out.exists() else 0
    before = twin["live_scheduler"]

    finder = imports.install(python_root)
    saved_argv = sys.argv
    sys.argv = [str(entry), *passed]
    code = 0
    try:
        runpy.run_path(str(entry), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
    if finder.fallbacks:
        described["engine_modules_as_definitions"] = dict(sorted(finder.fallbacks.items()))
    lines = out.read_text().splitlines() if out.exists() else []
    if len(lines) <= lines_before:
        if code == 0:
            raise ReleaseBenchError("the release's bench_serving wrote no record (see its output above)")
        return code
    after = _get(url + "/server_info")["twin"]["live_scheduler"]
    record = clock.to_simulated(json.loads(lines[-1]), scale, args.request_rate)
    steps = max(int(after["steps"]) - int(before["steps"]), 1)
    lag_ms = (float(after["lag_total_s"]) - float(before["lag_total_s"])) / steps / scale * 1000
    record.update(simulated=True, time_scale=scale, client=described, host_lag_ms=round(lag_ms, 3))
    itl = float(record.get("median_itl_ms") or 0.0)
    if itl > 0 and lag_ms > LAG_SHARE * itl:
        record["host_lag_warning"] = (f"the host delivered steps {lag_ms:.2f} ms (simulated) late on average, "
                                      f"{lag_ms / itl:.0%} of the median inter-token gap: these figures measure "
                                      "the host as much as the twin; use a larger TWIN_TIME_SCALE")  # fmt: skip
    lines[-1] = json.dumps(record)
    out.write_text("\n".join(lines) + "\n")
    _print_summary(record)
    return code


def _print_summary(record: dict[str, Any]) -> None:
    print("=" * 16 + " dayzero twin: the record in simulated time " + "=" * 16)
    print(f"time scale (wall s per simulated s): {record['time_scale']:g}; host lag {record['host_lag_ms']:.2f} ms")
    for key in ("duration", "request_throughput", "output_throughput", "median_ttft_ms", "median_tpot_ms",
                "median_itl_ms", "median_e2e_latency_ms", "concurrency", "accept_length"):  # fmt: skip
        value = record.get(key)
        if isinstance(value, int | float):
            print(f"{key + ':':<32}{value:.2f}")
    if record.get("host_lag_warning"):
        print("warning: " + record["host_lag_warning"])


def main(argv: list[str] | None = None) -> None:
    # the client must not wait for a hub it cannot reach (read when huggingface_hub is first imported)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        code = run(list(sys.argv[1:] if argv is None else argv))
    except ReleaseBenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
