"""The twin's HTTP server, spoken to over real sockets with urllib, as an SGLang client would."""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sandboxes.twin.data import make_problems
from sandboxes.twin.engine import problems
from sandboxes.twin.engine.http_api import (
    DEFAULT_PREFILL_S_PER_TOKEN,
    FLUSH_CACHE_TEXT,
    RequestLimits,
    ServerState,
    make_server,
    split_pieces,
)

ANSWER_RE = re.compile(r"#### (-?\d+)\s*$")


def _state(**overrides: Any) -> ServerState:
    base: dict[str, Any] = dict(
        model_path="/models/GLM-5.2-MXFP4",
        served_model_name="glm-5.2",
        server_args={"model_path": "/models/GLM-5.2-MXFP4", "tp_size": 8, "dp_size": 1,
                     "kv_cache_dtype": "fp8_e4m3", "speculative_algorithm": None},
        internal_states={"avg_spec_accept_length": 1.0, "last_gen_throughput": 70.0},
        twin={"simulated": True, "scenario": "glm52_mi355x", "quantization": "mxfp4"},
        accuracy=0.955,
        tpot_s=0.01,
        ttft_s=0.0,
        time_scale=0.0,
        context_length=8192,
        ready=threading.Event(),
    )
    base.update(overrides)
    return ServerState(**base)


