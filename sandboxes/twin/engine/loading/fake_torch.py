"""A shape-only stand-in for ``torch``, enough to run a model's constructor and its ``load_weights``.

The twin runs the workspace's own model code (``executor``) to build the engine's modules and load the
checkpoint into them, but has no tensors: a ``Tensor`` here has a shape and a dtype and nothing else. What model
code does with tensors while it is built and loaded (``narrow``, ``view``, ``chunk``, ``cat``, ``copy_``, ``.data``,
``torch.empty(...)``) keeps or changes shapes the way torch does; ``copy_`` between different shapes raises
torch's own message. ``nn.Module`` registers parameters and submodules as torch does, so
``named_parameters()`` names them as the real engine names them.

Anything else torch offers answers with a stub (``StubValue``): model code may touch it, nothing is computed.
Standard library only.
"""

from __future__ import annotations

import contextlib
import math
import types
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from .stubs import StubValue


class dtype:  # noqa: N801 - torch's name
    def __init__(self, name: str, itemsize: int, floating: bool = True) -> None:
        self.name, self.itemsize, self.is_floating_point = name, itemsize, floating

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def to_real(self) -> dtype:
        return self


DTYPES: dict[str, dtype] = {
    n: dtype(n, size, floating)
    for n, size, floating in (
        ("bfloat16", 2, True), ("float16", 2, True), ("float32", 4, True), ("float64", 8, True),
        ("uint8", 1, False), ("int8", 1, False), ("int16", 2, False), ("int32", 4, False), ("int64", 8, False),
        ("bool", 1, False), ("float8_e4m3fn", 1, True), ("float8_e4m3fnuz", 1, True), ("float8_e5m2", 1, True),
        ("float8_e5m2fnuz", 1, True), ("float8_e8m0fnu", 1, True), ("float4_e2m1fn_x2", 1, True),
        ("uint32", 4, False), ("uint64", 8, False),
    )
}  # fmt: skip
ALIASES = {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32",
           "short": "int16", "bfloat": "bfloat16"}  # fmt: skip
# safetensors' dtype names (the checkpoint index) -> torch dtypes
SAFETENSORS = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "U8": "uint8", "I8": "int8",
               "I16": "int16", "I32": "int32", "I64": "int64", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn",
               "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}  # fmt: skip


class Size(tuple):
    def __repr__(self) -> str:
        return f"torch.Size([{', '.join(str(d) for d in self)}])"

    def numel(self) -> int:
        return math.prod(self)


def _shape_args(args: tuple[Any, ...]) -> list[int]:
    if len(args) == 1 and isinstance(args[0], tuple | list):
        args = tuple(args[0])
    return [int(a) for a in args]


class device:  # noqa: N801 - torch's name
    def __init__(self, type: str = "cuda", index: int | None = None) -> None:  # noqa: A002 - torch's argument
        self.type, self.index = type, index

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")


GPU = device("cuda", 0)
HOST = device("cpu")


