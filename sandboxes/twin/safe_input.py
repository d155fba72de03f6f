"""Files a user names (a task, a scenario, a model config, an eval dataset, a prior run's record), read with bounds.

A named file must be a regular file (a directory, ``/dev/zero``, a FIFO or a socket is refused without being
read), at most a given size (never more than that is read), UTF-8 text; YAML is composed with PyYAML's safe
loader and refused when its aliases would expand it past ``MAX_YAML_NODES`` values (a "billion laughs"), when it
nests deeper than ``MAX_YAML_DEPTH`` or when an alias contains itself, all before a Python object is built.
A problem is :class:`InputFileError`, one line that never quotes the file: a task may name ``/etc/shadow``, and
its first line must not end up on a terminal or in a log. :func:`shown` is how a message may quote a key or a
value of a file that did parse. Standard library and PyYAML only (the twin's image holds this package alone).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from . import shipped_yaml

MiB = 2**20
MAX_YAML_NODES = 100_000  # values in one YAML document once every alias is expanded (a task has ~500)
MAX_YAML_DEPTH = 64  # nesting of one YAML document (a task nests ~6 deep)


class InputFileError(ValueError):
    """A named file that cannot be used. The message is one line and quotes nothing of the file; ``line`` is
    the 1-based line it is about, 0 when none."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.line = line


def size_words(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n} bytes"