class Client:
    def __init__(self, base: str):
        self.base = base
        self.server: Any = None

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, bytes, Any]:
        req = urllib.request.Request(self.base + path, data=body, method=method)
        if body is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers

    def get(self, path: str) -> tuple[int, bytes]:
        status, data, _ = self.request("GET", path)
        return status, data

    def post(self, path: str, obj: Any) -> tuple[int, Any]:
        status, data, _ = self.request("POST", path, json.dumps(obj).encode())
        return status, json.loads(data) if data else None

    def stream(self, path: str, obj: Any) -> Iterator[tuple[float, Any]]:
        """(arrival time, parsed event) for each SSE event; the final event is the string "[DONE]"."""
        req = urllib.request.Request(self.base + path, data=json.dumps(obj).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            for raw in resp:
                line = raw.decode().rstrip("\r\n")
                if not line:
                    continue
                assert line.startswith("data: ")
                payload = line[len("data: "):]
                yield time.monotonic(), payload if payload == "[DONE]" else json.loads(payload)


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[Client, ServerState]]]:
    started = []

    def start(**overrides: Any) -> tuple[Client, ServerState]:
        state = _state(**overrides)
        server = make_server(state, "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((server, thread))
        client = Client(f"http://127.0.0.1:{server.server_address[1]}")
        client.server = server
        return client, state

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        assert not thread.is_alive()


@pytest.fixture
def ready(serve) -> tuple[Client, ServerState]:
    client, state = serve()
    state.ready.set()
    return client, state


def _prompt_for(problem: problems.Problem) -> str:
    shots = problems.load_problems()[:2]
    few = "".join(f"Question: {p.question}\nAnswer: {p.solution}\n\n" for p in shots if p.id != problem.id)
    return few + f"Question: {problem.question}\nAnswer:"


# ---------------------------------------------------------------------------------------- description


def test_health_is_503_until_ready(serve):
    client, state = serve()
    assert client.get("/health") == (503, b"")
    assert client.get("/health_generate")[0] == 503
    state.ready.set()
    assert client.get("/health") == (200, b"")
    assert client.get("/health_generate") == (200, b"")


def test_models(ready):
    client, _ = ready
    status, data = client.get("/v1/models")
    assert status == 200
    body = json.loads(data)
    assert body["object"] == "list"
    card = body["data"][0]
    assert card["id"] == card["root"] == "glm-5.2"
    assert card["object"] == "model" and card["owned_by"] == "sglang"
    assert card["max_model_len"] == 8192 and isinstance(card["created"], int)
    status, data = client.get("/v1/models/glm-5.2")
    assert status == 200 and json.loads(data)["id"] == "glm-5.2"
    status, data = client.get("/v1/models/other")
    assert status == 404 and json.loads(data)["error"]["code"] == "model_not_found"


def test_server_info(serve):
    client, state = serve(server_args={"tp_size": 4, "dp_size": 2, "enable_dp_attention": True},
                          internal_states={"avg_spec_accept_length": 3.2})
    state.ready.set()
    for path in ("/server_info", "/get_server_info"):
        status, data = client.get(path)
        assert status == 200
        info = json.loads(data)
        assert info["simulated"] is True
        assert info["twin"]["simulated"] is True and info["twin"]["quantization"] == "mxfp4"
        assert info["tp_size"] == 4 and info["dp_size"] == 2 and info["enable_dp_attention"] is True
        assert isinstance(info["internal_states"], list) and len(info["internal_states"]) == 2
        assert info["internal_states"][0]["avg_spec_accept_length"] == 3.2
        assert info["version"] == "0.5.12"
    status, data = client.get("/get_model_info")
    assert status == 200 and json.loads(data)["model_path"] == "/models/GLM-5.2-MXFP4"


def test_version_from_twin(serve):
    client, _ = serve(twin={"simulated": True, "version": "0.5.15.post1", "quantization": "mxfp4"})
    assert json.loads(client.get("/server_info")[1])["version"] == "0.5.15.post1"


# ----------------------------------------------------------------------------------------- /generate


def test_generate_non_stream(ready):
    client, _ = ready
    status, out = client.post("/generate", {"text": "The capital city of France is",
                                            "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
    assert status == 200
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 8}
    assert meta["completion_tokens"] == 8 == len(split_pieces(out["text"]))
    assert meta["prompt_tokens"] == 8  # ceil(29 / 4)
    assert meta["cached_tokens"] == 0 and isinstance(meta["id"], str) and "e2e_latency" in meta


def test_generate_batch_and_input_ids(ready):
    client, _ = ready
    status, out = client.post("/generate", {"text": ["a b c", "d e f"], "sampling_params": {"max_new_tokens": 2}})
    assert status == 200 and isinstance(out, list) and len(out) == 2
    status, out = client.post("/generate", {"input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 3}})
    assert status == 200 and out["meta_info"]["prompt_tokens"] == 5 and out["meta_info"]["completion_tokens"] == 3


def test_generate_ignore_eos_gives_exactly_max_new_tokens(ready):
    client, _ = ready
    problem = problems.load_problems()[0]
    for text in ("hello", _prompt_for(problem)):
        status, out = client.post("/generate", {"text": text, "sampling_params": {"max_new_tokens": 300,
                                                                                   "ignore_eos": True}})
        assert status == 200
        assert out["meta_info"]["completion_tokens"] == 300
        assert out["meta_info"]["finish_reason"]["type"] == "length"


def test_generate_stream(ready):
    client, _ = ready
    events = [e for _, e in client.stream("/generate", {"text": "hello", "stream": True,
                                                         "sampling_params": {"max_new_tokens": 10}})]
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) == 10
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))  # cumulative
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == list(range(1, 11))
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 10}


def test_generate_errors(ready):
    client, _ = ready
    status, out = client.post("/generate", {"sampling_params": {}})
    assert status == 400 and "message" in out["error"]
    status, out = client.post("/generate", {"text": "x" * 40000})  # 10000 tokens > 8192
    assert status == 400 and "context length" in out["error"]["message"]


# ------------------------------------------------------------------------------------ OpenAI endpoints


