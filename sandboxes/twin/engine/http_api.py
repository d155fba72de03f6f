"""The HTTP server of a running twin: SGLang's native and OpenAI-compatible endpoints, simulated.

A real SGLang server is FastAPI on uvicorn; this is ``http.server.ThreadingHTTPServer`` (standard library
only) answering the same paths with the same JSON shapes, status codes and streaming format (server-sent
events over chunked transfer encoding). Every response that describes the server marks it as simulated
(``"simulated": true``) and every response carries the header ``X-SGLang-Twin: simulated``.

Simulation rules (documented here because clients will measure them):

* Tokens. There is no tokenizer. A text prompt counts ``ceil(len(text) / 4)`` tokens (``count_tokens``);
  ``input_ids`` count one token per id. Chat prompts are first rendered with a GLM-style template
  (``[gMASK]<sop><|role|>\\ncontent...<|assistant|>``) and counted the same way. Generated text is cut into
  word-like pieces (``split_pieces``: a word of up to 6 letters, up to 3 digits, or one punctuation mark,
  each with its leading space); each piece is one completion token.
* Content. If the prompt contains one of the bundled arithmetic problems (``problems.find_problem``), the
  completion is the simulated model's worked answer (``problems.answer_for``, salt = the served
  quantization from ``twin["quantization"]``), which ends with an EOS (finish reason ``stop``). Otherwise it
  is deterministic filler (``lorem ipsum`` words) of exactly ``max_new_tokens`` tokens (finish ``length``);
  with no limit given it is 128 tokens followed by EOS. ``ignore_eos`` pads an answer with filler to
  exactly ``max_new_tokens``. Sampling parameters (temperature, top_p, seed, ...) change nothing.
* Prefix cache. A radix-cache stand-in remembers prompts in blocks of 16 tokens (chained hashes, LRU);
  ``cached_tokens`` is the longest block-aligned prefix already seen (at most ``prompt_tokens - 1``).
  ``--disable-radix-cache`` (``server_args["disable_radix_cache"]``) turns it off; ``/flush_cache`` clears it.
* Pacing. A launched twin (``ServerState.live``) schedules every completion on the engine's continuous batching,
  the same schedulers its virtual-time benchmark runs (``live_scheduler.LiveScheduler``): a request waits,
  prefills and decodes with the others, so what a client measures depends on load and configuration; tokens
  are streamed as the steps that wrote them end (several at once when the reader is behind). Simulated seconds
  become wall seconds times ``time_scale`` (0: no sleeping). A state without a live scheduler (built by hand,
  in tests) paces each stream on its own: first token at ``ttft_s + uncached_prompt_tokens *
  prefill_s_per_token`` (``prefill_s_per_token`` from ``twin``, default 5e-5 s), then one token every
  ``tpot_s``, in bursts of the accept length under speculative decoding. ``e2e_latency`` in ``meta_info`` is
  in simulated seconds.

Limits (``RequestLimits``; what one request may ask, so that no client can make the server spend minutes or
gigabytes on it): body size, JSON nesting depth, ``n``, completions per request (prompts x ``n``) and tokens
asked for in total. A request over a limit, or with a non-finite number where an integer belongs, is answered
400 with the endpoint's error body (OpenAI-style ``{"object": "error", ...}``; ``{"error": {...}}`` on
``/generate``), never 500. Real SGLang has no such limits (uvicorn accepts any body); its messages are used
where it has one (context length, ``max_completion_tokens is too large``, pydantic's ``finite_number``), and
the listen backlog is uvicorn's (2048).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import problems
from .live_scheduler import WAKE_GAP_S
from .prefix_index import MAX_BLOCKS, BlockIndex
from .prompt_content import prompt_content


def _request_id() -> str:
    """A request id as SGLang makes one (``uuid.uuid4().hex``): 16 random bytes with the version-4 and RFC 4122
    variant bits set, in hex. Written out: importing ``uuid`` (and the ``platform`` it imports) was a few ms of
    every engine's start (issue 26)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return b.hex()

logger = logging.getLogger("sglang.twin.http")

SGLANG_VERSION = "0.5.12"
CHARS_PER_TOKEN = 4
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default for /generate
DEFAULT_PREFILL_S_PER_TOKEN = 5e-5
DEFAULT_EOS_TOKEN_ID = 151329  # GLM family <|endoftext|>
CACHE_BLOCK_TOKENS = 16
# a live stream sends at most one event per this many wall seconds after its first token (what the steps wrote
# meanwhile goes in one event, as SGLang's stream does when its detokenizer is behind): at a small time scale a
# decode step lasts microseconds of wall time, far less than an event costs to write and to read
STREAM_MIN_GAP_S = WAKE_GAP_S
CACHE_MAX_BLOCKS = MAX_BLOCKS
KEEP_ALIVE_S = 5.0  # uvicorn's timeout_keep_alive in SGLang
LISTEN_BACKLOG = 2048  # uvicorn's default backlog
PARSE_BODY_ERROR = "There was an error parsing the body"  # FastAPI's HTTPException when json.loads raises
GENERATION_ROUTES = frozenset({"/generate", "/v1/completions", "/v1/chat/completions"})
SERVING_FAULT_KINDS = ("out_of_memory", "collective_hang", "collective_error", "worker_crash")

