"""classify on real crash logs from public SGLang / vLLM / ROCm / PyTorch issues (see data/real_logs/SOURCES.yaml).

Every labelled log must get its category and its labelled entities right, and no log may get a confident wrong
category: an ``unknown`` where a category was expected is a miss, any other category is a wrong call, and a
wrong call on a log labelled ``unknown`` (no fix exists) is the worst outcome of all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tools.diagnose import classify

DATA = Path(__file__).parent / "data" / "real_logs"
SOURCES = yaml.safe_load((DATA / "SOURCES.yaml").read_text())


def _got(entry: dict) -> tuple[str, dict]:
    d = classify((DATA / entry["file"]).read_text())
    return d.category, {k: getattr(d, k) for k in entry["expected"] if k != "category"}


def test_sources_are_complete():
    assert 12 <= len(SOURCES) <= 25
    files = {p.name for p in DATA.glob("*.log")}
    assert files == {e["file"] for e in SOURCES}, "every log has a SOURCES entry and every entry a log"
    for e in SOURCES:
        assert e["url"].startswith(f"https://github.com/{e['repository']}/") and str(e["number"]) in e["url"]
        assert e["expected"]["category"]
    categories = {e["expected"]["category"] for e in SOURCES}
    assert {"weight_shape_mismatch", "compile_error", "out_of_memory", "invalid_flag", "unknown"} <= categories


def test_table_and_no_confident_wrong_call(capsys):
    rows, wrong = [], []
    for e in SOURCES:
        want = e["expected"]["category"]
        got, entities = _got(e)
        ok = got == want and all(entities[k] == v for k, v in e["expected"].items() if k != "category")
        rows.append((e["file"], want, got, "ok" if ok else "FAIL"))
        if got != want and got != "unknown":
            wrong.append((e["file"], want, got))
    width = max(len(r[0]) for r in rows)
    with capsys.disabled():
        print(f"\n{'file':<{width}}  {'expected':<22} {'got':<22} ok")
        for f, want, got, ok in rows:
            print(f"{f:<{width}}  {want:<22} {got:<22} {ok}")
    assert not wrong, f"confident wrong calls: {wrong}"


@pytest.mark.parametrize("entry", SOURCES, ids=[e["file"] for e in SOURCES])
def test_real_log(entry):
    got, entities = _got(entry)
    assert got == entry["expected"]["category"], f"{entry['file']} ({entry['url']}): got {got}"
    for k, v in entry["expected"].items():
        if k != "category":
            assert entities[k] == v, f"{entry['file']}: {k} = {entities[k]!r}, expected {v!r}"


def test_a_summary_for_every_log():
    for e in SOURCES:
        assert classify((DATA / e["file"]).read_text()).summary
