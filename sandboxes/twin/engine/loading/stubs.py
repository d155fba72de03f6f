"""What the twin answers for the parts of the engine it does not simulate: a value that is anything.

Model code touches much that only matters on a GPU (kernels, streams, graph runners, distributed groups). The
executor hands such names out as ``StubValue``: callable, indexable, iterable as empty, falsy, and answering every
attribute, call and operator with another stub value, so the code around them runs as written. Standard library
only.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any


class StubValue:
    """Whatever a stubbed call returns: every use of it gives another stub value."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return StubValue()

    def __setattr__(self, name: str, value: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> StubValue:
        return StubValue()

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: Any) -> bool:
        return False

    def __getitem__(self, item: Any) -> StubValue:
        return StubValue()

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __enter__(self) -> StubValue:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        return 0.0

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)  # a class deriving from a stub value derives from nothing in particular

    def _op(self, *other: Any) -> StubValue:
        return StubValue()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _op
    __floordiv__ = __rfloordiv__ = __mod__ = __neg__ = __or__ = __ror__ = __and__ = __rand__ = _op

    def _false(self, other: Any) -> bool:
        return False

    __lt__ = __le__ = __gt__ = __ge__ = _false

    def __eq__(self, other: Any) -> bool:
        return self is other

    __hash__ = object.__hash__


def stub_package(name: str, make: Callable[[str], Any]) -> types.ModuleType:
    """A module standing for package ``name`` (``import name.sub`` works) whose every public attribute is
    ``make("name.attr")``."""
    module = types.ModuleType(name)
    module.__path__ = []

    def getattr_(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return make(f"{name}.{attr}")

    module.__getattr__ = getattr_  # type: ignore[attr-defined]
    return module