FLUSH_CACHE_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
FILLER_WORDS = (  # each one piece of split_pieces (at most 6 letters), so filler re-splits to the same count
    " lorem", " ipsum", " dolor", " sit", " amet", ",", " sed", " do", " tempor", " ut", " labore", " et",
    " dolore", " magna", " aliqua", ".", " ut", " enim", " ad", " minim", " veniam", ",", " quis", " nisi",
)
_PIECE = re.compile(r"\s?[A-Za-z]{1,6}|\s?\d{1,3}|\s?[^\sA-Za-z\d]|\s+")


@dataclass
class ServerState:
    model_path: str  # as given on the command line
    served_model_name: str
    server_args: dict  # every SGLang server arg (name -> value), echoed by /server_info
    internal_states: dict  # e.g. {"avg_spec_accept_length": 3.2, "last_gen_throughput": ...}
    twin: dict  # twin-only facts: {"simulated": True, "scenario": ..., ...}
    accuracy: float  # probability that an answer is correct for the served quantization
    tpot_s: float  # simulated seconds per output token for one stream
    ttft_s: float  # simulated time to first token for a short prompt
    time_scale: float  # wall seconds per simulated second (0.001: 1000x faster; 0: no sleeping)
    context_length: int
    ready: threading.Event = field(default_factory=threading.Event)  # /health is 503 until set
    # a scheduler that stopped answering (a hung collective, a dead rank nothing watches): generation requests wait
    # until the server goes, /health is 503 (its own generation request times out)
    stalled: threading.Event = field(default_factory=threading.Event)
    # what the twin's benchmark client hands the server when its simulation reaches a step the engine cannot run
    # (engine/serving_faults.py); None: such a server only serves
    on_fault: Callable[[dict], None] | None = None
    # the engine's schedulers in scaled wall time (engine/live_scheduler.LiveScheduler); None: each stream is paced
    # on its own from ttft_s and tpot_s
    live: Any = None


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask of the server; more is answered 400 (see the module docstring)."""

    max_body_bytes: int = 32 << 20
    max_json_depth: int = 64
    max_n: int = 128  # the OpenAI API's bound on n
    max_completions: int = 1024  # prompts x n in one request
    max_total_new_tokens: int = 1 << 20  # sum of max_new_tokens over a request's completions


# ----------------------------------------------------------------------------------------- tokens, content


def count_tokens(text: str) -> int:
    """Approximate token count of a prompt: one token per 4 characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def split_pieces(text: str) -> list[str]:
    """Cut generated text into the pieces streamed as tokens; ``"".join(split_pieces(t)) == t``."""
    return _PIECE.findall(text)


def filler_pieces(n: int, start: int = 0) -> list[str]:
    return [FILLER_WORDS[(start + i) % len(FILLER_WORDS)] for i in range(n)]


def _piece_id(piece: str, vocab: int) -> int:
    return int.from_bytes(hashlib.blake2b(piece.encode("utf-8"), digest_size=4).digest(), "big") % vocab


class RequestError(Exception):
    """A request the engine refuses; rendered in the calling endpoint's error format."""

    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError"):
        super().__init__(message)
        self.status = status
        self.err_type = err_type


@dataclass
class _Prompt:
    text: str | None  # None when given as token ids
    ids: list[int] | None
    tokens: int
    chat: bool = False  # rendered from messages under the chat template


@dataclass
class _Completion:
    rid: str
    prompt_tokens: int
    cached_tokens: int
    pieces: list[str]
    finish: dict  # SGLang finish_reason: {"type": "stop", "matched": ...} | {"type": "length", "length": n}
    schedule: list[tuple[float, int]]  # (simulated seconds since arrival, cumulative tokens out); [] when live
    ticket: Any = None  # its request in the live scheduler (live_scheduler.Ticket), None: paced by ``schedule``

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def e2e_s(self) -> float:
        return self.ticket.progress.t_sim if self.ticket is not None else self.schedule[-1][0]

    def abort(self) -> None:
        """The scheduler could not serve it (``ticket.progress.error``): what was streamed is what it wrote."""
        p = self.ticket.progress
        self.pieces = self.pieces[:p.tokens]
        self.finish = {"type": "abort", "message": p.error}


class _PrefixCache:
    """Block-granular stand-in for SGLang's radix cache: remembers chained hashes of prompt prefixes."""

    def __init__(self, max_blocks: int = CACHE_MAX_BLOCKS):
        self._index = BlockIndex(max_blocks)
        self._lock = threading.Lock()

    @staticmethod
    def keys(prompt: _Prompt) -> list[bytes]:
        """The chained hashes of the prompt's whole blocks (``CACHE_BLOCK_TOKENS`` tokens each)."""
        if prompt.ids is not None:
            units = [str(i) for i in prompt.ids]
            step = CACHE_BLOCK_TOKENS
            chunks = [",".join(units[i:i + step]) for i in range(0, len(units) - step + 1, step)]
        else:
            text = prompt.text or ""
            step = CACHE_BLOCK_TOKENS * CHARS_PER_TOKEN
            chunks = [text[i:i + step] for i in range(0, len(text) - step + 1, step)]
        keys, prev = [], b""
        for chunk in chunks:
            prev = hashlib.blake2b(prev + chunk.encode("utf-8"), digest_size=16).digest()
            keys.append(prev)
        return keys

    def match_and_insert(self, prompt: _Prompt) -> int:
        keys = self.keys(prompt)
        with self._lock:
            hit, _ = self._index.match_and_insert(keys)
        return min(hit * CACHE_BLOCK_TOKENS, max(prompt.tokens - 1, 0))

    def clear(self) -> None:
        with self._lock:
            self._index.clear()


