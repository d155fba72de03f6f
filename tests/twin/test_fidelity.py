"""Drift test: the messages the twin prints and the frames it names are found, as they are, in the pinned real
release (the cached wheel). It fails when the twin's templates drift from the real source, or when a new
pinned release moves or rewords them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandboxes.twin.engine import messages, tracebacks

DOC = Path(__file__).resolve().parents[2] / "docs" / "twin-fidelity.md"


@pytest.mark.parametrize("msg", messages.REAL_MESSAGES, ids=lambda m: m.name)
def test_message_is_in_the_real_source(release_package: Path, msg: messages.RealMessage) -> None:
    text = (release_package / msg.file).read_text()
    assert msg.source in text, f"{msg.name}: {msg.source!r} not in {msg.file}"


@pytest.mark.parametrize("msg", messages.REAL_MESSAGES, ids=lambda m: m.name)
def test_template_renders_what_the_source_formats(msg: messages.RealMessage) -> None:
    """The template's literal text is the source's literal text (interpolations aside)."""
    literal = re.sub(r"\{[^}]*\}", "\0", msg.source.strip().strip("f").strip("'\""))
    template = re.sub(r"\{[^}]*\}", "\0", msg.template)
    for piece in filter(None, (p.strip() for p in literal.split("\0"))):
        if msg.name.startswith(("ReplicatedLinear", "RowParallelLinear")):
            piece = piece.replace("=", "")  # f"{x=}" renders as "x=<value>"
            assert piece in template.replace("=", ""), (piece, msg.template)
        elif msg.template != "AssertionError":
            assert piece in template, (piece, msg.template)


def _all_frames() -> list[tracebacks.Frame]:
    out = []
    for name in dir(tracebacks):
        value = getattr(tracebacks, name)
        if isinstance(value, list) and value and all(isinstance(f, tracebacks.Frame) for f in value):
            out += value
    return out


@pytest.mark.parametrize("frame", _all_frames(), ids=lambda f: f"{f.file.rsplit('/', 1)[-1]}:{f.func}")
def test_frames_name_real_code(release_package: Path, frame: tracebacks.Frame) -> None:
    """Every frame of the call chains is a real statement of the named function, and its recorded line (used
    with the bundled excerpt) is the real one."""
    if frame.file.startswith(("/", "<")):
        return  # the image's standard library, a dataclass's generated __init__
    assert frame.file.startswith("python/sglang/")
    path = release_package / frame.file.removeprefix("python/sglang/")
    assert path.is_file(), frame.file
    lines = path.read_text().splitlines()
    located = _locate_in(release_package, frame)
    assert lines[located - 1].strip().startswith(frame.code), (frame, lines[located - 1])
    assert located == frame.line, f"{frame.file}:{frame.func} is at line {located}, recorded {frame.line}"


def _locate_in(real: Path, frame: tracebacks.Frame) -> int:
    class _Root:  # locate() joins root / frame.file; map python/sglang/... onto the unpacked package
        def __truediv__(self, rel: str) -> Path:
            return real / rel.removeprefix("python/sglang/")

    return tracebacks.locate(_Root(), frame)[1]  # type: ignore[arg-type]


def test_fidelity_doc_lists_every_message() -> None:
    doc = DOC.read_text()
    for msg in messages.REAL_MESSAGES:
        assert msg.file in doc and msg.printed_by in doc, msg.name