def _open_regular(path: str | Path) -> int:
    """A descriptor of ``path``, a regular file (symlinks followed), or ``InputFileError``: nothing that is not a
    regular file is opened for reading, nor waited on (a FIFO swapped in after the stat)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputFileError("no such file") from None
    except NotADirectoryError:
        raise InputFileError("no such file (a part of its path is not a directory)") from None
    except OSError as exc:
        raise InputFileError(f"cannot read it ({exc.strerror or type(exc).__name__})") from None
    _regular(mode)
    try:  # non-blocking: a FIFO swapped in after the stat is not waited on
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputFileError(f"cannot read it ({exc.strerror or type(exc).__name__})") from None
    try:
        _regular(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, a regular file (symlinks followed) of at most ``max_bytes``; at most
    ``max_bytes + 1`` bytes are ever read, and nothing is read from anything that is not a regular file."""
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise InputFileError(f"is {size_words(size)}, over the {size_words(max_bytes)} such a file may "
                                 "be: not read")  # fmt: skip
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(left, MiB))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise InputFileError(f"cannot read it ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:  # it grew while being read
        raise InputFileError(f"is over the {size_words(max_bytes)} such a file may be: not read")
    return data


def read_first_line(path: str | Path, max_bytes: int) -> bytes:
    """The first line of ``path``, a regular file checked as :func:`read_bytes` checks it; at most
    ``max_bytes + 1`` bytes are read (a longer line comes back that long: the caller says what it is not)."""
    fd = _open_regular(path)
    try:
        with os.fdopen(fd, "rb") as f:
            return f.readline(max_bytes + 1)
    except OSError as exc:
        raise InputFileError(f"cannot read it ({exc.strerror or type(exc).__name__})") from None


def _regular(mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise InputFileError("is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise InputFileError("is not a regular file (a device, FIFO or socket): not read")


def read_text(path: str | Path, max_bytes: int) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a binary file is refused at the line it stops being text)."""
    data = read_bytes(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputFileError("is not UTF-8 text (a binary file?)", line) from None


def compose_yaml(text: str, *, shipped: bool = False) -> yaml.Node | None:
    """The node graph of one YAML document (None: an empty one), checked against alias bombs, deep nesting and
    recursive aliases before anything is constructed from it. ``shipped``: the text is one of the twin's own
    files (``shipped_yaml.is_shipped``), which libyaml reads into the same graph, faster; any other text is read
    by PyYAML's pure-Python loader, whose messages and limits the checks here are written for."""
    try:
        node = shipped_yaml.compose(text) if shipped else yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputFileError(f"not valid YAML: {_quiet(exc.problem or 'unreadable')}",
                             mark.line + 1 if mark else 0) from None  # fmt: skip
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1 if isinstance(exc.position, int) else 0
        raise InputFileError(f"not valid YAML: a control character YAML does not allow (#x{exc.character:04x})"
                             if isinstance(exc.character, int) else "not valid YAML: unreadable text", line) from None
    except yaml.YAMLError:
        raise InputFileError("not valid YAML") from None
    except RecursionError:
        raise InputFileError(f"not valid here: nested deeper than {MAX_YAML_DEPTH} levels") from None
    if node is not None:
        _bounded(node)
    return node


def construct_yaml(node: yaml.Node | None) -> Any:
    """The Python value of a node graph from :func:`compose_yaml` (PyYAML's safe constructor)."""
    if node is None:
        return None
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputFileError(f"not valid YAML: {_quiet(exc.problem or 'unreadable')}",
                             mark.line + 1 if mark else 0) from None  # fmt: skip
    except (ValueError, OverflowError, RecursionError):  # e.g. an integer of more digits than Python converts
        raise InputFileError("a value YAML cannot read (a number thousands of digits long?)") from None
    finally:
        loader.dispose()


def load_yaml(text: str) -> tuple[yaml.Node | None, Any]:
    """:func:`compose_yaml`, then :func:`construct_yaml`: the node graph (lines) and the value."""
    node = compose_yaml(text)
    return node, construct_yaml(node)


def _bounded(root: yaml.Node) -> None:
    """Refuse a graph whose expansion (every alias counted at each use) exceeds ``MAX_YAML_NODES`` values, that
    nests deeper than ``MAX_YAML_DEPTH``, or whose alias contains itself. Each node is counted once (memoised),
    so a bomb is refused in time proportional to its text, not to its expansion."""
    size: dict[int, int] = {}
    open_: set[int] = set()

    def visit(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in size:
            return size[key]
        line = node.start_mark.line + 1
        if key in open_:
            raise InputFileError("an alias refers to a node that contains it (a recursive document)", line)
        if depth > MAX_YAML_DEPTH:
            raise InputFileError(f"nested deeper than {MAX_YAML_DEPTH} levels", line)
        open_.add(key)
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        total = 1
        for child in children:
            total += visit(child, depth + 1)
            if total > MAX_YAML_NODES:
                raise InputFileError(f"expands to more than {MAX_YAML_NODES} values once its aliases are expanded "
                                     "(an alias bomb?): not read", line)  # fmt: skip
        open_.discard(key)
        size[key] = total
        return total

    visit(root, 0)


_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")


def _quiet(problem: str) -> str:
    """A PyYAML problem on one line, its quotes of the text cut to what names a character or a token kind."""

    def keep(m: re.Match) -> str:
        inner = m.group(1) if m.group(1) is not None else m.group(2)
        return m.group(0) if len(inner) <= 6 or re.fullmatch(r"<[a-z ]+>", inner) else "'...'"

    return " ".join(_QUOTED.sub(keep, str(problem)).split())


_PLAIN = re.compile(r"[A-Za-z0-9_.+\-/@{}]{1,80}")


def plain(text: object) -> bool:
    """Whether ``text`` may be quoted in a message: a name, number or path of plain characters, at most 80."""
    return isinstance(text, str | int | float) and not isinstance(text, bool) and bool(_PLAIN.fullmatch(str(text)))


def shown(value: object) -> str:
    """``value`` for a message about a file that parsed: its repr when :func:`plain` (or a bool or null), else
    what it is without its content (a secret or a binary blob does not reach a terminal or a log)."""
    if value is None or isinstance(value, bool) or plain(value):
        return repr(value)
    if isinstance(value, int | float):
        return f"a number of {len(str(value))} characters"
    if isinstance(value, str):
        return f"a text of {len(value)} characters (not shown)"
    return f"a {type(value).__name__}"