def test_chat_completion(ready):
    client, _ = ready
    status, out = client.post("/v1/chat/completions", {"model": "glm-5.2", "max_tokens": 12,
                                                       "messages": [{"role": "user", "content": "Say hi"}]})
    assert status == 200
    assert out["object"] == "chat.completion" and out["model"] == "glm-5.2" and out["id"]
    choice = out["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] == "length" and choice["logprobs"] is None
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    usage = out["usage"]
    assert usage["completion_tokens"] == 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_completion_stream(ready):
    client, _ = ready
    events = [e for _, e in client.stream("/v1/chat/completions", {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count."}],
        "max_tokens": 15, "stream": True, "stream_options": {"include_usage": True}})]
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert len(split_pieces(content)) == 15
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 15


def test_completions(ready):
    client, _ = ready
    status, out = client.post("/v1/completions", {"model": "x", "prompt": "Once upon a time", "max_tokens": 5})
    assert status == 200 and out["object"] == "text_completion"
    assert out["choices"][0]["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 5
    events = [e for _, e in client.stream("/v1/completions", {"prompt": "Once", "max_tokens": 5, "stream": True})]
    assert events[-1] == "[DONE]"
    text = "".join(c["choices"][0]["text"] for c in events[:-1])
    assert len(split_pieces(text)) == 5
    assert events[-2]["choices"][0]["finish_reason"] == "length"


def test_openai_validation(ready):
    client, _ = ready
    status, out = client.post("/v1/chat/completions", {"model": "glm-5.2"})
    assert status == 400 and out["object"] == "error" and out["code"] == 400 and "messages" in out["message"]
    status, out = client.post("/v1/completions", {"max_tokens": 3})
    assert status == 400 and out["object"] == "error"
    status, data, _ = client.request("POST", "/v1/chat/completions", b'{"messages": []}', "text/plain")
    assert status == 400 and "application/json" in json.loads(data)["message"]
    big = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9000}
    status, out = client.post("/v1/chat/completions", big)  # serving_chat's own check, verbatim
    assert status == 400 and out["message"] == ("max_completion_tokens is too large: 9000.This model supports "
                                                 "at most 8192 completion tokens.")
    long = {"messages": [{"role": "user", "content": "x" * 4000}], "max_tokens": 8000}
    status, out = client.post("/v1/chat/completions", long)  # the tokenizer manager's total-length check
    assert status == 400 and "maximum context length of 8192" in out["message"]


def test_bad_json_and_unknown_path(ready):
    client, _ = ready
    for path in ("/generate", "/v1/chat/completions", "/v1/completions"):
        status, data, _ = client.request("POST", path, b"{not json")
        assert status == 400
        body = json.loads(data)
        assert body["object"] == "error" and body["code"] == 400
    status, data = client.get("/no/such/path")
    assert status == 404 and json.loads(data) == {"detail": "Not Found"}
    status, data = client.get("/generate")
    assert status == 405


def test_flush_cache_and_prefix_cache(ready):
    client, _ = ready
    prompt = "shared system prompt " * 60
    _, first = client.post("/generate", {"text": prompt + "question one", "sampling_params": {"max_new_tokens": 1}})
    _, second = client.post("/generate", {"text": prompt + "question two", "sampling_params": {"max_new_tokens": 1}})
    assert first["meta_info"]["cached_tokens"] == 0
    assert second["meta_info"]["cached_tokens"] >= len(prompt) // 4 - 16
    status, data, headers = client.request("POST", "/flush_cache", b"")
    assert status == 200 and data.decode() == FLUSH_CACHE_TEXT and headers["Content-Type"].startswith("text/plain")
    _, third = client.post("/generate", {"text": prompt + "question two", "sampling_params": {"max_new_tokens": 1}})
    assert third["meta_info"]["cached_tokens"] == 0


def test_requests_are_logged(ready, caplog):
    client, _ = ready
    with caplog.at_level(logging.INFO, logger="sglang.twin.http"):
        client.get("/health")
    lines = [r.getMessage() for r in caplog.records if r.name == "sglang.twin.http"]
    assert any('"GET /health HTTP/1.1" 200' in line for line in lines)


# ------------------------------------------------------------------------------------ under abuse


def _raw(port: int, head: bytes, body: bytes = b"") -> tuple[int, dict]:
    """Send raw bytes on one connection; the status and JSON body of the answer (read until the server closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_part, _, payload = data.partition(b"\r\n\r\n")
    return int(head_part.split(b" ", 2)[1]), json.loads(payload)


def test_burst_of_400_concurrent_connections_is_not_reset(ready):
    """400 clients connecting at the same instant all get an answer (a listen backlog of 5 reset most of them)."""
    client, _ = ready
    port = client.server.server_address[1]
    clients = 400
    barrier = threading.Barrier(clients)
    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 2}}).encode()
    head = (f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()

    def one(_: int) -> int | str:
        sock = socket.socket()
        sock.settimeout(60)
        try:
            barrier.wait(timeout=60)
            sock.connect(("127.0.0.1", port))
            sock.sendall(head + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            return int(data.split(b" ", 2)[1])
        except OSError as e:  # ConnectionResetError, ConnectionRefusedError, ...
            return type(e).__name__
        finally:
            sock.close()

    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(one, range(clients)))
    assert results == [200] * clients, {r: results.count(r) for r in set(results)}


BAD_OPENAI = [
    pytest.param({"n": 1_000_000}, "n must be at most 128", id="n-huge"),
    pytest.param({"n": 129}, "n must be at most 128", id="n-over"),
    pytest.param({"n": float("inf")}, "finite number", id="n-inf"),
    pytest.param({"max_tokens": float("inf")}, "finite number", id="max_tokens-inf"),
    pytest.param({"max_tokens": float("-inf")}, "finite number", id="max_tokens-neg-inf"),
    pytest.param({"max_tokens": float("nan")}, "finite number", id="max_tokens-nan"),
    pytest.param({"max_completion_tokens": float("nan")}, "finite number", id="max_completion_tokens-nan"),
    pytest.param({"max_tokens": 1e300}, "", id="max_tokens-1e300"),
    pytest.param({"n": 128, "max_tokens": 9000}, "new tokens in total", id="total-tokens"),
]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize(("fields", "says"), BAD_OPENAI)
def test_openai_request_over_a_limit_is_400(serve, path, fields, says):
    client, state = serve(context_length=16384)
    state.ready.set()
    client.server.limits = RequestLimits(max_total_new_tokens=1 << 20)
    base = {"messages": [{"role": "user", "content": "hi"}]} if path.endswith("chat/completions") else {"prompt": "hi"}
    status, data, headers = client.request("POST", path, json.dumps({**base, **fields}).encode())  # NaN, Infinity
    assert status == 400, data[:300]
    out = json.loads(data)
    assert out["object"] == "error" and out["code"] == 400 and out["type"] == "BadRequestError"
    assert says in out["message"] and headers["X-SGLang-Twin"] == "simulated"
    assert client.post(path, {**base, "max_tokens": 3})[0] == 200  # and the server still serves


@pytest.mark.parametrize(("params", "says"), [
    pytest.param({"max_new_tokens": float("inf")}, "finite number", id="inf"),
    pytest.param({"max_new_tokens": float("nan")}, "finite number", id="nan"),
    pytest.param({"max_new_tokens": 1e300}, "context length", id="1e300"),
])
def test_generate_non_finite_or_huge_max_new_tokens_is_400(ready, params, says):
    client, _ = ready
    status, data, _ = client.request("POST", "/generate", json.dumps({"text": "hi", "sampling_params": params}).encode())
    assert status == 400 and says in json.loads(data)["error"]["message"]


def test_batches_over_the_completion_limit_are_400(ready):
    client, _ = ready
    status, out = client.post("/generate", {"text": ["hi"] * 1025, "sampling_params": {"max_new_tokens": 1}})
    assert status == 400 and "1025 completions" in out["error"]["message"]
    status, out = client.post("/v1/completions", {"prompt": ["hi"] * 100, "n": 11, "max_tokens": 1})
    assert status == 400 and "1100 completions" in out["message"]
    status, out = client.post("/v1/completions", {"prompt": ["hi"] * 100, "n": 10, "max_tokens": 1})
    assert status == 200 and len(out["choices"]) == 1000


@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("depth", [65, 100_000])
def test_deeply_nested_json_is_400(ready, path, depth):
    client, _ = ready
    status, data, _ = client.request("POST", path, b"[" * depth + b"]" * depth)
    out = json.loads(data)
    assert status == 400 and out["object"] == "error" and "error parsing the body" in out["message"]
    nested = {"messages": [{"role": "user", "content": "hi"}], "prompt": "hi", "text": "hi", "max_tokens": 1,
              "sampling_params": {"max_new_tokens": 1}, "model": json.loads("[" * 60 + "]" * 60)}
    assert client.post(path, nested)[0] == 200  # 62 levels: within the limit


def test_body_over_the_size_limit_is_400_without_reading_it(ready):
    client, _ = ready
    port = client.server.server_address[1]
    for path in ("/generate", "/v1/chat/completions", "/v1/completions", "/no/such/path"):
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {10**12}\r\n\r\n").encode()
        status, out = _raw(port, head)  # a terabyte announced, none sent: answered at once, connection closed
        assert status == 400 and "too large" in out["message"], (path, out)
    chunked = (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")
    status, out = _raw(port, chunked, b"%x\r\n" % (64 << 20))
    assert status == 400 and "too large" in out["message"]
    status, out = _raw(port, chunked.replace(b"/generate", b"/v1/completions"), b"zz\r\n")
    assert status == 400 and out["message"] == "Invalid request body"


def test_small_body_limit_applies_to_a_body_actually_sent(serve):
    client, state = serve()
    state.ready.set()
    client.server.limits = RequestLimits(max_body_bytes=4096)
    ok = json.dumps({"prompt": "x" * 3000, "max_tokens": 1}).encode()
    assert client.request("POST", "/v1/completions", ok)[0] == 200
    status, data, _ = client.request("POST", "/v1/completions", json.dumps({"prompt": "x" * 5000}).encode())
    assert status == 400 and "at most 4096 bytes" in json.loads(data)["message"]


JUNK = [None, True, -1, 0, 1e300, float("inf"), float("nan"), "x", [], {}, [[]], [{}], [None], {"a": [1]}]


@pytest.mark.parametrize(("path", "base", "fields"), [
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}},
     ["text", "input_ids", "sampling_params", "rid", "stream"]),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}}, ["sampling_params.max_new_tokens",
     "sampling_params.stop", "sampling_params.ignore_eos"]),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
     ["messages", "max_tokens", "max_completion_tokens", "n", "stop", "stream", "stream_options", "model",
      "ignore_eos", "messages.0.content", "messages.0.role"]),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2},
     ["prompt", "max_tokens", "n", "stop", "stream", "stream_options", "echo", "model"]),
])
def test_junk_in_any_field_is_answered_never_500(ready, path, base, fields):
    client, _ = ready
    for field in fields:
        for junk in JUNK:
            body = json.loads(json.dumps(base))
            *parents, last = field.split(".")
            target = body
            for key in parents:
                target = target[int(key)] if isinstance(target, list) else target[key]
            target[last] = junk
            status, data, _ = client.request("POST", path, json.dumps(body).encode())
            assert status in (200, 400), (field, junk, status, data[:300])


# ------------------------------------------------------------------------------ problems and accuracy


def test_bundled_file_is_what_the_generator_makes():
    data = json.loads(problems.DATA_FILE.read_text(encoding="utf-8"))
    assert data == make_problems.generate()
    loaded = problems.load_problems()
    assert len(loaded) == 300 and len({p.id for p in loaded}) == 300 and len({p.question for p in loaded}) == 300
    for p in loaded:
        assert isinstance(p.answer, int) and p.solution.endswith(f"#### {p.answer}")


def test_find_problem_takes_the_last_question_and_ignores_whitespace():
    ps = problems.load_problems()
    target = ps[17]
    prompt = _prompt_for(target).replace(" ", "  \n ", 5)
    assert problems.find_problem(prompt) == target
    assert problems.find_problem("What is 2 + 2?") is None
    assert problems.find_problem(f"Q: {ps[3].question}\nQ: {ps[9].question}\nQ:\t{ps[3].question}") == ps[3]


def test_answer_for_is_deterministic():
    for p in problems.load_problems()[:50]:
        right = problems.answer_for(p, 1.0, "mxfp4")
        assert right.endswith(f"The answer is {p.answer}.\n#### {p.answer}")
        wrong = problems.answer_for(p, 0.0, "mxfp4")
        value = int(ANSWER_RE.search(wrong).group(1))
        assert value != p.answer and value >= 0
        assert problems.answer_for(p, 0.5, "fp8") == problems.answer_for(p, 0.5, "fp8")


def test_bundled_problem_answered_with_gsm8k_marker(serve):
    client, state = serve(accuracy=1.0)
    state.ready.set()
    problem = problems.load_problems()[42]
    status, out = client.post("/generate", {"text": _prompt_for(problem),
                                            "sampling_params": {"max_new_tokens": 512, "temperature": 0,
                                                                "stop": ["Question", "</s>"]}})
    assert status == 200
    assert out["text"].endswith(f"#### {problem.answer}")
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    status, out = client.post("/v1/chat/completions", {"messages": [{"role": "user", "content": problem.question}]})
    assert out["choices"][0]["message"]["content"].endswith(f"#### {problem.answer}")
    assert out["choices"][0]["finish_reason"] == "stop"


def _score(client: Client) -> list[bool]:
    ps = problems.load_problems()

    def ask(p: problems.Problem) -> bool:
        status, out = client.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": _prompt_for(p)}], "temperature": 0, "max_tokens": 400})
        assert status == 200
        m = ANSWER_RE.search(out["choices"][0]["message"]["content"])
        return m is not None and int(m.group(1)) == p.answer

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(ask, ps))


def test_accuracy_over_all_problems_is_calibrated_and_deterministic(ready):
    client, _ = ready
    first, second = _score(client), _score(client)
    assert first == second
    assert abs(sum(first) / len(first) - 0.955) <= 0.04


# ------------------------------------------------------------------------------------------- pacing


class ServerClock:
    """The server's clock and sleeps, simulated: ``monotonic()`` moves only when the server waits, by exactly
    what it asked; every wait and every event sent is logged with the clock's reading. Pacing is then what the
    server did, not what a loaded machine's wall clock says."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.log: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return self.now

    @staticmethod
    def time() -> float:
        return time.time()

    def sleep(self, delay: float) -> None:
        with self._lock:
            self.log.append(("wait", delay))
            self.now += delay

    def sent(self) -> None:
        with self._lock:
            self.log.append(("event", self.now - 1000.0))


class _ClockedStop(threading.Event):
    """The server's stop event, whose timed wait is the simulated clock's sleep."""

    def __init__(self, clock: ServerClock) -> None:
        super().__init__()
        self.clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None and not self.is_set():
            self.clock.sleep(timeout)
        return self.is_set()


@pytest.fixture
def clocked(serve, monkeypatch) -> Callable[..., tuple[Client, ServerClock]]:
    from sandboxes.twin.engine import http_api

    clock = ServerClock()
    monkeypatch.setattr(http_api, "time", clock)
    send = http_api._Handler._event

    def event(self, obj: Any) -> None:
        clock.sent()
        send(self, obj)

    monkeypatch.setattr(http_api._Handler, "_event", event)

    def start(**overrides: Any) -> tuple[Client, ServerClock]:
        client, state = serve(**overrides)
        client.server.stopping = _ClockedStop(clock)
        state.ready.set()
        return client, clock

    return start


def test_stream_is_paced(clocked):
    """Each token is sent at its simulated time x time_scale, after a wait, not all at the end."""
    client, clock = clocked(tpot_s=0.01, ttft_s=0.5, time_scale=2.0)
    events = [e for _, e in client.stream("/generate", {"text": "hi", "stream": True,
                                                         "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}})]
    chunks = [e for e in events if e != "[DONE]"]
    assert len(chunks) == 20
    simulated = [0.5 + DEFAULT_PREFILL_S_PER_TOKEN + k * 0.01 for k in range(20)]  # "hi": one prompt token
    assert [c["meta_info"]["e2e_latency"] for c in chunks] == pytest.approx(simulated)
    sent_at = [t for kind, t in clock.log if kind == "event"]
    assert sent_at == pytest.approx([2.0 * t for t in simulated])  # each sent at scale x its simulated time
    assert [kind for kind, _ in clock.log] == ["wait", "event"] * 20  # a wait before every token


def test_time_scale_shrinks_waits(clocked):
    client, clock = clocked(tpot_s=0.05, ttft_s=1.0, time_scale=0.01)
    status, out = client.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 40}})
    assert status == 200 and out["meta_info"]["e2e_latency"] == pytest.approx(2.95, abs=0.01)
    assert clock.log == [("wait", pytest.approx(0.01 * out["meta_info"]["e2e_latency"]))]  # one wait, scaled


def test_time_scale_zero_never_sleeps(clocked):
    client, clock = clocked(tpot_s=0.05, ttft_s=1.0, time_scale=0.0)
    assert client.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 40}})[0] == 200
    events = list(client.stream("/generate", {"text": "hi", "stream": True, "sampling_params": {"max_new_tokens": 5}}))
    assert len(events) == 6 and all(kind == "event" for kind, _ in clock.log)


