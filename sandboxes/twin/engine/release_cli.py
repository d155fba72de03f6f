"""SGLang's ``launch_server`` command line, as the release in the workspace defines it: its own parser.

SGLang's ``prepare_server_args`` makes an ``argparse.ArgumentParser`` and hands it to ``ServerArgs.add_cli_args``
(``sglang/srt/server_args.py``), which declares every flag with ``parser.add_argument``: defaults taken from
the ``ServerArgs`` dataclass, choices from module constants and from other files (the tool-call and reasoning
parsers' names), types and actions from ``utils/common.py`` (``arg_groups/`` in 0.5.13). ``derive`` runs that
code as written (``loading.pure_imports``: the workspace's own definitions, no torch) on a real parser, and
also runs the release's ``ServerArgs.from_cli_args`` to learn which parsed value each ``ServerArgs`` field takes
(``--tp-size`` is parsed into ``tensor_parallel_size``, which becomes ``tp_size``).

Running it costs about half a second, and every launch parses its command line: what it found is kept as
plain data (``ReleaseCli``) in the per-user cache, by the contents of every file the derivation read, and the
parser is rebuilt from that in a few milliseconds. The release's own type functions and action classes are
named in that data and loaded from the tree when a flag that uses them is given (``_ReleaseCallable``,
``_release_action``). ``merge_config`` runs the release's ``ConfigArgumentMerger`` for ``--config file.yaml``
exactly where ``prepare_server_args`` does. Standard library only (and PyYAML for ``--config``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib
import io
import marshal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import cache_files
from .loading.pure_code import PureCodeError, parse
from .loading.pure_imports import PureImports
from .loading.stubs import StubValue

MODULE = "sglang.srt.server_args"
FILE = "sglang/srt/server_args.py"  # under the tree's python root (the folder that holds ``sglang/``)
FORMAT = 1  # of the cached data: bumped when what ``derive`` records changes
CACHE_FOLDER = "server-args"
CACHE_KEEP = 64  # entries in the per-user cache (one per server_args.py text and what it read)
_REF = "\0ref"  # the key of an encoded reference to a function or class
_NOT_STATE = frozenset({"container"})  # what argparse keeps on an action that is not the action's own


class ReleaseCliError(RuntimeError):
    """The release's command line could not be derived from the tree (``path``: its ``server_args.py``)."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class _Unencodable(ValueError):
    pass


