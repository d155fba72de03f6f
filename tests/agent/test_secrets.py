"""The one redaction (agent/secrets.py) and the sinks that call it, one at a time; the end-to-end canary, planted
through a whole run and its review, is tests/agent/test_faults.py::test_a_canary_secret_reaches_no_file_of_the_run."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from types import SimpleNamespace

import git
import pytest

from agent.graph import checkpointer, saved_state
from agent.secrets import (
    REDACTED,
    LogScrubber,
    Redactor,
    configured_secrets,
    is_secret_key,
    run_redactor,
    secret_references,
)
from agent.state import AgentState, Call, Observation, Trial
from tasks.spec import EnvVar, load_task

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "glm52_mi355x.yaml"
KEY = "plain-looking-key-8c1d"  # not shaped like one: only the configured value finds it


@pytest.mark.parametrize("name", ["ENGINE_API_KEY", "SIGNING_KEY", "secret_key", "HF_TOKEN", "GITHUB_TOKEN",
                                  "client_credentials", "DB_PASSWORD_FILE"])  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_key(name)


@pytest.mark.parametrize("name", ["SGLANG_INIT_NEW_TOKEN_RATIO", "DEFAULT_EOS_TOKEN_ID", "key", "cache_key",
                                  "token_type", "max_new_tokens", "HF_TOKEN_PATH"])  # fmt: skip
def test_names_that_only_mention_a_token_or_a_key(name: str) -> None:
    assert not is_secret_key(name)


@pytest.mark.parametrize("text,masked", [
    ("hf_" + "a" * 34, REDACTED),
    ("push with ghp_" + "B2" * 18 + " now", f"push with {REDACTED} now"),
    ("id AKIAABCDEFGHIJKLMNOP.", f"id {REDACTED}."),
    ("slack xoxb-1234567890-abcdef", f"slack {REDACTED}"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", REDACTED),
    ("HF_TOKEN=abcd1234 next", f"HF_TOKEN={REDACTED} next"),
    ("{'OPENAI_API_KEY': 'zzzz9999', 'PATH': '/bin'}", f"{{'OPENAI_API_KEY': '{REDACTED}', 'PATH': '/bin'}}"),
    ('"ENGINE_API_KEY": "qqqq-1"', f'"ENGINE_API_KEY": "{REDACTED}"'),
    ("curl -H 'Authorization: Bearer tok.en-1'", f"curl -H 'Authorization: Bearer {REDACTED}'"),
])  # fmt: skip
def test_credential_shapes_and_secret_assignments_are_masked(text: str, masked: str) -> None:
    assert Redactor().text(text) == masked


@pytest.mark.parametrize("text", [
    'HF_TOKEN="$HF_TOKEN" SERVICE_TOKEN="$SOURCE"',  # references to the caller's environment, as scripts hold them
    "HF_TOKEN=None max_new_tokens=512 DEFAULT_EOS_TOKEN_ID=2 SGLANG_INIT_NEW_TOKEN_RATIO=0.7",
    "api_key=None in ServerArgs(...)",  # lower case: a program's fields, not an environment
    "task-glm52_mi355x and disk-abcdefghij and hf_config_path stay",
])  # fmt: skip
def test_what_is_not_a_secret_stays(text: str) -> None:
    assert Redactor().text(text) == text


def test_configured_values_structures_and_models() -> None:
    r = Redactor([KEY, "abc"])  # shorter than 4: ignored
    assert r.values == {KEY}
    assert r.text(f"a{KEY}b abc") == f"a{REDACTED}b abc"
    trial = Trial(id=1, flags={"served-model-name": KEY}, env={"HF_TOKEN": "x" * 8, "NOTE": "ok"}, status="up")
    state = AgentState(run_id="r", task_path="t", rationale=f"my key is {KEY}", trials=[trial],
                       pending=[Call(tool="launch_server", args={"flags": {"x": KEY}})])  # fmt: skip
    masked = r(state)
    assert isinstance(masked, AgentState) and masked is not state
    assert masked.rationale == f"my key is {REDACTED}" and masked.pending[0].args == {"flags": {"x": REDACTED}}
    assert masked.trials[0].flags == {"served-model-name": REDACTED}
    assert masked.trials[0].env == {"HF_TOKEN": REDACTED, "NOTE": "ok"}
    assert state.rationale == f"my key is {KEY}"  # a copy: the run goes on with what it had
    clean = AgentState(run_id="r", task_path="t", rationale="nothing here")
    assert r(clean) is clean  # nothing to mask: the same object (cheap for a large state)


def test_holds_secret_looks_for_values_and_shapes_not_code() -> None:
    r = Redactor([KEY])
    assert r.holds_secret(f'"{KEY}",') and r.holds_secret("token = 'sk-abcdefgh12345'")
    assert not r.holds_secret('API_KEY = os.environ["OPENAI_API_KEY"]\nheaders["Authorization"] = f"Bearer {key}"')


def test_the_task_decides_what_is_secret(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("DZ_FROM_ENV", "from-the-environment")
    monkeypatch.setenv("DZ_PLAIN_FROM_ENV", "/a/path/not/secret")
    task = load_task(TASK)
    env = {"FROM_ENV": EnvVar(from_env="DZ_FROM_ENV"), "HF_TOKEN": EnvVar(value="literal-token"),
           "SAID_NOT": EnvVar(from_env="DZ_PLAIN_FROM_ENV", secret=False), "PLAIN": EnvVar(value="plain-value"),
           "MARKED": EnvVar(value="marked-value", secret=True)}  # fmt: skip
    twin = task.engines.twin.model_copy(update={"env": {**task.engines.twin.env, "ENGINE_API_KEY": "engine-key"}})
    task = task.model_copy(update={"env": env, "engines": task.engines.model_copy(update={"twin": twin})})
    assert sorted(task.secrets()) == ["from-the-environment", "literal-token", "marked-value"]
    assert sorted(configured_secrets(task, ["extra-value"])) == sorted(
        [KEY, "extra-value", "from-the-environment", "literal-token", "marked-value", "engine-key"])
    engine_env = {"FROM_ENV": "from-the-environment", "HF_TOKEN": "literal-token", "SAID_NOT": "/a/path/not/secret",
                  "PLAIN": "plain-value", "ENGINE_API_KEY": "engine-key", "NOTE": KEY}  # fmt: skip
    refs = secret_references(task, engine_env, Redactor(configured_secrets(task)))
    assert refs == {"FROM_ENV": "$DZ_FROM_ENV", "HF_TOKEN": "$HF_TOKEN", "ENGINE_API_KEY": "$ENGINE_API_KEY",
                    "NOTE": "$NOTE"}  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps({"task_path": str(TASK)}))
    assert KEY in run_redactor(tmp_path).values and KEY in run_redactor(tmp_path / "gone").values


def test_checkpoints_hold_no_secret_and_resume_from_the_masked_state(tmp_path: Path) -> None:
    """The serializer masks what the state holds before it is stored, items of the growing collections included;
    the state read back is the masked one (a resumed run continues from it)."""
    r = Redactor([KEY])
    saver = checkpointer(tmp_path, r)
    history = [Observation(call_id=f"c{i}", tool="read_log", args={}, ok=True, result={"lines": [f"{i}: {KEY}" * 20]})
               for i in range(40)]  # fmt: skip
    state = AgentState(run_id="r", task_path="t", rationale=f"quoting {KEY}", history=history,
                       memo={"llm": {"last_error": f"Incorrect API key provided: {KEY}"}})  # fmt: skip
    config = {"configurable": {"thread_id": "r", "checkpoint_ns": ""}}
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {name: getattr(state, name) for name in type(state).model_fields}
    saved = saver.put(config, checkpoint, {"source": "loop", "step": 1, "parents": {}}, {})
    saver.put_writes(saved, [("rationale", f"again {KEY}")], task_id="t1")
    saver.conn.commit()
    saver.conn.close()
    data = b"".join(p.read_bytes() for p in tmp_path.glob("checkpoints.sqlite*"))
    assert KEY.encode() not in data
    assert b"dayzero_items" in data  # the history went to the item table, masked too
    back = saved_state(tmp_path, "r")
    assert back.rationale == f"quoting {REDACTED}" and back.history[3].result["lines"] == [f"3: {REDACTED}" * 20]
    assert back.memo["llm"]["last_error"] == f"Incorrect API key provided: {REDACTED}"
    conn = sqlite3.connect(tmp_path / "checkpoints.sqlite")
    assert conn.execute("SELECT count(*) FROM writes").fetchone()[0] == 1
    conn.close()


def test_files_engines_write_are_masked_in_place_as_they_grow(tmp_path: Path) -> None:
    """A server's log, appended to by the engine while the agent sweeps: each sweep masks what is new, byte for
    byte (the writer's offsets stay right), and a secret written in two halves is found once it is whole."""
    r = Redactor([KEY])
    log = tmp_path / "logs" / "server-001.log"
    log.parent.mkdir()
    writer = open(log, "ab", buffering=0)  # noqa: SIM115 - the engine's own handle, held across sweeps
    scrubber = LogScrubber(tmp_path, r)
    writer.write(f"starting\nenv HF_TOKEN=abcd1234 key {KEY[:9]}".encode())
    scrubber.sweep()
    writer.write(f"{KEY[9:]} more\n".encode())
    size = log.stat().st_size
    assert scrubber.sweep() == len(KEY)
    writer.write(b"ready\n")
    writer.close()
    text = log.read_text()
    assert KEY not in text and "abcd1234" not in text and log.stat().st_size == size + len("ready\n")
    assert text == f"starting\nenv HF_TOKEN=******** key {'*' * len(KEY)} more\nready\n"
    bench = tmp_path / "workspace" / ".bench" / "r-001-w.jsonl"
    bench.parent.mkdir(parents=True)
    bench.write_text(f'{{"model": "{KEY}"}}\n')
    scrubber.sweep()
    assert KEY not in bench.read_text()


def _repo(tmp_path: Path) -> Path:
    src = tmp_path / "ws" / "src"
    src.mkdir(parents=True)
    (src / "config.json").write_text('{"exclude": []}\n')
    subprocess.run(["git", "init", "-q"], cwd=src, check=True)
    subprocess.run(["git", "add", "-A"], cwd=src, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pristine"], cwd=src,
                   check=True)  # fmt: skip
    return src


def test_no_secret_goes_into_the_workspace_or_its_history(tmp_path: Path) -> None:
    """The edit tools refuse new text holding a secret (and do not repeat it); the commit tool refuses a staged
    change holding one, whatever wrote it, and masks what its message quotes."""
    from sandboxes.local import LocalSandbox
    from tools.git_ops import CommitInput, Evidence, commit
    from tools.source import EditInput, PatchInput, apply_patch, edit_file

    src = _repo(tmp_path)
    ctx = SimpleNamespace(sandbox=LocalSandbox(tmp_path / "ws"), redactor=Redactor([KEY]), repos={"src": src},
                          run_id="r", trial=1, engine_name="twin", run_dir=tmp_path / "run")  # fmt: skip
    edit = edit_file(ctx, EditInput(path="src/config.json", old="[]", new=f'["{KEY}"]'))
    assert not edit.ok and "refused" in edit.summary and KEY not in edit.summary
    diff = f'--- a/src/config.json\n+++ b/src/config.json\n@@ -1 +1 @@\n-{{"exclude": []}}\n+{{"exclude": ["{KEY}"]}}\n'
    assert not apply_patch(ctx, PatchInput(diff=diff)).ok
    assert KEY not in (src / "config.json").read_text()

    args = CommitInput(title="Exclude the projection", what_failed="x", root_cause=f"the key {KEY} said so",
                       change="y", evidence=Evidence(before="a", after="b"), patch_id="r/1")  # fmt: skip
    (src / "config.json").write_text(f'{{"exclude": ["{KEY}"]}}\n')  # as an engine or a script might
    refused = commit(ctx, args)
    assert not refused.ok and "config.json" in refused.summary, refused.summary
    assert KEY not in refused.summary and not git.Repo(src).index.diff("HEAD")  # nothing left staged
    (src / "config.json").write_text('{"exclude": ["model.eh_proj"]}\n')
    done = commit(ctx, args)
    assert done.ok, done.summary
    message = git.Repo(src).head.commit.message
    assert f"the key {REDACTED} said so" in message.replace("\n", " ") and KEY not in message


def test_a_secret_in_the_command_lines_extra_body_is_refused_before_the_run() -> None:
    """run.json records the options (masked): a key given there would be lost to a resumed run, so it is refused."""
    from agent.policies.factory import PolicyError, make_policy
    from agent.run import RunOptions

    task = load_task(TASK)
    for body in ({"api_key": KEY}, {"headers": [{"Authorization": "Bearer x"}]}):
        opts = RunOptions(run_id="x", task_path=str(TASK), policy="llm", llm_model="m",
                          llm_base_url="http://127.0.0.1:9/v1", llm_extra_body=body)  # fmt: skip
        with pytest.raises(PolicyError, match="--llm-extra-body holds a secret") as err:
            make_policy(opts, task)
        assert KEY not in str(err.value)
    fine = RunOptions(run_id="x", task_path=str(TASK), policy="llm", llm_model="m", llm_base_url="http://127.0.0.1:9/v1",
                      llm_extra_body={"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}})  # fmt: skip
    assert make_policy(fine, task).extra_body["top_k"] == 20


def test_a_key_that_is_data_not_a_name_keeps_its_value() -> None:
    # the playbook keys what it measured by the serving configuration, serialized: it mentions "api_key" and
    # "ssl_keyfile_password" (null), and is no secret's name; masking its value broke every resumed run after it
    key = json.dumps(["single", {"api_key": None, "ssl_keyfile_password": None, "tp_size": 8}])
    state = {"memo": {"served": {key: {"label": "TP8", "value": 2128.0}}}, "api_key": "plain-looking-key-8c1d"}
    masked = Redactor()(state)
    assert masked["memo"]["served"][key] == {"label": "TP8", "value": 2128.0}
    assert masked["api_key"] != "plain-looking-key-8c1d"
