"""The twin's bundled arithmetic word problems and its deterministic "model answers" to them.

``data/arithmetic_problems.json`` holds 300 GSM8K-like problems (made once by ``data/make_problems.py``).
When a prompt contains one of them, the simulated model answers it: correctly for a stable, per-question
fraction of the questions (the accuracy of the served quantization), otherwise with a plausible wrong
integer. Nothing here is random at run time: the same question, accuracy and salt give the same text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "arithmetic_problems.json"

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: int
    solution: str  # short worked reasoning ending "#### <answer>"


def _normalise(text: str) -> str:
    return _WS.sub(" ", text).strip()


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Problem, ...]:
    raw = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return tuple(Problem(id=p["id"], question=p["question"], answer=int(p["answer"]), solution=p["solution"])
                 for p in raw)


@functools.lru_cache(maxsize=1)
def _index() -> tuple[tuple[str, Problem], ...]:
    return tuple((_normalise(p.question), p) for p in _load())


def load_problems() -> list[Problem]:
    """All bundled problems, in file order."""
    return list(_load())


def find_problem(text: str) -> Problem | None:
    """The bundled problem whose question occurs in ``text``; the last one if several do.

    Few-shot prompts carry worked examples before the question actually asked, so the question that starts
    latest in the text wins. Matching ignores differences in whitespace (runs of spaces, newlines, tabs).
    """
    if not text:
        return None
    norm = _normalise(text)
    best: Problem | None = None
    best_at = -1
    for question, problem in _index():
        at = norm.rfind(question)
        if at > best_at:
            best, best_at = problem, at
    return best


def _unit_hash(*parts: str) -> float:
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def is_correct(problem: Problem, accuracy: float, salt: str) -> bool:
    """Whether the simulated model answers ``problem`` correctly: a stable hash of (id, salt) < accuracy."""
    return _unit_hash(problem.id, salt) < accuracy


def wrong_answer(problem: Problem, salt: str) -> int:
    """A plausible wrong integer for ``problem`` (an off-by-one, a dropped step, a doubled term...)."""
    a = problem.answer
    candidates = [a + 1, a - 1, a + 2, a - 2, a + 10, a - 10, a * 2, a // 2, a + 5, a - 5, a * 10 // 9]
    pick = int(_unit_hash(problem.id, salt, "wrong") * len(candidates))
    for k in range(len(candidates)):
        value = candidates[(pick + k) % len(candidates)]
        if value != a and value >= 0:
            return value
    return a + 1


def answer_for(problem: Problem, accuracy: float, salt: str) -> str:
    """The simulated model's completion for ``problem``: worked steps, "The answer is N." and "#### N".

    Correct iff ``is_correct(problem, accuracy, salt)``; otherwise the last reasoning step arrives at a wrong
    integer (see ``wrong_answer``) and the final answer is that integer.
    """
    reasoning = problem.solution.rsplit("####", 1)[0].rstrip()
    value = problem.answer
    if not is_correct(problem, accuracy, salt):
        value = wrong_answer(problem, salt)
        lines = reasoning.split("\n")
        # replace the last occurrence of the true answer in the last step with the wrong one
        matches = list(re.finditer(rf"(?<![\d.]){problem.answer}(?![\d])", lines[-1]))
        if matches:
            m = matches[-1]
            lines[-1] = lines[-1][: m.start()] + str(value) + lines[-1][m.end():]
        else:
            lines.append(f"So the result is {value}.")
        reasoning = "\n".join(lines)
    return f"{reasoning}\nThe answer is {value}.\n#### {value}"