@dataclass
class ReleaseCli:
    """The release's parser as data: what ``ServerArgs.add_cli_args`` declared, how ``from_cli_args`` maps it."""

    python_root: Path  # the tree it was derived from (its type functions and actions are loaded from there)
    prog: str  # prepare_server_args' ArgumentParser(prog=...)
    actions: list[dict[str, Any]]  # each: {"class": ref, "state": the action's attributes (encoded)}
    groups: list[dict[str, Any]]  # the parser's argument groups: title, description, action indices
    fields: dict[str, str]  # ServerArgs field -> the parser's dest it is read from (from_cli_args)
    config_merger: tuple[str, str] | None  # (module, class) prepare_server_args merges --config with
    files: list[tuple[str, str]]  # (path under python_root, sha256) of every file the derivation read
    _importer: PureImports | None = field(default=None, repr=False)
    _classes: dict[tuple[str, str], type] = field(default_factory=dict, repr=False)

    @property
    def source(self) -> Path:
        return self.python_root / FILE

    def importer(self) -> PureImports:
        if self._importer is None:
            self._importer = PureImports(self.python_root)
        return self._importer

    def parser(self) -> argparse.ArgumentParser:
        """A fresh ``argparse`` parser with the release's actions, in its order, with its prog."""
        parser = argparse.ArgumentParser(prog=self.prog, add_help=False)
        while len(parser._action_groups) < len(self.groups):
            g = self.groups[len(parser._action_groups)]
            parser.add_argument_group(g["title"], g["description"])
        for group, g in zip(parser._action_groups, self.groups, strict=True):
            group.title, group.description = g["title"], g["description"]
        owner = {i: group for group, g in zip(parser._action_groups, self.groups, strict=True) for i in g["actions"]}
        for i, spec in enumerate(self.actions):
            cls = self._decode(spec["class"])
            action = object.__new__(cls)
            action.__dict__.update({k: self._decode(v) for k, v in spec["state"].items()})
            owner.get(i, parser)._add_action(action)
        return parser

    def defaults(self) -> dict[str, Any]:
        """Each ServerArgs field's value when no flag sets it (the parser's default of its dest)."""
        by_dest = {}
        for spec in self.actions:
            state = spec["state"]
            by_dest.setdefault(state["dest"], self._decode(state.get("default")))
        return {f: by_dest.get(dest) for f, dest in self.fields.items()}

    def option_of(self) -> dict[str, str]:
        """Each ServerArgs field's flag: the first long option string of the first action of its dest."""
        by_dest: dict[str, str] = {}
        for spec in self.actions:
            state = spec["state"]
            longs = [s for s in state["option_strings"] if s.startswith("--")]
            if longs:
                by_dest.setdefault(state["dest"], longs[0])
        return {f: by_dest[dest] for f, dest in self.fields.items() if dest in by_dest}

    def server_args(self, raw: argparse.Namespace) -> dict[str, Any]:
        """``ServerArgs.from_cli_args``: every field, from the parsed dest it is read from."""
        return {f: getattr(raw, dest) for f, dest in self.fields.items()}

    def merge_config(self, parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
        """``prepare_server_args``: with ``--config`` in ``argv``, the release's ``ConfigArgumentMerger`` merges
        the YAML file's arguments with the command line's (its errors are its own)."""
        if self.config_merger is None or "--config" not in argv:
            return argv
        merger = self.importer().value(*self.config_merger)
        if isinstance(merger, StubValue):
            raise ReleaseCliError(f"cannot load {'.'.join(self.config_merger)} from {self.python_root}", self.source)
        return merger(parser).merge_config_with_args(argv)

    def _decode(self, value: Any) -> Any:
        if isinstance(value, dict) and _REF in value:
            kind, module, name, *rest = value[_REF]
            if kind == "py":
                return _python_object(module, name)
            if kind == "action":
                key = (module, name)
                if key not in self._classes:
                    self._classes[key] = _release_action(self, module, name, _python_object(rest[0], rest[1]))
                return self._classes[key]
            return _ReleaseCallable(self, module, name)
        if value == argparse.SUPPRESS:  # argparse tests it by identity, and marshal makes another string
            return argparse.SUPPRESS
        if isinstance(value, list):
            return [self._decode(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._decode(v) for v in value)
        if isinstance(value, dict):
            return {k: self._decode(v) for k, v in value.items()}
        return value

    def data(self) -> dict[str, Any]:
        return {"format": FORMAT, "prog": self.prog, "actions": self.actions, "groups": self.groups,
                "fields": self.fields, "config_merger": self.config_merger, "files": self.files}  # fmt: skip

    @classmethod
    def from_data(cls, python_root: Path, data: dict[str, Any]) -> ReleaseCli:
        return cls(python_root=python_root, prog=data["prog"], actions=data["actions"], groups=data["groups"],
                   fields=data["fields"], config_merger=tuple(data["config_merger"]) if data["config_merger"] else None,
                   files=[tuple(f) for f in data["files"]])  # fmt: skip


def _python_object(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class _ReleaseCallable:
    """A function of the release used as a flag's ``type`` (``human_readable_int``), loaded from the tree the
    first time a flag given on the command line needs it; argparse names it by its ``__name__`` in messages."""

    def __init__(self, cli: ReleaseCli, module: str, name: str) -> None:
        self._dz = (cli, module, name)
        self.__name__ = name.rpartition(".")[2]

    def _resolve(self) -> Callable[..., Any]:
        cli, module, name = self._dz
        fn = cli.importer().value(module, name)
        if isinstance(fn, StubValue):
            raise ReleaseCliError(f"cannot load {module}.{name} from {cli.python_root}", cli.source)
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self.__name__}>"


def _release_action(cli: ReleaseCli, module: str, name: str, base: type) -> type:
    """An action class of the release (``DeprecatedAction``, ``LoRAPathAction``), standing on the argparse class
    it derives from; its ``__call__`` is the release's own, loaded when the flag is given."""

    def __call__(self: argparse.Action, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        real = cli.importer().value(module, name)
        if isinstance(real, StubValue):
            raise ReleaseCliError(f"cannot load {module}.{name} from {cli.python_root}", cli.source)
        real.__call__(self, parser, namespace, values, option_string)

    return type(name, (base,), {"__call__": __call__, "__module__": module, "__qualname__": name})


# --- deriving it -------------------------------------------------------------------------------------------------


def _prog_and_merger(tree: ast.Module) -> tuple[str, tuple[str, str] | None]:
    """``prepare_server_args``' ``ArgumentParser(prog=...)`` and the ``--config`` merger it imports."""
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "prepare_server_args"), None)
    if fn is None:
        return "sglang serve", None
    prog, merger = "sglang serve", None
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("ArgumentParser"):
            for kw in n.keywords:
                if kw.arg == "prog" and isinstance(kw.value, ast.Constant):
                    prog = kw.value.value
        if isinstance(n, ast.ImportFrom) and n.module and any("Merger" in a.name for a in n.names):
            merger = (n.module, next(a.name for a in n.names if "Merger" in a.name))
    return prog, merger


class _Dest:
    """A unique value standing for one parsed dest while ``from_cli_args`` runs."""

    def __init__(self, dest: str) -> None:
        self.dest = dest


def _fields(server_args_cls: type, parser: argparse.ArgumentParser, path: Path) -> dict[str, str]:
    """Run the release's ``ServerArgs.from_cli_args`` on a namespace of stand-ins: which dest each field reads."""
    raw = argparse.Namespace(**{a.dest: _Dest(a.dest) for a in parser._actions if a.dest != "help"})
    made: dict[str, Any] = {}

    class Recorder(server_args_cls):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: Any) -> None:  # the dataclass's __init__ (and __post_init__) never runs
            made.update(kwargs)

    from_cli = server_args_cls.__dict__["from_cli_args"].__func__
    try:
        from_cli(Recorder, raw)
    except Exception as exc:
        raise ReleaseCliError(f"ServerArgs.from_cli_args: {type(exc).__name__}: {exc}", path) from None
    out = {}
    for name, value in made.items():
        if not isinstance(value, _Dest):
            raise ReleaseCliError(f"ServerArgs.from_cli_args computes {name}: not a parsed value", path)
        out[name] = value.dest
    return out