# ------------------------------------------------------------------------------------------------ engine


class _Engine:
    """What the HTTP layer calls: plans completions (content, finish reason, timing) for a ServerState."""

    def __init__(self, state: ServerState):
        self.state = state
        self.cache = _PrefixCache()

    # -- settings derived from the state
    def _arg(self, name: str, default: Any = None) -> Any:
        return self.state.server_args.get(name, default)

    @property
    def quantization(self) -> str:
        return str(self.state.twin.get("quantization") or self._arg("quantization") or "")

    @property
    def eos_token_id(self) -> int:
        return int(self.state.twin.get("eos_token_id", DEFAULT_EOS_TOKEN_ID))

    @property
    def vocab_size(self) -> int:
        return int(self.state.twin.get("vocab_size", 151552))

    @property
    def accept_length(self) -> float:
        if not self._arg("speculative_algorithm"):
            return 1.0
        try:
            return max(1.0, float(self.state.internal_states.get("avg_spec_accept_length") or 1.0))
        except (TypeError, ValueError, AttributeError):
            return 1.0

    # -- validation
    def check_length(self, prompt_tokens: int, max_new_tokens: int | None) -> None:
        ctx = self.state.context_length
        if prompt_tokens >= ctx:
            raise RequestError(
                f"The input ({prompt_tokens} tokens) is longer than the model's context length ({ctx} tokens).")
        if max_new_tokens is not None and prompt_tokens + max_new_tokens > ctx:
            raise RequestError(
                f"Requested token count exceeds the model's maximum context length of {ctx} tokens. "
                f"You requested a total of {prompt_tokens + max_new_tokens} tokens: {prompt_tokens} tokens "
                f"from the input messages and {max_new_tokens} tokens for the completion. Please reduce the "
                f"number of tokens in the input messages or the completion to fit within the limit.")

    # -- planning
    def plan(self, prompt: _Prompt, max_new_tokens: int | None, ignore_eos: bool,
             stop: list[str], rid: str | None = None, cond: threading.Condition | None = None) -> _Completion:
        """The completion's content and finish reason, and its request in the live scheduler (``cond``: the
        condition its HTTP call waits on, shared by the call's completions)."""
        problem = problems.find_problem(prompt.text) if prompt.text else None
        finish: dict[str, Any]
        if problem is not None:
            pieces = split_pieces(problems.answer_for(problem, self.state.accuracy, self.quantization))
            finish = {"type": "stop", "matched": self.eos_token_id}
        elif max_new_tokens is None:
            pieces = filler_pieces(DEFAULT_MAX_NEW_TOKENS)
            finish = {"type": "stop", "matched": self.eos_token_id}
        else:
            pieces = filler_pieces(max_new_tokens)
            finish = {"type": "length", "length": max_new_tokens}
        stopped = False
        if stop:
            text = "".join(pieces)
            hits = [(text.find(s), s) for s in stop if s and s in text]
            if hits:
                at, matched = min(hits)
                pieces = split_pieces(text[:at])
                finish = {"type": "stop", "matched": matched}
                stopped = True
        if max_new_tokens is not None:
            if len(pieces) > max_new_tokens:
                pieces = pieces[:max_new_tokens]
                finish = {"type": "length", "length": max_new_tokens}
            elif ignore_eos and not stopped and len(pieces) < max_new_tokens:
                pieces = pieces + filler_pieces(max_new_tokens - len(pieces))
                finish = {"type": "length", "length": max_new_tokens}
        live = self.state.live
        if live is not None:
            keys = [] if self._arg("disable_radix_cache") else self.cache.keys(prompt)
            ticket = live.submit(prompt.tokens, len(pieces), keys, prompt_content(prompt.text, prompt.chat),
                                 cond or threading.Condition())  # fmt: skip
            return _Completion(rid=rid or _request_id(), prompt_tokens=prompt.tokens,
                               cached_tokens=ticket.cached_tokens, pieces=pieces, finish=finish, schedule=[],
                               ticket=ticket)  # fmt: skip
        cached = 0 if self._arg("disable_radix_cache") else self.cache.match_and_insert(prompt)
        prefill_cost = float(self.state.twin.get("prefill_s_per_token", DEFAULT_PREFILL_S_PER_TOKEN))
        first = self.state.ttft_s + (prompt.tokens - cached) * prefill_cost
        return _Completion(rid=rid or _request_id(), prompt_tokens=prompt.tokens, cached_tokens=cached,
                           pieces=pieces, finish=finish,
                           schedule=self._schedule(len(pieces), first, self.state.tpot_s, self.accept_length))

    @staticmethod
    def _schedule(n: int, first: float, tpot: float, accept: float) -> list[tuple[float, int]]:
        """Times (simulated s) at which the cumulative token count grows; the first token ends prefill."""
        if n == 0:
            return [(first, 0)]
        out = [(first, 1)]
        step, done = 1, 1
        while done < n:
            done = min(n, 1 + round(step * accept))
            out.append((first + step * accept * tpot, done))
            step += 1
        return out

    def meta_info(self, c: _Completion, upto: int, t_sim: float, final: bool) -> dict:
        meta: dict[str, Any] = {
            "id": c.rid,
            "finish_reason": c.finish if final else None,
            "prompt_tokens": c.prompt_tokens,
            "weight_version": str(self._arg("weight_version", "default")),
            "total_retractions": c.ticket.progress.retractions if c.ticket is not None else 0,
            "completion_tokens": upto,
            "cached_tokens": c.cached_tokens,
        }
        accept = self.accept_length
        if accept > 1.0 and upto > 0:
            verify_ct = max(1, math.ceil(upto / accept))
            num_draft = int(self._arg("speculative_num_draft_tokens") or 0)
            meta["spec_verify_ct"] = verify_ct
            meta["spec_accept_length"] = upto / verify_ct
            if num_draft > 1:
                meta["spec_accept_rate"] = min(1.0, (upto / verify_ct - 1) / (num_draft - 1))
        meta["e2e_latency"] = round(t_sim, 6)
        return meta

    def output_ids(self, c: _Completion, upto: int) -> list[int]:
        return [_piece_id(p, self.vocab_size) for p in c.pieces[:upto]]