class Tensor:
    """A tensor's shape and dtype (and where it lives), nothing else. Checkpoint tensors are host tensors; what a
    model builds lives on the GPU."""

    def __init__(self, shape: Any = (), dtype_: dtype | None = None, device_: device = GPU) -> None:
        self._shape = Size(int(s) for s in shape)
        self.dtype = dtype_ or DTYPES["float32"]
        self.device = device_
        self.requires_grad = False

    # --- shape ----------------------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return self._shape

    def size(self, dim: int | None = None) -> Any:
        return self._shape if dim is None else self._shape[dim]

    def dim(self) -> int:
        return len(self._shape)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def numel(self) -> int:
        return self._shape.numel()

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    @property
    def data(self) -> Tensor:
        return self

    @data.setter
    def data(self, value: Tensor) -> None:
        self._shape, self.dtype = Size(value.shape), value.dtype

    def _like(self, shape: Any, dtype_: dtype | None = None) -> Tensor:
        return Tensor(shape, dtype_ or self.dtype, self.device)

    # --- views ----------------------------------------------------------------------------------------------
    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        s = list(self._shape)
        d = dim % len(s)
        if start < 0 or start + length > s[d]:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({s[d]}).")
        s[d] = int(length)
        return self._like(s)

    def unsqueeze(self, dim: int) -> Tensor:
        s = list(self._shape)
        s.insert(dim if dim >= 0 else len(s) + 1 + dim, 1)
        return self._like(s)

    def squeeze(self, dim: int | None = None) -> Tensor:
        if dim is None:
            return self._like([d for d in self._shape if d != 1])
        s = list(self._shape)
        if s and s[dim] == 1:
            s.pop(dim)
        return self._like(s)

    def view(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], dtype):
            new = shape[0]
            s = list(self._shape)
            if s:
                s[-1] = s[-1] * self.dtype.itemsize // max(new.itemsize, 1)
            return Tensor(s, new)
        dims = _shape_args(shape)
        if -1 in dims:
            i = dims.index(-1)
            rest = math.prod(d for d in dims if d != -1)
            dims[i] = self.numel() // max(rest, 1)
        if math.prod(dims) != self.numel():
            raise RuntimeError(f"shape '[{', '.join(map(str, dims))}]' is invalid for input of size {self.numel()}")
        return self._like(dims)

    reshape = view

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        s = list(self._shape)
        end = end_dim % len(s) if s else 0
        merged = math.prod(s[start_dim : end + 1])
        return self._like(s[:start_dim] + [merged] + s[end + 1 :])

    def unflatten(self, dim: int, sizes: Any) -> Tensor:
        s = list(self._shape)
        d = dim % len(s)
        dims = [int(x) for x in sizes]
        if -1 in dims:
            i = dims.index(-1)
            rest = math.prod(x for x in dims if x != -1)
            dims[i] = s[d] // max(rest, 1)
        return self._like(s[:d] + dims + s[d + 1 :])

    def t(self) -> Tensor:
        return self._like(self._shape[::-1])

    @property
    def T(self) -> Tensor:  # noqa: N802
        return self.t()

    def transpose(self, a: int, b: int) -> Tensor:
        s = list(self._shape)
        s[a], s[b] = s[b], s[a]
        return self._like(s)

    def permute(self, *dims: Any) -> Tensor:
        order = _shape_args(dims)
        return self._like([self._shape[i] for i in order])

    def chunk(self, n: int, dim: int = 0) -> tuple[Tensor, ...]:
        s = list(self._shape)
        size = -(-s[dim] // n)
        out = []
        left = s[dim]
        while left > 0:
            part = list(s)
            part[dim] = min(size, left)
            out.append(self._like(part))
            left -= size
        return tuple(out)

    def split(self, sizes: Any, dim: int = 0) -> tuple[Tensor, ...]:
        s = list(self._shape)
        if isinstance(sizes, int):
            return self.chunk(-(-s[dim] // sizes), dim)
        out = []
        for n in sizes:
            part = list(s)
            part[dim] = int(n)
            out.append(self._like(part))
        return tuple(out)

    def __getitem__(self, index: Any) -> Tensor:
        idx = index if isinstance(index, tuple) else (index,)
        s = list(self._shape)
        out: list[int] = []
        i = 0
        for item in idx:
            if item is Ellipsis:
                keep = len(s) - (len(idx) - 1)
                out.extend(s[i : i + keep])
                i += keep
                continue
            if item is None:
                out.append(1)
                continue
            if i >= len(s):
                break
            if isinstance(item, slice):
                out.append(len(range(*item.indices(s[i]))))
            elif isinstance(item, Tensor):
                out.extend(item.shape)
            # an integer drops the dimension
            i += 1
        out.extend(s[i:])
        return self._like(out)

    def __setitem__(self, index: Any, value: Any) -> None:
        target = self[index]
        if isinstance(value, Tensor) and value.numel() != 1 and tuple(value.shape) != tuple(target.shape):
            raise RuntimeError(f"The expanded size of the tensor ({target.shape[-1] if target.shape else 1}) must match "
                               f"the existing size ({value.shape[-1] if value.shape else 1}) at non-singleton dimension "
                               f"{max(len(target.shape) - 1, 0)}.  Target sizes: {list(target.shape)}.  Tensor sizes: "
                               f"{list(value.shape)}")  # fmt: skip
        if isinstance(value, Tensor):
            target.copy_(value)  # ``param.data[a:b] = w`` copies into the view, as copy_ does (and counts as loaded)

    def __len__(self) -> int:
        return self._shape[0] if self._shape else 0

    def __iter__(self) -> Iterator[Tensor]:
        return (self[i] for i in range(len(self)))

    # --- copies and conversions -------------------------------------------------------------------------------
    def copy_(self, other: Any, non_blocking: bool = False) -> Tensor:
        if isinstance(other, Tensor) and tuple(other.shape) != tuple(self._shape) and other.numel() != 1:
            a, b = list(self._shape), list(other.shape)
            width = max(len(a), len(b))
            a, b = [1] * (width - len(a)) + a, [1] * (width - len(b)) + b
            for dim in range(width - 1, -1, -1):
                if a[dim] != b[dim] and b[dim] != 1:
                    raise RuntimeError(f"The size of tensor a ({a[dim]}) must match the size of tensor b ({b[dim]}) at "
                                       f"non-singleton dimension {dim}")  # fmt: skip
        return self

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        for x in list(args) + list(kwargs.values()):
            if isinstance(x, dtype):
                return Tensor(self._shape, x)
        return self

    def type(self, dtype_: Any = None) -> Any:
        return Tensor(self._shape, dtype_) if isinstance(dtype_, dtype) else str(self.dtype)

    def float(self) -> Tensor:
        return Tensor(self._shape, DTYPES["float32"])

    def bfloat16(self) -> Tensor:
        return Tensor(self._shape, DTYPES["bfloat16"])

    def half(self) -> Tensor:
        return Tensor(self._shape, DTYPES["float16"])

    def item(self) -> float:
        return 1.0

    def tolist(self) -> list[Any]:
        return [0] * (self._shape[0] if self._shape else 0)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def __repr__(self) -> str:
        return f"tensor(shape={list(self._shape)}, dtype={self.dtype})"

    def __bool__(self) -> bool:
        return True

    def _same(self, *args: Any, **kwargs: Any) -> Tensor:
        return self

    contiguous = clone = detach = cpu = cuda = pin_memory = fill_ = zero_ = normal_ = uniform_ = _same
    mul_ = div_ = add_ = sub_ = clamp_ = requires_grad_ = share_memory_ = _same

    def _elementwise(self, *args: Any, **kwargs: Any) -> Tensor:
        return Tensor(self._shape, self.dtype)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _elementwise
    __neg__ = __abs__ = exp = log = sqrt = abs = neg = sigmoid = _elementwise
    # the integer and power operators loaders use on packed weights (Quark's mxfp4_to_f32: ``x & 0x0F``, ``>>``;
    # rotary tables: ``theta ** (arange / dim)``)
    __pow__ = __rpow__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _elementwise
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __invert__ = _elementwise
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _elementwise

    def __getattr__(self, name: str) -> Any:
        # torch's other tensor methods compute values, which the twin never needs: elementwise ones keep the shape,
        # reductions drop a dimension (or all of them), and the few that return pairs return pairs. Anything else is
        # missing, as on a real tensor (``hasattr(param, "weight_loader")`` must be False until it is set).
        if name in ELEMENTWISE:
            return lambda *a, **k: Tensor(self._shape, self.dtype, self.device)
        if name in REDUCTIONS:
            return lambda *a, **k: self._reduced(a, k)
        if name in PAIRS:
            return lambda *a, **k: (self._reduced(a, k), self._reduced(a, k))
        if name in TENSOR_METHODS:
            return StubValue()
        raise AttributeError(f"'Tensor' object has no attribute '{name}'")

    def _reduced(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
        dim = kwargs.get("dim", args[0] if args and isinstance(args[0], int) else None)
        if dim is None or not self._shape:
            return Tensor((), self.dtype, self.device)
        s = list(self._shape)
        if kwargs.get("keepdim"):
            s[dim] = 1
        else:
            s.pop(dim)
        return Tensor(s, self.dtype, self.device)


# torch.Tensor methods the twin answers with shapes (see Tensor.__getattr__), and others it answers with a stub
ELEMENTWISE = frozenset({
    "abs", "abs_", "ceil", "clamp", "clamp_", "clamp_min", "clamp_max", "cos", "exp", "exp_", "floor", "neg",
    "reciprocal", "round", "rsqrt", "sign", "sin", "sqrt", "square", "masked_fill", "masked_fill_", "mul",
    "div", "add", "sub", "pow", "type_as", "nan_to_num", "index_fill_", "scatter_", "scatter_add_", "copy",
    "bool", "int", "long", "short", "byte", "char", "double", "int8", "uint8", "sigmoid", "relu", "silu",
    "tanh", "log", "softmax", "cumsum", "expand_as", "repeat_interleave",
})
REDUCTIONS = frozenset({
    "sum", "mean", "amax", "amin", "prod", "std", "var", "norm", "all", "any", "argmax", "argmin",
})
PAIRS = frozenset({
    "aminmax", "sort", "topk", "max", "min", "mode", "median", "kthvalue",
})
TENSOR_METHODS = frozenset({
    "addmm", "bmm", "data_ptr", "dequantize", "eq", "expand", "gather", "ge", "get_device", "gt", "index_add_",
    "index_copy_", "index_put_", "index_select", "is_contiguous", "is_cuda", "is_meta", "is_pinned", "isnan",
    "le", "lt", "masked_scatter_", "matmul", "mm", "ne", "nelement", "new_empty", "new_full", "new_ones",
    "new_zeros", "ndimension", "nonzero", "record_stream", "repeat", "select", "storage", "stride", "tril",
    "triu", "unbind", "untyped_storage", "where", "view_as", "to_dense",
})


class Parameter(Tensor):
    """``torch.nn.Parameter``: a tensor a module registers; extra attributes (``weight_loader``...) stick to it."""

    def __new__(cls, data: Any = None, requires_grad: bool = True, **kwargs: Any) -> Parameter:
        # torch makes the parameter in __new__ (Tensor._make_subclass): subclasses whose __init__ takes other
        # arguments (SGLang's BasevLLMParameter) never call Parameter.__init__
        obj = super().__new__(cls)
        data = data if isinstance(data, Tensor) else Tensor()
        Tensor.__init__(obj, data.shape, data.dtype)
        return obj

    def __init__(self, data: Any = None, requires_grad: bool = True, **kwargs: Any) -> None:
        pass


class UninitializedParameter(Parameter):
    """torch's lazily shaped parameter: nothing the twin builds is one."""


_DEFAULT_DTYPE = ["float32"]  # torch.set_default_dtype: what a tensor made without a dtype gets


def default_dtype() -> dtype:
    return DTYPES[_DEFAULT_DTYPE[0]]


def set_default_dtype(d: dtype) -> None:
    _DEFAULT_DTYPE[0] = next((name for name, v in DTYPES.items() if v is d), "float32")


def empty(*shape: Any, dtype: dtype | None = None, **kwargs: Any) -> Tensor:
    return Tensor(_shape_args(shape), dtype or default_dtype())


def empty_like(t: Tensor, dtype: dtype | None = None, **kwargs: Any) -> Tensor:
    return Tensor(t.shape, dtype or t.dtype)


def full(shape: Any, fill_value: Any = 0, dtype: dtype | None = None, **kwargs: Any) -> Tensor:
    return Tensor(_shape_args((shape,)), dtype or default_dtype())


def tensor(data: Any = (), dtype: dtype | None = None, **kwargs: Any) -> Tensor:
    shape = [len(data)] if isinstance(data, list | tuple) else []
    return Tensor(shape, dtype or default_dtype())


def arange(*args: Any, dtype: dtype | None = None, **kwargs: Any) -> Tensor:
    nums = [a for a in args if isinstance(a, int | float)]
    start, end = (0, nums[0]) if len(nums) == 1 else (nums[0], nums[1]) if len(nums) > 1 else (0, 0)
    return Tensor([max(int(end - start), 0)], dtype or DTYPES["int64"])


def cat(tensors: Any, dim: int = 0, **kwargs: Any) -> Tensor:
    ts = [t for t in tensors if isinstance(t, Tensor)]
    if not ts:
        return Tensor()
    s = list(ts[0].shape)
    s[dim] = sum(t.shape[dim] for t in ts)
    return Tensor(s, ts[0].dtype)


def stack(tensors: Any, dim: int = 0, **kwargs: Any) -> Tensor:
    ts = [t for t in tensors if isinstance(t, Tensor)]
    if not ts:
        return Tensor()
    s = list(ts[0].shape)
    s.insert(dim, len(ts))
    return Tensor(s, ts[0].dtype)


class _Finfo:
    def __init__(self, dt: Any) -> None:
        name = getattr(dt, "name", "")
        self.max = 448.0 if "e4m3fn" in name else 240.0 if "e4m3fnuz" in name else 57344.0 if "e5m2" in name else 3.4e38
        self.min, self.eps, self.bits = -self.max, 1e-7, 8 * getattr(dt, "itemsize", 4)


class no_grad:  # noqa: N801 - torch's name: a decorator and a context manager
    def __init__(self, *args: Any) -> None:
        pass

    def __call__(self, fn: Any) -> Any:
        return fn

    def __enter__(self) -> no_grad:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


# --- nn --------------------------------------------------------------------------------------------------------


class Module:
    """``torch.nn.Module``'s registration rules: parameters and submodules assigned as attributes are registered
    under their attribute names, in assignment order; ``named_parameters`` walks them like torch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "training", False)

    def _ensure(self) -> None:
        if "_parameters" not in self.__dict__:
            Module.__init__(self)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ensure()
        if isinstance(value, Parameter):
            self.__dict__.pop(name, None)
            self._modules.pop(name, None)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self.__dict__.pop(name, None)
            self._parameters.pop(name, None)
            self._modules[name] = value
        elif name in self.__dict__.get("_parameters", {}) and value is None:
            self._parameters[name] = None
        elif name in self.__dict__.get("_modules", {}) and value is None:
            self._modules[name] = None
        else:
            self._parameters.pop(name, None) if name in self._parameters else None
            self._modules.pop(name, None) if name in self._modules else None
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for store in ("_parameters", "_modules", "_buffers"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for store in ("_parameters", "_modules", "_buffers"):
            if name in self.__dict__.get(store, {}):
                del self.__dict__[store][name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Any) -> None:
        self._ensure()
        self.__dict__.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor_: Any, persistent: bool = True) -> None:
        self._ensure()
        self._buffers[name] = tensor_

    def register_module(self, name: str, module: Any) -> None:
        self.add_module(name, module)

    def add_module(self, name: str, module: Any) -> None:
        self._ensure()
        self._modules[name] = module

    def get_submodule(self, target: str) -> Module:
        mod: Any = self
        for part in filter(None, target.split(".")):
            mod = getattr(mod, part)
        return mod

    def named_modules(self, memo: Any = None, prefix: str = "", remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        memo = set() if memo is None else memo
        if id(self) in memo and remove_duplicate:
            return
        memo.add(id(self))
        yield prefix, self
        self._ensure()
        for name, module in self._modules.items():
            if isinstance(module, Module):
                yield from module.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        if _frozen is None:
            return self._walk_parameters(prefix, recurse, remove_duplicate)
        key = (id(self), prefix, recurse, remove_duplicate)
        if key not in _frozen:
            _frozen[key] = list(self._walk_parameters(prefix, recurse, remove_duplicate))
        return iter(_frozen[key])

    def _walk_parameters(self, prefix: str, recurse: bool, remove_duplicate: bool) -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        modules = self.named_modules(prefix=prefix) if recurse else iter([(prefix, self)])
        for module_prefix, module in modules:
            for name, p in module.__dict__.get("_parameters", {}).items():
                if p is None or (remove_duplicate and id(p) in seen):
                    continue
                seen.add(id(p))
                yield (f"{module_prefix}.{name}" if module_prefix else name), p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Any]]:
        for module_prefix, module in self.named_modules(prefix=prefix):
            for name, b in module.__dict__.get("_buffers", {}).items():
                if b is not None:
                    yield (f"{module_prefix}.{name}" if module_prefix else name), b

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        return (p for _, p in self.named_parameters())

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def children(self) -> Iterator[Module]:
        self._ensure()
        return (m for m in self._modules.values() if m is not None)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        self._ensure()
        return ((n, m) for n, m in self._modules.items() if m is not None)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(self.named_parameters())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return StubValue()

    def _self(self, *args: Any, **kwargs: Any) -> Module:
        return self

    to = eval = train = cuda = cpu = float = half = bfloat16 = requires_grad_ = _self

    def apply(self, fn: Any) -> Module:
        for m in list(self.modules()):
            fn(m)
        return self

    def extra_repr(self) -> str:
        return ""


_frozen: dict[tuple[int, str, bool, bool], list[tuple[str, Parameter]]] | None = None


@contextlib.contextmanager
def tree_frozen() -> Iterator[None]:
    """Within it, a module's ``named_parameters`` walks its tree once: for a loader probed thousands of times with
    names while nothing adds or removes a parameter (a loader's ``dict(self.named_parameters())`` on each call)."""
    global _frozen
    before, _frozen = _frozen, {}
    try:
        yield
    finally:
        _frozen = before


class ModuleList(Module):
    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        for module in modules or ():
            self.append(module)

    def append(self, module: Any) -> ModuleList:
        self._modules[str(len(self._modules))] = module
        return self

    def extend(self, modules: Any) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, index: Any) -> Any:
        values = list(self._modules.values())
        if isinstance(index, slice):
            return ModuleList(values[index])
        return values[index]

    def __setitem__(self, index: int, module: Any) -> None:
        self._modules[str(index % max(len(self._modules), 1))] = module


class ModuleDict(Module):
    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        for k, v in dict(modules or {}).items():
            self._modules[k] = v

    def __getitem__(self, key: str) -> Any:
        return self._modules[key]

    def __setitem__(self, key: str, module: Any) -> None:
        self._modules[key] = module

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def items(self) -> Any:
        return self._modules.items()

    def keys(self) -> Any:
        return self._modules.keys()

    def values(self) -> Any:
        return self._modules.values()


class Sequential(ModuleList):
    def __init__(self, *modules: Any) -> None:
        super().__init__(modules)


class ParameterList(Module):
    def __init__(self, values: Any = None) -> None:
        super().__init__()
        for i, p in enumerate(values or ()):
            self._parameters[str(i)] = p

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._parameters.values()))

    def __getitem__(self, i: int) -> Any:
        return list(self._parameters.values())[i]

    def __len__(self) -> int:
        return len(self._parameters)


class Identity(Module):
    pass


class Linear(Module):
    """``nn.Linear``: ``weight (out, in)`` and an optional ``bias (out,)``, loaded by the default loader."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: dtype | None = None) -> None:  # fmt: skip
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype or DTYPES["bfloat16"]))
        self.bias = Parameter(empty(out_features, dtype=dtype or DTYPES["bfloat16"])) if bias else None


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, *args: Any, dtype: dtype | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype or DTYPES["bfloat16"]))


class LayerNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device: Any = None, dtype: dtype | None = None) -> None:  # fmt: skip
        super().__init__()
        shape = _shape_args((normalized_shape,))
        if elementwise_affine:
            self.weight = Parameter(empty(*shape, dtype=dtype or default_dtype()))
            self.bias = Parameter(empty(*shape, dtype=dtype or default_dtype())) if bias else None


class Conv1d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *args: Any, groups: int = 1,
                 bias: bool = True, dtype: dtype | None = None, **kwargs: Any) -> None:  # fmt: skip
        super().__init__()
        self.weight = Parameter(empty(out_channels, in_channels // groups, kernel_size, dtype=dtype or DTYPES["bfloat16"]))
        self.bias = Parameter(empty(out_channels, dtype=dtype or DTYPES["bfloat16"])) if bias else None


class _ConvNd(Module):
    """A convolution of ``_dims`` spatial dimensions (a vision tower's patch embedding): its weight and bias."""

    _dims = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, *args: Any, groups: int = 1,
                 bias: bool = True, dtype: dtype | None = None, **kwargs: Any) -> None:  # fmt: skip
        super().__init__()
        kernel = list(kernel_size) if isinstance(kernel_size, list | tuple) else [int(kernel_size)] * self._dims
        self.weight = Parameter(empty(out_channels, in_channels // groups, *kernel, dtype=dtype or default_dtype()))
        self.bias = Parameter(empty(out_channels, dtype=dtype or default_dtype())) if bias else None


class Conv2d(_ConvNd):
    _dims = 2


class Conv3d(_ConvNd):
    _dims = 3


class _Activation(Module):
    pass


# --- the module objects model code imports -----------------------------------------------------------------------


# device back-ends of other platforms: a ROCm build of torch has none (``hasattr(torch, "npu")`` is False)
OTHER_DEVICES = ("npu", "hpu", "xpu", "musa", "mlu")


def _fallback(module: types.ModuleType, stub_class: Any) -> Any:
    def getattr_(name: str) -> Any:
        if name.startswith("__") or (module.__name__ == "torch" and name in OTHER_DEVICES):
            raise AttributeError(name)
        return stub_class(f"{module.__name__}.{name}")

    return getattr_


def build_modules(stub_class: Any, cuda: types.ModuleType | None = None) -> dict[str, types.ModuleType]:
    """``torch``, ``torch.nn``, ... as modules; ``stub_class(name)`` makes what they do not define; ``cuda`` is
    the platform's ``torch.cuda``."""
    torch = types.ModuleType("torch")
    for name, dt in DTYPES.items():
        setattr(torch, name, dt)
    for alias, name in ALIASES.items():
        setattr(torch, alias, DTYPES[name])
    torch.__version__ = "2.9.0+rocm7.0"
    torch.Tensor, torch.Size, torch.dtype = Tensor, Size, dtype
    torch.empty = torch.zeros = torch.ones = torch.randn = torch.rand = empty
    torch.empty_like = torch.zeros_like = torch.ones_like = empty_like
    torch.full, torch.tensor, torch.arange, torch.cat, torch.concat, torch.stack = full, tensor, arange, cat, cat, stack
    torch.finfo = torch.iinfo = _Finfo

    def first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor | None:
        return next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)

    def elementwise(name: str) -> Any:
        def fn(*args: Any, **kwargs: Any) -> Any:
            x = first_tensor(args, kwargs)
            return getattr(x, name)(*args[1:], **kwargs) if x is not None and name in ELEMENTWISE else (
                Tensor(x.shape, x.dtype, x.device) if x is not None else StubValue())

        return fn

    for name in ELEMENTWISE | {"maximum", "minimum", "where", "addcmul", "lerp"}:
        if not hasattr(torch, name):  # torch.int8, torch.bool, ... are dtypes, not functions
            setattr(torch, name, elementwise(name))
    for name in REDUCTIONS | PAIRS:
        setattr(torch, name, lambda *a, _n=name, **k: getattr(a[0], _n)(*a[1:], **k) if a and isinstance(a[0], Tensor) else StubValue())
    torch.no_grad = torch.inference_mode = torch.enable_grad = no_grad
    torch.is_tensor = lambda x: isinstance(x, Tensor)
    torch.device = device
    torch.get_default_dtype = default_dtype
    torch.set_default_dtype = set_default_dtype
    torch.version = types.SimpleNamespace(hip="7.0.0", cuda=None, git_version="")
    nn = types.ModuleType("torch.nn")
    for cls in (Module, ModuleList, ModuleDict, Sequential, ParameterList, Identity, Linear, Embedding, LayerNorm,
                Conv1d, Conv2d, Conv3d):  # fmt: skip
        setattr(nn, cls.__name__, cls)
    nn.Parameter = Parameter
    for act in ("SiLU", "GELU", "ReLU", "Tanh", "Sigmoid", "Dropout", "Softmax"):
        setattr(nn, act, type(act, (_Activation,), {}))
    parameter = types.ModuleType("torch.nn.parameter")
    parameter.Parameter = Parameter
    parameter.UninitializedParameter = UninitializedParameter
    nn.parameter = parameter
    functional = types.ModuleType("torch.nn.functional")
    nn.functional = functional
    modules_ = types.ModuleType("torch.nn.modules")
    nn.modules = modules_
    torch.nn = nn
    if cuda is not None:
        torch.cuda = cuda
        torch.get_device_module = lambda *a, **k: cuda
    out = {"torch": torch, "torch.nn": nn, "torch.nn.parameter": parameter, "torch.nn.functional": functional,
           "torch.nn.modules": modules_}  # fmt: skip
    if cuda is not None:
        out["torch.cuda"] = cuda
    for mod in out.values():
        if mod is not cuda:
            mod.__getattr__ = _fallback(mod, stub_class)  # type: ignore[attr-defined]
    return out