def derive(python_root: Path) -> ReleaseCli:
    """Run the release's ``ServerArgs.add_cli_args`` and ``from_cli_args`` from the tree (slow: see ``load``)."""
    path = python_root / FILE
    importer = PureImports(python_root)
    try:
        namespace = importer.load(MODULE, ["ServerArgs"])
        tree = parse(path)
    except PureCodeError as exc:
        raise ReleaseCliError(f"{path}: {exc.message}", path) from None
    server_args_cls = namespace["ServerArgs"]
    prog, merger = _prog_and_merger(tree)
    parser = argparse.ArgumentParser(prog=prog)
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stderr(quiet):
            server_args_cls.add_cli_args(parser)
    except Exception as exc:
        raise ReleaseCliError(f"ServerArgs.add_cli_args: {type(exc).__name__}: {exc}", path) from None
    fields = _fields(server_args_cls, parser, path)
    index = {id(a): i for i, a in enumerate(parser._actions)}
    groups = [{"title": g.title, "description": g.description,
               "actions": [index[id(a)] for a in g._group_actions if id(a) in index]}
              for g in parser._action_groups]  # fmt: skip
    cli = ReleaseCli(python_root=python_root, prog=prog, actions=[], groups=groups, fields=fields,
                     config_merger=merger, files=[], _importer=importer)  # fmt: skip
    try:
        cli.actions = [_encode_action(a, importer) for a in parser._actions]
    except _Unencodable as exc:
        raise ReleaseCliError(f"ServerArgs.add_cli_args: {exc}: not kept as data", path) from None
    cli.files = sorted((str(p.relative_to(python_root)), _sha(p)) for p in importer.files_read
                       if p.is_relative_to(python_root))  # fmt: skip
    return cli


