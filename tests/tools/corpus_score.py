"""Score ``classify`` on the corpus of real crash logs (data/real_logs/SOURCES.yaml) and print the table.

    python -m tests.tools.corpus_score

A row per log: the labelled category, the category classify returned, and the labelled entities it got right. A
``summary`` label is a substring the summary must contain (the decisive line of a log with no fix); every other
label must be extracted exactly. A *confident wrong call* is a category other than the label and other than
``unknown``: the agent would act on a wrong diagnosis, which is worse than admitting it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tools.diagnose import Category, classify

DATA = Path(__file__).parent / "data" / "real_logs"
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]


def sources() -> list[dict]:
    return yaml.safe_load((DATA / "SOURCES.yaml").read_text())


@dataclass
class Row:
    file: str
    url: str
    expected: str
    got: str
    summary: str
    entities_right: list[str] = field(default_factory=list)
    entities_wrong: list[str] = field(default_factory=list)

    @property
    def category_ok(self) -> bool:
        return self.got == self.expected

    @property
    def confident_wrong(self) -> bool:
        return self.got != self.expected and self.got != "unknown"

    @property
    def ok(self) -> bool:
        return self.category_ok and not self.entities_wrong


def score_entry(entry: dict) -> Row:
    d = classify((DATA / entry["file"]).read_text(), timed_out=bool(entry.get("timed_out", False)))
    row = Row(entry["file"], entry["url"], entry["expected"]["category"], d.category, d.summary)
    for key, want in entry["expected"].items():
        if key == "category":
            continue
        right = want in d.summary if key == "summary" else getattr(d, key) == want
        (row.entities_right if right else row.entities_wrong).append(key)
    return row


def score() -> list[Row]:
    return [score_entry(e) for e in sources()]


def totals(rows: list[Row]) -> dict:
    n_entities = sum(len(r.entities_right) + len(r.entities_wrong) for r in rows)
    right_entities = sum(len(r.entities_right) for r in rows)
    return {
        "logs": len(rows),
        "category_right": sum(r.category_ok for r in rows),
        "category_pct": 100.0 * sum(r.category_ok for r in rows) / max(len(rows), 1),
        "entities": n_entities,
        "entities_right": right_entities,
        "entity_pct": 100.0 * right_entities / max(n_entities, 1),
        "confident_wrong": [(r.file, r.expected, r.got) for r in rows if r.confident_wrong],
        "per_category": {c: sum(r.expected == c for r in rows) for c in CATEGORIES},
    }


def table(rows: list[Row]) -> str:
    width = max(len(r.file) for r in rows)
    out = [f"{'file':<{width}}  {'expected':<22} {'got':<22} {'entities':<9} result"]
    for r in rows:
        n = len(r.entities_right) + len(r.entities_wrong)
        verdict = "ok" if r.ok else ("WRONG CALL" if r.confident_wrong else "miss")
        wrong = f" ({', '.join(r.entities_wrong)})" if r.entities_wrong else ""
        out.append(f"{r.file:<{width}}  {r.expected:<22} {r.got:<22} {len(r.entities_right)}/{n:<7} {verdict}{wrong}")
    t = totals(rows)
    out.append("")
    out.append("logs per category: " + ", ".join(f"{c} {k}" for c, k in t["per_category"].items()))
    out.append(f"categories right: {t['category_right']}/{t['logs']} ({t['category_pct']:.1f} %)")
    out.append(f"entities right:   {t['entities_right']}/{t['entities']} ({t['entity_pct']:.1f} %)")
    out.append(f"confident wrong calls: {len(t['confident_wrong'])} {t['confident_wrong'] or ''}".rstrip())
    return "\n".join(out)


def main() -> None:
    print(table(score()))


if __name__ == "__main__":
    main()
