"""The scenario file a task names (issue "Nothing lost, nothing leaked"): a regular file of a bounded size (never
``/dev/zero``, a FIFO or a directory), YAML whose aliases cannot expand past a bound, JSON configs it names read
the same way, and a file that is not a scenario refused in one line that quotes none of it (``scenario:
/etc/shadow`` printed that file's first line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandboxes.twin.scenario import ScenarioError, load
from tests.tasks.test_task_bounds import BOMB, SECRET, SHADOW

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "sandboxes" / "twin" / "scenarios" / "vega_mi355x.yaml"
CONFIG_DRIVEN = REPO / "sandboxes" / "twin" / "scenarios" / "deepseek_r1_mxfp4_mi355x.yaml"  # model.config: a file
CONFIG_LINE = 'config: "configs/deepseek-ai--DeepSeek-R1/config.json"'


def scenario_error(path: str | Path) -> str:
    with pytest.raises(ScenarioError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_a_scenario_that_is_not_a_regular_file_is_not_read(tmp_path):
    assert scenario_error("/dev/zero") == "/dev/zero: is not a regular file (a device, FIFO or socket): not read"
    assert scenario_error(tmp_path) == f"{tmp_path}: is a directory, not a file"
    big = tmp_path / "big.yaml"
    big.write_text(SCENARIO.read_text() + "# padding\n" * 600_000)
    assert scenario_error(big) == f"{big}: is 5.7 MiB, over the 4.0 MiB such a file may be: not read"


def test_a_scenario_that_is_not_one_quotes_none_of_it(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.write_text(SHADOW)
    message = scenario_error(shadow)
    assert SECRET not in message and "root:" not in message, message
    assert message.startswith(f"{shadow}:1: not a scenario file (none of its top-level keys is a scenario's section")
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text(SCENARIO.read_text().replace("name: vega_mi355x", f"name: !{SECRET} vega"))
    message = scenario_error(tagged)
    assert SECRET not in message and ": not valid YAML: could not determine a constructor" in message, message
    valued = tmp_path / "valued.yaml"
    valued.write_text(SCENARIO.read_text().replace("name: vega_mi355x", f"name: [{SECRET}: $6$x]"))
    message = scenario_error(valued)
    assert SECRET not in message and ": name: expected a str" in message, message
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe" + SECRET.encode())
    assert scenario_error(binary) == f"{binary}:1: is not UTF-8 text (a binary file?)"


def test_a_scenario_alias_bomb_and_its_config_files_are_bounded(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(SCENARIO.read_text() + "x-bomb:\n" + "".join(f"  {ln}\n" for ln in BOMB.splitlines()))
    assert "expands to more than 100000 values once its aliases are expanded" in scenario_error(bomb)
    text = CONFIG_DRIVEN.read_text()
    assert CONFIG_LINE in text
    odd = tmp_path / "odd.yaml"
    for target in ("/dev/zero", str(tmp_path)):
        odd.write_text(text.replace(CONFIG_LINE, f"config: {target}"))
        message = scenario_error(odd)
        assert ": model.config: " in message and ("not a regular file" in message or "is a directory" in message)
    shadow = tmp_path / "shadow.json"
    shadow.write_text(SHADOW)
    odd.write_text(text.replace(CONFIG_LINE, f"config: {shadow}"))
    message = scenario_error(odd)
    assert SECRET not in message and "is not valid JSON" in message, message