def test_concurrent_streams_run_in_parallel(serve):
    """8 streams whose second token is an hour away all get their first token: none waits for another to end."""
    client, state = serve(tpot_s=3600.0, ttft_s=0.0, time_scale=1.0)
    state.ready.set()
    streams = 8
    all_started = threading.Barrier(streams + 1)

    def one(_: int) -> list[Any]:
        seen: list[Any] = []
        try:
            for _, e in client.stream("/v1/chat/completions", {
                    "messages": [{"role": "user", "content": "go"}], "max_tokens": 20, "stream": True}):
                seen.append(e)
                if len(seen) == 2:  # the role chunk and the first token
                    all_started.wait(timeout=60)
        except Exception as e:  # the server ends the stream at shutdown
            seen.append(e)
        return seen

    with ThreadPoolExecutor(max_workers=streams) as pool:
        futures = [pool.submit(one, i) for i in range(streams)]
        all_started.wait(timeout=60)  # raises BrokenBarrierError if the streams were served one after another
        client.server.shutdown()
        results = [f.result(timeout=60) for f in futures]
    for seen in results:
        assert seen[1]["choices"][0]["delta"]["content"]  # the first token
        assert "[DONE]" not in seen  # cut at shutdown, an hour before the second token


def test_shutdown_ends_in_flight_stream(serve):
    client, state = serve(tpot_s=3600.0, ttft_s=0.0, time_scale=1.0)
    state.ready.set()
    seen: list[Any] = []
    first = threading.Event()

    def consume() -> None:
        try:
            for _, e in client.stream("/generate", {"text": "x", "stream": True,
                                                    "sampling_params": {"max_new_tokens": 100}}):
                seen.append(e)
                first.set()
        except Exception as e:  # the server cuts the stream short
            seen.append(e)
        first.set()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    assert first.wait(timeout=60) and reader.is_alive()  # one token out, the next an hour away
    client.server.shutdown()
    reader.join(timeout=60)
    assert not reader.is_alive()  # returned: the shutdown ended the stream, 99 simulated hours early
    assert seen and seen[0]["meta_info"]["completion_tokens"] == 1 and "[DONE]" not in seen