# ------------------------------------------------------------------------------------------ request parsing


def _as_int(value: Any, name: str, minimum: int = 0) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):  # json.loads reads NaN, Infinity, -Infinity
        raise RequestError(f"{name}\n  Input should be a finite number [type=finite_number, "
                           f"input_value={value!r}, input_type=float]")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise RequestError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise RequestError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def _stop_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return value
    raise RequestError(f"stop must be a string or a list of strings, got {value!r}")


def _prompt_from(value: Any) -> _Prompt:
    if isinstance(value, str):
        return _Prompt(text=value, ids=None, tokens=count_tokens(value))
    if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return _Prompt(text=None, ids=list(value), tokens=len(value))
    raise RequestError(f"Invalid prompt: {str(value)[:80]!r}")


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if not all(isinstance(t, str) for t in texts):
            raise RequestError("Invalid message content: a text part's text must be a string")
        return "".join(texts)
    raise RequestError(f"Invalid message content: {str(content)[:80]!r}")


def json_depth(obj: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar: 0), without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return deepest


def render_chat(messages: list[dict]) -> str:
    """GLM-style chat template (approximate): what the chat prompt's token count is computed from."""
    parts = ["[gMASK]<sop>"]
    for m in messages:
        parts.append(f"<|{m.get('role', 'user')}|>\n{_message_text(m.get('content'))}")
    parts.append("<|assistant|>")
    return "".join(parts)


# -------------------------------------------------------------------------------------------- HTTP server


class TwinHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG  # socketserver's default of 5 resets connections in a burst

    def __init__(self, state: ServerState, address: tuple[str, int], limits: RequestLimits | None = None):
        self.state = state
        self.limits = limits or RequestLimits()
        self.engine = _Engine(state)
        self.stopping = threading.Event()
        super().__init__(address, _Handler)

    def shutdown(self) -> None:
        """Stop serving: in-flight streams end at their next token, then the accept loop exits."""
        self.stopping.set()
        super().shutdown()


class _Disconnected(Exception):
    pass


class _BadBody(ValueError):
    """A request body that cannot be read (bad framing) or is over the size limit; answered 400, then closed."""


