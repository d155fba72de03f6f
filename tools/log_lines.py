"""A log's lines as their writers meant them: one record per line, each with the stream that wrote it.

What reaches a reader is rarely what the program printed. Launchers put prefixes in front of every line (a docker
compose service, a Ray actor ``(RayWorkerWrapper pid=269885, ip=10.189.109.87)``, a vLLM worker
``(VllmWorker rank=6 pid=6132)``, torchrun's ``[rank3]:``, a logger's time stamp), terminals colour them, Ray folds
repeats (``[repeated 7x across cluster]``), a paste from a terminal cuts every long record at the screen's width, and a
paste that lost its line breaks runs a whole traceback together on one line.
Every rule that reads a log reads it through :func:`entries`, so that no rule has to know any of this.

A *stream* prefix says which process wrote the line (interleaved ranks must not be mixed up); a *record* prefix (a
time stamp, a logger header) says nothing about the traceback and is dropped.
"""

from __future__ import annotations

import re
from collections import Counter

# terminal colours, as written (ESC) and as GitHub renders a pasted ESC (U+FFFD)
_ANSI = re.compile(r"(?:\x1b|\ufffd)\[[\d;]*m")
# Ray folds identical lines of its actors into one, with a count at the end
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_COMPOSE_PREFIX = re.compile(r"[\w.-]+ +\| ?")  # docker compose: "sglang-1  | "
# a process tag in parentheses that names the process: "(Worker_TP0 pid=1267)", "(VllmWorker rank=6 pid=6132)",
# Ray's "(pid=971, ip=158.219.199.67)", "(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=162837)"
_PID = re.compile(r"\bpid=\d+")
_RANK_PREFIX = re.compile(r"\[(?:rank|default)\d+\]: ?")  # torch.distributed / torchrun: "[rank0]: ", "[default0]:"
_RECORD_PREFIX = (
    re.compile(r"\[\d{4}-\d\d-\d\d[T ][\d:.,]+Z?(?: [A-Z]+\d+)*\] ?"),  # SGLang "[2025-03-20 00:44:38 TP3] ", CI
    re.compile(r"\d{4}-\d\d-\d\d[T ][\d:.,]+Z? "),  # CI runners' time stamps
    re.compile(r"\d\d:\d\d:\d\d[.,]\d+ "),  # a time of day a log collector put in front
    re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
               r"(?:\[[^\]]*\]|[\w.]+:\d+\])(?: |$)"),  # vLLM's logger, new "[core.py:1231]" and old "engine.py:366]"
    re.compile(r"\[(?:Error|Warning|Info|Debug)\] (?:\(\w+\) )?"),  # a launcher's own level tag
    re.compile(r"-->(?:\[History\]: )?"),  # aiter's JIT build history
    re.compile(r"[\w.-]+:\d+:\d+ \[\d+\] "),  # NCCL/RCCL's debug lines: "host:pid:tid [cudaDev] "
)
# where a new record starts rather than a wrapped one continuing: a Python traceback's own lines
_RECORD_START = re.compile(r"Traceback \(most recent call last\)|\s*File \"|During handling|The above exception")
# a terminal wrap is at least this wide; narrower repeated lengths are ordinary short lines
_MIN_WRAP_WIDTH = 60
# a traceback frame's header; Python prints it on a line of its own, the source line under it, the carets under that
_FRAME_HEAD = re.compile(r'File "[^"]+", line \d+, in \S+')
_TRAILING_CARETS = re.compile(r"^(.*?)\s+([\^~]+)\s*$")


def _process_tag(line: str) -> int:
    """The length of a parenthesised process tag opening ``line`` (0 when there is none): balanced parentheses, as
    Ray nests actor names, naming a ``pid=``."""
    if not line.startswith("("):
        return 0
    depth = 0
    for i, ch in enumerate(line):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            tag = line[: i + 1]
            if not _PID.search(tag):
                return 0
            return i + 2 if line[i + 1 : i + 2] == " " else i + 1
    return 0


def split(line: str) -> tuple[str, str]:
    """(the stream the line belongs to, the line without the launchers' prefixes, colours and Ray's repeat count)."""
    line = _RAY_REPEAT.sub("", _ANSI.sub("", line))
    source: list[str] = []
    if m := _COMPOSE_PREFIX.match(line):
        source.append(m.group(0).split("|")[0].strip())
        line = line[m.end():]
    while True:
        if n := _process_tag(line):
            source.append(line[:n].strip())
            line = line[n:]
            continue
        if m := _RANK_PREFIX.match(line):
            source.append(m.group(0).strip())
            line = line[m.end():]
            continue
        for p in _RECORD_PREFIX:
            if m := p.match(line):
                line = line[m.end():]
                break
        else:
            return " ".join(source), line


def _prefixed(line: str) -> bool:
    """Whether ``line`` opens with a launcher's prefix (so it is a record of its own, never a wrapped remainder)."""
    return split(line)[1] != _RAY_REPEAT.sub("", _ANSI.sub("", line)) or bool(_COMPOSE_PREFIX.match(line))


def unwrap(lines: list[str]) -> list[str]:
    """Join the pieces of records a terminal cut at its width.

    A paste from a terminal cuts every record longer than the screen into lines of exactly the screen's width. The
    width shows as the longest line length occurring on two or more different lines; a line of that width is joined
    with the next unless the next one opens a record of its own (a launcher's prefix, a traceback's line, a blank),
    or the line is padded with blanks (the last piece of its record), or it is printed verbatim elsewhere (a record
    printed twice is complete, a cut is not)."""
    plain = [_ANSI.sub("", ln) for ln in lines]
    lengths = Counter(len(ln) for ln in plain)
    width = max(lengths, default=0)
    counts = Counter(plain)
    if width < _MIN_WRAP_WIDTH or lengths[width] < 2:
        return plain
    out: list[str] = []
    i = 0
    while i < len(plain):
        cur = plain[i]
        while (i + 1 < len(plain) and len(plain[i]) == width and counts[plain[i]] == 1
               and not plain[i].endswith("  ") and plain[i + 1].strip() and not _prefixed(plain[i + 1])
               and not _RECORD_START.match(plain[i + 1])):  # fmt: skip
            i += 1
            cur += plain[i]
        out.append(cur)
        i += 1
    return out


def unjoin(body: str) -> list[str]:
    """The records of a line a paste ran together (its line breaks lost), or ``[body]``.

    Python never prints anything after a frame header's function name, so text there, or a second header on the same
    line, means the lines of a traceback were joined: each header becomes a record again, the source line after it an
    indented one (as Python prints it) and the carets under it one more. A line that does not open with a header is
    left alone (a source line may quote ``File "..."`` itself)."""
    heads = list(_FRAME_HEAD.finditer(body))
    if not heads or body[: heads[0].start()].strip():
        return [body]
    ends = [h.start() for h in heads[1:]] + [len(body)]
    rests = [body[h.end() : end].strip() for h, end in zip(heads, ends, strict=True)]
    if len(heads) == 1 and not rests[0]:
        return [body]
    out: list[str] = []
    for head, rest in zip(heads, rests, strict=True):
        out.append(head.group(0))
        if m := _TRAILING_CARETS.match(rest):
            out += [f"    {m.group(1)}", f"    {m.group(2)}"]
        elif rest:
            out.append(f"    {rest}")
    return out


def entries(log: str) -> list[tuple[str, str]]:
    """The log's records, wraps joined and run-together frames split, each as (stream, text without prefixes)."""
    out: list[tuple[str, str]] = []
    for line in unwrap(log.splitlines()):
        source, body = split(line)
        out += [(source, piece) for piece in unjoin(body)]
    return out