def _encode_action(action: argparse.Action, importer: PureImports) -> dict[str, Any]:
    return {"class": _encode(type(action), importer),
            "state": {k: _encode(v, importer) for k, v in vars(action).items() if k not in _NOT_STATE}}  # fmt: skip


def _encode(value: Any, importer: PureImports) -> Any:
    """``value`` as marshal's plain data; a function or class as a reference to where it is defined."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, list | tuple):
        encoded = [_encode(v, importer) for v in value]
        return encoded if isinstance(value, list) else tuple(encoded)
    if isinstance(value, dict):
        return {k: _encode(v, importer) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return type(value)(_encode(v, importer) for v in value)
    if isinstance(value, type({}.keys())):  # choices=list(...).keys(): a list, to marshal
        return [_encode(v, importer) for v in value]
    origin = importer.origin(value)
    if origin is not None:
        if isinstance(value, type) and issubclass(value, argparse.Action):
            base = next(c for c in value.__mro__ if c.__module__ == "argparse")
            return {_REF: ("action", *origin, base.__module__, base.__qualname__)}
        if callable(value):
            return {_REF: ("release", *origin)}
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if module and qualname and "<" not in qualname and module in sys.modules:
        with contextlib.suppress(AttributeError, ImportError):
            if _python_object(module, qualname) is value:
                return {_REF: ("py", module, qualname)}
    raise _Unencodable(f"{value!r}")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- kept: in this process, and in the per-user cache -----------------------------------------------------------

_LOADED: dict[Path, tuple[tuple[tuple[str, int, int], ...], ReleaseCli]] = {}


def _stamps(cli: ReleaseCli) -> tuple[tuple[str, int, int], ...]:
    out = []
    for rel, _ in [(FILE, ""), *cli.files]:
        try:
            st = (cli.python_root / rel).stat()
        except OSError:
            return ()
        out.append((rel, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _cache_entry(source: bytes) -> Path:
    from ..workspace.release import cache_dir

    key = hashlib.sha256(source + f"\0{FORMAT}\0{sys.version}".encode()).hexdigest()[:40]
    return cache_dir() / CACHE_FOLDER / f"{key}.bin"


def _read_entry(entry: Path, python_root: Path) -> ReleaseCli | None:
    try:
        data = marshal.loads(entry.read_bytes())
        if data.get("format") != FORMAT:
            return None
        for rel, digest in data["files"]:
            if _sha(python_root / rel) != digest:
                return None
        cli = ReleaseCli.from_data(python_root, data)
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        return None
    with contextlib.suppress(OSError):
        entry.touch()  # recently used: the last to go
    return cli


def load(python_root: Path) -> ReleaseCli:
    """The release's command line of the tree at ``python_root`` (holding ``sglang/``): from this process's
    memory or the per-user cache while the files it was derived from are unchanged, else ``derive``d and kept.
    Raises ``ReleaseCliError`` (``FileNotFoundError`` when the tree has no ``server_args.py``)."""
    python_root = Path(python_root).resolve()
    path = python_root / FILE
    held = _LOADED.get(python_root)
    if held is not None and held[0] and held[0] == _stamps(held[1]):
        return held[1]
    source = path.read_bytes()  # FileNotFoundError: no such tree
    entry = _cache_entry(source)
    cli = _read_entry(entry, python_root)
    if cli is None:
        cli = derive(python_root)
        with contextlib.suppress(OSError):
            entry.parent.mkdir(parents=True, exist_ok=True)
            cache_files.write_atomic(entry, marshal.dumps(cli.data()))
            for old in cache_files.least_recent(entry.parent.glob("*.bin"))[:-CACHE_KEEP]:
                old.unlink(missing_ok=True)
    _LOADED[python_root] = (_stamps(cli), cli)
    return cli
