"""A scripted OpenAI-compatible chat server for tests: a real HTTP server on 127.0.0.1.

``ScriptedLLM(script)`` answers ``POST /v1/chat/completions`` (non-streaming) one script step per request::

    {"tool_calls": [("launch_server", {"tp_size": 4}), ("read_log", "{not json")]}  # args: dict or raw string
    {"tool_calls": [("read_log", {}, "my_id")]}  # an optional third item fixes the call id
    {"content": "text"}                           # a plain answer (may be combined with tool_calls)
    {"status": 429, "retry_after_ms": 10}         # an error response (retry-after-ms header if given)
    {"status": 500}
    {"delay_s": 5, ...}                           # answer only after a delay (a hung endpoint, for timeouts)
    lambda request_json: step                     # computes the step from what was received

Habits of real servers, as options: ``strict=True`` rejects, as llama-cpp-python's server does, an assistant
message whose ``content`` is not a string (HTTP 500 ``content: Input should be a valid string``);
``hide_tool_results=True`` drops the content of ``role: "tool"`` messages before a step sees the request (as a chat
format that leaves them out of the prompt does), so a callable step answers as a model that never saw them.

``GET /v1/models`` lists ``model`` (it consumes no step: the run's check of its endpoint asks it first);
``api_key="k"`` refuses, with a 401 as OpenAI does, every request whose ``Authorization`` is not ``Bearer k``.

Every chat request consumes one step, error steps included; once the script is exhausted the server answers
with a ``finish`` tool call. ``.requests`` holds every request body (decoded JSON), ``.headers`` their
headers. Use it as a context manager; ``.base_url`` ends in ``/v1``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class ScriptedLLM:
    def __init__(self, script: list[Step] | None = None, model: str = "scripted-model", strict: bool = False,
                 hide_tool_results: bool = False, api_key: str | None = None) -> None:  # fmt: skip
        self.api_key = api_key  # when set, a request without it is refused (401)
        self.model_lists = 0  # GET /models requests (the run's check of the endpoint), not in .requests
        self.script: list[Step] = list(script or [])
        self.strict = strict
        self.hide_tool_results = hide_tool_results
        self.rejected: list[str] = []  # why each request a strict server refused was refused
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> ScriptedLLM:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _refused(self) -> bool:
                """Whether the request lacks the key the server was given (401, as OpenAI answers)."""
                if owner.api_key is None or self.headers.get("Authorization") == f"Bearer {owner.api_key}":
                    return False
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})  # fmt: skip
                return True

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                with owner._lock:
                    owner.model_lists += 1
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                elif not self._refused():
                    self._send(200, {"object": "list", "data": [{"id": owner.model, "object": "model",
                                                                 "created": 0, "owned_by": "tests"}]})  # fmt: skip

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self._refused():
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                    return
                status, payload, headers = owner._respond(body, {k.lower(): v for k, v in self.headers.items()})
                self._send(status, payload, headers)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                    self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="scripted-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- answering

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self.script)

    def _respond(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
        if self.strict:
            for i, m in enumerate(body.get("messages") or []):
                if m.get("role") == "assistant" and not isinstance(m.get("content"), str):
                    why = f"messages.{i}.content: Input should be a valid string"
                    with self._lock:
                        self.rejected.append(why)
                    return 500, {"error": {"message": why, "type": "internal_server_error"}}, {}
        if self.hide_tool_results:
            body = {**body, "messages": [{**m, "content": ""} if m.get("role") == "tool" else m
                                         for m in body.get("messages") or []]}  # fmt: skip
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            n = len(self.requests)
            step: Step = self.script.pop(0) if self.script else {"tool_calls": [("finish", {"reason": "script done"})]}
        if callable(step):
            step = step(body)
        if step.get("delay_s"):
            time.sleep(float(step["delay_s"]))
        status = int(step.get("status", 200))
        if status != 200:
            extra = {}
            if step.get("retry_after_ms") is not None:
                extra["retry-after-ms"] = str(step["retry_after_ms"])
            if step.get("retry_after") is not None:
                extra["retry-after"] = str(step["retry_after"])
            kind = "rate_limit_exceeded" if status == 429 else "server_error"
            return status, {"error": {"message": step.get("message", f"scripted {status}"), "type": kind}}, extra
        tool_calls = []
        for i, item in enumerate(step.get("tool_calls") or []):
            name, arguments = item[0], item[1]
            call_id = item[2] if len(item) > 2 else f"call_{n}_{i}"
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            tool_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        message: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
        if tool_calls:
            message["tool_calls"] = tool_calls
        usage = step.get("usage") or {"prompt_tokens": 100 + n, "completion_tokens": 10 + len(tool_calls)}
        usage = {**usage, "total_tokens": usage.get("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])}
        return 200, {
            "id": f"chatcmpl-scripted-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],  # fmt: skip
            "usage": usage,
        }, {}
