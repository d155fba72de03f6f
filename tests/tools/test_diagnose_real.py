"""classify on real crash logs from public SGLang / vLLM / ROCm / PyTorch issues (see data/real_logs/SOURCES.yaml).

The corpus is scored as a whole (print the table with ``python -m pytest -q -s tests/tools/test_diagnose_real.py``
or ``python -m tests.tools.corpus_score``): at least 90 % of categories and 85 % of labelled entities right, and no
confident wrong call at all (a category other than the label and other than ``unknown``): an ``unknown`` where a
category was expected is a miss, any other category sends the agent after a wrong fix.
"""

from __future__ import annotations

import pytest

from tests.tools.corpus_score import CATEGORIES, DATA, score, score_entry, sources, table, totals

SOURCES = sources()
MIN_CATEGORY_PCT = 90.0
MIN_ENTITY_PCT = 85.0


def test_sources_are_complete():
    assert len(SOURCES) >= 40
    files = {p.name for p in DATA.glob("*.log")}
    assert files == {e["file"] for e in SOURCES}, "every log has a SOURCES entry and every entry a log"
    assert len(files) == len(SOURCES), "no log is listed twice"
    for e in SOURCES:
        assert e["url"].startswith(f"https://github.com/{e['repository']}/") and str(e["number"]) in e["url"]
        assert e["expected"]["category"] in CATEGORIES, e["file"]
    # every category the classifier can return is exercised by at least one real log
    assert set(CATEGORIES) <= {e["expected"]["category"] for e in SOURCES}
    # a log with no fix is labelled with the decisive line its summary must keep
    for e in SOURCES:
        if e["expected"]["category"] == "unknown":
            assert e["expected"].get("summary"), e["file"]


def test_score_table_and_thresholds(capsys):
    rows = score()
    t = totals(rows)
    with capsys.disabled():
        print("\n" + table(rows))
    assert not t["confident_wrong"], f"confident wrong calls: {t['confident_wrong']}"
    assert t["category_pct"] >= MIN_CATEGORY_PCT, f"categories right {t['category_pct']:.1f} % < {MIN_CATEGORY_PCT} %"
    assert t["entity_pct"] >= MIN_ENTITY_PCT, f"entities right {t['entity_pct']:.1f} % < {MIN_ENTITY_PCT} %"


@pytest.mark.parametrize("entry", SOURCES, ids=[e["file"] for e in SOURCES])
def test_no_confident_wrong_call(entry):
    """Per log, only the worst outcome fails: a miss counts against the thresholds above, a wrong call never passes."""
    row = score_entry(entry)
    assert not row.confident_wrong, f"{entry['file']} ({entry['url']}): expected {row.expected}, got {row.got}"


def test_a_summary_for_every_log():
    for row in score():
        assert row.summary and row.summary != "no error line found", row.file