_Route = Callable[["_Handler"], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    timeout = KEEP_ALIVE_S
    server: TwinHTTPServer

    # -- plumbing
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        logger.info('%s:%s - "%s" %s %s', host, port, self.requestline, code, phrase)

    def log_message(self, fmt: str, *args: Any) -> None:
        logger.debug("%s - %s", self.address_string(), fmt % args)

    def log_error(self, fmt: str, *args: Any) -> None:
        # an idle keep-alive connection timing out is routine (uvicorn closes those silently)
        level = logging.DEBUG if fmt.startswith("Request timed out") else logging.WARNING
        logger.log(level, "%s - %s", self.address_string(), fmt % args)

    def _send(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-SGLang-Twin", "simulated")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj, default=str).encode("utf-8"), "application/json")

    def _empty(self, status: int) -> None:
        self._send(status, b"", "text/plain; charset=utf-8")

    def _openai_error(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        self._json(status, {"object": "error", "message": message, "type": err_type, "param": None,
                            "code": status})

    def _http_error(self, status: int, detail: str) -> None:
        # an HTTPException, as SGLang's exception handler renders it
        self._json(status, {"object": "error", "message": detail, "type": str(status), "param": None, "code": status})

    def _validation_error(self, message: str) -> None:
        # FastAPI request validation errors, which SGLang turns from 422 into 400
        self._openai_error(400, message, HTTPStatus.BAD_REQUEST.phrase)

    def _read_body(self) -> bytes:
        """The request body; raises ``_BadBody`` (before reading past the limit) if it is too large or malformed."""
        limit = self.server.limits.max_body_bytes
        too_large = f"Request body too large: this server accepts at most {limit} bytes"
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                data = bytearray()
                while True:
                    size = int(self.rfile.readline(64).split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline(1 << 16) not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(data)
                    if size < 0:
                        raise _BadBody("Invalid request body")
                    if len(data) + size > limit:
                        raise _BadBody(too_large)
                    data += self.rfile.read(size)
                    self.rfile.readline(64)
            length = int(self.headers.get("Content-Length") or 0)
        except _BadBody:
            raise
        except ValueError as e:
            raise _BadBody("Invalid request body") from e
        if length > limit:
            raise _BadBody(f"{too_large}, got {length}")
        return self.rfile.read(length) if length > 0 else b""

    def _json_body(self) -> tuple[bool, Any]:
        """(ok, parsed body); on failure the 400 response has been sent."""
        try:
            raw = self._read_body()
        except OSError:
            self.close_connection = True
            self._validation_error("Invalid request body")
            return False, None
        try:
            body = json.loads(raw.decode("utf-8")) if raw.strip() else None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self._validation_error(f"[{{'type': 'json_invalid', 'loc': ('body', {e.pos}), "
                                   f"'msg': 'JSON decode error', 'input': {{}}, 'ctx': {{'error': '{e.msg}'}}}}]")
            return False, None
        except RecursionError:  # nested deeper than the parser's stack
            self._http_error(400, PARSE_BODY_ERROR)
            return False, None
        limit = self.server.limits.max_json_depth
        if json_depth(body) > limit:
            self._http_error(400, f"{PARSE_BODY_ERROR}: JSON nested deeper than {limit} levels")
            return False, None
        return True, body

    def _require_json_content_type(self) -> bool:
        media = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            with contextlib.suppress(ValueError, OSError):
                self._read_body()
            self.close_connection = True
            self._validation_error(
                "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only 'application/json' "
                "is allowed\", 'type': 'value_error'}]")
            return False
        return True

    # -- streaming
    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("X-SGLang-Twin", "simulated")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            self.close_connection = True
            raise _Disconnected from e

    def _event(self, obj: Any) -> None:
        self._chunk(b"data: " + json.dumps(obj, default=str).encode("utf-8") + b"\n\n")

    def _end_stream(self) -> None:
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _wait_until(self, t0: float, t_sim: float) -> None:
        """Sleep until simulated time ``t_sim`` after wall time ``t0``; raises if the server is stopping."""
        scale = self.server.state.time_scale
        if scale > 0:
            delay = t0 + t_sim * scale - time.monotonic()
            if delay > 0 and self.server.stopping.wait(delay):
                self.close_connection = True
                raise _Disconnected
        elif self.server.stopping.is_set():
            self.close_connection = True
            raise _Disconnected

    def _events(self, comps: list[_Completion]) -> Iterator[tuple[int, int, int, float, bool]]:
        """(index, previous count, new count, t_sim, final) as the completions' tokens come, in time order,
        waiting in between so that a client sees them paced."""
        if comps and comps[0].ticket is not None:
            yield from self._live_events(comps)
            return
        steps = []
        for i, c in enumerate(comps):
            prev = 0
            for t, n in c.schedule:
                steps.append((t, i, prev, n))
                prev = n
        steps.sort()
        t0 = time.monotonic()
        for t, i, prev, n in steps:
            self._wait_until(t0, t)
            yield i, prev, n, t, (t, n) == comps[i].schedule[-1]

    def _live_events(self, comps: list[_Completion]) -> Iterator[tuple[int, int, int, float, bool]]:
        """``_events`` of completions the live scheduler serves: whatever their steps wrote since the last look, one
        event per completion. A first token and an end go at once; other tokens wait until ``STREAM_MIN_GAP_S``
        after the call's last event and go together."""
        cond = comps[0].ticket.cond
        seen = [0] * len(comps)
        ended = [False] * len(comps)

        def news() -> tuple[bool, bool]:
            """(anything new, anything that cannot wait: a first token or an end)."""
            new = urgent = False
            for c, s, e in zip(comps, seen, ended, strict=True):
                p = c.ticket.progress
                if e or not (p.done or p.tokens > s):
                    continue
                new = True
                urgent = urgent or p.done or s == 0
            return new, urgent

        last = -STREAM_MIN_GAP_S
        while not all(ended):
            with cond:
                while True:
                    if self.server.stopping.is_set():
                        self.close_connection = True
                        raise _Disconnected
                    new, urgent = news()
                    wait = last + STREAM_MIN_GAP_S - time.monotonic()
                    if urgent or (new and wait <= 0):
                        break
                    cond.wait(wait if new else 0.5)
                now = [c.ticket.progress for c in comps]
            last = time.monotonic()
            for i, (c, p) in enumerate(zip(comps, now, strict=True)):
                if ended[i] or not (p.done or p.tokens > seen[i]):
                    continue
                if p.done and p.error:
                    c.abort()
                n = len(c.pieces) if p.done else min(p.tokens, len(c.pieces))
                yield i, seen[i], n, p.t_sim, p.done
                seen[i], ended[i] = n, p.done

    def _wait_all(self, comps: list[_Completion]) -> None:
        if comps and comps[0].ticket is not None:
            for _ in self._live_events(comps):
                pass
            return
        self._wait_until(time.monotonic(), max(c.e2e_s for c in comps))

    # -- dispatch
    def _routes(self) -> dict[str, tuple[tuple[str, ...], _Route]]:
        return {
            "/health": (("GET",), _Handler._health),
            "/health_generate": (("GET",), _Handler._health),
            "/v1/models": (("GET",), _Handler._models),
            "/server_info": (("GET",), _Handler._server_info),
            "/get_server_info": (("GET",), _Handler._server_info),
            "/get_model_info": (("GET",), _Handler._model_info),
            "/model_info": (("GET",), _Handler._model_info),
            "/generate": (("POST", "PUT"), _Handler._generate),
            "/v1/completions": (("POST",), _Handler._completions),
            "/v1/chat/completions": (("POST",), _Handler._chat),
            "/flush_cache": (("GET", "POST"), _Handler._flush_cache),
            "/_twin/serving_fault": (("POST",), _Handler._serving_fault),
        }

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        if len(path) > 1:
            path = path.rstrip("/")
        route = self._routes().get(path)
        try:
            if route is None and path.startswith("/v1/models/") and self.command == "GET":
                self._model_card(path[len("/v1/models/"):])
            elif route is None:
                self._read_body()
                self._json(404, {"detail": "Not Found"})
            elif self.command not in route[0]:
                self._read_body()
                self._json(405, {"detail": "Method Not Allowed"})
            elif path in GENERATION_ROUTES and self.server.state.stalled.is_set():
                self._read_body()  # the tokenizer takes it; the scheduler never answers
                self.server.stopping.wait()
                self.close_connection = True
            else:
                route[1](self)
        except _Disconnected:
            pass
        except _BadBody as e:  # the rest of the body is not read: this connection cannot carry another request
            self.close_connection = True
            self._http_error(400, str(e))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # keep the server alive; report like uvicorn does
            logger.exception("Exception in ASGI application")
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._send(500, b"Internal Server Error", "text/plain; charset=utf-8")

    do_GET = _dispatch
    do_POST = _dispatch
    do_PUT = _dispatch
    do_DELETE = _dispatch
    do_PATCH = _dispatch

    # -- endpoints: server description
    def _health(self) -> None:
        st = self.server.state
        self._empty(200 if st.ready.is_set() and not self.server.stopping.is_set() and not st.stalled.is_set() else 503)

    def _serving_fault(self) -> None:
        """The twin's own endpoint (no SGLang path): the benchmark's simulation found a step this server cannot run;
        the server prints what SGLang prints and fails the way it fails (launch_server.serving_failure)."""
        ok, body = self._json_body()
        if not ok:
            return
        st = self.server.state
        if st.on_fault is None:
            self._json(404, {"detail": "Not Found"})
            return
        if not isinstance(body, dict) or body.get("kind") not in SERVING_FAULT_KINDS:
            self._http_error(400, f"expected a serving fault, one of {', '.join(SERVING_FAULT_KINDS)}")
            return
        self._json(200, {"accepted": True, "simulated": True})
        st.on_fault(body)

    def _card(self, name: str) -> dict:
        return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": name,
                "parent": None, "max_model_len": self.server.state.context_length, "simulated": True}

    def _models(self) -> None:
        self._json(200, {"object": "list", "data": [self._card(self.server.state.served_model_name)],
                         "simulated": True})

    def _model_card(self, name: str) -> None:
        if name != self.server.state.served_model_name:
            self._json(404, {"error": {"message": f"The model '{name}' does not exist",
                                       "type": "invalid_request_error", "param": "model",
                                       "code": "model_not_found"}})
        else:
            self._json(200, self._card(name))

    def _server_info(self) -> None:
        st = self.server.state
        if isinstance(st.internal_states, list):
            internal = [dict(s) for s in st.internal_states]
        else:  # one entry per data-parallel rank, as SGLang's scheduler fan-out returns them
            internal = [dict(st.internal_states) for _ in range(max(1, int(st.server_args.get("dp_size") or 1)))]
        twin = st.twin if st.live is None else {**st.twin, "live_scheduler": st.live.stats()}
        measured = st.live.accept_length() if st.live is not None else None
        if measured is not None:  # the scheduler's running figure, as SGLang's is, once it has one
            for state in internal:
                if state.get("avg_spec_accept_length") is not None:
                    state["avg_spec_accept_length"] = round(measured, 3)
        info = {**st.server_args, **dict(st.twin.get("scheduler_info") or {}),
                "internal_states": internal, "version": st.twin.get("version", SGLANG_VERSION),
                "simulated": True, "twin": twin}
        self._json(200, info)

    def _model_info(self) -> None:
        st = self.server.state
        self._json(200, {"model_path": st.model_path,
                         # ServerArgs.__post_init__ sets an unset tokenizer path to the model's
                         "tokenizer_path": st.server_args.get("tokenizer_path") or st.model_path,
                         "is_generation": True,
                         "preferred_sampling_params": st.server_args.get("preferred_sampling_params"),
                         "weight_version": st.server_args.get("weight_version", "default"),
                         "simulated": True})

    def _flush_cache(self) -> None:
        self._read_body()
        self.server.engine.cache.clear()
        if self.server.state.live is not None:
            self.server.state.live.clear_cache()
        logger.info("Cache flushed successfully!")
        self._send(200, FLUSH_CACHE_TEXT.encode("utf-8"), "text/plain; charset=utf-8")

    # -- endpoints: native generation
    def _generate(self) -> None:
        ok, body = self._json_body()
        if not ok:
            return
        if not isinstance(body, dict):
            self._validation_error("Input should be a valid dictionary or object to extract fields from")
            return
        engine = self.server.engine
        try:
            comps, batched = self._plan_generate(body)
        except RequestError as e:
            logger.error("[http_server] Error: %s", e)
            self._json(e.status, {"error": {"message": str(e)}})
            return
        if not body.get("stream"):
            self._wait_all(comps)
            outs = [{"text": c.text, "output_ids": engine.output_ids(c, len(c.pieces)),
                     "meta_info": engine.meta_info(c, len(c.pieces), c.e2e_s, final=True)} for c in comps]
            self._json(200, outs if batched else outs[0])
            return
        self._start_stream()
        for i, _prev, n, t, final in self._events(comps):
            c = comps[i]
            out: dict[str, Any] = {"text": "".join(c.pieces[:n]), "output_ids": engine.output_ids(c, n),
                                   "meta_info": engine.meta_info(c, n, t, final=final)}
            if batched:
                out["index"] = i
            self._event(out)
        self._end_stream()

    def _plan_generate(self, body: dict) -> tuple[list[_Completion], bool]:
        engine = self.server.engine
        text, ids = body.get("text"), body.get("input_ids")
        if text is None and ids is None:
            raise RequestError("Either text, input_ids or input_embeds should be provided.")
        if text is not None:
            batched = isinstance(text, list)
            if batched and not all(isinstance(t, str) for t in text):
                raise RequestError("text must be a string or a list of strings")
            prompts = [_prompt_from(t) for t in (text if batched else [text])]
        else:
            batched = isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)
            prompts = [_prompt_from(x) for x in (ids if batched else [ids])]
        if batched and not prompts:
            raise RequestError("The batch is empty.")
        params = body.get("sampling_params") or {}
        if isinstance(params, list):
            params = params[0] if params else {}
        if not isinstance(params, dict):
            raise RequestError("sampling_params must be an object")
        max_new = _as_int(params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS), "max_new_tokens")
        ignore_eos = bool(params.get("ignore_eos", False))
        stop = _stop_list(params.get("stop"))
        for p in prompts:
            engine.check_length(p.tokens, max_new)
        self._check_size(len(prompts), 1, max_new)
        rids = body.get("rid")
        cond = threading.Condition()
        comps = []
        for k, p in enumerate(prompts):
            rid = rids[k] if isinstance(rids, list) and k < len(rids) else (rids if isinstance(rids, str) else None)
            comps.append(engine.plan(p, max_new, ignore_eos, stop, rid=rid, cond=cond))
        return comps, batched

    def _check_size(self, prompts: int, n: int, max_new: int | None) -> None:
        """Refuse a request that asks for more completions or tokens than ``RequestLimits`` allows."""
        limits = self.server.limits
        if n > limits.max_n:
            raise RequestError(f"n must be at most {limits.max_n}, got {n}.")
        if prompts * n > limits.max_completions:
            raise RequestError(f"This request asks for {prompts * n} completions ({prompts} prompts x n={n}); "
                               f"at most {limits.max_completions} are accepted per request.")
        total = prompts * n * (DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new)
        if total > limits.max_total_new_tokens:
            raise RequestError(f"This request asks for {total} new tokens in total; at most "
                               f"{limits.max_total_new_tokens} are accepted per request.")

    # -- endpoints: OpenAI-compatible
    def _openai_common(self, body: dict) -> tuple[int | None, bool, list[str], int]:
        max_new = body.get("max_completion_tokens", body.get("max_tokens"))
        max_new = _as_int(max_new, "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens")
        n = _as_int(body.get("n", 1), "n", minimum=1) or 1
        if not isinstance(body.get("stream_options") or {}, dict):
            raise RequestError(f"stream_options must be an object, got {body.get('stream_options')!r}")
        return max_new, bool(body.get("ignore_eos", False)), _stop_list(body.get("stop")), n

    def _usage(self, comps: list[_Completion], prompt_tokens: int) -> dict:
        completion = sum(len(c.pieces) for c in comps)
        details = None
        if self.server.state.server_args.get("enable_cache_report"):
            details = {"cached_tokens": sum(c.cached_tokens for c in comps)}
        return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion,
                "completion_tokens": completion, "prompt_tokens_details": details}

    @staticmethod
    def _finish(c: _Completion) -> tuple[str, Any]:
        return c.finish["type"], c.finish.get("matched")

    def _completions(self) -> None:
        if not self._require_json_content_type():
            return
        ok, body = self._json_body()
        if not ok:
            return
        if not isinstance(body, dict) or "prompt" not in body:
            self._validation_error("1 validation error for CompletionRequest\nprompt\n  Field required "
                                   "[type=missing, input_value={...}, input_type=dict]")
            return
        engine = self.server.engine
        try:
            max_new, ignore_eos, stop, n = self._openai_common(body)
            raw = body["prompt"]
            if isinstance(raw, list) and raw and isinstance(raw[0], (str, list)):
                prompts = [_prompt_from(p) for p in raw]
            else:
                prompts = [_prompt_from(raw)]
            for p in prompts:
                engine.check_length(p.tokens, max_new)
            self._check_size(len(prompts), n, max_new)
            cond = threading.Condition()
            comps = [engine.plan(p, max_new, ignore_eos, stop, cond=cond) for p in prompts for _ in range(n)]
        except RequestError as e:
            self._openai_error(e.status, str(e), e.err_type)
            return
        rid, created, model = _request_id(), int(time.time()), body.get("model") or self._served()
        echo = bool(body.get("echo"))
        prompt_tokens = sum(p.tokens for p in prompts) * n
        prefix = [(prompts[i // n].text or "") if echo else "" for i in range(len(comps))]
        if not body.get("stream"):
            self._wait_all(comps)
            choices = []
            for i, c in enumerate(comps):
                reason, matched = self._finish(c)
                choices.append({"index": i, "text": prefix[i] + c.text, "logprobs": None, "finish_reason": reason,
                                "matched_stop": matched})
            self._json(200, {"id": rid, "object": "text_completion", "created": created, "model": model,
                             "choices": choices, "usage": self._usage(comps, prompt_tokens),
                             "metadata": {"weight_version": "default"}})
            return

        def chunk(choices: list[dict], usage: dict | None = None) -> dict:
            return {"id": rid, "object": "text_completion", "created": created, "model": model,
                    "choices": choices, "usage": usage}

        self._start_stream()
        for i, prev, cur, _t, final in self._events(comps):
            c = comps[i]
            text = "".join(c.pieces[prev:cur])
            if prev == 0:
                text = prefix[i] + text
            if text:
                self._event(chunk([{"index": i, "text": text, "logprobs": None, "finish_reason": None,
                                    "matched_stop": None}]))
            if final:
                reason, matched = self._finish(c)
                self._event(chunk([{"index": i, "text": "", "logprobs": None, "finish_reason": reason,
                                    "matched_stop": matched}]))
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event(chunk([], self._usage(comps, prompt_tokens)))
        self._end_stream()

    def _chat(self) -> None:
        if not self._require_json_content_type():
            return
        ok, body = self._json_body()
        if not ok:
            return
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            missing = not isinstance(body, dict) or "messages" not in body
            what = "Field required" if missing else "Input should be a valid list"
            self._validation_error(f"1 validation error for ChatCompletionRequest\nmessages\n  {what} "
                                   "[type=missing, input_value={...}, input_type=dict]")
            return
        if not messages:
            self._openai_error(400, "Messages cannot be empty.")
            return
        engine = self.server.engine
        try:
            max_new, ignore_eos, stop, n = self._openai_common(body)
            ctx = self.server.state.context_length
            if max_new and max_new > ctx:  # serving_chat._validate_request, verbatim (no space after the dot)
                raise RequestError(f"max_completion_tokens is too large: {max_new}."
                                   f"This model supports at most {ctx} completion tokens.")
            prompt = dataclasses.replace(_prompt_from(render_chat(messages)), chat=True)
            engine.check_length(prompt.tokens, max_new)
            self._check_size(1, n, max_new)
            cond = threading.Condition()
            comps = [engine.plan(prompt, max_new, ignore_eos, stop, cond=cond) for _ in range(n)]
        except RequestError as e:
            self._openai_error(e.status, str(e), e.err_type)
            return
        rid, created, model = _request_id(), int(time.time()), body.get("model") or self._served()
        prompt_tokens = prompt.tokens
        if not body.get("stream"):
            self._wait_all(comps)
            choices = []
            for i, c in enumerate(comps):
                reason, matched = self._finish(c)
                choices.append({"index": i, "message": {"role": "assistant", "content": c.text,
                                                        "reasoning_content": None, "tool_calls": None},
                                "logprobs": None, "finish_reason": reason, "matched_stop": matched})
            self._json(200, {"id": rid, "object": "chat.completion", "created": created, "model": model,
                             "choices": choices, "usage": self._usage(comps, prompt_tokens),
                             "metadata": {"weight_version": "default"}})
            return

        def chunk(choices: list[dict], usage: dict | None = None) -> dict:
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": choices, "usage": usage}

        def delta(i: int, d: dict, reason: str | None = None, matched: Any = None) -> dict:
            return {"index": i, "delta": d, "logprobs": None, "finish_reason": reason, "matched_stop": matched}

        self._start_stream()
        for i, prev, cur, _t, final in self._events(comps):
            c = comps[i]
            if prev == 0:
                self._event(chunk([delta(i, {"role": "assistant", "content": ""})]))
            text = "".join(c.pieces[prev:cur])
            if text:
                self._event(chunk([delta(i, {"role": None, "content": text, "reasoning_content": None,
                                             "tool_calls": None})]))
            if final:
                reason, matched = self._finish(c)
                self._event(chunk([delta(i, {}, reason, matched)]))
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event(chunk([], self._usage(comps, prompt_tokens)))
        self._end_stream()

    def _served(self) -> str:
        return self.server.state.served_model_name


def make_server(state: ServerState, host: str, port: int, limits: RequestLimits | None = None) -> ThreadingHTTPServer:
    """Bind a twin HTTP server (call ``serve_forever()`` on it, ``shutdown()`` to stop). Port 0: any free."""
    return TwinHTTPServer(state, (host, port), limits)
