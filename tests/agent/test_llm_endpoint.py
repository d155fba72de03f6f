"""The LLM endpoint is asked once before a run exists (agent/llm_endpoint.py): a refused key, a wrong URL or a
server that is not there is one line and creates nothing; a server that answers costs the run no script step."""

from __future__ import annotations

import os

import openai
import pytest

from agent.llm_endpoint import EndpointError, check_endpoint
from agent.outcomes import ExitCode
from tests.agent.llm_server import ScriptedLLM
from tests.shared_runs import DEFAULT_TASK, run_agent


def _client(base_url: str, key: str = "not-needed") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key)


def test_an_answering_endpoint_is_asked_once_and_spends_no_chat_request():
    with ScriptedLLM() as llm:
        check_endpoint(_client(llm.base_url), llm.base_url, "m")
        assert llm.model_lists == 1 and llm.requests == []


def test_a_server_without_a_models_route_is_asked_for_one_token():
    with ScriptedLLM([{"content": "p"}]) as llm:
        base = f"http://127.0.0.1:{llm.port}"  # GET /models is not a route there (the server's is /v1/models)
        check_endpoint(_client(base), base, "m")
        assert llm.model_lists == 1 and len(llm.requests) == 1 and llm.requests[0]["max_tokens"] == 1


def test_a_refused_key_is_bad_input_and_not_echoed():
    with ScriptedLLM(api_key="right-key") as llm, pytest.raises(EndpointError, match="refused the API key") as err:
        check_endpoint(_client(llm.base_url, "sk-wrong-123"), llm.base_url, "m", ["sk-wrong-123"])
    assert err.value.exit_code == ExitCode.BAD_INPUT and "sk-wrong-123" not in str(err.value)


def test_a_refused_key_stops_agent_run_before_the_run_folder(tmp_path):
    with ScriptedLLM(api_key="right-key") as llm:
        env = {**os.environ, "OPENAI_API_KEY": "sk-wrong-456"}
        proc = run_agent(tmp_path, "run", str(DEFAULT_TASK), "--policy", "llm", "--llm-model", "m", "--llm-base-url",
                         llm.base_url, "--run-id", "x", env=env)  # fmt: skip
        assert llm.requests == []  # no chat request: the check alone
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the LLM endpoint") and "refused the API key" in lines[0]
    assert "sk-wrong-456" not in proc.stdout + proc.stderr and not (tmp_path / "runs").exists()
