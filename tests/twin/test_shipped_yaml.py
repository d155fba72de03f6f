"""The twin's own YAML files are read by libyaml into exactly what the pure-Python loader reads; a user's file
keeps the pure-Python reader and its messages (sandboxes/twin/shipped_yaml.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from sandboxes.twin import shipped_yaml
from sandboxes.twin.safe_input import InputFileError, compose_yaml
from sandboxes.twin.scenario import SCENARIO_DIR, ScenarioError, load

TWIN = Path(shipped_yaml.__file__).parent
SHIPPED = sorted(p for p in TWIN.rglob("*.yaml") if "bundled_sglang" not in p.parts)


def _graph(node: yaml.Node) -> tuple:
    """What the twin reads of a node graph: kinds, tags, values and the line each node starts on."""
    if isinstance(node, yaml.ScalarNode):
        return ("scalar", node.tag, node.value, node.start_mark.line)
    if isinstance(node, yaml.SequenceNode):
        return ("seq", node.tag, node.start_mark.line, tuple(_graph(n) for n in node.value))
    return ("map", node.tag, node.start_mark.line, tuple((_graph(k), _graph(v)) for k, v in node.value))


def test_libyaml_reads_the_shipped_files_when_pyyaml_has_it():
    assert SHIPPED and any(p.parent == SCENARIO_DIR for p in SHIPPED)
    assert shipped_yaml.LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(TWIN)))
def test_every_shipped_file_reads_as_the_pure_python_loader_reads_it(path):
    text = path.read_text()
    assert shipped_yaml.load(path) == yaml.load(text, Loader=yaml.SafeLoader)
    assert _graph(shipped_yaml.compose(text)) == _graph(yaml.compose(text, Loader=yaml.SafeLoader))


def test_a_workspace_copy_is_shipped_text_and_an_edited_one_is_not(tmp_path):
    copy = tmp_path / "scenario.yaml"
    shutil.copyfile(SCENARIO_DIR / "glm52_mi355x.yaml", copy)
    assert shipped_yaml.is_shipped(copy.read_text(), SCENARIO_DIR)
    assert load(copy).name == "glm52_mi355x"
    edited = copy.read_text().replace("glm52_mi355x", "glm52_edited", 1)
    assert not shipped_yaml.is_shipped(edited, SCENARIO_DIR)


def test_a_user_file_keeps_the_pure_python_readers_refusals(tmp_path):
    # libyaml reads these; PyYAML's pure-Python reader, whose messages users see, refuses them
    with pytest.raises(InputFileError, match="found character .* that cannot start any token") as tab:
        compose_yaml("key:\t value\n")
    assert tab.value.line == 1
    with pytest.raises(InputFileError, match="while parsing a flow sequence|expected ',' or ']'"):
        compose_yaml("a: [x?]\n")
    bad = tmp_path / "scenario.yaml"
    bad.write_text((SCENARIO_DIR / "glm52_mi355x.yaml").read_text() + "extra:\t 1\n")
    with pytest.raises(ScenarioError, match=r"scenario\.yaml:\d+: not valid YAML"):
        load(bad)
