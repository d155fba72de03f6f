"""Whether a run's LLM endpoint answers and takes its key, asked once before the run exists.

A policy that needs an LLM would otherwise find an unreachable endpoint, a wrong base URL or a refused key only at
its first decision: after the run folder, its workspace and its trace were made, as an infrastructure failure of
a run that never began. :func:`check_endpoint` sends one cheap request instead (``GET /models``, which every
OpenAI-compatible server we know answers: OpenAI, vLLM, SGLang, llama.cpp, Ollama; where a server has no such
route, a one-token chat completion), with no retries and a short timeout, and raises an :class:`EndpointError` of
one line that says whose the problem is.

It does not check the model name against ``GET /models``: several servers (SGLang, llama.cpp) list a path or an
alias and serve whatever name a request gives.
"""

from __future__ import annotations

from typing import Any

from .outcomes import ExitCode

CHECK_TIMEOUT_S = 10.0  # the check's own bound (a policy's timeout is for a whole reply of a large model)
NO_ROUTE = (404, 405, 501)  # a server without GET /models: ask for a one-token completion instead
MESSAGE_CHARS = 160


class EndpointError(ValueError):
    """The endpoint cannot serve the run; the message is one line. ``exit_code``: ``BAD_INPUT`` for what the user
    gave (the key, the URL), ``INFRASTRUCTURE`` for a server that is down or failing."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = int(exit_code)


def _server_words(exc: Any, secrets: list[str]) -> str:
    """What the server said, on one line, bounded, without the key (a server may echo the header it refused)."""
    body = getattr(exc, "body", None)
    text = body.get("message") if isinstance(body, dict) and isinstance(body.get("message"), str) else None
    text = " ".join((text or getattr(exc, "message", None) or str(exc)).split())
    for secret in secrets:
        text = text.replace(secret, "***")
    return text[:MESSAGE_CHARS]


def _why_unreachable(exc: BaseException) -> str:
    """The innermost cause of a connection failure (``Connection refused``, a DNS failure), in words."""
    inner = exc
    for _ in range(10):  # bounded: a chain of causes is short, and must not loop
        if (nxt := inner.__cause__ or inner.__context__) is None:
            break
        inner = nxt
    text = " ".join(str(inner).split()) or type(inner).__name__
    return text.rsplit("] ", 1)[-1][:MESSAGE_CHARS]  # "[Errno 111] Connection refused" -> "Connection refused"


def check_endpoint(client: Any, base_url: str, model: str, secrets: list[str] | None = None,
                   timeout_s: float = CHECK_TIMEOUT_S) -> None:  # fmt: skip
    """Raise :class:`EndpointError` unless the OpenAI-compatible endpoint of ``client`` (an ``openai.OpenAI``)
    answers and accepts its key. One request (two for a server without ``GET /models``), no retries."""
    import openai

    quick = client.with_options(max_retries=0, timeout=timeout_s)
    secrets = [s for s in secrets or [] if s]

    def fail(exc: Exception, asked: str) -> EndpointError:
        if isinstance(exc, openai.APITimeoutError):
            return EndpointError(f"the LLM endpoint {base_url} did not answer {asked} within {timeout_s:g} s",
                                 ExitCode.INFRASTRUCTURE)  # fmt: skip
        if isinstance(exc, openai.APIConnectionError):
            return EndpointError(f"cannot reach the LLM endpoint {base_url}: {_why_unreachable(exc)}",
                                 ExitCode.INFRASTRUCTURE)  # fmt: skip
        status = getattr(exc, "status_code", None)
        said = _server_words(exc, secrets)
        if status in (401, 403):
            return EndpointError(f"the LLM endpoint {base_url} refused the API key (HTTP {status}: {said}); set "
                                 "OPENAI_API_KEY to a key it accepts", ExitCode.BAD_INPUT)  # fmt: skip
        if status in NO_ROUTE:
            return EndpointError(f"the LLM endpoint {base_url} has no {asked} (HTTP {status}: {said}); check "
                                 "--llm-base-url (an OpenAI-compatible one usually ends in /v1) and --llm-model",
                                 ExitCode.BAD_INPUT)  # fmt: skip
        return EndpointError(f"the LLM endpoint {base_url} answered {asked} with HTTP {status}: {said}",
                             ExitCode.INFRASTRUCTURE)  # fmt: skip

    try:
        quick.models.list()
        return
    except openai.RateLimitError:
        return  # reachable, and the key was taken: a busy endpoint is the run's retries' to wait for
    except openai.APIStatusError as exc:
        if exc.status_code not in NO_ROUTE:
            raise fail(exc, "GET /models") from None
    except openai.APIError as exc:
        raise fail(exc, "GET /models") from None
    try:  # no GET /models here: the route the run will use, for one token
        quick.chat.completions.create(model=model, messages=[{"role": "user", "content": "ping"}], max_tokens=1)
    except openai.RateLimitError:
        return
    except openai.APIError as exc:
        raise fail(exc, "a chat completion") from None
