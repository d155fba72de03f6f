"""Accuracy against the live endpoint: GSM8K-style questions, few-shot, greedy, with a confidence interval.

A dataset is a JSON list of ``{question, answer, solution}`` (``solution``: the worked answer a few-shot example
shows, needed by the first ``few_shot`` items). :func:`load_dataset` reads and checks it; ``agent run`` calls it
before a run exists (``agent/run.py``: ``preflight``), so a dataset that is missing, not a regular file, over
``tasks/limits.py``'s ``DATASET_BYTES`` or not such a list is refused in one line that quotes none of it.
"""

from __future__ import annotations

import json
import math
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import Field

from sandboxes.twin.safe_input import InputFileError, read_text
from tasks.limits import DATASET_BYTES

from .base import ToolInput, ToolResult, tool
from .context import ToolContext

REPO_ROOT = Path(__file__).resolve().parents[1]
_ANSWER = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def extract_answer(text: str) -> str | None:
    """The ``#### N`` answer, else the last number in the text (commas dropped)."""
    m = _ANSWER.search(text)
    found = m.group(1) if m else (_NUMBER.findall(text) or [None])[-1]
    return found.replace(",", "").rstrip(".") if found else None


def _same(a: str | None, b: object) -> bool:
    try:
        return a is not None and abs(float(a) - float(str(b).replace(",", ""))) < 1e-6
    except ValueError:
        return False


class DatasetError(ValueError):
    """An eval dataset that cannot be used; the message is one line and quotes nothing of the file."""


def load_dataset(path: str | Path, few_shot: int = 0) -> list[dict]:
    """The questions of an eval dataset: a regular file of at most ``DATASET_BYTES``, a JSON list of objects with
    a ``question`` (text) and an ``answer`` (a number, or a text holding one), the first ``few_shot`` with a
    ``solution`` (text), and at least one question after them. Raises :class:`DatasetError`."""
    try:
        problems = json.loads(read_text(path, DATASET_BYTES))
    except InputFileError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    except json.JSONDecodeError as exc:  # names the place, not the text
        raise DatasetError(f"{path}: is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise DatasetError(f"{path}: is not valid here: nested too deeply") from None
    if not isinstance(problems, list):
        raise DatasetError(f"{path}: not a JSON list of questions (a list of {{question, answer, solution}})")
    for i, p in enumerate(problems):
        if not isinstance(p, dict):
            raise DatasetError(f"{path}: item {i} is not an object with a question and an answer")
        if not isinstance(p.get("question"), str) or not p["question"].strip():
            raise DatasetError(f"{path}: item {i} has no 'question' (a text)")
        answer = p.get("answer")
        if isinstance(answer, bool) or not isinstance(answer, int | float | str) or (
                isinstance(answer, str) and extract_answer(answer) is None):  # fmt: skip
            raise DatasetError(f"{path}: item {i} has no 'answer' (a number)")
        if i < few_shot and not isinstance(p.get("solution"), str):
            raise DatasetError(f"{path}: item {i} has no 'solution' (a text), which a few-shot example shows")
    if len(problems) <= few_shot:
        raise DatasetError(f"{path}: {len(problems)} item(s), but {few_shot} few-shot examples and at least one "
                           "question are needed")  # fmt: skip
    return problems


def _ask(url: str, model: str, prompt: str, max_tokens: int) -> str:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
                       "max_tokens": max_tokens}).encode()  # fmt: skip
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]


class EvalInput(ToolInput):
    suite: str = Field(description="an eval suite from the task, e.g. gsm8k")
    n: int | None = Field(None, gt=0, description="number of questions (default: the suite's)")


class EvalResult(ToolResult):
    suite: str
    n: int = 0
    correct: int = 0
    accuracy: float = 0.0
    ci_low: float = 0.0
    ci_high: float = 0.0
    baseline: float | None = None
    delta: float | None = None
    within_tolerance: bool | None = None


@tool
def run_eval(ctx: ToolContext, args: EvalInput) -> EvalResult:
    """Measure accuracy on the live server (few-shot, greedy) with a 95 % interval, compared with the baseline."""
    if ctx.server is None:
        return EvalResult(ok=False, suite=args.suite, summary="no server is up: launch_server first")
    spec = ctx.task.evals.get(args.suite)
    if spec is None:
        return EvalResult(ok=False, suite=args.suite, summary=f"unknown eval suite (known: {', '.join(ctx.task.evals)})")
    try:
        problems = load_dataset(REPO_ROOT / spec.dataset, spec.few_shot)
    except DatasetError as exc:  # changed since the run started (agent run checked it)
        return EvalResult(ok=False, suite=args.suite, summary=f"eval dataset: {exc}")
    shots = problems[: spec.few_shot]
    questions = problems[spec.few_shot : spec.few_shot + (args.n or spec.n)]
    header = "".join(f"Question: {p['question']}\nAnswer: {p['solution']}\n\n" for p in shots)
    url = ctx.server.handle.base_url + "/v1/chat/completions"
    model = ctx.server.info.get("served_model_name") or ctx.task.model.name
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda p: _ask(url, model, f"{header}Question: {p['question']}\nAnswer:", spec.max_tokens),
                                questions))  # fmt: skip
    correct = sum(_same(extract_answer(a), p["answer"]) for a, p in zip(answers, questions, strict=True))
    n = len(questions)
    acc = correct / n if n else 0.0
    lo, hi = wilson_interval(correct, n)
    baseline = None
    if ctx.task.accuracy and ctx.task.accuracy.suite == args.suite:
        if isinstance(ctx.task.accuracy.baseline, float):
            baseline = ctx.task.accuracy.baseline
        else:
            if ctx.baseline_accuracy is None:
                ctx.baseline_accuracy = acc
            baseline = ctx.baseline_accuracy
    delta = acc - baseline if baseline is not None else None
    within = delta >= -ctx.task.accuracy.max_drop if delta is not None and ctx.task.accuracy else None
    return EvalResult(suite=args.suite, n=n, correct=correct, accuracy=acc, ci_low=lo, ci_high=hi, baseline=baseline,
                      delta=delta, within_tolerance=within,
                      summary=f"{args.suite}: {acc:.3f} [{lo:.3f}, {hi:.3f}] on {n}"
                      + (f", {delta:+.3f} vs baseline {baseline:.3f}" if delta is not None else ""))  # fmt: skip
