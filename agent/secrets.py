"""Secrets, and the one redaction every file a run writes goes through.

What is secret:

- the configured values (:func:`configured_secrets`): the LLM's API key (``OPENAI_API_KEY``, or the key the policy
  was given), the task's secret ``env`` values (``TaskSpec.secrets()``: those marked ``secret: true``, those read
  from the environment with ``from_env`` unless marked ``secret: false``, those whose name names a secret), and
  the values of the engines' and Docker's variables whose name names a secret (``ENGINE_API_KEY``);
- values shaped like a credential, whoever wrote them: ``sk-...``, ``hf_...``, ``ghp_...``, ``github_pat_...``,
  ``AKIA...``, ``xoxb-...``, a PEM private key, the token of ``Bearer <token>``;
- the value of an assignment to a secret-named variable in text (``HF_TOKEN=...``, ``'OPENAI_API_KEY': '...'``,
  names in upper case as environments print them);
- in structured data, the value of any key that names a secret (:func:`is_secret_key`), whatever it holds.

A :class:`Redactor` holds the configured values and applies all of it: ``redactor(obj)`` to JSON-like data and
pydantic models (a copy; what holds no secret is returned as it is), ``redactor.text(s)`` to text (each secret
becomes ``***``), ``redactor.scrub_file(path)`` to a file another process writes (masked in place, byte for
byte, so a writer appending to it is undisturbed), ``redactor.holds_secret(s)`` to refuse what must never be
written at all (a workspace edit, a commit). :class:`LogScrubber` sweeps the files engines write under a run.
Where each sink calls it: docs/reliability.md, "Secrets".
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

REDACTED = "***"
MIN_SECRET_LENGTH = 4  # shorter values are never treated as secrets (they would mask every "on" and "1")
LLM_KEY_ENVS = ("OPENAI_API_KEY",)  # where the LLM policy reads its key

# ------------------------------------------------------------------------------------------ secret names

# Words that make a key name a secret: OPENAI_API_KEY, apiKey, x-api-key, HF_TOKEN, accessToken, client_secret,
# Authorization, DB_PASSWORD... but not max_tokens, tokenizer, SGLANG_INIT_NEW_TOKEN_RATIO or EOS_TOKEN_ID (a
# token or an authorization word only counts as the last word: what follows it says the value is something else).
_ANYWHERE = {"secret", "secrets", "password", "passwords", "passwd"}
_LAST = {"token", "authorization", "apikey", "credential", "credentials"}
_KEY_AFTER = {"api", "access", "private", "secret", "signing", "encryption", "ssh", "session", "master", "auth"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEGMENT_SPLIT = re.compile(r"[^a-z0-9]+")
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")  # what a variable, field or header name is made of


@functools.lru_cache(maxsize=8192)  # the same few keys, over and over (every checkpoint of a state)
def is_secret_key(key: str) -> bool:
    """Whether a name (a dict key, an environment variable) names a secret: ``secret`` or ``password`` as a word of
    it; ``token``, ``authorization``, ``apikey``, ``credential(s)`` as its last word; ``key`` as its last word after
    ``api``, ``access``, ``private``, ``secret``... or in an upper-case variable name (``SIGNING_KEY``). A key that
    is not a name (data used as a key: a serialized configuration holding ``"api_key": null``) names nothing."""
    if not _NAME.fullmatch(key):
        return False
    words = [w for w in _SEGMENT_SPLIT.split(_CAMEL.sub("_", key).lower()) if w]
    if not words:
        return False
    if any(w in _ANYWHERE for w in words) or words[-1] in _LAST:
        return True
    if words[-1] == "key" and len(words) > 1:
        return words[-2] in _KEY_AFTER or key.isupper()
    return False


# ------------------------------------------------------------------------------------------- what to find

_BEARER = re.compile(r"(?i)\bbearer\s+([^\s\"'`]+)")
_SHAPES = re.compile("|".join([
    r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{8,}",  # OpenAI and compatible API keys
    r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}",  # Hugging Face tokens
    r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{30,}",
    r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",  # AWS access key ids
    r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}",  # Slack tokens
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
]))  # fmt: skip
# NAME=value, NAME: value, 'NAME': 'value', "NAME"="value", with NAME in upper case (as environments are printed)
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_])([A-Z][A-Z0-9_]*)[\"']?[ \t]*[=:][ \t]*[\"']?([^\s\"',;)}\]]+)")
# what a text holding a secret of those kinds must contain: one search of it tells most texts apart
_HINTS = r"sk-|hf_|gh[pousr]_|github_pat_|AKIA|ASIA|xox|PRIVATE KEY|(?i:bearer)|TOKEN|KEY|SECRET|PASSW|AUTHORIZATION|CREDENTIAL"
_NOT_A_VALUE = {"none", "null", "true", "false", "unset", "empty", "redacted"}


def _assigned_secret(name: str, value: str) -> bool:
    return (is_secret_key(name) and len(value) >= MIN_SECRET_LENGTH and not value.startswith("$")
            and value.lower() not in _NOT_A_VALUE and set(value) != {"*"})  # fmt: skip


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _literal_pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    ordered = sorted(set(values), key=len, reverse=True)  # longest first: overlapping values are masked whole
    return re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None


def _hint_pattern(values: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join([*(re.escape(v) for v in values), _HINTS]))


# texts remembered with what they mask to (a state's strings recur at every checkpoint), up to these bounds
_CACHE_ENTRIES, _CACHE_CHARS = 65536, 1 << 25


# ------------------------------------------------------------------------------------------- the redactor


class Redactor:
    """The configured secret values (at least ``MIN_SECRET_LENGTH`` characters; ``add`` more at any time) and
    the rules above. Thread-safe."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset()
        self._patterns: tuple[re.Pattern[str] | None, re.Pattern[str] | None] = (None, None)
        self._hint = _hint_pattern(())
        self._cache: dict[str, object] = {}
        self._cached_chars = 0
        for s in secrets:
            self.add(s)

    def add(self, value: Any) -> None:
        """Treat ``value`` as secret from now on (values that are not strings, or shorter than 4, are ignored)."""
        if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
            return
        with self._lock:
            if value in self._values:
                return
            values = self._values | {value}
            # the second pattern finds them in bytes read as latin-1 (one character per byte: offsets are bytes)
            as_bytes = [v.encode("utf-8").decode("latin-1") for v in values]
            self._patterns = (_literal_pattern(values), _literal_pattern(as_bytes))
            self._hint = _hint_pattern(values)
            self._values = values
            self._cache, self._cached_chars = {}, 0

    @property
    def values(self) -> frozenset[str]:
        return self._values

    def __repr__(self) -> str:
        return f"Redactor({len(self._values)} configured value(s))"

    # -- finding

    def spans(self, text: str, *, latin1: bool = False, assignments: bool = True) -> list[tuple[int, int]]:
        """Where the secrets of ``text`` are, as merged ``(start, end)`` ranges: the configured values, the
        credential shapes, Bearer tokens and (with ``assignments``) the values of secret-named assignments."""
        literal = self._patterns[1 if latin1 else 0]
        if not latin1 and not self._hint.search(text):
            return []
        found: list[tuple[int, int]] = []
        if literal is not None:
            found += [m.span() for m in literal.finditer(text)]
        found += [m.span() for m in _SHAPES.finditer(text)]
        if assignments:
            found += [m.span(1) for m in _BEARER.finditer(text) if set(m.group(1)) != {"*"}]
            found += [m.span(2) for m in _ASSIGNMENT.finditer(text) if _assigned_secret(m.group(1), m.group(2))]
        return _merge(found)

    def holds_secret(self, text: str) -> bool:
        """Whether ``text`` holds a configured value or a credential-shaped one (what must never be written into the
        workspace or committed; assignments are not looked at: ``API_KEY = os.environ[...]`` is code, not a key)."""
        return bool(self.spans(text, assignments=False))

    # -- masking

    def text(self, text: str) -> str:
        """``text`` with each secret replaced by ``***`` (``text`` itself when it holds none)."""
        cache = self._cache
        if (done := cache.get(text)) is not None:
            return text if done is _SAME else done  # type: ignore[return-value]
        spans = self.spans(text)
        if len(cache) >= _CACHE_ENTRIES or self._cached_chars >= _CACHE_CHARS:
            cache.clear()
            self._cached_chars = 0
        self._cached_chars += len(text)
        if not spans:
            cache[text] = _SAME
            return text
        out, pos = [], 0
        for start, end in spans:
            out += [text[pos:start], REDACTED]
            pos = end
        out.append(text[pos:])
        cache[text] = masked = "".join(out)
        return masked

    def __call__(self, obj: Any) -> Any:
        """A copy of ``obj`` (dicts, lists, tuples, strings, pydantic models, scalars) with its secrets masked: every
        string, dict keys included, through :meth:`text`, and the value of any key that names a secret ``***``
        whatever it holds (None stays None). Parts that hold no secret are the same objects as in ``obj``."""
        return self._obj(obj)

    def _obj(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is str:
            return self.text(obj)
        if kind in _SCALARS:
            return obj
        if isinstance(obj, dict):
            out, changed = {}, False
            for key, value in obj.items():
                new_key = self.text(key) if type(key) is str else key
                if type(key) is str and value is not None and value != REDACTED and is_secret_key(key):
                    new = REDACTED
                else:
                    new = self._obj(value)
                changed = changed or new is not value or new_key is not key
                out[new_key] = new
            return out if changed else obj
        if isinstance(obj, list | tuple):
            items = [self._obj(v) for v in obj]
            if all(a is b for a, b in zip(items, obj, strict=True)):
                return obj
            return items if isinstance(obj, list) else tuple(items)
        if isinstance(obj, BaseModel):
            update = {}
            for name, value in obj.__dict__.items():  # the fields' values
                new = self._obj(value)
                if new is not value:
                    update[name] = new
            return obj.model_copy(update=update) if update else obj
        if isinstance(obj, str):  # a str subclass
            return self.text(obj)
        return obj

    def scrub_file(self, path: Path | str, start: int = 0) -> int:
        """Mask the secrets of ``path`` from byte ``start`` on, in place: each masked byte becomes ``*``, so the file
        keeps its size and a process appending to it meanwhile loses nothing. Returns the bytes masked."""
        try:
            with open(path, "r+b") as f:
                f.seek(start)
                data = f.read()
                masked = 0
                for s, e in self.spans(data.decode("latin-1"), latin1=True):
                    os.pwrite(f.fileno(), b"*" * (e - s), start + s)
                    masked += e - s
                return masked
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            return 0


_SAME = object()  # in the cache: the text holds no secret
_SCALARS = frozenset({int, float, bool, type(None), bytes})


def configured_secrets(task: Any = None, extra: Iterable[str | None] = ()) -> list[str]:
    """The values to mask for a run of ``task``: its secret env values (``TaskSpec.secrets()``), its engines' and
    Docker's variables whose name names a secret, the LLM key of this process's environment, and ``extra``."""
    values = [v for v in extra if v]
    values += [os.environ[name] for name in LLM_KEY_ENVS if os.environ.get(name)]
    if task is not None:
        values += task.secrets()
        engines = [getattr(task.engines, name, None) for name in ("sglang", "twin")]
        envs = [e.env for e in engines if e is not None] + [task.sandbox.docker.env]
        values += [v for env in envs for k, v in env.items() if is_secret_key(k)]
    return values


def secret_references(task: Any, env: dict[str, str], redactor: Redactor | None = None) -> dict[str, str]:
    """For a command a person runs again (``launch.sh``, a PR's reproduce line): the variables of ``env`` (an engine
    environment) whose values are secret, each with the shell reference that stands for it: ``$SOURCE`` for a task
    variable read from the environment, else ``$NAME``. The command then runs where those are set, and never holds
    the values."""
    refs: dict[str, str] = {}
    for name, value in env.items():
        spec = task.env.get(name) if task is not None else None
        if spec is not None and spec.is_secret(name):
            refs[name] = "$" + (spec.from_env or name)
        elif is_secret_key(name) or (redactor is not None and redactor.holds_secret(value)):
            refs[name] = "$" + name
    return refs


def run_redactor(run_dir: Path) -> Redactor:
    """The redactor of a finished run's folder, for what reads it and writes (``agent review``, the report): the
    secrets of its task (found as run.json names it; none if it is gone) and the LLM key of this environment."""
    import json

    from tasks.spec import TaskError, load_task

    task = None
    try:
        task_path = json.loads((Path(run_dir) / "run.json").read_text()).get("task_path")
        task = load_task(Path(task_path)) if task_path else None
    except (OSError, ValueError, TaskError):
        pass
    return Redactor(configured_secrets(task))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret masked (see :class:`Redactor`)."""
    return Redactor(secrets).text(text)


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``obj`` with its secrets masked (see :meth:`Redactor.__call__`)."""
    return Redactor(secrets)(obj)


# ------------------------------------------------------------------------------------- engines' own files


class LogScrubber:
    """Masks the secrets of the files engines write themselves under a run folder, which no writer of the agent's
    redacts: server logs (an engine may print its environment), tuner and trial logs, the benchmark's records in the
    workspace. Each :meth:`sweep` scans what each file gained since the last (with an overlap, for a secret that was
    half written then) and masks it in place (:meth:`Redactor.scrub_file`)."""

    FOLDERS = ("logs", "bench", "trials", "workspace/.bench")
    OVERLAP = 256  # bytes before the last scanned end that are read again, beyond the longest configured value

    def __init__(self, run_dir: Path, redactor: Redactor) -> None:
        self.run_dir = Path(run_dir)
        self.redactor = redactor
        self._scanned: dict[Path, int] = {}

    def sweep(self) -> int:
        """Scan what is new; returns the bytes masked."""
        masked = 0
        overlap = self.OVERLAP + max((len(v.encode()) for v in self.redactor.values), default=0)
        for folder in self.FOLDERS:
            base = self.run_dir / folder
            if not base.is_dir():
                continue
            for path in base.rglob("*"):
                try:
                    if path.is_symlink() or not path.is_file():
                        continue
                    size = path.stat().st_size
                except OSError:
                    continue
                done = self._scanned.get(path, 0)
                if size == done:
                    continue
                start = 0 if size < done else max(0, done - overlap)  # shorter: rewritten, scanned whole again
                masked += self.redactor.scrub_file(path, start)
                self._scanned[path] = size
        return masked


__all__ = [
    "LLM_KEY_ENVS",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "LogScrubber",
    "Redactor",
    "configured_secrets",
    "is_secret_key",
    "redact",
    "redact_text",
    "run_redactor",
    "secret_references",
]
